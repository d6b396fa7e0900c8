//! The stack view: the sampled call stacks of one row or of the filtered set, as a tree from
//! the drop site out to the outermost caller (what a short screen shows first is where the
//! packet was dropped), the frame a softirq began at marked, each path with its share and
//! estimated count.
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
};

use crate::{format, model::stacks::NodeKind, sanitize, tui::state::StackView};

/// Longest name shown on one line (the screen cuts it further to its width).
const MAX_LABEL_CHARS: usize = 512;

/// Lines of the tree that fit in a body area of `height` rows (title, two summary lines and the
/// column header take four; a row's socket line one more, which a page step ignores).
pub fn page(height: u16) -> usize {
    usize::from(height.saturating_sub(4)).max(1)
}

/// Draws the stack view into `area`.
pub fn render(frame: &mut Frame<'_>, area: Rect, view: &StackView) {
    let block = Block::new().borders(Borders::TOP).title(Line::from(vec![
        Span::styled(" stacks ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            " {} ",
            sanitize::terminal_cell(&view.scope.describe(), MAX_LABEL_CHARS)
        )),
    ]));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [summary, head, body] = Layout::vertical([
        Constraint::Length(2 + u16::from(view.socket.is_some())),
        Constraint::Length(1),
        Constraint::Fill(1),
    ])
    .areas(inner);
    let dim = Style::new().fg(Color::DarkGray);
    let estimate = Style::new().fg(Color::Magenta);
    frame.render_widget(
        Paragraph::new(
            vec![
                Line::from(vec![
                    Span::raw("exact count "),
                    Span::styled(
                        format::count(view.exact),
                        Style::new().add_modifier(Modifier::BOLD),
                    ),
                    Span::raw("   "),
                    Span::styled(
                        format!(
                            "sampled estimate ~{} from {} stack samples",
                            format::count(view.estimated),
                            format::count(view.samples)
                        ),
                        estimate,
                    ),
                ]),
                Line::styled(
                    "stack counts are sampled estimates (~); per-key counts are exact",
                    dim,
                ),
            ]
            .into_iter()
            .chain(view.socket.as_deref().map(|s| {
                Line::styled(
                    sanitize::terminal_cell(s, MAX_LABEL_CHARS),
                    Style::new().fg(Color::Cyan),
                )
            }))
            .collect::<Vec<_>>(),
        ),
        summary,
    );
    frame.render_widget(
        Paragraph::new(Line::styled(
            " SHARE   EST.COUNT  drop site first, then its callers",
            Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        )),
        head,
    );
    if view.lines.is_empty() {
        frame.render_widget(
            Paragraph::new(vec![
                Line::styled("no stack samples for this selection yet", dim),
                Line::styled(
                    "(each key's first drop is sampled, later drops at a rate; stacks may be off)",
                    dim,
                ),
            ]),
            body,
        );
        return;
    }
    let page = usize::from(body.height);
    let scroll = view.scroll.min(view.lines.len().saturating_sub(page));
    let lines: Vec<Line<'_>> = view
        .lines
        .iter()
        .skip(scroll)
        .take(page)
        .map(|l| {
            let numbers = if l.head {
                format!(
                    "{:>5.1}% {:>11} ",
                    l.share,
                    format!("~{}", format::count(l.weight))
                )
            } else {
                " ".repeat(19)
            };
            let indent = "  ".repeat(l.depth);
            let label = match l.kind {
                NodeKind::Reason => Span::styled(
                    format!("[{}]", sanitize::terminal_cell(&l.label, MAX_LABEL_CHARS)),
                    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
                ),
                NodeKind::Frame => Span::raw(sanitize::terminal_cell(&l.label, MAX_LABEL_CHARS)),
            };
            let mut spans = vec![Span::styled(numbers, estimate), Span::raw(indent), label];
            if l.softirq {
                spans.push(Span::styled(
                    "  ◀ softirq begins (the frames above ran in it)",
                    Style::new().fg(Color::Cyan),
                ));
            }
            Line::from(spans)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), body);
}
