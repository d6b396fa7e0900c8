//! Now versus then: the last D of a history and the same D an interval earlier, as the two
//! runs of `diff --history DIR --last D --vs I`.
use std::{path::Path, time::Duration};

use anyhow::bail;

use super::{
    catalog::Catalog,
    range::{self, Window},
    when::local,
};
use crate::{model::Snapshot, sanitize::terminal};

/// One side of the comparison.
#[derive(Debug)]
pub struct Side {
    /// How messages name it: the directory and the window.
    pub name: String,
    /// Its drops over the window (exact, summed across sessions).
    pub snap: Snapshot,
    /// Seconds the counts cover (time dropscope did not run left out of rates).
    pub seconds: f64,
}

/// The two windows: NEW is the `last` before `end`, BASE the same window `vs` earlier.
pub fn windows(end_ms: u64, last: Duration, vs: Duration) -> (Window, Window) {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let new = Window {
        from_ms: end_ms.saturating_sub(ms(last)),
        to_ms: end_ms,
    };
    let base = Window {
        from_ms: new.from_ms.saturating_sub(ms(vs)),
        to_ms: new.to_ms.saturating_sub(ms(vs)),
    };
    (base, new)
}

/// BASE and NEW of the history in `dir`: the `last` before `end_ms` (default: the history's
/// last snapshot) and the same window `vs` earlier.
pub fn sides(
    dir: &Path,
    last: Duration,
    vs: Duration,
    end_ms: Option<u64>,
) -> anyhow::Result<(Side, Side)> {
    let (cat, (_, hi)) = Catalog::open_to_read(dir)?;
    let shown = terminal(&dir.to_string_lossy()).into_owned();
    if vs < last {
        bail!(
            "--vs {} is shorter than --last {}: the two windows would overlap",
            crate::format::duration(vs),
            crate::format::duration(last)
        );
    }
    let (base, new) = windows(end_ms.unwrap_or(hi), last, vs);
    let side = |w: Window| -> anyhow::Result<Side> {
        let c = range::count(&cat, w)?;
        let name = format!("{shown} {} to {}", local(w.from_ms), local(w.to_ms));
        if c.sessions == 0 || c.covered_ms == 0 {
            bail!("{name}: not recorded (dropscope not running, or history paused)");
        }
        for &(a, b, counted) in &c.gaps {
            eprintln!(
                "dropscope: {name}: {}",
                super::input::gap_note(a, b, counted)
            );
        }
        for n in &c.notes {
            eprintln!("dropscope: note: {n}");
        }
        Ok(Side {
            name,
            snap: c.snap,
            seconds: c.covered_ms as f64 / 1000.0,
        })
    };
    Ok((side(base)?, side(new)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        history::synthetic::{session, write_session},
        model::{DropCount, Snapshot},
    };

    #[test]
    fn the_same_window_an_interval_earlier() {
        let (base, new) = windows(
            10_000_000,
            Duration::from_secs(600),
            Duration::from_secs(3600),
        );
        assert_eq!((new.from_ms, new.to_ms), (9_400_000, 10_000_000));
        assert_eq!((base.from_ms, base.to_ms), (5_800_000, 6_400_000));
    }

    /// A session of `steps` snapshots 10 s apart in which one key drops `before` per step
    /// until step `change`, then `after`.
    fn generated(steps: u64, change: u64, before: u64, after: u64) -> Vec<Snapshot> {
        let mut base = crate::record::synthetic::snapshots(3, 0, 1, 1).remove(0);
        let mut out = Vec::new();
        let mut hot = 0;
        for m in 0..steps {
            hot += if m < change { before } else { after };
            base.elapsed = Duration::from_secs(m * 10 + 1);
            base.unix_ms = 1_790_000_000_000 + m * 10_000;
            base.drops[0] = DropCount {
                key: base.drops[0].key.clone(),
                count: hot,
            };
            base.total = base.keyed_sum();
            out.push(base.clone());
        }
        out
    }

    #[test]
    fn a_known_change_between_then_and_now_is_found() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // Three hours at 60 drops a minute, then 600 a minute for the last 30 minutes.
        let snaps = generated(210 * 6, 180 * 6, 10, 100);
        write_session(tmp.path(), 1, &session("h", 1_790_000_000_000), &snaps, 360).expect("w");
        let (base, new) = sides(
            tmp.path(),
            Duration::from_secs(600),
            Duration::from_secs(3600),
            None,
        )
        .expect("sides");
        assert_eq!(new.snap.total, 600 * 10);
        assert_eq!(base.snap.total, 60 * 10);
        assert!((new.seconds - 600.0).abs() < 1.0, "{}", new.seconds);
        // Before the history began: not recorded, refused rather than zero.
        let e = sides(
            tmp.path(),
            Duration::from_secs(600),
            Duration::from_secs(86_400),
            None,
        )
        .expect_err("a day before is not recorded");
        assert!(format!("{e:#}").contains("not recorded"), "{e:#}");
    }
}
