//! What /proc tells about another process: CPU time, context switches (all threads), and the
//! run statistics of the BPF programs it holds open (fdinfo of a BPF program fd).
use std::time::Instant;

use anyhow::{Context as _, bail};

/// A process's cumulative usage at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    pub at: Instant,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Voluntary plus non-voluntary context switches, summed over its threads.
    pub ctx_switches: u64,
}

impl Usage {
    /// Reads `pid`'s usage now.
    pub fn read(pid: u32) -> anyhow::Result<Self> {
        Ok(Self {
            at: Instant::now(),
            cpu_ticks: cpu_ticks(pid)?,
            ctx_switches: ctx_switches(pid)?,
        })
    }
}

/// Clock ticks per second (for /proc/<pid>/stat times).
pub fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // Fields after the command name (which may hold spaces) start at field 3, the state.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .with_context(|| format!("parsing {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("parsing field {} of {path}", i + 3))
    };
    // utime and stime are fields 14 and 15.
    Ok(field(11)? + field(12)?)
}

fn ctx_switches(pid: u32) -> anyhow::Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut sum = 0;
    for task in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let status = task
            .with_context(|| format!("listing {dir}"))?
            .path()
            .join("status");
        // A thread may exit between listing and reading.
        let Ok(text) = std::fs::read_to_string(&status) else {
            continue;
        };
        sum += ["voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"]
            .iter()
            .filter_map(|k| field_u64(&text, k))
            .sum::<u64>();
    }
    Ok(sum)
}

/// Run statistics of one BPF program, from fdinfo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgStat {
    pub id: u64,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The BPF programs `pid` holds open.
pub fn prog_stats(pid: u32) -> anyhow::Result<Vec<ProgStat>> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut progs = Vec::new();
    for fd in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let Ok(text) =
            std::fs::read_to_string(fd.with_context(|| format!("listing {dir}"))?.path())
        else {
            continue;
        };
        if let (Some(id), Some(run_time_ns), Some(run_cnt)) = (
            field_u64(&text, "prog_id:"),
            field_u64(&text, "run_time_ns:"),
            field_u64(&text, "run_cnt:"),
        ) {
            progs.push(ProgStat {
                id,
                run_time_ns,
                run_cnt,
            });
        }
    }
    Ok(progs)
}

/// The program's ns per run between two readings of `pid`'s programs: the program that ran
/// most, with its runs and its id.
pub fn ns_per_run(before: &[ProgStat], after: &[ProgStat]) -> anyhow::Result<(f64, u64, u64)> {
    let busiest = after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.id == a.id)?;
            Some((
                a.run_time_ns.saturating_sub(b.run_time_ns),
                a.run_cnt.saturating_sub(b.run_cnt),
                a.id,
            ))
        })
        .max_by_key(|&(_, runs, _)| runs);
    match busiest {
        Some((ns, runs, id)) if runs > 0 => Ok((ns as f64 / runs as f64, runs, id)),
        _ => bail!("no BPF program of the process ran (are BPF stats on?)"),
    }
}

/// The id of the BPF program behind `pid`'s file descriptor `fd`.
pub fn prog_fd_id(pid: u32, fd: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    field_u64(&text, "prog_id:")
}

/// The process's command name.
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn field_u64(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// Time `pid`'s threads have spent on a CPU, in ns (sum of `/proc/<pid>/task/*/schedstat`).
/// Threads that exited earlier are not included: read it while the threads live.
pub fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut sum = 0;
    for task in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let path = task.with_context(|| format!("listing {dir}"))?.path();
        // A thread may exit between listing and reading.
        let Ok(text) = std::fs::read_to_string(path.join("schedstat")) else {
            continue;
        };
        sum += text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .with_context(|| format!("parsing {}/schedstat: {text:?}", path.display()))?;
    }
    Ok(sum)
}
