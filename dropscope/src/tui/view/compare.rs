//! The comparison `v` shows in place of the table: the window shown against the same window an
//! interval earlier, key by key (then, now, the change), significant changes marked.
use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Paragraph, Row, Table, Wrap},
};

use crate::{
    format,
    history::when::local,
    model::compare::{Change, Rates},
    sanitize,
    tui::state::CompareView,
};

/// The mark and colour of a change: `▲` more drops per second (significant), `▼` fewer.
fn mark(r: &Rates) -> (&'static str, Style) {
    match r.change {
        Some(Change::Regression) => ("▲ more", Style::new().fg(Color::Red)),
        Some(Change::Improvement) => ("▼ fewer", Style::new().fg(Color::Green)),
        None => ("", Style::new()),
    }
}

/// The cells of one row: over budget (where budgets were given), change, then, now (rates
/// and counts), ratio, and what is counted.
fn cells(r: &Rates, what: String, budget: Option<bool>) -> (Vec<String>, Style) {
    let (m, mut style) = mark(r);
    let mut cells = vec![
        m.to_string(),
        format!("{}/s", format::rate(r.base_rate)),
        format!("{}/s", format::rate(r.new_rate)),
        format::count(r.base_count),
        format::count(r.new_count),
        format::ratio(r.ratio, r.new_count),
        what,
    ];
    if let Some(over) = budget {
        cells.insert(0, if over { "✗ over" } else { "" }.to_string());
        if over {
            style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        }
    }
    (cells, style)
}

/// A window as `2026-11-27 03:10:00 – 03:20:00`, the dates left out where they are `date`'s.
fn window(w: crate::history::range::Window, date: Option<&str>) -> String {
    let (a, b) = (local(w.from_ms), local(w.to_ms));
    let day = |t: &str| t.split_once(' ').map(|(d, _)| d.to_string());
    let time = |t: &str| {
        t.split_once(' ')
            .map_or(t.to_string(), |(_, h)| h.to_string())
    };
    let a_day = day(&a);
    let a = if date.is_some() && a_day.as_deref() == date {
        time(&a)
    } else {
        a
    };
    let b = if day(&b) == a_day { time(&b) } else { b };
    format!("{a} – {b}")
}

/// The title: which windows are compared (Esc leaving is said under the rows).
fn title(v: &CompareView) -> Line<'static> {
    let c = &v.compared;
    let now = local(c.now.from_ms);
    let date = now.split_once(' ').map(|(d, _)| d);
    Line::from(vec![
        Span::styled(" compare ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "now {} vs then {} ({} earlier, p < {}) ",
            window(c.now, None),
            window(c.then, date),
            format::duration(c.vs),
            c.alpha
        )),
    ])
}

/// Rows that fit in a body of `height` lines (a title, a heading and the total take three,
/// the notes under the rows two).
fn page(height: u16) -> usize {
    usize::from(height.saturating_sub(5)).max(1)
}

/// Draws `v` in `area`.
pub fn render(frame: &mut Frame<'_>, area: Rect, v: &CompareView) {
    let block = Block::new().borders(Borders::TOP).title(title(v));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let c = &v.compared;
    let judged = !c.verdicts.is_empty();
    let over = |key| judged.then(|| !c.over_budget(key).is_empty());
    let mut lines = Vec::new();
    let (total, style) = cells(&c.comparison.total, "all drops".into(), over(None));
    lines.push((total, style.add_modifier(Modifier::BOLD)));
    let n = c.comparison.rows.len();
    let scroll = v.scroll.min(n.saturating_sub(1));
    let page = page(area.height);
    let more = n.saturating_sub(scroll + page);
    for r in c.comparison.rows.iter().skip(scroll).take(page) {
        let what = sanitize::terminal(&r.key.describe()).into_owned();
        lines.push(cells(&r.rates, what, over(Some(&r.key))));
    }
    let mut heads = vec!["CHANGE", "THEN", "NOW", "THEN#", "NOW#", "RATIO", "DROPS"];
    if judged {
        heads.insert(0, "BUDGET");
    }
    let widths: Vec<u16> = (0..heads.len() - 1)
        .map(|i| {
            (lines.iter().map(|(l, _)| l[i].chars().count()))
                .chain([heads[i].len()])
                .max()
                .unwrap_or(0) as u16
        })
        .collect();
    let mut constraints: Vec<Constraint> = widths.iter().map(|w| Constraint::Length(*w)).collect();
    constraints.push(Constraint::Fill(1));
    let rows = lines
        .into_iter()
        .map(|(l, style)| Row::new(l.into_iter().map(Cell::from)).style(style));
    let header = Row::new(heads.clone()).style(Style::new().add_modifier(Modifier::BOLD));
    let [table, notes] =
        ratatui::layout::Layout::vertical([Constraint::Fill(1), Constraint::Length(2)])
            .areas(inner);
    frame.render_widget(
        Table::new(rows, constraints)
            .header(header)
            .column_spacing(2),
        table,
    );
    let mut text: Vec<String> = c
        .notes
        .iter()
        .map(|n| sanitize::terminal(n).into_owned())
        .collect();
    for (_, verdict) in &c.verdicts {
        let m = sanitize::terminal(&verdict.message);
        text.push(if verdict.ok {
            format!("within budget: {m}")
        } else {
            format!("over budget: {m}")
        });
    }
    if more > 0 {
        text.insert(0, format!("{more} more rows (Down, PgDn)"));
    }
    text.insert(0, "Esc leaves the comparison".into());
    frame.render_widget(
        Paragraph::new(text.join("; "))
            .style(Style::new().fg(Color::DarkGray))
            .wrap(Wrap { trim: true }),
        notes,
    );
}
