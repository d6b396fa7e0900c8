//! Counting a wall-clock window of a history: each session's drops over the window from its
//! cumulative snapshots (exact), summed across sessions, with the parts of the window no
//! snapshot covers reported as gaps, never as zero drops.
use std::{collections::HashMap, sync::Arc, time::Duration};

use super::catalog::{Catalog, Piece, SEAM, Span, wall_ms};
use crate::model::{DropKey, KernelReading, KeySamples, SessionInfo, Snapshot, StackCount, window};

/// A stack's identity: its key and frames.
type StackId = (DropKey, Arc<[Arc<str>]>);

/// Sampled packets kept per key when sessions are summed (as the probe keeps).
const SAMPLES_PER_KEY: usize = 8;

/// A wall-clock window, ms since the epoch, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start.
    pub from_ms: u64,
    /// End.
    pub to_ms: u64,
}

/// The drops of a window of history.
#[derive(Debug, Default)]
pub struct Counted {
    /// The drops over the window, summed across sessions (exact counts).
    pub snap: Snapshot,
    /// The session of the last snapshot counted.
    pub info: SessionInfo,
    /// Time the counts cover, ms: the sum over sessions of the time between the two snapshots
    /// (or session start) they are counted between. A pause of the history within a session
    /// is in it (its drops are in the counts); time dropscope did not run is not.
    pub covered_ms: u64,
    /// Sessions counted.
    pub sessions: usize,
    /// Parts of the window no snapshot covers (ms since the epoch), and whether they lie within
    /// a session counted (a pause of the history: its drops are in the counts, not placed in
    /// time) or not (dropscope not running: not counted).
    pub gaps: Vec<(u64, u64, bool)>,
    /// What else the reader should know (a session whose start is not in the history).
    pub notes: Vec<String>,
    /// The wall-clock times of the snapshots the counts are between (each end's last snapshot
    /// at or before it, or a session's start): in a coarse segment they fall on the minute.
    pub counted: Option<(u64, u64)>,
    /// The kernel's counters over the window (their growth between the readings at its ends,
    /// summed across sessions) and the probe's drops over a span that holds theirs, to match
    /// them with (as a recording's window pairs them), where the segments hold readings.
    pub kernel: Option<(KernelReading, Snapshot)>,
}

