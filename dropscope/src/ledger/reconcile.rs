//! The drop ledger: every layer that drops packets (NIC and driver, qdisc, per-CPU backlog,
//! `kfree_skb`, protocol counters), per namespace and device, reconciled over one window.
//!
//! For each layer counter that grew: which `kfree_skb` drops it also counted (those of its
//! reasons, on its device and namespace: see [`layers`]), and what only the counter saw. A
//! counter's matched drops are at most its growth and at most the probe's drops of its
//! reasons; several counters may match the same drops (a backlog drop is the device's
//! `rx_dropped` and the softnet `dropped`), so what a counter alone saw is a lower bound, and a
//! drop the probe counted is never counted again. The headline counts each drop once:
//! `N = X + Y + Z`, where X are the probe's drops with a reason (and those without one that a
//! layer counter also counted: the counter says where), Y what only layer counters counted
//! (each drop once: see [`unseen::total`]), and Z the rest (the probe's drops without a
//! reason that no counter explains, and drops it counted without a key).
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::{
    layers::{self, Class, Layer, Role},
    unseen::{self, Alone},
};
use crate::model::{KernelReading, Snapshot};
use crate::vocab::counter::Counter;

/// One layer counter over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    /// Its layer.
    pub layer: Layer,
    /// Its namespace's inode number.
    pub netns: u64,
    /// Its device, if it has one.
    pub device: Option<String>,
    /// The counter's name in the reading.
    pub counter: String,
    /// What its growth stands for here (a fallback is resolved to primary or detail).
    pub role: Role,
    /// Its growth.
    pub delta: u64,
    /// `kfree_skb` drops of its reasons that it also counted.
    pub matched: u64,
    /// What the counter alone counted: `delta - matched` (0 for context counters).
    pub counter_only: u64,
    /// Whether its growth and its matched drops should agree exactly (see [`Class::exact`]).
    pub exact: bool,
    /// The `kfree_skb` reasons it also counts.
    pub reasons: Vec<&'static str>,
}

/// One layer's drops in one namespace and device (or the machine, for softnet).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayerTotal {
    /// The layer.
    pub layer: Layer,
    /// The namespace (softnet: the initial one; it is machine-wide).
    pub netns: u64,
    /// The device, if the layer has one.
    pub device: Option<String>,
    /// Drops the layer counted.
    pub counted: u64,
    /// Of those, drops `kfree_skb` saw too (for `kfree_skb` itself: drops a layer counter also
    /// counted).
    pub matched: u64,
    /// Drops only the layer's counters saw.
    pub counter_only: u64,
}

/// The headline: every drop of the window once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Headline {
    /// Every drop: `with_reason + counter_only + unexplained`.
    pub total: u64,
    /// Drops `kfree_skb` counted with a reason and location (or without a reason, where a
    /// layer counter also counted them).
    pub with_reason: u64,
    /// Drops only a layer counter counted.
    pub counter_only: u64,
    /// The rest: drops without a reason that no counter explains, and drops counted without
    /// a key (overflow).
    pub unexplained: u64,
}

impl Headline {
    /// `with_reason` and `counter_only` as percentages of `total`.
    pub fn percents(&self) -> (f64, f64) {
        let pct = |n: u64| {
            if self.total == 0 {
                0.0
            } else {
                100.0 * n as f64 / self.total as f64
            }
        };
        (pct(self.with_reason), pct(self.counter_only))
    }

    /// `N drops: X% with reason and location, Y% counted by a layer counter only, Z
    /// unexplained`.
    pub fn sentence(&self) -> String {
        let (x, y) = self.percents();
        format!(
            "{} drops: {x:.1}% with reason and location, {y:.1}% counted by a layer counter \
             only, {} unexplained",
            crate::format::count(self.total),
            crate::format::count(self.unexplained)
        )
    }
}

