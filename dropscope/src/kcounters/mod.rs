//! The kernel's own drop counters beside the probe's counts: `/proc/net/snmp`,
//! `/proc/net/snmp6`, `/proc/net/netstat`, `/proc/net/softnet_stat` (machine-wide and per CPU),
//! the per-interface drop columns of `/proc/net/dev`, and through rtnetlink each device's
//! stats64 drop and error counters and each qdisc's drops ([`rtnl`]), read per network
//! namespace, as deltas over the same window as the drops; the [`crate::ledger`] reconciles them.
//!
//! Which namespaces: the initial one, every namespace named under `/run/netns` (`ip netns`),
//! and every namespace where drops are seen (by the inode on their keys, entered through a
//! process in it) while a process is still in it. A namespace first read after the window
//! started counts from its first reading; one that is gone keeps the growth last read, and is
//! forgotten if it had none. Counters are read on dropscope's reading thread (see [`netns`]):
//! asked for and taken in when ended ([`KernelCounters::ask`], [`KernelCounters::take`]), or
//! waited for ([`KernelCounters::poll`]), the initial namespace first, then at most
//! [`netns::MAX_READ_PER_POLL`] - 1 others within [`netns::READ_BUDGET`] (the rest in turn by
//! later readings, and a note says how many waited). No
//! namespace but the initial one is held open between calls, so none is kept alive. Where a
//! namespace's `TcpExt:ListenDrops` is not zero, its reading also finds the TCP listeners
//! whose accept queue is full, and who holds them ([`listeners`]).
//!
//! A window's bookkeeping over the values read, before a reading is made of them: a device
//! renamed or gone between two readings ([`rename`]), a counter that went back or left a
//! reading ([`resets`]), and whether a counter grew in the window ([`window`]). It needs the
//! raw values and each namespace's baseline, which only the readers hold (a reading carries
//! growth alone).
pub mod ethtool;
mod guarded;
pub mod holders;
pub mod hooks;
pub mod listeners;
pub mod netlink;
pub mod netns;
pub mod nftables;
pub mod parse;
pub mod rename;
pub mod resets;
pub mod rtnl;
pub mod sockets;
pub mod window;
pub mod xsk;

#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

pub use self::hooks::{Hook, Hooked};
use self::{
    netns::{Keep, MAX_READ_PER_POLL, Namespaces, Reading},
    parse::Counters,
};
use crate::vocab::{
    counter::{Counter, SOFTNET_DROPPED},
    reading::{Growth, KernelReading, Listener},
};

/// Reads the kernel's counters at the start of a window and on every poll.
#[derive(Debug)]
pub struct KernelCounters {
    /// Which counters a reading keeps.
    keep: Keep,
    namespaces: Namespaces,
    baseline: BTreeMap<u64, Counters>,
    latest: BTreeMap<u64, Counters>,
    /// The latest reading's notes: of its initial namespace's part, and of the others'.
    notes: [Vec<String>; 2],
    /// Wall-clock time of the latest reading, ms since the Unix epoch.
    read_unix_ms: u64,
    /// The programs attached to devices, per namespace, as the latest reading found them.
    hooks: BTreeMap<u64, Vec<Hooked>>,
    /// The namespaces where the latest reading found the programs attached whole (every dump
    /// that finds them answered): of its initial namespace's part, and of the others'.
    whole: [BTreeSet<u64>; 2],
    /// The namespaces still there, as of the latest reading.
    tracked: BTreeSet<u64>,
    /// Each namespace's devices as last read: a baseline follows a device renamed since.
    devices: BTreeMap<u64, rename::Devices>,
    /// Growth of counters that were reset since the start (see [`resets`]), per namespace:
    /// added to what they counted since.
    carried: BTreeMap<u64, Counters>,
    /// The TCP listeners whose accept queue was full, per namespace, as its latest reading
    /// found them.
    listeners: BTreeMap<u64, Vec<Listener>>,
    /// The cookie of the namespace each inode's latest reading read (where it was read).
    cookies: BTreeMap<u64, u64>,
    /// Each namespace's drop rules and their counters' growth (see [`nftables`]).
    rules: crate::culprit::window::RuleWindows,
    /// The names of the programs attached (see [`hooks`]), by id, as first read.
    prog_names: crate::culprit::programs::Names,
}

