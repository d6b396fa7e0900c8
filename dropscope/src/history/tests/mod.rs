//! Reading generated histories: spans, gaps, refused segments and exact window counts.

mod index;
mod kernel;
use std::time::Duration;

use super::{
    catalog::Catalog,
    range::{Window, count},
    synthetic::{session, write_session},
};
use crate::{
    model::{Snapshot, window},
    record::synthetic::snapshots,
};

const T0: u64 = 1_790_000_000_000;

/// Two sessions of 10 snapshots at 1/s, 100 s apart, in segments of 4; returns them.
fn two_sessions(dir: &std::path::Path) -> (Vec<Snapshot>, Vec<Snapshot>) {
    let a = snapshots(6, 3, 10, 10);
    let b = snapshots(6, 2, 7, 10);
    let seq = write_session(dir, 1, &session("a", T0), &a, 4).expect("a");
    write_session(dir, seq, &session("a", T0 + 100_000), &b, 4).expect("b");
    (a, b)
}

#[test]
fn spans_and_gaps_follow_sessions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    two_sessions(tmp.path());
    let cat = Catalog::open(tmp.path()).expect("open");
    assert_eq!(cat.pieces.len(), 6);
    let spans = cat.spans();
    assert_eq!(spans.len(), 2, "{spans:?}");
    // Each span holds its session's first snapshot, so it starts at the session's start.
    assert_eq!((spans[0].from_ms, spans[0].to_ms), (T0, T0 + 9_003));
    assert_eq!(spans[1].from_ms, T0 + 100_000);
    let w = Window {
        from_ms: T0,
        to_ms: T0 + 109_003,
    };
    let c = count(&cat, w).expect("count");
    assert_eq!(c.gaps, vec![(T0 + 9_003, T0 + 100_000, false)]);
    assert_eq!(c.covered_ms, 9_003 + 9_003);
}

#[test]
fn a_window_across_sessions_counts_exactly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = two_sessions(tmp.path());
    let cat = Catalog::open(tmp.path()).expect("open");
    // Everything: both sessions' last cumulative counts.
    let all = count(
        &cat,
        Window {
            from_ms: 0,
            to_ms: u64::MAX,
        },
    )
    .expect("count");
    assert_eq!(all.sessions, 2);
    assert_eq!(all.snap.total, a[9].total + b[9].total);
    assert!(all.snap.invariant_holds());
    // From 3 s into a (its snapshot at 3.003 s is the first after) to 5 s into b.
    let c = count(
        &cat,
        Window {
            from_ms: T0 + 3_500,
            to_ms: T0 + 105_500,
        },
    )
    .expect("count");
    let want_a = window::between(&a[3], &a[9]);
    let want_b = b[5].clone();
    assert_eq!(c.snap.total, want_a.total + want_b.total);
    for d in &c.snap.drops {
        let of = |s: &Snapshot| {
            s.drops
                .iter()
                .find(|x| x.key == d.key)
                .map_or(0, |x| x.count)
        };
        assert_eq!(d.count, of(&want_a) + of(&want_b), "{:?}", d.key.location);
    }
    // A window inside the gap holds no session.
    let none = count(
        &cat,
        Window {
            from_ms: T0 + 20_000,
            to_ms: T0 + 90_000,
        },
    )
    .expect("count");
    assert_eq!(none.sessions, 0);
    assert_eq!(none.gaps, vec![(T0 + 20_000, T0 + 90_000, false)]);
}

#[test]
fn a_damaged_segment_is_refused_alone_and_a_cut_one_reads() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, _) = two_sessions(tmp.path());
    let listing = super::dir::list(tmp.path()).expect("list");
    // Segment 2 (a's snapshots 4..8): a flipped byte in the middle.
    let p2 = &listing.segments[1].path;
    let mut bytes = std::fs::read(p2).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(p2, &bytes).expect("write");
    // Segment 3 (a's last two): its tail cut, as by a kill.
    let p3 = &listing.segments[2].path;
    let bytes = std::fs::read(p3).expect("read");
    std::fs::write(p3, &bytes[..bytes.len() - 30]).expect("write");
    let cat = Catalog::open(tmp.path()).expect("open");
    // A damaged frame keeps the valid prefix (as for recordings); a file that is not a
    // recording at all is refused alone.
    std::fs::write(tmp.path().join(super::dir::segment_name(99, T0)), b"junk").expect("w");
    let cat2 = Catalog::open(tmp.path()).expect("open");
    assert_eq!(cat2.refused.len(), cat.refused.len() + 1);
    assert!(cat2.refused.iter().any(|r| r.why.contains("bad magic")));
    let cut = cat
        .pieces
        .iter()
        .find(|p| p.file.seq == 3)
        .expect("cut segment reads");
    assert!(!cut.finished);
    assert!(cut.snapshots >= 1);
    // The whole of session a still counts exactly up to its last readable snapshot.
    let c = count(
        &cat2,
        Window {
            from_ms: 0,
            to_ms: T0 + 50_000,
        },
    )
    .expect("count");
    let last = a[4 + 4 + cut.snapshots - 1].total;
    assert_eq!(c.snap.total, last);
}

