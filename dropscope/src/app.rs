//! The commands: each wires a source (live probe or recording) to a consumer.
use std::{
    io::{IsTerminal, Write},
    path::Path,
    time::Duration,
};

use anyhow::{Context as _, bail};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::{
    cli::{Cli, Command, FlamegraphArgs, Format, GraphFormat, InputWindow, LiveArgs, ReportArgs},
    collector::{Collector, CollectorOptions, Stopper},
    explain::{self, Guide},
    flamegraph::{self, GraphMeta},
    kcounters::{self, KernelCounters, KernelView},
    model::{SessionInfo, Snapshot, window},
    outfile,
    probe::{Probe, ProbeOptions, reasons::ReasonTable},
    record, report, sanitize,
    source::Feed,
    tui,
};

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => live_tui(&cli.live, &cli.output_dir).await,
        Some(Command::Report(args)) => report_cmd(args).await,
        Some(Command::Reasons { format, btf }) => reasons_cmd(format, btf.as_deref()),
        Some(Command::Explain { name }) => explain_cmd(&name),
        Some(Command::Record {
            output,
            duration,
            force,
            live,
        }) => record_cmd(&live, &output, duration, force).await,
        Some(Command::Replay { file, output_dir }) => replay_cmd(&file, &output_dir).await,
        Some(Command::Flamegraph(args)) => flamegraph_cmd(args).await,
        Some(Command::Serve(args)) => crate::serve::run(&args).await,
    }
}

fn require_terminal(what: &str) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!(
            "{what} needs a terminal, and stdin/stdout is not one; \
             for text output use `dropscope report` (e.g. `dropscope report --duration 10s`)"
        );
    }
    Ok(())
}

/// Attaches the probe and starts the collector.
pub fn start_live(live: &LiveArgs) -> anyhow::Result<(Feed, Stopper)> {
    let opts = ProbeOptions {
        choice: live.probe,
        max_keys: live.max_keys,
        btf_path: live.btf.clone(),
        count_self_syscalls: live.count_syscalls,
        bench_keys: live.bench_keys,
        selection: live.select.clone(),
    };
    let probe = Probe::attach(&opts)?;
    let copts = CollectorOptions {
        interval: live.interval,
        stacks: !live.no_stacks,
        stack_budget: live.stack_budget,
        bpf_stats: live.bpf_stats,
        by: live.select.by.clone(),
    };
    Ok(Collector::spawn(probe, copts)?)
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, caught from the moment this is made (so that one
/// arriving right after the "counting" line still ends the command cleanly).
struct Interrupt {
    int: Signal,
    term: Signal,
    hup: Signal,
    quit: Signal,
}

impl Interrupt {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("installing a SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing a SIGTERM handler")?,
            hup: signal(SignalKind::hangup()).context("installing a SIGHUP handler")?,
            quit: signal(SignalKind::quit()).context("installing a SIGQUIT handler")?,
        })
    }

    /// Resolves after `duration` (never without one) or on SIGINT/SIGTERM/SIGHUP/SIGQUIT.
    async fn until(mut self, duration: Option<Duration>) {
        let timer = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = timer => {}
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
            _ = self.quit.recv() => {}
        }
    }
}

/// A path as shown on the terminal.
fn shown(path: &Path) -> String {
    sanitize::terminal(&path.to_string_lossy()).into_owned()
}

async fn live_tui(live: &LiveArgs, dir: &Path) -> anyhow::Result<()> {
    require_terminal("the live view")?;
    let (feed, stopper) = start_live(live)?;
    let opts = tui::TuiOptions {
        flamegraph_dir: dir.to_path_buf(),
        record_dir: dir.to_path_buf(),
        kernel_counters: true,
        filter: live.select.describe(),
    };
    // The TUI ends on `q`, a signal, or the feed closing; then the probe is detached, and a
    // collector failure, if that is what closed the feed, is reported.
    let res = tui::run(feed, opts).await;
    let collector = stopper.finish();
    res.and(collector)
}

