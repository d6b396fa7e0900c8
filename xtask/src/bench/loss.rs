//! Drop-rate loss and BPF cost: interleaved rounds in which every (flood, configuration) pair runs
//! once (the order rotated each round), with nothing attached, with an empty program on the same
//! hook (the floor), with dropscope in several modes, and with the per-drop stack aggregation
//! peers use (bpftrace).
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{
    bpf,
    child::Proc,
    flood::{self, Flood, Kind, Sender, Target},
    interrupt, procfs,
};

/// The peers' one-liner: a kernel stack captured and aggregated on every drop.
pub const BPFTRACE_PROG: &str = "tracepoint:skb:kfree_skb { @[kstack, args->reason] = count(); }";
/// bpftrace's cheapest aggregation of the same drops: a count per (reason, location).
pub const BPFTRACE_COUNT: &str =
    "tracepoint:skb:kfree_skb { @[args->reason, args->location] = count(); }";
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
    Floor,
    NoStacks,
    Stacks,
    Bpftrace,
    /// bpftrace's own in-kernel count by reason and location, no stack.
    BpftraceCount,
    /// The emptiest program the kernel takes (`r0 = 0; exit`, loaded by the bench itself).
    StatsBare,
    /// The bare floor plus [`CLOCK_READS`] calls of `bpf_ktime_get_ns` (what a clock read
    /// costs here: the run statistics take two per run).
    StatsClock,
    StatsFloor,
    StatsCounting,
    /// Namespace and interface, named (the same whatever the default grouping).
    StatsNoStacks,
    /// Namespace, interface and protocol.
    StatsProtocol,
    StatsHeaders,
    StatsFiltered,
    StatsStacks,
    /// The default `--by` (no `--by` given), `--no-stacks`: with the socket, where a drop has one.
    StatsDefaults,
    /// The bench program over a base configuration, with one step taken out (`None`: nothing).
    Skip(Base, Option<&'static str>),
    /// Another dropscope binary (`--against`) in a base configuration, beside this one's.
    Against(Base),
}

/// What the bench program with a step taken out counts (its flags besides the step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// `--by reason,location`.
    Counting,
    /// The default `--by`.
    Default,
    /// Everything filtered out by reason.
    Filtered,
    /// Each binary's own default `--by` (no `--by` given): `--against` an earlier build
    /// compares the defaults of the two, e.g. with the socket and without.
    Defaults,
}

impl Base {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Self::Counting => &["--by", "reason,location"],
            Self::Default => &["--by", "reason,location,netns,device"],
            Self::Filtered => &["--reason", "NETFILTER_DROP"],
            Self::Defaults => &[],
        }
    }

    /// Its name in the output.
    pub fn label(self) -> &'static str {
        match self {
            Self::Counting => "counting",
            Self::Default => "namespace, interface",
            Self::Filtered => "filtered out",
            Self::Defaults => "default --by",
        }
    }

    /// The configuration of the real program it stands beside.
    pub fn real(self) -> Config {
        match self {
            Self::Counting => Config::StatsCounting,
            Self::Default => Config::StatsNoStacks,
            Self::Filtered => Config::StatsFiltered,
            Self::Defaults => Config::StatsDefaults,
        }
    }
}

impl Config {
    /// Its name in the output.
    pub fn label(self) -> String {
        match self {
            Self::Nothing => "nothing attached",
            Self::Floor => "empty tp_btf program (floor)",
            Self::NoStacks => "dropscope --no-stacks",
            Self::Stacks => "dropscope (stacks, default budget)",
            Self::Bpftrace => "bpftrace @[kstack, reason] = count()",
            Self::BpftraceCount => "bpftrace @[reason, location] = count()",
            Self::StatsBare => "bare floor (r0 = 0; exit) --bpf-stats",
            Self::StatsClock => "bare floor + 4 bpf_ktime_get_ns calls",
            Self::StatsFloor => "empty tp_btf program --bpf-stats",
            Self::StatsCounting => "counting only (--by reason,location)",
            Self::StatsNoStacks => "namespace, interface (--no-stacks)",
            Self::StatsProtocol => "+ protocol (reads the IP header)",
            Self::StatsHeaders => "+ protocol,port (reads headers)",
            Self::StatsFiltered => "filtered out in the kernel",
            Self::StatsStacks => "dropscope --bpf-stats (stacks)",
            Self::StatsDefaults => "default --by (--no-stacks)",
            Self::Skip(base, None) => return format!("bench program, {}", base.label()),
            Self::Skip(base, Some(step)) => return format!("{}, without {step}", base.label()),
            Self::Against(base) => return format!("{}, the --against binary", base.label()),
        }
        .to_string()
    }

