//! The drop table: reason, location, the attribution columns the counts have (namespace,
//! interface, protocol, port, socket), exact count, rate, share and trend per key.
use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Paragraph, Row, Table, Wrap},
};

use crate::{
    format,
    model::{
        DropKey, counter_only,
        group::Dim,
        table::{Row as TableRow, SortKey},
    },
    sanitize,
    tui::state::State,
};

/// An attribution column: its heading, width bounds, and the text of a key's cell.
struct AttrColumn {
    head: &'static str,
    min: usize,
    max: usize,
    text: fn(&DropKey) -> Option<String>,
}

/// The fewest columns the location keeps while other columns can be cut.
const LOCATION_MIN: u16 = 14;
/// The fewest columns a socket or culprit cell is cut to, to make room for the location.
const CUT_CELL_MIN: u16 = 8;

/// The attribution columns, in the order shown.
const ATTR_COLUMNS: &[AttrColumn] = &[
    AttrColumn {
        head: "NETNS",
        min: 5,
        max: 24,
        text: |k| {
            let a = &k.attr;
            a.netns_name
                .as_deref()
                .map(str::to_string)
                .or_else(|| a.netns.map(|n| n.to_string()))
        },
    },
    AttrColumn {
        head: "DEVICE",
        min: 6,
        max: 15,
        text: |k| k.attr.device.as_deref().map(str::to_string),
    },
    AttrColumn {
        head: "PROTO",
        min: 5,
        max: 6,
        text: |k| k.attr.protocol.as_deref().map(str::to_string),
    },
    AttrColumn {
        head: "PORT",
        min: 4,
        max: 5,
        text: |k| k.attr.port.map(|p| p.to_string()),
    },
    AttrColumn {
        head: "SOCKET",
        min: 6,
        max: 40,
        // A socket the WHO column names (the culprit) is not said again here.
        text: |k| {
            let buffer = crate::model::socket::buffer_reason(&k.reason.name);
            (k.attr.socket.as_ref())
                .filter(|_| !crate::culprit::sockets::named(k))
                .map(|s| s.cell(buffer))
        },
    },
];

/// The attribution columns some row has, each with its width for the rows shown.
fn attr_columns(rows: &[TableRow<'_>], shown: &[&TableRow<'_>]) -> Vec<(&'static AttrColumn, u16)> {
    ATTR_COLUMNS
        .iter()
        .filter(|c| rows.iter().any(|r| (c.text)(&r.key).is_some()))
        .map(|c| {
            let w = shown
                .iter()
                .filter_map(|r| (c.text)(&r.key))
                .map(|t| sanitize::terminal(&t).chars().count())
                .max()
                .unwrap_or(0)
                .clamp(c.min, c.max);
            (c, w as u16)
        })
        .collect()
}

/// Longest name shown in a cell (the screen cuts it further to the column's width).
const MAX_NAME_CHARS: usize = 512;

/// Rows of the table body that fit in a body area of `height` rows (title and column header
/// take two).
pub fn page(height: u16) -> usize {
    usize::from(height.saturating_sub(2)).max(1)
}

