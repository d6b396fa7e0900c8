//! Table rows from cumulative snapshots: exact counts, rates over the last interval, shares,
//! bounded trends, sorting, the text filter and coarser groupings (summed, never lost).
use std::{
    borrow::Cow,
    cmp::Ordering,
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::Duration,
};

use super::group::{self, Dim};
use super::{DropCount, DropKey, Health, KernelReading, Snapshot, counter_only, programs};

/// How many intervals of history a trend keeps.
pub const TREND_LEN: usize = 64;

/// How far back the default order looks: drops of the last minute (see [`SortKey::Recent`]).
pub const RECENT: Duration = Duration::from_secs(60);
/// The steps [`RECENT`] is counted in: a drop leaves the window 60 to 70 s after it was counted.
const RECENT_STEP: Duration = Duration::from_secs(10);
/// Steps a key keeps: those of [`RECENT`], and the current one.
const RECENT_STEPS: usize = (RECENT.as_secs() / RECENT_STEP.as_secs()) as usize + 1;

/// The column the table is sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// Exact drops within the last minute ([`RECENT`]), highest first: what a person reading
    /// an incident wants on top, a burst that just ended above a trickle that began since.
    #[default]
    Recent,
    /// Drops per second over the last interval, highest first.
    Rate,
    /// Exact cumulative count, highest first.
    Count,
    /// Reason name, A to Z.
    Reason,
    /// Kernel location, A to Z.
    Location,
}

impl SortKey {
    /// The next sort in the cycle last minute, rate, count, reason, location.
    pub fn next(self) -> Self {
        match self {
            Self::Recent => Self::Rate,
            Self::Rate => Self::Count,
            Self::Count => Self::Reason,
            Self::Reason => Self::Location,
            Self::Location => Self::Recent,
        }
    }

    /// Whether its natural order is highest first (the numbers), not A to Z (the names).
    pub fn descending(self) -> bool {
        matches!(self, Self::Recent | Self::Rate | Self::Count)
    }

    /// A short name for the header.
    pub fn label(self) -> &'static str {
        match self {
            Self::Recent => "last 1m",
            Self::Rate => "rate",
            Self::Count => "count",
            Self::Reason => "reason",
            Self::Location => "location",
        }
    }
}

/// What the tracker knows about one key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyStats {
    /// Exact cumulative count.
    pub count: u64,
    /// Drops per second over the last interval; `None` until two snapshots were seen.
    pub rate: Option<f64>,
    /// Drops per second of the last [`TREND_LEN`] intervals, oldest first.
    pub trend: VecDeque<u64>,
    /// Exact drops per step of [`RECENT_STEP`] over the last minute.
    recent: Steps,
}

/// Exact drops per step of [`RECENT_STEP`] of the session time: a ring of the last
/// [`RECENT_STEPS`], each slot tagged with its step (plus one: 0 is an empty slot).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Steps([(u64, u64); RECENT_STEPS]);

impl Steps {
    /// The step of session time `elapsed`.
    fn step(elapsed: Duration) -> u64 {
        elapsed.as_secs() / RECENT_STEP.as_secs()
    }

    /// Counts `n` drops in `step`.
    fn add(&mut self, step: u64, n: u64) {
        if n == 0 {
            return;
        }
        let slot = &mut self.0[(step % RECENT_STEPS as u64) as usize];
        if slot.0 != step + 1 {
            *slot = (step + 1, 0);
        }
        slot.1 = slot.1.saturating_add(n);
    }

    /// The drops counted in the last minute as of `step`: in it and the steps of [`RECENT`]
    /// before it.
    fn sum(&self, step: u64) -> u64 {
        let oldest = (step + 1).saturating_sub(RECENT_STEPS as u64 - 1);
        (self.0.iter())
            .filter(|(tag, _)| (oldest..=step + 1).contains(tag) && *tag > 0)
            .fold(0, |t: u64, (_, n)| t.saturating_add(*n))
    }

    /// `other`'s drops added, step by step (for keys merged into one row).
    fn merge(&mut self, other: &Steps) {
        for &(tag, n) in &other.0 {
            if tag > 0 {
                self.add(tag - 1, n);
            }
        }
    }
}

/// dropscope's own cost over the last interval, from [`Health`] differences.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Userspace CPU time as a percentage of one CPU.
    pub cpu_percent: Option<f64>,
    /// Syscalls per second, when the collector counts them.
    pub syscalls_per_sec: Option<f64>,
    /// Whether the kernel reports BPF run statistics (`kernel.bpf_stats_enabled`).
    pub bpf_stats: bool,
    /// Mean BPF program run time in ns over the interval, when it ran at all.
    pub bpf_ns_per_run: Option<f64>,
}

impl Cost {
    fn between(a: &Health, b: &Health, secs: f64) -> Self {
        let cpu_percent = Some(b.self_cpu_us.saturating_sub(a.self_cpu_us) as f64 / secs / 1e4);
        let syscalls_per_sec = match (a.self_syscalls, b.self_syscalls) {
            (Some(x), Some(y)) => Some(y.saturating_sub(x) as f64 / secs),
            _ => None,
        };
        let bpf_ns_per_run = match (a.bpf_run_ns, a.bpf_run_cnt, b.bpf_run_ns, b.bpf_run_cnt) {
            (Some(ns0), Some(n0), Some(ns1), Some(n1)) if n1 > n0 => {
                Some(ns1.saturating_sub(ns0) as f64 / (n1 - n0) as f64)
            }
            _ => None,
        };
        Self {
            cpu_percent,
            syscalls_per_sec,
            bpf_stats: b.bpf_run_ns.is_some() && b.bpf_run_cnt.is_some(),
            bpf_ns_per_run,
        }
    }
}

