//! Recorded sessions: the snapshot stream written to a compact, crash-safe file, and replayed
//! from it into the same pipeline (see `docs/recording-format.md` for the format).
//!
//! - [`Recorder`] writes one frame per snapshot: the names a snapshot introduces once, then a
//!   full keyframe every 30 s (or 256 frames) and otherwise only the counts that changed.
//! - [`Recording`] opens a file, checks every frame's checksum, keeps the valid prefix of a
//!   damaged file (with a warning naming the byte offset) and seeks from the nearest keyframe.
//! - [`replay_feed`] plays a recording as a [`Feed`](crate::source::Feed) with timeline controls;
//!   [`record_feed`] records a feed to a file: the headless `dropscope record`.
use std::time::Duration;

pub mod budget;
pub mod crafted;
mod decode;
mod encoder;
mod format;
mod headless;
mod health;
mod index;
mod kernel;
mod kernel_delta;
mod reader;
mod replay;
mod socket;
mod stream;
pub mod synthetic;
mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_budget;
#[cfg(test)]
mod tests_damage;
#[cfg(test)]
mod tests_kernel;
#[cfg(test)]
mod tests_replay;
#[cfg(test)]
mod tests_socket;
#[cfg(test)]
mod tests_stream;
#[cfg(test)]
mod tests_v2;

pub use encoder::{KEYFRAME_EVERY, KEYFRAME_MAX_FRAMES};
pub use format::{MAGIC, VERSION};
pub use headless::{RecordSummary, record_feed};
pub use index::FrameInfo;
pub use reader::Recording;
pub use replay::replay_feed;
pub use stream::{MAX_STREAM_BYTES, follow_input, is_stdio, open_input};
pub use writer::{Recorder, encode};

/// What can go wrong writing or reading a recording.
#[derive(thiserror::Error, Debug)]
pub enum RecordError {
    /// The file does not start with the recording magic.
    #[error("not a dropscope recording (bad magic)")]
    NotARecording,
    /// The file was written by a newer dropscope.
    #[error(
        "recording format version {found} is newer than this dropscope supports ({supported}): \
         upgrade dropscope to replay it"
    )]
    NewerVersion {
        /// Version in the file.
        found: u16,
        /// Newest version this build reads.
        supported: u16,
    },
    /// Reading or writing the file failed.
    #[error("recording I/O")]
    Io(#[from] std::io::Error),
    /// The file ends before the data that starts at this byte offset is complete.
    #[error("the recording is truncated at byte {offset}")]
    Truncated {
        /// Byte offset of the incomplete header or frame.
        offset: u64,
    },
    /// A frame failed its checksum or does not decode.
    #[error("corrupt frame at offset {offset}: {reason}")]
    Corrupt {
        /// Byte offset of the frame's header.
        offset: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The recording goes beyond one of the reader's limits (a crafted file).
    #[error(
        "the recording goes beyond the reader's limit of {max} {what} (at byte {offset}); \
         see docs/recording-format.md, Limits"
    )]
    OverBudget {
        /// Byte offset of the frame that went beyond the limit.
        offset: u64,
        /// What is limited.
        what: &'static str,
        /// The limit.
        max: u64,
    },
    /// The recording has no snapshot to return.
    #[error("the recording holds no snapshots")]
    Empty,
    /// The output file could not be created or published (it exists, no directory, I/O).
    #[error(transparent)]
    Output(#[from] crate::outfile::OutFileError),
    /// A snapshot is older than the one written before it.
    #[error("snapshot at {next:?} comes after one at {previous:?}: snapshots must be in order")]
    OutOfOrder {
        /// Elapsed time of the previous snapshot.
        previous: Duration,
        /// Elapsed time of the rejected one.
        next: Duration,
    },
    /// An elapsed time beyond what the format stores (about 584 years).
    #[error("elapsed time {0:?} is too large to record")]
    ElapsedTooLarge(Duration),
    /// A name, location or stack frame longer than the format allows.
    #[error("a name of {0} bytes is longer than a recording allows (65536)")]
    StringTooLong(usize),
    /// A frame larger than the format allows.
    #[error("a frame of {0} bytes is larger than a recording allows (16 MiB)")]
    FrameTooLarge(usize),
    /// The recorder failed earlier; the file holds the frames written before that.
    #[error("the recorder failed earlier and cannot write more")]
    Failed,
}
