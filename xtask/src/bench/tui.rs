//! dropscope's own cost in the live TUI (run in a detached tmux session, no key pressed): syscalls,
//! bpf() syscalls, context switches and CPU, first with no drops, then under the flood.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{
    flood::{self, Sender, Target},
    guards::TmuxSession,
    interrupt, procfs,
    syscount::{self, Method},
};

/// Startup work (BTF, symbolizer, first polls) to let pass before measuring.
const STARTUP: Duration = Duration::from_secs(3);
/// Time for the poller to adapt to the flood before measuring.
const ADAPT: Duration = Duration::from_secs(2);
/// The burst of drops that makes the TUI symbolize (and capture a stack) for the first time.
const BURST: Duration = Duration::from_millis(10);

/// One measured window.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Wall time between the /proc readings.
    pub secs: f64,
    /// The syscall counter's window.
    pub count_secs: f64,
    pub syscalls: u64,
    pub bpf_syscalls: u64,
    pub ctx_switches: u64,
    pub cpu_ticks: u64,
    /// Drops on the whole machine in the window (perf only).
    pub drops: Option<u64>,
    /// Datagrams the sender sent in the window.
    pub sent: u64,
}

impl Window {
    /// `n` per second of wall time.
    pub fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.secs.max(1e-9)
    }

    /// Syscalls per second.
    pub fn syscalls_per_sec(&self) -> f64 {
        self.syscalls as f64 / self.count_secs.max(1e-9)
    }

    /// CPU% of one core.
    pub fn cpu_percent(&self) -> f64 {
        self.cpu_ticks as f64 / procfs::ticks_per_sec() / self.secs.max(1e-9) * 100.0
    }
}

/// The measured windows.
#[derive(Clone, Copy, Debug)]
pub struct TuiCost {
    /// From a short burst of the first drops (one-time work such as loading the symbolizer).
    pub first: Window,
    /// No drops.
    pub idle: Window,
    /// Under the flood.
    pub flood: Window,
}

/// What the sender does during a window.
#[derive(Clone, Copy)]
enum Load<'a> {
    Nothing,
    Burst(&'a Target),
    Flood(&'a Sender),
}

/// Runs the TUI in tmux and measures it after its first drops, idle, then under the flood.
pub fn measure(
    dropscope: &Path,
    target: &Target,
    method: Method,
    window: Duration,
) -> anyhow::Result<TuiCost> {
    let name = format!("dsbench-{}", std::process::id());
    let command = format!("exec {}", shell_quote(&dropscope.display().to_string()));
    let tmux = TmuxSession::start(&name, 120, 40, &command)
        .context("starting the TUI in tmux (is tmux installed?)")?;
    let pid = wait_attached(&tmux)?;
    interrupt::sleep(STARTUP)?;
    eprintln!("bench: TUI (pid {pid}): measuring {window:?} from a first burst of drops");
    let first = measure_window(pid, method, window, Load::Burst(target))?;
    eprintln!("bench: TUI: measuring {window:?} with no drops");
    let idle = measure_window(pid, method, window, Load::Nothing)?;
    eprintln!("bench: TUI: measuring {window:?} under the flood");
    let sender = Sender::start(target, None)?;
    let flood = interrupt::sleep(ADAPT)
        .and_then(|()| measure_window(pid, method, window, Load::Flood(&sender)));
    sender.stop()?;
    let flood = flood?;
    quit(&tmux, pid);
    Ok(TuiCost { first, idle, flood })
}

/// Waits for the pane's dropscope to hold its BPF programs; returns its pid.
fn wait_attached(tmux: &TmuxSession) -> anyhow::Result<u32> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        interrupt::sleep(Duration::from_millis(200))?;
        let pid = tmux.pane_pid()?;
        let attached = procfs::comm(pid).as_deref() == Some("dropscope")
            && procfs::prog_stats(pid).is_ok_and(|p| !p.is_empty());
        if attached {
            return Ok(pid);
        }
        if Instant::now() >= until {
            let screen = tmux.screen().unwrap_or_default();
            bail!(
                "the TUI did not attach within 30 s; its screen:\n{}",
                screen.trim()
            );
        }
    }
}

fn measure_window(
    pid: u32,
    method: Method,
    window: Duration,
    load: Load<'_>,
) -> anyhow::Result<Window> {
    let drops = (method == Method::Perf)
        .then(|| syscount::start_drops(window))
        .transpose()?;
    let calls = syscount::start(method, pid, window)?;
    let u0 = procfs::Usage::read(pid)?;
    let mut sent = match load {
        Load::Nothing => 0,
        Load::Burst(target) => {
            // Let the counters start before the burst.
            interrupt::sleep(Duration::from_millis(300))?;
            flood::run_for(target, BURST)?.sent
        }
        Load::Flood(sender) => sender.sent_so_far(),
    };
    let counts = calls.finish()?;
    let u1 = procfs::Usage::read(pid)?;
    if let Load::Flood(sender) = load {
        sent = sender.sent_so_far() - sent;
    }
    let drops = drops.map(syscount::finish_drops).transpose()?;
    Ok(Window {
        secs: u1.at.duration_since(u0.at).as_secs_f64(),
        count_secs: window.as_secs_f64(),
        syscalls: counts.all,
        bpf_syscalls: counts.bpf,
        ctx_switches: u1.ctx_switches.saturating_sub(u0.ctx_switches),
        cpu_ticks: u1.cpu_ticks.saturating_sub(u0.cpu_ticks),
        drops,
        sent,
    })
}

/// Presses `q` and waits briefly for the TUI to exit (the session guard kills it otherwise).
fn quit(tmux: &TmuxSession, pid: u32) {
    if tmux.send_keys("q").is_err() {
        return;
    }
    let until = Instant::now() + Duration::from_secs(5);
    while procfs::comm(pid).is_some() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
