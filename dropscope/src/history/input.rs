//! A history directory as `--input`: the window the command line asks for (`--since`,
//! `--from`, `--to` in wall-clock time), counted across segments, its gaps said on stderr.
use std::{path::Path, time::Duration};

use anyhow::bail;

use super::{
    catalog::{Catalog, SEAM},
    range::{self, Window},
    when::{TimeArg, local},
};
use crate::{cli::InputWindow, sanitize::terminal};

/// The wall-clock window `w` asks for in a history covering `lo..=hi`, at `now_ms`.
pub fn window_of(w: &InputWindow, lo: u64, hi: u64, now_ms: u64) -> anyhow::Result<Window> {
    let wall = |t: Option<TimeArg>, flag: &str| match t {
        Some(TimeArg::Session(_)) => bail!(
            "in a history, {flag} is a wall-clock time (03:10, 2026-11-27 03:10, \
             2026-11-27T03:10:00Z), not a duration; --since D counts the last D"
        ),
        Some(TimeArg::Wall(ms)) => Ok(Some(ms)),
        None => Ok(None),
    };
    let to = wall(w.to, "--to")?;
    let from = wall(w.from, "--from")?;
    let to_ms = to.unwrap_or(if w.since.is_some() { now_ms } else { hi });
    let from_ms = match w.since {
        Some(d) => to_ms.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        None => from.unwrap_or(lo),
    };
    if from_ms > to_ms {
        bail!("--from {} is after --to {}", local(from_ms), local(to_ms));
    }
    Ok(Window { from_ms, to_ms })
}

/// What a gap of a window is: a pause of the history within a session (its drops counted, not
/// placed in time), or time dropscope did not count.
pub fn gap_note(a: u64, b: u64, counted: bool) -> String {
    let len = crate::format::duration(Duration::from_millis(b.saturating_sub(a)));
    if counted {
        format!(
            "gap {} to {} ({len}): history paused; its drops are in the counts (the session \
             counted on), not placed in time",
            local(a),
            local(b)
        )
    } else {
        format!(
            "gap {} to {} ({len}): not recorded (dropscope not running); rates are over the \
             time counted",
            local(a),
            local(b)
        )
    }
}

/// `report`'s and `flamegraph`'s window of the history in `dir`.
pub fn recorded_window(
    dir: &Path,
    w: &InputWindow,
    sel: &crate::cli::Selection,
) -> anyhow::Result<crate::model::window::RecordedWindow> {
    let (cat, (lo, hi)) = Catalog::open_to_read(dir)?;
    let shown = terminal(&dir.to_string_lossy()).into_owned();
    let win = window_of(w, lo, hi, super::dir::now_unix_ms())?;
    let counted = range::count(&cat, win)?;
    if counted.sessions == 0 {
        bail!(
            "the history {shown} holds no snapshot between {} and {} (it covers {} to {}; \
             `dropscope history {shown}` lists its ranges)",
            local(win.from_ms),
            local(win.to_ms),
            local(lo),
            local(hi)
        );
    }
    let covered = Duration::from_millis(counted.covered_ms);
    eprintln!(
        "dropscope: history {shown}, {} to {} (local time): {} counted in {} session{}",
        local(win.from_ms),
        local(win.to_ms),
        crate::format::duration(covered),
        counted.sessions,
        if counted.sessions == 1 { "" } else { "s" }
    );
    let last = counted.gaps.len().saturating_sub(1);
    for (i, &(a, b, counted)) in counted.gaps.iter().enumerate() {
        // The writer of a running history is a poll behind now: no gap.
        if i == last && b == win.to_ms && b - a < SEAM.as_millis() as u64 && b > hi {
            continue;
        }
        eprintln!("dropscope: {}", gap_note(a, b, counted));
    }
    // Snapshots a minute apart (coarse segments) move the counted window off the one asked.
    if let Some((a, b)) = counted.counted
        && (a.abs_diff(win.from_ms.max(lo)) > 2_000 || b.abs_diff(win.to_ms.min(hi)) > 2_000)
    {
        eprintln!(
            "dropscope: counted between the snapshots at {} and {} (the last at or before each \
             end; older segments keep one a minute)",
            local(a),
            local(b)
        );
    }
    for n in &counted.notes {
        eprintln!("dropscope: note: {n}");
    }
    let (filter, by) = sel.recorded(&counted.snap)?;
    let group = |s: &crate::model::Snapshot| sel.by_culprit(s, &filter, &by);
    let kernel = (counted.kernel).map(|(r, seen)| (std::sync::Arc::new(r), group(&seen)));
    // The culprits of the window's rows are derived from its reading (rules' growth,
    // programs, listeners), as live from the latest one.
    let mut snap = counted.snap;
    snap.kernel = kernel.as_ref().map(|(r, _)| std::sync::Arc::clone(r));
    Ok((
        counted.info,
        group(&snap),
        (Duration::ZERO, covered),
        kernel,
    ))
}