/// Drops of one key of the probe's, freed without a reason, that no layer counter explains:
/// part of the headline's unexplained drops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unexplained {
    /// The key's namespace (the initial one where the counts have none).
    pub netns: u64,
    /// The key's device, if it has one.
    pub device: Option<String>,
    /// Where the kernel freed them.
    pub location: String,
    /// How many.
    pub count: u64,
}

/// The ledger of one window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Ledger {
    /// Every drop once.
    pub headline: Headline,
    /// Per layer and (namespace, device): counted, matched, counter only.
    pub layers: Vec<LayerTotal>,
    /// Every layer counter that grew.
    pub counters: Vec<Row>,
    /// How the matching was limited (counts not keyed by device or namespace).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The keys of the headline's unexplained drops, most first (the rest of them were
    /// counted without a key).
    #[serde(skip)]
    pub unexplained: Vec<Unexplained>,
}

/// One keyed drop count of the probe, as the ledger matches it.
struct Seen<'a> {
    netns: u64,
    device: Option<&'a str>,
    reason: &'a str,
    location: &'a str,
    count: u64,
    /// Drops of this key that some layer counter also counted.
    also: u64,
    /// Whether its namespace is the one the reading read under its inode (see
    /// [`KernelReading::reads`]): a drop of a namespace that ended is matched with no
    /// counter of the namespace given its inode, only with machine-wide ones.
    read: bool,
}

/// The reason of a drop the kernel freed without one.
const NOT_SPECIFIED: &str = "NOT_SPECIFIED";

