//! Whose socket in the TUI: the SOCKET column, and the row's socket line above its stacks
//! (Enter), as found now: a socket named after Enter shows its name without leaving the view.
use super::*;
use crate::{
    model::group::Dim,
    vocab::socket::{About, Via},
};

fn with_socket(about: About) -> DropKey {
    let mut k = key("SOCKET_RCVBUFF", "udp_queue_rcv_one_skb+0x437");
    k.attr.protocol = Some("udp".into());
    crate::fixtures::with_socket(k, Via::Receiving, about)
}

fn found() -> About {
    crate::fixtures::found("nginx", "0.0.0.0:53", 4608)
}

fn snap_of(secs: u64, about: About, count: u64) -> Snapshot {
    let drops = vec![DropCount {
        key: with_socket(about),
        count,
    }];
    Snapshot {
        elapsed: Duration::from_secs(secs),
        total: count,
        drops,
        ..snap(secs, &[], 0)
    }
}

#[test]
fn enter_shows_the_rows_socket_as_found_now() {
    let mut s = State::new(info(), None, (160, 30));
    s.by = vec![Dim::Reason, Dim::Location, Dim::Protocol, Dim::Socket];
    let t0 = Instant::now();
    feed(
        &mut s,
        snap_of(1, About::unknown("not looked up yet"), 10),
        t0,
    );
    let out = screen(&s);
    assert!(out.contains("SOCKET"), "{out}");
    assert!(out.contains("unknown (not looked up yet)"), "{out}");
    s.selected = Some(with_socket(About::unknown("not looked up yet")));
    press(&mut s, KeyCode::Enter);
    assert!(matches!(s.screen, Screen::Stacks(_)));
    let out = screen(&s);
    assert!(out.contains("socket: unknown (not looked up yet)"), "{out}");
    // Found while the view is open: the same row, now named.
    feed(&mut s, snap_of(2, found(), 30), t0 + Duration::from_secs(1));
    let out = screen(&s);
    assert!(
        out.contains("socket: nginx[812] udp 0.0.0.0:53 rcvbuf 4608"),
        "{out}"
    );
    assert!(out.contains("exact count 30"), "{out}");
}

/// A long socket cell never takes the location's place: on a narrow screen the SOCKET column
/// is cut (its whole text is in the Enter view) and LOCATION keeps its columns. Before, the
/// location column vanished at 130 columns beside an "owner unknown (...)" cell.
#[test]
fn a_long_socket_cell_leaves_the_location_its_columns() {
    let mut s = State::new(info(), None, (90, 20));
    s.by = vec![Dim::Reason, Dim::Location, Dim::Protocol, Dim::Socket];
    let why = "no process holds it (closed, or held by a process past every bound)";
    feed(&mut s, snap_of(1, About::unknown(why), 10), Instant::now());
    let out = screen(&s);
    assert!(out.contains("LOCATION"), "{out}");
    assert!(out.contains("udp_queue_rcv_"), "{out}");
    assert!(out.contains("SOCKET"), "{out}");
}

/// A socket row whose holders were found names them in WHO (the culprit) and is not said
/// again in a SOCKET column; one whose holders were not found keeps its SOCKET cell (why) and
/// WHO says it cannot tell.
#[test]
fn who_names_a_found_socket_and_its_socket_cell_is_not_repeated() {
    let mut s = State::new(info(), None, (160, 20));
    s.by = vec![Dim::Reason, Dim::Location, Dim::Protocol, Dim::Socket];
    feed(&mut s, snap_of(1, found(), 10), Instant::now());
    let out = screen(&s);
    let head = out.lines().find(|l| l.contains("COUNT")).expect("a header");
    assert!(head.contains("WHO"), "{out}");
    assert!(!head.contains("SOCKET"), "{out}");
    assert!(
        out.contains("nginx[812] udp 0.0.0.0:53 rcvbuf 4608"),
        "{out}"
    );
    assert_eq!(out.matches("0.0.0.0:53").count(), 1, "{out}");
    let mut s = State::new(info(), None, (160, 20));
    s.by = vec![Dim::Reason, Dim::Location, Dim::Protocol, Dim::Socket];
    feed(
        &mut s,
        snap_of(1, About::unknown("not looked up yet"), 10),
        Instant::now(),
    );
    let out = screen(&s);
    let head = out.lines().find(|l| l.contains("COUNT")).expect("a header");
    assert!(head.contains("SOCKET") && head.contains("WHO"), "{out}");
    assert!(out.contains("unknown (not looked up yet)"), "{out}");
}
