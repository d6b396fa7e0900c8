//! Two runs' drops compared key by key: each key's rate in both, their ratio, and whether the
//! change is more than chance (the Poisson rate test of [`super::poisson`]).
//!
//! Keys are matched by what they name, not by the kernel's numbers: the reason by its name (its
//! value differs between kernels), the namespace by its name (a container's namespace has
//! another inode in every run; its inode only where it has no name), the interface by its name.
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use serde::Serialize;

use super::{
    DropCount, DropKey, Snapshot,
    group::{self, Dim, Filter},
    poisson,
};

pub use crate::vocab::DEFAULT_ALPHA;

/// Longest name a key's description shows in full (longer ones are cut with `…`).
pub const DESCRIBED_CHARS: usize = 96;

/// A drop key as two runs share it: names only.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DiffKey {
    /// The reason's name (`*` when merged away).
    pub reason: Arc<str>,
    /// The kernel location (`*` when merged away).
    pub location: Arc<str>,
    /// The namespace's name, or its inode where it has none; `None` when not grouped by it.
    pub netns: Option<Arc<str>>,
    /// The interface's name.
    pub device: Option<Arc<str>>,
    /// The L4 protocol.
    pub protocol: Option<Arc<str>>,
    /// The destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Who dropped them, where grouped by culprit: the label rows group by (see
    /// [`crate::culprit::group`]); `None` when not grouped by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Arc<str>>,
}

impl DiffKey {
    /// The names of `key`.
    pub fn of(key: &DropKey) -> Self {
        let a = &key.attr;
        DiffKey {
            reason: key.reason.name.clone(),
            location: key.location.clone(),
            netns: (a.netns_name.clone()).or_else(|| a.netns.map(|i| i.to_string().into())),
            device: a.device.clone(),
            protocol: a.protocol.clone(),
            port: a.port,
            culprit: a.culprit.as_ref().map(|g| g.label.clone()),
        }
    }

    /// The key as a sentence names it: `NO_SOCKET at __udp4_lib_rcv+0x1c in netns web1 on lo
    /// (udp port 53)`, each name cut to [`DESCRIBED_CHARS`] characters. Not escaped: each output
    /// escapes it for where it goes.
    pub fn describe(&self) -> String {
        let cut = |n: &str| crate::sanitize::truncate(n, DESCRIBED_CHARS).into_owned();
        let mut s = if &*self.reason == "*" {
            "drops".to_string()
        } else {
            cut(&self.reason)
        };
        if &*self.location != "*" {
            s.push_str(" at ");
            s.push_str(&cut(&self.location));
        }
        if let Some(n) = &self.netns {
            s.push_str(" in netns ");
            s.push_str(&cut(n));
        }
        if let Some(d) = &self.device {
            s.push_str(" on ");
            s.push_str(&cut(d));
        }
        match (&self.protocol, self.port) {
            (Some(p), Some(port)) => s.push_str(&format!(" ({} port {port})", cut(p))),
            (Some(p), None) => s.push_str(&format!(" ({})", cut(p))),
            (None, Some(port)) => s.push_str(&format!(" (port {port})")),
            (None, None) => {}
        }
        if let Some(c) = &self.culprit {
            s.push_str(" by ");
            s.push_str(&cut(c));
        }
        s
    }

    /// The key as the model's [`DropKey`] (for the views that show those): the namespace by its
    /// name, the reason's value unknown (0).
    pub fn to_drop_key(&self) -> DropKey {
        DropKey {
            reason: super::Reason {
                code: 0,
                name: self.reason.clone(),
            },
            location: self.location.clone(),
            attr: super::Attribution {
                netns: self.netns.as_ref().map(|_| 0),
                netns_cookie: None,
                netns_name: self.netns.clone(),
                ifindex: None,
                device: self.device.clone(),
                protocol: self.protocol.clone(),
                port: self.port,
                socket: None,
                culprit: self.culprit.as_ref().map(|label| {
                    Arc::new(crate::culprit::who::Grouped {
                        label: label.clone(),
                        culprit: None,
                    })
                }),
            },
        }
    }
}

