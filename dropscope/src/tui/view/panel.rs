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
    ledger::KernelView,
    tui::{
        format,
        state::{Panel, State},
    },
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
                    let mut lines =
                        filled_guide_lines(&k.reason.name, Some(&state.check_target(k)));
                    lines.extend(listener_lines(state.kernel.as_ref(), k));
                    lines.extend(crate::culprit::tui::lines(state.culprits.get(k)));
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::{Terminal, backend::TestBackend};

    use crate::{
        ledger::{CounterDelta, KernelView, Unseen},
        model::{DropCount, DropKey, Reason, SessionInfo, Snapshot},
        tui::{
            state::{Panel, Screen, State},
            update::{Msg, update},
            view,
        },
    };

    fn state() -> State {
        let mut s = State::new(SessionInfo::default(), None, (100, 30));
        let key = DropKey {
            reason: Reason {
                code: 16,
                name: "SOCKET_RCVBUFF".into(),
            },
            location: "__udp_queue_rcv_skb+0x1".into(),
            attr: Default::default(),
        };
        let snap = Snapshot {
            elapsed: Duration::from_secs(1),
            total: 7,
            drops: vec![DropCount { key, count: 7 }],
            ..Default::default()
        };
        update(&mut s, Msg::Snapshot(Box::new(snap), Instant::now()));
        s
    }

    fn press(s: &mut State, c: char) {
        update(
            s,
            Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)),
        );
    }

    fn screen(s: &State) -> String {
        let (w, h) = s.size;
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| view::render(f, s)).expect("draw");
        let buf = t.backend().buffer();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
            .collect()
    }

    #[test]
    fn e_shows_the_selected_rows_guide_entry_and_closes_again() {
        let mut s = state();
        let rows_before = view::table_page(&s);
        assert!(!screen(&s).contains("reason guide"));
        press(&mut s, 'e');
        assert_eq!(s.panel, Some(Panel::Explain));
        let out = screen(&s);
        assert!(out.contains("reason guide"), "{out}");
        assert!(out.contains("receive buffer was full"), "{out}");
        assert!(out.contains("rmem_max"), "{out}");
        assert!(
            view::table_page(&s) < rows_before,
            "the panel takes rows from the table"
        );
        press(&mut s, 'e');
        assert_eq!(s.panel, None);
        assert!(!screen(&s).contains("reason guide"));
    }

    #[test]
    fn the_panel_fills_the_checks_with_the_rows_namespace_and_port_and_y_copies_one() {
        use crate::explain::fill::Way;
        let mut s = State::new(SessionInfo::default(), None, (140, 40));
        let mut key = DropKey {
            reason: Reason {
                code: 6,
                name: "SOCKET_RCVBUFF".into(),
            },
            location: "__udp_queue_rcv_skb+0x1".into(),
            attr: Default::default(),
        };
        key.attr.netns = Some(4026532999);
        key.attr.netns_name = Some("ux3app".into());
        key.attr.port = Some(8888);
        key.attr.protocol = Some("udp".into());
        let snap = Snapshot {
            elapsed: Duration::from_secs(1),
            total: 7,
            drops: vec![DropCount { key, count: 7 }],
            ..Default::default()
        };
        update(&mut s, Msg::Snapshot(Box::new(snap), Instant::now()));
        s.ways.insert(4026532999, Way::Named("ux3app".into()));
        press(&mut s, 'e');
        let out = screen(&s);
        assert!(
            out.contains("`ip netns exec ux3app ss -uamp 'sport = :8888'` shows rb"),
            "{out}"
        );
        press(&mut s, 'y');
        let want = "ip netns exec ux3app ss -uamp 'sport = :8888'";
        assert_eq!(s.copied.as_deref(), Some(want));
        assert!(screen(&s).contains(&format!("copied (printed again on exit): {want}")));
        // A namespace not found here: `nsenter` with a PID to fill in, never a guess.
        s.ways.clear();
        let out = screen(&s);
        assert!(
            out.contains("`nsenter --net=/proc/PID/ns/net ss -uamp"),
            "{out}"
        );
    }

    #[test]
    fn the_rows_stacks_show_its_guide_entry() {
        let mut s = state();
        update(
            &mut s,
            Msg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
        );
        assert!(matches!(s.screen, Screen::Stacks(_)));
        let out = screen(&s);
        assert!(out.contains("reason guide"), "{out}");
        assert!(
            out.contains("SOCKET_RCVBUFF the socket's receive buffer"),
            "{out}"
        );
    }

    #[test]
    fn c_shows_counters_and_labels_unseen_drops() {
        let mut s = state();
        press(&mut s, 'c');
        assert!(screen(&s).contains("waiting for the first reading"));
        let k = KernelView {
            programs: Some(Vec::new()),
            counter_only: None,
            listeners: Default::default(),
            initial_netns: 1,
            counters: vec![CounterDelta {
                netns: 4026532500,
                counter: "TcpExt:ListenDrops".into(),
                delta: 1500,
                reasons: vec!["TCP_LISTEN_OVERFLOW"],
            }],
            unseen: Some(vec![Unseen {
                netns: 4026532500,
                counter: "TcpExt:ListenDrops".into(),
                count: 1492,
            }]),
            filter: None,
            errors: Vec::new(),
            names: Default::default(),
            ratios: Vec::new(),
            ledger: None,
        };
        s.kernel = Some(k);
        let out = screen(&s);
        assert!(out.contains("kernel counters"), "{out}");
        assert!(
            out.contains("UNSEEN      1,492 TcpExt:ListenDrops netns 4026532500"),
            "{out}"
        );
        assert!(
            out.contains("counted by the kernel, not seen by the probe"),
            "{out}"
        );
        assert!(out.contains("1,500 TcpExt:ListenDrops"), "{out}");
        assert!(
            out.contains("total 7"),
            "unseen drops stay out of the exact total: {out}"
        );
    }

    #[test]
    fn capital_l_shows_the_ledger_headline_and_the_layer_only_a_counter_saw() {
        let mut s = state();
        press(&mut s, 'L');
        assert_eq!(s.panel, Some(Panel::Ledger));
        assert!(screen(&s).contains("waiting for the first reading"));
        let mut reading = crate::model::KernelReading {
            initial_netns: 1,
            ..Default::default()
        };
        let g = reading.netns.entry(4026532500).or_default();
        g.insert("Link:tun0:tx_dropped".into(), 9);
        g.insert("Qdisc:tun0:pfifo_fast 0::overlimits".into(), 3);
        let snap = s.tracker.latest().expect("a snapshot").clone();
        s.kernel = Some(crate::ledger::view(&reading, &snap, None));
        let out = screen(&s);
        assert!(
            out.contains("drop ledger since the start (L closes)"),
            "{out}"
        );
        // The headline in headed columns (it was one sentence that wrapped at 80 columns).
        assert!(
            out.contains("DROPS  WITH REASON AND LOCATION  LAYER COUNTER ONLY  UNEXPLAINED"),
            "{out}"
        );
        assert!(
            out.contains("   16                  7  43.8%            9  56.2%     0   0.0%"),
            "{out}"
        );
        assert!(
            out.lines().any(|l| l.starts_with("nic")
                && l.contains("tun0 netns 4026532500")
                && l.trim_end().ends_with("0          9")),
            "{out}"
        );
        assert!(out.contains("Qdisc:tun0:pfifo_fast 0:overlimits"), "{out}");
        assert!(out.contains("not drops"), "{out}");
        press(&mut s, 'L');
        assert_eq!(s.panel, None);
        // Filtered counts have no ledger, and the panel says why.
        let k = crate::ledger::view(&reading, &snap, Some("netns x".into()));
        let lines = super::ledger_lines(Some(&k), false, 80);
        assert!(lines[0].to_string().contains("only drops of netns x"));
    }

    /// The ledger at 80 columns: headed columns as `report` prints them, counts with
    /// separators, the unexplained drops listed, a qdisc counter with one colon, no line
    /// longer than the screen, and a hint where the panel cuts the ledger short.
    #[test]
    fn the_ledger_reads_at_80_columns() {
        let mut s = State::new(SessionInfo::default(), None, (80, 24));
        let d = |name: &str, loc: &str, count| DropCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: name.into(),
                },
                location: loc.into(),
                attr: crate::model::Attribution {
                    netns: Some(4026532500),
                    device: Some("eth0".into()),
                    ..Default::default()
                },
            },
            count,
        };
        let snap = Snapshot {
            elapsed: Duration::from_secs(1),
            total: 1_262_345,
            drops: vec![
                d("NO_SOCKET", "__udp4_lib_rcv+0x9b0", 1_234_000),
                d("NOT_SPECIFIED", "virtio_transport_recv_pkt+0x414", 28_345),
            ],
            ..Default::default()
        };
        update(
            &mut s,
            Msg::Snapshot(Box::new(snap.clone()), Instant::now()),
        );
        press(&mut s, 'L');
        let mut reading = crate::model::KernelReading {
            initial_netns: 1,
            ..Default::default()
        };
        let g = reading.netns.entry(4026532500).or_default();
        g.insert("Qdisc:eth0:tbf 8002::drops".into(), 54_321);
        g.insert("Link:eth0:rx_missed_errors".into(), 12_000);
        for i in 0..12 {
            g.insert(format!("Link:veth{i}:tx_dropped").into(), 1_000 + i);
        }
        s.kernel = Some(crate::ledger::view(&reading, &snap, None));
        let out = screen(&s);
        let panel: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.contains("drop ledger since the start"))
            .take_while(|l| !l.starts_with("q quit"))
            .collect();
        let text = panel.join("\n");
        // The headline's counts with separators.
        let total = (s.kernel.as_ref().and_then(|k| k.ledger.as_ref()))
            .map(|l| l.headline.total)
            .expect("a ledger");
        assert!(total > 1_262_345, "the probe's and the counters' drops");
        assert!(text.contains(&crate::format::count(total)), "{text}");
        assert!(!text.contains(&total.to_string()), "{text}");
        // The layers' columns, headed as in `report`.
        assert!(
            panel.iter().any(|l| l.starts_with("LAYER")
                && l.contains("WHERE")
                && l.contains("COUNTED")
                && l.contains("ALSO_OTHER")
                && l.contains("ONLY_HERE")),
            "{text}"
        );
        assert!(text.contains("54,321"), "{text}");
        // The unexplained drops: the probe's without a reason no counter explains.
        assert!(
            panel
                .iter()
                .any(|l| l.contains("28,345") && l.contains("virtio_transport_recv_pkt+0x414")),
            "{text}"
        );
        // The panel is cut short: it says so, and where the rest is.
        let last = panel
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .expect("a line");
        assert!(last.contains("more lines"), "{text}");
        // Every line fits in 80 columns: none needs wrapping.
        let all = super::ledger_lines(s.kernel.as_ref(), false, 80);
        assert!(all.len() > panel.len(), "{text}");
        for l in &all {
            assert!(l.width() <= 80, "{l}");
        }
        // The counters' table, with the qdisc's handle once-coloned.
        let all: Vec<String> = all.iter().map(|l| l.to_string()).collect();
        assert!(
            all.iter().any(|l| l.starts_with("LAYER COUNTER")
                && l.contains("DELTA")
                && l.contains("ONLY_COUNTER")),
            "{all:#?}"
        );
        assert!(
            all.iter()
                .any(|l| l.contains("Qdisc:eth0:tbf 8002:drops") && l.contains("54,321")),
            "{all:#?}"
        );
        assert!(!all.iter().any(|l| l.contains("8002::")), "{all:#?}");
    }

    #[test]
    fn replay_says_when_a_recording_holds_no_counters() {
        let lines = super::counter_lines(None, true);
        assert!(lines[0].to_string().contains("holds no kernel counters"));
    }

    #[test]
    fn a_listen_drops_row_explained_names_its_full_listener() {
        use crate::model::{
            counter_only,
            kernel::{Holder, Listener},
        };
        let mut k = KernelView {
            initial_netns: 1,
            ..KernelView::default()
        };
        k.listeners.insert(
            9,
            vec![Listener {
                addr: "127.0.0.1:8080".into(),
                port: 8080,
                queue: 2,
                backlog: 1,
                inode: 5,
                process: Some(Holder {
                    pid: 812,
                    comm: "nginx".into(),
                }),
            }],
        );
        let row = counter_only::key(9, "TcpExt:ListenDrops", 1, &Default::default());
        let lines = super::listener_lines(Some(&k), &row);
        let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["full listener 127.0.0.1:8080 nginx[812] accept queue 2/1"]
        );
        // Another counter's row, another namespace's, or no reading: none.
        let udp = counter_only::key(9, "Udp:NoPorts", 1, &Default::default());
        let elsewhere = counter_only::key(4, "TcpExt:ListenDrops", 1, &Default::default());
        assert!(super::listener_lines(Some(&k), &udp).is_empty());
        assert!(super::listener_lines(Some(&k), &elsewhere).is_empty());
        assert!(super::listener_lines(None, &row).is_empty());
        // The explain panel shows it under the guide.
        let mut s = state();
        s.kernel = Some(k);
        s.selected = Some(row);
        s.panel = Some(Panel::Explain);
        let mut t = Terminal::new(TestBackend::new(100, 40)).expect("terminal");
        t.draw(|f| super::render(f, f.area(), &s)).expect("draw");
        let screen: String = (t.backend().buffer().content.iter())
            .map(|c| c.symbol())
            .collect();
        assert!(
            screen.contains("full listener 127.0.0.1:8080 nginx[812] accept queue 2/1"),
            "{screen}"
        );
    }
}
