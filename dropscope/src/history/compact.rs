//! Coarser frames for older hours: a segment older than the full-resolution age is rewritten
//! with one snapshot a minute. Snapshots are cumulative, so every total, and every window
//! between two kept snapshots, stays exact; only where within the minute a drop fell is lost.
use std::{path::Path, time::Duration};

use anyhow::Context as _;

use super::dir::{self, SegmentFile};
use crate::record::{Recorder, Recording};

/// The step of a coarse segment: one snapshot a minute.
pub const COARSE_STEP: Duration = Duration::from_secs(60);

/// The first segment (oldest first, not the one being written) that should be coarse and is
/// not: the next one was opened before `now - full` (all its snapshots are older).
pub fn next_to_compact(
    segments: &[SegmentFile],
    current: Option<u64>,
    now_ms: u64,
    full: Duration,
) -> Option<usize> {
    let cutoff = now_ms.saturating_sub(u64::try_from(full.as_millis()).unwrap_or(u64::MAX));
    (0..segments.len().saturating_sub(1)).find(|&i| {
        let s = &segments[i];
        !s.coarse && Some(s.seq) != current && segments[i + 1].opened_unix_ms <= cutoff
    })
}

/// Rewrites segment `seg` of `dir` with one snapshot per [`COARSE_STEP`] (and its last), under
/// its coarse name, then removes the full one; returns the sizes before and after.
pub fn compact(dir: &Path, seg: &SegmentFile) -> anyhow::Result<(u64, u64)> {
    let shown = seg.path.display();
    let coarse = dir.join(dir::coarse_name(seg.seq, seg.opened_unix_ms));
    if coarse.exists() {
        // Made coarse before, and stopped before the full one was removed.
        std::fs::remove_file(&seg.path).with_context(|| format!("removing {shown}"))?;
        return Ok((seg.bytes, std::fs::metadata(&coarse).map_or(0, |m| m.len())));
    }
    let rec = Recording::open(&seg.path).with_context(|| format!("reading {shown}"))?;
    let tmp = tempfile::Builder::new()
        .prefix(".coarse.")
        .suffix(".part")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let mut out = Recorder::to_stream(Box::new(tmp.reopen()?), rec.info())?;
    let frames = rec.frames();
    let mut next_kept = Duration::ZERO;
    for (i, s) in rec.snapshots().enumerate() {
        let s = s.with_context(|| format!("reading {shown}"))?;
        let last = i + 1 == frames.len();
        if s.elapsed >= next_kept || last {
            out.write(&s)?;
            next_kept = s.elapsed + COARSE_STEP;
        }
    }
    out.finish()?;
    tmp.as_file().sync_data()?;
    let bytes = tmp.as_file().metadata()?.len();
    tmp.persist_noclobber(&coarse)
        .map_err(|e| e.error)
        .with_context(|| format!("naming {}", coarse.display()))?;
    std::fs::remove_file(&seg.path).with_context(|| format!("removing {shown}"))?;
    let _ = std::fs::remove_file(super::index::path_of(&seg.path));
    super::index::index_segment(&coarse)?;
    Ok((seg.bytes, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        history::{
            catalog::Catalog,
            range::{Window, count},
            synthetic::{session, write_session},
        },
        record::synthetic::snapshots,
    };

    #[test]
    fn a_coarse_hour_keeps_every_total_exact_in_far_fewer_bytes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let snaps = snapshots(1000, 1000, 1_000_000, 3600);
        let info = session("h", 1_790_000_000_000);
        write_session(tmp.path(), 1, &info, &snaps, 3600).expect("write");
        write_session(tmp.path(), 2, &info, &snaps[3599..], 1).ok();
        let listing = dir::list(tmp.path()).expect("list");
        let i = next_to_compact(&listing.segments, None, u64::MAX, Duration::from_secs(3600))
            .expect("the old hour is due");
        let (before, after) = compact(tmp.path(), &listing.segments[i]).expect("compact");
        eprintln!(
            "one hour of 1,000 keys all changing every second: {before} B full, {after} B coarse"
        );
        assert!(after * 20 < before, "{before} -> {after}");
        let listing = dir::list(tmp.path()).expect("list");
        assert!(listing.segments[0].coarse);
        assert_eq!(
            next_to_compact(&listing.segments, None, u64::MAX, Duration::from_secs(3600)),
            None
        );
        let cat = Catalog::open(tmp.path()).expect("open");
        assert_eq!(cat.pieces[0].snapshots, 61);
        // The whole hour and a window between two kept snapshots are exact.
        let all = Window {
            from_ms: 0,
            to_ms: u64::MAX,
        };
        assert_eq!(
            count(&cat, all).expect("count").snap.total,
            snaps[3599].total
        );
        let t = |i: usize| 1_790_000_000_000 + snaps[i].elapsed.as_millis() as u64;
        let w = Window {
            from_ms: t(600),
            to_ms: t(1200),
        };
        let c = count(&cat, w).expect("count");
        assert_eq!(c.snap.total, snaps[1200].total - snaps[600].total);
    }
}