    /// dropscope's flags, for the dropscope configurations.
    fn dropscope_flags(self) -> Option<Vec<&'static str>> {
        let flags: &[&str] = match self {
            Self::Nothing
            | Self::Bpftrace
            | Self::BpftraceCount
            | Self::StatsBare
            | Self::StatsClock => return None,
            Self::Floor => &["--probe", "floor", "--no-stacks"],
            Self::NoStacks => &["--no-stacks"],
            Self::Stacks => &[],
            Self::StatsFloor => &["--probe", "floor", "--no-stacks", "--bpf-stats"],
            Self::StatsCounting => &["--no-stacks", "--bpf-stats", "--by", "reason,location"],
            Self::StatsNoStacks => &[
                "--no-stacks",
                "--bpf-stats",
                "--by",
                "reason,location,netns,device",
            ],
            Self::StatsProtocol => &[
                "--no-stacks",
                "--bpf-stats",
                "--by",
                "reason,location,netns,device,protocol",
            ],
            Self::StatsHeaders => &[
                "--no-stacks",
                "--bpf-stats",
                "--by",
                "reason,location,netns,device,protocol,port",
            ],
            // The flood's reasons are NO_SOCKET and IP_NOPROTO: all filtered out.
            Self::StatsFiltered => &["--no-stacks", "--bpf-stats", "--reason", "NETFILTER_DROP"],
            Self::StatsStacks => &["--bpf-stats"],
            Self::StatsDefaults => &["--no-stacks", "--bpf-stats"],
            Self::Against(base) => {
                let mut flags = vec!["--no-stacks", "--bpf-stats"];
                flags.extend_from_slice(base.flags());
                return Some(flags);
            }
            Self::Skip(base, step) => {
                let mut flags = vec!["--no-stacks", "--bpf-stats", "--bench-skip"];
                flags.push(step.unwrap_or("none"));
                flags.extend_from_slice(base.flags());
                return Some(flags);
            }
        };
        Some(flags.to_vec())
    }

    /// Whether BPF run-time statistics are on (so its rate is not a loss figure).
    pub fn bpf_stats(self) -> bool {
        !matches!(
            self,
            Self::Nothing
                | Self::Floor
                | Self::NoStacks
                | Self::Stacks
                | Self::Bpftrace
                | Self::BpftraceCount
        )
    }

    /// Whether it counts nothing of the flood (the empty programs, or everything filtered out).
    pub fn floor(self) -> bool {
        matches!(
            self,
            Self::Floor
                | Self::StatsBare
                | Self::StatsClock
                | Self::StatsFloor
                | Self::StatsFiltered
                | Self::Skip(Base::Filtered, _)
                | Self::Against(Base::Filtered)
        )
    }

    /// Whether its counts must be exact (a step taken out may make them wrong on purpose).
    pub fn checks_count(self) -> bool {
        !self.floor() && !matches!(self, Self::Skip(_, Some(_)))
    }
}

/// dropscope's counts of the flood's keys, checked against what was sent.
#[derive(Clone, Copy, Debug)]
pub struct CountCheck {
    /// NO_SOCKET at __udp4_lib_rcv, as dropscope reported it.
    pub udp: u64,
    /// IP_NOPROTO (any location), as dropscope reported it.
    pub raw: u64,
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
    /// The program's instructions (breakdown runs only; `None` where they could not be read).
    pub size: Option<Option<Size>>,
}

/// The size of a loaded program.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Translated instructions (after the verifier removed dead code).
    pub xlated: usize,
    /// x86-64 instructions of the JIT's code (`None` without objdump).
    pub jited: Option<usize>,
    pub jited_bytes: usize,
}

/// The instructions of program `id`, and their listings written to the dump directory if any.
fn program_size(id: u64, config: Config, dump: Option<&Path>) -> Option<Size> {
    let image = bpf::image(u32::try_from(id).ok()?).ok()?;
    let scratch = std::env::temp_dir();
    let listing = image.jited_listing(&scratch);
    if let Some(dir) = dump {
        let name = config
            .label()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>();
        let _ = std::fs::create_dir_all(dir);
        if let Some(lines) = &listing {
            let _ = std::fs::write(dir.join(format!("{name}.jited.txt")), lines.join("\n"));
        }
        if let Ok(out) = Command::new("bpftool")
            .args(["prog", "dump", "xlated", "id", &id.to_string(), "linum"])
            .output()
        {
            let _ = std::fs::write(dir.join(format!("{name}.xlated.txt")), out.stdout);
        }
    }
    Some(Size {
        xlated: image.xlated_insns(),
        jited: listing.map(|l| l.len()),
        jited_bytes: image.jited.len(),
    })
}

