//! The "who dropped it" section of the text report: one block per attributed row, largest
//! first, each line escaped for the terminal.
use std::io::Write;

use super::Culprit;
use crate::{
    explain::fill::{Origin, Ways},
    model::{DropKey, Snapshot},
    sanitize,
};

/// The most rows given a block (the largest).
pub const MAX_ROWS: usize = 32;

/// A row named as the table shows it: reason, location, namespace and device.
fn row(k: &DropKey) -> String {
    let mut s = format!("{} {}", k.reason.name, k.location);
    if let Some(n) = k.attr.netns_name.as_deref() {
        s.push_str(&format!(" netns {n}"));
    } else if let Some(i) = k.attr.netns {
        s.push_str(&format!(" netns {i}"));
    }
    if let Some(d) = k.attr.device.as_deref() {
        s.push_str(&format!(" dev {d}"));
    }
    if let Some(p) = k.attr.protocol.as_deref() {
        s.push_str(&format!(" {p}"));
    }
    s
}

/// Every attributed row's culprits of `snap` and the snapshot's rows they belong to, largest
/// first.
pub fn attributed(snap: &Snapshot) -> Vec<(&DropKey, u64, Culprit)> {
    let mut c = super::culprits(snap);
    let mut rows: Vec<_> = (snap.drops.iter())
        .filter_map(|d| Some((&d.key, d.count, c.remove(&d.key)?)))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    rows
}

/// Writes the section (nothing where no row is attributed); its commands enter namespaces as
/// `origin` says (a recording's by their recorded names only).
pub fn write(snap: &Snapshot, origin: Origin, mut out: impl Write) -> std::io::Result<()> {
    let rows = attributed(snap);
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nwho dropped it:")?;
    let mut ways = Ways::new(snap.kernel.as_ref().map(|k| k.initial_netns), origin);
    for (key, count, c) in rows.iter().take(MAX_ROWS) {
        let t = |s: &str| sanitize::terminal(s).into_owned();
        writeln!(out, "  {} ({count})", t(&row(key)))?;
        writeln!(out, "    {}", t(&c.line()))?;
        // An unknown one's line is its reason already.
        if !matches!(c, Culprit::Unknown { .. }) {
            writeln!(out, "    because {}", t(c.because()))?;
        }
        for change in c.changes_for(&ways.target(key)) {
            writeln!(out, "    to change: {}", t(&change))?;
        }
    }
    if rows.len() > MAX_ROWS {
        writeln!(out, "  ({} more rows attributed)", rows.len() - MAX_ROWS)?;
    }
    Ok(())
}
