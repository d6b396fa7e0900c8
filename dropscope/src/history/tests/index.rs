//! The index beside each segment: built, written privately, and caught whenever it lies.
use std::{os::unix::fs::PermissionsExt as _, path::Path};

use crate::history::{
    catalog::Catalog,
    dir,
    index::{self, Loaded, SegmentIndex},
    range::{Window, count},
    synthetic::{session, write_session},
};
use crate::record::synthetic::snapshots;

const T0: u64 = 1_790_000_000_000;

/// A change that makes an index lie.
type Lie = Box<dyn FnOnce(&mut SegmentIndex)>;

/// What the catalog knows of each piece, to compare a catalog read from indexes with one read
/// in full.
fn pieces(cat: &Catalog) -> Vec<String> {
    cat.pieces
        .iter()
        .map(|p| {
            format!(
                "{} {:?} {:?}..{:?} n={} fin={} {:?}",
                p.file.seq, p.info, p.first, p.last, p.snapshots, p.finished, p.warnings
            )
        })
        .collect()
}

/// A history of one session in three segments of 5 snapshots; returns the segments' paths.
fn history(dir: &Path) -> Vec<std::path::PathBuf> {
    let snaps = snapshots(8, 4, 10, 15);
    write_session(dir, 1, &session("a", T0), &snaps, 5).expect("write");
    dir::list(dir)
        .expect("list")
        .segments
        .into_iter()
        .map(|s| s.path)
        .collect()
}

fn index_of(seg: &Path) -> SegmentIndex {
    match index::load(seg) {
        Loaded::Verified(i) => i,
        other => panic!("{}: {other:?}", seg.display()),
    }
}

#[test]
fn an_index_is_written_privately_and_the_catalog_reads_the_same_from_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let segs = history(tmp.path());
    let whole = Catalog::open(tmp.path()).expect("open");
    for s in &segs {
        assert!(matches!(index::load(s), Loaded::Missing));
        index::index_segment(s).expect("index");
        let meta = std::fs::symlink_metadata(index::path_of(s)).expect("stat");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let idx = index_of(s);
        assert_eq!(idx.snapshots, 5);
        assert!(idx.finished);
    }
    let indexed = Catalog::open(tmp.path()).expect("open");
    assert_eq!(pieces(&indexed), pieces(&whole));
    assert!(indexed.notes.is_empty(), "{:?}", indexed.notes);
    // Counts come from the segments themselves, the same either way.
    let w = Window {
        from_ms: T0 + 3_500,
        to_ms: T0 + 12_500,
    };
    let (a, b) = (count(&whole, w).expect("a"), count(&indexed, w).expect("b"));
    assert_eq!(a.snap.total, b.snap.total);
    assert!(a.snap.total > 0);
}

/// Writes `idx` (changed by `lie`) as the index of `seg`, then checks that it is rejected and
/// that the catalog reads the segment in full, with a note naming it.
fn caught(dir: &Path, seg: &Path, lie: impl FnOnce(&mut SegmentIndex), what: &str) {
    let whole = {
        let _ = std::fs::remove_file(index::path_of(seg));
        pieces(&Catalog::open(dir).expect("open"))
    };
    index::index_segment(seg).expect("index");
    let mut idx = index_of(seg);
    lie(&mut idx);
    index::write(seg, &idx).expect("write");
    let Loaded::Rejected(why) = index::load(seg) else {
        panic!("{what}: a lying index was used");
    };
    let cat = Catalog::open(dir).expect("open");
    assert_eq!(pieces(&cat), whole, "{what}: {why}");
    let name = seg
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        cat.notes
            .iter()
            .any(|n| n.contains(&name) && n.contains("read in full")),
        "{what}: {:?}",
        cat.notes
    );
}

#[test]
fn an_index_that_lies_is_caught_and_the_segment_read_in_full() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let segs = history(tmp.path());
    let seg = &segs[1];
    let lies: Vec<(&str, Lie)> = vec![
        ("first offset", Box::new(|i| i.first_offset += 1)),
        ("last offset", Box::new(|i| i.last_offset = i.first_offset)),
        (
            "last offset past the end",
            Box::new(|i| i.last_offset = u64::MAX - 3),
        ),
        ("first time", Box::new(|i| i.first_ns = 0)),
        ("last time", Box::new(|i| i.last_ns += 1_000_000_000)),
        ("length", Box::new(|i| i.bytes += 1)),
        ("session", Box::new(|i| i.info.started_unix_ms += 1)),
        ("count", Box::new(|i| i.snapshots = 1)),
        ("not finished", Box::new(|i| i.finished = false)),
        ("layout", Box::new(|i| i.format = 99)),
        ("totals out of order", Box::new(|i| i.totals.swap(0, 1))),
        (
            "totals past the last",
            Box::new(|i| i.totals.push([u64::MAX, u64::MAX])),
        ),
    ];
    for (what, lie) in lies {
        caught(tmp.path(), seg, lie, what);
    }
}

