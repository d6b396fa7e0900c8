//! Always on: `serve --history DIR` keeps the snapshot stream in a directory of segments, each
//! a recording that reads on its own, within an age and a size (see `docs/history.md`).
//!
//! - [`dir`]: the directory (0700, never through a symlink, one writer by lock) and segment names.
//! - [`writer`]: the writer thread, off the poll path; rotation; pause and resume on disk errors.
//! - [`retention`]: which segments to remove, oldest first.
use std::{path::PathBuf, time::Duration};

pub mod dir;
pub mod retention;
pub mod writer;

pub use retention::Retention;
pub use writer::{HistoryWriter, Running, Status, StatusView};

/// How long history is kept by default: seven days.
pub const DEFAULT_RETAIN: Duration = Duration::from_secs(7 * 86_400);
/// How much disk history takes at most by default: 1 GiB.
pub const DEFAULT_RETAIN_SIZE: u64 = 1 << 30;
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
}
