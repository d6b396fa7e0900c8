//! The rough edges a new user meets: the counters panel's columns, flamegraph names, `b` by
//! reason alone, columns the grouping emptied, and keys offered only where they do something.
use std::path::Path;

use super::*;
use crate::{
    flamegraph::GraphMeta,
    ledger::{CounterDelta, KernelView, Unseen},
    model::group::Dim,
    tui::effects,
};

fn line_with<'a>(out: &'a str, needle: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{out}"))
}

/// The column (in characters) where `needle` starts on its line.
fn column(out: &str, needle: &str) -> usize {
    let l = line_with(out, needle);
    l[..l.find(needle).expect("found")].chars().count()
}

#[test]
fn counter_panel_rows_are_in_columns_whatever_the_name_lengths() {
    let mut s = state((120, 30));
    press(&mut s, KeyCode::Char('c'));
    let delta = |netns, counter: &str, delta, reasons| CounterDelta {
        netns,
        counter: counter.into(),
        delta,
        reasons,
    };
    let k = KernelView {
        programs: Some(Vec::new()),
        counter_only: None,
        listeners: Default::default(),
        initial_netns: 1,
        counters: vec![
            delta(1, "TcpExt:ListenDrops", 1500, vec!["TCP_LISTEN_OVERFLOW"]),
            delta(4026532500, "Udp:InErrors", 12, vec!["SOCKET_RCVBUFF"]),
        ],
        unseen: Some(vec![Unseen {
            netns: 4026532500,
            counter: "Udp:InErrors".into(),
            count: 7,
        }]),
        filter: None,
        errors: Vec::new(),
        names: Default::default(),
        ratios: Vec::new(),
        ledger: None,
    };
    s.kernel = Some(k);
    let out = screen(&s);
    // Counts end in one column, names and namespaces start in one, and so do the reasons.
    let ends = [
        column(&out, "7 Udp:InErrors"),
        column(&out, "1,500 TcpExt") + 4,
        column(&out, "12 Udp:InErrors") + 1,
    ];
    assert!(ends.iter().all(|e| *e == ends[0]), "{ends:?}\n{out}");
    assert_eq!(
        column(&out, "TcpExt:ListenDrops netns 1 (init)   TCP"),
        column(&out, "Udp:InErrors       netns 4026532500 SOCKET"),
        "{out}"
    );
    let reasons = [
        column(&out, "TCP_LISTEN_OVERFLOW"),
        column(&out, "SOCKET_RCVBUFF"),
        column(&out, "counted by the kernel"),
    ];
    assert!(
        reasons.iter().all(|r| *r == reasons[0]),
        "{reasons:?}\n{out}"
    );
}

#[test]
fn flamegraphs_are_named_in_utc_as_recordings_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let info = info();
    let meta = GraphMeta {
        info: &info,
        window: (Duration::ZERO, Duration::from_secs(1)),
        filter: None,
    };
    let stacks = snap(1, &[], 0).stacks;
    let t = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let write = || effects::write_flamegraph(&stacks, &meta, dir.path(), t).expect("written");
    let (a, b) = (write(), write());
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    assert_eq!(
        name(&a).as_deref(),
        Some("dropscope-flame-20231114-221320Z.svg")
    );
    assert_eq!(
        name(&b).as_deref(),
        Some("dropscope-flame-20231114-221320Z-1.svg")
    );
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 2);
}

#[test]
fn b_regroups_by_reason_alone_without_an_empty_location_column() {
    let mut s = state((100, 24));
    assert!(line_with(&screen(&s), "REASON").contains("LOCATION"));
    press(&mut s, KeyCode::Char('b'));
    assert_eq!(s.grouping_dims().0, [Dim::Reason]);
    let out = screen(&s);
    assert!(
        line_with(&out, "drops by").contains("drops by reason "),
        "{out}"
    );
    assert_eq!(s.rows().len(), 2, "NO_SOCKET's two locations are one row");
    let head = line_with(&out, "REASON");
    assert!(!head.contains("LOCATION"), "{out}");
    assert!(!out.contains('*'), "no column of merged-away names: {out}");
    // COUNT follows the reasons, not the far side of an empty column.
    assert!(column(&out, "1,234,030") < 30, "{out}");
    // By namespace (coarser still, where counted): neither REASON nor LOCATION.
    press(&mut s, KeyCode::Char('b'));
    assert_eq!(s.grouping, 0, "back to the counts as counted");
}

