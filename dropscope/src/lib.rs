//! dropscope: which packets is the kernel dropping, why, where, from which stack, since when.
//!
//! Data flows one way: the [`probe`] counts drops in BPF maps; the [`collector`] polls them
//! adaptively and symbolizes them ([`symbolize`]) into [`model::Snapshot`]s; a [`source::Feed`]
//! carries snapshots, live or from a [`record`]ing, to the consumers: the [`tui`], [`report`],
//! [`flamegraph`], the recorder and the metrics exporter ([`serve`]). [`select`] is the grouping
//! and filters; [`names`] names namespaces and interfaces.
#![deny(missing_docs)]

pub mod app;
pub mod cli;
pub mod collector;
pub mod explain;
pub mod flamegraph;
pub mod kcounters;
pub mod model;
pub mod names;
pub mod outfile;
pub mod pcap;
pub mod probe;
pub mod record;
pub mod report;
pub mod sanitize;
pub mod select;
pub mod serve;
pub mod source;
pub mod symbolize;
pub mod tui;