/// The ledger of a window: `reading` (counter growth) and `snap` (the probe's counts over the
/// same window or one that holds it, grouped by reason; unfiltered).
pub fn ledger(reading: &KernelReading, snap: &Snapshot) -> Ledger {
    let initial = reading.initial_netns;
    let by_netns = snap.drops.iter().any(|d| d.key.attr.netns.is_some());
    let by_device = snap.drops.iter().any(|d| d.key.attr.device.is_some());
    let mut notes = Vec::new();
    if !snap.drops.is_empty() && !by_netns {
        notes.push("counts not keyed by namespace: matched across namespaces".to_string());
    }
    if !snap.drops.is_empty() && !by_device {
        notes.push("counts not keyed by device: matched per namespace".to_string());
    }
    notes.extend(
        (reading.errors.iter())
            .filter(|e| crate::model::notes::is_ledger_note(e))
            .cloned(),
    );
    let mut seen: Vec<Seen<'_>> = (snap.drops.iter())
        .filter(|d| d.count > 0)
        .map(|d| Seen {
            netns: d.key.attr.netns.unwrap_or(initial),
            read: (d.key.attr.netns).is_none_or(|ns| reading.reads(ns, d.key.attr.netns_cookie)),
            device: d.key.attr.device.as_deref(),
            reason: &d.key.reason.name,
            location: &d.key.location,
            count: d.count,
            also: 0,
        })
        .collect();

    let mut alloc = Allocator::new(&seen, by_netns, by_device);
    let mut rows = Vec::new();
    for (&ns, growth) in &reading.netns {
        // Devices with stats64 counters that grew (rows here): their /proc/net/dev columns
        // are details, as [`unseen::summed`] has them.
        let linked: std::collections::BTreeSet<&str> = (growth.iter())
            .filter(|(k, v)| **v > 0 && layers::classify(k).is_some())
            .filter_map(|(k, _)| Counter::link_device(k))
            .collect();
        for (name, &delta) in growth {
            let Some(class) = layers::classify(name) else {
                continue;
            };
            if delta == 0 {
                continue;
            }
            let role = match class.role {
                Role::Fallback if linked.contains(class.device.unwrap_or_default()) => Role::Detail,
                Role::Fallback => Role::Primary,
                r => r,
            };
            let matched = if role == Role::Context {
                0
            } else {
                alloc.allocate(&class, ns, delta, &seen)
            };
            rows.push((
                class.group,
                Row {
                    layer: class.layer,
                    netns: ns,
                    device: class.device.map(str::to_string),
                    counter: name.to_string(),
                    role,
                    delta,
                    matched,
                    counter_only: if role == Role::Context {
                        0
                    } else {
                        delta - matched
                    },
                    exact: class.exact,
                    reasons: class
                        .reasons
                        .iter()
                        .map(|s| s.trim_start_matches('~'))
                        .collect(),
                },
            ));
        }
    }

    alloc.settle(&mut seen);
    // Layer totals: a group counts as its largest member.
    let mut totals: BTreeMap<(Layer, u64, Option<String>), LayerTotal> = BTreeMap::new();
    let mut groups: BTreeMap<(u64, Option<String>, &'static str), &Row> = BTreeMap::new();
    for (group, r) in &rows {
        if !matches!(r.role, Role::Primary | Role::Layer) {
            continue;
        }
        if let Some(g) = group {
            let slot = groups.entry((r.netns, r.device.clone(), g)).or_insert(r);
            if r.delta > slot.delta {
                *slot = r;
            }
            continue;
        }
        add(&mut totals, r);
    }
    for r in groups.into_values() {
        add(&mut totals, r);
    }
    // The headline's counter-only drops: the one total of unseen drops.
    let alone: Vec<Alone<'_>> = (rows.iter())
        .map(|(_, r)| Alone {
            netns: r.netns,
            counter: &r.counter,
            count: r.counter_only,
        })
        .collect();
    let counter_only = unseen::total(&alone);
    let mut kfree: BTreeMap<(u64, Option<&str>), (u64, u64)> = BTreeMap::new();
    for s in &seen {
        let e = kfree.entry((s.netns, s.device)).or_default();
        e.0 += s.count;
        e.1 += s.also;
    }
    for ((ns, dev), (drops, also)) in kfree {
        totals.insert(
            (Layer::KfreeSkb, ns, dev.map(str::to_string)),
            LayerTotal {
                layer: Layer::KfreeSkb,
                netns: ns,
                device: dev.map(str::to_string),
                counted: drops,
                matched: also,
                counter_only: 0,
            },
        );
    }

    let with_reason: u64 = (seen.iter())
        .map(|s| {
            if s.reason == NOT_SPECIFIED {
                s.also
            } else {
                s.count
            }
        })
        .sum();
    let total = snap
        .total
        .max(seen.iter().map(|s| s.count).sum())
        .saturating_add(counter_only);
    let mut unexplained: Vec<Unexplained> = (seen.iter())
        .filter(|s| s.reason == NOT_SPECIFIED && s.count > s.also)
        .map(|s| Unexplained {
            netns: s.netns,
            device: s.device.map(str::to_string),
            location: s.location.to_string(),
            count: s.count - s.also,
        })
        .collect();
    unexplained.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.location.cmp(&b.location))
    });
    // The rows listed: those with the most drops only a counter saw, then the most drops.
    let mut counters: Vec<Row> = rows.into_iter().map(|(_, r)| r).collect();
    let listed = counters.len();
    if listed > MAX_ROWS {
        counters.select_nth_unstable_by_key(MAX_ROWS - 1, |r| {
            (
                std::cmp::Reverse(r.counter_only),
                std::cmp::Reverse(r.delta),
            )
        });
        counters.truncate(MAX_ROWS);
        notes.push(format!(
            "{} layer counters not listed (at most {} are, those with the most drops only a \
             counter saw): their drops are in the headline and the layers",
            crate::format::count((listed - MAX_ROWS) as u64),
            crate::format::count(MAX_ROWS as u64)
        ));
    }
    counters.sort_by(|a, b| {
        (a.layer, a.netns, &a.device, &a.counter).cmp(&(b.layer, b.netns, &b.device, &b.counter))
    });
    let mut layers: Vec<LayerTotal> = totals.into_values().collect();
    let places = layers.len();
    if places > MAX_ROWS {
        layers.select_nth_unstable_by_key(MAX_ROWS - 1, |t| {
            (
                std::cmp::Reverse(t.counter_only),
                std::cmp::Reverse(t.counted),
            )
        });
        layers.truncate(MAX_ROWS);
        layers.sort_by(|a, b| (a.layer, a.netns, &a.device).cmp(&(b.layer, b.netns, &b.device)));
        notes.push(format!(
            "{} layer totals not listed (at most {} are, those with the most drops only a \
             counter saw): their drops are in the headline",
            crate::format::count((places - MAX_ROWS) as u64),
            crate::format::count(MAX_ROWS as u64)
        ));
    }
    Ledger {
        headline: Headline {
            total,
            with_reason,
            counter_only,
            unexplained: total - with_reason - counter_only,
        },
        layers,
        counters,
        notes,
        unexplained,
    }
}

