//! What the sockets of drops are, looked up beside the counting as names are: asking never
//! waits ([`Sockets::about`] answers from a cache at once, `unknown (not looked up yet)` the
//! first time) and one worker thread describes the inodes asked for
//! ([`crate::kcounters::sockets::describe`]), at most one lookup a second, so nothing on the
//! poll path waits for `/proc`. What was found of a socket stays once it is closed (its drops
//! keep it); an answer of unknown is asked again after [`RETRY`].
use std::{
    collections::{BTreeSet, HashMap},
    path::PathBuf,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use crate::{
    kcounters::{holders::Bounds, sockets},
    vocab::socket::About,
};

/// Sockets remembered (more than the probe's keys hold: each key has at most one).
const MAX_KNOWN: usize = 65_536;
/// Sockets waiting for the next lookup (more are asked for again on a later call).
const MAX_ASKED: usize = 4096;
/// Least time between two lookups.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// An unknown answer is looked for again after this long.
pub const RETRY: Duration = Duration::from_secs(10);

/// The cache and the worker that fills it.
#[derive(Debug)]
pub struct Sockets {
    shared: Arc<Shared>,
    started: bool,
}

#[derive(Debug)]
struct Shared {
    proc: PathBuf,
    bounds: Bounds,
    state: Mutex<State>,
    wake: Condvar,
    idle: Condvar,
}

#[derive(Debug, Default)]
struct State {
    known: HashMap<u32, (About, Instant)>,
    asked: BTreeSet<u32>,
    generation: u64,
    busy: bool,
    closed: bool,
}

impl Default for Sockets {
    fn default() -> Self {
        Self::new(PathBuf::from("/proc"), sockets::BOUNDS)
    }
}

impl Drop for Sockets {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sockets {
    /// Looks under `proc` within `bounds` (the worker starts on the first question).
    pub fn new(proc: PathBuf, bounds: Bounds) -> Self {
        Self {
            shared: Arc::new(Shared {
                proc,
                bounds,
                state: Mutex::new(State::default()),
                wake: Condvar::new(),
                idle: Condvar::new(),
            }),
            started: false,
        }
    }

    /// What socket `inode` is, as last found; asks for it when never looked up, or when
    /// unknown and [`RETRY`] has passed.
    pub fn about(&mut self, inode: u32) -> About {
        let mut s = self.shared.lock();
        let answer = match s.known.get(&inode).cloned() {
            Some((about, at)) => {
                if matches!(about, About::Unknown { .. }) && at.elapsed() >= RETRY {
                    ask(&mut s, inode);
                }
                about
            }
            None => {
                ask(&mut s, inode);
                About::unknown("not looked up yet")
            }
        };
        let wake = !s.asked.is_empty();
        drop(s);
        if wake {
            self.start();
            self.shared.wake.notify_all();
        }
        answer
    }

    /// Bumped whenever a lookup ends with something learnt: keys are described again then.
    pub fn generation(&self) -> u64 {
        self.shared.lock().generation
    }

    /// Waits (at most `timeout`) until nothing is asked for or being looked up; whether so.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.lock();
        while s.busy || !s.asked.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = (self.shared.idle.wait_timeout(s, left))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        let shared = self.shared.clone();
        // Detached: it ends when the cache is dropped, and never keeps the process alive.
        let _ = std::thread::Builder::new()
            .name("sockets".into())
            .spawn(move || work(&shared));
    }
}

fn ask(s: &mut State, inode: u32) {
    if s.asked.len() < MAX_ASKED {
        s.asked.insert(inode);
    }
}

fn work(shared: &Shared) {
    let mut last: Option<Instant> = None;
    loop {
        let inodes = {
            let mut s = shared.lock();
            while s.asked.is_empty() && !s.closed {
                s = (shared.wake.wait(s)).unwrap_or_else(|e| e.into_inner());
            }
            if s.closed {
                return;
            }
            s.busy = true;
            std::mem::take(&mut s.asked)
        };
        if let Some(wait) = last.map(|l| MIN_INTERVAL.saturating_sub(l.elapsed())) {
            std::thread::sleep(wait);
        }
        last = Some(Instant::now());
        let found = sockets::describe(&shared.proc, &inodes, shared.bounds);
        let mut s = shared.lock();
        let now = Instant::now();
        for (inode, about) in found {
            // A socket found once stays found: an unknown answer later (it was closed) does
            // not undo what its drops showed.
            let keep = matches!(s.known.get(&inode), Some((About::Exact(_), _)))
                && matches!(about, About::Unknown { .. });
            if !keep && (s.known.len() < MAX_KNOWN || s.known.contains_key(&inode)) {
                s.known.insert(inode, (about, now));
            }
        }
        s.generation += 1;
        s.busy = false;
        drop(s);
        shared.idle.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::os::{fd::AsRawFd, unix::fs::MetadataExt};

    use super::*;

    #[test]
    fn asking_never_waits_and_the_answer_comes_later() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd())).expect("fd");
        let inode = meta.ino() as u32;
        let mut sockets = Sockets::default();
        assert_eq!(sockets.about(inode), About::unknown("not looked up yet"));
        assert!(sockets.wait_idle(Duration::from_secs(30)));
        let About::Exact(f) = sockets.about(inode) else {
            panic!("not found");
        };
        assert_eq!(f.holders[0].pid, std::process::id());
        assert!(sockets.generation() > 0);
        // Closed, it keeps what was found.
        drop(s);
        assert!(matches!(sockets.about(inode), About::Exact(_)));
    }
}
