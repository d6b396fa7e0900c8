//! The kernel's counters over a window of a generated history: exact growth between the
//! readings at its ends, summed across sessions, with the probe's drops to match them.
use crate::history::{
    catalog::Catalog,
    range::{Counted, Window, count},
    synthetic::{INITIAL_NETNS, session, with_counters, write_session},
};

const T0: u64 = 1_790_000_000_000;

/// Session A: 20 s at 10 drops/s from T0; session B: 20 s at 20/s from T0 + 100 s. Segments
/// of 6 snapshots, so readings are carried across segment boundaries.
fn two_counted_sessions(dir: &std::path::Path) {
    let seq = write_session(dir, 1, &session("k", T0), &with_counters(T0, 10, 20), 6).expect("a");
    let b = with_counters(T0 + 100_000, 20, 20);
    write_session(dir, seq, &session("k", T0 + 100_000), &b, 6).expect("b");
}

/// The window from T0 + `from_ms` to T0 + `to_ms` of [`two_counted_sessions`].
fn counted(from_ms: u64, to_ms: u64) -> Counted {
    let tmp = tempfile::tempdir().expect("tempdir");
    two_counted_sessions(tmp.path());
    let cat = Catalog::open(tmp.path()).expect("open");
    let w = Window {
        from_ms: T0 + from_ms,
        to_ms: T0 + to_ms,
    };
    count(&cat, w).expect("count")
}

#[test]
fn a_window_across_sessions_carries_the_counters_growth_exactly() {
    // From 7.5 s into A (its snapshot at 7 s carries the reading at 5 s) to 12.5 s into B
    // (the snapshot at 12 s carries the reading at 10 s).
    let c = counted(7_500, 112_500);
    // The probe: A from 7 s to 20 s (130), B from its start to 12 s (240).
    assert_eq!(c.snap.total, 130 + 240);
    let (reading, seen) = c.kernel.expect("the counters over the window");
    let growth = |name: &str| reading.netns[&INITIAL_NETNS][name];
    // A: the readings at 20 s and 5 s (200 - 50); B: from its start to 10 s (200).
    assert_eq!(growth("Udp:NoPorts"), 150 + 200);
    assert_eq!(growth("Ip:InReceives"), 1_500 + 2_000);
    assert_eq!(growth("Xdp:veth0:xdpdrv:ds_drop#42:drop"), 75 + 100);
    assert!(reading.errors.is_empty(), "{:?}", reading.errors);
    // Matched with the drops from A's last snapshot before its reading at 5 s (at 4 s: 40) to
    // its end (200), and B's from its start (240): no drop the probe saw reads as unseen.
    assert_eq!(seen.total, 160 + 240);
    let mut snap = c.snap.clone();
    snap.kernel = Some(std::sync::Arc::new(reading.clone()));
    let programs = crate::model::programs::of_snapshot(&snap);
    assert_eq!(
        programs.iter().map(|d| d.count).sum::<u64>(),
        175,
        "{programs:?}"
    );
}

#[test]
fn a_window_that_starts_before_the_first_reading_says_so() {
    // From 2.5 s into A (no reading yet) to 15.5 s.
    let c = counted(2_500, 15_500);
    let (reading, seen) = c.kernel.expect("the counters");
    // Since the session's start, said, and matched with the drops over the same span.
    assert_eq!(reading.netns[&INITIAL_NETNS]["Udp:NoPorts"], 150);
    assert_eq!(seen.total, 150);
    assert_eq!(reading.errors.len(), 1, "{:?}", reading.errors);
    assert!(reading.errors[0].starts_with(crate::model::notes::SINCE_START));
}