/// Starts reading the kernel's drop counters; a failure is a warning, not an error.
fn start_counters(live: &LiveArgs) -> Option<KernelCounters> {
    match KernelCounters::start() {
        Ok(k) => Some(k.with_filter(live.select.describe())),
        Err(e) => {
            eprintln!("dropscope: warning: not reading the kernel's drop counters: {e:#}");
            None
        }
    }
}

/// Counts live until `duration` or a signal; returns the last snapshot and the session info,
/// and with `counters`, the kernel's drop counters read over the same window.
async fn count_live(
    live: &LiveArgs,
    duration: Option<Duration>,
    what: &str,
    counters: bool,
    mut on_snapshot: impl FnMut(&Snapshot, Option<&mut KernelCounters>) -> anyhow::Result<()>,
) -> anyhow::Result<(SessionInfo, Snapshot, Option<KernelCounters>)> {
    let interrupt = Interrupt::new()?;
    let (mut feed, stopper) = start_live(live)?;
    // The counters' window starts once the probe counts, before the line saying so.
    let mut kernel = if counters { start_counters(live) } else { None };
    eprintln!(
        "dropscope: counting drops with {}{what}; {}",
        feed.info.probe,
        match duration {
            Some(d) => format!("for {}, Ctrl-C ends early", humantime::format_duration(d)),
            None => "until Ctrl-C".into(),
        }
    );
    let _ = std::io::stderr().flush();
    let mut last = Snapshot::default();
    let wait = interrupt.until(duration);
    tokio::pin!(wait);
    loop {
        tokio::select! {
            s = feed.snapshots.recv() => match s {
                Some(s) => {
                    on_snapshot(&s, kernel.as_mut())?;
                    last = s;
                }
                None => {
                    stopper.finish()?;
                    bail!("the collector stopped unexpectedly");
                }
            },
            _ = &mut wait => break,
        }
    }
    // The collector sends one last snapshot, read right now, then closes the feed.
    stopper.stop();
    while let Some(s) = feed.snapshots.recv().await {
        last = s;
    }
    stopper.finish()?;
    if let Some(k) = &mut kernel {
        k.poll(&kcounters::drop_netns(&last));
    }
    Ok((feed.info, last, kernel))
}

/// The window of a recording: the snapshot at `to` minus the one at `from`.
fn recorded_window(
    w: &InputWindow,
) -> anyhow::Result<(SessionInfo, Snapshot, (Duration, Duration))> {
    let path = w.input.as_deref().context("no --input")?;
    let rec = record::open_input(path).with_context(|| format!("opening {}", shown(path)))?;
    for warning in rec.warnings() {
        eprintln!("dropscope: warning: {}: {warning}", shown(path));
    }
    let to = w.to.unwrap_or(rec.duration()).min(rec.duration());
    let from = w.from.unwrap_or_default();
    if from > to {
        bail!(
            "--from {} is after --to {}",
            humantime::format_duration(from),
            humantime::format_duration(to)
        );
    }
    let later = rec.snapshot_at(to)?;
    let snap = if from.is_zero() {
        later
    } else {
        window::between(&rec.snapshot_at(from)?, &later)
    };
    Ok((rec.info().clone(), snap, (from, to)))
}

async fn report_cmd(args: ReportArgs) -> anyhow::Result<()> {
    let (snap, seconds, kernel) = if args.window.input.is_some() {
        let (_, snap, (from, to)) = recorded_window(&args.window)?;
        (snap, (to - from).as_secs_f64(), None)
    } else {
        let mut next = args.every;
        let (format, every) = (args.format, args.every);
        let progress = |s: &Snapshot, k: Option<&mut KernelCounters>| -> anyhow::Result<()> {
            if let Some(at) = next.filter(|at| s.elapsed >= *at) {
                let kernel = k.map(|k| {
                    k.poll(&kcounters::drop_netns(s));
                    k.view(s)
                });
                print_report(s, s.elapsed.as_secs_f64(), format, true, kernel.as_ref())?;
                // The next report is due one period after this one (never in a burst).
                next = every.map(|d| (at + d).max(s.elapsed));
            }
            Ok(())
        };
        let (_, snap, kernel) = count_live(&args.live, args.duration, "", true, progress).await?;
        let secs = snap.elapsed.as_secs_f64();
        (snap, secs, kernel)
    };
    let kernel = kernel.map(|k| k.view(&snap));
    print_report(
        &snap,
        seconds,
        args.format,
        args.every.is_some(),
        kernel.as_ref(),
    )
}

