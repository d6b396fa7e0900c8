//! Which packets in the TUI: the attribution columns, `b` regrouping coarser with exact sums,
//! the sampled packets beside a row's stacks, and the filters in the header.
use super::*;
use crate::{
    model::group::Dim,
    model::{Attribution, KeySamples, Sample},
};

const BY: &[Dim] = &[
    Dim::Reason,
    Dim::Location,
    Dim::Netns,
    Dim::Device,
    Dim::Protocol,
];

fn attributed(netns: u64, name: Option<&str>, dev: &str, proto: &str) -> DropKey {
    DropKey {
        attr: Attribution {
            ifindex: None,
            netns: Some(netns),
            netns_cookie: None,
            netns_name: name.map(Into::into),
            device: Some(dev.into()),
            protocol: Some(proto.into()),
            port: None,
            socket: None,
            culprit: None,
        },
        ..key(UDP.0, UDP.1)
    }
}

/// A UDP datagram 10.0.0.1:40000 → 10.0.0.2:`dport`.
fn udp_sample(ms: u64, dport: u16) -> Sample {
    let mut b = vec![
        0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    b.extend_from_slice(&[0x9c, 0x40]);
    b.extend_from_slice(&dport.to_be_bytes());
    b.extend_from_slice(&[0, 8, 0, 0]);
    Sample {
        unix_ms: ms,
        len: 28,
        l3proto: 0x0800,
        bytes: b.into(),
    }
}

/// Three keys: two in namespace "blue" (lo/udp 700, veth0/tcp 200), one in an unnamed
/// namespace 4026532000 (lo/udp 100); the first has two sampled packets.
fn attributed_snap(secs: u64, scale: u64) -> Snapshot {
    let keys = [
        (attributed(4026531999, Some("blue"), "lo", "udp"), 700),
        (attributed(4026531999, Some("blue"), "veth0", "tcp"), 200),
        (attributed(4026532000, None, "lo", "udp"), 100),
    ];
    let drops: Vec<DropCount> = keys
        .iter()
        .map(|(k, n)| DropCount {
            key: k.clone(),
            count: n * scale,
        })
        .collect();
    Snapshot {
        elapsed: Duration::from_secs(secs),
        total: drops.iter().map(|d| d.count).sum(),
        samples: vec![KeySamples {
            key: keys[0].0.clone(),
            packets: vec![udp_sample(1_000, 9), udp_sample(2_000, 53)],
        }],
        drops,
        ..snap(secs, &[], 0)
    }
}

fn attributed_state(by: &[Dim]) -> State {
    let mut s = State::new(info(), None, (140, 30));
    s.by = by.to_vec();
    let t0 = Instant::now();
    feed(&mut s, attributed_snap(1, 1), t0);
    feed(&mut s, attributed_snap(2, 2), t0 + Duration::from_secs(1));
    s
}

/// The text of the table line holding `needle` (panics when none does).
fn line_with<'a>(out: &'a str, needle: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{out}"))
}

#[test]
fn attribution_columns_show_when_the_counts_have_them() {
    let out = screen(&attributed_state(BY));
    let head = line_with(&out, "REASON");
    for col in ["NETNS", "DEVICE", "PROTO"] {
        assert!(head.contains(col), "{out}");
    }
    assert!(!head.contains("PORT"), "no row has a port: {out}");
    let blue = line_with(&out, "veth0");
    assert!(
        blue.contains("blue") && blue.contains("tcp") && blue.contains("400"),
        "{out}"
    );
    // An unnamed namespace shows its inode.
    assert!(line_with(&out, "4026532000").contains("200"), "{out}");
    // Counts without attribution: no such columns.
    let plain = screen(&state((140, 30)));
    assert!(!line_with(&plain, "REASON").contains("NETNS"), "{plain}");
    assert!(!plain.contains("DEVICE"), "{plain}");
}

#[test]
fn hostile_names_in_attribution_are_sanitized() {
    let mut s = State::new(info(), None, (140, 30));
    let mut k = attributed(1, Some("evil\x1b[2J\x07ns"), "dev\u{202e}x", "udp");
    k.attr.port = Some(9);
    let snap = Snapshot {
        elapsed: Duration::from_secs(1),
        total: 3,
        drops: vec![DropCount { key: k, count: 3 }],
        ..Default::default()
    };
    feed(&mut s, snap, Instant::now());
    let out = screen(&s);
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    assert!(!out.contains('\u{202e}'), "{out:?}");
    assert!(line_with(&out, "REASON").contains("PORT"), "{out}");
}

