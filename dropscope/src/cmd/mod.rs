//! The commands: each wires a source (live probe or recording) to a consumer, and the
//! command-line consumers themselves (report printing).
//!
//! Counting live needs the `live` feature (the eBPF object, probe and collector); a build
//! without it reads recordings and BTF files, and says so when asked to count live.
#[cfg(feature = "live")]
mod check;
mod diff;
pub mod dispatch;
mod flamegraph;
mod generate;
pub mod history;
#[cfg(feature = "live")]
pub mod live;
mod reasons;
mod replay;
pub mod report;
mod selection;

use std::{io::IsTerminal, path::Path, sync::Arc, time::Duration};

use anyhow::{Context as _, bail};

use crate::{
    cli::InputWindow,
    model::{KernelReading, SessionInfo, Snapshot, window},
    sanitize,
};

/// The error of a build without the `live` feature asked to count live drops.
#[cfg_attr(feature = "live", allow(dead_code))]
pub(crate) fn no_live(what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} counts live drops, and this dropscope was built without the `live` feature, so it \
         cannot count live; it can read recordings (`dropscope replay FILE`, `report --input \
         FILE`, `flamegraph --input FILE`) and BTF files (`reasons --btf FILE`). Build with the \
         default features (`cargo build --release`, after `cargo xtask setup`) to count live"
    )
}

/// How a command that judges (`diff`, `check`) ends when not with success or a plain error.
#[derive(Debug, thiserror::Error)]
pub enum Outcome {
    /// The command line asks what cannot be answered (a clause the inputs have no data for,
    /// two inputs on one standard input): exit status 2, as clap's usage errors.
    #[error("{0}")]
    Usage(String),
    /// A budget clause is broken, or (asked to fail on them) a regression was found: exit
    /// status 1. One line each.
    #[error("{}", .0.join("; "))]
    Broken(Vec<String>),
}

impl Outcome {
    /// The outcome an error carries, if any.
    pub fn of(e: &anyhow::Error) -> Option<&Outcome> {
        e.chain().find_map(|c| c.downcast_ref::<Outcome>())
    }

