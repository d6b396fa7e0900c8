//! Tests of the open panel: the guide, the kernel counters, the ledger and a row's listeners.
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::{Terminal, backend::TestBackend};

use crate::{
    ledger::{CounterDelta, KernelView, Unseen},
    model::{DropCount, DropKey, Reason, SessionInfo, Snapshot},
    tui::{
        state::{Panel, Screen, State},
        update::{Msg, update},
        view::{self, panel},
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
    let lines = panel::ledger_lines(Some(&k), false, 80);
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
    let all = panel::ledger_lines(s.kernel.as_ref(), false, 80);
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
    let lines = panel::counter_lines(None, true);
    assert!(lines[0].to_string().contains("holds no kernel counters"));
}

#[test]
fn a_listen_drops_row_explained_names_its_full_listener() {
    use crate::{
        model::counter_only,
        vocab::{reading::Listener, socket::Holder},
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
    let lines = panel::listener_lines(Some(&k), &row);
    let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        ["full listener 127.0.0.1:8080 nginx[812] accept queue 2/1"]
    );
    // Another counter's row, another namespace's, or no reading: none.
    let udp = counter_only::key(9, "Udp:NoPorts", 1, &Default::default());
    let elsewhere = counter_only::key(4, "TcpExt:ListenDrops", 1, &Default::default());
    assert!(panel::listener_lines(Some(&k), &udp).is_empty());
    assert!(panel::listener_lines(Some(&k), &elsewhere).is_empty());
    assert!(panel::listener_lines(None, &row).is_empty());
    // The explain panel shows it under the guide.
    let mut s = state();
    s.kernel = Some(k);
    s.selected = Some(row);
    s.panel = Some(Panel::Explain);
    let mut t = Terminal::new(TestBackend::new(100, 40)).expect("terminal");
    t.draw(|f| panel::render(f, f.area(), &s)).expect("draw");
    let screen: String = (t.backend().buffer().content.iter())
        .map(|c| c.symbol())
        .collect();
    assert!(
        screen.contains("full listener 127.0.0.1:8080 nginx[812] accept queue 2/1"),
        "{screen}"
    );
}
