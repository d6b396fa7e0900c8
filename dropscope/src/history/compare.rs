//! Now versus then: the last D of a history and the same D an interval earlier, as the two
//! runs of `diff --history DIR --last D --vs I`, and a replayed window against the same window
//! earlier (the TUI's `v`).
use std::{path::Path, time::Duration};

use anyhow::bail;

use super::{
    catalog::Catalog,
    range::{self, Window},
    when::local,
};
use crate::{
    model::{
        Snapshot,
        budget::{self, Verdict},
        compare::{self as model, Comparison},
        group::{self, Dim, Filter},
        notes::SINCE_START,
        programs,
    },
    sanitize::terminal,
    vocab::budget::{Clause, Subject},
};

/// One side of the comparison.
#[derive(Debug)]
pub struct Side {
    /// How messages name it: the directory and the window.
    pub name: String,
    /// Its drops over the window (exact, summed across sessions), with the kernel's counters
    /// over it where the segments hold them (the programs' verdicts among them).
    pub snap: Snapshot,
    /// Seconds the counts cover (time dropscope did not run left out of rates).
    pub seconds: f64,
    /// Its gaps and notes, as sentences (not escaped).
    pub notes: Vec<String>,
}

/// The two windows: NEW is the `last` before `end`, BASE the same window `vs` earlier.
pub fn windows(end_ms: u64, last: Duration, vs: Duration) -> (Window, Window) {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let new = Window {
        from_ms: end_ms.saturating_sub(ms(last)),
        to_ms: end_ms,
    };
    let base = earlier(new, vs);
    (base, new)
}

/// BASE and NEW of the history in `dir`: the `last` before `end_ms` (default: the history's
/// last snapshot) and the same window `vs` earlier. Their gaps and notes go to stderr.
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
    let sides = (side(&cat, &shown, base)?, side(&cat, &shown, new)?);
    for n in sides.0.notes.iter().chain(&sides.1.notes) {
        eprintln!("dropscope: {n}");
    }
    Ok(sides)
}

/// The drops of `w` in `cat` (whose directory is shown as `shown`) as one side; a window with
/// nothing recorded is an error, never zero drops.
fn side(cat: &Catalog, shown: &str, w: Window) -> anyhow::Result<Side> {
    let c = range::count(cat, w)?;
    let name = format!("{shown} {} to {}", local(w.from_ms), local(w.to_ms));
    if c.sessions == 0 || c.covered_ms == 0 {
        bail!("{name}: not recorded (dropscope not running, or history paused)");
    }
    let gaps = (c.gaps.iter())
        .map(|&(a, b, counted)| format!("{name}: {}", super::input::gap_note(a, b, counted)));
    let notes = gaps.chain(c.notes.iter().map(|n| format!("note: {n}")));
    let mut snap = c.snap;
    // Counters that span more than the window (read first after its start) are not its own:
    // neither its programs' verdicts nor its packets.
    snap.kernel = (c.kernel)
        .filter(|(r, _)| !r.errors.iter().any(|e| e.starts_with(SINCE_START)))
        .map(|(r, _)| std::sync::Arc::new(r));
    Ok(Side {
        notes: notes.collect(),
        name,
        snap,
        seconds: c.covered_ms as f64 / 1000.0,
    })
}

/// `w` moved `vs` earlier.
pub fn earlier(w: Window, vs: Duration) -> Window {
    let ms = u64::try_from(vs.as_millis()).unwrap_or(u64::MAX);
    Window {
        from_ms: w.from_ms.saturating_sub(ms),
        to_ms: w.to_ms.saturating_sub(ms),
    }
}

/// A window of a history compared with the same window an interval earlier, key by key (the
/// TUI's `v`).
#[derive(Clone, Debug, PartialEq)]
pub struct Compared {
    /// The window compared (NEW).
    pub now: Window,
    /// The same window `vs` earlier (BASE).
    pub then: Window,
    /// How much earlier.
    pub vs: Duration,
    /// Key by key, with the significance test of `diff`.
    pub comparison: Comparison,
    /// The significance level the changes were tested at.
    pub alpha: f64,
    /// Seconds each window's counts cover (then, now).
    pub seconds: (f64, f64),
    /// The windows' gaps and notes.
    pub notes: Vec<String>,
    /// The budget clauses given, judged on the window shown (NOW), with the clauses judged.
    pub verdicts: Vec<(Clause, Verdict)>,
}

impl Compared {
    /// The broken budget clauses that count the row of `key` (`None`: the total): a clause on
    /// the total or the ratio counts the total, one on a reason the rows of that reason, and
    /// `new-reasons` the rows it names.
    pub fn over_budget(&self, key: Option<&crate::model::compare::DiffKey>) -> Vec<&Verdict> {
        (self.verdicts.iter())
            .filter(|(c, v)| {
                !v.ok
                    && match (&c.subject, key) {
                        (Subject::Total | Subject::Ratio, None) => true,
                        (Subject::Reason(r), Some(k)) => *k.reason == **r,
                        (Subject::NewReasons, Some(k)) => v.keys.contains(k),
                        _ => false,
                    }
            })
            .map(|(_, v)| v)
            .collect()
    }
}

/// Compares the window `now` of the history in `dir` with the same window `vs` earlier, the
/// drops filtered and grouped by `filter` and `by` (as the replay shows them), each change
/// tested at `alpha`, and judges the window against the `budget` clauses (as `diff --history
/// --budget` judges NEW; a clause the windows cannot answer is said in a note).
pub fn compare_window(
    dir: &Path,
    now: Window,
    vs: Duration,
    (filter, by): (&Filter, &[Dim]),
    alpha: f64,
    budget: &[Clause],
) -> anyhow::Result<Compared> {
    if vs.is_zero() {
        bail!("compare with a window at least a second earlier");
    }
    let (cat, _) = Catalog::open_to_read(dir)?;
    let shown = terminal(&dir.to_string_lossy()).into_owned();
    let then = earlier(now, vs);
    let (base, new) = (side(&cat, &shown, then)?, side(&cat, &shown, now)?);
    let one = |s: &Side| {
        let snap = group::apply(&s.snap, filter, by);
        let mut side = model::Side::of(&snap, s.seconds, model::packets(&s.snap, filter));
        side.sent = model::sent(&s.snap, filter);
        // The programs' verdicts, where counted and no filter on drops hides them (as `diff`).
        if filter.is_set() || programs::counted(&s.snap).is_err() {
            side
        } else {
            side.with_programs(&programs::of_snapshot(&s.snap), by)
        }
    };
    let sides = (one(&base), one(&new));
    let comparison = model::compare(&sides.0, &sides.1, alpha);
    let mut notes: Vec<String> = base.notes.into_iter().chain(new.notes).collect();
    let verdicts = match budget::judge(budget, &sides.1, Some(&sides.0), "the window shown") {
        Ok(v) => budget.iter().cloned().zip(v).collect(),
        Err(e) => {
            notes.push(format!("budget not judged: {e}"));
            Vec::new()
        }
    };
    Ok(Compared {
        now,
        then,
        vs,
        comparison,
        alpha,
        seconds: (base.seconds, new.seconds),
        notes,
        verdicts,
    })
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