impl KernelCounters {
    /// Opens the namespaces and reads the baseline: the window starts now. Its readings keep
    /// the counters `keep` wants (the ledger's [`crate::ledger::layers::is_kept`]).
    pub fn start(keep: Keep) -> anyhow::Result<Self> {
        let mut k = Self {
            keep,
            namespaces: Namespaces::new(keep)?,
            baseline: BTreeMap::new(),
            latest: BTreeMap::new(),
            notes: Default::default(),
            read_unix_ms: 0,
            hooks: BTreeMap::new(),
            whole: Default::default(),
            tracked: BTreeSet::new(),
            devices: BTreeMap::new(),
            carried: BTreeMap::new(),
            listeners: BTreeMap::new(),
            cookies: BTreeMap::new(),
            rules: Default::default(),
            prog_names: Default::default(),
        };
        k.poll(&[]);
        Ok(k)
    }

    /// Reads the counters again (once), also in the namespaces of `netns` (inode numbers of
    /// namespaces where drops were seen).
    pub fn poll(&mut self, netns: &[u64]) {
        self.poll_searching(netns, false);
    }

    /// Like [`KernelCounters::poll`]; with `every`, in every namespace a process is in too
    /// (see [`Namespaces::refresh_searching`]).
    /// Waits at most [`netns::READ_WAIT`] for it.
    pub fn poll_searching(&mut self, netns: &[u64], every: bool) {
        self.namespaces.refresh_searching(netns, every);
        let reading = self.namespaces.read();
        self.fold_now(reading);
    }

    /// Asks for a reading (see [`KernelCounters::poll_searching`]) unless one is awaited, and
    /// returns at once; returns whether it asked. [`KernelCounters::take`] takes it in.
    pub fn ask(&mut self, netns: &[u64], every: bool) -> bool {
        if self.awaiting() {
            return false;
        }
        self.namespaces.refresh_searching(netns, every);
        self.namespaces.ask()
    }

    /// Whether a reading asked for has not been taken in yet.
    pub fn awaiting(&self) -> bool {
        self.namespaces.awaited().is_some()
    }

