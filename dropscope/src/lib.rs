//! dropscope: which packets is the kernel dropping, why, where, from which stack, since when.
//!
//! Data flows one way: the `probe` counts drops in BPF maps; the `collector` polls them
//! adaptively and symbolizes them (`symbolize`) into [`model::Snapshot`]s; a [`source::Feed`]
//! carries snapshots, live or from a [`record`]ing, to the consumers: the [`tui`], the
//! [`cmd`]s (report, flamegraph, the headless recorder) and the metrics exporter (`serve`).
//! [`model::group`] groups and filters snapshots (`probe::filter` encodes the same for the kernel); [`names`] names namespaces and interfaces;
//! [`format`] is the number and time formatting the TUI and the commands share. Beside the
//! probe, [`kcounters`] reads the kernel's own counters (and `probe::verdicts` the programs'
//! verdicts); the pure [`ledger`] sets them beside the probe's drops, and [`output`] writes
//! the report's table, JSON and ledger text.
//!
//! The `live` feature (on by default) brings what counts live: the eBPF object, the probe's
//! loader, the collector, the symbolizer and `serve`. Without it, the crate builds with stable
//! Rust alone and reads recordings and BTF files.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]

pub mod cli;
#[cfg(feature = "live")]
pub(crate) mod clock;
pub mod cmd;
#[cfg(feature = "live")]
pub mod collector;
pub mod culprit;
pub mod explain;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod flamegraph;
pub mod format;
#[cfg(test)]
mod heap;
pub mod history;
pub mod kcounters;
pub mod ledger;
pub mod model;
pub mod names;
pub mod outfile;
pub mod output;
pub mod pcap;
pub mod probe;
pub mod record;
pub mod sanitize;
#[cfg(feature = "live")]
pub mod serve;
pub mod signals;
pub mod source;
pub mod suggest;
#[cfg(feature = "live")]
pub mod symbolize;
pub mod tui;
pub mod vocab;
