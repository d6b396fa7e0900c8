//! Writing recordings to files: one append-only write per snapshot, to a private temporary file
//! that gets its name only when the recording is finished.
use std::{
    io::Write,
    path::{Path, PathBuf},
};

use super::{
    encoder::{Encoder, end_frame, header},
    error::RecordError,
};
use crate::{
    model::{SessionInfo, Snapshot},
    outfile::OutFile,
};

/// Writes a recording to a file, one frame per snapshot.
///
/// Frames go to a temporary file next to the destination (owner-only, see [`OutFile`]), each
/// snapshot as one `write(2)`, so a recorder killed at any moment leaves every earlier frame
/// intact in that file; [`Recorder::finish`] writes the end marker and only then gives the file
/// its name. A recorder dropped unfinished, or whose write failed (a full disk), removes its
/// temporary file: the destination never holds a partial recording.
pub struct Recorder {
    out: Sink,
    encoder: Encoder,
    buf: Vec<u8>,
    written: u64,
    failed: bool,
}

/// Where the frames go: a file published when finished, or a stream (standard output).
enum Sink {
    File(OutFile),
    Stream(Box<dyn Write + Send>),
}

impl Recorder {
    /// Starts a recording to be published as `path` and writes the header and `info`; `-`
    /// writes it to standard output instead, each frame flushed as it is written (for a pipe;
    /// `./-` names a file called `-`).
    ///
    /// Refuses, before writing anything, when something already has that name (a file, a
    /// symlink, a FIFO) unless `force` is set, in which case it is replaced when finished.
    pub fn create(path: &Path, info: &SessionInfo, force: bool) -> Result<Recorder, RecordError> {
        if super::stream::is_stdio(path) {
            // Straight to the descriptor, unbuffered: each snapshot's frames in one write(2).
            let fd = std::os::fd::AsFd::as_fd(&std::io::stdout()).try_clone_to_owned()?;
            return Self::to_stream(Box::new(std::fs::File::from(fd)), info);
        }
        let head = header(info)?;
        Self::start(Sink::File(OutFile::create(path, force)?), &head)
    }

    /// Starts a recording written to `out` as it goes, each frame flushed as it is written.
    pub fn to_stream(
        out: Box<dyn Write + Send>,
        info: &SessionInfo,
    ) -> Result<Recorder, RecordError> {
        let head = header(info)?;
        Self::start(Sink::Stream(out), &head)
    }

    /// A recorder writing to `out`, which gets the file header first.
    fn start(out: Sink, head: &[u8]) -> Result<Recorder, RecordError> {
        let mut r = Recorder {
            out,
            encoder: Encoder::default(),
            buf: Vec::new(),
            written: 0,
            failed: false,
        };
        r.append(head)?;
        Ok(r)
    }

    /// Where the frames are until the recording is finished (`-` for a stream).
    pub fn temp_path(&self) -> &Path {
        match &self.out {
            Sink::File(f) => f.temp_path(),
            Sink::Stream(_) => Path::new("-"),
        }
    }

    /// Where the recording will be published (`-` for a stream).
    pub fn path(&self) -> &Path {
        match &self.out {
            Sink::File(f) => f.dest(),
            Sink::Stream(_) => Path::new("-"),
        }
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), RecordError> {
        if self.failed {
            return Err(RecordError::Failed);
        }
        let r = match &mut self.out {
            Sink::File(f) => {
                let mut file = f.file();
                file.write_all(bytes).and_then(|_| file.flush())
            }
            Sink::Stream(w) => w.write_all(bytes).and_then(|_| w.flush()),
        };
        if let Err(e) = r {
            self.failed = true;
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

    /// Writes the end marker, syncs the file to disk and gives it its name (returned; `-` for
    /// a stream).
    pub fn finish(mut self) -> Result<PathBuf, RecordError> {
        let end = end_frame(self.encoder.last_elapsed_ns())?;
        self.append(&end)?;
        match self.out {
            Sink::File(f) => Ok(f.commit()?),
            Sink::Stream(_) => Ok(PathBuf::from("-")),
        }
    }

    /// Like [`Recorder::finish`], but publishes under the first free name of `names`.
    pub fn finish_first_free(
        mut self,
        names: impl IntoIterator<Item = PathBuf>,
    ) -> Result<PathBuf, RecordError> {
        let end = end_frame(self.encoder.last_elapsed_ns())?;
        self.append(&end)?;
        match self.out {
            Sink::File(f) => Ok(f.commit_first_free(names)?),
            Sink::Stream(_) => Ok(PathBuf::from("-")),
        }
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
