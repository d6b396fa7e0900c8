//! The header: session, totals, own cost, replay/recording/pause state, and warnings.
use ratatui::{
    style::{Color, Modifier, Style},
    text::{Line, Span},
};

use crate::{format, tui::state::State};

const SEP: &str = "  ";
/// Longest host, kernel or probe name shown (they come from the recording).
const MAX_INFO_CHARS: usize = 64;

fn label(s: &str) -> Span<'static> {
    Span::styled(s.to_string(), Style::new().fg(Color::DarkGray))
}

fn value(s: String) -> Span<'static> {
    Span::styled(s, Style::new().add_modifier(Modifier::BOLD))
}

/// The header lines for `state`: session, counts and own cost always (on two lines when the
/// screen is narrow), plus a mode line (replay, pause, recording) and warnings (overflow, stack
/// health) when they have something to say.
pub fn lines(state: &State) -> Vec<Line<'static>> {
    let mut out = vec![session_line(state)];
    let width = usize::from(state.size.0);
    out.extend(pack(vec![counts_spans(state), cost_spans(state)], width));
    let mode = mode_spans(state);
    if !mode.is_empty() {
        out.push(Line::from(mode));
    }
    out.extend(pack(warning_groups(state), width));
    if let Some(t) = &state.timeline {
        out.push(timeline_line(state, t, width));
    }
    out
}

/// The history's strip of drops/s (blank: not recorded), `|` at the replay's position.
fn timeline_line(
    state: &State,
    t: &crate::history::timeline::Timeline,
    width: usize,
) -> Line<'static> {
    let label = "history ";
    let ends = format!(
        " {} – {}",
        crate::history::when::local(t.from_ms),
        crate::history::when::local(t.to_ms)
    );
    let cursor = state.replay.as_ref().map(|r| t.wall_ms(r.position));
    let gap = cursor.and_then(|c| t.gap_at(c)).map(|(a, b)| {
        format!(
            "  in a gap: not recorded {} – {} (not zero drops)",
            crate::history::when::local(a),
            crate::history::when::local(b)
        )
    });
    let room = width
        .saturating_sub(
            label.len() + ends.chars().count() + gap.as_ref().map_or(0, |g| g.chars().count()),
        )
        .max(8);
    let mut spans = vec![
        Span::styled(label, Style::new().add_modifier(Modifier::BOLD)),
        Span::styled(t.strip(room, cursor), Style::new().fg(Color::Red)),
        Span::raw(ends),
    ];
    if let Some(g) = gap {
        spans.push(Span::styled(g, Style::new().fg(Color::Yellow)));
    }
    Line::from(spans)
}

/// Puts groups of spans on as few lines as fit in `width`, never splitting a group.
fn pack(groups: Vec<Vec<Span<'static>>>, width: usize) -> Vec<Line<'static>> {
    let mut lines: Vec<Vec<Span<'static>>> = Vec::new();
    let mut used = 0;
    for g in groups.into_iter().filter(|g| !g.is_empty()) {
        let w: usize = g.iter().map(Span::width).sum();
        match lines.last_mut() {
            Some(line) if used + SEP.len() + w <= width => {
                line.push(Span::raw(SEP));
                line.extend(g);
                used += SEP.len() + w;
            }
            _ => {
                lines.push(g);
                used = w;
            }
        }
    }
    lines.into_iter().map(Line::from).collect()
}

fn session_line(state: &State) -> Line<'static> {
    let i = &state.info;
    let mut spans = vec![Span::styled(
        "dropscope",
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
    )];
    for part in [&i.host, &i.kernel, &i.probe] {
        if !part.is_empty() {
            spans.push(Span::raw(SEP));
            spans.push(Span::raw(crate::sanitize::terminal_cell(
                part,
                MAX_INFO_CHARS,
            )));
        }
    }
    spans.push(Span::raw(SEP));
    spans.push(label("elapsed "));
    spans.push(value(format::clock(state.elapsed())));
    Line::from(spans)
}

fn counts_spans(state: &State) -> Vec<Span<'static>> {
    let t = state.shown();
    let snap = t.latest();
    let total = snap.map_or(0, |s| s.total);
    let poll = snap.map_or(0, |s| s.health.poll_interval_ms);
    let mut spans = vec![
        label("total "),
        value(format::count(total)),
        Span::raw(SEP),
        value(format::opt_rate(t.total_rate())),
        label(" drops/s"),
        Span::raw(SEP),
    ];
    // XDP and tc programs' verdicts are rows of their own, never in the probe's total.
    if t.program_total() > 0 && state.filters.is_none() {
        spans.extend([
            label("programs "),
            value(format::count(t.program_total())),
            Span::raw(SEP),
        ]);
    }
    spans.extend([label("poll "), Span::raw(format::millis(poll))]);
    spans
}

