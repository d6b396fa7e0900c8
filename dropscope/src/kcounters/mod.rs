//! The kernel's own drop counters beside the probe's counts: `/proc/net/snmp`,
//! `/proc/net/snmp6`, `/proc/net/netstat`, `/proc/net/softnet_stat` and the per-interface drop
//! columns of `/proc/net/dev`, read per network namespace, as deltas over the same window as
//! the drops.
//!
//! Which namespaces: the initial one, every namespace named under `/run/netns` (`ip netns`),
//! and every namespace where drops are seen (by the inode on their keys, opened through a
//! process in it). A namespace first read
//! after the window started counts from its first reading. Counters are read once per call to
//! [`KernelCounters::poll`], on one short-lived thread (see [`netns`]).
pub mod map;
pub mod netns;
pub mod parse;
pub mod unseen;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use self::unseen::{CounterDelta, SeenDrop, Unseen};
use self::{netns::Namespaces, parse::Counters};
use crate::model::Snapshot;

/// Counter deltas and unseen drops over one window: what the report and the TUI show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelView {
    /// The initial namespace's inode number.
    pub initial_netns: u64,
    /// Counters that grew, per namespace.
    pub counters: Vec<CounterDelta>,
    /// Drops counted by the kernel but not seen by the probe; `None` while drops are filtered
    /// (the probe then does not count every drop, so nothing can be called unseen).
    pub unseen: Option<Vec<Unseen>>,
    /// The drop filters in force, described, when there are any.
    pub filter: Option<String>,
    /// Namespaces that could not be read.
    pub errors: Vec<String>,
    /// Human names of namespaces (from the drops' keys; control characters escaped).
    pub names: BTreeMap<u64, String>,
}

impl KernelView {
    /// How a namespace is shown: `init`, its name and inode, or its inode.
    pub fn netns_label(&self, netns: u64) -> String {
        match self.names.get(&netns) {
            _ if netns == self.initial_netns => format!("{netns} (init)"),
            Some(n) => format!("{netns} ({n})"),
            None => netns.to_string(),
        }
    }
}

/// Reads the kernel's counters at the start of a window and on every poll.
#[derive(Debug)]
pub struct KernelCounters {
    namespaces: Namespaces,
    baseline: BTreeMap<u64, Counters>,
    latest: BTreeMap<u64, Counters>,
    errors: Vec<String>,
    filter: Option<String>,
}

impl KernelCounters {
    /// Opens the namespaces and reads the baseline: the window starts now.
    pub fn start() -> anyhow::Result<Self> {
        let mut namespaces = Namespaces::new()?;
        namespaces.refresh(&[]);
        let (baseline, errors) = namespaces.read();
        Ok(Self {
            namespaces,
            latest: baseline.clone(),
            baseline,
            errors,
            filter: None,
        })
    }

    /// Notes the drop filters in force (described): with any, unseen drops are not computed.
    pub fn with_filter(mut self, filter: Option<String>) -> Self {
        self.filter = filter;
        self
    }

    /// Reads the counters again (once), also in the namespaces of `netns` (inode numbers of
    /// namespaces where drops were seen).
    pub fn poll(&mut self, netns: &[u64]) {
        self.namespaces.refresh(netns);
        let (now, errors) = self.namespaces.read();
        for (ns, c) in &now {
            self.baseline.entry(*ns).or_insert_with(|| c.clone());
        }
        self.latest = now;
        self.errors = errors;
    }

    /// The initial namespace's inode number.
    pub fn initial_netns(&self) -> u64 {
        self.namespaces.initial()
    }

    /// Deltas since the start, and the unseen drops given the probe's counts over the same
    /// window (`snap`, cumulative since the session started).
    pub fn view(&self, snap: &Snapshot) -> KernelView {
        let counters = unseen::deltas(&self.baseline, &self.latest);
        let initial = self.initial_netns();
        let unseen = match self.filter {
            None => Some(unseen::unseen(&counters, seen_drops(snap), initial)),
            Some(_) => None,
        };
        KernelView {
            initial_netns: initial,
            counters,
            unseen,
            filter: self.filter.clone(),
            errors: self.errors.clone(),
            names: snap
                .drops
                .iter()
                .filter_map(|d| Some((d.key.attr.netns?, d.key.attr.netns_name.as_deref()?)))
                .map(|(i, n)| (i, n.escape_debug().to_string()))
                .collect(),
        }
    }
}

/// The probe's keyed counts as [`SeenDrop`]s, with the namespace of their key when the probe
/// knows it (a drop without one counts for the initial namespace).
pub fn seen_drops(snap: &Snapshot) -> impl Iterator<Item = SeenDrop<'_>> + Clone {
    snap.drops.iter().map(|d| SeenDrop {
        netns: d.key.attr.netns,
        reason: &d.key.reason.name,
        location: &d.key.location,
        count: d.count,
    })
}

/// The namespaces where drops were seen (inode numbers), to read their counters too.
pub fn drop_netns(snap: &Snapshot) -> Vec<u64> {
    let mut v: Vec<u64> = snap.drops.iter().filter_map(|d| d.key.attr.netns).collect();
    v.sort_unstable();
    v.dedup();
    v
}
