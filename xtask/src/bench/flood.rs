//! The sender: one thread that enters the bench's network namespace (`setns`) and sends UDP
//! datagrams to a closed port on loopback in a tight loop. Each datagram is exactly one
//! NO_SOCKET drop at `__udp4_lib_rcv`.
use std::{
    fs::File,
    net::{Ipv4Addr, SocketAddr, UdpSocket},
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

use super::interrupt;

/// Nothing listens on it in a fresh namespace.
const CLOSED_PORT: u16 = 9;
const PAYLOAD: [u8; 32] = [0x5a; 32];
/// Sends between looks at the clock and the stop flag.
const BATCH: u32 = 256;

/// What one flood sent.
#[derive(Clone, Copy, Debug)]
pub struct Flood {
    /// Datagrams the kernel accepted (each one a drop).
    pub sent: u64,
    /// sendto calls that failed.
    pub errors: u64,
    pub elapsed: Duration,
    /// Datagrams sent and time passed at half the time limit (floods with a limit).
    pub half: Option<(u64, Duration)>,
}

impl Flood {
    /// Datagrams per second.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Datagrams per second in the second half of the flood.
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
        let (ns, cpu) = (target.netns.clone(), target.cpu);
        let (stop2, sent2) = (stop.clone(), sent.clone());
        let handle = std::thread::Builder::new()
            .name("bench-sender".into())
            .spawn(move || send(&ns, cpu, limit, &stop2, &sent2))
            .context("starting the sender thread")?;
        Ok(Self { handle, stop, sent })
    }

    /// Datagrams sent so far (updated every few hundred sends).
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
    limit: Option<Duration>,
    stop: &AtomicBool,
    counter: &AtomicU64,
) -> anyhow::Result<Flood> {
    enter_netns(ns)?;
    pin_to_cpu(cpu)?;
    let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).context("binding the sender's socket")?;
    let dst = SocketAddr::from((Ipv4Addr::LOCALHOST, CLOSED_PORT));
    let start = Instant::now();
    let (mut sent, mut errors) = (0u64, 0u64);
    let mut half = None;
    loop {
        for _ in 0..BATCH {
            match sock.send_to(&PAYLOAD, dst) {
                Ok(_) => sent += 1,
                Err(_) => errors += 1,
            }
        }
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
    Ok(Flood {
        sent,
        errors,
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