#[test]
fn the_text_filter_matches_attribution() {
    let mut s = attributed_state(BY);
    press(&mut s, KeyCode::Char('/'));
    for c in "veth0".chars() {
        press(&mut s, KeyCode::Char(c));
    }
    press(&mut s, KeyCode::Enter);
    assert_eq!(s.rows().len(), 1);
    assert_eq!(s.rows()[0].count, 400);
    s.filter = "blue lo".into();
    assert_eq!(s.rows().len(), 1);
    assert_eq!(s.rows()[0].count, 1400);
    s.filter = "4026532000".into();
    assert_eq!(s.rows()[0].count, 200);
}

#[test]
fn b_cycles_coarser_groupings_with_exact_sums_and_back() {
    let mut s = attributed_state(BY);
    let title = |s: &State| line_with(&screen(s), "drops by").to_string();
    assert!(title(&s).contains("drops by reason,location,netns,device,protocol"));
    assert_eq!(s.rows().len(), 3);
    // Select the unnamed namespace's row, then regroup.
    s.selected = Some(attributed(4026532000, None, "lo", "udp"));
    let total: u64 = s.rows().iter().map(|r| r.count).sum();
    let mut seen = Vec::new();
    for _ in 0..6 {
        assert_eq!(press(&mut s, KeyCode::Char('b')), None);
        let rows = s.rows();
        assert_eq!(
            rows.iter().map(|r| r.count).sum::<u64>(),
            total,
            "exact sums"
        );
        seen.push((s.grouping_dims().0, rows.len()));
        assert!(s.selected.is_some(), "a row stays selected");
    }
    let dims: Vec<Vec<Dim>> = seen.iter().map(|(d, _)| d.clone()).collect();
    assert_eq!(
        dims,
        [
            vec![Dim::Reason, Dim::Location],
            vec![Dim::Reason],
            vec![Dim::Netns],
            vec![Dim::Netns, Dim::Device],
            vec![Dim::Protocol],
            BY.to_vec(),
        ]
    );
    assert_eq!(
        seen.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        [1, 1, 2, 3, 2, 3]
    );
    // Back at the finest grouping, on a row of the protocol selected before.
    assert_eq!(
        s.selected.as_ref().and_then(|k| k.attr.protocol.as_deref()),
        Some("udp")
    );
    // From the finest grouping to a coarser one, the selection moves to the row holding it.
    s.selected = Some(attributed(4026532000, None, "lo", "udp"));
    press(&mut s, KeyCode::Char('b'));
    press(&mut s, KeyCode::Char('b'));
    press(&mut s, KeyCode::Char('b'));
    press(&mut s, KeyCode::Char('b'));
    assert_eq!(s.grouping_dims().0, [Dim::Netns, Dim::Device]);
    press(&mut s, KeyCode::Char('b'));
    press(&mut s, KeyCode::Char('b'));
    s.selected = Some(attributed(4026532000, None, "lo", "udp"));
    press(&mut s, KeyCode::Char('b'));
    let sel = s.selected.clone().expect("selected");
    assert_eq!((&*sel.location, sel.attr.netns), (UDP.1, None), "{sel:?}");
    // By reason alone, then by netns: the title says so, and blue's rows are one row of 1,800.
    press(&mut s, KeyCode::Char('b'));
    assert_eq!(s.grouping_dims().0, [Dim::Reason]);
    press(&mut s, KeyCode::Char('b'));
    let out = screen(&s);
    assert!(
        line_with(&out, "drops by").contains("drops by netns"),
        "{out}"
    );
    assert!(line_with(&out, "drops by").contains("regrouped"), "{out}");
    let blue = line_with(&out, "blue");
    assert!(blue.contains("1,800"), "{out}");
    let head = line_with(&out, "NETNS");
    assert!(!head.contains("DEVICE"), "{out}");
    assert!(
        !head.contains("REASON") && !head.contains("LOCATION"),
        "{out}"
    );
}

#[test]
fn b_offers_only_groupings_the_counts_have() {
    let s = attributed_state(&[Dim::Reason, Dim::Location, Dim::Protocol]);
    assert_eq!(
        s.groupings(),
        [
            vec![Dim::Reason, Dim::Location, Dim::Protocol],
            vec![Dim::Reason, Dim::Location],
            vec![Dim::Reason],
            vec![Dim::Protocol],
        ]
    );
    // Replay (no --by): the dimensions found in the counts.
    let mut r = attributed_state(&[]);
    r.replay = Some(ReplayStatus::default());
    assert_eq!(r.finest(), BY);
    assert_eq!(r.groupings().len(), 6);
}

