//! `dropscope replay`: a recording in the live view's TUI.
use std::{io::IsTerminal as _, path::Path};

use anyhow::Context as _;

use super::{require_terminal, shown};
use crate::{record, tui};

/// Runs `replay`.
pub async fn replay_cmd(
    window: &crate::cli::InputWindow,
    dir: &Path,
    select: &crate::cli::Selection,
    budget: Vec<crate::vocab::budget::Clause>,
) -> anyhow::Result<()> {
    let file = window.input.as_deref().unwrap_or(Path::new("-"));
    if file.is_dir() {
        let (rec, timeline) = crate::history::replay::open(file, window)?;
        require_terminal("replay")?;
        return replay_recording(rec, dir, select, Some((timeline, file, budget))).await;
    }
    if !budget.is_empty() {
        anyhow::bail!(
            "--budget is judged by `v`, the comparison of a history's windows: replay a history \
             directory (for two recordings, `dropscope diff BASE NEW --budget ...`)"
        );
    }
    if window.from.is_some() || window.to.is_some() || window.since.is_some() {
        anyhow::bail!(
            "--from, --to and --since pick a window of a history directory; a recording \
             replays whole (seek in it with the arrow keys)"
        );
    }
    if record::is_stdio(file) {
        // The recording comes through stdin; keys are read from the terminal itself.
        if !std::io::stdout().is_terminal() || std::fs::File::open("/dev/tty").is_err() {
            anyhow::bail!(
                "replay needs a terminal; for text output use `dropscope report --input -`"
            );
        }
    }
    let rec = record::follow_input(file).with_context(|| format!("opening {}", shown(file)))?;
    for warning in rec.warnings() {
        eprintln!("dropscope: warning: {}: {warning}", shown(file));
    }
    if !record::is_stdio(file) {
        require_terminal("replay")?;
    }
    replay_recording(rec, dir, select, None).await
}

/// Replays `rec` in the TUI, grouped and filtered by `select`; a window of a history comes with
/// its timeline and directory (for the strip, and the windows `v` compares).
async fn replay_recording(
    rec: record::Recording,
    dir: &Path,
    select: &crate::cli::Selection,
    history: Option<(
        crate::history::timeline::Timeline,
        &Path,
        Vec<crate::vocab::budget::Clause>,
    )>,
) -> anyhow::Result<()> {
    // What the recording holds so far decides which filters and groupings it can take.
    let (filter, by) = select.recorded(&rec.snapshot_at(rec.duration()).unwrap_or_default())?;
    let (timeline, compare) = match history {
        Some((t, h, budget)) => (
            Some(t),
            Some(tui::CompareSource {
                dir: h.to_path_buf(),
                filter: filter.clone(),
                by: by.clone(),
                budget,
            }),
        ),
        None => (None, None),
    };
    let sel = select.clone();
    let feed = record::replay_feed(rec).map(move |s| sel.by_culprit(&s, &filter, &by));
    let opts = tui::TuiOptions {
        flamegraph_dir: dir.to_path_buf(),
        record_dir: dir.to_path_buf(),
        filter: select.describe(),
        by: if select.default_by() {
            Vec::new()
        } else {
            select.by.clone()
        },
        timeline,
        compare,
    };
    tui::run(feed, opts).await
}