#[test]
fn clock_steps_never_reorder_a_session() {
    // Wall times come from the session's start and its monotonic time: a segment named by a
    // clock stepped back still sorts, and counts, by its number.
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = snapshots(4, 2, 5, 8);
    let info = session("a", T0);
    let bytes1 = crate::record::encode(&info, &a[..4]).expect("encode");
    let bytes2 = crate::record::encode(&info, &a[4..]).expect("encode");
    std::fs::write(tmp.path().join(super::dir::segment_name(1, T0)), bytes1).expect("w");
    // Named an hour earlier than the first.
    std::fs::write(
        tmp.path().join(super::dir::segment_name(2, T0 - 3_600_000)),
        bytes2,
    )
    .expect("w");
    let cat = Catalog::open(tmp.path()).expect("open");
    assert_eq!(cat.spans().len(), 1);
    let c = count(
        &cat,
        Window {
            from_ms: 0,
            to_ms: u64::MAX,
        },
    )
    .expect("count");
    assert_eq!(c.snap.total, a[7].total);
    assert_eq!(
        cat.pieces[1].from_ms(),
        T0 + Duration::from_millis(4_003).as_millis() as u64
    );
}

/// A crafted history: segments of sessions started anywhere on the clock (up to its end),
/// snapshots far into their session, garbage files with segment names, duplicate numbers; the
/// names say nothing true of the content.
fn crafted(dir: &std::path::Path, starts: &[u64], offsets: &[u64], junk: &[Vec<u8>]) {
    let mut seq = 1;
    for (i, (&start, &off)) in starts.iter().zip(offsets).enumerate() {
        let mut snaps = snapshots(3, 2, 5, 4);
        for s in &mut snaps {
            s.elapsed += Duration::from_millis(off);
        }
        let info = session(&format!("h{i}\u{1b}[2J"), start);
        for chunk in snaps.chunks(2) {
            let bytes = crate::record::encode(&info, chunk).expect("encode");
            std::fs::write(dir.join(super::dir::segment_name(seq, T0)), bytes).expect("write");
            seq += 1;
        }
    }
    for (i, bytes) in junk.iter().enumerate() {
        // One shares the number of a real segment (left out), the others come after.
        let seq = if i == 0 { 1 } else { 100 + i as u64 };
        let name = super::dir::segment_name(seq, T0 + 1000 * (i as u64 + 1));
        std::fs::write(dir.join(name), bytes).expect("junk");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    #[test]
    fn a_crafted_history_is_read_without_a_panic(
        starts in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..4),
        offsets in proptest::collection::vec(0u64..u64::MAX / 4_000_000, 4),
        junk in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..3),
        from in proptest::prelude::any::<u64>(),
        len in proptest::prelude::any::<u64>(),
    ) {
        let tmp = tempfile::tempdir().expect("tempdir");
        crafted(tmp.path(), &starts, &offsets, &junk);
        let cat = Catalog::open(tmp.path()).expect("open");
        let w = Window { from_ms: from, to_ms: from.saturating_add(len) };
        let c = count(&cat, w).expect("count");
        proptest::prop_assert!(c.snap.invariant_holds());
        let t = super::timeline::build(&cat, 50).expect("timeline");
        let strip = t.strip(40, Some(from));
        proptest::prop_assert!(strip.chars().count() == 40 || t.buckets.is_empty());
        let mut out = Vec::new();
        crate::cmd::history::write_listing(&cat, "dir", &mut out).expect("listing");
        let text = String::from_utf8(out).expect("utf-8");
        proptest::prop_assert!(!text.contains('\u{1b}'), "{}", text);
    }
}

#[test]
fn a_pause_within_a_session_is_a_gap_whose_drops_are_counted_and_timed() {
    // One session: 10 s recorded, 60 s paused (a full disk), 10 s recorded again.
    let tmp = tempfile::tempdir().expect("tempdir");
    let all = snapshots(4, 2, 10, 80);
    let kept: Vec<Snapshot> = all[..10].iter().chain(&all[70..]).cloned().collect();
    write_session(tmp.path(), 1, &session("a", T0), &kept, 10).expect("write");
    let cat = Catalog::open(tmp.path()).expect("open");
    assert_eq!(cat.spans().len(), 2);
    let c = count(
        &cat,
        Window {
            from_ms: 0,
            to_ms: u64::MAX,
        },
    )
    .expect("count");
    // Every drop of the pause is in the total, and its time in the rate's denominator.
    assert_eq!(c.snap.total, all[79].total);
    assert_eq!(c.covered_ms, 79_003);
    // The pause is a counted gap; the (unbounded) window before and after the session is not.
    let (counted, not): (Vec<(u64, u64, bool)>, Vec<_>) = c.gaps.iter().partition(|g| g.2);
    assert_eq!(
        counted,
        vec![(T0 + 9_003, T0 + 70_003, true)],
        "{:?}",
        c.gaps
    );
    assert_eq!(not.len(), 2, "{:?}", c.gaps);
}