/// One run's drops over its window, by [`DiffKey`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Side {
    /// Drops per key (keys of two namespaces of one name are one), and the programs' drop
    /// verdicts where [`Side::with_programs`] added them.
    pub counts: BTreeMap<DiffKey, u64>,
    /// Every drop `kfree_skb` saw, keyed or not (programs' verdicts are not in it).
    pub total: u64,
    /// Seconds the window covers (positive).
    pub seconds: f64,
    /// Packets the kernel received over the window (the denominator of a drop ratio of
    /// receive-side drops), where read.
    pub packets: Option<u64>,
    /// Packets the devices sent over the window (the denominator of a drop ratio of
    /// transmit-side drops: qdiscs, `tx_*`), where read ([`sent`]).
    pub sent: Option<u64>,
    /// Whether the programs' drop verdicts are among `counts` ([`Side::with_programs`]): a
    /// side without them has none to compare, and no verdict of the other side is new.
    pub programs: bool,
}

impl Side {
    /// The drops of `s` over `seconds` (filtered and grouped as they are to be compared).
    pub fn of(s: &Snapshot, seconds: f64, packets: Option<u64>) -> Self {
        let mut counts: BTreeMap<DiffKey, u64> = BTreeMap::new();
        for d in s.drops.iter().filter(|d| d.count > 0) {
            let c = counts.entry(DiffKey::of(&d.key)).or_default();
            *c = c.saturating_add(d.count);
        }
        Side {
            counts,
            total: s.total,
            seconds,
            packets,
            sent: None,
            programs: false,
        }
    }

    /// The side with the XDP and tc programs' drop verdicts over the same window as keys of
    /// their own (`XDP_DROP`, `TC_SHOT`, ... at `prog <name> (<hook>)`: by name, as a key's
    /// other parts, since a program's id changes with every load), grouped by `by` as the live
    /// view groups them. They are never added to `total`: a packet a tc program shot is also
    /// freed through `kfree_skb` and counted there.
    pub fn with_programs(mut self, rows: &[DropCount], by: &[Dim]) -> Self {
        for d in rows.iter().filter(|d| d.count > 0) {
            let mut k = DiffKey::of(&group::coarser(&d.key, by));
            if let std::borrow::Cow::Owned(l) = super::programs::without_id(&k.location) {
                k.location = l.into();
            }
            let c = self.counts.entry(k).or_default();
            *c = c.saturating_add(d.count);
        }
        self.programs = true;
        self
    }

    /// Drops per second of `count` drops over this window.
    pub fn rate(&self, count: u64) -> f64 {
        count as f64 / self.seconds
    }
}

/// Packets the kernel received over `s`'s window, where its counters were read: in every
/// namespace, or with a namespace filter, in the namespaces it keeps.
pub fn packets(s: &Snapshot, filter: &Filter) -> Option<u64> {
    let k = s.kernel.as_ref()?;
    Some(sum_kept(s, filter, |ns| k.netns_packets(ns)))
}

/// Packets the devices sent over `s`'s window (the denominator of transmit-side drops), where
/// its counters were read, in the namespaces [`packets`] reads.
pub fn sent(s: &Snapshot, filter: &Filter) -> Option<u64> {
    let k = s.kernel.as_ref()?;
    Some(sum_kept(s, filter, |ns| {
        k.packets_of(ns, None, super::kernel::Direction::Tx)
    }))
}

/// `of` summed over the namespaces of `s`'s kernel reading that `filter` keeps.
fn sum_kept(s: &Snapshot, filter: &Filter, of: impl Fn(u64) -> u64) -> u64 {
    let Some(k) = &s.kernel else {
        return 0;
    };
    let kept: BTreeSet<u64> = match &filter.netns {
        None => k.netns.keys().copied().collect(),
        Some(ns) => (s.drops.iter())
            .filter(|d| {
                d.key.attr.netns_name.as_deref() == Some(ns.text.as_str())
                    || (d.key.attr.netns.is_some() && d.key.attr.netns == ns.inode)
            })
            .filter_map(|d| d.key.attr.netns)
            .chain(ns.inode)
            .collect(),
    };
    kept.iter().fold(0, |t: u64, &i| t.saturating_add(of(i)))
}

/// Which way a significant change went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// More drops per second in NEW.
    Regression,
    /// Fewer.
    Improvement,
}

