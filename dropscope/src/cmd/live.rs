//! Counting live (the `live` feature): attaching the probe, the live view, `record`, and the
//! counting loop that `report` and `flamegraph` share.
use std::{io::Write, path::Path, time::Duration};

use anyhow::{Context as _, bail};

use super::{require_terminal, shown};
use crate::{
    cli::LiveArgs,
    collector::{Collector, CollectorOptions},
    model::{SessionInfo, Snapshot},
    outfile,
    probe::{Probe, ProbeOptions},
    signals::Interrupt,
    source::{Feed, KernelPace, Stopper},
    tui,
};

/// Attaches the probe and starts the collector; with `kernel_counters`, the snapshots carry
/// the kernel's own counters, read this often.
pub fn start_live(
    live: &LiveArgs,
    kernel_counters: Option<Duration>,
) -> anyhow::Result<(Feed, Stopper)> {
    let opts = ProbeOptions {
        choice: live.probe,
        max_keys: live.max_keys,
        btf_path: live.btf.clone(),
        count_self_syscalls: live.count_syscalls,
        #[cfg(feature = "bench")]
        bench_keys: live.bench_keys,
        #[cfg(feature = "bench")]
        bench_skip: live.bench_skip,
        by: live.select.counted_by(),
        filter: live.select.live_filter()?,
        stacks: !live.no_stacks,
    };
    let probe = Probe::attach(&opts)?;
    let copts = CollectorOptions {
        interval: live.interval,
        stacks: !live.no_stacks,
        stack_budget: live.stack_budget,
        bpf_stats: live.bpf_stats,
        by: live.select.counted_by(),
        kernel_counters: kernel_counters.map(KernelPace::new),
    };
    let (feed, stopper) = Collector::spawn(probe, copts)?;
    if !live.select.derives_culprit() {
        return Ok((feed, stopper));
    }
    // The culprit is derived from the counts of the finer keys it needs, then they are
    // filtered and grouped by it (the other filters were applied by the kernel).
    let select = live.select.clone();
    let by = select.by.clone();
    let feed = feed.map(move |s| select.by_culprit(&s, &Default::default(), &by));
    Ok((feed, stopper))
}

/// The live view: the probe feeding the TUI until `q` or a signal.
pub async fn live_tui(live: &LiveArgs, dir: &Path) -> anyhow::Result<()> {
    require_terminal("the live view")?;
    let (feed, stopper) = start_live(live, Some(tui::KERNEL_READ_CLOSED))?;
    let opts = tui::TuiOptions {
        flamegraph_dir: dir.to_path_buf(),
        record_dir: dir.to_path_buf(),
        filter: live.select.describe(),
        by: live.select.by.clone(),
        timeline: None,
        compare: None,
        jump: None,
    };
    // The TUI ends on `q`, a signal, or the feed closing; then the probe is detached, and a
    // collector failure, if that is what closed the feed, is reported.
    let res = tui::run(feed, opts).await;
    let collector = stopper.finish();
    res.and(collector)
}

