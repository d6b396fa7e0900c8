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
        let opened = crate::history::replay::open(file, window)?;
        require_terminal("replay")?;
        let len_ms = opened.window.to_ms.saturating_sub(opened.window.from_ms);
        let history = History {
            timeline: opened.timeline,
            dir: file,
            budget,
            len_ms,
        };
        return replay_recording(opened.recording, dir, select, Some(history)).await;
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

/// A history replayed: its strip, directory, the budget `v` judges, and the length of the
/// window replayed (a jump with `t` opens one as long around its time).
struct History<'a> {
    timeline: crate::history::timeline::Timeline,
    dir: &'a Path,
    budget: Vec<crate::vocab::budget::Clause>,
    len_ms: u64,
}

/// Replays `rec` in the TUI, grouped and filtered by `select`; a window of a history comes with
/// its timeline and directory (for the strip, the windows `v` compares and those `t` jumps to).
async fn replay_recording(
    rec: record::Recording,
    dir: &Path,
    select: &crate::cli::Selection,
    history: Option<History<'_>>,
) -> anyhow::Result<()> {
    // What the recording holds so far decides which filters and groupings it can take.
    let (filter, by) = select.recorded(&rec.snapshot_at(rec.duration()).unwrap_or_default())?;
    let grouped = {
        let (sel, filter, by) = (select.clone(), filter.clone(), by.clone());
        move |rec| {
            let (sel, filter, by) = (sel.clone(), filter.clone(), by.clone());
            record::replay_feed(rec).map(move |s| sel.by_culprit(&s, &filter, &by))
        }
    };
    let (timeline, compare, jump) = match history {
        Some(h) => {
            let (hdir, len_ms, grouped) = (h.dir.to_path_buf(), h.len_ms, grouped.clone());
            let jump = tui::JumpSource(std::sync::Arc::new(move |at_ms| {
                let opened = crate::history::replay::open_around(&hdir, at_ms, len_ms)?;
                Ok(tui::Jumped {
                    feed: grouped(opened.recording),
                    timeline: opened.timeline,
                    notes: opened.notes,
                })
            }));
            let compare = tui::CompareSource {
                dir: h.dir.to_path_buf(),
                filter: filter.clone(),
                by: by.clone(),
                budget: h.budget,
            };
            (Some(h.timeline), Some(compare), Some(jump))
        }
        None => (None, None, None),
    };
    let feed = grouped(rec);
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
        jump,
    };
    tui::run(feed, opts).await
}
