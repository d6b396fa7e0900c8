//! `dropscope replay`: a recording in the live view's TUI.
use std::path::Path;

use anyhow::Context as _;

use super::{require_terminal, shown};
use crate::{
    record::{self, Recording},
    tui,
};

/// Runs `replay`.
pub async fn replay_cmd(file: &Path, dir: &Path) -> anyhow::Result<()> {
    let rec = Recording::open(file).with_context(|| format!("opening {}", shown(file)))?;
    for warning in rec.warnings() {
        eprintln!("dropscope: warning: {}: {warning}", shown(file));
    }
    require_terminal("replay")?;
    let feed = record::replay_feed(rec);
    let opts = tui::TuiOptions {
        flamegraph_dir: dir.to_path_buf(),
        record_dir: dir.to_path_buf(),
        kernel_counters: false,
        filter: None,
        by: Vec::new(),
    };
    tui::run(feed, opts).await
}
