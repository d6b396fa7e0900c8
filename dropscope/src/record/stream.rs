//! Recordings read from a stream (a pipe, `-`): the bytes are spooled to an unlinked,
//! owner-only temporary file as they arrive, and the reader indexes them as they come, with the
//! same checks and the same memory budget as a file.
use std::{
    io::{self, Read},
    path::Path,
    sync::Arc,
    time::Duration,
};

use super::{error::RecordError, reader::Recording, spool::Spool};

/// The path that means standard input (for reading) or standard output (for recording).
pub fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Opens a recording to read through: a file, or with `-` standard input read to its end.
pub fn open_input(path: &Path) -> Result<Recording, RecordError> {
    if is_stdio(path) {
        Recording::read_stream(io::stdin())
    } else {
        open_with_progress(path)
    }
}

/// Files smaller than this open without a progress line (they take well under a second).
const PROGRESS_FROM_BYTES: u64 = 32 << 20;

/// Opens a file; while a large one is read, a line on stderr (a terminal only) says how far.
fn open_with_progress(path: &Path) -> Result<Recording, RecordError> {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    if len < PROGRESS_FROM_BYTES || !io::IsTerminal::is_terminal(&io::stderr()) {
        return Recording::open(path);
    }
    let indexed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shown = crate::sanitize::terminal(&path.display().to_string()).into_owned();
    let printer = {
        let (indexed, done) = (indexed.clone(), done.clone());
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let at = indexed.load(std::sync::atomic::Ordering::Relaxed);
                eprint!(
                    "\rdropscope: reading {shown}: {} of {} ({}%), {}\x1b[K",
                    crate::format::bytes(at),
                    crate::format::bytes(len),
                    at.saturating_mul(100) / len.max(1),
                    crate::format::duration(started.elapsed()),
                );
            }
            eprint!("\r\x1b[K");
        })
    };
    let r = Recording::open_counting(path, Some(indexed));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = printer.join();
    r
}

/// Opens a recording to replay: a file, or with `-` standard input, followed as it grows.
pub fn follow_input(path: &Path) -> Result<Recording, RecordError> {
    if is_stdio(path) {
        Recording::follow(io::stdin())
    } else {
        Recording::open(path)
    }
}

impl Recording {
    /// Starts reading a recording from a stream, returning once its session information has
    /// arrived; [`Recording::refresh`] then indexes the frames that arrived since.
    pub fn follow(src: impl Read + Send + 'static) -> Result<Recording, RecordError> {
        let (file, spool) = Spool::start(src)?;
        let mut seen = 0;
        loop {
            let (len, ended) = spool.status();
            match Recording::load_stream(&file, &spool) {
                Err(RecordError::Truncated { .. }) if !ended => {}
                Err(RecordError::Truncated { offset }) if spool.error().is_some() => {
                    spool.stop();
                    return Err(io::Error::other(format!(
                        "{} (at byte {offset})",
                        spool.error().unwrap_or_default()
                    ))
                    .into());
                }
                r => {
                    if r.is_err() {
                        spool.stop();
                    }
                    return r;
                }
            }
            if len == seen {
                spool.wait_beyond(len, Duration::from_secs(1));
            }
            seen = len;
        }
    }

    /// Reads a recording from a stream to its end (a writer that stops mid-frame leaves a
    /// warning, as a truncated file does).
    pub fn read_stream(src: impl Read + Send + 'static) -> Result<Recording, RecordError> {
        let mut rec = Recording::follow(src)?;
        while rec.is_growing() {
            rec.wait(Duration::from_secs(1));
            rec.refresh()?;
        }
        Ok(rec)
    }

    /// Waits until more bytes of a stream arrive (or it ends), at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        if let Some(s) = self.spool() {
            s.wait_beyond(self.seen_len(), timeout);
        }
    }
}