/// The most layer counters (and layer totals) a ledger lists: a window may hold any number (a
/// recording, or a host where anyone can make devices), and each is a line of the report.
/// Those with the most drops only a counter saw are listed; a note says how many were not.
pub const MAX_ROWS: usize = 4096;

fn add(totals: &mut BTreeMap<(Layer, u64, Option<String>), LayerTotal>, r: &Row) {
    let t = totals
        .entry((r.layer, r.netns, r.device.clone()))
        .or_insert_with(|| LayerTotal {
            layer: r.layer,
            netns: r.netns,
            device: r.device.clone(),
            counted: 0,
            matched: 0,
            counter_only: 0,
        });
    t.counted = t.counted.saturating_add(r.delta);
    t.matched = t.matched.saturating_add(r.matched);
    t.counter_only = t.counter_only.saturating_add(r.counter_only);
}

/// Where a counter looks for the drops it also counted: its namespace (unless the counts are
/// not keyed by namespace) and its device (unless it has none, or the counts are not keyed by
/// device); `None` stands for any.
type Scope<'a> = (Option<u64>, Option<&'a str>);

/// The probe's keys a counter can match, in the keys' order, with the sums of their counts
/// before each, and the most any counter asked of them.
#[derive(Default)]
struct Candidates {
    keys: Vec<usize>,
    /// `before[i]`: the counts of `keys[..i]`, summed.
    before: Vec<u64>,
    total: u64,
    /// The largest number of drops a counter gave out over these keys.
    reach: u64,
}