/// One table row, borrowed from a [`Tracker`] (or merged from several of its keys).
#[derive(Clone, Debug, PartialEq)]
pub struct Row<'a> {
    /// The key (coarser than the kernel's when regrouped).
    pub key: Cow<'a, DropKey>,
    /// Exact cumulative count.
    pub count: u64,
    /// Drops per second over the last interval, if known.
    pub rate: Option<f64>,
    /// Exact drops within the last minute ([`RECENT`]; the default order).
    pub recent: u64,
    /// Percentage of all drops (cumulative count over the cumulative total, with the program
    /// and counter-only rows' counts added to it where there are any).
    pub share: f64,
    /// Recent rates, oldest first.
    pub trend: Cow<'a, VecDeque<u64>>,
    /// Drops per packet its namespace (or device) received, or sent for transmit-side drops,
    /// over the window between the last two readings of the kernel's counters (see
    /// [`Tracker::ratio_window`]); `None` where the row's key has no namespace, or there is no
    /// ratio (see [`crate::ledger::ratio::of`]).
    pub ratio: Option<f64>,
}

/// The window drop ratios are computed over: between two readings of the kernel's counters.
#[derive(Clone, Debug, Default)]
struct RatioWindow {
    /// Its length.
    length: Duration,
    /// Drops per key over it.
    drops: HashMap<DropKey, u64>,
    /// The counters' growth over it.
    packets: Arc<KernelReading>,
}

/// The packets a key's drops are a part of in `r`: those its namespace (or device, where the
/// key has one) received, or for transmit-side drops sent (see
/// [`crate::ledger::layers::direction`]).
fn packets_of(r: &KernelReading, key: &DropKey) -> Option<u64> {
    let netns = key.attr.netns?;
    let direction = crate::ledger::layers::direction(&key.reason.name, &key.location);
    let device = key.attr.device.as_deref().filter(|d| *d != "*");
    Some(r.packets_of(netns, device, direction))
}

/// Turns a stream of cumulative snapshots into per-key rates and trends.
///
/// A snapshot older than the previous one (a replay seek) restarts the history.
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    latest: Option<Snapshot>,
    interval: Option<Duration>,
    keys: HashMap<DropKey, KeyStats>,
    total_rate: Option<f64>,
    total_trend: VecDeque<u64>,
    cost: Cost,
    /// The latest reading of the kernel's counters and the counts of the first snapshot that
    /// carried it: where the next ratio window starts.
    ratio_base: Option<(Arc<KernelReading>, HashMap<DropKey, u64>)>,
    ratio: Option<RatioWindow>,
    /// The program rows' counts summed (see [`programs`]): they are shares of the total and
    /// these together.
    program_total: u64,
    /// The counter-only rows' counts summed (see [`counter_only`]), shares like the programs'.
    counter_only_total: u64,
    /// How many keys are rows beside the probe's (programs' and counters' rows).
    beside_keys: usize,
}

/// Adds `t` to `sum` element-wise, aligned on the latest interval.
fn add_trend(sum: &mut VecDeque<u64>, t: &VecDeque<u64>) {
    while sum.len() < t.len() {
        sum.push_front(0);
    }
    let off = sum.len() - t.len();
    for (i, v) in t.iter().enumerate() {
        sum[off + i] = sum[off + i].saturating_add(*v);
    }
}

/// Adds `rate` to a trend, dropping the oldest beyond [`TREND_LEN`].
fn push_trend(trend: &mut VecDeque<u64>, rate: f64) {
    if trend.len() == TREND_LEN {
        trend.pop_front();
    }
    // A trickle below 1/s still shows as a non-empty bar.
    let v = if rate > 0.0 {
        rate.round().max(1.0)
    } else {
        0.0
    };
    trend.push_back(v as u64);
}

