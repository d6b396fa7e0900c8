//! `dropscope report`: counts, live or from a recording, printed as a table or JSON.
use std::io::Write;

use super::recorded_window_kernel;
pub(crate) use crate::output as report;
use crate::{
    cli::{Format, ReportArgs},
    explain::fill::Origin,
    ledger::{self, KernelView},
    model::Snapshot,
    sanitize,
};

/// Runs `report`.
pub async fn report_cmd(args: ReportArgs) -> anyhow::Result<()> {
    if let Some(p) = &args.pcap {
        crate::outfile::check_destination(p, args.force)?;
    }
    let filter = args.live.select.describe();
    let (snap, seconds, kernel) = if args.window.input.is_some() {
        let (_, snap, (from, to), kernel) =
            recorded_window_kernel(&args.window, &args.live.select)?;
        let view = kernel.map(|(reading, seen)| ledger::view(&reading, &seen, filter));
        (snap, (to - from).as_secs_f64(), view)
    } else {
        let (snap, secs) = live_counts(&args).await?;
        let view = (snap.kernel.as_ref()).map(|r| ledger::view(r, &snap, filter));
        (snap, secs, view)
    };
    let origin = match args.window.input {
        Some(_) => Origin::Recorded,
        None => Origin::Live,
    };
    print_report(
        &snap,
        seconds,
        args.format,
        (args.every.is_some(), origin),
        kernel.as_ref(),
    )?;
    match &args.pcap {
        Some(p) => {
            let programs = kernel.as_ref().is_some_and(|k| k.programs.is_some());
            super::write_pcap(p, args.force, &snap.samples, programs)
        }
        None => Ok(()),
    }
}

/// How often a live report reads the kernel's counters: once per `--every` (each report shows
/// the latest reading, matched with the counts of the snapshot taken after it), within 1 to 10
/// s; without `--every`, every 10 s, as `record` and `serve` do (the final report reads them
/// once more at its end). A reading of 100 namespaces of 10 devices costs about 60 ms of CPU.
#[cfg(feature = "live")]
fn kernel_read(every: Option<std::time::Duration>) -> std::time::Duration {
    use std::time::Duration;
    every.map_or(Duration::from_secs(10), |d| {
        d.clamp(Duration::from_secs(1), Duration::from_secs(10))
    })
}

/// Counts live, printing a report every `--every`; returns the final counts.
#[cfg(feature = "live")]
async fn live_counts(args: &ReportArgs) -> anyhow::Result<(Snapshot, f64)> {
    let mut next = args.every;
    let (format, every) = (args.format, args.every);
    let filter = args.live.select.describe();
    let progress = |s: &Snapshot| -> anyhow::Result<()> {
        let Some(at) = next.filter(|at| s.elapsed >= *at) else {
            return Ok(());
        };
        let kernel = (s.kernel.as_ref()).map(|r| ledger::view(r, s, filter.clone()));
        let secs = s.elapsed.as_secs_f64();
        print_report(s, secs, format, (true, Origin::Live), kernel.as_ref())?;
        // The next report is due one period after this one (never in a burst).
        next = every.map(|d| (at + d).max(s.elapsed));
        Ok(())
    };
    let (_, snap) = super::live::count_live(
        &args.live,
        args.duration,
        "",
        Some(kernel_read(every)),
        progress,
    )
    .await?;
    let secs = snap.elapsed.as_secs_f64();
    Ok((snap, secs))
}

#[cfg(not(feature = "live"))]
async fn live_counts(_: &ReportArgs) -> anyhow::Result<(Snapshot, f64)> {
    Err(super::no_live("`report` without `--input`"))
}

/// Prints one report; `lines` puts a JSON report on one line (a stream of them is JSON Lines),
/// `origin` says where it was counted; `kernel` adds the kernel's drop counters of the same
/// window.
fn print_report(
    snap: &Snapshot,
    seconds: f64,
    format: Format,
    (lines, origin): (bool, Origin),
    kernel: Option<&KernelView>,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    write_report(snap, seconds, format, (lines, origin), kernel, &mut out)?;
    out.flush()?;
    Ok(())
}

/// Writes one report of `snap` (covering `seconds`) to `out`, as `report` prints it: a table,
/// or JSON (on one line when `lines`), with the kernel's counters of the same window if any;
/// its commands enter namespaces as `origin` says (a recording's by their recorded names).
///
/// Names are escaped for a terminal; what is written grows with the keys and the bytes of the
/// names they reference (see `record::budget::OUTPUT_PER_NAME_BYTE`), never more.
pub fn write_report(
    snap: &Snapshot,
    seconds: f64,
    format: Format,
    (lines, origin): (bool, Origin),
    kernel: Option<&KernelView>,
    mut out: impl Write,
) -> anyhow::Result<()> {
    match format {
        Format::Table => {
            report::write_table_fitted(snap, seconds, report::table_width(), &mut out)?;
            crate::culprit::text::write(snap, origin, &mut out)?;
            if let Some(k) = kernel {
                report::write_programs(k, report::table_width(), &mut out)?;
                report::write_counter_only(k, report::table_width(), &mut out)?;
                report::write_kernel(k, &mut out)?;
            }
            if lines {
                writeln!(out)?;
            }
        }
        Format::Json => {
            let mut report = report::json_from(snap, seconds, origin);
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
    Ok(())
}

#[cfg(all(test, feature = "live"))]
mod tests {
    use std::time::Duration;

    #[test]
    fn the_kernel_is_read_once_per_report_within_a_second_and_ten() {
        let s = Duration::from_secs;
        assert_eq!(super::kernel_read(None), s(10));
        assert_eq!(super::kernel_read(Some(s(3))), s(3));
        assert_eq!(super::kernel_read(Some(Duration::from_millis(200))), s(1));
        assert_eq!(super::kernel_read(Some(s(60))), s(10));
    }
}