/// The footer (the last line) and the `?` overlay of `s`.
fn footer_and_help(s: &mut State) -> (String, String) {
    let out = screen(s);
    let footer = out.lines().last().unwrap_or_default().to_string();
    press(s, KeyCode::Char('?'));
    let help = screen(s);
    press(s, KeyCode::Esc);
    (footer, help)
}

#[test]
fn footer_and_help_offer_only_keys_that_do_something_here() {
    // Live: counters and recording, no timeline keys.
    let mut s = state((160, 40));
    let (footer, help) = footer_and_help(&mut s);
    for k in ["c counters", "r record", "b group", "space pause"] {
        assert!(footer.contains(k), "{k}: {footer}");
    }
    assert!(!footer.contains("[ ]"), "{footer}");
    assert!(help.contains("kernel drop counters"), "{help}");
    assert!(!help.contains("seek back or forward"), "{help}");
    assert!(!help.contains("halve or double"), "{help}");
    // Paused: space resumes.
    press(&mut s, KeyCode::Char(' '));
    let (footer, _) = footer_and_help(&mut s);
    assert!(footer.contains("space resume"), "{footer}");

    // A replay: the timeline, no recording; the kernel counters it recorded (`c` works).
    let mut r = State::new(info(), Some(ReplayStatus::default()), (160, 40));
    feed(&mut r, snap(1, &[(UDP, 10), (NFT, 5)], 0), Instant::now());
    let (footer, help) = footer_and_help(&mut r);
    assert!(footer.contains("[ ] seek"), "{footer}");
    assert!(!footer.contains("record"), "{footer}");
    assert!(footer.contains("c counters"), "{footer}");
    assert!(help.contains("seek back or forward 10 s"), "{help}");
    assert!(!help.contains("recording"), "{help}");
    assert!(help.contains("kernel drop counters"), "{help}");

    // Counted by reason alone: nothing coarser, so no `b`.
    let mut s = state((160, 40));
    s.by = vec![Dim::Reason];
    let (footer, help) = footer_and_help(&mut s);
    assert!(!footer.contains("b group"), "{footer}");
    assert!(!help.contains("cycle the grouping"), "{help}");
}

#[test]
fn a_reading_carried_by_a_snapshot_fills_the_counters_panel_and_the_badge() {
    use std::{sync::Arc, time::Duration};

    use crate::model::{DropCount, DropKey, KernelReading, Reason, Snapshot};
    let mut s = state((120, 30));
    let mut reading = KernelReading {
        unix_ms: 5,
        initial_netns: 1,
        ..Default::default()
    };
    let g = reading.netns.entry(1).or_default();
    g.insert("Udp:NoPorts".into(), 40);
    g.insert("TcpExt:ListenDrops".into(), 9);
    let snap = Snapshot {
        elapsed: Duration::from_secs(2),
        unix_ms: 6,
        total: 40,
        drops: vec![DropCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: "NO_SOCKET".into(),
                },
                location: "__udp4_lib_rcv+0x1".into(),
                attr: Default::default(),
            },
            count: 40,
        }],
        kernel: Some(Arc::new(reading)),
        ..Default::default()
    };
    update(
        &mut s,
        Msg::Snapshot(Box::new(snap), std::time::Instant::now()),
    );
    let out = screen(&s);
    // The NO_SOCKET drops the probe counted explain Udp:NoPorts; the listen drops are unseen.
    assert!(out.contains("UNSEEN 9"), "{out}");
    press(&mut s, KeyCode::Char('c'));
    let out = screen(&s);
    assert!(
        out.lines()
            .any(|l| l.starts_with("UNSEEN") && l.contains(" 9 TcpExt:ListenDrops")),
        "{out}"
    );
    assert!(
        !line_with(&out, "40 Udp:NoPorts").contains("UNSEEN"),
        "{out}"
    );
}

#[test]
fn the_footer_fits_narrow_terminals_and_keeps_the_keys_a_newcomer_needs() {
    for width in [80u16, 100, 160] {
        let s = state((width, 30));
        let out = screen(&s);
        let footer = out.lines().last().expect("a footer");
        assert!(
            footer.trim_end().chars().count() <= usize::from(width),
            "{footer}"
        );
        for key in [
            "q quit",
            "? help",
            "/ filter",
            "Enter",
            "e explain",
            "c counters",
        ] {
            assert!(
                footer.contains(key),
                "{width} columns: {key:?} missing from {footer:?}"
            );
        }
    }
    // Wide enough, every hint is there.
    let out = screen(&state((160, 30)));
    let footer = out.lines().last().expect("a footer");
    assert!(
        footer.contains("s/S sort") && footer.contains("b group"),
        "{footer}"
    );
}

