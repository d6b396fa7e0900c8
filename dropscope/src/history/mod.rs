//! Always on: `serve --history DIR` keeps the snapshot stream in a directory of segments, each
//! a recording that reads on its own, within an age and a size (see `docs/history.md`).
//!
//! - [`dir`]: the directory (0700, never through a symlink, one writer by lock) and segment names.
//! - [`writer`]: the writer thread, off the poll path; rotation; pause and resume on disk errors.
//! - [`retention`]: which segments to remove, oldest first.
//! - [`compact`]: coarser frames (one a minute) for segments older than the full-resolution age.
//! - [`index`]: the index beside each closed segment, checked against it on every read.
//! - [`catalog`]: the segments read back, on the wall clock, with the gaps between them.
//! - [`range`]: the drops of a wall-clock window, across segments and sessions, gaps kept.
//! - [`compare`]: the last D against the same D an interval earlier, for `diff --history`.
//! - [`input`]: a history as `--input` of `report` and `flamegraph`.
//! - [`replay`]: a window of a history as one recording, for `replay DIR`.
//! - [`timeline`]: drops per second over the whole history, gaps kept, for the TUI strip.
//! - [`when`]: times on the command line (session, local, RFC 3339) and on screen.
use std::{path::PathBuf, time::Duration};

pub mod catalog;
pub mod compact;
pub mod compare;
pub mod dir;
pub mod index;
pub mod input;
pub mod range;
pub mod replay;
pub mod retention;
pub mod synthetic;
pub mod timeline;
pub mod when;
pub mod writer;

#[cfg(test)]
mod tests;

pub use retention::Retention;
pub use writer::{HistoryWriter, Running, Status, StatusView};

/// How long history is kept by default: seven days.
pub const DEFAULT_RETAIN: Duration = Duration::from_secs(7 * 86_400);
/// How much disk history takes at most by default: 1 GiB.
pub const DEFAULT_RETAIN_SIZE: u64 = 1 << 30;
/// How long snapshots are kept at full resolution by default: a day; older segments keep one
/// a minute.
pub const DEFAULT_FULL_RESOLUTION: Duration = Duration::from_secs(86_400);
/// How long one segment covers by default: an hour.
pub const DEFAULT_SEGMENT: Duration = Duration::from_secs(3600);

/// Where and how much history to keep.
#[derive(Clone, Debug)]
pub struct HistoryOptions {
    /// The directory of segments.
    pub dir: PathBuf,
    /// Age and size kept.
    pub retention: Retention,
    /// How long one segment covers before the next is opened.
    pub segment: Duration,
    /// Segments older than this are made coarse (one snapshot a minute).
    pub full_resolution: Duration,
}
