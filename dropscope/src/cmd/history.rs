//! `dropscope history DIR`: the ranges a history covers, its gaps, sizes, and the machine and
//! kernel each segment came from.
use std::{io::Write, path::Path, time::Duration};

use crate::{
    format,
    history::{
        catalog::{Catalog, Span},
        when::{local, zone_label},
    },
    sanitize::terminal,
};

/// Runs `history`.
pub fn history_cmd(dir: &Path) -> anyhow::Result<()> {
    let cat = Catalog::open(dir)?;
    let mut out = std::io::stdout().lock();
    write_listing(&cat, &terminal(&dir.to_string_lossy()), &mut out)?;
    out.flush()?;
    Ok(())
}

/// The length between two wall-clock times in ms.
fn span_len(from_ms: u64, to_ms: u64) -> String {
    format::duration(Duration::from_millis(to_ms.saturating_sub(from_ms)))
}

/// Writes the listing of `cat` (the directory shown as `dir`).
pub fn write_listing(cat: &Catalog, dir: &str, out: &mut impl Write) -> anyhow::Result<()> {
    let bytes: u64 = (cat.pieces.iter().map(|p| p.file.bytes))
        .chain(cat.refused.iter().map(|r| r.file.bytes))
        .sum();
    let spans = cat.spans();
    writeln!(
        out,
        "history {dir}: {} segments, {}, local time ({})",
        cat.pieces.len() + cat.refused.len(),
        format::bytes(bytes),
        zone_label()
    )?;
    if spans.is_empty() {
        writeln!(out, "(no snapshot recorded yet)")?;
    }
    writeln!(
        out,
        "{:<19}  {:<19}  {:>9}  {:>10}  {:>9}  {:<4}  {:<16}  {:<20}  SEGMENT",
        "FROM", "TO", "LENGTH", "SIZE", "SNAPSHOTS", "RES", "HOST", "KERNEL"
    )?;
    let last_seq = cat.pieces.last().map(|p| p.file.seq);
    let mut previous: Option<&Span> = None;
    for span in &spans {
        if let Some(p) = previous {
            gap_line(p.to_ms, span.from_ms, out)?;
        }
        for piece in &cat.pieces[span.pieces.clone()] {
            let name = piece.file.path.file_name().unwrap_or_default();
            writeln!(
                out,
                "{:<19}  {:<19}  {:>9}  {:>10}  {:>9}  {:<4}  {:<16}  {:<20}  {}{}",
                local(piece.from_ms()),
                local(piece.to_ms()),
                span_len(piece.from_ms(), piece.to_ms()),
                format::bytes(piece.file.bytes),
                piece.snapshots,
                if piece.file.coarse { "1m" } else { "full" },
                crate::sanitize::terminal_cell(&piece.info.host, 16),
                crate::sanitize::terminal_cell(&piece.info.kernel, 20),
                terminal(&name.to_string_lossy()),
                match (piece.finished, Some(piece.file.seq) == last_seq) {
                    (true, _) => "",
                    // The newest may be the one a running writer has open.
                    (false, true) => " (unfinished: being written, or cut)",
                    (false, false) => " (cut: kill, crash or full disk)",
                },
            )?;
        }
        previous = Some(span);
    }
    // With the clock set back between sessions, the first span need not be the earliest.
    let lo = spans.iter().map(|s| s.from_ms).min();
    let hi = spans.iter().map(|s| s.to_ms).max();
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let covered: u64 = spans
            .iter()
            .map(|s| s.to_ms.saturating_sub(s.from_ms))
            .sum();
        writeln!(
            out,
            "covered {} of {} ({} to {}) in {} span{}",
            format::duration(Duration::from_millis(covered)),
            span_len(lo, hi),
            local(lo),
            local(hi),
            spans.len(),
            if spans.len() == 1 { "" } else { "s" }
        )?;
    }
    for r in &cat.refused {
        let name = r.file.path.file_name().unwrap_or_default();
        writeln!(
            out,
            "refused {}: {} (the rest reads without it)",
            terminal(&name.to_string_lossy()),
            r.why
        )?;
    }
    for n in &cat.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

/// The line of a gap between two spans.
fn gap_line(from_ms: u64, to_ms: u64, out: &mut impl Write) -> std::io::Result<()> {
    if to_ms < from_ms {
        return writeln!(
            out,
            "{:<19}  {:<19}  {:>9}  the clock was set back {} between these sessions (order \
             kept as written)",
            local(from_ms),
            local(to_ms),
            "",
            span_len(to_ms, from_ms),
        );
    }
    writeln!(
        out,
        "{:<19}  {:<19}  {:>9}  gap: not recorded (dropscope not running, or history paused)",
        local(from_ms),
        local(to_ms),
        span_len(from_ms, to_ms),
    )
}
