//! `cargo xtask bench`: dropscope's benchmark. Floods real drops on loopback, inside a network
//! namespace it creates and always removes: a single-key flood (UDP to a closed port) and an
//! interleaved one (short runs of UDP and raw IP_NOPROTO packets from one thread). Reports, side
//! by side in one run, medians over interleaved rounds: drop-rate loss against nothing attached
//! (and against an empty program on the same hook and bpftrace's per-drop stacks), exact counts,
//! BPF ns per drop above the empty program's, the collector's cost per poll as keys grow, the
//! live TUI's own cost, flamegraph render time and recording size. Not part of `cargo xtask test`.
mod bpf;
mod breakdown;
mod child;
mod collector;
mod examples;
mod flood;
mod guards;
pub(crate) mod interrupt;
mod layers;
mod loss;
mod machine;
mod procfs;
mod recording;
mod report;
mod serve;
mod stats;
mod syscount;
mod tui;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::bail;
use dropscope_tests::Netns;

use self::{
    flood::{Kind, Target},
    guards::{DebugfsMount, ScratchDir},
    loss::Config,
    syscount::Method,
};

/// A figure, or why there is none.
pub enum Outcome<T> {
    Measured(T),
    Skipped(String),
}

/// Options of `cargo xtask bench` (as root; about 10 minutes with the defaults).
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Interleaved rounds; each runs every (flood, configuration) pair once, the order rotated.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=50))]
    rounds: u64,
    /// Seconds of flood per (flood, configuration) pair and round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
    flood_secs: u64,
    /// Seconds of each measurement window of the live TUI and `serve` (the default, 10, holds
    /// one reading of the kernel's counters, which both read every 10 s).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60))]
    window_secs: u64,
    /// Seconds of each measurement of the collector's cost (10, 1,000 and 10,000 live keys).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
    collector_secs: u64,
    /// Use the dropscope binary as it is (no set-up, no release build first).
    #[arg(long)]
    no_build: bool,
    /// Only the per-drop cost, step by step: the floors, each configuration, and the bench
    /// program with each step of its per-drop path taken out in turn (about 2 minutes a round).
    #[arg(long)]
    breakdown: bool,
    /// With --breakdown: write each program's translated and JIT-ed listing into this directory.
    #[arg(long, value_name = "DIR", requires = "breakdown")]
    dump: Option<PathBuf>,
    /// Only the per-drop cost of this build beside another dropscope binary (built with the
    /// bench feature, e.g. from an earlier commit) in the same interleaved rounds: counting,
    /// namespace and interface, and a drop filtered out, on both floods (about 90 s a round).
    #[arg(long, value_name = "BIN", conflicts_with_all = ["breakdown", "layers", "syscalls"])]
    against: Option<PathBuf>,
    /// Only the cost of reading the kernel's layer counters: `report` timed alone, then beside
    /// this many named namespaces of 10 veth devices each (about a minute).
    #[arg(long, value_name = "N", conflicts_with = "breakdown",
          value_parser = clap::value_parser!(u64).range(1..=256))]
    layers: Option<u64>,
    /// Only the live TUI's and `serve`'s own cost (syscalls, CPU), idle and under the flood
    /// (about 3 minutes).
    #[arg(long, conflicts_with_all = ["breakdown", "layers"])]
    syscalls: bool,
}

/// Renders a per-drop-only run (`--breakdown`, `--against`) from its plan and runs.
type Render = fn(&[(Kind, Config)], &[loss::Run]) -> String;

/// Runs the benchmark and prints its report on stdout (progress goes to stderr).
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let res = run_all(args);
    if interrupt::requested() {
        // The guards have run by now: namespace, session, mount and children are gone.
        eprintln!("bench: interrupted; everything it created was removed");
        std::process::exit(130);
    }
    res
}

