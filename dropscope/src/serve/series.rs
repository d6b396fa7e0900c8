//! The series of each metric family of a snapshot, read from its drop keys and kernel counters
//! and capped at `--max-series` per family ([`cap`](super::cap)), the rest summed into `other`.
use std::{collections::HashMap, sync::Arc};

use super::cap::{Cap, Row, Tenant};
pub use super::cap::{Capped, LabelValues, MAX_LABEL_BYTES, Series, sanitize};
use crate::{
    ledger::layers::{self, Role},
    model::{
        DropKey, KernelReading, Snapshot, counter_only,
        group::{self, Dim},
        kernel::Direction,
    },
};

/// The part of a drop key one label shows.
pub type LabelOf = fn(&DropKey) -> &str;

/// The labels of `dropscope_drops_total`, in order, each with the part of a drop key it shows.
/// An attribution dimension of the grouping in use (e.g. `netns_name`, `device`, `protocol`)
/// is one more line here.
pub const DROP_LABELS: &[(&str, LabelOf)] = &[
    ("reason", |k| &k.reason.name),
    ("location", |k| &k.location),
    ("netns_name", |k| k.attr.netns_name.as_deref().unwrap_or("")),
    ("device", |k| k.attr.device.as_deref().unwrap_or("")),
    ("protocol", |k| k.attr.protocol.as_deref().unwrap_or("")),
];

/// The label after [`DROP_LABELS`]: who dropped the series' drops (see [`crate::culprit`]),
/// empty (left out) where no one is named.
pub const CULPRIT_LABEL: &str = "culprit";
const CULPRIT_NONE: &str = "";
/// The `culprit` of a series whose sockets' keys name different culprits.
pub const SEVERAL_SOCKETS: &str = "several sockets";

/// The labels of `dropscope_packets_total`.
pub const PACKET_LABELS: &[&str] = &["netns_name", "device", "direction"];
/// The labels of `dropscope_netns_packets_total`.
pub const NETNS_PACKET_LABELS: &[&str] = &["netns_name"];
/// The labels of `dropscope_layer_drops_total`.
pub const LAYER_LABELS: &[&str] = &["layer", "counter", "netns_name", "device"];

/// The value that marks the `other` series: `reason="other"` in `dropscope_drops_total`,
/// `layer="other"` in `dropscope_layer_drops_total` (the packet families mark theirs by having
/// no labels: every series of theirs has a namespace).
pub const OTHER: &str = "other";
/// The `reason` of the series of drops the kernel counted but could not key (its map was full).
pub const OVERFLOW: &str = "overflow";

/// What a snapshot looks like once every family is capped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selected {
    /// `dropscope_drops_total`, in the order of [`DROP_LABELS`].
    pub drops: Capped,
    /// Drops counted but not keyed (the kernel's map was full).
    pub overflow: u64,
    /// `dropscope_packets_total`, in the order of [`PACKET_LABELS`].
    pub packets: Capped,
    /// `dropscope_netns_packets_total`.
    pub netns_packets: Capped,
    /// `dropscope_layer_drops_total`, in the order of [`LAYER_LABELS`].
    pub layer_drops: Capped,
    /// `dropscope_counter_only_drops`: the drops only a kernel counter saw, as rows beside
    /// the probe's (see [`counter_only`]), in the order of [`DROP_LABELS`]; never in `drops`.
    pub counter_only: Capped,
}

impl Selected {
    /// Sum over every series of `dropscope_drops_total`, `other` and `overflow` included:
    /// equal to the snapshot's total.
    pub fn sum(&self) -> u64 {
        self.drops.sum() + self.overflow
    }
}

