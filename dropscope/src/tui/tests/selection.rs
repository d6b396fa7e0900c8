//! The selection, the sort and the rate window: the selection starts on the top row and follows
//! a row the user chose as rows reorder, Enter opens the selected row, `S` reverses the order
//! (marked on the sorted column), the title names the interval the rates are over, a replay's
//! footer hints its timeline keys, and `f` draws function names as `dropscope flamegraph` does.
use ratatui::style::Modifier;

use super::*;
use crate::flamegraph;

/// The rendered lines of `s`, and the one drawn in reverse video (the selected row), if any.
fn highlighted(s: &State) -> Option<String> {
    let (w, h) = s.size;
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    t.draw(|f| view::render(f, s)).expect("draw");
    let buf = t.backend().buffer();
    (0..h)
        .find(|&y| buf[(0, y)].modifier.contains(Modifier::REVERSED))
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect())
}

/// The locations of the rows in table order.
fn order(s: &State) -> Vec<String> {
    s.rows()
        .iter()
        .map(|r| r.key.location.to_string())
        .collect()
}

/// NFT is seen first, alone; then UDP and TCP overtake it.
fn reordering_state() -> (State, Instant) {
    let mut s = State::new(info(), None, (100, 24));
    let t0 = Instant::now();
    feed(&mut s, snap(1, &[(NFT, 5)], 0), t0);
    assert_eq!(selected_name(&s), NFT.1);
    feed(
        &mut s,
        snap(2, &[(NFT, 6), (UDP, 5_000), (TCP, 300)], 0),
        t0 + Duration::from_secs(1),
    );
    (s, t0)
}

