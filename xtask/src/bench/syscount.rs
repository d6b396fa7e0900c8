//! Counting another process's syscalls over a window: `perf stat` on `raw_syscalls:sys_enter`
//! (with a second counter filtered to the bpf() syscall), or `strace -c` where perf does not
//! work. Also counts the kernel's drops system-wide (`skb:kfree_skb`) over the same window.
use std::{
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{child::Proc, interrupt};

/// How syscalls are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Perf,
    Strace,
}

impl Method {
    /// perf if it can count the syscall tracepoint here, else strace, else nothing.
    pub fn detect() -> Option<Self> {
        if works(Command::new("perf").args(perf_stat_args(&["--", "true"]))) {
            Some(Self::Perf)
        } else if works(Command::new("strace").arg("-V")) {
            Some(Self::Strace)
        } else {
            None
        }
    }

    /// How the figures were obtained, for the output.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Perf => "perf stat -e raw_syscalls:sys_enter (bpf: --filter 'id == SYS_bpf')",
            Self::Strace => "strace -f -c (perf unavailable; strace slows the traced process)",
        }
    }
}

fn works(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}

fn perf_stat_args<'a>(rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["stat", "-x", ",", "-e", "raw_syscalls:sys_enter"];
    args.extend_from_slice(rest);
    args
}

/// Syscalls in a window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub all: u64,
    pub bpf: u64,
}

/// A count under way.
pub struct Pending {
    proc: Proc,
    method: Method,
    ends: Instant,
}

/// Starts counting `pid`'s syscalls (all threads) for `window`.
pub fn start(method: Method, pid: u32, window: Duration) -> anyhow::Result<Pending> {
    let pid_s = pid.to_string();
    let secs = format!("{:.3}", window.as_secs_f64());
    let bpf_filter = format!("id == {}", libc::SYS_bpf);
    let mut cmd = match method {
        Method::Perf => {
            let mut c = Command::new("perf");
            c.args(perf_stat_args(&[
                "-e",
                "raw_syscalls:sys_enter",
                "--filter",
                &bpf_filter,
                "-p",
                &pid_s,
                "--",
                "sleep",
                &secs,
            ]));
            c
        }
        Method::Strace => {
            let mut c = Command::new("strace");
            c.args(["-f", "-c", "-p", &pid_s]);
            c
        }
    };
    let proc = Proc::spawn(&mut cmd, "the syscall counter")?;
    Ok(Pending {
        proc,
        method,
        ends: Instant::now() + window,
    })
}

impl Pending {
    /// Waits for the window to end and returns the counts.
    pub fn finish(mut self) -> anyhow::Result<Counts> {
        interrupt::sleep(self.ends.saturating_duration_since(Instant::now()))?;
        match self.method {
            Method::Perf => {
                let out = self.proc.finish(None, Duration::from_secs(10))?;
                let counts = perf_counts(&out.stderr)?;
                match counts[..] {
                    [all, bpf, ..] => Ok(Counts { all, bpf }),
                    _ => bail!("perf stat printed no syscall counts: {}", out.stderr.trim()),
                }
            }
            Method::Strace => {
                let out = self
                    .proc
                    .finish(Some(libc::SIGINT), Duration::from_secs(10))?;
                strace_counts(&out.stderr)
            }
        }
    }
}

/// Starts counting every drop on the machine (the `skb:kfree_skb` tracepoint) for `window`.
pub fn start_drops(window: Duration) -> anyhow::Result<Proc> {
    let secs = format!("{:.3}", window.as_secs_f64());
    Proc::spawn(
        Command::new("perf").args([
            "stat",
            "-x",
            ",",
            "-a",
            "-e",
            "skb:kfree_skb",
            "--",
            "sleep",
            &secs,
        ]),
        "perf stat -e skb:kfree_skb",
    )
}

/// The drops counted by [`start_drops`].
pub fn finish_drops(mut proc: Proc) -> anyhow::Result<u64> {
    let out = proc.finish(None, Duration::from_secs(30))?;
    perf_counts(&out.stderr)?
        .first()
        .copied()
        .with_context(|| format!("perf stat printed no count: {}", out.stderr.trim()))
}

/// The counts of `perf stat -x ,` output, in event order.
fn perf_counts(stderr: &str) -> anyhow::Result<Vec<u64>> {
    stderr
        .lines()
        .filter(|l| l.split(',').nth(2).is_some_and(|e| e.contains(':')))
        .map(|l| {
            let v = l.split(',').next().unwrap_or_default();
            v.trim()
                .parse()
                .with_context(|| format!("perf stat could not count: {l}"))
        })
        .collect()
}

/// The `total` and `bpf` rows of an `strace -c` summary.
fn strace_counts(stderr: &str) -> anyhow::Result<Counts> {
    // Columns: % time, seconds, usecs/call, calls, [errors,] syscall.
    let calls = |name: &str| {
        stderr.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.last() == Some(&name))
                .then(|| f.get(3).and_then(|c| c.parse::<u64>().ok()))
                .flatten()
        })
    };
    let all = calls("total").with_context(|| format!("no strace summary: {}", stderr.trim()))?;
    Ok(Counts {
        all,
        bpf: calls("bpf").unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perf_csv() {
        let text = "428,,raw_syscalls:sys_enter,8903114,100.00,,\n51,,raw_syscalls:sys_enter,8903114,100.00,,\n";
        assert_eq!(perf_counts(text).ok(), Some(vec![428, 51]));
    }

    #[test]
    fn parses_strace_summary() {
        let text = "% time     seconds  usecs/call     calls    errors syscall\n\
                    ------ ----------- ----------- --------- --------- ----------------\n \
                    44.81    0.003892         432         9         9 futex\n  \
                    8.80    0.000764          15        50        40 bpf\n  \
                    2.86    0.000248           0       287           sched_yield\n\
                    ------ ----------- ----------- --------- --------- ----------------\n\
                    100.00    0.008686          19       437        50 total\n";
        let c = strace_counts(text).ok();
        assert_eq!(c.map(|c| (c.all, c.bpf)), Some((437, 50)));
    }
}
