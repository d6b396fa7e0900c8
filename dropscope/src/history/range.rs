//! Counting a wall-clock window of a history: each session's drops over the window from its
//! cumulative snapshots (exact), summed across sessions, with the parts of the window no
//! snapshot covers reported as gaps, never as zero drops.
use std::{collections::HashMap, sync::Arc, time::Duration};

use super::catalog::{Catalog, Piece, Span, wall_ms};
use crate::model::{DropKey, KeySamples, SessionInfo, Snapshot, StackCount, window};

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
        parts.push(window::between(&earlier, &later));
        out.info = info.clone();
        out.sessions += 1;
    }
    out.snap = sum(parts);
    let (_, gaps) = coverage(&cat.spans(), w);
    out.gaps = gaps
        .into_iter()
        .map(|(a, b)| (a, b, intervals.iter().any(|&(f, t)| f <= a && b <= t)))
        .collect();
    Ok(out)
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