/// Prints one report; `lines` puts a JSON report on one line (a stream of them is JSON Lines);
/// `kernel` adds the kernel's drop counters of the same window.
fn print_report(
    snap: &Snapshot,
    seconds: f64,
    format: Format,
    lines: bool,
    kernel: Option<&KernelView>,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => {
            report::write_table(snap, seconds, &mut out)?;
            if let Some(k) = kernel {
                report::write_kernel(k, &mut out)?;
            }
            if lines {
                writeln!(out)?;
            }
        }
        Format::Json => {
            let mut report = report::json(snap, seconds);
            if let Some(k) = kernel {
                report = report.with_kernel(k);
            }
            // Names from the kernel or a recording are written with risky characters escaped.
            let text = if lines {
                serde_json::to_string(&report)?
            } else {
                serde_json::to_string_pretty(&report)?
            };
            writeln!(out, "{}", sanitize::json(&text))?;
        }
    }
    out.flush()?;
    Ok(())
}

fn reasons_cmd(format: Format, btf: Option<&Path>) -> anyhow::Result<()> {
    let table = match btf {
        Some(path) => ReasonTable::from_btf_file(path)?,
        None => ReasonTable::from_running_kernel()?,
    };
    let guide = Guide::builtin();
    // Written, not printed: a closed pipe (`| head`) ends the command with an error, not a panic.
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => {
            let w = table.iter().map(|(_, n)| n.len()).max().unwrap_or(4);
            writeln!(out, "{:>10}  {:<w$}  SUMMARY", "VALUE", "NAME")?;
            for (v, n) in table.iter() {
                let name = sanitize::terminal(n);
                writeln!(out, "{v:>10}  {name:<w$}  {}", guide.summary(n))?;
            }
            writeln!(
                out,
                "({} reasons, read from {:?})",
                table.iter().count(),
                table.source
            )?;
        }
        Format::Json => {
            let rows: Vec<_> = table
                .iter()
                .map(|(v, n)| {
                    let summary = guide.summary(n);
                    serde_json::json!({ "code": v, "name": n, "summary": summary })
                })
                .collect();
            let text = serde_json::to_string_pretty(&rows)?;
            writeln!(out, "{}", sanitize::json(&text))?;
        }
    }
    Ok(())
}

fn explain_cmd(name: &str) -> anyhow::Result<()> {
    let e = Guide::builtin().explain(name);
    let counters = kcounters::map::counters_for(&e.name);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", explain::render(&e, &counters))?;
    if let Ok(table) = ReasonTable::from_running_kernel()
        && table.value_of(&e.name).is_none()
    {
        writeln!(
            out,
            "\n(the running kernel has no drop reason named {}; `dropscope reasons` lists its own)",
            e.name
        )?;
    }
    Ok(())
}

