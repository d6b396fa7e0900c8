//! A recording's frames read one by one, each checked by its checksum, without indexing the
//! whole file: for an index kept beside a recording to be verified against the file itself.
use std::{fs::File, path::Path, time::Duration};

use super::{
    error::RecordError,
    format::{FRAME_HEADER_LEN, Kind},
    index::corrupt,
    reader::{Storage, read_head, read_header, read_payload},
};
use crate::model::SessionInfo;

/// What a frame holds, as far as a look at one frame tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeekedKind {
    /// A snapshot (a keyframe or a delta).
    Snapshot,
    /// The end marker.
    End,
    /// Anything else beside the snapshots (names, the kernel's counters, attribution).
    Beside,
}

/// One frame, its checksum verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peeked {
    /// What it holds.
    pub kind: PeekedKind,
    /// The session time it carries.
    pub elapsed: Duration,
    /// Where the frame after it starts.
    pub next: u64,
}

/// A recording file opened for single frames.
pub struct Peek {
    storage: Storage,
    len: u64,
    info: SessionInfo,
    after_info: u64,
}

impl Peek {
    /// Opens `path`, checks its file header and reads its session information frame.
    pub fn open(path: &Path) -> Result<Peek, RecordError> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(RecordError::NotARecording);
        }
        let storage = Storage::File(file);
        let len = meta.len();
        let (info, _, after_info) = read_head(&storage, len)?;
        Ok(Peek {
            storage,
            len,
            info,
            after_info,
        })
    }

    /// The file's length when opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file holds nothing (never true of one that opened).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its session.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// Where the first frame after the session information starts.
    pub fn after_info(&self) -> u64 {
        self.after_info
    }

    /// The frame at `offset`, read whole and checked by its checksum.
    pub fn frame(&self, offset: u64) -> Result<Peeked, RecordError> {
        let (raw, h) = read_header(&self.storage, offset, self.len)?
            .ok_or(RecordError::Truncated { offset })?;
        read_payload(&self.storage, offset, self.len, &raw, &h)?
            .ok_or(RecordError::Truncated { offset })?;
        let kind = match h.kind {
            Kind::Keyframe | Kind::Delta => PeekedKind::Snapshot,
            Kind::End => PeekedKind::End,
            Kind::Info => return Err(corrupt(offset, "a second session information frame")),
            _ => PeekedKind::Beside,
        };
        Ok(Peeked {
            kind,
            elapsed: Duration::from_nanos(h.elapsed_ns),
            next: offset + FRAME_HEADER_LEN as u64 + u64::from(h.len),
        })
    }
}
