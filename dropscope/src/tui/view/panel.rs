//! The panel under the table: the selected row's entry of the reason guide (`e`), or the
//! kernel's own drop counters with the drops they counted that the probe did not see (`c`).
use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph, Wrap},
};

use crate::{
    explain::{Guide, Match},
    kcounters::KernelView,
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
    let name = |c: &str| crate::sanitize::terminal(c).into_owned();
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

/// The ledger panel's lines: the headline, then each layer per namespace and device (where
/// only a counter saw drops first), then the layer counters that grew.
pub fn ledger_lines(kernel: Option<&KernelView>, replay: bool) -> Vec<Line<'static>> {
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
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::styled(l.headline.sentence(), bold)];
    let place = |netns: u64, device: &Option<String>| {
        let n = k.netns_label(netns);
        match device {
            Some(d) => format!("{} netns {n}", crate::sanitize::terminal_cell(d, 32)),
            None => format!("netns {n}"),
        }
    };
    let mut totals: Vec<_> = l.layers.iter().collect();
    totals.sort_by_key(|t| {
        (
            std::cmp::Reverse(t.counter_only),
            std::cmp::Reverse(t.counted),
        )
    });
    let places: Vec<String> = totals.iter().map(|t| place(t.netns, &t.device)).collect();
    let pw = places.iter().map(|p| p.chars().count()).max().unwrap_or(0);
    for (t, p) in totals.iter().zip(&places) {
        let only = if t.layer == crate::kcounters::layers::Layer::KfreeSkb {
            Span::styled(
                format!(
                    "{} also counted by a layer counter",
                    format::count(t.matched)
                ),
                dim,
            )
        } else if t.counter_only > 0 {
            Span::styled(
                format!(
                    "{} counted by this layer only",
                    format::count(t.counter_only)
                ),
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            )
        } else {
            Span::styled(
                format!("{} also seen by kfree_skb", format::count(t.matched)),
                dim,
            )
        };
        lines.push(Line::from(vec![
            Span::styled(
                format!("{:<9} ", t.layer.as_str()),
                Style::new().fg(Color::Cyan),
            ),
            Span::raw(format!("{p:<pw$} {:>10} ", format::count(t.counted))),
            only,
        ]));
    }
    for r in &l.counters {
        lines.push(Line::from(vec![
            Span::raw(format!(
                "  {:>10} {} ",
                format::count(r.delta),
                crate::sanitize::terminal_cell(&r.counter, 64)
            )),
            Span::styled(
                format!(
                    "kfree_skb {} only {}  {}",
                    format::count(r.matched),
                    format::count(r.counter_only),
                    r.role.word()
                ),
                dim,
            ),
        ]));
    }
    for n in &l.notes {
        lines.push(Line::styled(
            format!("ledger: {}", crate::sanitize::terminal(n)),
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
                Some(k) => filled_guide_lines(&k.reason.name, Some(&state.check_target(k))),
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
        Some(Panel::Ledger) => (
            " drop ledger since the start (L closes) ",
            ledger_lines(state.kernel.as_ref(), state.is_replay()),
        ),
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
        kcounters::{CounterDelta, KernelView, Unseen},
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
        s.kernel = Some(crate::kcounters::view(&reading, &snap, None));
        let out = screen(&s);
        assert!(
            out.contains("drop ledger since the start (L closes)"),
            "{out}"
        );
        assert!(
            out.contains(
                "16 drops: 43.8% with reason and location, 56.2% counted by a layer counter \
                 only, 0 unexplained"
            ),
            "{out}"
        );
        assert!(
            out.lines().any(|l| l.starts_with("nic")
                && l.contains("tun0 netns 4026532500")
                && l.contains("9 counted by this layer only")),
            "{out}"
        );
        assert!(out.contains("Qdisc:tun0:pfifo_fast 0::overlimits"), "{out}");
        assert!(out.contains("not drops"), "{out}");
        press(&mut s, 'L');
        assert_eq!(s.panel, None);
        // Filtered counts have no ledger, and the panel says why.
        let k = crate::kcounters::view(&reading, &snap, Some("netns x".into()));
        let lines = super::ledger_lines(Some(&k), false);
        assert!(lines[0].to_string().contains("only drops of netns x"));
    }

    #[test]
    fn replay_says_when_a_recording_holds_no_counters() {
        let lines = super::counter_lines(None, true);
        assert!(lines[0].to_string().contains("holds no kernel counters"));
    }
}
