//! The series cap of one metric family: at most `--max-series` series, kept once given, shared
//! out between network namespaces, with every other label set summed into one `other` series.
//!
//! A series is an identity (a drop key, a namespace's device, ...), not a label set: its labels
//! follow the names as they resolve, in the same slot. Slots go to the host (the initial
//! namespace, or no namespace at all) and to namespaces root named first: a namespace takes at
//! most a share of the limit, and the namespaces anyone could make take a smaller share, and
//! a quarter of the limit between them all.
use std::{collections::HashMap, hash::Hash, sync::Arc};

/// Longest label value exported, in bytes; longer values are cut at a character boundary and
/// end in `…`.
pub const MAX_LABEL_BYTES: usize = 256;

/// Label values, sanitized, one per label of the family.
pub type LabelValues = Arc<[Arc<str>]>;

/// Makes a kernel-provided string safe as a label value: control, bidi, format and invisible
/// characters become `?` (the renderer escapes `\`, `"` and newlines; none survive here but
/// the first two) and the value is bounded to [`MAX_LABEL_BYTES`] (see
/// [`crate::sanitize::metric_label`]).
pub fn sanitize(value: &str) -> Arc<str> {
    crate::sanitize::metric_label(value, MAX_LABEL_BYTES)
}

/// Whose a series is, for the shares of the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tenant {
    /// The initial namespace, or none (a grouping without namespaces).
    Host,
    /// A namespace root named: an `ip netns` name, a container, pod, machine or service.
    Named(u64),
    /// Any other namespace: named after a process in it, claimed by a user, or not named yet.
    Unnamed(u64),
}

impl Tenant {
    /// The tenant of namespace `netns`, named `name` (as the names resolver gives it), where
    /// the initial namespace is `initial` (if known).
    pub fn of(netns: Option<u64>, name: Option<&str>, initial: Option<u64>) -> Self {
        Self::of_key(netns, None, name, initial)
    }

    /// [`Tenant::of`] for a drop's key, which also knows its namespace's cookie: a namespace
    /// is then its own tenant by its cookie, so one that ended never spends the share of a
    /// later namespace given its inode (the kernel gives freed inodes again).
    pub fn of_key(
        netns: Option<u64>,
        cookie: Option<u64>,
        name: Option<&str>,
        initial: Option<u64>,
    ) -> Self {
        let id = |ns: u64| cookie.unwrap_or(ns);
        match (netns, name) {
            (None, _) => Tenant::Host,
            (Some(ns), _) if Some(ns) == initial => Tenant::Host,
            (Some(_), Some("host")) => Tenant::Host,
            (Some(ns), Some(n)) if crate::names::given_by_root(n) => Tenant::Named(id(ns)),
            (Some(ns), _) => Tenant::Unnamed(id(ns)),
        }
    }
}

/// How many series each kind of tenant may hold, out of `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shares {
    /// Every series (`--max-series`); the host may take all that is free.
    pub max: usize,
    /// A named namespace, each (a tenth).
    pub named_each: usize,
    /// Named namespaces together (a half).
    pub named_all: usize,
    /// Any other namespace, each (a twentieth).
    pub unnamed_each: usize,
    /// Other namespaces together (a quarter): the host always keeps a quarter.
    pub unnamed_all: usize,
}

impl Shares {
    /// The shares of `max` series.
    pub fn of(max: usize) -> Self {
        Self {
            max,
            named_each: max.div_ceil(10),
            named_all: max.div_ceil(2),
            unnamed_each: max.div_ceil(20),
            unnamed_all: max / 4,
        }
    }
}

/// One series of a snapshot as the family reads it.
#[derive(Clone, Debug)]
pub struct Row<K> {
    /// What the series is of (names excluded).
    pub id: K,
    /// Whose it is.
    pub tenant: Tenant,
    /// Its label values as read, not sanitized (an empty value is left out when rendered).
    pub labels: Vec<Arc<str>>,
    /// Its cumulative count.
    pub count: u64,
}

/// One exported series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// Label values in the order of the family's labels.
    pub labels: LabelValues,
    /// Cumulative count.
    pub count: u64,
}

/// A family once capped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capped {
    /// The exported series, largest count first.
    pub series: Vec<Series>,
    /// The `other` series: the sum of every label set not exported; `None` until there is one
    /// (from then on it is always shown).
    pub other: Option<u64>,
    /// How many identities that sum covers now.
    pub other_sets: usize,
}

impl Capped {
    /// Sum over every series, `other` included.
    pub fn sum(&self) -> u64 {
        self.series.iter().map(|s| s.count).sum::<u64>() + self.other.unwrap_or(0)
    }
}

/// Where a series stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// First seen in this snapshot.
    New,
    /// Exported, counting from `base` (what `other` had of it when it got its slot).
    Exported { base: u64 },
    /// Summed into `other`.
    Other,
}

#[derive(Debug)]
struct Slot {
    raw: Box<[Arc<str>]>,
    labels: LabelValues,
    tenant: Tenant,
    state: State,
}

/// Series held, per kind of tenant.
#[derive(Default)]
struct Usage {
    all: usize,
    named: usize,
    unnamed: usize,
    per_ns: HashMap<u64, usize>,
}

impl Usage {
    fn room(&self, s: &Shares, t: Tenant) -> bool {
        let ns = |n| self.per_ns.get(&n).copied().unwrap_or(0);
        self.all < s.max
            && match t {
                Tenant::Host => true,
                Tenant::Named(n) => self.named < s.named_all && ns(n) < s.named_each,
                Tenant::Unnamed(n) => self.unnamed < s.unnamed_all && ns(n) < s.unnamed_each,
            }
    }

