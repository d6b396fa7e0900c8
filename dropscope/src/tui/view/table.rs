//! The drop table: reason, location, exact count, rate, share and trend per key.
use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Paragraph, Row, Table},
};

use crate::{
    sanitize,
    tui::{format, state::State},
};

/// Longest name shown in a cell (the screen cuts it further to the column's width).
const MAX_NAME_CHARS: usize = 512;

/// Rows of the table body that fit in a body area of `height` rows (title and column header
/// take two).
pub fn page(height: u16) -> usize {
    usize::from(height.saturating_sub(2)).max(1)
}

fn title(state: &State, shown: usize) -> Line<'static> {
    let t = state.shown();
    let mut spans = vec![Span::styled(
        " drops by reason and location ",
        Style::new().add_modifier(Modifier::BOLD),
    )];
    let keys = t.key_count();
    let noun = if keys == 1 { "key" } else { "keys" };
    spans.push(Span::raw(if state.filter.is_empty() {
        format!(" {keys} {noun} ")
    } else {
        format!(" {shown} of {keys} {noun} ")
    }));
    if let Some(h) = t.latest().map(|s| &s.health)
        && h.keys_capacity > 0
    {
        spans.push(Span::styled(
            format!("(map {}/{}) ", h.keys_used, h.keys_capacity),
            Style::new().fg(Color::DarkGray),
        ));
    }
    spans.push(Span::raw(format!(" sort: {} ", state.sort.label())));
    if !state.filter.is_empty() {
        spans.push(Span::styled(
            format!(" filter: {} ", sanitize::terminal(&state.filter)),
            Style::new().fg(Color::Yellow),
        ));
    }
    Line::from(spans)
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
            "waiting for the first counts..."
        } else if !state.filter.is_empty() {
            "no drops match the filter (Esc clears it)"
        } else {
            "no drops counted yet"
        };
        frame.render_widget(
            Paragraph::new(Line::styled(msg, Style::new().fg(Color::DarkGray))),
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
    let reason_width = rows
        .iter()
        .skip(scroll)
        .take(page)
        .map(|r| sanitize::terminal(&r.key.reason.name).chars().count())
        .max()
        .unwrap_or(6)
        .clamp(6, 28) as u16;
    let visible: Vec<_> = rows
        .iter()
        .enumerate()
        .skip(scroll)
        .take(page)
        .map(|(i, r)| (i, r, format::count(r.count), format::opt_rate(r.rate)))
        .collect();
    // Exact counts are never cut: the column grows to the widest one shown.
    let count_width = visible.iter().map(|v| v.2.len()).max().unwrap_or(0).max(5) as u16;
    let rate_width = visible.iter().map(|v| v.3.len()).max().unwrap_or(0).max(6) as u16;
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let body = visible.into_iter().map(|(i, r, count, rate)| {
        let row = Row::new(vec![
            Cell::from(sanitize::terminal_cell(&r.key.reason.name, MAX_NAME_CHARS)),
            Cell::from(sanitize::terminal_cell(&r.key.location, MAX_NAME_CHARS)),
            right(count),
            right(rate),
            right(format!("{:.1}", r.share)),
            Cell::from(Span::styled(
                format::sparkline(r.trend.iter(), usize::from(trend_width)),
                Style::new().fg(Color::Cyan),
            )),
        ]);
        if Some(i) == selected {
            row.style(Style::new().add_modifier(Modifier::REVERSED))
        } else {
            row
        }
    });
    let head = Row::new(vec![
        Cell::from("REASON"),
        Cell::from("LOCATION"),
        right("COUNT".into()),
        right("RATE/S".into()),
        right("SHARE%".into()),
        Cell::from("TREND"),
    ])
    .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let widths = [
        Constraint::Length(reason_width),
        Constraint::Fill(1),
        Constraint::Length(count_width),
        Constraint::Length(rate_width),
        Constraint::Length(6),
        Constraint::Length(trend_width),
    ];
    frame.render_widget(
        Table::new(body, widths).header(head).column_spacing(1),
        inner,
    );
}
