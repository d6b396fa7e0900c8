//! The panel under the table: the selected row's entry of the reason guide (`e`), or the
//! kernel's own drop counters with the drops they counted that the probe did not see (`c`), or
//! the drop ledger (`L`) in headed columns that fit the screen.
use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph, Wrap},
};

use crate::{
    explain::{Guide, Match},
    format,
    ledger::KernelView,
    tui::state::{Panel, State},
};

/// Rows the open panel takes from a body of `body` rows (none when closed): at most half.
pub fn height(state: &State, body: u16) -> u16 {
    match state.panel {
        None => 0,
        Some(_) => (body / 2).clamp(3.min(body), 14),
    }
}

/// The guide's lines for one reason: summary, paragraph, what to check (unfilled).
pub fn guide_lines(reason: &str) -> Vec<Line<'static>> {
    filled_guide_lines(reason, None)
}

/// The guide's lines for one reason, its check commands filled in for `target` where given
/// (a row's namespace, device and port; see [`crate::explain::fill`]).
pub fn filled_guide_lines(
    reason: &str,
    target: Option<&crate::explain::fill::Target<'_>>,
) -> Vec<Line<'static>> {
    let e = Guide::builtin().explain(reason);
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{} ", e.name), bold.fg(Color::Yellow)),
        Span::styled(e.summary.clone(), bold),
    ])];
    lines.push(Line::raw(e.text.clone()));
    if e.found == Match::Family {
        lines.push(Line::styled(
            "(the guide's entry for its family of subsystem reasons)",
            Style::new().fg(Color::DarkGray),
        ));
    }
    for c in e.check {
        let c = match target {
            Some(t) => crate::explain::fill::fill_line(c, t),
            None => c.clone(),
        };
        lines.push(Line::from(vec![
            Span::styled("check ", Style::new().fg(Color::Cyan)),
            Span::raw(crate::sanitize::terminal(&c).into_owned()),
        ]));
    }
    lines
}

/// The full listeners a counter-only `TcpExt:ListenDrops` row names, one line each (see
/// [`KernelView::listeners_of`]); none for any other row, or without a reading.
pub fn listener_lines(
    kernel: Option<&KernelView>,
    key: &crate::model::DropKey,
) -> Vec<Line<'static>> {
    let listeners = kernel.map_or(&[][..], |k| k.listeners_of(key));
    listeners
        .iter()
        .map(|l| {
            Line::from(vec![
                Span::styled("full ", Style::new().fg(Color::Red)),
                Span::raw(l.describe()),
            ])
        })
        .collect()
}

/// The counters panel's lines: unseen rows first, labelled, then every counter that grew.
pub fn counter_lines(kernel: Option<&KernelView>, replay: bool) -> Vec<Line<'static>> {
    let dim = Style::new().fg(Color::DarkGray);
    let Some(k) = kernel else {
        let msg = if replay {
            "this recording holds no kernel counters (made without them, or by a dropscope \
             before 0.1 format version 4)"
        } else {
            "waiting for the first reading of the kernel's counters..."
        };
        return vec![Line::styled(msg, dim)];
    };
    let ns = |n: u64| k.netns_label(n);
    let mut lines = Vec::new();
    let unseen = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    if let (None, Some(f)) = (&k.unseen, &k.filter) {
        lines.push(Line::styled(
            format!("unseen drops not computed: only drops of {f} are counted"),
            dim,
        ));
    }
    // Count, counter and namespace in columns as wide as their widest entry, unseen and
    // counted rows alike.
    let name = format::counter_name;
    let cells: Vec<(String, String, String)> = (k.unseen.iter().flatten())
        .map(|u| (format::count(u.count), name(&u.counter), ns(u.netns)))
        .chain((k.counters.iter()).map(|c| (format::count(c.delta), name(&c.counter), ns(c.netns))))
        .collect();
    let width = |f: fn(&(String, String, String)) -> usize| cells.iter().map(f).max().unwrap_or(0);
    let count_w = width(|c| c.0.chars().count()).max(10);
    let counter_w = width(|c| c.1.chars().count());
    let netns_w = width(|c| c.2.chars().count());
    let columns = |(count, counter, netns): &(String, String, String)| {
        [
            format!("{count:>count_w$} "),
            format!("{counter:<counter_w$} netns {netns:<netns_w$} "),
        ]
    };
    let mut cells = cells.iter().map(columns);
    let summed = k.unseen_summed();
    // The unseen rows' cells (the summed flags first: a zip ends there, taking no counter's).
    for (summed, [count, names]) in summed.iter().zip(&mut cells) {
        let why = if *summed {
            "counted by the kernel, not seen by the probe"
        } else {
            "counted by the kernel, not seen by the probe; part of another counter (not summed)"
        };
        lines.push(Line::from(vec![
            Span::styled(format!("UNSEEN {count}"), unseen),
            Span::raw(names),
            Span::styled(why, dim),
        ]));
    }
    if let Some(total) = k.unseen_total().filter(|_| !summed.is_empty()) {
        lines.push(Line::styled(
            format!(
                "{} unseen drops in all (each once: a counter within another is not summed)",
                format::count(total)
            ),
            dim,
        ));
    }
    if k.counters.is_empty() {
        lines.push(Line::styled(
            "no kernel drop counter grew since the start",
            dim,
        ));
    }
    for (c, [count, names]) in k.counters.iter().zip(cells) {
        let reasons = if c.reasons.is_empty() {
            "(freed without a drop reason)".to_string()
        } else {
            c.reasons.join(" ")
        };
        lines.push(Line::from(vec![
            Span::raw(format!("       {count}")),
            Span::raw(names),
            Span::styled(reasons, Style::new().fg(Color::Cyan)),
        ]));
    }
    for e in &k.errors {
        lines.push(Line::styled(
            format!("not read: {}", crate::sanitize::terminal(e)),
            dim,
        ));
    }
    lines
}

