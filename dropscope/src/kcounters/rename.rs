//! A device renamed, gone, or its name taken by a new device between two readings: its
//! baseline follows it by interface index, so a window holds its growth, never its whole
//! history; a device gone keeps the growth last read, as a gone namespace does (within its
//! namespace's share of [`MAX_GONE_COUNTERS`]).
//!
//! Per-device counters are named by the device (`Link:<dev>:…`, `Dev:<dev>:…`,
//! `Qdisc:<dev>:…`, `Ethtool:<dev>:…`, `Xsk:<dev>:…`), and growth is the latest value minus the
//! baseline under the same name. A device renamed between two readings (as udev or a container
//! runtime renames one) would count from zero under its new name, its whole history as the
//! window's; a device created under the name of one deleted would count from the old one's
//! values.
use std::collections::HashMap;

use super::window::Window;
use crate::vocab::counter::Counters;
use crate::vocab::devices::split;
pub use crate::vocab::devices::{Devices, follow};

/// Adds to `now_counters` (read with the devices `now`) the counters of `latest` (read with
/// the devices `before`) of each device gone since, and of each kept so before, that grew
/// in the `window`: their growth stays in the window, as a gone namespace's does (one that
/// did not grow is forgotten). A device renamed is not gone (its baseline follows it), and a
/// gone device whose name a new device took is not kept: the name is the new device's.
pub fn keep_gone(
    now_counters: &mut Counters,
    latest: &Counters,
    window: Window,
    (before, now): (&Devices, &Devices),
    budget: &mut GoneBudget,
) {
    let is: std::collections::HashSet<&str> = now.values().map(String::as_str).collect();
    let was: HashMap<&str, u32> = before.iter().map(|(i, n)| (n.as_str(), *i)).collect();
    for (name, &v) in latest {
        let Some((_, dev, _)) = split(name) else {
            continue;
        };
        let renamed = was.get(dev).is_some_and(|i| now.contains_key(i));
        if renamed || is.contains(dev) || !window.grew(name, v) || now_counters.contains_key(name) {
            continue;
        }
        if budget.take() {
            now_counters.insert(name.clone(), v);
        }
    }
}

/// The most counters of gone devices kept over all namespaces of one reading (and as many of
/// counters no longer read, see [`super::resets::keep_missing`]): a process that makes and
/// deletes devices cannot grow the readings without bound. Each namespace has a share of it
/// (see [`Shares`]).
pub const MAX_GONE_COUNTERS: usize = 4096;

/// [`MAX_GONE_COUNTERS`] shared out over the namespaces of one reading: the initial namespace
/// and named ones (`ip netns`) share half, the others the other half (a group alone has all of
/// it), each namespace an equal part of its group's. A namespace whose devices are made and
/// deleted in bulk fills its own part, never another's.
#[derive(Debug)]
pub struct Shares {
    first: std::collections::BTreeSet<u64>,
    per_first: usize,
    per_other: usize,
    /// Counters that grew and were not kept, in every namespace.
    pub left_out: usize,
}

impl Shares {
    /// The shares of the namespaces `read`, those of `first` (the initial and named ones)
    /// served first.
    pub fn new<'a>(
        read: impl IntoIterator<Item = &'a u64>,
        first: &std::collections::BTreeSet<u64>,
    ) -> Self {
        let (firsts, others): (Vec<u64>, Vec<u64>) =
            read.into_iter().partition(|ns| first.contains(ns));
        let half = |n: usize, other: usize| match (n, other) {
            (0, _) => 0,
            (n, 0) => MAX_GONE_COUNTERS / n,
            (n, _) => MAX_GONE_COUNTERS / 2 / n,
        };
        Shares {
            per_first: half(firsts.len(), others.len()),
            per_other: half(others.len(), firsts.len()),
            first: firsts.into_iter().collect(),
            left_out: 0,
        }
    }

    /// Namespace `ns`'s share, to spend on its counters; [`Shares::spent`] takes it back.
    pub fn of(&self, ns: u64) -> GoneBudget {
        GoneBudget {
            left: if self.first.contains(&ns) {
                self.per_first
            } else {
                self.per_other
            },
            left_out: 0,
        }
    }

    /// Takes back a share spent: counts what it left out.
    pub fn spent(&mut self, share: GoneBudget) {
        self.left_out += share.left_out;
    }
}

/// What one namespace's reading may still keep of gone devices' counters, and how many it
/// left out.
#[derive(Debug)]
pub struct GoneBudget {
    /// Counters it may still keep.
    pub left: usize,
    /// Counters of gone devices that grew and were not kept.
    pub left_out: usize,
}

impl GoneBudget {
    /// Takes room for one more counter, or counts it as left out.
    pub fn take(&mut self) -> bool {
        if self.left == 0 {
            self.left_out += 1;
            return false;
        }
        self.left -= 1;
        true
    }
}

impl Default for GoneBudget {
    fn default() -> Self {
        Self {
            left: MAX_GONE_COUNTERS,
            left_out: 0,
        }
    }
}