/// One count in both runs, and how they compare.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rates {
    /// Drops in BASE.
    pub base_count: u64,
    /// Drops in NEW.
    pub new_count: u64,
    /// BASE's drops per second.
    pub base_rate: f64,
    /// NEW's drops per second.
    pub new_rate: f64,
    /// NEW's rate over BASE's; `None` where BASE has no drops.
    pub ratio: Option<f64>,
    /// The two-sided p-value of the rates being equal.
    pub p_value: f64,
    /// The change, where significant (p below alpha).
    pub change: Option<Change>,
}

impl Rates {
    /// `base` drops in BASE's window against `new` in NEW's, significant below `alpha`.
    pub fn of(base: u64, new: u64, b: &Side, n: &Side, alpha: f64) -> Self {
        let (base_rate, new_rate) = (b.rate(base), n.rate(new));
        let p_value = poisson::rate_test(base, b.seconds, new, n.seconds);
        let change = (p_value < alpha).then_some(if new_rate > base_rate {
            Change::Regression
        } else {
            Change::Improvement
        });
        Rates {
            base_count: base,
            new_count: new,
            base_rate,
            new_rate,
            ratio: (base > 0).then(|| new_rate / base_rate),
            p_value,
            change,
        }
    }
}

/// A key in either run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The key.
    #[serde(flatten)]
    pub key: DiffKey,
    /// Its counts and rates.
    #[serde(flatten)]
    pub rates: Rates,
}

/// The comparison of two runs: every key of either, and the totals.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Every key of either run (rate 0 where a run has none), the largest change of rate first.
    pub rows: Vec<Row>,
    /// All drops, keyed or not.
    pub total: Rates,
}

impl Comparison {
    /// The keys whose rate went up significantly.
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        (self.rows.iter()).filter(|r| r.rates.change == Some(Change::Regression))
    }
}

