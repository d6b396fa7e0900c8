//! A stream's bytes spooled to a file as they arrive, and whether more may come: what the
//! reader of a stream ([`super::stream`]) waits on.
use std::{
    fs::File,
    io::{self, Read, Write},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::Duration,
};

use super::budget::MAX_TOTAL_BYTES;

/// Most bytes spooled from one stream (what the reader would refuse anyway, stored).
pub const MAX_STREAM_BYTES: u64 = MAX_TOTAL_BYTES;

#[derive(Default)]
struct State {
    /// Bytes fully written to the spool file.
    len: u64,
    /// The stream ended (end of file, an error, or the reader stopped it).
    ended: bool,
    /// Why it ended, when not at its end of file.
    error: Option<String>,
    /// The reader needs no more bytes.
    stop: bool,
}

/// The bytes of a stream so far, and whether more may come.
#[derive(Default)]
pub(super) struct Spool {
    state: Mutex<State>,
    grew: Condvar,
}

impl Spool {
    /// Spools `src` to a temporary file on a thread of its own; returns the file to read from.
    pub(super) fn start(mut src: impl Read + Send + 'static) -> io::Result<(File, Arc<Spool>)> {
        let file = tempfile::tempfile()?;
        let mut out = file.try_clone()?;
        let spool = Arc::new(Spool::default());
        let s = spool.clone();
        std::thread::Builder::new()
            .name("recording-input".into())
            .spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                let error = loop {
                    if s.lock().stop {
                        break None;
                    }
                    let n = match src.read(&mut buf) {
                        Ok(0) => break None,
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => break Some(format!("reading the input: {e}")),
                    };
                    if s.lock().len + n as u64 > MAX_STREAM_BYTES {
                        break Some(format!(
                            "the input goes beyond the reader's limit of {MAX_STREAM_BYTES} bytes"
                        ));
                    }
                    if let Err(e) = out.write_all(&buf[..n]) {
                        break Some(format!("spooling the input: {e}"));
                    }
                    s.lock().len += n as u64;
                    s.grew.notify_all();
                };
                let mut st = s.lock();
                st.ended = true;
                st.error = error;
                drop(st);
                s.grew.notify_all();
            })?;
        Ok((file, spool))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes available, and whether the stream has ended (then no more will come).
    pub(super) fn status(&self) -> (u64, bool) {
        let st = self.lock();
        (st.len, st.ended)
    }

    /// Why the stream ended early (a read error, a limit), if it did.
    pub(super) fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// Waits until more than `len` bytes are available or the stream ends, at most `timeout`.
    pub(super) fn wait_beyond(&self, len: u64, timeout: Duration) {
        let st = self.lock();
        let _ = self
            .grew
            .wait_timeout_while(st, timeout, |st| st.len <= len && !st.ended);
    }

    /// Tells the spooling thread to stop reading (after its current read).
    pub(super) fn stop(&self) {
        self.lock().stop = true;
    }
}