/// One configuration's flood in one round.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub round: usize,
    pub kind: Kind,
    pub config: Config,
    pub flood: Flood,
    pub count: Option<CountCheck>,
    pub bpf: Option<BpfCost>,
}

impl Run {
    /// Whether dropscope counted exactly the packets sent, of each kind.
    pub fn exact(&self) -> Option<bool> {
        self.count
            .map(|c| c.udp == self.flood.sent - self.flood.raw && c.raw == self.flood.raw)
    }

    /// Counted minus sent, both kinds together.
    pub fn count_diff(&self) -> Option<i128> {
        self.count
            .map(|c| i128::from(c.udp + c.raw) - i128::from(self.flood.sent))
    }
}

/// What the rounds need.
pub struct Setup {
    pub dropscope: PathBuf,
    pub target: Target,
    pub flood: Duration,
    /// Read each program's size (the breakdown).
    pub sizes: bool,
    /// Where to write each program's listings (translated and JIT-ed), if anywhere.
    pub dump: Option<PathBuf>,
    /// The other dropscope binary of [`Config::Against`] (`--against`).
    pub against: Option<PathBuf>,
}

/// Runs `rounds` interleaved rounds of every (flood, configuration) pair in `plan`, the order
/// rotated by one each round.
pub fn rounds(setup: &Setup, plan: &[(Kind, Config)], rounds: usize) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut order = plan.to_vec();
        order.rotate_left(round % plan.len().max(1));
        for (kind, config) in order {
            interrupt::check()?;
            let run = one(setup, kind, config, round).with_context(|| {
                format!("round {}: {}, {}", round + 1, kind.label(), config.label())
            })?;
            progress(&run, rounds);
            runs.push(run);
        }
    }
    Ok(runs)
}

fn progress(run: &Run, rounds: usize) {
    let exact = match run.exact() {
        Some(true) => ", counts exact",
        Some(false) => ", counts NOT exact",
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
        "bench: round {}/{rounds}: {:<17} {:<38} {:>10.0} packets/s{exact}{ns}",
        run.round + 1,
        run.kind.label(),
        run.config.label(),
        run.flood.rate()
    );
}

fn one(setup: &Setup, kind: Kind, config: Config, round: usize) -> anyhow::Result<Run> {
    let target = setup.target.with_kind(kind);
    let run = |flood, count, bpf| Run {
        round,
        kind,
        config,
        flood,
        count,
        bpf,
    };
    match config {
        Config::Nothing => Ok(run(flood::run_for(&target, setup.flood)?, None, None)),
        Config::Bpftrace => Ok(run(
            with_bpftrace(BPFTRACE_PROG, &target, setup.flood)?,
            None,
            None,
        )),
        Config::BpftraceCount => Ok(run(
            with_bpftrace(BPFTRACE_COUNT, &target, setup.flood)?,
            None,
            None,
        )),
        Config::StatsBare | Config::StatsClock => {
            let (flood, bpf) = with_bare_floor(setup, &target, config)?;
            Ok(run(flood, None, Some(bpf)))
        }
        _ => {
            let (flood, count, bpf) = with_dropscope(setup, &target, config)?;
            Ok(run(flood, count.filter(|_| config.checks_count()), bpf))
        }
    }
}

