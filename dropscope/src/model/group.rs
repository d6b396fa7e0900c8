//! Grouping and filtering of snapshots: pure functions of the model, applied the same way to a
//! live snapshot stream and to a recording (the kernel does the same live, for less cost, from
//! the encoding in `probe::filter`).
use std::{collections::HashMap, sync::Arc};

use super::{DropCount, DropKey, KeySamples, Reason, Sample, Snapshot, StackCount};
pub use crate::vocab::dims::{
    Dim, Filter, NetnsFilter, protocol_name, protocol_number, reason_name,
};
use crate::vocab::packet;

/// A stack's frames, as a snapshot holds them.
type Frames = Arc<[Arc<str>]>;

/// A filter or grouping asks for a dimension the counts do not have. The one wording of it,
/// for `report` on a recording and for the TUI's filter alike.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {}", self.why())]
pub struct MissingDim {
    /// What asked (`--netns`, `--by device`, `/5555`, ...).
    pub what: String,
    /// The dimension missing.
    pub dim: Dim,
    /// The dimensions the counts have.
    pub had: Vec<Dim>,
}

impl MissingDim {
    /// Which dimension is not counted, and the `--by` that counts it (what was counted, and it).
    pub fn why(&self) -> String {
        let names = |dims: &[Dim]| dims.iter().map(|d| d.name()).collect::<Vec<_>>().join(",");
        let mut by = self.had.clone();
        by.push(self.dim);
        by.sort();
        by.dedup();
        format!(
            "{dim} is not counted (these drops are counted by {had}); count it with `--by {by}`",
            dim = self.dim,
            had = names(&self.had),
            by = names(&by),
        )
    }
}

impl Filter {
    /// The dimensions this filter tests, with the option that asks for each.
    fn dims(&self) -> Vec<(Dim, &'static str)> {
        let mut d = Vec::new();
        if self.netns.is_some() {
            d.push((Dim::Netns, "--netns"));
        }
        if self.device.is_some() {
            d.push((Dim::Device, "--device"));
        }
        if self.protocol.is_some() {
            d.push((Dim::Protocol, "--protocol"));
        }
        if self.port.is_some() {
            d.push((Dim::Port, "--port"));
        }
        if !self.reasons.is_empty() {
            d.push((Dim::Reason, "--reason"));
        }
        if !self.exclude_reasons.is_empty() {
            d.push((Dim::Reason, "--exclude-reason"));
        }
        d
    }

    /// Whether a count passes the filter.
    pub fn matches(&self, key: &DropKey) -> bool {
        let a = &key.attr;
        self.netns
            .as_ref()
            .is_none_or(|n| match (n.inode, a.netns) {
                (Some(want), Some(got)) => want == got,
                _ => {
                    a.netns_name.as_deref() == Some(n.text.as_str())
                        || a.netns.is_some_and(|i| i.to_string() == n.text)
                }
            })
            && self
                .device
                .as_ref()
                .is_none_or(|d| a.device.as_deref() == Some(d.as_str()))
            && self.protocol.is_none_or(|p| {
                // Its name, or its number where counts were named before it had one.
                (a.protocol.as_deref()).is_some_and(|n| n == protocol_name(p) || n == p.to_string())
            })
            && self.port.is_none_or(|p| a.port == Some(p))
            && (self.reasons.is_empty() || self.reasons.iter().any(|r| same_reason(&key.reason, r)))
            && !self
                .exclude_reasons
                .iter()
                .any(|r| same_reason(&key.reason, r))
    }
}

fn same_reason(reason: &Reason, name: &str) -> bool {
    reason.name.as_ref() == reason_name(name)
}

/// Whether `key` carries dimension `d` (a count not grouped by it has it merged away).
fn in_key(d: Dim, key: &DropKey) -> bool {
    let a = &key.attr;
    match d {
        Dim::Reason => key.reason.name.as_ref() != "*",
        Dim::Location => key.location.as_ref() != "*",
        Dim::Netns => a.netns.is_some(),
        Dim::Device => a.device.is_some() || a.ifindex.is_some(),
        Dim::Protocol => a.protocol.is_some(),
        Dim::Port => a.port.is_some(),
        Dim::Socket => a.socket.is_some(),
        Dim::Culprit => a.culprit.is_some(),
    }
}

/// The dimensions the counts of `s` have (those some key carries); `None` when it has no key
/// at all (nothing to tell).
pub fn dims_of(s: &Snapshot) -> Option<Vec<Dim>> {
    if s.drops.is_empty() {
        return None;
    }
    Some(
        Dim::ALL
            .into_iter()
            .filter(|d| s.drops.iter().any(|c| in_key(*d, &c.key)))
            .collect(),
    )
}

/// Refuses a filter or grouping on a dimension `s` lacks (a recording made with a coarser
/// `--by`, or before attribution): it would silently match nothing, or everything.
pub fn check(s: &Snapshot, filter: &Filter, by: &[Dim]) -> Result<(), MissingDim> {
    match dims_of(s) {
        Some(have) => check_dims(&have, filter, by),
        None => Ok(()),
    }
}

/// [`check`] against the dimensions counts have (`have`).
pub fn check_dims(have: &[Dim], filter: &Filter, by: &[Dim]) -> Result<(), MissingDim> {
    let asked = (filter
        .dims()
        .into_iter()
        .map(|(d, what)| (d, what.to_string())))
    .chain(by.iter().map(|&d| (d, format!("--by {d}"))));
    for (dim, what) in asked {
        // The culprit is derived from the counts, whatever they were counted by.
        if dim != Dim::Culprit && !have.contains(&dim) {
            return Err(MissingDim {
                what,
                dim,
                had: have.to_vec(),
            });
        }
    }
    Ok(())
}