impl Tracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in the next snapshot. Returns `true` when it restarted the history (its `elapsed` is
    /// smaller than the previous snapshot's).
    ///
    /// The XDP and tc programs' drop verdicts its kernel reading carries are rows too (see
    /// [`programs`]), and so are the drops only a kernel counter saw (see [`counter_only`]):
    /// beside the probe's, and never in its total.
    pub fn push(&mut self, snap: Snapshot) -> bool {
        let prev = self.latest.take();
        let reset = prev.as_ref().is_some_and(|p| snap.elapsed < p.elapsed);
        let progs = programs::of_snapshot(&snap);
        let counters = counter_only::of_snapshot(&snap);
        let rows = || snap.drops.iter().chain(&progs).chain(&counters);
        let step = Steps::step(snap.elapsed);
        match prev {
            Some(prev) if snap.elapsed > prev.elapsed => self.advance(&prev, &snap, rows()),
            Some(_) if !reset => {
                // Same instant: take the counts, keep the rates.
                for d in rows() {
                    let stats = stats_of(&mut self.keys, &d.key);
                    stats.recent.add(step, d.count.saturating_sub(stats.count));
                    stats.count = d.count;
                }
            }
            _ => {
                *self = Self::default();
                // The counts of a session's first minute are recent; those found at a seek
                // far into a recording are not.
                let recent = snap.elapsed <= RECENT;
                for d in rows() {
                    let stats = stats_of(&mut self.keys, &d.key);
                    stats.count = d.count;
                    if recent {
                        stats.recent.add(step, d.count);
                    }
                }
            }
        }
        let sum = |rows: &[DropCount]| rows.iter().fold(0, |t: u64, d| t.saturating_add(d.count));
        self.program_total = sum(&progs);
        self.counter_only_total = sum(&counters);
        self.beside_keys = (self.keys.keys())
            .filter(|k| counter_only::is_beside(k))
            .count();
        self.next_ratio_window(&snap);
        self.latest = Some(snap);
        reset
    }

    /// With a new reading of the kernel's counters, the window since the one before.
    fn next_ratio_window(&mut self, snap: &Snapshot) {
        let Some(r) = &snap.kernel else { return };
        if self
            .ratio_base
            .as_ref()
            .is_some_and(|(b, _)| b.unix_ms == r.unix_ms)
        {
            return;
        }
        let counts: HashMap<DropKey, u64> = snap
            .drops
            .iter()
            .map(|d| (d.key.clone(), d.count))
            .collect();
        if let Some((base, before)) = self.ratio_base.take()
            && r.unix_ms > base.unix_ms
        {
            let drops = (counts.iter())
                .map(|(k, &n)| {
                    (
                        k.clone(),
                        n.saturating_sub(before.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect();
            self.ratio = Some(RatioWindow {
                length: Duration::from_millis(r.unix_ms - base.unix_ms),
                drops,
                packets: Arc::new(r.since(&base)),
            });
        }
        self.ratio_base = Some((r.clone(), counts));
    }

    /// The length of the window drop ratios are over, once two readings were seen.
    pub fn ratio_window(&self) -> Option<Duration> {
        self.ratio.as_ref().map(|w| w.length)
    }

    /// A row's drop ratio: its drops over the window (`drops`) per packet its key's namespace
    /// or device received then.
    fn ratio(&self, key: &DropKey, drops: u64) -> Option<f64> {
        // The ratio window holds the probe's drops only: a program's or a counter's row has
        // none to divide.
        if counter_only::is_beside(key) {
            return None;
        }
        let w = self.ratio.as_ref()?;
        let packets = packets_of(&w.packets, key)?;
        crate::ledger::ratio::of(drops, packets)
    }

    fn advance<'s>(
        &mut self,
        prev: &Snapshot,
        snap: &Snapshot,
        rows: impl Iterator<Item = &'s DropCount> + Clone,
    ) {
        let dt = snap.elapsed.saturating_sub(prev.elapsed);
        let secs = dt.as_secs_f64();
        self.interval = Some(dt);
        let step = Steps::step(snap.elapsed);
        let mut seen = 0usize;
        for d in rows.clone() {
            let stats = stats_of(&mut self.keys, &d.key);
            let grown = d.count.saturating_sub(stats.count);
            stats.recent.add(step, grown);
            let rate = grown as f64 / secs;
            stats.count = d.count;
            stats.rate = Some(rate);
            push_trend(&mut stats.trend, rate);
            seen += 1;
        }
        if seen < self.keys.len() {
            // Keys absent from this snapshot did not grow.
            let present: std::collections::HashSet<&DropKey> = rows.map(|d| &d.key).collect();
            for (k, stats) in self.keys.iter_mut() {
                if !present.contains(k) {
                    stats.rate = Some(0.0);
                    push_trend(&mut stats.trend, 0.0);
                }
            }
        }
        let total_rate = snap.total.saturating_sub(prev.total) as f64 / secs;
        self.total_rate = Some(total_rate);
        push_trend(&mut self.total_trend, total_rate);
        self.cost = Cost::between(&prev.health, &snap.health, secs);
    }

    /// The latest snapshot, if any.
    pub fn latest(&self) -> Option<&Snapshot> {
        self.latest.as_ref()
    }

    /// Length of the last interval rates were computed over.
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// All drops per second over the last interval.
    pub fn total_rate(&self) -> Option<f64> {
        self.total_rate
    }

    /// Recent total rates, oldest first.
    pub fn total_trend(&self) -> &VecDeque<u64> {
        &self.total_trend
    }

    /// dropscope's own cost over the last interval.
    pub fn cost(&self) -> Cost {
        self.cost
    }

    /// The program rows' counts summed (XDP and tc programs' drop verdicts, not in the total).
    pub fn program_total(&self) -> u64 {
        self.program_total
    }

    /// The counter-only rows' counts summed (drops only a kernel counter saw, not in the
    /// total).
    pub fn counter_only_total(&self) -> u64 {
        self.counter_only_total
    }

    /// Number of distinct keys seen.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// How many of the keys are rows beside the probe's: programs' verdicts and counter-only
    /// drops.
    pub fn beside_keys(&self) -> usize {
        self.beside_keys
    }

    /// Drops of `key` over the ratio window.
    fn window_drops(&self, key: &DropKey) -> u64 {
        (self.ratio.as_ref())
            .and_then(|w| w.drops.get(key))
            .copied()
            .unwrap_or(0)
    }

    /// The rows whose key matches `filter` (see [`matches()`]), sorted by `sort`.
    pub fn rows(&self, sort: SortKey, filter: &str) -> Vec<Row<'_>> {
        self.grouped_rows(sort, filter, None, true)
    }

    /// The rows grouped by `by` only (`None`: as counted), whose key matches `filter`, sorted by
    /// `sort`. Merged keys sum their counts, rates and trends, so no drop is lost. Without
    /// `programs`, the rows beside the probe's (programs' verdicts, counter-only drops) are
    /// left out, and out of the shares' whole.
    pub fn grouped_rows(
        &self,
        sort: SortKey,
        filter: &str,
        by: Option<&[Dim]>,
        programs: bool,
    ) -> Vec<Row<'_>> {
        let program_total = if programs {
            self.program_total.saturating_add(self.counter_only_total)
        } else {
            0
        };
        let total = (self.latest.as_ref().map_or(0, |s| s.total)).saturating_add(program_total);
        let share = |count: u64| {
            if total == 0 {
                0.0
            } else {
                count as f64 * 100.0 / total as f64
            }
        };
        let terms = terms(filter);
        let step = Steps::step(self.latest.as_ref().map_or(Duration::ZERO, |s| s.elapsed));
        let mut rows: Vec<Row<'_>> = match by {
            None => self
                .keys
                .iter()
                .filter(|(k, _)| programs || !counter_only::is_beside(k))
                .filter(|(k, _)| matches_terms(k, &terms))
                .map(|(key, s)| Row {
                    key: Cow::Borrowed(key),
                    count: s.count,
                    rate: s.rate,
                    recent: s.recent.sum(step),
                    share: share(s.count),
                    trend: Cow::Borrowed(&s.trend),
                    ratio: self.ratio(key, self.window_drops(key)),
                })
                .collect(),
            Some(by) => {
                let mut merged: HashMap<DropKey, KeyStats> = HashMap::new();
                let mut window: HashMap<DropKey, u64> = HashMap::new();
                for (k, s) in
                    (self.keys.iter()).filter(|(k, _)| programs || !counter_only::is_beside(k))
                {
                    let coarser = group::coarser(k, by);
                    *window.entry(coarser.clone()).or_default() += self.window_drops(k);
                    let m = merged.entry(coarser).or_default();
                    m.count = m.count.saturating_add(s.count);
                    m.rate = match (m.rate, s.rate) {
                        (Some(a), Some(b)) => Some(a + b),
                        (a, b) => a.or(b),
                    };
                    add_trend(&mut m.trend, &s.trend);
                    m.recent.merge(&s.recent);
                }
                merged
                    .into_iter()
                    .filter(|(k, _)| matches_terms(k, &terms))
                    .map(|(key, s)| Row {
                        ratio: self.ratio(&key, window.get(&key).copied().unwrap_or(0)),
                        key: Cow::Owned(key),
                        count: s.count,
                        rate: s.rate,
                        recent: s.recent.sum(step),
                        share: share(s.count),
                        trend: Cow::Owned(s.trend),
                    })
                    .collect()
            }
        };
        rows.sort_by(|a, b| compare(sort, a, b));
        rows
    }
}