fn title(state: &State, shown: usize) -> Line<'static> {
    let t = state.shown();
    let (dims, coarser) = state.grouping_dims();
    let names: Vec<&str> = dims.iter().map(|d| d.name()).collect();
    let mut spans = vec![Span::styled(
        format!(" drops by {} ", names.join(",")),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    if coarser {
        spans.push(Span::styled(
            "(regrouped: b) ",
            Style::new().fg(Color::Yellow),
        ));
    }
    let keys = if state.grouping_dims().1 {
        state
            .shown()
            .grouped_rows(
                state.sort,
                "",
                state.regrouping().as_deref(),
                state.filters.is_none(),
            )
            .len()
    } else if state.filters.is_some() {
        // The programs' and counters' rows are not shown under drop filters: nor are they
        // counted here.
        t.key_count() - t.beside_keys()
    } else {
        t.key_count()
    };
    let noun = if keys == 1 { "key" } else { "keys" };
    spans.push(Span::raw(if state.filter.is_empty() {
        format!(" {keys} {noun} ")
    } else {
        format!(" {shown} of {keys} {noun} ")
    }));
    // What the order is by comes before what an 80-column title may cut.
    spans.push(Span::raw(format!(
        " sort: {} {} ",
        state.sort.label(),
        marker(state)
    )));
    if !state.filter.is_empty() {
        spans.push(Span::styled(
            format!(" filter: {} ", sanitize::terminal(&state.filter)),
            Style::new().fg(Color::Yellow),
        ));
    }
    if let Some(h) = t.latest().map(|s| &s.health)
        && h.keys_capacity > 0
    {
        spans.push(Span::styled(
            format!(" (map {}/{}) ", h.keys_used, h.keys_capacity),
            Style::new().fg(Color::DarkGray),
        ));
    }
    // RATE/S and the trend are over the interval between the last two snapshots shown.
    if let Some(w) = state.rate_window() {
        spans.push(Span::raw(format!(
            " rate over {} ",
            format::millis(w.as_millis() as u64)
        )));
    }
    // RATIO% is over the interval between the last two readings of the kernel's counters.
    if let Some(w) = state.shown().ratio_window() {
        spans.push(Span::raw(format!(
            " ratio over {} ",
            format::millis(w.as_millis() as u64)
        )));
    }
    Line::from(spans)
}

/// The sort direction as the sorted column shows it: `▼` descending, `▲` ascending.
fn marker(state: &State) -> char {
    if state.descending() { '▼' } else { '▲' }
}

/// The column headings REASON, LOCATION, COUNT and RATE/S, the sorted one marked.
fn headings(state: &State) -> [String; 4] {
    let mark = |name: &str, key: SortKey| {
        if state.sort == key {
            format!("{name}{}", marker(state))
        } else {
            name.to_string()
        }
    };
    [
        mark("REASON", SortKey::Reason),
        mark("LOCATION", SortKey::Location),
        mark("COUNT", SortKey::Count),
        mark("RATE/S", SortKey::Rate),
    ]
}

/// A drop ratio as a percentage: one decimal from 1%, three below; `-` when unknown.
fn ratio_percent(ratio: Option<f64>) -> String {
    match ratio.map(|r| r * 100.0) {
        Some(p) if p >= 1.0 => format!("{p:.1}"),
        Some(p) => format!("{p:.3}"),
        None => "-".into(),
    }
}

/// Draws the table into `area`.
pub fn render(frame: &mut Frame<'_>, area: Rect, state: &State) {
    let rows = state.rows();
    let block = Block::new()
        .borders(Borders::TOP)
        .title(title(state, rows.len()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if rows.is_empty() {
        let msg = if state.shown().latest().is_none() {
            "waiting for the first counts...".into()
        } else if let Some(e) = state.uncounted_filter() {
            format!(
                "no drops match {}: {} (Esc clears the filter)",
                e.what,
                e.why()
            )
        } else if !state.filter.is_empty() {
            "no drops match the filter (Esc clears it)".into()
        } else {
            "no drops counted yet".into()
        };
        frame.render_widget(
            Paragraph::new(Line::styled(msg, Style::new().fg(Color::DarkGray)))
                .wrap(Wrap { trim: true }),
            inner,
        );
        return;
    }
    let page = page(area.height);
    let selected = state.selected_index(&rows);
    // Keep the selection visible even if the stored scroll is stale.
    let mut scroll = state.scroll.min(rows.len().saturating_sub(page));
    if let Some(sel) = selected {
        scroll = scroll.min(sel).max((sel + 1).saturating_sub(page));
    }
    let trend_width: u16 = if area.width >= 120 { 24 } else { 10 };
    let [reason_head, location_head, count_head, rate_head] = headings(state);
    let head_width = |h: &str| h.chars().count();
    let reason_width = rows
        .iter()
        .skip(scroll)
        .take(page)
        .map(|r| sanitize::terminal(&r.key.reason.name).chars().count())
        .max()
        .unwrap_or(6)
        .clamp(head_width(&reason_head), 28) as u16;
    let visible: Vec<_> = rows
        .iter()
        .enumerate()
        .skip(scroll)
        .take(page)
        .map(|(i, r)| (i, r, format::count(r.count), format::opt_rate(r.rate)))
        .collect();
    // Exact counts are never cut: the column grows to the widest one shown.
    let count_width = (visible.iter().map(|v| v.2.len()).max())
        .unwrap_or(0)
        .max(head_width(&count_head)) as u16;
    let rate_width = (visible.iter().map(|v| v.3.len()).max())
        .unwrap_or(0)
        .max(head_width(&rate_head)) as u16;
    let shown: Vec<&TableRow<'_>> = visible.iter().map(|v| v.1).collect();
    // Drops per packet received, where the kernel's counters give the packets.
    let with_ratio = shown.iter().any(|r| r.ratio.is_some());
    let attrs = attr_columns(&rows, &shown);
    // Who dropped them, where a row shown has a culprit (see `culprit`).
    let who: Vec<String> = (shown.iter())
        .map(|r| crate::culprit::tui::cell(state.culprits.get(&r.key)))
        .collect();
    let who_width = if who.iter().all(|w| w == "-") {
        0
    } else {
        // At least its head's width, as the column is laid out.
        let widest = who.iter().map(|w| w.chars().count()).max().unwrap_or(3);
        widest.clamp(3, crate::culprit::tui::WHO_WIDTH) as u16
    };
    let who_min = (shown.iter())
        .map(|r| crate::culprit::tui::min_width(state.culprits.get(&r.key)))
        .max()
        .unwrap_or(0)
        .clamp(usize::from(CUT_CELL_MIN), crate::culprit::tui::WHO_MIN_MAX)
        .min(usize::from(who_width)) as u16;
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    // A name the grouping merged away is `*` in every row: its column is left out.
    let (dims, _) = state.grouping_dims();
    // A program's row keeps its verdict and program whatever the grouping (it is never merged
    // with the probe's), a counter-only row its counter: where one is shown, so are those
    // columns (`*` in the probe's rows).
    let program = shown.iter().any(|r| counter_only::is_beside(&r.key));
    let by_reason = program || dims.contains(&Dim::Reason);
    let by_location = program || dims.contains(&Dim::Location);
    // The location (where in the kernel) keeps LOCATION_MIN columns where it can: long socket
    // or culprit cells are cut first (their whole text is in the Enter and `e` views), WHO no
    // narrower than its cells' shortest useful form (a program's name: at 100 columns the
    // location is then narrower).
    let mut attr_widths: Vec<u16> = attrs.iter().map(|(_, w)| *w).collect();
    let mut who_cut = who_width;
    if by_location {
        let columns = 1 + attrs.len() + usize::from(who_width > 0) + 4 + usize::from(with_ratio);
        let fixed = u32::from(if by_reason { reason_width } else { 0 })
            + attr_widths.iter().map(|w| u32::from(*w)).sum::<u32>()
            + u32::from(who_width)
            + u32::from(count_width)
            + u32::from(rate_width)
            + 6
            + if with_ratio { 7 } else { 0 }
            + u32::from(trend_width)
            + columns as u32;
        let mut short = (fixed + u32::from(LOCATION_MIN)).saturating_sub(u32::from(inner.width));
        // WHO keeps at least its cells' shortest useful forms (a program's name), the others
        // CUT_CELL_MIN.
        let cuts = std::iter::once((&mut who_cut, who_min))
            .chain(attr_widths.iter_mut().rev().map(|w| (w, CUT_CELL_MIN)));
        for (w, min) in cuts {
            let cut = (*w)
                .saturating_sub(min)
                .min(short.min(u32::from(u16::MAX)) as u16);
            *w -= cut;
            short -= u32::from(cut);
        }
    }
    let body = visible.into_iter().map(|(i, r, count, rate)| {
        let mut cells = Vec::new();
        if by_reason {
            cells.push(Cell::from(sanitize::terminal_cell(
                &r.key.reason.name,
                MAX_NAME_CHARS,
            )));
        }
        if by_location {
            cells.push(Cell::from(sanitize::terminal_cell(
                &r.key.location,
                MAX_NAME_CHARS,
            )));
        }
        for (c, _) in &attrs {
            let text = (c.text)(&r.key).unwrap_or_else(|| "-".into());
            cells.push(Cell::from(sanitize::terminal_cell(&text, MAX_NAME_CHARS)));
        }
        if who_width > 0 {
            let c = state.culprits.get(&r.key);
            let text = crate::culprit::tui::within(c, usize::from(who_cut));
            cells.push(Cell::from(sanitize::terminal_cell(&text, MAX_NAME_CHARS)));
        }
        cells.extend([right(count), right(rate), right(format!("{:.1}", r.share))]);
        if with_ratio {
            cells.push(right(ratio_percent(r.ratio)));
        }
        cells.extend([Cell::from(Span::styled(
            format::sparkline(r.trend.iter(), usize::from(trend_width)),
            Style::new().fg(Color::Cyan),
        ))]);
        let row = Row::new(cells);
        if Some(i) == selected {
            row.style(Style::new().add_modifier(Modifier::REVERSED))
        } else {
            row
        }
    });
    let mut head = Vec::new();
    let mut widths = Vec::new();
    if by_reason {
        head.push(Cell::from(reason_head));
        widths.push(Constraint::Length(reason_width));
    }
    if by_location {
        head.push(Cell::from(location_head));
        widths.push(Constraint::Fill(1));
    }
    head.extend(attrs.iter().map(|(c, _)| Cell::from(c.head)));
    if who_width > 0 {
        head.push(Cell::from("WHO"));
    }
    head.extend([right(count_head), right(rate_head), right("SHARE%".into())]);
    if with_ratio {
        head.push(right("RATIO%".into()));
    }
    head.push(Cell::from("TREND"));
    let head =
        Row::new(head).style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    widths.extend(attr_widths.iter().map(|w| Constraint::Length(*w)));
    if who_width > 0 {
        widths.push(Constraint::Length(who_cut.max(3)));
    }
    widths.extend([
        Constraint::Length(count_width),
        Constraint::Length(rate_width),
        Constraint::Length(6),
    ]);
    if with_ratio {
        widths.push(Constraint::Length(7));
    }
    widths.push(Constraint::Length(trend_width));
    frame.render_widget(
        Table::new(body, widths).header(head).column_spacing(1),
        inner,
    );
}