/// Leaves out of `counters` those of devices not in `now`, read in the same reading: a device
/// made or renamed between the reading of `/proc/net/dev` and the link dump has `Dev:`
/// counters under a name the dump does not know (read under its name next time).
pub fn known_only(counters: &mut Counters, now: &Devices) {
    let is: std::collections::HashSet<&str> = now.values().map(String::as_str).collect();
    counters.retain(|name, _| split(name).is_none_or(|(_, dev, _)| is.contains(dev)));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::vocab::devices::tests::{counters, devices};

    #[test]
    fn a_gone_device_keeps_its_last_values_unless_its_name_was_taken() {
        let latest = counters(&[
            ("Link:a:rx_dropped", 10),
            ("Dev:a:RxDrop", 10),
            ("Link:b:rx_dropped", 4),
            ("Link:c:rx_dropped", 3),
            ("Udp:NoPorts", 9),
        ]);
        // `a` gone; `b` gone and its name taken by a new device; `c` still there.
        let mut now = counters(&[("Link:c:rx_dropped", 5), ("Udp:NoPorts", 11)]);
        // `a`'s `Dev:` counter did not grow in the window: forgotten.
        let base = counters(&[("Link:a:rx_dropped", 2), ("Dev:a:RxDrop", 10)]);
        let (before, after) = (
            devices(&[(2, "a"), (3, "b"), (4, "c")]),
            devices(&[(4, "c"), (9, "b")]),
        );
        let mut budget = GoneBudget::default();
        keep_gone(
            &mut now,
            &latest,
            Window::new(Some(&base), None),
            (&before, &after),
            &mut budget,
        );
        let kept = counters(&[
            ("Link:a:rx_dropped", 10),
            ("Link:c:rx_dropped", 5),
            ("Udp:NoPorts", 11),
        ]);
        assert_eq!(now, kept);
        // The next reading, `a` known to neither list: its growth is still kept.
        let mut next = counters(&[("Link:c:rx_dropped", 6)]);
        keep_gone(
            &mut next,
            &now,
            Window::new(Some(&base), None),
            (&after, &after),
            &mut budget,
        );
        assert_eq!(
            next,
            counters(&[("Link:a:rx_dropped", 10), ("Link:c:rx_dropped", 6)])
        );
        // A renamed device is not gone: its old name's counters are not kept.
        let mut renamed = counters(&[("Link:z:rx_dropped", 6)]);
        keep_gone(
            &mut renamed,
            &counters(&[("Link:c:rx_dropped", 6)]),
            Window::default(),
            (&devices(&[(4, "c")]), &devices(&[(4, "z")])),
            &mut budget,
        );
        assert_eq!(renamed, counters(&[("Link:z:rx_dropped", 6)]));
        assert_eq!(
            (budget.left, budget.left_out),
            (MAX_GONE_COUNTERS - 2, 0),
            "one kept in each of two readings"
        );
    }

    /// Each namespace of a reading has its share: one whose devices were made and deleted in
    /// bulk keeps its share and leaves the rest out, and another's counters, read after it
    /// (a higher inode), are all kept; the initial and named namespaces share half.
    #[test]
    fn a_namespace_with_devices_deleted_in_bulk_keeps_only_its_share() {
        let bulk: Counters = (0..2 * MAX_GONE_COUNTERS)
            .map(|i| (format!("Link:v{i}:rx_dropped"), 1))
            .collect();
        let bulk_before: Devices = (0..2 * MAX_GONE_COUNTERS as u32)
            .map(|i| (i + 2, format!("v{i}")))
            .collect();
        let quiet = counters(&[("Link:a:rx_dropped", 1), ("Link:b:rx_dropped", 2)]);
        let quiet_before = devices(&[(2, "a"), (3, "b")]);
        let (init, named, bulky, other) = (1, 2, 3, 4);
        let mut shares = Shares::new(&[init, named, bulky, other], &[init, named].into());
        let mut kept = BTreeMap::new();
        for (ns, latest, before) in [
            (init, &quiet, &quiet_before),
            (named, &quiet, &quiet_before),
            (bulky, &bulk, &bulk_before),
            (other, &quiet, &quiet_before),
        ] {
            let mut now = Counters::new();
            let mut share = shares.of(ns);
            keep_gone(
                &mut now,
                latest,
                Window::default(),
                (before, &Devices::new()),
                &mut share,
            );
            shares.spent(share);
            kept.insert(ns, now.len());
        }
        let each = MAX_GONE_COUNTERS / 2 / 2;
        assert_eq!(kept, BTreeMap::from([(1, 2), (2, 2), (3, each), (4, 2)]));
        assert_eq!(shares.left_out, 2 * MAX_GONE_COUNTERS - each);
        assert!(kept.values().sum::<usize>() <= MAX_GONE_COUNTERS);
        // Alone in its group, a namespace has the group's whole half; alone in the reading,
        // all of it.
        assert_eq!(
            Shares::new(&[3, 4], &[1].into()).of(3).left,
            MAX_GONE_COUNTERS / 2
        );
        assert_eq!(Shares::new(&[1], &[1].into()).of(1).left, MAX_GONE_COUNTERS);
    }

    #[test]
    fn gone_devices_are_kept_within_a_budget_and_the_rest_counted() {
        let latest = counters(&[("Link:a:rx_dropped", 1), ("Link:b:rx_dropped", 2)]);
        let mut now = Counters::new();
        let mut budget = GoneBudget {
            left: 1,
            left_out: 0,
        };
        let before = devices(&[(2, "a"), (3, "b")]);
        keep_gone(
            &mut now,
            &latest,
            Window::default(),
            (&before, &Devices::new()),
            &mut budget,
        );
        assert_eq!(now, counters(&[("Link:a:rx_dropped", 1)]));
        assert_eq!((budget.left, budget.left_out), (0, 1));
    }

    #[test]
    fn counters_of_devices_the_link_dump_did_not_know_are_left_out() {
        let mut c = counters(&[
            ("Dev:old:RxDrop", 900),
            ("Dev:new:RxDrop", 900),
            ("Link:new:rx_dropped", 900),
            ("Udp:NoPorts", 1),
        ]);
        known_only(&mut c, &devices(&[(1, "lo"), (7, "new")]));
        assert_eq!(
            c,
            counters(&[
                ("Dev:new:RxDrop", 900),
                ("Link:new:rx_dropped", 900),
                ("Udp:NoPorts", 1),
            ])
        );
    }
}