fn run_all(args: BenchArgs) -> anyhow::Result<()> {
    if !crate::setup::is_root() {
        bail!(
            "the bench loads eBPF programs and creates a network namespace: run it as root \
             (e.g. `sudo -E cargo xtask bench`)"
        );
    }
    interrupt::install()?;
    let started = Instant::now();
    let root = crate::root();
    let mut build_errors = [None, None, None];
    if !args.no_build {
        crate::setup::all(false)?;
        crate::setup::bench_tools()?;
        // The floor program and synthetic keys are bench-only (never in a release binary).
        crate::cargo(&[
            "build",
            "--release",
            "--package",
            "dropscope",
            "--features",
            "bench",
        ])?;
        build_errors = examples::EXAMPLES.map(|name| examples::build(&root, name));
    }
    let target_dir = crate::target_dir();
    let dropscope = target_dir.join("release/dropscope");
    loss::check_binary(&dropscope)?;
    if let Some(n) = args.layers {
        let costs = layers::measure(&dropscope, n as usize, 10, Duration::from_secs(10))?;
        print!("{}", layers::render(&costs));
        return Ok(());
    }
    let scratch = ScratchDir::create("dsbench")?;
    let netns = Netns::create(&format!("dsbench-{}", std::process::id()))?;
    let target = Target {
        netns: netns.path(),
        cpu: flood::online_cpus() - 1,
        kind: Kind::Single,
    };
    let mut warnings = foreign_namespaces(&netns, Vec::new());
    warn_if_busy();
    if args.syscalls {
        let method = Method::detect();
        let window = Duration::from_secs(args.window_secs);
        let tui = measure_tui(&dropscope, &target, method, window)?;
        let serve = measure_serve(&root, &target_dir, &dropscope, &target, method, window)?;
        print!("{}", report::render_tui(method, &tui));
        print_serve(&serve, &tui);
        for w in &warnings {
            println!("\nwarning: {w}");
        }
        return Ok(());
    }
    // A bare name would be looked up in PATH; this build's own binary would measure nothing.
    let against = args
        .against
        .as_deref()
        .map(std::path::absolute)
        .transpose()?;
    if let Some(other) = &against {
        let same = |a: &Path, b: &Path| matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y);
        if same(other, &dropscope) {
            bail!(
                "--against {} is this build's own binary: give a build of another commit",
                other.display()
            );
        }
        loss::check_binary(other)?;
    }
    let setup = loss::Setup {
        dropscope: dropscope.clone(),
        target: target.clone(),
        flood: Duration::from_secs(args.flood_secs),
        sizes: args.breakdown || against.is_some(),
        dump: args.dump.clone(),
        against: against.clone(),
    };
    // The per-drop-only runs: their rounds, then the header and their own table.
    let per_drop_only =
        |what: String, plan: Vec<(Kind, Config)>, render: Render| -> anyhow::Result<()> {
            eprintln!(
                "bench: {what}: {} rounds x {} (flood, configuration) pairs, {} s of flood each",
                args.rounds,
                plan.len(),
                args.flood_secs
            );
            let before = machine::Snapshot::take();
            let runs = loss::rounds(&setup, &plan, args.rounds as usize)?;
            let busy = machine::others(&before, &machine::Snapshot::take());
            for line in header(&args, &target, &netns.name, started.elapsed(), &busy) {
                println!("{line}");
            }
            print!("{}", render(&plan, &runs));
            print!("{}", report::exact_line(&plan, &runs));
            Ok(())
        };
    if let Some(other) = &against {
        let what = format!("against {}", other.display());
        return per_drop_only(what, breakdown::against_plan(), breakdown::render_against);
    }
    if args.breakdown {
        return per_drop_only("breakdown".into(), breakdown::plan(), breakdown::render);
    }
    let (_debugfs, bpftrace_note) = prepare_bpftrace();
    let plan = plan(bpftrace_note.is_none());
    eprintln!(
        "bench: {} rounds x {} (flood, configuration) pairs, {} s of flood each",
        args.rounds,
        plan.len(),
        args.flood_secs
    );
    let before = machine::Snapshot::take();
    let runs = loss::rounds(&setup, &plan, args.rounds as usize)?;
    let busy = machine::others(&before, &machine::Snapshot::take());
    if busy.percent > BUSY_PERCENT {
        warnings.push(format!(
            "other processes were busy during the loss rounds ({}): the rates are noisy; \
             run the bench on a quiet machine",
            busy.describe()
        ));
    }
    let method = Method::detect();
    let collector = soft(collector::measure(
        &dropscope,
        &target,
        method,
        Duration::from_secs(args.collector_secs),
        flood::online_cpus(),
    ))?;
    let window = Duration::from_secs(args.window_secs);
    let tui = measure_tui(&dropscope, &target, method, window)?;
    let serve = measure_serve(&root, &target_dir, &dropscope, &target, method, window)?;
    eprintln!("bench: flamegraph render time, recording size and seek time (examples)");
    let [flame_error, record_error, history_error] = &build_errors;
    let flame = examples::flame(&root, &target_dir, flame_error.as_ref());
    let record_figures = examples::record(&root, &target_dir, record_error.as_ref());
    eprintln!("bench: recording at a steady flood");
    let recording = match recording::recording(&dropscope, &target, scratch.path()) {
        Ok(outcome) => outcome,
        Err(e) if interrupt::requested() => return Err(e),
        Err(e) => Outcome::Skipped(format!("failed: {e:#}")),
    };
    warnings = foreign_namespaces(&netns, warnings);
    let results = report::Results {
        header: header(&args, &target, &netns.name, started.elapsed(), &busy),
        plan,
        runs,
        bpftrace_note,
        method,
        collector,
        tui,
        flame,
        record_figures,
        recording,
        warnings,
    };
    print!("{}", report::render(&results));
    print_serve(&serve, &results.tui);
    eprintln!("bench: history sizes and a generated week (example)");
    print!(
        "{}",
        examples::history(&root, &target_dir, history_error.as_ref())
    );
    Ok(())
}