#[test]
fn enter_shows_the_rows_sampled_packets_beside_its_stacks() {
    let mut s = attributed_state(BY);
    s.selected = Some(attributed(4026531999, Some("blue"), "lo", "udp"));
    press(&mut s, KeyCode::Enter);
    assert!(matches!(s.screen, Screen::Stacks(_)));
    let out = screen(&s);
    assert!(
        line_with(&out, " stacks ").contains("netns blue, device lo, udp"),
        "{out}"
    );
    assert!(out.contains("exact count 1,400"), "{out}");
    assert!(out.contains("sampled packets"), "{out}");
    assert!(out.contains("10.0.0.1:40000 → 10.0.0.2:9"), "{out}");
    assert!(out.contains("10.0.0.1:40000 → 10.0.0.2:53"), "{out}");
    assert!(line_with(&out, "10.0.0.2:53").contains("udp"), "{out}");
    assert!(
        line_with(&out, "10.0.0.2:9 ").contains("00:00:01.000"),
        "{out}"
    );
    // Regrouped by netns, blue's row pools its keys' packets and counts.
    press(&mut s, KeyCode::Esc);
    press(&mut s, KeyCode::Char('b'));
    press(&mut s, KeyCode::Char('b'));
    press(&mut s, KeyCode::Char('b'));
    assert_eq!(s.grouping_dims().0, [Dim::Netns]);
    s.selected = s
        .rows()
        .iter()
        .find(|r| r.count == 1800)
        .map(|r| r.key.clone().into_owned());
    press(&mut s, KeyCode::Enter);
    let out = screen(&s);
    assert!(out.contains("exact count 1,800"), "{out}");
    assert!(out.contains("10.0.0.2:53"), "{out}");
    // A row without samples (as in older recordings) says so, and its stacks still show.
    press(&mut s, KeyCode::Esc);
    s.selected = s
        .rows()
        .iter()
        .find(|r| r.count == 200)
        .map(|r| r.key.clone().into_owned());
    press(&mut s, KeyCode::Enter);
    let out = screen(&s);
    assert!(out.contains("no packets sampled for this row"), "{out}");
    assert!(out.contains("SHARE   EST.COUNT"), "{out}");
}

#[test]
fn the_header_says_when_a_filter_is_active() {
    let mut s = attributed_state(BY);
    assert!(!screen(&s).contains("FILTER"));
    s.filters = Some("netns blue, protocol udp".into());
    let out = screen(&s);
    assert!(
        line_with(&out, "FILTER").contains("only netns blue, protocol udp"),
        "{out}"
    );
    s.replay = Some(ReplayStatus::default());
    assert!(screen(&s).contains("only netns blue"));
}

#[test]
fn b_and_the_packets_are_in_help_and_footer() {
    let s = attributed_state(BY);
    let foot = screen(&s);
    assert!(
        foot.lines().last().is_some_and(|l| l.contains("b group")),
        "{foot}"
    );
    assert!(help::GENERAL.iter().any(|k| k.keys == "b"));
}