impl Candidates {
    fn new(keys: Vec<usize>, seen: &[Seen<'_>]) -> Self {
        let mut before = Vec::with_capacity(keys.len());
        let mut total = 0u64;
        for &k in &keys {
            before.push(total);
            total = total.saturating_add(seen[k].count);
        }
        Candidates {
            keys,
            before,
            total,
            reach: 0,
        }
    }

    /// Gives out `n` drops over the keys in order: how many were taken.
    fn take(&mut self, n: u64) -> u64 {
        self.reach = self.reach.max(n);
        n.min(self.total)
    }

    /// What each key gave out at most to one counter: every counter takes from the first key
    /// on, so what the largest one took of each key is the most any took of it.
    fn settle(&self, seen: &mut [Seen<'_>]) {
        for (&k, &before) in self.keys.iter().zip(&self.before) {
            let s = &mut seen[k];
            s.also = s.also.max(s.count.min(self.reach.saturating_sub(before)));
        }
    }
}

/// Matches counters with the probe's keys, indexed once: the keys by (namespace, device) and
/// by namespace, and each counter's candidates once per kind of counter and place, so a
/// window costs about keys + counters, never keys × counters.
struct Allocator<'a> {
    by_netns: bool,
    by_device: bool,
    /// The keys of each scope, in their order.
    scopes: HashMap<Scope<'a>, Vec<usize>>,
    /// Candidates near the counter, by the counter's reason specs (by address: they are
    /// static) and scope.
    here: HashMap<(usize, Scope<'a>), Candidates>,
    /// Candidates anywhere (`~` specs), by the counter's reason specs.
    anywhere: HashMap<usize, Candidates>,
}

impl<'a> Allocator<'a> {
    fn new(seen: &[Seen<'a>], by_netns: bool, by_device: bool) -> Self {
        let mut scopes: HashMap<Scope<'a>, Vec<usize>> = HashMap::new();
        // A drop of a namespace that ended is in no namespace's scope.
        for (i, s) in seen.iter().enumerate().filter(|(_, s)| s.read || !by_netns) {
            let ns = by_netns.then_some(s.netns);
            scopes.entry((ns, None)).or_default().push(i);
            if by_device && let Some(dev) = s.device {
                scopes.entry((ns, Some(dev))).or_default().push(i);
            }
        }
        Allocator {
            by_netns,
            by_device,
            scopes,
            here: HashMap::new(),
            anywhere: HashMap::new(),
        }
    }

    /// How many of the probe's drops a counter (`class`, in namespace `ns`, grown by `delta`)
    /// also counted: at most `delta`, given out to the matching keys of its own namespace and
    /// device first, then to those its `~` specs find anywhere, each in the keys' order; each
    /// key remembers the most any one counter took of it ([`Allocator::settle`]).
    fn allocate(&mut self, class: &Class<'a>, ns: u64, delta: u64, seen: &[Seen<'a>]) -> u64 {
        let specs = class.reasons;
        let id = specs.as_ptr() as usize;
        let scope = (
            self.by_netns.then_some(ns),
            class.device.filter(|_| self.by_device),
        );
        let here = self.here.entry((id, scope)).or_insert_with(|| {
            let keys = self.scopes.get(&scope).map_or(&[][..], Vec::as_slice);
            let local = |s: &&str| !s.starts_with('~');
            Candidates::new(matching(keys, specs, local, seen), seen)
        });
        let near = here.take(delta);
        let rest = delta - near;
        if !specs.iter().any(|s| s.starts_with('~')) {
            return near;
        }
        let anywhere = self.anywhere.entry(id).or_insert_with(|| {
            let all: Vec<usize> = (0..seen.len()).collect();
            Candidates::new(matching(&all, specs, |s| s.starts_with('~'), seen), seen)
        });
        near + anywhere.take(rest)
    }

    /// Every key's share, once every counter was matched.
    fn settle(&self, seen: &mut [Seen<'_>]) {
        for c in self.here.values().chain(self.anywhere.values()) {
            c.settle(seen);
        }
    }
}

/// The keys of `keys` that one of `specs` (those `which` keeps) matches, in order.
fn matching(
    keys: &[usize],
    specs: &[&str],
    which: impl Fn(&&str) -> bool,
    seen: &[Seen<'_>],
) -> Vec<usize> {
    let specs: Vec<&str> = specs.iter().filter(|s| which(s)).copied().collect();
    if specs.is_empty() {
        return Vec::new();
    }
    (keys.iter().copied())
        .filter(|&k| {
            let s = &seen[k];
            specs
                .iter()
                .any(|spec| layers::matches(spec, s.reason, s.location))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{Attribution, DropCount, DropKey, Reason};

    const INIT: u64 = 1;
    const NS: u64 = 7;

    fn drop(netns: u64, device: &str, reason: &str, location: &str, count: u64) -> DropCount {
        DropCount {
            key: DropKey {
                reason: Reason {
                    code: 1,
                    name: reason.into(),
                },
                location: location.into(),
                attr: Attribution {
                    netns: Some(netns),
                    device: (!device.is_empty()).then(|| Arc::from(device)),
                    ..Default::default()
                },
            },
            count,
        }
    }

    fn reading(counters: &[(u64, &str, u64)]) -> KernelReading {
        crate::fixtures::reading(0, INIT, counters)
    }

    fn snap(drops: Vec<DropCount>) -> Snapshot {
        crate::fixtures::snap(0, drops, 0)
    }

    fn row<'a>(l: &'a Ledger, counter: &str) -> &'a Row {
        l.counters
            .iter()
            .find(|r| r.counter == counter)
            .unwrap_or_else(|| panic!("no {counter}: {l:#?}"))
    }

    #[test]
    fn qdisc_drops_match_the_qdisc_reasons_on_their_device_once() {
        let r = reading(&[
            (NS, "Qdisc:va:tbf 1::drops", 40),
            (NS, "Qdisc:va:tbf 1::overlimits", 90),
            (NS, "Qdisc:va:bfifo 0: parent 1:1:drops", 40),
        ]);
        let s = snap(vec![
            drop(NS, "va", "QDISC_DROP", "__dev_xmit_skb+0x1", 40),
            drop(NS, "vb", "QDISC_DROP", "__dev_xmit_skb+0x1", 5),
            drop(NS, "lo", "NO_SOCKET", "__udp4_lib_rcv+0x1", 10),
        ]);
        let l = ledger(&r, &s);
        let q = row(&l, "Qdisc:va:tbf 1::drops");
        assert_eq!((q.delta, q.matched, q.counter_only), (40, 40, 0));
        assert_eq!(row(&l, "Qdisc:va:tbf 1::overlimits").matched, 0);
        assert_eq!(
            row(&l, "Qdisc:va:bfifo 0: parent 1:1:drops").role,
            Role::Detail
        );
        let t = (l.layers.iter())
            .find(|t| t.layer == Layer::Qdisc)
            .expect("qdisc layer");
        assert_eq!(
            (t.device.as_deref(), t.counted, t.matched, t.counter_only),
            (Some("va"), 40, 40, 0),
            "the child's drops are the root's: counted once"
        );
        let k = (l.layers.iter())
            .find(|t| t.layer == Layer::KfreeSkb && t.device.as_deref() == Some("va"))
            .expect("kfree_skb on va");
        assert_eq!((k.counted, k.matched), (40, 40));
        assert_eq!(
            l.headline,
            Headline {
                total: 55,
                with_reason: 55,
                counter_only: 0,
                unexplained: 0
            }
        );
    }

    /// A namespace that ended (its drops keyed by its cookie, 5) and the one the kernel gave
    /// its inode next (cookie 9, as the reading read it): the later one's 10 counter-only
    /// drops stay its own, never matched with the ended one's 5,000 drops of the same reason,
    /// which count in the headline as the probe's. Matched by inode alone, the counter's 10
    /// read as seen by the probe, and its unseen drops vanished.
    #[test]
    fn an_ended_namespaces_drops_never_match_the_counters_of_the_one_given_its_inode() {
        let mut r = reading(&[(NS, "Udp:NoPorts", 10)]);
        r.cookies.insert(NS, 9);
        let mut ended = drop(NS, "lo", "NO_SOCKET", "__udp4_lib_rcv+0x1", 5000);
        ended.key.attr.netns_cookie = Some(5);
        let s = snap(vec![ended]);
        let l = ledger(&r, &s);
        let u = row(&l, "Udp:NoPorts");
        assert_eq!((u.delta, u.matched, u.counter_only), (10, 0, 10));
        assert_eq!((l.headline.total, l.headline.with_reason), (5010, 5000));
        let found = unseen::unseen(&unseen::growth_deltas(&r), unseen::seen_drops(&s, &r), INIT);
        let counted: u64 = (found.iter())
            .filter(|u| u.netns == NS && u.counter == "Udp:NoPorts")
            .map(|u| u.count)
            .sum();
        assert_eq!(counted, 10, "{found:?}");
        // The same cookie: matched as before.
        r.cookies.insert(NS, 5);
        let u = row(&ledger(&r, &s), "Udp:NoPorts").clone();
        assert_eq!((u.matched, u.counter_only), (10, 0));
    }

    /// A netkit program's drop is freed once the packet is the peer's (another device, often
    /// another namespace): its counter and the primary's `tx_dropped` still match it, once.
    #[test]
    fn netkit_drops_match_their_free_on_the_peer() {
        const POD: u64 = 9;
        let r = reading(&[
            (NS, "Tc:nk0:netkit-primary:pod_fw#46:shot", 250),
            (NS, "Link:nk0:tx_dropped", 250),
        ]);
        let s = snap(vec![drop(
            POD,
            "nk1",
            "NOT_SPECIFIED",
            "netkit_xmit+0x2c1",
            250,
        )]);
        let l = ledger(&r, &s);
        let t = row(&l, "Tc:nk0:netkit-primary:pod_fw#46:shot");
        assert_eq!((t.delta, t.matched, t.counter_only), (250, 250, 0));
        assert_eq!(row(&l, "Link:nk0:tx_dropped").counter_only, 0);
        assert_eq!(
            l.headline,
            Headline {
                total: 250,
                with_reason: 250,
                counter_only: 0,
                unexplained: 0
            }
        );
    }

    #[test]
    fn program_verdicts_are_one_drop_with_the_free_they_cause_and_alone_without() {
        let mut r = reading(&[
            // A veth's native XDP frees what its program drops: matched.
            (NS, "Xdp:vb:xdpdrv:drop_udp#12:drop", 500),
            // A NIC's native XDP frees nothing: only the program's counter sees its drops.
            (NS, "Xdp:eth0:xdpdrv:ddos#13:drop", 70),
            // A tc program's shots, also the clsact qdisc's drops, freed with TC_INGRESS.
            (NS, "Tc:vb:ingress:shoot#14:shot", 30),
            (NS, "Qdisc:vb:clsact ffff::drops", 30),
        ]);
        r.errors.push(format!(
            "{}15 \"plain\" (xdp xdpgeneric on va, netns {NS}): verdicts not counted: no BTF",
            crate::model::notes::PROGRAM_NOTE
        ));
        r.errors.push("netns 9: links not read: gone".into());
        let s = snap(vec![
            drop(NS, "vb", "NOT_SPECIFIED", "veth_xdp_rcv_skb+0x2cc", 500),
            drop(NS, "vb", "TC_INGRESS", "__netif_receive_skb_core+0x1", 30),
        ]);
        let l = ledger(&r, &s);
        let x = row(&l, "Xdp:vb:xdpdrv:drop_udp#12:drop");
        assert_eq!((x.layer, x.matched, x.counter_only), (Layer::Xdp, 500, 0));
        let n = row(&l, "Xdp:eth0:xdpdrv:ddos#13:drop");
        assert_eq!((n.matched, n.counter_only), (0, 70));
        let t = row(&l, "Tc:vb:ingress:shoot#14:shot");
        assert_eq!((t.layer, t.matched, t.counter_only), (Layer::Tc, 30, 0));
        assert_eq!(
            l.headline,
            Headline {
                total: 600,
                with_reason: 530,
                counter_only: 70,
                unexplained: 0
            },
            "the veth's frees without a reason are explained by the program's counter"
        );
        assert_eq!(
            l.notes.iter().filter(|n| n.contains("not counted")).count(),
            1,
            "{:?}",
            l.notes
        );
    }

    #[test]
    fn a_backlog_drop_is_counted_once_though_three_counters_count_it() {
        // 30 backlog drops on vb (namespace NS), sent by va (initial namespace).
        let r = reading(&[
            (INIT, "Softnet:Dropped", 30),
            (INIT, "Softnet:cpu0:dropped", 18),
            (INIT, "Softnet:cpu1:dropped", 12),
            (INIT, "Link:va:tx_dropped", 30),
            (NS, "Link:vb:rx_dropped", 30),
            (NS, "Dev:vb:RxDrop", 30),
        ]);
        let s = snap(vec![drop(
            NS,
            "vb",
            "CPU_BACKLOG",
            "enqueue_to_backlog+0x9",
            30,
        )]);
        let l = ledger(&r, &s);
        for c in [
            "Softnet:Dropped",
            "Link:va:tx_dropped",
            "Link:vb:rx_dropped",
            "Dev:vb:RxDrop",
        ] {
            assert_eq!(row(&l, c).matched, 30, "{c}");
            assert_eq!(row(&l, c).counter_only, 0, "{c}");
        }
        assert_eq!(row(&l, "Softnet:cpu0:dropped").matched, 18);
        assert_eq!(row(&l, "Dev:vb:RxDrop").role, Role::Detail);
        let softnet = (l.layers.iter())
            .find(|t| t.layer == Layer::Softnet)
            .expect("softnet");
        assert_eq!(
            (softnet.counted, softnet.matched),
            (30, 30),
            "Dropped, not + per CPU"
        );
        assert_eq!(
            l.headline,
            Headline {
                total: 30,
                with_reason: 30,
                counter_only: 0,
                unexplained: 0
            }
        );
    }

    #[test]
    fn what_only_a_counter_saw_is_counted_on_its_device_and_namespace() {
        let r = reading(&[
            (NS, "Link:eth1:rx_missed_errors", 12),
            (NS, "Link:eth1:rx_fifo_errors", 5),
            (NS, "Link:eth1:rx_over_errors", 7),
            (NS, "Link:tun0:tx_dropped", 9),
            (INIT, "TcpExt:ListenDrops", 4),
            (INIT, "TcpExt:ListenOverflows", 4),
        ]);
        let s = snap(vec![
            drop(NS, "tun0", "FULL_RING", "tun_net_xmit+0x1", 6),
            drop(NS, "eth1", "NOT_SPECIFIED", "foo_rx+0x1", 3),
            drop(INIT, "lo", "NO_SOCKET", "__udp4_lib_rcv+0x1", 10),
        ]);
        let l = ledger(&r, &s);
        let tun = row(&l, "Link:tun0:tx_dropped");
        assert_eq!((tun.matched, tun.counter_only), (6, 3));
        assert_eq!(row(&l, "Link:eth1:rx_missed_errors").counter_only, 12);
        let nic = (l.layers.iter())
            .find(|t| t.layer == Layer::Nic && t.device.as_deref() == Some("eth1"))
            .expect("eth1");
        assert_eq!(
            (nic.netns, nic.counted, nic.counter_only),
            (NS, 12 + 7, 12 + 7),
            "FIFO and overrun are one event counted twice: the larger"
        );
        // 12 missed + 7 overrun + 3 tun + 4 listen drops (not 8: overflows are within).
        let y = 12 + 7 + 3 + 4;
        assert_eq!(
            l.headline,
            Headline {
                total: 19 + y,
                with_reason: 16,
                counter_only: y,
                unexplained: 3
            }
        );
        assert_eq!(
            l.headline.sentence(),
            "45 drops: 35.6% with reason and location, 57.8% counted by a layer counter only, \
             3 unexplained"
        );
    }

    #[test]
    fn a_drop_without_a_reason_that_a_counter_counted_is_explained() {
        let r = reading(&[(INIT, "Softnet:Dropped", 8)]);
        let s = snap(vec![drop(
            NS,
            "vb",
            "NOT_SPECIFIED",
            "enqueue_to_backlog+0x5",
            8,
        )]);
        let mut s2 = s.clone();
        s2.total += 2; // two drops counted without a key
        let l = ledger(&r, &s2);
        assert_eq!(
            l.headline,
            Headline {
                total: 10,
                with_reason: 8,
                counter_only: 0,
                unexplained: 2
            }
        );
    }

    #[test]
    fn older_readings_fall_back_to_the_proc_columns_and_unkeyed_counts_match_per_namespace() {
        let r = reading(&[(NS, "Dev:eth0:RxDrop", 5)]);
        let mut d = drop(NS, "", "CPU_BACKLOG", "enqueue_to_backlog+0x1", 2);
        d.key.attr.device = None;
        let l = ledger(&r, &snap(vec![d]));
        let dev = row(&l, "Dev:eth0:RxDrop");
        assert_eq!(
            (dev.role, dev.matched, dev.counter_only),
            (Role::Primary, 2, 3)
        );
        assert_eq!(l.headline.counter_only, 3);
        assert_eq!(
            l.notes,
            ["counts not keyed by device: matched per namespace"]
        );
    }
}
