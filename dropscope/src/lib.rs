//! dropscope: which packets is the kernel dropping, why, where, from which stack, since when.
//!
//! Data flows one way: the [`probe`] counts drops in BPF maps; the [`collector`] polls them
//! adaptively and symbolizes them ([`symbolize`]) into [`model::Snapshot`]s; a [`source::Feed`]
//! carries snapshots, live or from a [`record`]ing, to the consumers: the [`tui`], [`report`],
//! [`flamegraph`] and the recorder.
#![deny(missing_docs)]

pub mod app;
pub mod cli;
pub mod collector;
pub mod flamegraph;
pub mod model;
pub mod outfile;
pub mod probe;
pub mod record;
pub mod report;
pub mod sanitize;
pub mod source;
pub mod symbolize;
pub mod tui;
