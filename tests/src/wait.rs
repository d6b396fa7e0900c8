//! Waiting for what dropscope or the kernel has observably done, never for a guessed time: a
//! line of a running command's output, a recording's frames on disk, a neighbour resolved.
//! Every wait is bounded generously ([`LIMIT`]): only a defect takes that long.
use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::Command,
    sync::mpsc::{Receiver, RecvTimeoutError},
    time::{Duration, Instant},
};

use crate::{Counting, Netns, dropscope_bin};

/// How long a wait may take before it fails: far beyond what a loaded machine needs.
pub const LIMIT: Duration = Duration::from_secs(60);

/// How often a polled condition is checked again.
const POLL: Duration = Duration::from_millis(100);

impl Counting {
    /// Reads stdout as it comes, as [`Counting::read_stdout`] does (what
    /// [`Counting::wait_within`] and [`Counting::try_interrupt`] return is the same), and also
    /// hands over each line as it comes, for a test to wait on ([`wait_line`], [`wait_report`]).
    /// End it with [`Counting::try_interrupt`] or [`Counting::wait_within`], which return what
    /// was read ([`Counting::interrupt`] reads stdout itself, and finds it taken).
    pub fn stdout_lines(&mut self) -> Receiver<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(stdout) = self.child.as_mut().and_then(|c| c.stdout.take()) {
            *self.stdout = Some(std::thread::spawn(move || {
                let mut all = String::new();
                for line in BufReader::new(stdout).lines() {
                    let line = line?;
                    all.push_str(&line);
                    all.push('\n');
                    // The receiver may be gone (the test waits no more): keep reading.
                    let _ = tx.send(line);
                }
                Ok(all)
            }));
        }
        rx
    }
}

/// Waits (at most [`LIMIT`]) for a line from `lines` for which `ok` holds and returns it;
/// panics naming `what` and the last line seen otherwise.
pub fn wait_line(lines: &Receiver<String>, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + LIMIT;
    let mut last = String::new();
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if ok(&line) => return line,
            Ok(line) => last = line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{what}: not within {LIMIT:?}; the last line: {last}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{what}: the output ended first; the last line: {last}")
            }
        }
    }
}

/// Waits (at most [`LIMIT`]) for a JSON report line (`report --every --format json`) for
/// which `ok` holds and returns it.
pub fn wait_report(
    lines: &Receiver<String>,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let line = wait_line(lines, what, |l| {
        serde_json::from_str(l).is_ok_and(|r: serde_json::Value| ok(&r))
    });
    serde_json::from_str(&line).expect("a JSON report")
}

/// Polls `ok` until it holds, at most [`LIMIT`]; panics naming `what` otherwise.
pub fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {LIMIT:?}");
        std::thread::sleep(POLL);
    }
}

/// The recording being written in `dir`: its temporary `.part` file, until it is published.
pub fn part_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".part"))
}

/// Waits (at most [`LIMIT`]) until the frames written so far of the recording being made in
/// `dir` report (as `report --format json --input`) what `ok` asks, and returns that report:
/// the recorder has seen it and written it down.
pub fn wait_recorded(
    dir: &Path,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut seen = None;
    until(what, || {
        let Some(part) = part_file(dir) else {
            return false;
        };
        let out = Command::new(dropscope_bin())
            .args(["report", "--format", "json", "--input"])
            .arg(&part)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output();
        // A recording with no complete frame yet does not read: try again.
        let report = out.ok().and_then(|o| {
            o.status
                .success()
                .then(|| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
                .flatten()
        });
        match report {
            Some(r) if ok(&r) => {
                seen = Some(r);
                true
            }
            _ => false,
        }
    });
    seen.expect("a report")
}

/// Waits (at most [`LIMIT`]) until `ns` has resolved the neighbour `ip` (no ARP request of
/// its own is left to fall into what a test counts next).
pub fn neighbour_resolved(ns: &Netns, ip: &str) {
    until(
        &format!("the neighbour {ip} resolved in {}", ns.name),
        || {
            let out = ns.exec(&["ip", "neigh", "show", ip]);
            let text = String::from_utf8_lossy(&out.stdout);
            text.contains("lladdr")
                && ["REACHABLE", "STALE", "DELAY", "PERMANENT"]
                    .iter()
                    .any(|s| text.contains(s))
        },
    );
}

/// Waits until `pid` is in a network namespace other than ours (the spawned command has
/// unshared); its inode.
pub fn netns_of(pid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let ours = std::fs::metadata("/proc/self/ns/net")
        .expect("our network namespace")
        .ino();
    let theirs = || {
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .ok()
            .map(|m| m.ino())
            .filter(|&ino| ino != ours)
    };
    until(
        &format!("process {pid} out of our network namespace"),
        || theirs().is_some(),
    );
    theirs().expect("its namespace")
}