#[test]
fn a_replay_runs_across_sessions_and_gaps_on_one_clock_without_counts_going_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = two_sessions(tmp.path());
    let cat = Catalog::open(tmp.path()).expect("open");
    let (file, origin, first_ms, notes) = super::replay::write_window(
        &cat,
        Window {
            from_ms: 0,
            to_ms: u64::MAX,
        },
    )
    .expect("written")
    .expect("some snapshots");
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(origin, T0);
    assert_eq!(first_ms, T0 + 3);
    let rec = crate::record::Recording::open(file.path()).expect("reads");
    assert_eq!(rec.len(), a.len() + b.len());
    // One clock: the second session's snapshots sit 100 s on, across the gap.
    assert_eq!(rec.duration(), Duration::from_millis(100_000 + 9_003));
    let snaps: Vec<Snapshot> = rec.snapshots().map(|s| s.expect("snapshot")).collect();
    for w in snaps.windows(2) {
        assert!(w[0].elapsed < w[1].elapsed);
        assert!(w[0].total <= w[1].total, "a count went back");
        let d = window::between(&w[0], &w[1]);
        assert!(d.drops.iter().all(|x| x.count <= w[1].total));
    }
    // The second session's counts carried on from the first's end: exact over both.
    let end = snaps.last().expect("last");
    assert_eq!(end.total, a[9].total + b[9].total);
    assert_eq!(end.keyed_sum(), end.total);
    // Over the gap (the last of a, the first of b): b's drops before its first snapshot.
    let across = window::between(&snaps[9], &snaps[10]);
    assert_eq!(across.total, b[0].total);
}

#[test]
fn a_jump_opens_the_window_around_its_time_within_the_history() {
    use super::replay::{around, open_around};
    // Centred where it can be; moved, not cut, at the history's ends; the range at most.
    assert_eq!(
        around(5_000, 2_000, 0, 10_000),
        Window {
            from_ms: 4_000,
            to_ms: 6_000
        }
    );
    assert_eq!(around(500, 2_000, 0, 10_000).from_ms, 0);
    assert_eq!(around(500, 2_000, 0, 10_000).to_ms, 2_000);
    assert_eq!(around(9_900, 2_000, 0, 10_000).from_ms, 8_000);
    assert_eq!(
        around(7, 1_000_000, 5, 10),
        Window {
            from_ms: 5,
            to_ms: 10
        }
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = two_sessions(tmp.path());
    // A window of 4 s around the first session's seventh snapshot (6.003 s): that session only, on its
    // own clock, the strip of the whole history beside it.
    let opened = open_around(tmp.path(), T0 + 6_003, 4_000).expect("opened");
    assert!(opened.notes.is_empty(), "{:?}", opened.notes);
    assert_eq!(
        opened.window,
        Window {
            from_ms: T0 + 4_003,
            to_ms: T0 + 8_003
        }
    );
    assert_eq!(opened.timeline.replay_started_ms, T0);
    assert_eq!(opened.timeline.replay_from_ms, T0 + 4_003);
    assert_eq!(
        (opened.timeline.from_ms, opened.timeline.to_ms),
        (T0, T0 + 109_003)
    );
    let snaps: Vec<Snapshot> = (opened.recording.snapshots())
        .map(|s| s.expect("snapshot"))
        .collect();
    assert_eq!(snaps.len(), 5);
    assert_eq!(snaps[2].elapsed, Duration::from_millis(6_003));
    assert_eq!(snaps[2].total, a[6].total);
    // In the second session: its counts, on a clock from its own start.
    let opened = open_around(tmp.path(), T0 + 105_003, 2_000).expect("opened");
    assert_eq!(opened.timeline.replay_started_ms, T0 + 100_000);
    let last = (opened.recording.snapshots().last())
        .expect("a snapshot")
        .expect("reads");
    // The window's end, 106.003 s, is b's seventh snapshot.
    assert_eq!(last.elapsed, Duration::from_millis(6_003));
    assert_eq!(last.total, b[6].total);
    // Past the history's ends: refused, saying its range.
    let e = open_around(tmp.path(), T0 + 200_000, 2_000)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("outside the history"), "{e}");
}
