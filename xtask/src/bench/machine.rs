//! How busy the machine was apart from the bench: CPU time that other user processes used
//! between two snapshots of /proc (kernel threads, which do the flood's softirq work, are left out).
use std::{collections::HashMap, time::Instant};

use super::{flood, procfs};

/// PF_KTHREAD in /proc/<pid>/stat's flags.
const PF_KTHREAD: u64 = 0x0020_0000;

/// CPU ticks per user process at one instant.
pub struct Snapshot {
    at: Instant,
    ticks: HashMap<u32, (String, u64)>,
}

impl Snapshot {
    /// Reads every process's CPU time now.
    pub fn take() -> Self {
        let ticks = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| Some((pid, user_process_ticks(pid)?)))
            .collect();
        Self {
            at: Instant::now(),
            ticks,
        }
    }
}

/// Other processes' CPU use between two snapshots.
pub struct Busy {
    /// Percent of all the machine's CPUs.
    pub percent: f64,
    /// The busiest processes, in percent of one CPU.
    pub top: Vec<(String, f64)>,
}

/// What processes other than this one and its parent (cargo) used between `a` and `b`.
pub fn others(a: &Snapshot, b: &Snapshot) -> Busy {
    let me = std::process::id();
    // SAFETY: getppid has no preconditions.
    let parent = u32::try_from(unsafe { libc::getppid() }).unwrap_or(0);
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let per_core = |ticks: u64| ticks as f64 / procfs::ticks_per_sec() / secs * 100.0;
    let mut top: Vec<(String, f64)> = b
        .ticks
        .iter()
        .filter(|(pid, _)| **pid != me && **pid != parent)
        .filter_map(|(pid, (comm, t1))| {
            let t0 = a.ticks.get(pid).map_or(0, |(_, t)| *t);
            Some((comm.clone(), per_core(t1.checked_sub(t0)?)))
        })
        .filter(|(_, pct)| *pct > 0.0)
        .collect();
    top.sort_by(|x, y| y.1.total_cmp(&x.1));
    let percent = top.iter().map(|(_, p)| p).sum::<f64>() / flood::online_cpus() as f64;
    top.truncate(3);
    Busy { percent, top }
}

impl Busy {
    /// A one-line description.
    pub fn describe(&self) -> String {
        let top: Vec<String> = self
            .top
            .iter()
            .filter(|(_, p)| *p >= 1.0)
            .map(|(c, p)| format!("{c} {p:.0}%"))
            .collect();
        if top.is_empty() {
            format!("{:.1}% of the machine's CPU", self.percent)
        } else {
            format!(
                "{:.1}% of the machine's CPU (busiest, in % of one CPU: {})",
                self.percent,
                top.join(", ")
            )
        }
    }
}

/// A user process's name and utime + stime; `None` for kernel threads and vanished processes.
fn user_process_ticks(pid: u32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields from 3 on: flags is field 9, utime 14, stime 15.
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    if num(6)? & PF_KTHREAD != 0 {
        return None;
    }
    Some((comm, num(11)? + num(12)?))
}