/// The caps of every family, kept from one snapshot to the next (see [`Cap`]).
#[derive(Debug)]
pub struct Selection {
    drops: Cap<DropKey>,
    packets: Cap<(u64, Arc<str>, Direction)>,
    netns_packets: Cap<u64>,
    layer_drops: Cap<(u64, Arc<str>)>,
    counter_only: Cap<DropKey>,
    /// Whether the probe counts every drop, so that what only a counter saw can be told
    /// (not while drops are filtered).
    counts_all: bool,
    /// The initial namespace, once a kernel reading said which it is.
    initial: Option<u64>,
}

impl Selection {
    /// A selection exporting at most `max` series per family.
    pub fn new(max: usize) -> Self {
        Self {
            drops: Cap::new(max),
            packets: Cap::new(max),
            netns_packets: Cap::new(max),
            layer_drops: Cap::new(max),
            counter_only: Cap::new(max),
            counts_all: true,
            initial: None,
        }
    }

    /// Whether the probe counts every drop (`false` while drops are filtered: then no
    /// counter-only drops are exported, for nothing can be called unseen).
    pub fn counting_all(mut self, all: bool) -> Self {
        self.counts_all = all;
        self
    }

    /// Applies the caps to a snapshot, with the names its keys carry now.
    pub fn select(&mut self, snap: &Snapshot) -> Selected {
        if let Some(r) = &snap.kernel {
            self.initial = Some(r.initial_netns);
        }
        let initial = self.initial;
        // Who dropped each row: one more label of its series, never one more series.
        let culprits = crate::culprit::culprits(snap);
        // A series' identity: every dimension but the socket.
        let without_socket: Vec<Dim> = (Dim::ALL.into_iter())
            .filter(|&d| d != Dim::Socket)
            .collect();
        // No label shows the socket: its keys are one series, and take one place.
        let ids: Vec<DropKey> = (snap.drops.iter())
            .map(|d| group::coarser(&d.key, &without_socket))
            .collect();
        // The series' culprit: the one its keys name, `several sockets` where they name
        // different ones (never one key's, then another's, from scrape to scrape).
        let mut named: HashMap<&DropKey, String> = HashMap::new();
        for (id, d) in ids.iter().zip(&snap.drops) {
            let label = crate::culprit::tui::label(culprits.get(&d.key));
            if label.is_empty() {
                continue;
            }
            named
                .entry(id)
                .and_modify(|l| {
                    if *l != label {
                        *l = SEVERAL_SOCKETS.into();
                    }
                })
                .or_insert(label);
        }
        let drops = self
            .drops
            .select(ids.iter().zip(&snap.drops).map(|(id, d)| {
                Row {
                    id: id.clone(),
                    tenant: Tenant::of_key(
                        d.key.attr.netns,
                        d.key.attr.netns_cookie,
                        d.key.attr.netns_name.as_deref(),
                        initial,
                    ),
                    labels: (DROP_LABELS.iter())
                        .map(|(_, v)| Arc::from(v(&d.key)))
                        .chain([Arc::from(
                            named.get(id).map_or(CULPRIT_NONE, String::as_str),
                        )])
                        .collect(),
                    count: d.count,
                }
            }));
        let mut selected = Selected {
            drops,
            overflow: snap.overflow,
            ..Selected::default()
        };
        if let Some(r) = &snap.kernel {
            let names = Namespaces::new(snap, r);
            selected.packets = self.packets.select(packet_rows(r, &names));
            selected.netns_packets = self.netns_packets.select(r.netns.keys().map(|&ns| Row {
                id: ns,
                tenant: names.tenant(ns),
                labels: vec![names.label(ns)],
                count: r.netns_packets(ns),
            }));
            selected.layer_drops = self.layer_drops.select(layer_rows(r, &names));
            if self.counts_all {
                let rows = counter_only::of_snapshot(snap);
                selected.counter_only = self.counter_only.select(rows.iter().map(|d| {
                    Row {
                        id: d.key.clone(),
                        tenant: names.tenant(d.key.attr.netns.unwrap_or(r.initial_netns)),
                        labels: (DROP_LABELS.iter())
                            .map(|(_, v)| Arc::from(v(&d.key)))
                            .chain([Arc::from(CULPRIT_NONE)])
                            .collect(),
                        count: d.count,
                    }
                }));
            }
        }
        selected
    }
}