#[test]
fn a_ratio_column_shows_drops_per_packet_between_two_readings() {
    use std::{sync::Arc, time::Duration};

    use crate::model::{Attribution, DropCount, DropKey, KernelReading, Reason, Snapshot};
    let key = DropKey {
        reason: Reason {
            code: 2,
            name: "NO_SOCKET".into(),
        },
        location: "__udp4_lib_rcv+0x1".into(),
        attr: Attribution {
            netns: Some(7),
            netns_name: Some("web".into()),
            ifindex: Some(2),
            device: Some("eth0".into()),
            ..Default::default()
        },
    };
    let snap = |secs: u64, count: u64, rx: u64| {
        let mut r = KernelReading {
            unix_ms: secs * 1000,
            initial_netns: 1,
            ..Default::default()
        };
        let g = r.netns.entry(7).or_default();
        g.insert("Dev:eth0:RxPackets".into(), rx);
        g.insert("Ip:InReceives".into(), rx);
        Snapshot {
            elapsed: Duration::from_secs(secs),
            unix_ms: secs * 1000 + 1,
            total: count,
            drops: vec![DropCount {
                key: key.clone(),
                count,
            }],
            kernel: Some(Arc::new(r)),
            ..Default::default()
        }
    };
    let mut s = state((120, 30));
    let now = std::time::Instant::now();
    update(&mut s, Msg::Snapshot(Box::new(snap(1, 100, 1000)), now));
    assert!(!screen(&s).contains("RATIO%"), "no window yet");
    // 50 more drops while eth0 received 2,000 more packets: 2.5%.
    update(&mut s, Msg::Snapshot(Box::new(snap(6, 150, 3000)), now));
    let out = screen(&s);
    assert!(
        out.contains("RATIO%") && out.contains("ratio over 5s"),
        "{out}"
    );
    assert!(line_with(&out, "NO_SOCKET").contains(" 2.5 "), "{out}");
}

#[test]
fn the_unseen_badge_counts_a_refused_syn_once() {
    use std::{sync::Arc, time::Duration};

    use crate::model::{KernelReading, Snapshot};
    let mut s = state((140, 30));
    let mut reading = KernelReading {
        unix_ms: 5,
        initial_netns: 1,
        ..Default::default()
    };
    // 144 SYNs refused by a full accept queue: every ListenOverflows event is a ListenDrops
    // event too.
    let g = reading.netns.entry(1).or_default();
    g.insert("TcpExt:ListenDrops".into(), 144);
    g.insert("TcpExt:ListenOverflows".into(), 144);
    let snap = Snapshot {
        elapsed: Duration::from_secs(2),
        unix_ms: 6,
        kernel: Some(Arc::new(reading)),
        ..Default::default()
    };
    update(
        &mut s,
        Msg::Snapshot(Box::new(snap), std::time::Instant::now()),
    );
    let out = screen(&s);
    assert!(out.contains("UNSEEN 144:"), "{out}");
    assert!(!out.contains("288"), "{out}");
    press(&mut s, KeyCode::Char('c'));
    let out = screen(&s);
    assert!(
        line_with(&out, "TcpExt:ListenOverflows").contains("part of another counter"),
        "{out}"
    );
    assert!(
        line_with(&out, "unseen drops in all").contains("144"),
        "{out}"
    );
}

#[test]
fn warnings_raised_under_the_screen_are_counted_in_the_footer_and_listed_by_help() {
    let mut s = state((120, 40));
    let (footer, help) = footer_and_help(&mut s);
    assert!(!footer.contains("warning"), "{footer}");
    assert!(!help.contains("warnings ("), "{help}");
    s.warnings = (
        3,
        vec![
            "the counter reader: no reading within 5s".into(),
            "a name with an escape \u{1b}[2J in it".into(),
        ],
    );
    let (footer, help) = footer_and_help(&mut s);
    assert!(footer.starts_with("3 warnings, ? lists them"), "{footer}");
    assert!(footer.contains("q quit"), "the keys still fit: {footer}");
    assert!(help.contains("warnings (the last 2 of 3):"), "{help}");
    assert!(help.contains("no reading within 5s"), "{help}");
    assert!(!help.contains('\u{1b}'), "raw control characters: {help:?}");
}
