//! `dropscope replay`: a recording in the live view's TUI.
use std::{io::IsTerminal as _, path::Path};

use anyhow::Context as _;

use super::{require_terminal, shown};
use crate::{record, tui};

/// Runs `replay`.
pub async fn replay_cmd(
    file: &Path,
    dir: &Path,
    select: &crate::cli::Selection,
) -> anyhow::Result<()> {
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
    // What the recording holds so far decides which filters and groupings it can take.
    let (filter, by) = select.recorded(&rec.snapshot_at(rec.duration()).unwrap_or_default())?;
    let feed = record::replay_feed(rec).map(move |s| crate::model::group::apply(&s, &filter, &by));
    let opts = tui::TuiOptions {
        flamegraph_dir: dir.to_path_buf(),
        record_dir: dir.to_path_buf(),
        filter: select.describe(),
        by: if select.default_by() {
            Vec::new()
        } else {
            select.by.clone()
        },
    };
    tui::run(feed, opts).await
}