fn with_dropscope(
    setup: &Setup,
    target: &Target,
    config: Config,
) -> anyhow::Result<(Flood, Option<CountCheck>, Option<BpfCost>)> {
    let flags = config.dropscope_flags().unwrap_or_default();
    let bin = match (config, &setup.against) {
        (Config::Against(_), Some(other)) => other,
        (Config::Against(_), None) => anyhow::bail!("{} without --against", config.label()),
        _ => &setup.dropscope,
    };
    let mut proc = Proc::spawn(
        Command::new(bin)
            .args(["report", "--format", "json"])
            .args(&flags),
        "dropscope report",
    )?;
    let line = proc.wait_line(
        |l| l.starts_with("dropscope: counting"),
        Duration::from_secs(30),
    )?;
    if !config.floor() {
        let _ = ATTACH_LINE.set(line);
    }
    interrupt::sleep(SETTLE)?;
    let before = procfs::prog_stats(proc.pid())?;
    let sender = Sender::start(target, Some(setup.flood))?;
    interrupt::sleep(setup.flood / 2)?;
    let middle = procfs::prog_stats(proc.pid())?;
    let flood = sender.wait()?;
    interrupt::sleep(DRAIN)?;
    let bpf = if config.bpf_stats() {
        let after = procfs::prog_stats(proc.pid())?;
        let (ns, runs, id) = procfs::ns_per_run(&before, &after)?;
        let (second_half_ns, ..) = procfs::ns_per_run(&middle, &after)?;
        Some(BpfCost {
            ns,
            second_half_ns,
            runs,
            size: setup
                .sizes
                .then(|| program_size(id, config, setup.dump.as_deref())),
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
    Ok((flood, Some(check_count(&out.stdout)?), bpf))
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
    let sum = |key: fn(&Value) -> bool| {
        drops
            .iter()
            .filter(|d| key(d))
            .filter_map(|d| num(d, "count"))
            .sum()
    };
    Ok(CountCheck {
        udp: sum(is_udp_key),
        raw: sum(is_raw_key),
        invariant: keyed + overflow == total,
        overflow,
    })
}

fn field<'a>(d: &'a Value, k: &str) -> &'a str {
    d.get(k).and_then(Value::as_str).unwrap_or_default()
}

/// The single-key flood's key (and the UDP half of the interleaved flood's).
fn is_udp_key(d: &Value) -> bool {
    field(d, "reason") == "NO_SOCKET" && field(d, "location").starts_with("__udp4_lib_rcv")
}

/// The raw half of the interleaved flood's keys.
fn is_raw_key(d: &Value) -> bool {
    field(d, "reason") == "IP_NOPROTO"
}

/// Clock reads of [`Config::StatsClock`].
pub const CLOCK_READS: usize = 4;

/// The bare floor (or [`Config::StatsClock`]) attached, with run statistics on, while the
/// sender floods.
fn with_bare_floor(
    setup: &Setup,
    target: &Target,
    config: Config,
) -> anyhow::Result<(Flood, BpfCost)> {
    let _stats = bpf::stats_on()?;
    let reads = if config == Config::StatsClock {
        CLOCK_READS
    } else {
        0
    };
    let prog = bpf::BareFloor::attach(reads)?;
    interrupt::sleep(SETTLE)?;
    let me = std::process::id();
    let mine = |all: Vec<procfs::ProgStat>| -> Vec<procfs::ProgStat> {
        all.into_iter()
            .filter(|p| procfs::prog_fd_id(me, prog.fd()) == Some(p.id))
            .collect()
    };
    let before = mine(procfs::prog_stats(me)?);
    let sender = Sender::start(target, Some(setup.flood))?;
    interrupt::sleep(setup.flood / 2)?;
    let middle = mine(procfs::prog_stats(me)?);
    let flood = sender.wait()?;
    interrupt::sleep(DRAIN)?;
    let after = mine(procfs::prog_stats(me)?);
    let (ns, runs, id) = procfs::ns_per_run(&before, &after)?;
    let (second_half_ns, ..) = procfs::ns_per_run(&middle, &after)?;
    let size = setup
        .sizes
        .then(|| program_size(id, config, setup.dump.as_deref()));
    Ok((
        flood,
        BpfCost {
            ns,
            second_half_ns,
            runs,
            size,
        },
    ))
}

fn with_bpftrace(prog: &str, target: &Target, secs: Duration) -> anyhow::Result<Flood> {
    let mut proc = Proc::spawn(Command::new("bpftrace").args(["-e", prog]), "bpftrace")?;
    proc.wait_line(|l| l.starts_with("Attaching"), Duration::from_secs(60))?;
    interrupt::sleep(SETTLE * 2)?;
    let flood = flood::run_for(target, secs)?;
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
    let help = std::process::Command::new(bin)
        .args(["report", "--bench-keys", "0", "--help"])
        .output();
    if !help.is_ok_and(|o| o.status.success()) {
        bail!(
            "{} is missing or was built without the bench feature; build it with `cargo build \
             --release -p dropscope --features bench`",
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
        assert_eq!(c.map(|c| (c.udp, c.raw, c.invariant)), Some((10, 0, true)));
    }

    #[test]
    fn reads_both_interleaved_keys() {
        let json = r#"{"total": 20, "overflow": 1, "drops": [
            {"reason": "NO_SOCKET", "reason_code": 3, "location": "__udp4_lib_rcv+0x4bc", "count": 10},
            {"reason": "IP_NOPROTO", "reason_code": 5, "location": "ip_protocol_deliver_rcu+0x1", "count": 8}]}"#;
        let c = check_count(json).ok();
        assert_eq!(c.map(|c| (c.udp, c.raw, c.invariant)), Some((10, 8, false)));
    }
}