/// The statistics of `key`, whose names (attributes, not part of its identity) are those of
/// the latest snapshot: a renamed namespace keeps its row and shows its new name, a socket
/// what was found of it last.
fn stats_of<'a>(keys: &'a mut HashMap<DropKey, KeyStats>, key: &DropKey) -> &'a mut KeyStats {
    let renamed = keys.get_key_value(key).is_some_and(|(k, _)| {
        k.attr.netns_name != key.attr.netns_name
            || k.attr.device != key.attr.device
            || k.attr.socket.as_ref().map(|s| &s.about)
                != key.attr.socket.as_ref().map(|s| &s.about)
    });
    if renamed && let Some(stats) = keys.remove(key) {
        keys.insert(key.clone(), stats);
    }
    keys.entry(key.clone()).or_default()
}

fn by_count(a: &Row<'_>, b: &Row<'_>) -> Ordering {
    b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key))
}

fn compare(sort: SortKey, a: &Row<'_>, b: &Row<'_>) -> Ordering {
    match sort {
        SortKey::Recent => b.recent.cmp(&a.recent).then_with(|| by_count(a, b)),
        SortKey::Rate => {
            let (ra, rb) = (a.rate.unwrap_or(0.0), b.rate.unwrap_or(0.0));
            rb.total_cmp(&ra).then_with(|| by_count(a, b))
        }
        SortKey::Count => by_count(a, b),
        SortKey::Reason => a
            .key
            .reason
            .name
            .cmp(&b.key.reason.name)
            .then_with(|| by_count(a, b)),
        SortKey::Location => a
            .key
            .location
            .cmp(&b.key.location)
            .then_with(|| by_count(a, b)),
    }
}

fn terms(filter: &str) -> Vec<String> {
    filter.split_whitespace().map(str::to_lowercase).collect()
}

