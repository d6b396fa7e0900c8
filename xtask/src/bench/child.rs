//! Child processes whose output is read line by line on threads; a child still running when its
//! handle is dropped gets SIGINT, then SIGKILL.
use std::{
    io::{BufRead, BufReader, Read},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::interrupt;

/// What a finished child printed.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A running child process.
pub struct Proc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    readers: Vec<JoinHandle<String>>,
    finished: bool,
}

impl Proc {
    /// Starts `cmd` with stdin closed and stdout and stderr captured.
    pub fn spawn(cmd: &mut Command, name: &str) -> anyhow::Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let (tx, lines) = channel();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(read_lines(out, tx.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(read_lines(err, tx));
        }
        Ok(Self {
            name: name.to_string(),
            child,
            lines,
            readers,
            finished: false,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the child prints a line (on stdout or stderr) for which `pred` holds.
    pub fn wait_line(
        &mut self,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let until = Instant::now() + timeout;
        loop {
            interrupt::check()?;
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) if pred(&line) => return Ok(line),
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
            }
            if self.exited()? {
                let out = self.finish(None, Duration::from_secs(1))?;
                bail!(
                    "{} exited ({}) before it was ready: {}{}",
                    self.name,
                    out.status,
                    out.stderr.trim(),
                    out.stdout.trim()
                );
            }
            if Instant::now() >= until {
                bail!("{} was not ready after {timeout:?}", self.name);
            }
        }
    }

    /// Whether the child has exited.
    pub fn exited(&mut self) -> anyhow::Result<bool> {
        Ok(self
            .child
            .try_wait()
            .with_context(|| format!("waiting for {}", self.name))?
            .is_some())
    }

    /// Sends `signal` (if any), waits up to `timeout` for the child to exit (then kills it), and
    /// returns what it printed.
    pub fn finish(&mut self, signal: Option<i32>, timeout: Duration) -> anyhow::Result<Output> {
        if let Some(sig) = signal {
            self.signal(sig);
        }
        let status = self.wait_for(timeout)?;
        self.finished = true;
        let mut text = self.readers.drain(..).map(|r| r.join().unwrap_or_default());
        let stdout = text.next().unwrap_or_default();
        let stderr = text.next().unwrap_or_default();
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    fn signal(&self, sig: i32) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill has no memory-safety preconditions; the pid is our own child's.
            unsafe { libc::kill(pid, sig) };
        }
    }

    fn wait_for(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .with_context(|| format!("waiting for {}", self.name))?
            {
                return Ok(status);
            }
            if Instant::now() >= until {
                let _ = self.child.kill();
                return self
                    .child
                    .wait()
                    .with_context(|| format!("waiting for {} after killing it", self.name));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.finish(Some(libc::SIGINT), Duration::from_secs(3));
        }
    }
}

fn read_lines(stream: impl Read + Send + 'static, tx: Sender<String>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    })
}