#[test]
fn a_truncated_planted_or_huge_index_is_caught() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let segs = history(tmp.path());
    let seg = &segs[0];
    let path = index::path_of(seg);
    index::index_segment(seg).expect("index");
    let text = std::fs::read(&path).expect("read");
    std::fs::write(&path, &text[..text.len() / 2]).expect("truncate");
    assert!(matches!(index::load(seg), Loaded::Rejected(w) if w.contains("parse")));
    std::fs::write(&path, vec![b' '; 300 << 10]).expect("huge");
    assert!(matches!(index::load(seg), Loaded::Rejected(w) if w.contains("too large")));
    // A link is never followed, and writing the index replaces the link, not its target.
    std::fs::remove_file(&path).expect("rm");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, &text).expect("victim");
    std::os::unix::fs::symlink(&victim, &path).expect("symlink");
    assert!(matches!(index::load(seg), Loaded::Rejected(_)));
    index::index_segment(seg).expect("index");
    assert_eq!(std::fs::read(&victim).expect("read"), text);
    assert!(matches!(index::load(seg), Loaded::Verified(_)));
}

#[test]
fn a_segment_appended_to_after_its_index_is_read_in_full() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let segs = history(tmp.path());
    let seg = &segs[2];
    index::index_segment(seg).expect("index");
    // Cut the end marker off and append more snapshots' frames of a longer recording: the
    // index (5 snapshots, finished) no longer matches.
    let longer = crate::record::encode(
        &session("a", T0),
        &snapshots(8, 4, 10, 15)[10..15]
            .iter()
            .cloned()
            .chain(snapshots(8, 4, 10, 20)[15..20].iter().cloned())
            .collect::<Vec<_>>(),
    )
    .expect("encode");
    std::fs::write(seg, &longer).expect("rewrite");
    assert!(matches!(index::load(seg), Loaded::Rejected(w) if w.contains("bytes")));
    let cat = Catalog::open(tmp.path()).expect("open");
    assert_eq!(cat.pieces[2].snapshots, 10);
}

#[test]
fn a_cut_segment_is_indexed_and_its_index_verifies() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let segs = history(tmp.path());
    let seg = &segs[2];
    let bytes = std::fs::read(seg).expect("read");
    // Cut inside the last snapshot's frame: the segment of a kill -9.
    std::fs::write(seg, &bytes[..bytes.len() - 40]).expect("cut");
    let whole = pieces(&Catalog::open(tmp.path()).expect("open"));
    index::index_segment(seg).expect("index");
    let idx = index_of(seg);
    assert!(!idx.finished);
    assert_eq!(idx.snapshots, 4);
    assert_eq!(pieces(&Catalog::open(tmp.path()).expect("open")), whole);
}

#[test]
fn the_sweep_indexes_closed_segments_and_removes_orphans() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let segs = history(tmp.path());
    let orphan = index::path_of(&tmp.path().join(dir::segment_name(99, T0)));
    std::fs::write(&orphan, b"{}").expect("orphan");
    let listing = dir::list(tmp.path()).expect("list");
    let mut failed = Default::default();
    for _ in 0..3 {
        index::sweep(tmp.path(), &listing.segments, Some(3), &mut failed);
    }
    assert!(!orphan.exists());
    assert!(matches!(index::load(&segs[0]), Loaded::Verified(_)));
    assert!(matches!(index::load(&segs[1]), Loaded::Verified(_)));
    // Never the segment being written.
    assert!(matches!(index::load(&segs[2]), Loaded::Missing));
}

#[test]
fn the_strip_reads_the_same_from_indexes_without_opening_the_segments() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // 10 minutes dropping, a 10-minute gap, 10 minutes of another session.
    let a = snapshots(4, 4, 50, 601);
    let b = snapshots(4, 2, 30, 601);
    let seq = write_session(tmp.path(), 1, &session("h", T0), &a, 240).expect("a");
    write_session(tmp.path(), seq, &session("h", T0 + 1_200_000), &b, 240).expect("b");
    let whole = crate::history::timeline::build(&Catalog::open(tmp.path()).expect("open"), 30)
        .expect("timeline");
    for s in dir::list(tmp.path()).expect("list").segments {
        index::index_segment(&s.path).expect("index");
    }
    let cat = Catalog::open(tmp.path()).expect("open");
    assert!(cat.pieces.iter().all(|p| !p.totals.is_empty()));
    // Unopened: the segments' bytes are not needed for the strip.
    for p in &cat.pieces {
        std::fs::write(&p.file.path, b"gone").expect("overwrite");
    }
    let indexed = crate::history::timeline::build(&cat, 30).expect("timeline");
    assert_eq!(
        (indexed.from_ms, indexed.to_ms),
        (whole.from_ms, whole.to_ms)
    );
    let gaps = |t: &crate::history::timeline::Timeline| {
        t.buckets.iter().map(Option::is_none).collect::<Vec<_>>()
    };
    assert_eq!(gaps(&indexed), gaps(&whole));
    let sum = |t: &crate::history::timeline::Timeline| -> f64 { t.buckets.iter().flatten().sum() };
    let (x, y) = (sum(&indexed), sum(&whole));
    assert!((x - y).abs() / y < 0.02, "{x} vs {y}");
}