/// The namespaces of a kernel reading as the snapshot's drop keys name them now, or where none
/// does as the reading names them: `host` for the initial one, the inode where neither names
/// it.
struct Namespaces<'a> {
    names: HashMap<u64, &'a str>,
    initial: u64,
}

impl<'a> Namespaces<'a> {
    fn new(snap: &'a Snapshot, r: &'a KernelReading) -> Self {
        let mut names: HashMap<u64, &'a str> = (r.names.iter()).map(|(i, n)| (*i, &**n)).collect();
        names.extend(
            (snap.drops.iter())
                .filter_map(|d| Some((d.key.attr.netns?, d.key.attr.netns_name.as_deref()?))),
        );
        Self {
            names,
            initial: r.initial_netns,
        }
    }

    fn label(&self, ns: u64) -> Arc<str> {
        match self.names.get(&ns) {
            _ if ns == self.initial => Arc::from("host"),
            Some(n) => Arc::from(*n),
            None => Arc::from(ns.to_string()),
        }
    }

    fn tenant(&self, ns: u64) -> Tenant {
        Tenant::of(Some(ns), self.names.get(&ns).copied(), Some(self.initial))
    }
}

/// The rows of `dropscope_packets_total`: packets per namespace, device and direction.
fn packet_rows<'a>(
    r: &'a KernelReading,
    names: &'a Namespaces<'_>,
) -> impl Iterator<Item = Row<(u64, Arc<str>, Direction)>> + 'a {
    r.device_packets().map(|(ns, dev, dir, v)| {
        let dev: Arc<str> = Arc::from(dev);
        Row {
            tenant: names.tenant(ns),
            labels: vec![names.label(ns), Arc::clone(&dev), Arc::from(dir.as_str())],
            id: (ns, dev, dir),
            count: v,
        }
    })
}

