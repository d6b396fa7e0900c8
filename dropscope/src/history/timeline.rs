//! The timeline strip of a history: drops per second over the whole retained range, in
//! buckets, each bucket either a rate (where snapshots cover it) or not recorded (a gap).
use super::catalog::{Catalog, SEAM, wall_ms};

/// Buckets a timeline is computed in (the strip merges them to the screen's width).
pub const BUCKETS: usize = 240;

/// Drops per second over a history's range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Wall-clock start and end of the range, ms since the epoch.
    pub from_ms: u64,
    /// See `from_ms`.
    pub to_ms: u64,
    /// Drops per second in each of equal parts of the range; `None`: not recorded.
    pub buckets: Vec<Option<f64>>,
    /// Where session time 0 is on the wall clock for the session replayed (to place the
    /// replay's position on the strip).
    pub replay_started_ms: u64,
    /// Where the replay's first snapshot is on the wall clock: the window shown runs from it
    /// to the replay's position (what `v` compares).
    pub replay_from_ms: u64,
    /// The parts of the window replayed that nothing recorded (wall clock, ms since the epoch):
    /// the replay moves over them, and says so when its position is in one.
    pub gaps: Vec<(u64, u64)>,
}

/// One reading of a session's cumulative total.
#[derive(Clone, Copy)]
struct Sample {
    session: usize,
    at_ms: u64,
    total: u64,
}

/// The timeline of `cat` in `n` buckets: each session's cumulative totals read at every bucket
/// boundary its segments hold (each segment opened once), or for an indexed segment its
/// index's totals a minute apart (unopened), so a bucket's drops are exact sums of the
/// differences within it (to the minute, for indexed segments).
pub fn build(cat: &Catalog, n: usize) -> anyhow::Result<Timeline> {
    let Some((from_ms, to_ms)) = cat.range() else {
        return Ok(Timeline::default());
    };
    let n = n.max(1);
    let width = (to_ms - from_ms).div_ceil(n as u64).max(1);
    let boundary = |i: u64| from_ms.saturating_add(i.saturating_mul(width));
    let mut samples = Vec::new();
    let mut session = 0;
    for (i, p) in cat.pieces.iter().enumerate() {
        if i > 0 && cat.pieces[i - 1].info != p.info {
            session += 1;
        }
        if p.first <= SEAM {
            samples.push(Sample {
                session,
                at_ms: p.info.started_unix_ms,
                total: 0,
            });
        }
        if !p.totals.is_empty() {
            // Indexed: its totals a minute apart, without reading it.
            samples.extend(p.totals.iter().map(|&(t, total)| Sample {
                session,
                at_ms: wall_ms(&p.info, t),
                total,
            }));
            continue;
        }
        let rec = p.open()?;
        let (a, b) = (p.from_ms(), p.to_ms());
        let mut at = vec![a, b];
        let first = (a.saturating_sub(from_ms)).div_ceil(width);
        at.extend(
            (first..=first.saturating_add(n as u64))
                .map(boundary)
                .take_while(|&t| t <= b),
        );
        for t in at {
            let since = std::time::Duration::from_millis(t.saturating_sub(p.info.started_unix_ms))
                + std::time::Duration::from_nanos(999_999);
            let s = rec.snapshot_at(since)?;
            samples.push(Sample {
                session,
                at_ms: wall_ms(&p.info, s.elapsed).max(t.min(b)),
                total: s.total,
            });
        }
    }
    samples.sort_by_key(|s| (s.session, s.at_ms));
    let mut drops = vec![0u64; n];
    let mut covered = vec![0u64; n];
    for w in samples.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.session != b.session || b.at_ms - a.at_ms > SEAM.as_millis() as u64 + width {
            continue;
        }
        // The drops between two readings, spread over the buckets they span by time.
        let (lo, hi) = (a.at_ms.max(from_ms), b.at_ms.max(from_ms));
        let diff = b.total.saturating_sub(a.total);
        let first = usize::try_from((lo - from_ms) / width)
            .unwrap_or(0)
            .min(n - 1);
        if hi <= lo {
            drops[first] = drops[first].saturating_add(diff);
            continue;
        }
        for i in first..n {
            let (start, end) = (boundary(i as u64), boundary(i as u64 + 1));
            let (x, y) = (lo.max(start), if i == n - 1 { hi } else { hi.min(end) });
            if y <= x {
                break;
            }
            let share = (u128::from(diff) * u128::from(y - x) / u128::from(hi - lo)) as u64;
            drops[i] = drops[i].saturating_add(share);
            covered[i] = covered[i].saturating_add(y - x);
        }
    }
    let buckets = (0..n)
        .map(|i| (covered[i] > 0).then(|| drops[i] as f64 * 1000.0 / covered[i] as f64))
        .collect();
    let replay_started_ms = cat.pieces.last().map_or(0, |p| p.info.started_unix_ms);
    Ok(Timeline {
        from_ms,
        to_ms,
        buckets,
        replay_started_ms,
        replay_from_ms: from_ms,
        gaps: Vec::new(),
    })
}