/// Compares NEW with BASE key by key; a change is significant where its p-value is below
/// `alpha`.
pub fn compare(base: &Side, new: &Side, alpha: f64) -> Comparison {
    // The programs' verdicts are compared only where both sides counted them: a side without
    // them would read as none dropped.
    let both = base.programs && new.programs;
    let kept = |k: &DiffKey| both || !super::programs::is_program_reason(&k.reason);
    let mut keys: BTreeMap<&DiffKey, (u64, u64)> = BTreeMap::new();
    for (k, &c) in base.counts.iter().filter(|(k, _)| kept(k)) {
        keys.entry(k).or_default().0 = c;
    }
    for (k, &c) in new.counts.iter().filter(|(k, _)| kept(k)) {
        keys.entry(k).or_default().1 = c;
    }
    let mut rows: Vec<Row> = keys
        .into_iter()
        .map(|(k, (b, n))| Row {
            key: k.clone(),
            rates: Rates::of(b, n, base, new, alpha),
        })
        .collect();
    // The largest change of rate first; then by key (the sort is stable).
    rows.sort_by(|a, b| {
        let d = |r: &Row| (r.rates.new_rate - r.rates.base_rate).abs();
        d(b).total_cmp(&d(a))
    });
    Comparison {
        rows,
        total: Rates::of(base.total, new.total, base, new, alpha),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Attribution, DropCount, Reason};

    fn drop(reason: &str, netns: u64, name: Option<&str>, count: u64) -> DropCount {
        DropCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: reason.into(),
                },
                location: "f+0x1".into(),
                attr: Attribution {
                    netns: Some(netns),
                    netns_name: name.map(Into::into),
                    ..Default::default()
                },
            },
            count,
        }
    }

    fn side(drops: Vec<DropCount>, seconds: f64) -> Side {
        let total = drops.iter().map(|d| d.count).sum();
        Side::of(
            &Snapshot {
                total,
                drops,
                ..Default::default()
            },
            seconds,
            None,
        )
    }

    #[test]
    fn keys_match_by_name_across_runs_and_one_sided_keys_count_zero_on_the_other() {
        // The namespace "web" has another inode in each run; "gone" and "new" are one-sided.
        let base = side(
            vec![
                drop("NO_SOCKET", 111, Some("web"), 500),
                drop("NO_SOCKET", 112, Some("gone"), 30),
            ],
            10.0,
        );
        let new = side(
            vec![
                drop("NO_SOCKET", 222, Some("web"), 2000),
                drop("NO_SOCKET", 223, Some("new"), 40),
                drop("NO_SOCKET", 4026531840, None, 1),
            ],
            20.0,
        );
        let c = compare(&base, &new, 0.001);
        assert_eq!(c.rows.len(), 4, "{c:#?}");
        let row = |ns: &str| {
            (c.rows.iter())
                .find(|r| r.key.netns.as_deref() == Some(ns))
                .unwrap_or_else(|| panic!("no {ns} row"))
        };
        let web = row("web");
        assert_eq!((web.rates.base_rate, web.rates.new_rate), (50.0, 100.0));
        assert_eq!(web.rates.ratio, Some(2.0));
        assert_eq!(web.rates.change, Some(Change::Regression));
        assert_eq!(
            c.rows[0].key.netns.as_deref(),
            Some("web"),
            "largest change first"
        );
        let gone = row("gone");
        assert_eq!((gone.rates.new_count, gone.rates.ratio), (0, Some(0.0)));
        assert_eq!(gone.rates.change, Some(Change::Improvement));
        let fresh = row("new");
        assert_eq!((fresh.rates.base_count, fresh.rates.ratio), (0, None));
        assert_eq!(fresh.rates.change, Some(Change::Regression));
        // Without a name, the inode is the name.
        assert_eq!(row("4026531840").rates.change, None);
        assert_eq!(c.total.base_rate, 53.0);
        assert_eq!(c.regressions().count(), 2);
    }

    #[test]
    fn packets_are_those_of_the_namespaces_kept() {
        let mut reading = crate::model::KernelReading::default();
        for (ns, n) in [(111, 1000), (112, 30), (1, 5)] {
            let g = reading.netns.entry(ns).or_default();
            g.insert("Ip:InReceives".into(), n);
            g.insert("Ip6:InReceives".into(), 1);
        }
        let mut s = Snapshot {
            drops: vec![drop("NO_SOCKET", 111, Some("web"), 5)],
            ..Default::default()
        };
        assert_eq!(packets(&s, &Filter::default()), None, "no counters read");
        s.kernel = Some(Arc::new(reading));
        assert_eq!(packets(&s, &Filter::default()), Some(1038));
        let only = |text: &str| Filter {
            netns: Some(crate::model::group::NetnsFilter {
                inode: text.parse().ok(),
                text: text.into(),
            }),
            ..Default::default()
        };
        assert_eq!(packets(&s, &only("web")), Some(1001));
        assert_eq!(packets(&s, &only("112")), Some(31));
        assert_eq!(packets(&s, &only("nowhere")), Some(0));
    }

    #[test]
    fn keys_describe_themselves() {
        let k = DiffKey {
            reason: "NO_SOCKET".into(),
            location: "__udp4_lib_rcv+0x1c".into(),
            netns: Some("web1".into()),
            device: Some("lo".into()),
            protocol: Some("udp".into()),
            port: Some(53),
            culprit: None,
        };
        assert_eq!(
            k.describe(),
            "NO_SOCKET at __udp4_lib_rcv+0x1c in netns web1 on lo (udp port 53)"
        );
        let merged = DiffKey {
            reason: "*".into(),
            location: "*".into(),
            netns: Some("web1".into()),
            device: None,
            protocol: None,
            port: None,
            culprit: None,
        };
        assert_eq!(merged.describe(), "drops in netns web1");
        let by = DiffKey {
            culprit: Some("exact: rule inet f input handle 4".into()),
            ..merged.clone()
        };
        assert_eq!(
            by.describe(),
            "drops in netns web1 by exact: rule inet f input handle 4"
        );
        let shown = by.to_drop_key();
        assert_eq!(DiffKey::of(&shown), by, "the label survives the view's key");
        let long = DiffKey {
            location: "x".repeat(100_000).into(),
            ..k.clone()
        };
        assert!(
            long.describe().len() < 200 + DESCRIBED_CHARS,
            "names are cut"
        );
        assert_eq!(DiffKey::of(&k.to_drop_key()), k);
    }
}