/// The rows of `dropscope_layer_drops_total`: each layer counter's drops (not the counters
/// that only give context), per namespace.
fn layer_rows<'a>(
    r: &'a KernelReading,
    names: &'a Namespaces<'_>,
) -> impl Iterator<Item = Row<(u64, Arc<str>)>> + 'a {
    (r.netns.iter())
        .flat_map(|(&ns, g)| g.iter().map(move |(c, &v)| (ns, c, v)))
        .filter_map(|(ns, counter, v)| {
            let class = layers::classify(counter)?;
            (class.role != Role::Context).then(|| Row {
                id: (ns, Arc::clone(counter)),
                tenant: names.tenant(ns),
                labels: vec![
                    Arc::from(class.layer.as_str()),
                    Arc::clone(counter),
                    names.label(ns),
                    Arc::from(class.device.unwrap_or_default()),
                ],
                count: v,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DropCount, Reason};

    fn drop(reason: &str, location: &str, count: u64) -> DropCount {
        DropCount {
            key: DropKey {
                reason: Reason {
                    code: 1,
                    name: reason.into(),
                },
                location: location.into(),
                attr: Default::default(),
            },
            count,
        }
    }

    fn snap(drops: Vec<DropCount>, overflow: u64) -> Snapshot {
        crate::fixtures::snap(0, drops, overflow)
    }

    fn reasons(sel: &Selected) -> Vec<&str> {
        sel.drops.series.iter().map(|s| &*s.labels[0]).collect()
    }

    #[test]
    fn counter_only_drops_are_a_family_of_their_own_never_in_the_drops() {
        let mut s = snap(vec![drop("TCP_LISTEN_OVERFLOW", "tcp_check_req+0x1", 4)], 0);
        s.drops[0].key.attr.netns = Some(1);
        let mut r = KernelReading {
            initial_netns: 1,
            ..KernelReading::default()
        };
        let g = r.netns.entry(1).or_default();
        g.insert(Arc::from("TcpExt:ListenDrops"), 44);
        g.insert(Arc::from("TcpExt:ListenOverflows"), 44);
        s.kernel = Some(Arc::new(r));
        let sel = Selection::new(10).select(&s);
        let series: Vec<(Vec<&str>, u64)> = (sel.counter_only.series.iter())
            .map(|s| (s.labels.iter().map(|l| &**l).collect(), s.count))
            .collect();
        assert_eq!(
            series,
            [(
                vec![
                    "TcpExt:ListenDrops",
                    "(counter only)",
                    "host",
                    "",
                    "tcp",
                    ""
                ],
                40
            )]
        );
        assert_eq!(sel.sum(), s.total, "the probe's series stay its total");
        // Drops filtered: nothing is called counter-only.
        let sel = Selection::new(10).counting_all(false).select(&s);
        assert!(sel.counter_only.series.is_empty());
    }

    #[test]
    fn keeps_the_top_n_and_sums_the_rest_exactly() {
        let s = snap(
            vec![
                drop("A", "f+0x1", 5),
                drop("B", "f+0x2", 50),
                drop("C", "f+0x3", 7),
                drop("D", "f+0x4", 1),
            ],
            3,
        );
        let sel = Selection::new(2).select(&s);
        assert_eq!(reasons(&sel), ["B", "C"]);
        assert_eq!(sel.drops.other, Some(6));
        assert_eq!(sel.drops.other_sets, 2);
        assert_eq!(sel.overflow, 3);
        assert_eq!(sel.sum(), s.total);
    }

    #[test]
    fn no_series_ever_decreases_when_the_ranking_changes() {
        let mut sel = Selection::new(1);
        let first = sel.select(&snap(vec![drop("A", "a", 10), drop("B", "b", 1)], 0));
        // B overtakes A: moving it out of `other` would make `other` go down.
        let second = sel.select(&snap(vec![drop("A", "a", 11), drop("B", "b", 100)], 0));
        assert_eq!(reasons(&first), ["A"]);
        assert_eq!(reasons(&second), ["A"]);
        assert_eq!(second.drops.series[0].count, 11);
        assert!(second.drops.other >= first.drops.other);
        assert_eq!(second.drops.other, Some(100));
        assert_eq!(second.sum(), 111);
    }

    #[test]
    fn free_places_go_to_newcomers_by_count() {
        let mut sel = Selection::new(2);
        sel.select(&snap(vec![drop("A", "a", 1)], 0));
        let s = sel.select(&snap(
            vec![drop("A", "a", 1), drop("B", "b", 2), drop("C", "c", 9)],
            0,
        ));
        assert_eq!(reasons(&s), ["C", "A"]);
        assert_eq!(s.drops.other, Some(2));
    }

    #[test]
    fn keys_whose_labels_coincide_after_sanitizing_are_merged() {
        let long = "x".repeat(MAX_LABEL_BYTES + 10);
        let longer = "x".repeat(MAX_LABEL_BYTES + 20);
        let s = snap(vec![drop("A", &long, 2), drop("A", &longer, 3)], 0);
        let sel = Selection::new(10).select(&s);
        assert_eq!(sel.drops.series.len(), 1);
        assert_eq!(sel.drops.series[0].count, 5);
        assert_eq!(sel.sum(), s.total);
    }

    #[test]
    fn sanitize_bounds_length_on_a_char_boundary_and_replaces_controls() {
        let v = sanitize(&"é".repeat(MAX_LABEL_BYTES));
        assert!(v.len() <= MAX_LABEL_BYTES, "{}", v.len());
        assert!(v.ends_with('…'));
        assert_eq!(&*sanitize("a\u{1b}[2Jb\r\nc\0"), "a?[2Jb??c?");
        assert_eq!(&*sanitize("plain+0x1 [mod]"), "plain+0x1 [mod]");
    }
}