#[test]
fn the_selection_starts_on_the_top_row_and_stays_there_until_moved() {
    let (mut s, t0) = reordering_state();
    assert_eq!(order(&s), [UDP.1, TCP.1, NFT.1]);
    // Not the first key ever seen: the top row, highlighted on screen.
    assert_eq!(selected_name(&s), UDP.1);
    let line = highlighted(&s).expect("a highlighted row");
    assert!(line.contains(UDP.1), "{line}");
    // TCP overtakes UDP: the selection is still the top row.
    feed(
        &mut s,
        snap(3, &[(NFT, 6), (UDP, 5_010), (TCP, 9_000)], 0),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(order(&s)[0], TCP.1);
    assert_eq!(selected_name(&s), TCP.1);
    assert!(highlighted(&s).expect("highlighted").contains(TCP.1));
}

#[test]
fn a_chosen_row_is_followed_by_its_key_as_rows_reorder() {
    let (mut s, t0) = reordering_state();
    // By rate: the rows below reorder as each interval's drops do.
    press(&mut s, KeyCode::Char('s'));
    assert_eq!(s.sort.label(), "rate");
    // Choose the second row (TCP).
    press(&mut s, KeyCode::Down);
    assert_eq!(selected_name(&s), TCP.1);
    // NFT floods: TCP moves to the third row, and the selection with it.
    feed(
        &mut s,
        snap(3, &[(NFT, 100_000), (UDP, 5_010), (TCP, 310)], 0),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(order(&s), [NFT.1, UDP.1, TCP.1]);
    assert_eq!(selected_name(&s), TCP.1);
    let line = highlighted(&s).expect("a highlighted row");
    assert!(line.contains(TCP.1), "{line}");
    // Enter opens the selected row, wherever it is.
    press(&mut s, KeyCode::Enter);
    let Screen::Stacks(v) = &s.screen else {
        panic!("Enter opened no stack view");
    };
    assert_eq!(v.scope, StackScope::Row(key(TCP.0, TCP.1)));
    assert!(screen(&s).contains("tcp_v4_rcv+0x1a2"));
    press(&mut s, KeyCode::Esc);
    // Home goes back to the top row, and stays on the top row as rows reorder.
    press(&mut s, KeyCode::Home);
    assert_eq!(selected_name(&s), NFT.1);
    feed(
        &mut s,
        snap(4, &[(NFT, 100_001), (UDP, 900_000), (TCP, 320)], 0),
        t0 + Duration::from_secs(3),
    );
    assert_eq!(selected_name(&s), UDP.1);
    // A chosen row that the filter hides gives the selection back to the top row.
    press(&mut s, KeyCode::End);
    assert_eq!(order(&s), [UDP.1, TCP.1, NFT.1]);
    assert_eq!(selected_name(&s), NFT.1);
    for c in ['/', 't', 'c', 'p'] {
        press(&mut s, KeyCode::Char(c));
    }
    assert_eq!(selected_name(&s), TCP.1);
    press(&mut s, KeyCode::Esc);
    assert_eq!(selected_name(&s), UDP.1);
}

#[test]
fn enter_opens_the_top_row_when_nothing_was_chosen() {
    let (mut s, _) = reordering_state();
    press(&mut s, KeyCode::Enter);
    let Screen::Stacks(v) = &s.screen else {
        panic!("Enter opened no stack view");
    };
    assert_eq!(v.scope, StackScope::Row(key(UDP.0, UDP.1)));
    assert_eq!(v.exact, 5_000);
}

#[test]
fn s_reverses_the_order_and_the_sorted_column_is_marked() {
    let (mut s, _) = reordering_state();
    let heading = |s: &State| {
        let out = screen(s);
        out.lines()
            .find(|l| l.starts_with("REASON"))
            .unwrap_or_else(|| panic!("no column header in\n{out}"))
            .to_string()
    };
    // The default order, the last minute's drops, is no column's: the title names it.
    let h = heading(&s);
    assert!(!h.contains('▼') && !h.contains('▲'), "{h}");
    assert!(screen(&s).contains("sort: last 1m ▼"));
    press(&mut s, KeyCode::Char('s'));
    let h = heading(&s);
    assert!(h.contains("RATE/S▼") && !h.contains("COUNT▼"), "{h}");
    assert!(screen(&s).contains("sort: rate ▼"));
    press(&mut s, KeyCode::Char('S'));
    assert!(s.reverse);
    assert_eq!(order(&s), [NFT.1, TCP.1, UDP.1]);
    let h = heading(&s);
    assert!(h.contains("RATE/S▲"), "{h}");
    assert!(screen(&s).contains("sort: rate ▲"));
    // The top row is selected: the lowest rate now.
    assert_eq!(selected_name(&s), NFT.1);
    // The next sort keeps the direction reversed: reason Z to A.
    press(&mut s, KeyCode::Char('s'));
    press(&mut s, KeyCode::Char('s'));
    assert_eq!(s.sort.label(), "reason");
    let h = heading(&s);
    assert!(h.starts_with("REASON▼") && !h.contains("RATE/S▼"), "{h}");
    assert_eq!(order(&s)[2], NFT.1, "NETFILTER_DROP last from Z to A");
    press(&mut s, KeyCode::Char('S'));
    assert!(heading(&s).starts_with("REASON▲"));
    assert_eq!(order(&s)[0], NFT.1);
    press(&mut s, KeyCode::Char('s'));
    assert!(heading(&s).contains("LOCATION▲"));
}

#[test]
fn the_title_names_the_interval_the_rates_are_over() {
    let (mut s, t0) = reordering_state();
    assert!(screen(&s).contains("rate over 1s"), "{}", screen(&s));
    // Eight seconds later (an idle spell, or a replay skipping frames): over 8s, and the rate
    // is the growth over those 8 seconds.
    feed(
        &mut s,
        snap(10, &[(NFT, 6), (UDP, 5_800), (TCP, 300)], 0),
        t0 + Duration::from_secs(9),
    );
    let out = screen(&s);
    assert!(out.contains("rate over 8s"), "{out}");
    assert_eq!(s.rows()[0].rate, Some(100.0));
    // Half a second.
    let mut later = snap(10, &[(NFT, 6), (UDP, 5_850), (TCP, 300)], 0);
    later.elapsed += Duration::from_millis(500);
    feed(&mut s, later, t0 + Duration::from_secs(10));
    assert!(screen(&s).contains("rate over 500ms"));
    assert_eq!(s.rows()[0].rate, Some(100.0));
}

#[test]
fn a_replays_footer_hints_its_timeline_not_record() {
    let status = ReplayStatus {
        position: Duration::from_secs(1),
        duration: Duration::from_secs(60),
        speed: 1.0,
        paused: false,
        live: false,
    };
    let footer = |s: &State| screen(s).lines().last().unwrap_or_default().to_string();
    let mut replay = State::new(info(), Some(status), (80, 24));
    feed(&mut replay, snap(1, &[(UDP, 1)], 0), Instant::now());
    let f = footer(&replay);
    assert!(f.contains("[ ] seek") && !f.contains("record"), "{f}");
    let live = state((140, 24));
    let f = footer(&live);
    assert!(f.contains("r record") && !f.contains("seek"), "{f}");
    assert!(f.contains("s/S sort/reverse"), "{f}");
    // The stack view of a replay hints seeking too.
    press(&mut replay, KeyCode::Enter);
    let f = footer(&replay);
    assert!(f.contains("[ ] seek") && f.contains("Esc back"), "{f}");
}

#[test]
fn f_draws_function_names_as_the_flamegraph_command_does() {
    let mut s = state((80, 24));
    let mut latest = snap(3, &[(UDP, 1_234_100), (TCP, 40), (NFT, 505)], 0);
    let frames = |v: &[&str]| -> Arc<[Arc<str>]> { v.iter().map(|f| Arc::from(*f)).collect() };
    latest.stacks = vec![
        StackCount {
            key: key(UDP.0, UDP.1),
            frames: frames(&["ip_rcv+0x12", "__udp4_lib_rcv+0x9b0"]),
            weight: 900,
            samples: 9,
        },
        StackCount {
            key: key(UDP.0, UDP.1),
            frames: frames(&["ip_rcv+0x40", "__udp4_lib_rcv+0x9b0"]),
            weight: 100,
            samples: 1,
        },
        StackCount {
            key: key(TCP.0, TCP.1),
            frames: frames(&["ip_rcv+0x12", "tcp_v4_rcv+0x1a2 [kernel]"]),
            weight: 7,
            samples: 1,
        },
    ];
    feed(&mut s, latest.clone(), Instant::now());
    let Some(Effect::Flamegraph(req)) = press(&mut s, KeyCode::Char('f')) else {
        panic!("no flamegraph request");
    };
    let drawn = flamegraph::folded(&req.stacks);
    assert!(!drawn.contains("+0x"), "{drawn}");
    // What `dropscope flamegraph` draws of the same snapshot (without --offsets).
    let cli = flamegraph::folded(&flamegraph::without_offsets(&latest.stacks));
    assert_eq!(drawn, cli);
    assert!(drawn.contains("ip_rcv;__udp4_lib_rcv"), "{drawn}");
    assert!(drawn.contains("tcp_v4_rcv [kernel]"), "{drawn}");
}

/// The first screen after a burst: 1,000 drops of a burst that just ended stay above a 2-drop
/// trickle that arrived in the last 500 ms, and the title says what the order is by.
#[test]
fn a_burst_that_just_ended_stays_above_a_new_trickle() {
    const V6: (&str, &str) = ("NO_SOCKET", "__udp6_lib_rcv+0x3f2");
    let mut s = State::new(info(), None, (80, 24));
    let t0 = Instant::now();
    let at = |ms: u64| {
        let mut x = snap(0, &[], 0);
        x.elapsed = Duration::from_millis(ms);
        x
    };
    let with = |ms: u64, counts: &[((&str, &str), u64)]| {
        let mut x = snap(0, counts, 0);
        x.elapsed = Duration::from_millis(ms);
        x
    };
    feed(&mut s, at(500), t0);
    // The burst: 1,000 drops in half a second, then quiet for 3 s.
    for ms in (1000..=4000).step_by(500) {
        feed(&mut s, with(ms, &[(UDP, 1000)]), t0);
    }
    // Two IPv6 drops in the last 500 ms.
    feed(&mut s, with(4500, &[(UDP, 1000), (V6, 2)]), t0);
    assert_eq!(order(&s), [UDP.1, V6.1], "the burst row on top");
    assert_eq!(selected_name(&s), UDP.1);
    let out = screen(&s);
    let title = out.lines().find(|l| l.contains("drops by")).expect("title");
    assert!(title.contains("sort: last 1m ▼"), "{out}");
    let burst = out
        .lines()
        .position(|l| l.contains(UDP.1))
        .expect("burst row");
    let v6 = out.lines().position(|l| l.contains(V6.1)).expect("v6 row");
    assert!(burst < v6, "{out}");
}
