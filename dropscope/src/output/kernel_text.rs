//! The report's text of the kernel's side of a window: the programs' and the counter-only
//! rows as tables of their own, the kernel counters that grew, the drops only they saw, drop
//! ratios and the ledger.
use std::io::Write;

use super::{
    rows::{largest_first, program_rows},
    table::{NumberColumn, write_key_table},
};
use crate::{
    format::count,
    ledger::{KernelView, Ratio, reconcile::Ledger},
    model::{DropKey, notes::is_ledger_note},
    sanitize,
};

/// Writes the window's counter-only rows (if any) as a table of their own, after the probe's
/// and the programs'.
pub fn write_counter_only(
    k: &KernelView,
    width: usize,
    mut out: impl Write,
) -> std::io::Result<()> {
    let rows = largest_first(k.counter_only.iter().flatten());
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "Drops only a kernel counter saw (counter only: never in the total above, nor a drop \
         of its rows; each once):"
    )?;
    let keys: Vec<&DropKey> = rows.iter().map(|d| &d.key).collect();
    let numbers = [NumberColumn {
        title: "COUNT",
        cells: rows.iter().map(|d| d.count.to_string()).collect(),
        min: 12,
    }];
    write_key_table(&keys, &numbers, width, &mut out)?;
    // The listeners whose accept queue was full, under the table: the row's key stays the
    // counter's.
    for d in &rows {
        for l in k.listeners_of(&d.key) {
            let ns = d
                .key
                .attr
                .netns
                .map_or_else(String::new, |n| k.netns_label(n));
            writeln!(
                out,
                "  {} netns {ns}: {}",
                crate::sanitize::terminal(&d.key.reason.name),
                l.describe()
            )?;
        }
    }
    Ok(())
}

/// Writes the window's program rows (if any) as a table of their own, after the probe's.
pub fn write_programs(k: &KernelView, width: usize, mut out: impl Write) -> std::io::Result<()> {
    let rows = program_rows(k);
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "XDP and tc programs' drop verdicts (counted per program; a packet also freed through \
         kfree_skb is in the table above too, and once in the ledger):"
    )?;
    let keys: Vec<&DropKey> = rows.iter().map(|d| &d.key).collect();
    let numbers = [NumberColumn {
        title: "COUNT",
        cells: rows.iter().map(|d| d.count.to_string()).collect(),
        min: 12,
    }];
    write_key_table(&keys, &numbers, width, &mut out)
}