/// dropscope's own cost: its CPU, and where asked for, its syscalls (`--count-syscalls`) and
/// the probe's run time (`--bpf-stats`); what was not asked for is not shown as `n/a`/`off`.
fn cost_spans(state: &State) -> Vec<Span<'static>> {
    let t = state.shown();
    let snap = t.latest();
    let cost = t.cost();
    let mut spans = vec![
        label("self cpu "),
        Span::raw(
            cost.cpu_percent
                .map_or_else(|| "-".into(), |c| format!("{c:.1}%")),
        ),
    ];
    if snap.is_some_and(|s| s.health.self_syscalls.is_some()) {
        spans.extend([
            Span::raw(SEP),
            Span::raw(
                cost.syscalls_per_sec
                    .map_or("-".into(), |s| format!("{s:.1}")),
            ),
            label(" syscalls/s"),
        ]);
    }
    if cost.bpf_stats {
        spans.extend([
            Span::raw(SEP),
            Span::raw(match cost.bpf_ns_per_run {
                Some(ns) => format!("bpf {ns:.0} ns/run"),
                None => "bpf - ns/run".into(),
            }),
        ]);
    }
    spans
}

fn mode_spans(state: &State) -> Vec<Span<'static>> {
    let mut spans = Vec::new();
    let badge = |s: &str, bg: Color| {
        Span::styled(
            format!(" {s} "),
            Style::new()
                .fg(Color::Black)
                .bg(bg)
                .add_modifier(Modifier::BOLD),
        )
    };
    if let Some(r) = state.replay.as_ref().filter(|r| r.live) {
        spans.push(badge("LIVE", Color::Red));
        spans.push(Span::raw(format!(
            " stream  {}  ",
            format::clock(r.duration)
        )));
        spans.push(Span::raw(SEP));
    } else if let Some(r) = &state.replay {
        spans.push(badge("REPLAY", Color::Blue));
        spans.push(Span::raw(format!(
            " {} / {}  {}  ",
            format::clock(r.position),
            format::clock(r.duration),
            format::speed(if r.speed > 0.0 { r.speed } else { 1.0 }),
        )));
        spans.push(if r.paused {
            badge("PAUSED", Color::Yellow)
        } else {
            Span::raw("playing")
        });
        spans.push(Span::raw(SEP));
    } else if state.frozen.is_some() {
        spans.push(badge("PAUSED", Color::Yellow));
        spans.push(Span::raw(" display frozen, still counting"));
        spans.push(Span::raw(SEP));
    }
    if let Some(f) = &state.filters {
        spans.push(badge("FILTER", Color::Magenta));
        spans.push(Span::raw(format!(
            " only {}",
            crate::sanitize::terminal_cell(f, MAX_INFO_CHARS * 2)
        )));
        spans.push(Span::raw(SEP));
    }
    if let Some(rec) = &state.recording {
        spans.push(badge("REC", Color::Red));
        spans.push(Span::raw(format!(
            " {} {}",
            rec.name,
            format::bytes(rec.bytes)
        )));
    }
    spans
}

fn warning_groups(state: &State) -> Vec<Vec<Span<'static>>> {
    let mut groups = Vec::new();
    let Some(snap) = state.shown().latest() else {
        return groups;
    };
    if snap.overflow > 0 {
        groups.push(vec![Span::styled(
            format!(
                " OVERFLOW {} drops not keyed: map full ({}/{} keys) ",
                format::count(snap.overflow),
                snap.health.keys_used,
                snap.health.keys_capacity
            ),
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD),
        )]);
    }
    let alarm = Style::new()
        .fg(Color::White)
        .bg(Color::Red)
        .add_modifier(Modifier::BOLD);
    let keyed = snap.keyed_sum() + snap.overflow;
    if keyed != snap.total {
        // Never expected: the kernel's own total disagrees with keyed + overflow after a
        // settled read. Shown rather than hidden.
        groups.push(vec![Span::styled(
            format!(
                " MISMATCH kernel total {} vs keyed + overflow {} ",
                format::count(snap.total),
                format::count(keyed)
            ),
            alarm,
        )]);
    }
    let unseen = (state.kernel.as_ref())
        .and_then(|k| k.unseen_total())
        .unwrap_or(0);
    if unseen > 0 {
        groups.push(vec![Span::styled(
            format!(
                " UNSEEN {}: drops the kernel counted that kfree_skb never saw (c) ",
                format::count(unseen)
            ),
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
        )]);
    }
    let h = &snap.health;
    if h.recursion_misses > 0 {
        groups.push(vec![Span::styled(
            format!(
                " MISSED {} drops: probe runs the kernel skipped ",
                format::count(h.recursion_misses)
            ),
            alarm,
        )]);
    }
    let problems: Vec<String> = [
        (h.stack_errors, "failed"),
        (h.stack_overflow, "overflowed"),
        (h.stack_lost, "lost"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", format::count(*n)))
    .collect();
    if !problems.is_empty() {
        groups.push(vec![Span::styled(
            format!("stack samples: {}", problems.join(", ")),
            Style::new().fg(Color::Yellow),
        )]);
    }
    groups
}
