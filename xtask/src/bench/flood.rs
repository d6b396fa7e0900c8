//! The sender: one thread that enters the bench's network namespace (`setns`) and sends, in a
//! tight loop, the tests' traffic pattern (`dropscope_tests::traffic`): UDP datagrams to a
//! closed port (each exactly one NO_SOCKET drop at `__udp4_lib_rcv`), or short runs of those
//! alternating with raw packets of an unused protocol (each one IP_NOPROTO drop).
use std::{
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use dropscope_tests::traffic::{CLOSED_PORT, Generator, Pattern};

use super::interrupt;

/// Sends between looks at the clock and the stop flag (a multiple of every run length used).
const BATCH: u64 = 256;
/// Packets per run of one key in the interleaved flood.
pub const INTERLEAVE_RUN: u64 = 4;

/// The floods the bench compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// UDP to a closed port only: one key.
    Single,
    /// Runs of [`INTERLEAVE_RUN`] UDP datagrams and raw IP_NOPROTO packets, alternating.
    Interleaved,
}

impl Kind {
    /// The traffic pattern it sends.
    pub fn pattern(self) -> Pattern {
        match self {
            Self::Single => Pattern::Udp,
            Self::Interleaved => Pattern::Mix {
                run: INTERLEAVE_RUN,
            },
        }
    }

    /// Its name in the output.
    pub fn label(self) -> &'static str {
        match self {
            Self::Single => "single-key flood",
            Self::Interleaved => "interleaved flood",
        }
    }
}

/// What one flood sent.
#[derive(Clone, Copy, Debug)]
pub struct Flood {
    /// Packets the kernel accepted (each one a drop).
    pub sent: u64,
    /// Of those, raw IP_NOPROTO packets (the rest are UDP NO_SOCKET datagrams).
    pub raw: u64,
    /// sendto calls that failed.
    pub errors: u64,
    pub elapsed: Duration,
    /// Datagrams sent and time passed at half the time limit (floods with a limit).
    pub half: Option<(u64, Duration)>,
}

impl Flood {
    /// Packets per second.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Packets per second in the second half of the flood.
    pub fn second_half_rate(&self) -> Option<f64> {
        let (sent, at) = self.half?;
        let secs = self.elapsed.saturating_sub(at).as_secs_f64();
        (secs > 0.0).then(|| (self.sent - sent) as f64 / secs)
    }
}

/// Where and how to flood.
#[derive(Clone, Debug)]
pub struct Target {
    /// The namespace file to enter.
    pub netns: PathBuf,
    /// The CPU the sender is pinned to.
    pub cpu: usize,
    /// What to send.
    pub kind: Kind,
}

impl Target {
    /// The same place, another flood.
    pub fn with_kind(&self, kind: Kind) -> Self {
        Self {
            kind,
            ..self.clone()
        }
    }
}

/// A running sender.
pub struct Sender {
    handle: JoinHandle<anyhow::Result<Flood>>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
}

impl Sender {
    /// Starts sending, for `limit` or until stopped.
    pub fn start(target: &Target, limit: Option<Duration>) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (ns, cpu, pattern) = (target.netns.clone(), target.cpu, target.kind.pattern());
        let (stop2, sent2) = (stop.clone(), sent.clone());
        let handle = std::thread::Builder::new()
            .name("bench-sender".into())
            .spawn(move || send(&ns, cpu, pattern, limit, &stop2, &sent2))
            .context("starting the sender thread")?;
        Ok(Self { handle, stop, sent })
    }

    /// Packets sent so far (updated every few hundred sends).
    pub fn sent_so_far(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops sending and returns the totals.
    pub fn stop(self) -> anyhow::Result<Flood> {
        self.stop.store(true, Ordering::Relaxed);
        self.wait()
    }

    /// Waits for the time limit and returns the totals.
    pub fn wait(self) -> anyhow::Result<Flood> {
        let flood = self
            .handle
            .join()
            .map_err(|_| anyhow::anyhow!("the sender thread panicked"))??;
        interrupt::check()?;
        Ok(flood)
    }
}

/// Floods for `d` and returns what was sent.
pub fn run_for(target: &Target, d: Duration) -> anyhow::Result<Flood> {
    Sender::start(target, Some(d))?.wait()
}

fn send(
    ns: &Path,
    cpu: usize,
    pattern: Pattern,
    limit: Option<Duration>,
    stop: &AtomicBool,
    counter: &AtomicU64,
) -> anyhow::Result<Flood> {
    enter_netns(ns)?;
    pin_to_cpu(cpu)?;
    let mut generator = Generator::new(pattern, CLOSED_PORT)?;
    let start = Instant::now();
    let mut half = None;
    loop {
        generator.send(BATCH);
        let sent = generator.sent().total();
        counter.store(sent, Ordering::Relaxed);
        let now = start.elapsed();
        if half.is_none() && limit.is_some_and(|l| now >= l / 2) {
            half = Some((sent, now));
        }
        let over = limit.is_some_and(|l| now >= l);
        if over || stop.load(Ordering::Relaxed) || interrupt::requested() {
            break;
        }
    }
    let sent = generator.sent();
    Ok(Flood {
        sent: sent.total(),
        raw: sent.raw,
        errors: sent.errors,
        elapsed: start.elapsed(),
        half,
    })
}

/// Moves this thread (only) into the network namespace at `path`.
fn enter_netns(path: &Path) -> anyhow::Result<()> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: setns on a valid namespace fd affects only the calling thread's network namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!(
            "entering {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

fn pin_to_cpu(cpu: usize) -> anyhow::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for cpu < CPU_SETSIZE (checked);
    // sched_setaffinity(0, ..) applies to the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            bail!("CPU {cpu} is out of range");
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            bail!(
                "pinning the sender to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// Online CPUs.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}