/// Writes the kernel counters and unseen drops of the window, after the table. Every name is
/// terminal-safe, whatever made the view.
pub fn write_kernel(k: &KernelView, mut out: impl Write) -> std::io::Result<()> {
    let ns = |n: u64| k.netns_label(n);
    let name = |c: &str| sanitize::terminal(c).into_owned();
    writeln!(out)?;
    writeln!(out, "KERNEL COUNTERS (growth over the same window)")?;
    if k.counters.is_empty() {
        writeln!(out, "(no drop counter grew)")?;
    }
    let cw = (k.counters.iter().map(|c| &c.counter))
        .chain(k.unseen.iter().flatten().map(|u| &u.counter))
        .map(|c| name(c).len())
        .max()
        .unwrap_or(7)
        .max(7);
    let nw = k
        .counters
        .iter()
        .map(|c| ns(c.netns).len())
        .max()
        .unwrap_or(5)
        .max(5);
    if !k.counters.is_empty() {
        writeln!(
            out,
            "{:<nw$}  {:<cw$}  {:>12}  REASONS",
            "NETNS", "COUNTER", "DELTA"
        )?;
    }
    for c in &k.counters {
        let reasons = if c.reasons.is_empty() {
            "(none: freed without a drop reason)".to_string()
        } else {
            c.reasons.join(" ")
        };
        writeln!(
            out,
            "{:<nw$}  {:<cw$}  {:>12}  {reasons}",
            ns(c.netns),
            name(&c.counter),
            count(c.delta)
        )?;
    }
    if let (None, Some(f)) = (&k.unseen, &k.filter) {
        writeln!(
            out,
            "(unseen drops not computed: only drops of {f} are counted)"
        )?;
    }
    if let Some(unseen) = k.unseen.as_ref().filter(|u| !u.is_empty()) {
        writeln!(out)?;
        writeln!(
            out,
            "UNSEEN: counted by the kernel, not seen by the probe (not in the counts above): \
             {} drops, each once (a counter within another is not summed)",
            count(k.unseen_total().unwrap_or(0))
        )?;
        for (u, summed) in unseen.iter().zip(k.unseen_summed()) {
            let part = if summed {
                ""
            } else {
                "  part of another counter (not summed)"
            };
            writeln!(
                out,
                "{:<nw$}  {:<cw$}  {:>12}{part}",
                ns(u.netns),
                name(&u.counter),
                count(u.count)
            )?;
        }
    }
    let ratios: Vec<_> = (k.ratios.iter()).filter(|r| r.drops > 0).collect();
    if !ratios.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "DROP RATIO: rx: receive-side drops / packets received (IP layer per namespace, per \
             device); tx: transmit-side drops / packets sent (per device, a namespace's devices)"
        )?;
        let label = |r: &Ratio| {
            let n = if r.netns == 0 {
                "all namespaces".to_string()
            } else {
                ns(r.netns)
            };
            let way = r.direction.as_str();
            match &r.device {
                Some(d) => format!("{n} {} {way}", crate::sanitize::terminal(d)),
                None => format!("{n} {way}"),
            }
        };
        let lw = ratios.iter().map(|r| label(r).len()).max().unwrap_or(0);
        for r in ratios {
            let pct = r
                .ratio
                .map_or("no ratio".to_string(), |x| format!("{:.3}%", x * 100.0));
            writeln!(
                out,
                "{:<lw$}  {:>12} drops  {:>14} packets  {pct:>9}",
                label(r),
                count(r.drops),
                count(r.packets)
            )?;
        }
    }
    match &k.ledger {
        Some(l) => write_ledger(k, l, &mut out)?,
        None if k.filter.is_some() => {}
        None => writeln!(
            out,
            "\n(no drop ledger: the counts are grouped without the reason)"
        )?,
    }
    // The ledger's notes are in the ledger; without one, they are said here.
    for e in (k.errors.iter()).filter(|e| k.ledger.is_none() || !is_ledger_note(e)) {
        let e = sanitize::terminal(e);
        if is_ledger_note(&e) {
            writeln!(out, "({e})")?;
        } else {
            writeln!(out, "(kernel counters not read: {e})")?;
        }
    }
    Ok(())
}

/// Writes the ledger: its headline, each layer per namespace and device, and the layer
/// counters that grew.
fn write_ledger(k: &KernelView, l: &Ledger, mut out: impl Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "DROP LEDGER: {}", l.headline.sentence())?;
    let where_ = |netns: u64, device: &Option<String>| {
        let n = k.netns_label(netns);
        match device {
            Some(d) => format!("{n} {}", crate::sanitize::terminal(d)),
            None => n,
        }
    };
    let ww = (l.layers.iter().map(|t| where_(t.netns, &t.device).len()))
        .chain(l.counters.iter().map(|r| where_(r.netns, &r.device).len()))
        .max()
        .unwrap_or(5)
        .max(5);
    if !l.layers.is_empty() {
        writeln!(
            out,
            "{:<9}  {:<ww$}  {:>12}  {:>12}  {:>12}",
            "LAYER", "WHERE", "COUNTED", "ALSO_OTHER", "ONLY_HERE"
        )?;
    }
    for t in &l.layers {
        writeln!(
            out,
            "{:<9}  {:<ww$}  {:>12}  {:>12}  {:>12}",
            t.layer.as_str(),
            where_(t.netns, &t.device),
            count(t.counted),
            count(t.matched),
            count(t.counter_only)
        )?;
    }
    if !l.counters.is_empty() {
        let cw = l
            .counters
            .iter()
            .map(|r| crate::format::counter_name(&r.counter).chars().count())
            .max()
            .unwrap_or(7);
        writeln!(out)?;
        writeln!(
            out,
            "{:<cw$}  {:<ww$}  {:>12}  {:>12}  {:>12}  ROLE",
            "LAYER COUNTER", "WHERE", "DELTA", "KFREE_SKB", "ONLY_COUNTER"
        )?;
        for r in &l.counters {
            writeln!(
                out,
                "{:<cw$}  {:<ww$}  {:>12}  {:>12}  {:>12}  {}",
                crate::format::counter_name(&r.counter),
                where_(r.netns, &r.device),
                count(r.delta),
                count(r.matched),
                count(r.counter_only),
                r.role.word()
            )?;
        }
    }
    for n in &l.notes {
        writeln!(out, "(ledger: {})", sanitize::terminal(n))?;
    }
    Ok(())
}