/// Section 7 of the report: `serve`'s cost beside the TUI's.
fn print_serve(serve: &Outcome<serve::ServeCost>, tui: &Outcome<tui::TuiCost>) {
    match serve {
        Outcome::Measured(cost) => {
            let tui = match tui {
                Outcome::Measured(t) => Some(t),
                Outcome::Skipped(_) => None,
            };
            print!("\n7. {}", serve::render(cost, tui));
        }
        Outcome::Skipped(why) => println!("\n7. dropscope serve: SKIPPED: {why}"),
    }
}

/// The (flood, configuration) pairs of the loss rounds. The interleaved flood leaves out
/// bpftrace and stacks with BPF statistics (no target depends on them).
fn plan(bpftrace: bool) -> Vec<(Kind, Config)> {
    let mut single = vec![
        Config::Nothing,
        Config::Floor,
        Config::NoStacks,
        Config::Stacks,
    ];
    if bpftrace {
        single.extend([Config::Bpftrace, Config::BpftraceCount]);
    }
    single.extend([
        Config::StatsBare,
        Config::StatsFloor,
        Config::StatsCounting,
        Config::StatsNoStacks,
        Config::StatsProtocol,
        Config::StatsHeaders,
        Config::StatsFiltered,
        Config::StatsStacks,
    ]);
    let interleaved = [
        Config::Nothing,
        Config::Floor,
        Config::NoStacks,
        Config::Stacks,
        Config::StatsBare,
        Config::StatsFloor,
        Config::StatsCounting,
        Config::StatsNoStacks,
    ];
    single
        .into_iter()
        .map(|c| (Kind::Single, c))
        .chain(interleaved.into_iter().map(|c| (Kind::Interleaved, c)))
        .collect()
}

/// Makes bpftrace usable (debugfs) if it is installed; otherwise says why it is skipped.
fn prepare_bpftrace() -> (Option<DebugfsMount>, Option<String>) {
    if !loss::have_bpftrace() {
        return (
            None,
            Some("SKIPPED: bpftrace is not installed (`apt-get install -y bpftrace`)".into()),
        );
    }
    match DebugfsMount::ensure() {
        Ok(mount) => (mount, None),
        Err(e) => (None, Some(format!("SKIPPED: {e:#}"))),
    }
}

