//! Drop-rate loss and BPF cost: interleaved rounds in which every configuration floods once (the
//! order rotated each round), with nothing attached, with dropscope in several modes, and with the
//! per-drop stack aggregation peers use (bpftrace).
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{
    child::Proc,
    flood::{self, Flood, Sender, Target},
    interrupt, procfs,
};

/// The peers' one-liner: a kernel stack captured and aggregated on every drop.
pub const BPFTRACE_PROG: &str = "tracepoint:skb:kfree_skb { @[kstack, args->reason] = count(); }";
/// Time for a probe to settle after it says it is attached.
const SETTLE: Duration = Duration::from_millis(500);
/// Time for the last datagrams' softirq work to finish before the counter stops.
const DRAIN: Duration = Duration::from_millis(300);

/// dropscope's first "attached" line, e.g. which probe it uses.
static ATTACH_LINE: OnceLock<String> = OnceLock::new();

/// The probe dropscope said it attached (e.g. `tp_btf/kfree_skb`), if it ran.
pub fn probe_kind() -> Option<String> {
    let line = ATTACH_LINE.get()?;
    let kind = line.split(" with ").nth(1)?.split_whitespace().next()?;
    Some(kind.trim_end_matches([';', ',']).to_string())
}

/// What is attached while the sender floods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    Nothing,
    NoStacks,
    Stacks,
    Bpftrace,
    StatsNoStacks,
    StatsStacks,
}

impl Config {
    /// Its name in the output.
    pub fn label(self) -> &'static str {
        match self {
            Self::Nothing => "nothing attached",
            Self::NoStacks => "dropscope --no-stacks",
            Self::Stacks => "dropscope (stacks, default budget)",
            Self::Bpftrace => "bpftrace @[kstack, reason] = count()",
            Self::StatsNoStacks => "dropscope --no-stacks --bpf-stats",
            Self::StatsStacks => "dropscope --bpf-stats (stacks)",
        }
    }

    /// dropscope's flags, for the dropscope configurations.
    fn dropscope_flags(self) -> Option<&'static [&'static str]> {
        match self {
            Self::Nothing | Self::Bpftrace => None,
            Self::NoStacks => Some(&["--no-stacks"]),
            Self::Stacks => Some(&[]),
            Self::StatsNoStacks => Some(&["--no-stacks", "--bpf-stats"]),
            Self::StatsStacks => Some(&["--bpf-stats"]),
        }
    }

    /// Whether BPF run-time statistics are on (so its rate is not a loss figure).
    pub fn bpf_stats(self) -> bool {
        matches!(self, Self::StatsNoStacks | Self::StatsStacks)
    }
}

/// dropscope's count of the flood's key, checked against what was sent.
#[derive(Clone, Copy, Debug)]
pub struct CountCheck {
    /// NO_SOCKET at __udp4_lib_rcv, as dropscope reported it.
    pub counted: u64,
    /// Whether the sum of keyed counts plus overflow equals the total.
    pub invariant: bool,
    pub overflow: u64,
}

/// BPF ns per run of the drop probe, and the runs measured.
#[derive(Clone, Copy, Debug)]
pub struct BpfCost {
    /// ns per run over the whole flood.
    pub ns: f64,
    /// ns per run over its second half.
    pub second_half_ns: f64,
    /// Runs over the whole flood.
    pub runs: u64,
}

/// One configuration's flood in one round.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub round: usize,
    pub config: Config,
    pub flood: Flood,
    pub count: Option<CountCheck>,
    pub bpf: Option<BpfCost>,
}

impl Run {
    /// Whether dropscope counted exactly the datagrams sent.
    pub fn exact(&self) -> Option<bool> {
        self.count.map(|c| c.counted == self.flood.sent)
    }
}

/// What the rounds need.
pub struct Setup {
    pub dropscope: PathBuf,
    pub target: Target,
    pub flood: Duration,
}

/// Runs `rounds` interleaved rounds of `configs`, the order rotated by one each round.
pub fn rounds(setup: &Setup, configs: &[Config], rounds: usize) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut order = configs.to_vec();
        order.rotate_left(round % configs.len().max(1));
        for config in order {
            interrupt::check()?;
            let run = one(setup, config, round)
                .with_context(|| format!("round {}: {}", round + 1, config.label()))?;
            progress(&run, rounds);
            runs.push(run);
        }
    }
    Ok(runs)
}

fn progress(run: &Run, rounds: usize) {
    let exact = match run.exact() {
        Some(true) => ", count exact",
        Some(false) => ", count NOT exact",
        None => "",
    };
    let ns = run
        .bpf
        .map(|b| {
            format!(
                ", {:.1} ns/drop ({:.1} in the 2nd half)",
                b.ns, b.second_half_ns
            )
        })
        .unwrap_or_default();
    eprintln!(
        "bench: round {}/{rounds}: {:<38} {:>10.0} datagrams/s{exact}{ns}",
        run.round + 1,
        run.config.label(),
        run.flood.rate()
    );
}