/// Counts live until `duration` or a signal; returns the last snapshot and the session info.
/// With `counters`, the snapshots carry the kernel's own counters, read this often (and right
/// before the last snapshot).
pub async fn count_live(
    live: &LiveArgs,
    duration: Option<Duration>,
    what: &str,
    counters: Option<Duration>,
    mut on_snapshot: impl FnMut(&Snapshot) -> anyhow::Result<()>,
) -> anyhow::Result<(SessionInfo, Snapshot)> {
    let interrupt = Interrupt::new()?;
    let (mut feed, stopper) = start_live(live, counters)?;
    eprintln!(
        "dropscope: counting drops with {}{what}; {}",
        feed.info.probe,
        match duration {
            Some(d) => format!("for {}, Ctrl-C ends early", crate::format::duration(d)),
            None => "until Ctrl-C".into(),
        }
    );
    let _ = std::io::stderr().flush();
    let mut last = Snapshot::default();
    let wait = interrupt.until(duration);
    tokio::pin!(wait);
    // Elapsed time and drops so far, on a terminal only, rewritten in place.
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = tokio::time::Instant::now();
    let show = |total: u64| {
        let line = crate::format::progress(started.elapsed(), duration, total);
        let _ = write!(std::io::stderr().lock(), "\r{line}\x1b[K");
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ended = loop {
        tokio::select! {
            s = feed.snapshots.recv() => match s {
                Some(s) => {
                    if progress {
                        // Cleared for whatever `on_snapshot` prints (`report --every`).
                        eprint!("\r\x1b[K");
                    }
                    on_snapshot(&s)?;
                    last = s;
                    if progress {
                        show(last.total);
                    }
                }
                None => break false,
            },
            _ = tick.tick(), if progress => show(last.total),
            _ = &mut wait => break true,
        }
    };
    if progress {
        eprint!("\r\x1b[K");
    }
    if !ended {
        stopper.finish()?;
        bail!("the collector stopped unexpectedly");
    }
    // The collector reads the counters once more right before its last snapshot: every drop
    // they have, that snapshot has (the same span).
    stopper.stop();
    while let Some(s) = feed.snapshots.recv().await {
        last = s;
    }
    stopper.finish()?;
    Ok((feed.info, last))
}

/// How often a recording reads the kernel's counters (and once more at its end), as the live
/// view does while its panels are closed.
pub const RECORD_KERNEL_READ: Duration = Duration::from_secs(10);

/// `dropscope record`: the live feed written to a file, headless.
pub async fn record_cmd(
    live: &LiveArgs,
    output: &Path,
    duration: Option<Duration>,
    force: bool,
    pcap: Option<&Path>,
) -> anyhow::Result<()> {
    if let Some(p) = &live.select.culprit {
        bail!(
            "--culprit {p:?}: a recording keeps every row (its culprits are derived when it is \
             read: `dropscope replay FILE --culprit PATTERN`, `report --input FILE --culprit \
             PATTERN`)"
        );
    }
    // `--by culprit` records the keys the culprit is derived from; the recording is grouped by
    // it when read.
    let live = &LiveArgs {
        select: crate::cli::Selection {
            by: live.select.counted_by(),
            ..live.select.clone()
        },
        ..live.clone()
    };
    // Before the probe is attached: the output is never opened (a temporary file next to it
    // is), so a FIFO or a symlink there cannot block or redirect the recording.
    if crate::record::is_stdio(output) {
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            bail!(
                "`-o -` writes the binary recording to standard output, which is a terminal; \
                 pipe it (e.g. `dropscope record -o - | dropscope replay -`) or redirect it"
            );
        }
    } else {
        outfile::check_destination(output, force)?;
    }
    if let Some(p) = pcap {
        outfile::check_destination(p, force)?;
    }
    let interrupt = Interrupt::new()?;
    // The recording holds the kernel's counters too, so that replay shows them.
    let (mut feed, stopper) = start_live(live, Some(RECORD_KERNEL_READ))?;
    // With --pcap, the snapshots pass through a task that keeps the last one's samples.
    let last = pcap.map(|_| {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut from = std::mem::replace(&mut feed.snapshots, rx);
        tokio::spawn(async move {
            let mut last = None;
            while let Some(s) = from.recv().await {
                last = Some(s.samples.clone());
                if tx.send(s).await.is_err() {
                    break;
                }
            }
            last
        })
    });
    eprintln!(
        "dropscope: recording drops with {} to {}",
        feed.info.probe,
        shown(output)
    );
    // At the end of the window the collector takes a last snapshot and closes the feed; the
    // recorder writes until then, so the drops of the last interval are in the file.
    let recorder = crate::record::record_feed(feed, output, force, std::future::pending());
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
        "dropscope: wrote {} ({} snapshots, {}, {}, {} drops)",
        if s.path == std::path::Path::new("-") {
            "the recording to standard output".into()
        } else {
            shown(&s.path)
        },
        s.frames,
        crate::format::bytes(s.bytes),
        crate::format::duration(s.elapsed),
        crate::format::count(s.total)
    );
    if let (Some(p), Some(task)) = (pcap, last) {
        let samples = task.await.context("keeping the last snapshot")?;
        let programs = live.select.describe().is_none();
        super::write_pcap(p, force, &samples.unwrap_or_default(), programs)?;
    }
    Ok(())
}