/// The runs of pieces of one session, in order of writing.
fn sessions(cat: &Catalog) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, p) in cat.pieces.iter().enumerate() {
        match runs.last_mut() {
            Some(r) if cat.pieces[r.end - 1].info == p.info => r.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// The last snapshot of `pieces` at or before wall time `ms`, if any is.
fn at_or_before(pieces: &[Piece], ms: u64) -> anyhow::Result<Option<Snapshot>> {
    let Some(p) = pieces.iter().rev().find(|p| p.from_ms() <= ms) else {
        return Ok(None);
    };
    // Wall times are whole milliseconds: the snapshot of that millisecond is at or before it.
    let t = Duration::from_millis(ms.saturating_sub(p.info.started_unix_ms))
        + Duration::from_nanos(999_999);
    Ok(Some(p.open()?.snapshot_at(t)?))
}

/// The first snapshot of `pieces`.
fn first(pieces: &[Piece]) -> anyhow::Result<Snapshot> {
    let p = pieces
        .first()
        .ok_or_else(|| anyhow::anyhow!("an empty session"))?;
    Ok(p.open()?.snapshot_of(0)?)
}

/// Counts the drops of `w` in `cat`.
pub fn count(cat: &Catalog, w: Window) -> anyhow::Result<Counted> {
    let mut out = Counted::default();
    let mut parts = Vec::new();
    let mut kernels = Vec::new();
    let mut intervals = Vec::new();
    for run in sessions(cat) {
        let pieces = &cat.pieces[run];
        let (start, end) = (pieces[0].from_ms(), pieces[pieces.len() - 1].to_ms());
        if end < w.from_ms || start > w.to_ms {
            continue;
        }
        let info = &pieces[0].info;
        let Some(later) = at_or_before(pieces, w.to_ms)? else {
            continue;
        };
        let earlier = if w.from_ms <= info.started_unix_ms {
            // Counts are cumulative from the session's start: zero there, exactly.
            Snapshot::default()
        } else if let Some(s) = at_or_before(pieces, w.from_ms)? {
            s
        } else {
            let s = first(pieces)?;
            out.notes.push(format!(
                "the session started at {} is in the history from {} only (older segments \
                 removed, or history paused): its drops before then are not counted",
                super::when::local(info.started_unix_ms),
                super::when::local(wall_ms(info, s.elapsed))
            ));
            s
        };
        let from = if earlier.elapsed.is_zero() && earlier.total == 0 {
            info.started_unix_ms
        } else {
            wall_ms(info, earlier.elapsed)
        };
        let to = wall_ms(info, later.elapsed);
        out.covered_ms = out.covered_ms.saturating_add(to.saturating_sub(from));
        intervals.push((from, to));
        out.counted = Some(match out.counted {
            Some((a, b)) => (a.min(from), b.max(to)),
            None => (from, to),
        });
        let at_start = earlier.elapsed.is_zero() && earlier.total == 0;
        if let Some(k) = kernel_window(pieces, w.from_ms, &earlier, &later, at_start)? {
            kernels.push(k);
        }
        parts.push(window::between(&earlier, &later));
        out.info = info.clone();
        out.sessions += 1;
    }
    out.snap = sum(parts);
    out.kernel = sum_kernel(kernels);
    let (_, gaps) = coverage(&cat.spans(), w);
    out.gaps = gaps
        .into_iter()
        .map(|(a, b)| (a, b, intervals.iter().any(|&(f, t)| f <= a && b <= t)))
        .collect();
    Ok(out)
}

/// A session's kernel counters over a window from `earlier` (at or before `from_ms`; at the
/// session's start where `at_start`) to `later`, with the probe's drops to match them with,
/// as `report --input FILE` pairs them: the growth between the two readings, and the drops from
/// the last snapshot before the earlier reading came (so no drop the probe saw reads as
/// unseen). Without a reading at the window's start, the counters since the session's start,
/// said in a note.
fn kernel_window(
    pieces: &[Piece],
    from_ms: u64,
    earlier: &Snapshot,
    later: &Snapshot,
    at_start: bool,
) -> anyhow::Result<Option<(KernelReading, Snapshot)>> {
    let Some(b) = &later.kernel else {
        return Ok(None);
    };
    if at_start {
        return Ok(Some(((**b).clone(), later.clone())));
    }
    Ok(match &earlier.kernel {
        Some(a) => before_reading(pieces, from_ms, a.unix_ms)?
            .map(|base| (b.since(a), window::between(&base, later))),
        None => {
            let mut r = (**b).clone();
            r.errors.push(format!(
                "{}{}: the history read them first after it (the window shows no program rows)",
                crate::model::notes::SINCE_START,
                super::when::local(from_ms)
            ));
            Some((r, later.clone()))
        }
    })
}

/// The last snapshot of the session `pieces` taken before the reading of the kernel's
/// counters made at `reading_ms` that the snapshot at `ms` carries: its counts are all older
/// than the reading. Empty if the reading came with the session's first snapshot; `None` if it
/// is further back than the readings are carried (64 snapshots) or older than the history.
fn before_reading(pieces: &[Piece], ms: u64, reading_ms: u64) -> anyhow::Result<Option<Snapshot>> {
    let Some(mut pi) = pieces.iter().rposition(|p| p.from_ms() <= ms) else {
        return Ok(None);
    };
    let mut rec = pieces[pi].open()?;
    let t = Duration::from_millis(ms.saturating_sub(pieces[pi].info.started_unix_ms))
        + Duration::from_nanos(999_999);
    let Some(mut i) = rec.frame_at(t) else {
        return Ok(None);
    };
    for _ in 0..64 {
        while i == 0 {
            if pi == 0 {
                return Ok((pieces[0].first <= SEAM).then(Snapshot::default));
            }
            pi -= 1;
            rec = pieces[pi].open()?;
            i = rec.len();
        }
        let s = rec.snapshot_of(i - 1)?;
        if s.kernel.as_ref().is_none_or(|r| r.unix_ms != reading_ms) {
            return Ok(Some(s));
        }
        i -= 1;
    }
    Ok(None)
}

/// The kernel's counters of several sessions' windows together: growth added per namespace
/// and counter, the devices, listeners and notes of each kept; with the probe's drops they are
/// matched with, summed as [`sum`] does.
fn sum_kernel(parts: Vec<(KernelReading, Snapshot)>) -> Option<(KernelReading, Snapshot)> {
    let mut parts = parts.into_iter();
    let (mut out, seen) = parts.next()?;
    let mut seen = vec![seen];
    for (r, s) in parts {
        for (ns, g) in r.netns {
            let into = out.netns.entry(ns).or_default();
            for (name, v) in g {
                let c = into.entry(name).or_default();
                *c = c.saturating_add(v);
            }
        }
        for (ns, d) in r.devices {
            out.devices.entry(ns).or_default().extend(d);
        }
        out.listeners.extend(r.listeners);
        out.cookies.extend(r.cookies);
        out.names.extend(r.names);
        out.rules.extend(r.rules);
        out.attached.extend(r.attached);
        for e in r.errors {
            if !out.errors.contains(&e) {
                out.errors.push(e);
            }
        }
        out.unix_ms = out.unix_ms.max(r.unix_ms);
        out.initial_netns = r.initial_netns;
        out.attributed &= r.attributed;
        seen.push(s);
    }
    Some((out, sum(seen)))
}

/// Time of `w` the spans cover, and the parts they do not.
pub fn coverage(spans: &[Span], w: Window) -> (u64, Vec<(u64, u64)>) {
    let mut covered: Vec<(u64, u64)> = spans
        .iter()
        .map(|s| (s.from_ms.max(w.from_ms), s.to_ms.min(w.to_ms)))
        .filter(|(a, b)| a <= b)
        .collect();
    covered.sort_unstable();
    let mut gaps = Vec::new();
    let mut total = 0;
    let mut at = w.from_ms;
    for (a, b) in covered {
        if a > at {
            gaps.push((at, a));
        }
        if b > at {
            total += b - a.max(at);
            at = b;
        }
    }
    if at < w.to_ms {
        gaps.push((at, w.to_ms));
    }
    (total, gaps)
}

/// The drops of several windows together: counts added key by key (exact), stacks by key and
/// frames, sampled packets up to 8 per key; health and times of the last.
pub fn sum(parts: Vec<Snapshot>) -> Snapshot {
    let mut parts = parts.into_iter();
    let Some(mut out) = parts.next() else {
        return Snapshot::default();
    };
    for s in parts {
        let mut drops: HashMap<DropKey, u64> =
            out.drops.drain(..).map(|d| (d.key, d.count)).collect();
        for d in s.drops {
            let c = drops.entry(d.key).or_default();
            *c = c.saturating_add(d.count);
        }
        out.drops = drops
            .into_iter()
            .map(|(key, count)| crate::model::DropCount { key, count })
            .collect();
        let mut stacks: HashMap<StackId, (u64, u64)> = out
            .stacks
            .drain(..)
            .map(|s| ((s.key, s.frames), (s.weight, s.samples)))
            .collect();
        for st in s.stacks {
            let e = stacks.entry((st.key, st.frames)).or_default();
            e.0 = e.0.saturating_add(st.weight);
            e.1 = e.1.saturating_add(st.samples);
        }
        out.stacks = stacks
            .into_iter()
            .map(|((key, frames), (weight, samples))| StackCount {
                key,
                frames,
                weight,
                samples,
            })
            .collect();
        let mut samples: HashMap<DropKey, KeySamples> =
            out.samples.drain(..).map(|k| (k.key.clone(), k)).collect();
        for k in s.samples {
            let e = samples.entry(k.key.clone()).or_insert_with(|| KeySamples {
                key: k.key.clone(),
                packets: Vec::new(),
            });
            let room = SAMPLES_PER_KEY.saturating_sub(e.packets.len());
            e.packets.extend(k.packets.into_iter().take(room));
        }
        out.samples = samples.into_values().collect();
        out.total = out.total.saturating_add(s.total);
        out.overflow = out.overflow.saturating_add(s.overflow);
        out.health = s.health;
        out.elapsed = s.elapsed;
        out.unix_ms = s.unix_ms;
    }
    out
}