/// The snapshot with only the counts, stacks and samples that pass `filter`, grouped by `by`.
/// Drops counted but never keyed (overflow) cannot be told apart: they stay, so that
/// `keyed + overflow = total` holds for what is shown.
pub fn apply(s: &Snapshot, filter: &Filter, by: &[Dim]) -> Snapshot {
    if !filter.is_set() {
        return regroup(s, by);
    }
    let kept = Snapshot {
        drops: (s.drops.iter())
            .filter(|d| filter.matches(&d.key))
            .cloned()
            .collect(),
        stacks: (s.stacks.iter())
            .filter(|st| filter.matches(&st.key))
            .cloned()
            .collect(),
        samples: (s.samples.iter())
            .filter(|k| filter.matches(&k.key))
            .cloned()
            .collect(),
        ..s.clone()
    };
    let mut out = regroup(&kept, by);
    out.total = out.keyed_sum().saturating_add(out.overflow);
    out
}

/// The snapshot with its counts grouped by `by` only: dimensions left out are merged (their
/// counts summed, their stacks' weights summed, their sampled packets pooled), so nothing is
/// lost and the invariant holds.
pub fn regroup(s: &Snapshot, by: &[Dim]) -> Snapshot {
    let mut merged: HashMap<DropKey, u64> = HashMap::with_capacity(s.drops.len());
    for d in &s.drops {
        *merged.entry(coarser(&d.key, by)).or_default() += d.count;
    }
    let mut stacks: HashMap<(DropKey, Frames), (u64, u64)> = HashMap::new();
    for st in &s.stacks {
        let e = stacks
            .entry((coarser(&st.key, by), st.frames.clone()))
            .or_default();
        e.0 = e.0.saturating_add(st.weight);
        e.1 = e.1.saturating_add(st.samples);
    }
    let mut samples: HashMap<DropKey, Vec<Sample>> = HashMap::new();
    for k in &s.samples {
        // A program's frames stay with its row, which is never regrouped here (its key comes
        // from the kernel's reading; the live view's `b` coarsens both sides alike).
        let key = if super::counter_only::is_beside(&k.key) {
            k.key.clone()
        } else {
            coarser(&k.key, by)
        };
        samples
            .entry(key)
            .or_default()
            .extend(k.packets.iter().cloned());
    }
    Snapshot {
        drops: merged
            .into_iter()
            .map(|(key, count)| DropCount { key, count })
            .collect(),
        stacks: stacks
            .into_iter()
            .map(|((key, frames), (weight, samples))| StackCount {
                key,
                frames,
                weight,
                samples,
            })
            .collect(),
        samples: samples
            .into_iter()
            .map(|(key, mut packets)| {
                packets.sort_by_key(|p| p.unix_ms);
                packets.truncate(packet::PER_KEY);
                KeySamples { key, packets }
            })
            .collect(),
        ..s.clone()
    }
}

/// Whether the counts of `key` are part of `row`, a key of the same counts grouped coarser
/// (`*` or `None` where merged away): the stacks of a row are those of the keys it covers.
pub fn covers(row: &DropKey, key: &DropKey) -> bool {
    let (r, k) = (&row.attr, &key.attr);
    let same = |want: Option<&str>, got: Option<&str>| want.is_none() || want == got;
    (&*row.reason.name == "*" || row.reason == key.reason)
        && (&*row.location == "*" || row.location == key.location)
        && (r.netns.is_none() || r.netns == k.netns)
        && match r.ifindex {
            Some(i) => k.ifindex == Some(i),
            None => same(r.device.as_deref(), k.device.as_deref()),
        }
        && same(r.protocol.as_deref(), k.protocol.as_deref())
        && (r.port.is_none() || r.port == k.port)
        && (r.socket.is_none() || r.socket == k.socket)
        && (r.culprit.is_none()
            || r.culprit.as_ref().map(|c| &c.label) == k.culprit.as_ref().map(|c| &c.label))
}

/// `key` with the dimensions not in `by` merged away. A program's verdict row keeps its reason
/// and location (the program): it is never merged with the probe's drops, which may be the
/// same packets (see [`super::programs`]); nor is a counter-only row, whose reason is its
/// counter (see [`super::counter_only`]).
pub fn coarser(key: &DropKey, by: &[Dim]) -> DropKey {
    let program = super::counter_only::is_beside(key);
    let has = |d| by.contains(&d) || (program && matches!(d, Dim::Reason | Dim::Location));
    let mut k = key.clone();
    if !has(Dim::Reason) {
        k.reason = Reason {
            code: 0,
            name: Arc::from("*"),
        };
    }
    if !has(Dim::Location) {
        k.location = Arc::from("*");
    }
    if !has(Dim::Netns) {
        // Without its namespace an interface is known by its name alone (`lo` of every
        // namespace is one row, as it reads).
        k.attr.netns = None;
        k.attr.netns_cookie = None;
        k.attr.netns_name = None;
        k.attr.ifindex = None;
    }
    if !has(Dim::Device) {
        k.attr.ifindex = None;
        k.attr.device = None;
    }
    if !has(Dim::Protocol) {
        k.attr.protocol = None;
    }
    if !has(Dim::Port) {
        k.attr.port = None;
    }
    if !has(Dim::Socket) {
        k.attr.socket = None;
    }
    if !has(Dim::Culprit) {
        k.attr.culprit = None;
    }
    k
}

#[cfg(test)]
mod tests;
