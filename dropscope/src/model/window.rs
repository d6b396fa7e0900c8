//! Windows of time: the counts between two cumulative snapshots.
use std::{collections::HashMap, sync::Arc, time::Duration};

use super::{DropCount, KernelReading, SessionInfo, Snapshot, StackCount};

/// The kernel's counters over a recorded window, and the probe's counts to match them with.
pub type RecordedKernel = (Arc<KernelReading>, Snapshot);

/// A recorded window: the session, its counts, its span, and the kernel's counters over it.
pub type RecordedWindow = (
    SessionInfo,
    Snapshot,
    (Duration, Duration),
    Option<RecordedKernel>,
);

/// The drops that happened after `earlier` up to `later`, as a snapshot of its own.
///
/// Counts are differences of cumulative counts (a key absent from `earlier` counts from zero);
/// health and times are those of `later`.
pub fn between(earlier: &Snapshot, later: &Snapshot) -> Snapshot {
    let before: HashMap<_, _> = earlier.drops.iter().map(|d| (&d.key, d.count)).collect();
    let drops = later
        .drops
        .iter()
        .map(|d| DropCount {
            key: d.key.clone(),
            count: d
                .count
                .saturating_sub(before.get(&d.key).copied().unwrap_or(0)),
        })
        .filter(|d| d.count > 0)
        .collect();
    let stacks_before: HashMap<_, _> = earlier
        .stacks
        .iter()
        .map(|s| ((&s.key, &s.frames), (s.weight, s.samples)))
        .collect();
    let stacks = later
        .stacks
        .iter()
        .map(|s| {
            let (w, n) = stacks_before
                .get(&(&s.key, &s.frames))
                .copied()
                .unwrap_or((0, 0));
            StackCount {
                key: s.key.clone(),
                frames: s.frames.clone(),
                weight: s.weight.saturating_sub(w),
                samples: s.samples.saturating_sub(n),
            }
        })
        .filter(|s| s.samples > 0)
        .collect();
    Snapshot {
        elapsed: later.elapsed,
        unix_ms: later.unix_ms,
        total: later.total.saturating_sub(earlier.total),
        overflow: later.overflow.saturating_sub(earlier.overflow),
        drops,
        stacks,
        // The packets sampled within the window.
        samples: later
            .samples
            .iter()
            .map(|k| super::KeySamples {
                key: k.key.clone(),
                packets: k
                    .packets
                    .iter()
                    .filter(|p| p.unix_ms > earlier.unix_ms)
                    .cloned()
                    .collect(),
            })
            .filter(|k| !k.packets.is_empty())
            .collect(),
        health: later.health.clone(),
        // The counters' window needs a baseline read after `earlier` (see
        // `KernelReading::since`): whoever has the stream pairs them.
        kernel: None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::DropKey;

    fn key(code: u32, loc: &str) -> DropKey {
        crate::fixtures::key(code, &format!("R{code}"), loc)
    }

    fn snap(secs: u64, counts: &[(u32, &str, u64)], overflow: u64) -> Snapshot {
        let drops = (counts.iter())
            .map(|&(c, l, n)| DropCount {
                key: key(c, l),
                count: n,
            })
            .collect();
        crate::fixtures::snap(secs, drops, overflow)
    }

    #[test]
    fn window_subtracts_cumulative_counts_and_keeps_the_invariant() {
        let a = snap(1, &[(2, "f+0x1", 10), (3, "g+0x2", 5)], 1);
        let b = snap(2, &[(2, "f+0x1", 15), (3, "g+0x2", 5), (4, "h+0x3", 7)], 3);
        let w = between(&a, &b);
        assert_eq!(w.total, 14);
        assert_eq!(w.overflow, 2);
        let mut got: Vec<_> = w
            .drops
            .iter()
            .map(|d| (d.key.reason.code, d.count))
            .collect();
        got.sort();
        assert_eq!(got, vec![(2, 5), (4, 7)]);
        assert!(w.invariant_holds());
    }

    #[test]
    fn window_subtracts_stack_weights() {
        let frames: Arc<[Arc<str>]> = vec![Arc::from("a"), Arc::from("b")].into();
        let mut a = snap(1, &[(2, "f", 1)], 0);
        a.stacks.push(StackCount {
            key: key(2, "f"),
            frames: frames.clone(),
            weight: 10,
            samples: 2,
        });
        let mut b = a.clone();
        b.stacks[0].weight = 30;
        b.stacks[0].samples = 4;
        let w = between(&a, &b);
        assert_eq!(w.stacks.len(), 1);
        assert_eq!((w.stacks[0].weight, w.stacks[0].samples), (20, 2));
    }
}
