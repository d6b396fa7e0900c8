//! Retention: which segments to remove so the history keeps within its age and size, oldest
//! first, never the one being written.
use std::time::Duration;

use super::dir::SegmentFile;

/// How much history to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Segments whose every snapshot is older than this are removed.
    pub age: Duration,
    /// While the segments together are larger than this, the oldest is removed.
    pub bytes: u64,
}

impl Default for Retention {
    /// Seven days, 1 GiB.
    fn default() -> Self {
        Self {
            age: super::DEFAULT_RETAIN,
            bytes: super::DEFAULT_RETAIN_SIZE,
        }
    }
}

/// The segments of `segments` (oldest first) to remove at `now_ms`, oldest first; `current` is
/// the sequence number of the segment being written, which is kept whatever its size.
///
/// A segment is old when the next one was opened before `now - age`: every snapshot it holds
/// predates the next one's start. The newest segment is never removed for its age (its end is
/// not known from its name), only for size.
pub fn to_prune(
    segments: &[SegmentFile],
    current: Option<u64>,
    now_ms: u64,
    keep: Retention,
) -> Vec<usize> {
    let cutoff = now_ms.saturating_sub(u64::try_from(keep.age.as_millis()).unwrap_or(u64::MAX));
    let mut prune = Vec::new();
    let mut total: u64 = segments
        .iter()
        .map(|s| s.bytes)
        .fold(0, u64::saturating_add);
    for (i, s) in segments.iter().enumerate() {
        if Some(s.seq) == current {
            break;
        }
        let old = segments
            .get(i + 1)
            .is_some_and(|next| next.opened_unix_ms <= cutoff);
        if old || total > keep.bytes {
            prune.push(i);
            total = total.saturating_sub(s.bytes);
        } else {
            // Oldest first: what follows is younger, and the total fits.
            break;
        }
    }
    prune
}

/// Removes the segments of `dir` that [`to_prune`] names; returns how many and their bytes.
pub fn prune(
    dir: &std::path::Path,
    current: Option<u64>,
    now_ms: u64,
    keep: Retention,
) -> anyhow::Result<(usize, u64)> {
    let listing = super::dir::list(dir)?;
    let mut freed = (0, 0);
    for i in to_prune(&listing.segments, current, now_ms, keep) {
        let s = &listing.segments[i];
        match std::fs::remove_file(&s.path) {
            Ok(()) => freed = (freed.0 + 1, freed.1 + s.bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("removing the old segment {}", s.path.display())));
            }
        }
    }
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;

    fn seg(seq: u64, opened_h: u64, bytes: u64) -> SegmentFile {
        SegmentFile {
            seq,
            opened_unix_ms: opened_h * HOUR,
            bytes,
            coarse: false,
            path: format!("seg-{seq}").into(),
        }
    }

    #[test]
    fn age_removes_segments_wholly_older_than_the_cutoff() {
        // Hourly segments opened at hours 0..10; now is hour 10; keep 3 h.
        let segs: Vec<_> = (0..10).map(|h| seg(h + 1, h, 100)).collect();
        let keep = Retention {
            age: Duration::from_secs(3 * 3600),
            bytes: u64::MAX,
        };
        // Cutoff hour 7: segments 0..=5 end (next opens) at or before hour 7; the one opened
        // at hour 6 runs to hour 7, which is the cutoff itself: gone too.
        assert_eq!(
            to_prune(&segs, Some(10), 10 * HOUR, keep),
            vec![0, 1, 2, 3, 4, 5, 6]
        );
        // The newest is never removed for age, even long after.
        assert_eq!(to_prune(&segs, None, 1000 * HOUR, keep).len(), 9);
    }

    #[test]
    fn size_removes_the_oldest_until_the_rest_fits_but_never_the_current() {
        let segs = vec![
            seg(1, 0, 400),
            seg(2, 1, 300),
            seg(3, 2, 200),
            seg(4, 3, 100),
        ];
        let keep = Retention {
            age: Duration::from_secs(365 * 86_400),
            bytes: 350,
        };
        assert_eq!(to_prune(&segs, Some(4), 4 * HOUR, keep), vec![0, 1]);
        // A current segment alone over the budget stays: it is being written.
        assert_eq!(to_prune(&segs, Some(2), 4 * HOUR, keep), vec![0]);
        let fits = Retention {
            bytes: 1000,
            ..keep
        };
        assert!(to_prune(&segs, Some(4), 4 * HOUR, fits).is_empty());
    }

    #[test]
    fn order_is_by_sequence_not_by_clock() {
        // The clock was stepped back: segment 3 was opened "before" segment 2.
        let segs = vec![seg(1, 5, 100), seg(2, 6, 100), seg(3, 1, 100)];
        let keep = Retention {
            age: Duration::from_secs(365 * 86_400),
            bytes: 150,
        };
        assert_eq!(to_prune(&segs, Some(3), 7 * HOUR, keep), vec![0, 1]);
    }

    #[test]
    fn prune_removes_files_on_disk() {
        let tmp = tempfile::tempdir().expect("tempdir");
        for (seq, h) in [(1, 0), (2, 1), (3, 2)] {
            let name = super::super::dir::segment_name(seq, h * HOUR);
            std::fs::write(tmp.path().join(name), vec![0u8; 100]).expect("write");
        }
        std::fs::write(tmp.path().join("unrelated"), b"x").expect("write");
        let keep = Retention {
            age: Duration::from_secs(3600),
            bytes: u64::MAX,
        };
        let (n, bytes) = prune(tmp.path(), Some(3), 3 * HOUR, keep).expect("prune");
        assert_eq!((n, bytes), (2, 200));
        let left = super::super::dir::list(tmp.path()).expect("list");
        assert_eq!(
            left.segments.iter().map(|s| s.seq).collect::<Vec<_>>(),
            vec![3]
        );
        assert!(tmp.path().join("unrelated").exists());
    }
}
