//! The view: a pure function from [`State`] to what is on screen.
mod compare;
mod header;
mod packets;
pub(super) mod panel;
mod stacks;
mod table;

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph},
};

use super::{
    help::{self, KeyHelp},
    state::{Screen, StackScope, State},
};

/// The screen split into header, body and footer for `state` in `area`.
fn areas(state: &State, area: Rect) -> [Rect; 3] {
    let header = header::lines(state).len() as u16;
    Layout::vertical([
        Constraint::Length(header),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(area)
}

/// The body split into the main view, the sampled packets of one row (only with that row's
/// stacks) and the panel under them: the open panel under the table, or the reason guide
/// under one row's stacks (the row's detail view).
fn split_body(state: &State, body: Rect) -> [Rect; 3] {
    let (packets, panel) = match &state.screen {
        Screen::Table => (0, panel::height(state, body.height)),
        Screen::Stacks(v) if matches!(v.scope, StackScope::Row(_)) => (
            packets::height(&v.packets).min(body.height / 3),
            (body.height / 4).min(6),
        ),
        Screen::Stacks(_) => (0, 0),
    };
    Layout::vertical([
        Constraint::Fill(1),
        Constraint::Length(packets),
        Constraint::Length(panel),
    ])
    .areas(body)
}

fn body_height(state: &State) -> u16 {
    let (w, h) = state.size;
    split_body(state, areas(state, Rect::new(0, 0, w, h))[1])[0].height
}

/// How many table rows fit on the screen (the PgUp/PgDn step).
pub fn table_page(state: &State) -> usize {
    table::page(body_height(state))
}

/// How many stack lines fit on the screen (the PgUp/PgDn step).
pub fn stack_page(state: &State) -> usize {
    stacks::page(body_height(state))
}

/// Draws the whole screen for `state`.
pub fn render(frame: &mut Frame<'_>, state: &State) {
    let area = frame.area();
    let [head, body, foot] = areas(state, area);
    frame.render_widget(Paragraph::new(header::lines(state)), head);
    let [main, sampled, under] = split_body(state, body);
    match &state.screen {
        Screen::Table => {
            match &state.compare {
                Some(v) => compare::render(frame, main, v),
                None => table::render(frame, main, state),
            }
            panel::render(frame, under, state);
        }
        Screen::Stacks(view) => {
            stacks::render(frame, main, view);
            if let StackScope::Row(k) = &view.scope {
                packets::render(frame, sampled, &view.packets);
                panel::render_guide(frame, under, &k.reason.name);
            }
        }
    }
    frame.render_widget(Paragraph::new(footer(state)), foot);
    if state.help {
        render_help(frame, area, state);
    }
}

fn footer(state: &State) -> Line<'static> {
    let key = Style::new().add_modifier(Modifier::BOLD);
    if state.editing {
        return Line::from(vec![
            Span::styled("/", key),
            Span::raw(crate::sanitize::terminal(&state.filter).into_owned()),
            Span::styled("_", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            Span::styled(
                "   Enter keeps the filter, Esc clears it",
                Style::new().fg(Color::DarkGray),
            ),
        ]);
    }
    if let Some(typed) = &state.goto {
        return Line::from(vec![
            Span::styled("go to ", key),
            Span::raw(crate::sanitize::terminal(typed).into_owned()),
            Span::styled("_", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            Span::styled(
                "   Enter jumps (90s, 03:12, 2026-11-27 03:12), Esc gives up",
                Style::new().fg(Color::DarkGray),
            ),
        ]);
    }
    if let Some(typed) = &state.compare_typed {
        return Line::from(vec![
            Span::styled("compare with ", key),
            Span::raw(crate::sanitize::terminal(typed).into_owned()),
            Span::styled("_", Style::new().add_modifier(Modifier::SLOW_BLINK)),
            Span::styled(
                " earlier   Enter compares (1h, 1d, 90 = seconds), Esc gives up",
                Style::new().fg(Color::DarkGray),
            ),
        ]);
    }
    if let Some(msg) = &state.status {
        return Line::styled(
            crate::sanitize::terminal(msg).into_owned(),
            Style::new().fg(Color::Green),
        );
    }
    let mut spans = Vec::new();
    let mut width = usize::from(state.size.0);
    if state.warnings.0 > 0 {
        let n = state.warnings.0;
        let text = format!(
            "{n} warning{}, ? lists them  ",
            if n == 1 { "" } else { "s" }
        );
        width = width.saturating_sub(text.chars().count());
        spans.push(Span::styled(text, Style::new().fg(Color::Yellow)));
    }
    for (k, what) in fitted_hints(super::keys::hints(state), width) {
        spans.push(Span::styled(k, key));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    Line::from(spans)
}

/// The footer's hints that fit in `width` columns: where all do not, the ones `?` help lists
/// anyway go first (copying, sorting, grouping, then pausing, recording, flamegraphs), never
/// `q`, `?`,
/// `/`, Enter, `e` or `c`; the order stays.
fn fitted_hints(
    mut hints: Vec<(&'static str, &'static str)>,
    width: usize,
) -> Vec<(&'static str, &'static str)> {
    let len = |h: &[(&str, &str)]| -> usize {
        h.iter()
            .map(|(k, w)| k.chars().count() + w.chars().count() + 3)
            .sum()
    };
    for label in ["y", "s/S", "b", "space", "r", "f"] {
        if len(&hints) <= width {
            break;
        }
        hints.retain(|(k, _)| *k != label);
    }
    hints
}

fn help_lines(title: &str, keys: &[KeyHelp], state: &State) -> Vec<Line<'static>> {
    let mut out = vec![Line::styled(
        title.to_string(),
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
    )];
    for k in keys.iter().filter(|k| super::keys::offered(k, state)) {
        out.push(Line::from(vec![
            Span::styled(
                format!(" {:<w$}", k.keys, w = help::KEYS_WIDTH),
                Style::new().add_modifier(Modifier::BOLD),
            ),
            Span::raw(k.action),
        ]));
    }
    out
}

/// The `?` overlay: the keys that do something here (live: the replay's timeline keys are
/// only named).
fn render_help(frame: &mut Frame<'_>, area: Rect, state: &State) {
    let mut lines = help_lines("keys", help::GENERAL, state);
    if state.is_replay() {
        lines.extend(help_lines("replay timeline", help::REPLAY, state));
    } else {
        lines.push(Line::styled(
            "seek and speed keys: in dropscope replay <file>",
            Style::new().fg(Color::DarkGray),
        ));
    }
    if !state.warnings.1.is_empty() {
        lines.push(Line::styled(
            format!(
                "warnings (the last {} of {}):",
                state.warnings.1.len(),
                state.warnings.0
            ),
            Style::new().fg(Color::Yellow),
        ));
        let max = usize::from(area.width.saturating_sub(4)).max(20);
        for w in &state.warnings.1 {
            let w = crate::sanitize::terminal(w);
            let mut shown: String = w.chars().take(max).collect();
            if w.chars().count() > max {
                shown.pop();
                shown.push('…');
            }
            lines.push(Line::raw(shown));
        }
    }
    let width = lines
        .iter()
        .map(Line::width)
        .max()
        .unwrap_or(0)
        .saturating_add(3) as u16;
    let height = lines.len() as u16 + 2;
    let w = width.min(area.width);
    let h = height.min(area.height);
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" help: ? or Esc closes ")),
        popup,
    );
}