/// An XDP program's drops, which the probe may never see, are a row of the table: verdict,
/// program, namespace and interface, with their rate; the header's total stays the probe's.
#[test]
fn program_verdicts_are_rows_of_the_table() {
    let mut s = state((140, 24));
    let t0 = Instant::now();
    let with = |secs: u64, xdp: u64| {
        let mut sn = snap(secs, &[(UDP, 1_234_000), (TCP, 30), (NFT, 505)], 0);
        let mut r = crate::model::KernelReading::default();
        r.netns
            .entry(4026532999)
            .or_default()
            .insert(Arc::from("Xdp:eth0:xdpdrv:ddos_guard#42:drop"), xdp);
        sn.kernel = Some(Arc::new(r));
        sn
    };
    feed(&mut s, with(3, 1_000_000), t0 + Duration::from_secs(2));
    feed(&mut s, with(4, 3_000_000), t0 + Duration::from_secs(3));
    let text = screen(&s);
    let row = (text.lines())
        .find(|l| l.contains("XDP_DROP"))
        .unwrap_or_else(|| panic!("no program row:\n{text}"));
    for part in [
        "prog ddos_guard#42 (xdpdrv)",
        "eth0",
        "4026532999",
        "3,000,000",
        "2,000,000",
    ] {
        assert!(row.contains(part), "{part} in {row:?}\n{text}");
    }
    // Sorted by rate, it tops the table (2,000,000/s).
    let first = text.lines().position(|l| l.contains("XDP_DROP"));
    let udp = text.lines().position(|l| l.contains(UDP.0));
    assert!(first < udp, "{text}");
    assert_eq!(
        s.tracker.latest().map(|l| l.total),
        Some(1_234_000 + 30 + 505)
    );
    assert!(
        text.contains("total 1,234,535") && text.contains("programs 3,000,000"),
        "{text}"
    );
    // Regrouped by reason alone, the program's row keeps its program on screen (the probe's
    // merged rows show `*` there).
    let finest = s.grouping_dims().0;
    for _ in 0..8 {
        if s.grouping_dims().0 == [Dim::Reason] {
            break;
        }
        press(&mut s, KeyCode::Char('b'));
    }
    assert_eq!(s.grouping_dims().0, [Dim::Reason]);
    let text = screen(&s);
    let row = (text.lines())
        .find(|l| l.contains("XDP_DROP"))
        .unwrap_or_else(|| panic!("no program row regrouped:\n{text}"));
    assert!(row.contains("prog ddos_guard#42 (xdpdrv)"), "{text}");
    assert!(line_with(&text, "COUNT").contains("LOCATION"), "{text}");
    while s.grouping_dims().0 != finest {
        press(&mut s, KeyCode::Char('b'));
    }
    // The stacks of every row count the probe's drops only: the program has no stacks.
    let all = crate::tui::state::StackView::build(
        crate::tui::state::StackScope::Set(String::new()),
        &s.tracker,
        None,
        0,
    );
    assert_eq!(all.exact, 1_234_535);
    assert!(line_with(&screen(&s), "drops by").contains(" 4 keys "));
    // Under drop filters (the probe's), they are not shown, as in `report`.
    s.filters = Some("netns blue".into());
    let text = screen(&s);
    assert!(
        !text.contains("XDP_DROP") && !text.contains("programs 3"),
        "{text}"
    );
    // Nor is it among the keys the title counts (4 with it).
    assert!(line_with(&text, "drops by").contains(" 3 keys "), "{text}");
}

/// An XDP program's row shows the frames it dropped (Enter), regrouped too.
#[test]
fn a_program_rows_sampled_frames_show_on_enter() {
    let mut s = state((140, 30));
    let t0 = Instant::now();
    let counter = "Xdp:eth0:xdpdrv:ddos_guard#42:drop";
    let with = |secs: u64, xdp: u64| {
        let mut sn = snap(secs, &[(UDP, 1_000), (TCP, 30)], 0);
        let mut r = crate::model::KernelReading::default();
        r.netns
            .entry(4026532999)
            .or_default()
            .insert(Arc::from(counter), xdp);
        sn.kernel = Some(Arc::new(r));
        let key = crate::model::programs::counter_key(4026532999, counter, 0, None);
        sn.samples.push(KeySamples {
            key: key.expect("a program's key"),
            packets: vec![udp_sample(1_000, 7001)],
        });
        sn
    };
    feed(&mut s, with(3, 1_000), t0 + Duration::from_secs(2));
    feed(&mut s, with(4, 3_000), t0 + Duration::from_secs(3));
    let finest = s.grouping_dims().0;
    for grouping in [finest, vec![Dim::Reason]] {
        while s.grouping_dims().0 != grouping {
            press(&mut s, KeyCode::Char('b'));
        }
        s.selected = (s.rows().iter())
            .find(|r| &*r.key.reason.name == "XDP_DROP")
            .map(|r| r.key.clone().into_owned());
        assert!(s.selected.is_some(), "{}", screen(&s));
        press(&mut s, KeyCode::Enter);
        let out = screen(&s);
        assert!(out.contains("10.0.0.1:40000 → 10.0.0.2:7001"), "{out}");
        press(&mut s, KeyCode::Esc);
        // The probe's rows have none of the program's frames.
        s.selected = (s.rows().iter())
            .find(|r| &*r.key.reason.name == UDP.0)
            .map(|r| r.key.clone().into_owned());
        press(&mut s, KeyCode::Enter);
        let out = screen(&s);
        assert!(!out.contains("10.0.0.2:7001"), "{out}");
        press(&mut s, KeyCode::Esc);
    }
}