    /// The exit status it gives.
    pub fn status(&self) -> u8 {
        match self {
            Outcome::Usage(_) => 2,
            Outcome::Broken(_) => 1,
        }
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

/// A path as shown on the terminal.
/// Writes the sampled packets `samples` to `path` as pcapng (owner-only, `force`: replacing
/// what has its name), and says so on stderr; with `programs` false (drops filtered: program
/// rows are not shown), without the frames programs dropped.
fn write_pcap(
    path: &Path,
    force: bool,
    samples: &[crate::model::KeySamples],
    programs: bool,
) -> anyhow::Result<()> {
    let kept: Vec<crate::model::KeySamples>;
    let samples = if programs {
        samples
    } else {
        kept = (samples.iter())
            .filter(|k| !crate::model::programs::is_program(&k.key))
            .cloned()
            .collect();
        &kept[..]
    };
    let mut bytes = Vec::new();
    let n = crate::pcap::write(samples, &mut bytes).context("encoding pcapng")?;
    crate::outfile::write_file(path, force, &bytes)?;
    eprintln!("dropscope: wrote {} ({n} sampled packets)", shown(path));
    Ok(())
}

fn shown(path: &Path) -> String {
    sanitize::terminal(&path.to_string_lossy()).into_owned()
}

/// The counts of `--input` between `--from` and `--to`, filtered and grouped by `sel` exactly
/// as live counting would have (refused where the recording lacks a dimension asked for).
fn recorded_window(
    w: &InputWindow,
    sel: &crate::cli::Selection,
) -> anyhow::Result<(SessionInfo, Snapshot, (Duration, Duration))> {
    let (info, snap, window, _) = recorded_window_kernel(w, sel)?;
    Ok((info, snap, window))
}

pub(crate) use crate::model::window::RecordedWindow;

/// [`recorded_window`], with the kernel's counters of the window where the recording holds
/// them: their growth between the readings at `--from` and `--to`, and the probe's counts
/// over a span that holds theirs (from the last snapshot before the first reading, to the
/// snapshot at `--to`, which was taken after its reading), so no drop the probe saw reads
/// as unseen.
fn recorded_window_kernel(
    w: &InputWindow,
    sel: &crate::cli::Selection,
) -> anyhow::Result<RecordedWindow> {
    let path = w.input.as_deref().context("no --input")?;
    if path.is_dir() {
        return crate::history::input::recorded_window(path, w, sel);
    }
    let rec =
        crate::record::open_input(path).with_context(|| format!("opening {}", shown(path)))?;
    for warning in rec.warnings() {
        eprintln!("dropscope: warning: {}: {warning}", shown(path));
    }
    // Wall-clock times are placed on the session's clock.
    let started = rec.info().started_unix_ms;
    let (w_from, w_to) = (
        w.from.map(|t| t.session(started)),
        w.to.map(|t| t.session(started)),
    );
    let to = w_to.unwrap_or(rec.duration()).min(rec.duration());
    let from = match w.since {
        Some(d) => to.saturating_sub(d),
        None => w_from.unwrap_or_default(),
    };
    if from > to {
        // The end is --to only where one was given within the recording.
        let end = match w_to {
            Some(t) if t <= rec.duration() => format!("--to {}", crate::format::duration(t)),
            _ => format!("the recording's end, {}", crate::format::duration(to)),
        };
        bail!("--from {} is after {end}", crate::format::duration(from));
    }
    let later = rec.snapshot_at(to)?;
    let (filter, by) = sel.recorded(&later)?;
    let (snap, kernel) = if from.is_zero() {
        let kernel = later.kernel.clone().map(|r| (r, later.clone()));
        (later, kernel)
    } else {
        let earlier = rec.snapshot_at(from)?;
        let kernel = match (&earlier.kernel, &later.kernel) {
            (Some(a), Some(b)) => drops_before_reading(&rec, from, a)?
                .map(|base| (Arc::new(b.since(a)), window::between(&base, &later))),
            // No reading at or before `from`: the counters are known from the session's start
            // only. The ledger matches them with the drops over the same span and says so; the
            // programs' verdicts, whose rows are the window's, are not shown.
            (None, Some(b)) => {
                let mut r = (**b).clone();
                r.errors.push(format!(
                    "{}--from {}: the recording read them first after it (the window shows \
                     no program rows)",
                    crate::model::notes::SINCE_START,
                    crate::format::duration(from)
                ));
                Some((Arc::new(r), later.clone()))
            }
            _ => None,
        };
        let mut snap = window::between(&earlier, &later);
        // The culprits of the window's rows are derived from its reading (rules' growth,
        // programs, listeners), as live from the latest one.
        snap.kernel = kernel.as_ref().map(|(r, _)| Arc::clone(r));
        (snap, kernel)
    };
    let group = |s: &Snapshot| crate::model::group::apply(s, &filter, &by);
    let kernel = kernel.map(|(r, seen)| (r, group(&seen)));
    let snap = sel.by_culprit(&snap, &filter, &by);
    Ok((rec.info().clone(), snap, (from, to), kernel))
}

/// The last snapshot taken before `reading` (the one at `from` carries it): its counts are
/// all older than the reading. An empty snapshot if the reading came with the first; `None`
/// if it is further back than a recording reads counters.
fn drops_before_reading(
    rec: &crate::record::Recording,
    from: Duration,
    reading: &KernelReading,
) -> anyhow::Result<Option<Snapshot>> {
    let Some(mut i) = rec.frame_at(from) else {
        return Ok(None);
    };
    for _ in 0..64 {
        if i == 0 {
            return Ok(Some(Snapshot::default()));
        }
        let s = rec.snapshot_of(i - 1)?;
        if s.kernel
            .as_ref()
            .is_none_or(|r| r.unix_ms != reading.unix_ms)
        {
            return Ok(Some(s));
        }
        i -= 1;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use clap::Parser as _;

    use crate::{
        cli::{Cli, Command},
        model::{KernelReading, SessionInfo, Snapshot},
    };

    /// A recorded window that starts after the recording's start names the culprits of its
    /// rows from its own reading, as the whole recording does (before, its rows had none: the
    /// window's snapshot carried no reading, and a counted rule's drops read "not read").
    #[test]
    fn a_window_from_mid_recording_names_its_rows_culprits() {
        let ns = 4026532999;
        let attributed = crate::record::attribution::tests::attributed();
        let key = crate::model::DropKey {
            attr: crate::model::Attribution {
                netns: Some(ns),
                ..Default::default()
            },
            ..crate::fixtures::key(2, "NETFILTER_DROP", "nf_hook_slow+0xa1")
        };
        let snaps: Vec<Snapshot> = (1..=20u64)
            .map(|t| {
                let mut r = attributed.clone();
                r.unix_ms = 1_750_000_000_000 + 1000 * t - 500;
                let w = r.rules.get_mut(&ns).expect("a window");
                w.rules[0].grew = Some(40 * t);
                Snapshot {
                    elapsed: Duration::from_secs(t),
                    unix_ms: 1_750_000_000_000 + 1000 * t,
                    total: 40 * t,
                    drops: vec![crate::model::DropCount {
                        key: key.clone(),
                        count: 40 * t,
                    }],
                    kernel: Some(Arc::new(r)),
                    ..Default::default()
                }
            })
            .collect();
        let bytes = crate::record::encode(&SessionInfo::default(), &snaps).expect("encode");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.dsrec");
        std::fs::write(&path, bytes).expect("write");
        let p = path.to_str().expect("utf-8");
        let cli = Cli::try_parse_from(["dropscope", "report", "--input", p, "--from", "5"])
            .expect("parse");
        let Some(Command::Report(r)) = cli.command else {
            panic!("not report");
        };
        let (_, snap, _, _) =
            super::recorded_window_kernel(&r.window, &r.live.select).expect("window");
        let culprits = crate::culprit::culprits(&snap);
        let row = snap.drops.first().expect("the rule's row");
        let c = culprits.get(&row.key).expect("a culprit");
        assert!(
            matches!(c, crate::culprit::Culprit::Exact { .. }),
            "{}",
            c.line()
        );
    }

    /// A window that starts before the recording's first reading of the kernel's counters
    /// says its counters (and programs' verdicts) span more than its drops.
    #[test]
    fn a_window_before_the_first_reading_says_its_counters_span_from_the_start() {
        let reading = Arc::new(KernelReading {
            unix_ms: 1_750_000_010_000,
            ..Default::default()
        });
        let snaps: Vec<Snapshot> = (1..=20u64)
            .map(|t| Snapshot {
                elapsed: Duration::from_secs(t),
                unix_ms: 1_750_000_000_000 + 1000 * t,
                kernel: (t >= 10).then(|| reading.clone()),
                ..Default::default()
            })
            .collect();
        let bytes = crate::record::encode(&SessionInfo::default(), &snaps).expect("encode");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.dsrec");
        std::fs::write(&path, bytes).expect("write");
        let window = |from: &str, to: &str| {
            let p = path.to_str().expect("utf-8");
            let cli = Cli::try_parse_from([
                "dropscope",
                "report",
                "--input",
                p,
                "--from",
                from,
                "--to",
                to,
            ])
            .expect("parse");
            let Some(Command::Report(r)) = cli.command else {
                panic!("not report");
            };
            let (_, _, _, kernel) =
                super::recorded_window_kernel(&r.window, &r.live.select).expect("window");
            kernel.map(|(r, seen)| {
                // Its program rows are not the window's: none are shown.
                let view = crate::ledger::view(&r, &seen, None);
                assert_eq!(view.programs.is_none(), !r.errors.is_empty());
                r.errors.clone()
            })
        };
        let notes = window("5", "15").expect("the reading at 10 s");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with(crate::model::notes::SINCE_START)
                && notes[0].contains("not from --from 5s"),
            "{notes:?}"
        );
        assert!(crate::model::notes::is_ledger_note(&notes[0]));
        // From a reading on, the window's counters are its own: no note.
        assert_eq!(window("12", "15"), Some(Vec::new()));
    }
}