fn one(setup: &Setup, config: Config, round: usize) -> anyhow::Result<Run> {
    let run = |flood, count, bpf| Run {
        round,
        config,
        flood,
        count,
        bpf,
    };
    match config {
        Config::Nothing => Ok(run(flood::run_for(&setup.target, setup.flood)?, None, None)),
        Config::Bpftrace => Ok(run(with_bpftrace(setup)?, None, None)),
        _ => {
            let (flood, count, bpf) = with_dropscope(setup, config)?;
            Ok(run(flood, Some(count), bpf))
        }
    }
}

fn with_dropscope(
    setup: &Setup,
    config: Config,
) -> anyhow::Result<(Flood, CountCheck, Option<BpfCost>)> {
    let flags = config.dropscope_flags().unwrap_or_default();
    let mut proc = Proc::spawn(
        Command::new(&setup.dropscope)
            .args(["report", "--format", "json"])
            .args(flags),
        "dropscope report",
    )?;
    let line = proc.wait_line(|l| l.starts_with("dropscope:"), Duration::from_secs(30))?;
    let _ = ATTACH_LINE.set(line);
    interrupt::sleep(SETTLE)?;
    let before = procfs::prog_stats(proc.pid())?;
    let sender = Sender::start(&setup.target, Some(setup.flood))?;
    interrupt::sleep(setup.flood / 2)?;
    let middle = procfs::prog_stats(proc.pid())?;
    let flood = sender.wait()?;
    interrupt::sleep(DRAIN)?;
    let bpf = if config.bpf_stats() {
        let after = procfs::prog_stats(proc.pid())?;
        let (ns, runs) = procfs::ns_per_run(&before, &after)?;
        let (second_half_ns, _) = procfs::ns_per_run(&middle, &after)?;
        Some(BpfCost {
            ns,
            second_half_ns,
            runs,
        })
    } else {
        None
    };
    let out = proc.finish(Some(libc::SIGINT), Duration::from_secs(15))?;
    if !out.status.success() {
        bail!(
            "dropscope report failed ({}): {}",
            out.status,
            out.stderr.trim()
        );
    }
    Ok((flood, check_count(&out.stdout)?, bpf))
}

/// Reads the flood's key out of `dropscope report --format json`.
fn check_count(json: &str) -> anyhow::Result<CountCheck> {
    let v: Value = serde_json::from_str(json)
        .with_context(|| format!("parsing dropscope's JSON: {json:.200}"))?;
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    let total = num(&v, "total").context("JSON without total")?;
    let overflow = num(&v, "overflow").context("JSON without overflow")?;
    let drops = v
        .get("drops")
        .and_then(Value::as_array)
        .context("JSON without drops")?;
    let keyed: u64 = drops.iter().filter_map(|d| num(d, "count")).sum();
    let counted = drops
        .iter()
        .filter(|d| is_flood_key(d))
        .filter_map(|d| num(d, "count"))
        .sum();
    Ok(CountCheck {
        counted,
        invariant: keyed + overflow == total,
        overflow,
    })
}

fn is_flood_key(d: &Value) -> bool {
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default();
    s("reason") == "NO_SOCKET" && s("location").starts_with("__udp4_lib_rcv")
}

fn with_bpftrace(setup: &Setup) -> anyhow::Result<Flood> {
    let mut proc = Proc::spawn(
        Command::new("bpftrace").args(["-e", BPFTRACE_PROG]),
        "bpftrace",
    )?;
    proc.wait_line(|l| l.starts_with("Attaching"), Duration::from_secs(60))?;
    interrupt::sleep(SETTLE * 2)?;
    let flood = flood::run_for(&setup.target, setup.flood)?;
    proc.finish(Some(libc::SIGINT), Duration::from_secs(15))?;
    Ok(flood)
}

/// Whether bpftrace is on PATH.
pub fn have_bpftrace() -> bool {
    Command::new("bpftrace")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the dropscope binary exists.
pub fn check_binary(bin: &Path) -> anyhow::Result<()> {
    if !bin.is_file() {
        bail!(
            "{} is missing; build it with `cargo build --release -p dropscope`",
            bin.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_flood_key() {
        let json = r#"{"total": 12, "overflow": 0, "drops": [
            {"reason": "NO_SOCKET", "reason_code": 3, "location": "__udp4_lib_rcv+0x4bc", "count": 10},
            {"reason": "NOT_SPECIFIED", "reason_code": 2, "location": "x+0x1", "count": 2}]}"#;
        let c = check_count(json).ok();
        assert_eq!(c.map(|c| (c.counted, c.invariant)), Some((10, true)));
    }
}