    fn take(&mut self, t: Tenant) {
        self.all += 1;
        match t {
            Tenant::Host => return,
            Tenant::Named(_) => self.named += 1,
            Tenant::Unnamed(_) => self.unnamed += 1,
        }
        if let Tenant::Named(n) | Tenant::Unnamed(n) = t {
            *self.per_ns.entry(n).or_default() += 1;
        }
    }
}

/// Chooses which series of one family are exported, at most `max` of them.
///
/// Every series is a Prometheus counter, so none may go down nor go away while it counts: a
/// series once exported stays exported for the life of the server, whatever its labels become,
/// and `other` never goes down. Free slots go to the host first, then to named namespaces, then
/// to the others, largest count first, each within its [`Shares`] (counted by whose each series
/// is now: a namespace that gets its name moves its series to the named share). A series summed
/// into `other` that later gets a slot (its namespace was named after its first counts) counts
/// from then on, and `other` keeps what it had of it. The series and `other` sum to the
/// family's total.
#[derive(Debug)]
pub struct Cap<K> {
    shares: Shares,
    index: HashMap<K, usize>,
    slots: Vec<Slot>,
    /// What `other` keeps of series that left it for a slot of their own.
    kept: u64,
    /// Whether `other` has been shown.
    other_shown: bool,
}

impl<K: Hash + Eq> Cap<K> {
    /// A cap of `max` series.
    pub fn new(max: usize) -> Self {
        Self {
            shares: Shares::of(max),
            index: HashMap::new(),
            slots: Vec::new(),
            kept: 0,
            other_shown: false,
        }
    }

    /// Applies the cap to one snapshot's rows (updating which series are exported, and their
    /// labels). A row repeated is summed.
    pub fn select(&mut self, rows: impl IntoIterator<Item = Row<K>>) -> Capped {
        let mut counts: Vec<Option<u64>> = Vec::new();
        for row in rows {
            let i = self.slot(row);
            if counts.len() <= i.0 {
                counts.resize(self.slots.len(), None);
            }
            *counts[i.0].get_or_insert(0) += i.1;
        }
        self.grant(&counts);
        let mut out = Capped::default();
        let mut other = self.kept;
        for (slot, count) in self.slots.iter().zip(&counts) {
            let Some(count) = *count else { continue };
            match slot.state {
                State::Exported { base } => out.series.push(Series {
                    labels: Arc::clone(&slot.labels),
                    count: count.saturating_sub(base),
                }),
                State::Other | State::New => {
                    other += count;
                    out.other_sets += 1;
                }
            }
        }
        self.other_shown |= out.other_sets > 0;
        out.other = self.other_shown.then_some(other);
        merge(&mut out.series);
        out
    }

    /// The slot of a row, its labels brought up to date; and the row's count.
    fn slot(&mut self, row: Row<K>) -> (usize, u64) {
        let Row {
            id,
            tenant,
            labels,
            count,
        } = row;
        let i = match self.index.get(&id) {
            Some(&i) => i,
            None => {
                self.slots.push(Slot {
                    raw: Box::default(),
                    labels: Arc::default(),
                    tenant,
                    state: State::New,
                });
                self.index.insert(id, self.slots.len() - 1);
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[i];
        slot.tenant = tenant;
        if *slot.raw != *labels {
            slot.labels = labels.iter().map(|v| sanitize(v)).collect();
            slot.raw = labels.into();
        }
        (i, count)
    }

    /// Gives free slots to the series of this snapshot without one, in the order of
    /// [`Cap`]; the rest are summed into `other`.
    fn grant(&mut self, counts: &[Option<u64>]) {
        let mut usage = Usage::default();
        for slot in &self.slots {
            if let State::Exported { .. } = slot.state {
                usage.take(slot.tenant);
            }
        }
        let shares = self.shares;
        let mut waiting: Vec<(usize, u64)> = (self.slots.iter().zip(counts).enumerate())
            .filter_map(|(i, (slot, c))| Some((i, slot, (*c)?)))
            .filter(|(_, slot, _)| slot.state != State::Other || usage.room(&shares, slot.tenant))
            .filter(|(_, slot, _)| !matches!(slot.state, State::Exported { .. }))
            .map(|(i, _, c)| (i, c))
            .collect();
        let rank = |t: Tenant| match t {
            Tenant::Host => 0,
            Tenant::Named(_) => 1,
            Tenant::Unnamed(_) => 2,
        };
        waiting.sort_unstable_by(|&(a, ca), &(b, cb)| {
            let (a, b) = (&self.slots[a], &self.slots[b]);
            (rank(a.tenant).cmp(&rank(b.tenant)))
                .then(cb.cmp(&ca))
                .then_with(|| a.labels.cmp(&b.labels))
        });
        for (i, count) in waiting {
            let slot = &mut self.slots[i];
            if usage.room(&shares, slot.tenant) {
                usage.take(slot.tenant);
                let base = if slot.state == State::Other { count } else { 0 };
                self.kept += base;
                slot.state = State::Exported { base };
            } else {
                slot.state = State::Other;
            }
        }
    }
}

/// Sums the series whose labels coincide (two identities named alike, or alike once
/// sanitized) and orders them largest count first.
fn merge(series: &mut Vec<Series>) {
    series.sort_unstable_by(|a, b| a.labels.cmp(&b.labels));
    series.dedup_by(|b, a| {
        let same = a.labels == b.labels;
        if same {
            a.count += b.count;
        }
        same
    });
    series.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.labels.cmp(&b.labels)));
}