/// A column of a ledger table: its heading, and whether its cells are numbers (right-aligned).
struct Col {
    head: &'static str,
    number: bool,
}

const fn col(head: &'static str, number: bool) -> Col {
    Col { head, number }
}

/// A headed table of `rows` in at most `width` columns: each column as wide as its widest
/// cell, the `flex` column (a name) cut to what is left, and a line cut at `width` (never
/// wrapped). `style` colours a cell by its column and text.
fn table(
    cols: &[Col],
    rows: &[Vec<String>],
    flex: usize,
    width: usize,
    style: impl Fn(usize, &str) -> Style,
) -> Vec<Line<'static>> {
    const GAP: usize = 2;
    let mut widths: Vec<usize> = (cols.iter().enumerate())
        .map(|(i, c)| {
            (rows.iter().map(|r| r[i].chars().count()))
                .chain([c.head.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let others: usize = (widths.iter().enumerate())
        .filter(|(i, _)| *i != flex)
        .map(|(_, w)| w + GAP)
        .sum();
    widths[flex] = widths[flex].min(width.saturating_sub(others).max(cols[flex].head.len()));
    let line = |cells: Vec<(String, Style)>| {
        let mut left = width;
        let mut spans = Vec::new();
        for (i, (text, st)) in cells.into_iter().enumerate() {
            let w = widths[i];
            let text = format::truncate(&text, w);
            let mut cell = if cols[i].number {
                format!("{text:>w$}")
            } else {
                format!("{text:<w$}")
            };
            if i + 1 < cols.len() {
                cell.push_str(&" ".repeat(GAP));
            }
            if i + 1 == cols.len() {
                cell.truncate(cell.trim_end().len());
            }
            let cell = format::truncate(&cell, left);
            left = left.saturating_sub(cell.chars().count());
            spans.push(Span::styled(cell, st));
        }
        Line::from(spans)
    };
    let head = Style::new().add_modifier(Modifier::BOLD);
    let mut lines = vec![line(
        cols.iter().map(|c| (c.head.to_string(), head)).collect(),
    )];
    for r in rows {
        lines.push(line(
            (r.iter().enumerate())
                .map(|(i, t)| (t.clone(), style(i, t)))
                .collect(),
        ));
    }
    lines
}

/// The ledger panel's lines, none longer than `width`: the headline (every drop once), the
/// unexplained drops, each layer per namespace and device (where only a counter saw drops
/// first), then the layer counters that grew, in columns headed as `report` prints them.
pub fn ledger_lines(kernel: Option<&KernelView>, replay: bool, width: usize) -> Vec<Line<'static>> {
    let dim = Style::new().fg(Color::DarkGray);
    let Some(k) = kernel else {
        return counter_lines(None, replay);
    };
    let Some(l) = &k.ledger else {
        let why = match &k.filter {
            Some(f) => format!("no ledger: only drops of {f} are counted"),
            None => "no ledger: the counts are grouped without the reason".into(),
        };
        return vec![Line::styled(why, dim)];
    };
    let plain = |_: usize, _: &str| Style::new();
    let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    let place = |netns: u64, device: &Option<String>| {
        let n = k.netns_label(netns);
        match device {
            Some(d) => format!("{} netns {n}", crate::sanitize::terminal_cell(d, 32)),
            None => format!("netns {n}"),
        }
    };
    let h = &l.headline;
    let (x, y) = h.percents();
    let z = 100.0 - x - y;
    let mut lines = table(
        &[
            col("DROPS", true),
            col("WITH REASON AND LOCATION", true),
            col("LAYER COUNTER ONLY", true),
            col("UNEXPLAINED", true),
        ],
        &[vec![
            format::count(h.total),
            format!("{} {x:>5.1}%", format::count(h.with_reason)),
            format!("{} {y:>5.1}%", format::count(h.counter_only)),
            format!("{} {:>5.1}%", format::count(h.unexplained), z.max(0.0)),
        ]],
        0,
        width,
        |i, _| match i {
            3 if h.unexplained > 0 => Style::new().fg(Color::Yellow),
            _ => Style::new(),
        },
    );
    // The unexplained drops: freed without a reason where no layer counter counted them, and
    // those counted without a key.
    if h.unexplained > 0 {
        let mut rows: Vec<Vec<String>> = (l.unexplained.iter())
            .map(|u| {
                vec![
                    format::count(u.count),
                    place(u.netns, &u.device),
                    crate::sanitize::terminal(&u.location).into_owned(),
                ]
            })
            .collect();
        let keyed: u64 = l.unexplained.iter().map(|u| u.count).sum();
        if h.unexplained > keyed {
            rows.push(vec![
                format::count(h.unexplained - keyed),
                "-".into(),
                "counted without a key (see OVERFLOW)".into(),
            ]);
        }
        lines.extend(table(
            &[
                col("UNEXPLAINED", true),
                col("WHERE", false),
                col("FREED WITHOUT A REASON AT", false),
            ],
            &rows,
            2,
            width,
            plain,
        ));
    }
    let mut totals: Vec<_> = l.layers.iter().collect();
    totals.sort_by_key(|t| {
        (
            std::cmp::Reverse(t.counter_only),
            std::cmp::Reverse(t.counted),
        )
    });
    let rows: Vec<Vec<String>> = (totals.iter())
        .map(|t| {
            vec![
                t.layer.as_str().to_string(),
                place(t.netns, &t.device),
                format::count(t.counted),
                format::count(t.matched),
                format::count(t.counter_only),
            ]
        })
        .collect();
    if !rows.is_empty() {
        lines.extend(table(
            &[
                col("LAYER", false),
                col("WHERE", false),
                col("COUNTED", true),
                col("ALSO_OTHER", true),
                col("ONLY_HERE", true),
            ],
            &rows,
            1,
            width,
            |i, t| match i {
                0 => Style::new().fg(Color::Cyan),
                4 if t != "0" => red,
                _ => Style::new(),
            },
        ));
    }
    let rows: Vec<Vec<String>> = (l.counters.iter())
        .map(|r| {
            vec![
                format::counter_name(&r.counter),
                k.netns_label(r.netns),
                format::count(r.delta),
                format::count(r.matched),
                format::count(r.counter_only),
                r.role.word().to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        lines.extend(table(
            &[
                col("LAYER COUNTER", false),
                col("NETNS", false),
                col("DELTA", true),
                col("KFREE_SKB", true),
                col("ONLY_COUNTER", true),
                col("ROLE", false),
            ],
            &rows,
            0,
            width,
            |i, _| if i == 5 { dim } else { Style::new() },
        ));
    }
    for n in &l.notes {
        lines.push(Line::styled(
            format::truncate(&format!("ledger: {}", crate::sanitize::terminal(n)), width),
            dim,
        ));
    }
    lines
}

/// Draws the guide entry of `reason` into `area` (under one row's stacks).
pub fn render_guide(frame: &mut Frame<'_>, area: Rect, reason: &str) {
    if area.height == 0 {
        return;
    }
    let block = Block::new().borders(Borders::TOP).title(Line::styled(
        " reason guide ",
        Style::new().add_modifier(Modifier::BOLD),
    ));
    frame.render_widget(
        Paragraph::new(guide_lines(reason))
            .wrap(Wrap { trim: false })
            .block(block),
        area,
    );
}

/// Draws the open panel into `area`.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State) {
    let (title, lines) = match state.panel {
        _ if area.height == 0 => return,
        None => return,
        Some(Panel::Explain) => {
            let lines = match &state.selected {
                Some(k) => {
                    // Who dropped this row, and what to change, first: the guide's general
                    // causes and checks follow (a short panel cuts those, not these).
                    let row = state.check_target(k);
                    let mut lines = crate::culprit::tui::lines(state.culprits.get(k), Some(&row));
                    lines.extend(filled_guide_lines(&k.reason.name, Some(&row)));
                    lines.extend(listener_lines(state.kernel.as_ref(), k));
                    lines
                }
                None => vec![Line::styled(
                    "select a row to explain its reason",
                    Style::new().fg(Color::DarkGray),
                )],
            };
            (" reason guide (e closes, y copies the first check) ", lines)
        }
        Some(Panel::Counters) => (
            " kernel counters since the start (c closes) ",
            counter_lines(state.kernel.as_ref(), state.is_replay()),
        ),
        Some(Panel::Ledger) => {
            // Lines that fit, none wrapped; where the panel is too short, the last says so.
            let mut lines =
                ledger_lines(state.kernel.as_ref(), state.is_replay(), area.width.into());
            let room = usize::from(area.height.saturating_sub(1));
            if lines.len() > room && room > 0 {
                let more = lines.len() - (room - 1);
                lines.truncate(room - 1);
                lines.push(Line::styled(
                    format::truncate(
                        &format!(
                            "… {more} more lines: a taller terminal shows them (report \
                             prints the whole ledger)"
                        ),
                        area.width.into(),
                    ),
                    Style::new().fg(Color::Yellow),
                ));
            }
            let block = Block::new().borders(Borders::TOP).title(Line::styled(
                " drop ledger since the start (L closes) ",
                Style::new().add_modifier(Modifier::BOLD),
            ));
            frame.render_widget(Paragraph::new(lines).block(block), area);
            return;
        }
    };
    let block = Block::new().borders(Borders::TOP).title(Line::styled(
        title,
        Style::new().add_modifier(Modifier::BOLD),
    ));
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block),
        area,
    );
}
