//! The index of a recording's frames, below both the reader and the decoder (which the reader
//! drives through [`Frames`](super::decode::Frames), so neither imports the other's types back).
use std::time::Duration;

use super::error::RecordError;

/// One snapshot frame in a recording's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Byte offset of the frame's header in the file.
    pub offset: u64,
    /// Stored payload length in bytes.
    pub stored_len: u32,
    /// Elapsed time of its snapshot.
    pub elapsed: Duration,
    /// Whether it is a keyframe (a full snapshot).
    pub keyframe: bool,
    /// Index of the keyframe it is decoded from (itself, for a keyframe).
    pub base: usize,
    /// Whether its payload is compressed.
    pub compressed: bool,
    pub(super) flags: u8,
    pub(super) keys_defined: usize,
    pub(super) stacks_defined: usize,
    pub(super) samples_defined: usize,
    /// The latest kernel frame before it (an index into the recording's kernel frames).
    pub(super) kernel: Option<usize>,
    /// The latest attribution frame before it (an index into the recording's attribution
    /// frames).
    pub(super) attribution: Option<usize>,
}

impl FrameInfo {
    /// A frame at `offset`, whole (`keyframe`) or applied to frame `base` of its kind, that
    /// defines nothing and follows no kernel or attribution frame: one beside the snapshot
    /// frames (a kernel or attribution frame), or a snapshot frame's start.
    pub(super) fn beside(
        offset: u64,
        h: &super::format::FrameHeader,
        elapsed: Duration,
        keyframe: bool,
        base: usize,
    ) -> Self {
        FrameInfo {
            offset,
            stored_len: h.len,
            elapsed,
            keyframe,
            base,
            compressed: h.flags != 0,
            flags: h.flags,
            keys_defined: 0,
            stacks_defined: 0,
            samples_defined: 0,
            kernel: None,
            attribution: None,
        }
    }
}

/// The error of a damaged frame at `offset`.
pub(super) fn corrupt(offset: u64, reason: &'static str) -> RecordError {
    RecordError::Corrupt { offset, reason }
}