impl Timeline {
    /// The strip in `width` cells: a bar per cell scaled to the highest rate (`_` for no
    /// drops), a blank where nothing was recorded, and `|` at `cursor_ms`.
    pub fn strip(&self, width: usize, cursor_ms: Option<u64>) -> String {
        const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        if width == 0 || self.buckets.is_empty() {
            return String::new();
        }
        let n = self.buckets.len();
        let cells: Vec<Option<f64>> = (0..width)
            .map(|c| {
                let (lo, hi) = (c * n / width, ((c + 1) * n / width).max(c * n / width + 1));
                (lo..hi.min(n))
                    .filter_map(|i| self.buckets[i])
                    .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
            })
            .collect();
        let max = cells.iter().flatten().fold(0.0f64, |m, &r| m.max(r));
        let span = self.to_ms.saturating_sub(self.from_ms).max(1);
        let cursor = cursor_ms
            .filter(|&t| t >= self.from_ms && t <= self.to_ms)
            .map(|t| {
                (((t - self.from_ms) as u128 * width as u128 / span as u128) as usize)
                    .min(width - 1)
            });
        cells
            .iter()
            .enumerate()
            .map(|(c, r)| match (Some(c) == cursor, r) {
                (true, _) => '|',
                (false, None) => ' ',
                (false, Some(r)) if *r <= 0.0 => '_',
                (false, Some(r)) => BARS[((r / max * 7.0).round() as usize).min(7)],
            })
            .collect()
    }

    /// The gap of the window replayed that wall time `ms` lies in, if any.
    pub fn gap_at(&self, ms: u64) -> Option<(u64, u64)> {
        self.gaps.iter().copied().find(|&(a, b)| a < ms && ms < b)
    }

    /// Where session time `position` of the replayed session is on the wall clock.
    pub fn wall_ms(&self, position: std::time::Duration) -> u64 {
        self.replay_started_ms
            .saturating_add(u64::try_from(position.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::synthetic::{session, write_session};

    const T0: u64 = 1_790_000_000_000;

    #[test]
    fn the_strip_shows_rates_gaps_and_the_cursor() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // 100 s of a session dropping, a 100 s gap, 100 s of one that does not drop.
        let a = crate::record::synthetic::snapshots(3, 3, 50, 101);
        let mut b = crate::record::synthetic::snapshots(3, 0, 1, 101);
        for s in &mut b {
            s.drops.clear();
            s.total = 0;
        }
        let seq = write_session(tmp.path(), 1, &session("h", T0), &a, 40).expect("a");
        write_session(tmp.path(), seq, &session("h", T0 + 200_000), &b, 40).expect("b");
        let cat = Catalog::open(tmp.path()).expect("open");
        let t = build(&cat, 30).expect("timeline");
        assert_eq!((t.from_ms, t.to_ms), (T0, T0 + 300_003));
        // Exact: the buckets' drops add up to the first session's total.
        let width_s = (t.to_ms - t.from_ms).div_ceil(30) as f64 / 1000.0;
        let sum: f64 = t.buckets.iter().flatten().map(|r| r * width_s).sum();
        assert!(
            (sum - a[100].total as f64).abs() / (a[100].total as f64) < 0.02,
            "{sum}"
        );
        let strip = t.strip(30, Some(T0 + 250_000));
        assert_eq!(strip.chars().count(), 30);
        let cells: Vec<char> = strip.chars().collect();
        assert!(
            cells[..9].iter().all(|c| "▁▂▃▄▅▆▇█".contains(*c)),
            "{strip}"
        );
        assert!(cells[11..19].iter().all(|&c| c == ' '), "gap: {strip:?}");
        assert!(
            cells[21..].iter().all(|&c| c == '_' || c == '|'),
            "no drops: {strip:?}"
        );
        assert_eq!(cells[24], '|', "{strip:?}");
    }
}