async fn record_cmd(
    live: &LiveArgs,
    output: &Path,
    duration: Option<Duration>,
    force: bool,
) -> anyhow::Result<()> {
    // Before the probe is attached: the output is never opened (a temporary file next to it
    // is), so a FIFO or a symlink there cannot block or redirect the recording.
    if record::is_stdio(output) {
        if std::io::stdout().is_terminal() {
            bail!(
                "`-o -` writes the binary recording to standard output, which is a terminal; \
                 pipe it (e.g. `dropscope record -o - | dropscope replay -`) or redirect it"
            );
        }
    } else {
        outfile::check_destination(output, force)?;
    }
    let interrupt = Interrupt::new()?;
    let (feed, stopper) = start_live(live)?;
    eprintln!(
        "dropscope: recording drops with {} to {}",
        feed.info.probe,
        shown(output)
    );
    // At the end of the window the collector takes a last snapshot and closes the feed; the
    // recorder writes until then, so the drops of the last interval are in the file.
    let recorder = record::record_feed(feed, output, force, std::future::pending());
    tokio::pin!(recorder);
    let summary = tokio::select! {
        s = &mut recorder => s,
        _ = interrupt.until(duration) => {
            stopper.stop();
            recorder.await
        }
    };
    stopper.finish()?;
    let s = summary?;
    eprintln!(
        "dropscope: wrote {} ({} snapshots, {} bytes, {:.1}s, {} drops)",
        shown(&s.path),
        s.frames,
        s.bytes,
        s.elapsed.as_secs_f64(),
        s.total
    );
    Ok(())
}

async fn replay_cmd(file: &Path, dir: &Path) -> anyhow::Result<()> {
    if record::is_stdio(file) {
        // The recording comes through stdin; keys are read from the terminal itself.
        if !std::io::stdout().is_terminal() || std::fs::File::open("/dev/tty").is_err() {
            bail!("replay needs a terminal; for text output use `dropscope report --input -`");
        }
    }
    let rec = record::follow_input(file).with_context(|| format!("opening {}", shown(file)))?;
    for warning in rec.warnings() {
        eprintln!("dropscope: warning: {}: {warning}", shown(file));
    }
    if !record::is_stdio(file) {
        require_terminal("replay")?;
    }
    let feed = record::replay_feed(rec);
    let opts = tui::TuiOptions {
        flamegraph_dir: dir.to_path_buf(),
        record_dir: dir.to_path_buf(),
        kernel_counters: false,
        filter: None,
    };
    tui::run(feed, opts).await
}

async fn flamegraph_cmd(args: FlamegraphArgs) -> anyhow::Result<()> {
    // Everything that can fail without counting is checked before counting.
    outfile::check_destination(&args.output, args.force)?;
    let baseline = match (&args.diff, args.format) {
        (Some(_), GraphFormat::Folded) => bail!("--diff writes an SVG; drop --format folded"),
        (Some(base), GraphFormat::Svg) => Some(
            std::fs::read_to_string(base)
                .with_context(|| format!("reading baseline {}", shown(base)))?,
        ),
        (None, _) => None,
    };
    if args.window.input.is_none() && args.live.no_stacks {
        bail!("--no-stacks leaves nothing to draw");
    }
    let (info, snap, window) = if args.window.input.is_some() {
        recorded_window(&args.window)?
    } else {
        let (info, snap, _) = count_live(
            &args.live,
            args.duration,
            " and sampling stacks",
            false,
            |_, _| Ok(()),
        )
        .await?;
        let window = (Duration::ZERO, snap.elapsed);
        (info, snap, window)
    };
    let meta = GraphMeta {
        info: &info,
        window,
        filter: None,
    };
    let mut out = Vec::new();
    match (args.format, baseline) {
        (GraphFormat::Folded, _) => {
            out.extend_from_slice(flamegraph::folded(&snap.stacks).as_bytes())
        }
        (GraphFormat::Svg, None) => flamegraph::write_svg(&snap.stacks, &meta, &mut out)?,
        (GraphFormat::Svg, Some(before)) => {
            let after = flamegraph::folded(&snap.stacks);
            flamegraph::write_diff_svg(&before, &after, &meta, &mut out)?;
        }
    }
    outfile::write_file(&args.output, args.force, &out)?;
    let est = snap
        .stacks
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.weight));
    eprintln!(
        "dropscope: wrote {} ({} stacks, ~{est} drops estimated from samples; {} drops counted exactly)",
        shown(&args.output),
        snap.stacks.len(),
        snap.total
    );
    Ok(())
}
