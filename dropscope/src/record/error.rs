//! What can go wrong writing or reading a recording, as a caller matches it.
use std::time::Duration;

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
