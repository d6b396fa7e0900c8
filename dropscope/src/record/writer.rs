//! Writing recordings to files: one append-only write per snapshot, owner-only permissions.
use std::{
    fs::{File, OpenOptions},
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::Path,
};

use super::{
    RecordError,
    encoder::{Encoder, end_frame, header},
};
use crate::model::{SessionInfo, Snapshot};

/// Writes a recording to a file, one frame per snapshot.
///
/// Each snapshot becomes one `write(2)` of whole frames to a file opened for appending, so a
/// recorder killed at any moment leaves every earlier frame intact. After a failed write the
/// recorder refuses further writes (the file keeps its valid prefix).
pub struct Recorder {
    file: File,
    encoder: Encoder,
    buf: Vec<u8>,
    written: u64,
    failed: bool,
}

impl Recorder {
    /// Creates `path` with owner-only permissions (0600) and writes the header and `info`.
    ///
    /// Refuses to overwrite a file that exists and is not empty; an existing empty regular file
    /// (e.g. from `mktemp`) is used, with its permissions narrowed to 0600.
    pub fn create(path: &Path, info: &SessionInfo) -> Result<Recorder, RecordError> {
        let head = header(info)?;
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        let meta = file.metadata()?;
        if meta.len() != 0 {
            return Err(RecordError::AlreadyExists(path.to_path_buf()));
        }
        if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        let mut r = Recorder {
            file,
            encoder: Encoder::default(),
            buf: Vec::new(),
            written: 0,
            failed: false,
        };
        r.append(&head)?;
        Ok(r)
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), RecordError> {
        if self.failed {
            return Err(RecordError::Failed);
        }
        if let Err(e) = self.file.write_all(bytes).and_then(|_| self.file.flush()) {
            self.failed = true;
            // Best effort: cut off a partly written frame so the file ends on a frame boundary.
            let _ = self.file.set_len(self.written);
            return Err(e.into());
        }
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Writes one snapshot (a keyframe or a delta, preceded by any new names), as one write.
    ///
    /// Snapshots must come in order of `elapsed` (equal is allowed).
    pub fn write(&mut self, snapshot: &Snapshot) -> Result<(), RecordError> {
        if self.failed {
            return Err(RecordError::Failed);
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let r = self
            .encoder
            .encode(snapshot, &mut buf)
            .and_then(|()| self.append(&buf));
        self.buf = buf;
        r
    }

    /// Bytes in the file so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Writes the end marker and syncs the file to disk.
    pub fn finish(mut self) -> Result<(), RecordError> {
        let end = end_frame(self.encoder.last_elapsed_ns())?;
        self.append(&end)?;
        self.file.sync_data()?;
        Ok(())
    }
}

/// Encodes a whole recording in memory: header, `info`, one frame per snapshot, end marker.
///
/// Byte for byte what a [`Recorder`] writes; for tests, tools and generated samples.
pub fn encode(info: &SessionInfo, snapshots: &[Snapshot]) -> Result<Vec<u8>, RecordError> {
    let mut out = header(info)?;
    let mut enc = Encoder::default();
    for s in snapshots {
        enc.encode(s, &mut out)?;
    }
    out.extend_from_slice(&end_frame(enc.last_elapsed_ns())?);
    Ok(out)
}