fn measure_tui(
    dropscope: &Path,
    target: &Target,
    method: Option<Method>,
    window: Duration,
) -> anyhow::Result<Outcome<tui::TuiCost>> {
    let Some(method) = method else {
        return Ok(Outcome::Skipped(
            "neither perf nor strace can count syscalls here".into(),
        ));
    };
    let has_tmux = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_tmux {
        return Ok(Outcome::Skipped(
            "tmux is not installed (`apt-get install -y tmux`)".into(),
        ));
    }
    soft(tui::measure(dropscope, target, method, window))
}

/// `dropscope serve` scraped once a second, idle and under the flood, and the scrape of a
/// 10,000-series snapshot (an example), beside the TUI's cost.
fn measure_serve(
    root: &Path,
    target_dir: &Path,
    dropscope: &Path,
    target: &Target,
    method: Option<Method>,
    window: Duration,
) -> anyhow::Result<Outcome<serve::ServeCost>> {
    let Some(method) = method else {
        return Ok(Outcome::Skipped(
            "neither perf nor strace can count syscalls here".into(),
        ));
    };
    let build_error = serve::build_example(root);
    let series = serve::series_example(target_dir, build_error.as_ref());
    soft(serve::measure(dropscope, target, method, window, series))
}

/// A failed measurement becomes a skipped one with its reason, unless the user interrupted.
fn soft<T>(res: anyhow::Result<T>) -> anyhow::Result<Outcome<T>> {
    match res {
        Ok(v) => Ok(Outcome::Measured(v)),
        Err(e) if interrupt::requested() => Err(e),
        Err(e) => Ok(Outcome::Skipped(format!("failed: {e:#}"))),
    }
}

/// Adds a warning when other network namespaces exist (their traffic can add drops).
fn foreign_namespaces(ours: &Netns, mut warnings: Vec<String>) -> Vec<String> {
    let others = guards::other_namespaces(&ours.name);
    if !others.is_empty() && warnings.is_empty() {
        warnings.push(format!(
            "other network namespaces exist ({}): their traffic shares the CPUs and could add \
             drops at the same kernel location",
            others.join(", ")
        ));
    }
    warnings
}

/// Other processes' CPU use (percent of the machine) above which the figures are called noisy.
const BUSY_PERCENT: f64 = 5.0;

/// Says so on stderr when other processes keep the machine busy before the bench starts.
fn warn_if_busy() {
    let a = machine::Snapshot::take();
    std::thread::sleep(Duration::from_secs(1));
    let busy = machine::others(&a, &machine::Snapshot::take());
    if busy.percent > BUSY_PERCENT {
        eprintln!(
            "bench: warning: the machine is busy ({}); the figures will be noisy",
            busy.describe()
        );
    }
}

fn header(
    args: &BenchArgs,
    target: &Target,
    netns: &str,
    took: Duration,
    busy: &machine::Busy,
) -> Vec<String> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        format!(
            "dropscope bench: kernel {}, {} CPUs, {}",
            kernel.trim(),
            flood::online_cpus(),
            loss::probe_kind().map_or_else(|| "probe unknown".into(), |p| format!("probe {p}"))
        ),
        format!(
            "floods: 1 sender thread pinned to CPU {}, in namespace {netns}: single-key (UDP to a \
             closed port on 127.0.0.1) and interleaved (runs of {} UDP datagrams and {} raw \
             IP_NOPROTO packets, alternating)",
            target.cpu,
            flood::INTERLEAVE_RUN,
            flood::INTERLEAVE_RUN,
        ),
        format!(
            "{} s per (flood, configuration) pair, {} interleaved rounds (order rotated); \
             bench took {:.0} s",
            args.flood_secs,
            args.rounds,
            took.as_secs_f64()
        ),
        format!(
            "other processes during the loss rounds: {}",
            busy.describe()
        ),
    ]
}
