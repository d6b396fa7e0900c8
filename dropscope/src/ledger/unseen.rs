//! Pure functions: counter deltas over a window, the drops the kernel counted that the probe
//! did not see ("unseen"), and the one total of such drops that counts each drop once
//! ([`summed`], [`total`]).
use std::collections::{BTreeMap, BTreeSet, HashMap, btree_map::Entry};

use serde::Serialize;

use super::{
    layers::{self, Role},
    map::{self, Scope},
};
use crate::vocab::counter::Counter;
use crate::{model::KernelReading, vocab::counter::Counters};

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
    /// Whether its namespace is the one the reading read under its inode (not one that
    /// ended, its inode given to another): only then is it matched with that namespace's
    /// counters; machine-wide counters match it either way.
    pub read: bool,
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
/// never an invention. The drops are summed once by namespace, reason and function, so a
/// window costs about drops + counters.
pub fn unseen<'a>(
    deltas: &[CounterDelta],
    drops: impl IntoIterator<Item = SeenDrop<'a>> + Clone,
    initial: u64,
) -> Vec<Unseen> {
    // Drops by (namespace, reason, function), a namespace of `None` for every namespace, a
    // function of `None` for every function.
    let mut sums: HashMap<(Option<u64>, &str, Option<&str>), u64> = HashMap::new();
    for s in drops {
        let ns = s.netns.unwrap_or(initial);
        let function = s.location.split(['+', ' ']).next().unwrap_or_default();
        let keys = [
            (Some(ns), s.reason, Some(function)),
            (Some(ns), s.reason, None),
            (None, s.reason, Some(function)),
            (None, s.reason, None),
        ];
        // A drop of a namespace that ended counts for machine-wide counters only.
        for key in keys.into_iter().skip(if s.read { 0 } else { 2 }) {
            let sum = sums.entry(key).or_default();
            *sum = sum.saturating_add(s.count);
        }
    }
    let mut out = Vec::new();
    for d in deltas {
        let Some(m) = map::lookup(&d.counter) else {
            continue;
        };
        let ns = (m.scope != Scope::Global).then_some(d.netns);
        // Each drop once: a reason's spec without a function covers those with one.
        let specs: BTreeSet<(&str, Option<&str>)> = (m.reasons.iter())
            .map(|s| match s.split_once('@') {
                Some((r, f)) => (r, Some(f)),
                None => (*s, None),
            })
            .collect();
        // Drops counted without their location (`*`) are among those of any function.
        let sum = |key| sums.get(&key).copied().unwrap_or(0);
        let seen = (specs.iter())
            .filter(|(r, f)| f.is_none() || !specs.contains(&(r, None)))
            .map(|&(r, f)| match f {
                Some(_) => sum((ns, r, f)).saturating_add(sum((ns, r, Some("*")))),
                None => sum((ns, r, None)),
            })
            .fold(0u64, u64::saturating_add);
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

/// What one counter alone counted (drops no `kfree_skb` drop matched), as totals take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alone<'a> {
    /// Its namespace's inode number.
    pub netns: u64,
    /// The counter's name in the reading.
    pub counter: &'a str,
    /// What it alone counted.
    pub count: u64,
}

impl<'a> From<&'a Unseen> for Alone<'a> {
    fn from(u: &'a Unseen) -> Self {
        Alone {
            netns: u.netns,
            counter: &u.counter,
            count: u.count,
        }
    }
}

/// Which of `rows` a total of drops only counters saw sums, so that each drop counts once:
/// the rows of counters that count drops of their own ([`Role::Primary`], see
/// [`layers::classify`]). Left out: a counter whose drops another one counts too
/// (`ListenOverflows` within `ListenDrops`, one qdisc inside a hierarchy, one CPU's backlog
/// drops, the softnet backlog drops that are also their device's `rx_dropped`), counters of
/// no drops, names of no layer, and a `/proc/net/dev` column where a stats64 counter of its
/// device is among `rows`. Of counters of one device and group (the same events counted in
/// different ways), only the first of the largest.
pub fn summed(rows: &[Alone<'_>]) -> Vec<bool> {
    let linked: BTreeSet<(u64, &str)> = (rows.iter())
        .filter_map(|r| Some((r.netns, Counter::link_device(r.counter)?)))
        .collect();
    let mut out = vec![false; rows.len()];
    // The row standing for each (namespace, device, group).
    let mut groups: BTreeMap<(u64, Option<&str>, &str), usize> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        let Some(class) = layers::classify(r.counter) else {
            continue;
        };
        let role = match class.role {
            Role::Fallback if linked.contains(&(r.netns, class.device.unwrap_or_default())) => {
                Role::Detail
            }
            Role::Fallback => Role::Primary,
            role => role,
        };
        if role != Role::Primary {
            continue;
        }
        match class.group {
            None => out[i] = true,
            Some(g) => match groups.entry((r.netns, class.device, g)) {
                Entry::Vacant(e) => {
                    e.insert(i);
                }
                Entry::Occupied(mut e) if rows[*e.get()].count < r.count => {
                    e.insert(i);
                }
                Entry::Occupied(_) => {}
            },
        }
    }
    for i in groups.into_values() {
        out[i] = true;
    }
    out
}

/// The drops only counters saw, each once: the rows [`summed`] keeps, added up. Every total
/// of unseen drops (the live view's badge and counters panel, the report, the ledger's
/// headline) is this one.
pub fn total(rows: &[Alone<'_>]) -> u64 {
    (rows.iter().zip(summed(rows)))
        .filter(|(_, s)| *s)
        .fold(0u64, |t, (r, _)| t.saturating_add(r.count))
}
/// The probe's keyed counts as [`SeenDrop`]s, with the namespace of their key when the probe
/// knows it (a drop without one counts for the initial namespace), and whether `reading`
/// read that namespace (see [`KernelReading::reads`]).
pub fn seen_drops<'a>(
    snap: &'a crate::model::Snapshot,
    reading: &'a KernelReading,
) -> impl Iterator<Item = SeenDrop<'a>> + Clone {
    snap.drops.iter().map(|d| SeenDrop {
        read: (d.key.attr.netns).is_none_or(|ns| reading.reads(ns, d.key.attr.netns_cookie)),
        netns: d.key.attr.netns,
        reason: &d.key.reason.name,
        location: &d.key.location,
        count: d.count,
    })
}
