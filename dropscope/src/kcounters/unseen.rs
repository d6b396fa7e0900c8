//! Pure functions: counter deltas over a window, and the drops the kernel counted that the
//! probe did not see ("unseen").
use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::KernelReading;

use super::{
    map::{self, Scope},
    parse::Counters,
};

/// How much one kernel counter grew in one namespace over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CounterDelta {
    /// The network namespace's inode number.
    pub netns: u64,
    /// `Group:Name` as in /proc/net/snmp (`nstat` prints `GroupName`), or
    /// `Dev:<interface>:RxDrop` / `TxDrop`, or `Softnet:Dropped`.
    pub counter: String,
    /// Growth over the window.
    pub delta: u64,
    /// The drop reasons the kernel frees with where it counts this counter.
    pub reasons: Vec<&'static str>,
}

/// Drops a counter counted that the probe did not see, in one namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unseen {
    /// The network namespace's inode number.
    pub netns: u64,
    /// The counter.
    pub counter: String,
    /// Its delta minus the probe's counts of its reasons there.
    pub count: u64,
}

/// One keyed drop count as the probe saw it.
#[derive(Clone, Copy, Debug)]
pub struct SeenDrop<'a> {
    /// Its network namespace, when the probe knows it (`None` counts for the initial one).
    pub netns: Option<u64>,
    /// Reason name.
    pub reason: &'a str,
    /// Symbolized location (`function+0xoff [module]`).
    pub location: &'a str,
    /// Exact count over the window.
    pub count: u64,
}

/// The growth of every mapped counter between two readings, per namespace; only counters that
/// grew. A namespace missing from `before` starts at its first reading (no growth yet); a
/// counter missing from `before` (a new interface) starts at zero. Sorted by namespace, then
/// by counter.
pub fn deltas(
    before: &BTreeMap<u64, Counters>,
    after: &BTreeMap<u64, Counters>,
) -> Vec<CounterDelta> {
    let mut out = Vec::new();
    for (netns, now) in after {
        let Some(base) = before.get(netns) else {
            continue;
        };
        for (name, &v) in now {
            let delta = v.saturating_sub(base.get(name).copied().unwrap_or(0));
            let Some(m) = map::lookup(name) else {
                continue;
            };
            if delta > 0 {
                out.push(CounterDelta {
                    netns: *netns,
                    counter: name.clone(),
                    delta,
                    reasons: m.reasons.iter().map(|s| map::reason_name(s)).collect(),
                });
            }
        }
    }
    out
}

/// The mapped drop counters of a reading (growth over its window) as deltas, sorted by
/// namespace, then by counter.
pub fn growth_deltas(reading: &KernelReading) -> Vec<CounterDelta> {
    let mut out = Vec::new();
    for (netns, g) in &reading.netns {
        for (name, &delta) in g {
            let Some(m) = map::lookup(name) else {
                continue;
            };
            if delta > 0 {
                out.push(CounterDelta {
                    netns: *netns,
                    counter: name.to_string(),
                    delta,
                    reasons: m.reasons.iter().map(|s| map::reason_name(s)).collect(),
                });
            }
        }
    }
    out
}

/// Where a counter's delta exceeds what the probe counted for its reasons, the difference.
///
/// A drop is compared with the counters of its own namespace; a drop whose namespace is not
/// known (`netns: None`) counts for `initial`. Machine-wide counters (softnet) are compared
/// with the drops of every namespace. Several counters may share a reason, and each is
/// compared with all drops of that reason: the result is a lower bound of what went unseen,
/// never an invention.
pub fn unseen<'a>(
    deltas: &[CounterDelta],
    drops: impl IntoIterator<Item = SeenDrop<'a>> + Clone,
    initial: u64,
) -> Vec<Unseen> {
    let mut out = Vec::new();
    for d in deltas {
        let Some(m) = map::lookup(&d.counter) else {
            continue;
        };
        let seen: u64 = drops
            .clone()
            .into_iter()
            .filter(|s| m.scope == Scope::Global || s.netns.unwrap_or(initial) == d.netns)
            .filter(|s| {
                m.reasons
                    .iter()
                    .any(|r| map::matches(r, s.reason, s.location))
            })
            .map(|s| s.count)
            .sum();
        if d.delta > seen {
            out.push(Unseen {
                netns: d.netns,
                counter: d.counter.clone(),
                count: d.delta - seen,
            });
        }
    }
    out
}