    /// Takes in the reading asked for if it has ended within `wait` (zero: without waiting);
    /// returns whether it did. Until then the latest reading stands, with its own time.
    pub fn take(&mut self, wait: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + wait;
        let mut took = false;
        while self.awaiting() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let Some(part) = self.namespaces.take(left) else {
                break;
            };
            self.fold_now(part);
            took = true;
        }
        took
    }

    /// Takes in `reading`, dated when it ended (or now, for one that failed as a whole).
    fn fold_now(&mut self, reading: Reading) {
        self.read_unix_ms = match reading.unix_ms {
            0 => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            t => t,
        };
        let tracked: BTreeSet<u64> = self.namespaces.inodes().collect();
        self.fold(reading, &tracked);
    }

    /// How many readings it takes to read every namespace known now once.
    pub fn readings_for_all(&self) -> u32 {
        self.namespaces.readings_for_all()
    }

    /// How many namespace reads waited for a later poll (see [`MAX_READ_PER_POLL`]) so far.
    pub fn deferred(&self) -> u64 {
        self.namespaces.deferred()
    }

    /// Takes in one reading; `tracked`: the namespaces still there.
    fn fold(&mut self, mut reading: Reading, tracked: &BTreeSet<u64>) {
        let rulesets = std::mem::take(&mut reading.rulesets);
        self.rules.fold(rulesets, &reading.first, tracked);
        // The initial namespace's part of a reading leaves the others' notes and where they
        // were read whole.
        let part = usize::from(!reading.initial_only);
        self.whole[part] = reading.hooks.keys().copied().collect();
        self.tracked.clone_from(tracked);
        // A reading that failed as a whole (a reader that did not answer) leaves where the
        // programs were last seen attached; so does each namespace not read this time (deferred
        // to a later poll, or failed), while it is there: a program attached in it goes on
        // being counted under the same name, never missing from one reading and back in the
        // next with its whole history as a window's.
        if !reading.counters.is_empty() {
            let mut hooks = reading.hooks;
            for (ns, h) in std::mem::take(&mut self.hooks) {
                if tracked.contains(&ns) {
                    hooks.entry(ns).or_insert(h);
                }
            }
            self.hooks = hooks;
            self.prog_names.learn(&self.hooks);
        }
        // Each namespace read now: the full listeners it has now (none, where none is).
        let mut listeners = reading.listeners;
        for ns in reading.counters.keys() {
            match listeners.remove(ns) {
                Some(l) => self.listeners.insert(*ns, l),
                None => self.listeners.remove(ns),
            };
        }
        self.listeners.retain(|ns, _| tracked.contains(ns));
        self.cookies.extend(std::mem::take(&mut reading.cookies));
        self.cookies.retain(|ns, _| tracked.contains(ns));
        let mut devices = reading.devices;
        // Counters of deleted devices, and counters no longer read of devices still there,
        // each kept within a budget of their own, shared out over the namespaces read (the
        // initial and named ones first): none can crowd out another's.
        let first: BTreeSet<u64> = std::iter::once(self.namespaces.initial())
            .chain(self.namespaces.named())
            .collect();
        let mut budget = rename::Shares::new(reading.counters.keys(), &first);
        let mut missing = rename::Shares::new(reading.counters.keys(), &first);
        for (ns, mut c) in reading.counters {
            let first = reading.first.contains(&ns);
            // The latest reading, its names as they are now.
            let mut previous = (!first).then(|| self.latest.get(&ns).cloned()).flatten();
            let now = devices.remove(&ns);
            // Without a device list this time (its link dump failed), the last one stands in:
            // a device renamed or made meanwhile is left out until a reading knows it (its old
            // name's counters are kept, as missing ones).
            let last = self.devices.get(&ns).filter(|_| !first);
            if let (None, Some(last)) = (&now, last) {
                rename::known_only(&mut c, last);
            }
            // A device renamed since its namespace's last reading takes its baseline with it.
            if let Some(now) = &now {
                rename::known_only(&mut c, now);
                if let Some(before) = last {
                    if let Some(base) = self.baseline.remove(&ns) {
                        (self.baseline).insert(ns, rename::follow(base, before, now));
                    }
                    if let Some(carried) = self.carried.remove(&ns) {
                        (self.carried).insert(ns, rename::follow(carried, before, now));
                    }
                }
            }
            // A device gone keeps the growth last read, and so does one kept so before,
            // whether this reading has a device list, the last one has, or both: a reading
            // whose link dump failed (or the first with a list) never drops what was kept.
            let lists = match (&now, last) {
                (Some(now), Some(before)) => Some((before, now)),
                (Some(list), None) | (None, Some(list)) => Some((list, list)),
                (None, None) => None,
            };
            if let (Some(lists), Some(latest)) = (lists, self.latest.get(&ns).filter(|_| !first)) {
                let window = window::Window::new(self.baseline.get(&ns), self.carried.get(&ns));
                let mut share = budget.of(ns);
                rename::keep_gone(&mut c, latest, window, lists, &mut share);
                budget.spent(share);
            }
            if let (Some(now), Some(before)) = (&now, last) {
                previous = previous.map(|p| rename::follow(p, before, now));
            }
            if first {
                self.carried.remove(&ns);
            }
            // A counter missing from this reading keeps its growth; one that went back counts
            // on from zero, its growth carried.
            if let Some(previous) = &previous {
                let window = window::Window::new(self.baseline.get(&ns), self.carried.get(&ns));
                let devices = now.as_ref().or(last);
                let mut share = missing.of(ns);
                resets::keep_missing(&mut c, previous, window, devices, &mut share);
                missing.spent(share);
                if let Some(base) = self.baseline.get_mut(&ns) {
                    let carried = self.carried.entry(ns).or_default();
                    resets::carry_resets(&c, previous, base, carried);
                }
            }
            if let Some(now) = now {
                self.devices.insert(ns, now);
            } else if first {
                // An inode used again: its earlier namespace's devices are not this one's.
                self.devices.remove(&ns);
            }
            // A first reading is a baseline, even where an inode's earlier namespace left one.
            if first || !self.baseline.contains_key(&ns) {
                self.baseline.insert(ns, c.clone());
            }
            self.latest.insert(ns, c);
        }
        // A namespace that is gone keeps the growth last read; one without any is forgotten.
        let (baseline, carried) = (&self.baseline, &self.carried);
        self.latest.retain(|ns, c| {
            tracked.contains(ns)
                || baseline.get(ns).is_some_and(|b| b != c)
                || carried.get(ns).is_some_and(|c| !c.is_empty())
        });
        let latest = &self.latest;
        self.baseline
            .retain(|ns, _| tracked.contains(ns) || latest.contains_key(ns));
        self.carried
            .retain(|ns, c| !c.is_empty() && latest.contains_key(ns));
        self.devices.retain(|ns, _| tracked.contains(ns));
        let notes = &mut self.notes[part];
        *notes = reading.errors;
        for (left_out, what) in [
            (budget.left_out, "of deleted devices"),
            (missing.left_out, "no longer read (qdiscs, queues, sockets)"),
        ] {
            if left_out > 0 {
                notes.push(format!(
                    "{left_out} counters {what} not kept (at most {} are, each namespace \
                     read a share): their growth left the window",
                    rename::MAX_GONE_COUNTERS
                ));
            }
        }
        if reading.deferred > 0 {
            notes.push(format!(
                "{} namespaces not read this time (at most {MAX_READ_PER_POLL} a reading, \
                 within {:.0?}): read in turn by the next readings",
                reading.deferred,
                netns::READ_BUDGET
            ));
        }
    }

    /// The programs attached to devices, per namespace.
    pub fn hooks(&self) -> &BTreeMap<u64, Vec<Hooked>> {
        &self.hooks
    }

    /// Whether a program not attached in namespace `ns` now is known not to be: the latest
    /// reading found its programs whole (every dump that finds them answered), or `ns` is gone.
    /// A note about another namespace (deferred, failed, a dump cut short) says nothing of it.
    pub fn programs_read(&self, ns: u64) -> bool {
        self.whole.iter().any(|w| w.contains(&ns)) || !self.tracked.contains(&ns)
    }

    /// The initial namespace's inode number.
    pub fn initial_netns(&self) -> u64 {
        self.namespaces.initial()
    }

    /// The growth since the start, per namespace: the drop counters (those [`map`] knows)
    /// and the packet counters (denominators of drop ratios), as a snapshot carries them.
    pub fn reading(&self) -> KernelReading {
        let (mut netns, mut devices) = (BTreeMap::new(), BTreeMap::new());
        for (ns, now) in &self.latest {
            let Some(base) = self.baseline.get(ns) else {
                continue;
            };
            let carried = self.carried.get(ns);
            let mut g: Growth = now
                .iter()
                .filter(|(name, _)| (self.keep)(name))
                .filter_map(|(name, &v)| {
                    let d = v.saturating_sub(base.get(name).copied().unwrap_or(0));
                    let d =
                        d.saturating_add(carried.and_then(|c| c.get(name)).copied().unwrap_or(0));
                    (d > 0).then(|| (Arc::from(name.as_str()), d))
                })
                .collect();
            // What a counter no longer kept counted in its earlier runs stays in the window.
            for (name, &d) in carried.into_iter().flatten() {
                if d > 0 && (self.keep)(name) && !now.contains_key(name) {
                    g.insert(Arc::from(name.as_str()), d);
                }
            }
            // The machine's backlog drops: the CPUs' growth, summed (see `parse::softnet`).
            if !now.contains_key(SOFTNET_DROPPED) {
                let cpus = (g.iter())
                    .filter(|(n, _)| {
                        matches!(
                            Counter::parse(n),
                            Some(Counter::Softnet {
                                stat: "dropped",
                                ..
                            })
                        )
                    })
                    .fold(0u64, |t, (_, d)| t.saturating_add(*d));
                if cpus > 0 {
                    g.insert(Arc::from(SOFTNET_DROPPED), cpus);
                }
            }
            if g.is_empty() {
                continue;
            }
            // The devices its counters name, so that a window between two readings follows a
            // device renamed between them.
            let named: BTreeSet<&str> = g
                .keys()
                .filter_map(|n| crate::vocab::devices::device_of(n))
                .collect();
            let known = (self.devices.get(ns).into_iter().flatten())
                .filter(|(_, name)| named.contains(name.as_str()))
                .map(|(i, name)| (*i, name.clone()))
                .collect::<rename::Devices>();
            if !known.is_empty() {
                devices.insert(*ns, known);
            }
            netns.insert(*ns, g);
        }
        KernelReading {
            unix_ms: self.read_unix_ms,
            initial_netns: self.initial_netns(),
            netns,
            errors: self.notes.concat(),
            devices,
            listeners: self.listeners.clone(),
            cookies: self.cookies.clone(),
            rules: self.rules.windows(),
            attached: self.prog_names.attached(&self.hooks),
            attributed: true,
            // Named by the collector, which names the drops' namespaces.
            names: BTreeMap::new(),
        }
    }
}