fn matches_terms(key: &DropKey, terms: &[String]) -> bool {
    if terms.is_empty() {
        return true;
    }
    let a = &key.attr;
    let fields: Vec<String> = [
        Some(key.reason.name.to_lowercase()),
        Some(key.location.to_lowercase()),
        a.netns_name.as_deref().map(str::to_lowercase),
        a.netns.map(|n| n.to_string()),
        a.device.as_deref().map(str::to_lowercase),
        a.protocol.as_deref().map(str::to_lowercase),
        a.port.map(|p| p.to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    terms
        .iter()
        .all(|t| fields.iter().any(|f| f.contains(t.as_str())))
}

/// Why the text filter `filter` finds nothing in counts grouped by `have`, when that is why: a
/// term that can only be a port (a number from 1 to 65535) or a protocol (its name) while
/// that dimension is not counted. The same wording as `report` refusing `--port` on such
/// counts (see [`group::check_dims`]).
pub fn uncounted(filter: &str, have: &[Dim]) -> Option<group::MissingDim> {
    terms(filter).into_iter().find_map(|term| {
        let mut f = group::Filter::default();
        if term.bytes().all(|b| b.is_ascii_digit()) {
            f.port = term.parse().ok().filter(|&p| p > 0);
        } else {
            f.protocol = group::protocol_number(&term);
        }
        (f.is_set())
            .then(|| group::check_dims(have, &f, &[]).err())
            .flatten()
            .map(|e| group::MissingDim {
                what: format!("/{term}"),
                ..e
            })
    })
}

/// Whether `key` passes the text filter: every whitespace-separated term of `filter` occurs,
/// ignoring case, in the reason name, the location, or an attribution (namespace name or
/// inode, interface, protocol, port). An empty filter matches everything.
pub fn matches(key: &DropKey, filter: &str) -> bool {
    matches_terms(key, &terms(filter))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DropCount;

    fn key(name: &str, loc: &str) -> DropKey {
        crate::fixtures::key(name.len() as u32, name, loc)
    }

    fn snap(secs: u64, counts: &[(&str, &str, u64)]) -> Snapshot {
        let drops = (counts.iter())
            .map(|&(r, l, n)| DropCount {
                key: key(r, l),
                count: n,
            })
            .collect();
        crate::fixtures::snap(secs, drops, 0)
    }

    fn names(rows: &[Row<'_>]) -> Vec<String> {
        rows.iter()
            .map(|r| format!("{}@{}", r.key.reason.name, r.key.location))
            .collect()
    }

    /// What only a kernel counter saw is a row of its own (the counter, `(counter only)`),
    /// with a rate, found by the text filter, kept apart when regrouped, hidden with the
    /// programs' under drop filters, and outside the probe's total.
    #[test]
    fn counter_only_drops_are_rows_beside_the_probes() {
        let with = |secs: u64, listen: u64| {
            let mut s = snap(secs, &[("NO_SOCKET", "__udp4_lib_rcv", 10)]);
            let mut r = KernelReading {
                unix_ms: 1000 * secs,
                initial_netns: 7,
                ..Default::default()
            };
            let ns = r.netns.entry(7).or_default();
            ns.insert(Arc::from("TcpExt:ListenDrops"), listen);
            ns.insert(Arc::from("TcpExt:ListenOverflows"), listen);
            s.kernel = Some(Arc::new(r));
            s
        };
        let mut t = Tracker::new();
        t.push(with(1, 50));
        t.push(with(2, 90));
        let rows = t.rows(SortKey::Count, "");
        assert_eq!(
            names(&rows),
            [
                "TcpExt:ListenDrops@(counter only)",
                "NO_SOCKET@__udp4_lib_rcv"
            ]
        );
        assert_eq!((rows[0].count, rows[0].rate), (90, Some(40.0)));
        assert!(counter_only::is_counter_only(&rows[0].key));
        assert_eq!(t.counter_only_total(), 90);
        assert_eq!(t.latest().map(|s| s.total), Some(10));
        assert_eq!(t.rows(SortKey::Count, "listendrops").len(), 1);
        let grouped = t.grouped_rows(SortKey::Count, "", Some(&[Dim::Netns]), true);
        assert_eq!(
            names(&grouped),
            ["TcpExt:ListenDrops@(counter only)", "*@*"]
        );
        let probe = t.grouped_rows(SortKey::Count, "", None, false);
        assert_eq!(names(&probe), ["NO_SOCKET@__udp4_lib_rcv"]);
        assert_eq!(t.beside_keys(), 1);
    }

    /// The programs' verdicts a reading carries are rows of their own, with rates from one
    /// snapshot to the next, kept apart when regrouped, and outside the probe's total.
    #[test]
    fn program_verdicts_are_rows_beside_the_probes() {
        let with = |secs: u64, kfree: u64, xdp: u64| {
            let mut s = snap(secs, &[("NOT_SPECIFIED", "veth_xdp_rcv_skb", kfree)]);
            let mut r = KernelReading {
                unix_ms: 1000 * secs,
                ..Default::default()
            };
            let ns = r.netns.entry(7).or_default();
            ns.insert(Arc::from("Xdp:vb:xdpdrv:ds_drop#42:drop"), xdp);
            // The packets vb received: a drop ratio's denominator for a row on vb.
            ns.insert(Arc::from("Dev:vb:RxPackets"), 1000 * secs);
            s.kernel = Some(Arc::new(r));
            s
        };
        let mut t = Tracker::new();
        t.push(with(1, 10, 100));
        t.push(with(2, 30, 400));
        let rows = t.rows(SortKey::Count, "");
        assert_eq!(
            names(&rows),
            [
                "XDP_DROP@prog ds_drop#42 (xdpdrv)",
                "NOT_SPECIFIED@veth_xdp_rcv_skb"
            ]
        );
        assert_eq!((rows[0].count, rows[0].rate), (400, Some(300.0)));
        assert!(programs::is_program(&rows[0].key) && !programs::is_program(&rows[1].key));
        // Shares are of every row's count; the probe's total is its own.
        assert!((rows[0].share - 400.0 * 100.0 / 430.0).abs() < 1e-9);
        assert_eq!(t.latest().map(|s| s.total), Some(30));
        assert_eq!(t.total_rate(), Some(20.0));
        // Grouped by namespace only, the program's row is not merged into the probe's.
        let by = [Dim::Netns];
        let grouped = t.grouped_rows(SortKey::Count, "", Some(&by), true);
        assert_eq!(
            names(&grouped),
            ["XDP_DROP@prog ds_drop#42 (xdpdrv)", "*@*"]
        );
        assert_eq!(grouped[1].count, 30);
        // The text filter finds it by program, verdict or device.
        for f in ["ds_drop", "xdp_drop", "vb"] {
            assert_eq!(t.rows(SortKey::Count, f).len(), 1, "{f}");
        }
        // Without the programs (drops filtered), neither their row nor their share's part.
        let probe = t.grouped_rows(SortKey::Count, "", None, false);
        assert_eq!(names(&probe), ["NOT_SPECIFIED@veth_xdp_rcv_skb"]);
        assert!((probe[0].share - 100.0).abs() < 1e-9, "{}", probe[0].share);
        let probe = t.grouped_rows(SortKey::Count, "", Some(&by), false);
        assert_eq!(
            (names(&probe), probe[0].share),
            (vec!["*@*".to_string()], 100.0)
        );
        // No drop ratio, though vb's packets are known: the ratio window holds the probe's
        // drops only (a ratio would read 0).
        assert!(t.ratio_window().is_some());
        assert_eq!(rows[0].ratio, None);
    }

    /// A row of transmit-side drops (a qdisc's) is over the packets its device sent.
    #[test]
    fn a_qdisc_drops_ratio_is_over_the_packets_sent() {
        let with = |secs: u64, drops: u64| {
            let mut s = snap(secs, &[("QDISC_DROP", "__dev_xmit_skb+0x2f0", drops)]);
            for d in &mut s.drops {
                d.key.attr.netns = Some(7);
                d.key.attr.device = Some(Arc::from("ux3v0"));
            }
            let mut r = KernelReading {
                unix_ms: 1000 * secs,
                ..Default::default()
            };
            let ns = r.netns.entry(7).or_default();
            ns.insert(Arc::from("Dev:ux3v0:RxPackets"), secs);
            ns.insert(Arc::from("Dev:ux3v0:TxPackets"), 50_000 * secs);
            s.kernel = Some(Arc::new(r));
            s
        };
        let mut t = Tracker::new();
        t.push(with(1, 0));
        t.push(with(2, 406));
        let rows = t.rows(SortKey::Count, "");
        assert_eq!(rows[0].ratio, Some(406.0 / 50_000.0));
    }

    /// A namespace renamed between polls (its process renamed itself) is one row with its
    /// exact count and the new name, and the shares still sum to 100%.
    #[test]
    fn a_renamed_namespace_keeps_its_row() {
        let named = |name: &str, n: u64, secs: u64| {
            let mut k = key("NO_SOCKET", "a");
            k.attr.netns = Some(4026532999);
            k.attr.netns_name = Some(name.into());
            Snapshot {
                elapsed: Duration::from_secs(secs),
                total: n,
                drops: vec![DropCount { key: k, count: n }],
                ..Default::default()
            }
        };
        let mut t = Tracker::new();
        for (i, name) in ["sh[7]", "x1[7]", "x2[7]", "x3[7]"].iter().enumerate() {
            t.push(named(name, 100 * (i as u64 + 1), i as u64 + 1));
        }
        let rows = t.rows(SortKey::Count, "");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].count, 400);
        assert_eq!(rows[0].rate, Some(100.0));
        assert!((rows[0].share - 100.0).abs() < 1e-9);
        assert_eq!(rows[0].key.attr.netns_name.as_deref(), Some("x3[7]"));
        assert_eq!(
            t.rows(SortKey::Count, "x3").len(),
            1,
            "found by its new name"
        );
    }

    #[test]
    fn rates_come_from_consecutive_snapshots() {
        let mut t = Tracker::new();
        t.push(snap(1, &[("NO_SOCKET", "a", 10), ("OTHER", "b", 4)]));
        let rows = t.rows(SortKey::Count, "");
        assert_eq!(rows[0].count, 10);
        assert_eq!(rows[0].rate, None);
        assert!(rows[0].trend.is_empty());
        t.push(snap(
            3,
            &[("NO_SOCKET", "a", 30), ("OTHER", "b", 4), ("NEW", "c", 6)],
        ));
        let rows = t.rows(SortKey::Count, "");
        assert_eq!(names(&rows), ["NO_SOCKET@a", "NEW@c", "OTHER@b"]);
        assert_eq!(rows[0].rate, Some(10.0));
        assert_eq!(rows[1].rate, Some(3.0));
        assert_eq!(rows[2].rate, Some(0.0));
        assert_eq!(t.total_rate(), Some(13.0));
        assert_eq!(t.interval(), Some(Duration::from_secs(2)));
        assert_eq!(rows[0].trend.iter().copied().collect::<Vec<_>>(), [10]);
        assert!((rows[0].share - 75.0).abs() < 1e-9);
    }

    #[test]
    fn elapsed_going_back_resets_history() {
        let mut t = Tracker::new();
        assert!(!t.push(snap(1, &[("A", "a", 1)])));
        assert!(!t.push(snap(2, &[("A", "a", 5), ("B", "b", 1)])));
        assert_eq!(t.key_count(), 2);
        assert!(t.push(snap(1, &[("A", "a", 1)])));
        assert_eq!(t.key_count(), 1);
        let rows = t.rows(SortKey::Rate, "");
        assert_eq!(rows[0].rate, None);
        assert!(rows[0].trend.is_empty());
        assert_eq!(t.total_rate(), None);
        t.push(snap(2, &[("A", "a", 3)]));
        assert_eq!(t.rows(SortKey::Rate, "")[0].rate, Some(2.0));
    }

    #[test]
    fn same_instant_updates_counts_but_keeps_rates() {
        let mut t = Tracker::new();
        t.push(snap(1, &[("A", "a", 1)]));
        t.push(snap(2, &[("A", "a", 5)]));
        assert!(!t.push(snap(2, &[("A", "a", 6)])));
        let rows = t.rows(SortKey::Rate, "");
        assert_eq!((rows[0].count, rows[0].rate), (6, Some(4.0)));
    }

    #[test]
    fn trend_is_bounded() {
        let mut t = Tracker::new();
        for i in 0..(TREND_LEN as u64 + 10) {
            t.push(snap(i + 1, &[("A", "a", i * i)]));
        }
        let rows = t.rows(SortKey::Rate, "");
        assert_eq!(rows[0].trend.len(), TREND_LEN);
        assert_eq!(t.total_trend().len(), TREND_LEN);
        // A trickle below one per second stays visible.
        let mut t = Tracker::new();
        t.push(snap(0, &[("A", "a", 0)]));
        t.push(snap(10, &[("A", "a", 1)]));
        assert_eq!(t.rows(SortKey::Rate, "")[0].trend[0], 1);
    }

    #[test]
    fn sorts_cycle_and_order_rows() {
        let mut s = SortKey::default();
        let mut seen = vec![s];
        for _ in 0..4 {
            s = s.next();
            seen.push(s);
        }
        assert_eq!(
            seen,
            [
                SortKey::Recent,
                SortKey::Rate,
                SortKey::Count,
                SortKey::Reason,
                SortKey::Location,
            ]
        );
        assert_eq!(s.next(), SortKey::Recent);
        let mut t = Tracker::new();
        t.push(snap(1, &[("B", "z", 100), ("A", "y", 1), ("C", "x", 10)]));
        t.push(snap(2, &[("B", "z", 101), ("A", "y", 50), ("C", "x", 20)]));
        assert_eq!(names(&t.rows(SortKey::Rate, "")), ["A@y", "C@x", "B@z"]);
        assert_eq!(names(&t.rows(SortKey::Count, "")), ["B@z", "A@y", "C@x"]);
        assert_eq!(names(&t.rows(SortKey::Reason, "")), ["A@y", "B@z", "C@x"]);
        assert_eq!(names(&t.rows(SortKey::Location, "")), ["C@x", "A@y", "B@z"]);
    }

    /// The default order is by drops in the last minute: a burst that just ended stays above
    /// a newer trickle until it is more than a minute old.
    #[test]
    fn recent_holds_a_burst_for_a_minute_then_lets_it_go() {
        let mut t = Tracker::new();
        t.push(snap(1, &[]));
        for secs in 2..=10 {
            t.push(snap(secs, &[("BURST", "a", 1000)]));
        }
        t.push(snap(11, &[("BURST", "a", 1000), ("V6", "b", 2)]));
        let rows = t.rows(SortKey::default(), "");
        assert_eq!(names(&rows), ["BURST@a", "V6@b"]);
        assert_eq!((rows[0].recent, rows[1].recent), (1000, 2));
        // Under the last interval's rate the trickle would be on top.
        assert_eq!(names(&t.rows(SortKey::Rate, "")), ["V6@b", "BURST@a"]);
        // 80 s on, the burst is out of the window, and three more drops of the trickle in.
        t.push(snap(90, &[("BURST", "a", 1000), ("V6", "b", 5)]));
        let rows = t.rows(SortKey::default(), "");
        assert_eq!(names(&rows), ["V6@b", "BURST@a"]);
        assert_eq!((rows[0].recent, rows[1].recent), (3, 0));
        // Regrouped, the window's drops are summed.
        let all = t.grouped_rows(SortKey::Recent, "", Some(&[Dim::Netns]), true);
        assert_eq!((all.len(), all[0].recent, all[0].count), (1, 3, 1005));
        // Counts found at a replay's seek far into a recording are not recent drops.
        let mut t = Tracker::new();
        t.push(snap(300, &[("OLD", "a", 50)]));
        assert_eq!(t.rows(SortKey::Recent, "")[0].recent, 0);
        // At the start of a session they are.
        let mut t = Tracker::new();
        t.push(snap(1, &[("NEW", "a", 50)]));
        assert_eq!(t.rows(SortKey::Recent, "")[0].recent, 50);
    }

    #[test]
    fn filter_matches_reason_or_location_all_terms_any_case() {
        let mut t = Tracker::new();
        t.push(snap(
            1,
            &[
                ("NO_SOCKET", "__udp4_lib_rcv+0x9b0", 3),
                ("NO_SOCKET", "tcp_v4_rcv+0x10", 2),
                ("NETFILTER_DROP", "nf_hook_slow+0x9e", 1),
            ],
        ));
        assert_eq!(t.rows(SortKey::Count, "").len(), 3);
        assert_eq!(t.rows(SortKey::Count, "no_sock").len(), 2);
        assert_eq!(
            names(&t.rows(SortKey::Count, "socket UDP")),
            ["NO_SOCKET@__udp4_lib_rcv+0x9b0"]
        );
        assert_eq!(t.rows(SortKey::Count, "nf_hook").len(), 1);
        assert!(t.rows(SortKey::Count, "nothing").is_empty());
        assert!(matches(&key("NO_SOCKET", "x"), "  "));
    }

    #[test]
    fn grouped_rows_sum_counts_rates_and_trends_and_filter_attribution() {
        let attr = |k: DropKey, ns: u64, dev: &str| DropKey {
            attr: crate::model::Attribution {
                netns: Some(ns),
                device: Some(dev.into()),
                ..Default::default()
            },
            ..k
        };
        let at = |secs: u64, a: u64, b: u64, c: u64| {
            let drops = vec![
                DropCount {
                    key: attr(key("A", "x"), 1, "lo"),
                    count: a,
                },
                DropCount {
                    key: attr(key("B", "y"), 1, "eth0"),
                    count: b,
                },
                DropCount {
                    key: attr(key("A", "x"), 2, "lo"),
                    count: c,
                },
            ];
            Snapshot {
                elapsed: Duration::from_secs(secs),
                total: a + b + c,
                drops,
                ..Default::default()
            }
        };
        let mut t = Tracker::new();
        t.push(at(1, 10, 20, 0));
        t.push(at(2, 15, 30, 4));
        let by_ns = t.grouped_rows(SortKey::Count, "", Some(&[Dim::Netns]), true);
        assert_eq!(by_ns.len(), 2);
        assert_eq!((by_ns[0].count, by_ns[0].rate), (45, Some(15.0)));
        assert_eq!(by_ns[0].trend.iter().copied().collect::<Vec<_>>(), [15]);
        assert_eq!(by_ns[0].key.attr.device, None);
        assert_eq!((by_ns[1].count, by_ns[1].key.attr.netns), (4, Some(2)));
        let by_reason = t.grouped_rows(
            SortKey::Count,
            "",
            Some(&[Dim::Reason, Dim::Location]),
            true,
        );
        assert_eq!(names(&by_reason), ["B@y", "A@x"]);
        assert_eq!(by_reason[1].count, 19);
        assert_eq!(t.rows(SortKey::Count, "eth0").len(), 1);
        assert_eq!(t.rows(SortKey::Count, "lo 2").len(), 1);
        let mut sum = VecDeque::from([1, 2]);
        add_trend(&mut sum, &VecDeque::from([5, 5, 5]));
        assert_eq!(sum, [5, 6, 7]);
    }

    #[test]
    fn cost_comes_from_health_differences() {
        let mut a = snap(1, &[]);
        a.health.self_cpu_us = 1_000;
        a.health.self_syscalls = Some(10);
        a.health.bpf_run_ns = Some(1_000);
        a.health.bpf_run_cnt = Some(10);
        let mut b = snap(3, &[]);
        b.health.self_cpu_us = 21_000;
        b.health.self_syscalls = Some(20);
        b.health.bpf_run_ns = Some(5_000);
        b.health.bpf_run_cnt = Some(110);
        let mut t = Tracker::new();
        t.push(a);
        t.push(b.clone());
        let c = t.cost();
        assert!((c.cpu_percent.expect("cpu") - 1.0).abs() < 1e-9);
        assert_eq!(c.syscalls_per_sec, Some(5.0));
        assert!(c.bpf_stats);
        assert_eq!(c.bpf_ns_per_run, Some(40.0));
        let mut off = b.clone();
        off.elapsed = Duration::from_secs(4);
        off.health.bpf_run_ns = None;
        off.health.bpf_run_cnt = None;
        off.health.self_syscalls = None;
        t.push(off);
        let c = t.cost();
        assert!(!c.bpf_stats);
        assert_eq!(c.bpf_ns_per_run, None);
        assert_eq!(c.syscalls_per_sec, None);
    }
}
