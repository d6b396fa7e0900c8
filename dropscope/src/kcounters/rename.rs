//! A device renamed, gone, or its name taken by a new device between two readings: its
//! baseline follows it by interface index, so a window holds its growth, never its whole
//! history; a device gone keeps the growth last read, as a gone namespace does (within
//! [`MAX_GONE_COUNTERS`]).
//!
//! Per-device counters are named by the device (`Link:<dev>:…`, `Dev:<dev>:…`,
//! `Qdisc:<dev>:…`, `Ethtool:<dev>:…`, `Xsk:<dev>:…`), and growth is the latest value minus the
//! baseline under the same name. A device renamed between two readings (as udev or a container
//! runtime renames one) would count from zero under its new name, its whole history as the
//! window's; a device created under the name of one deleted would count from the old one's
//! values.
use std::collections::{BTreeMap, HashMap};

use super::parse::Counters;

/// A namespace's devices: escaped name by interface index.
pub type Devices = BTreeMap<u32, String>;

/// The counter layers named by a device, as their second field.
const BY_DEVICE: &[&str] = &["Link", "Dev", "Qdisc", "Ethtool", "Xsk"];

/// `baseline` (read when the namespace's devices were `before`) as it would read with the
/// devices `now`: a counter of a device still there under another name is renamed with it; one
/// whose name a new device took (its own device gone, or a gone device's counters kept) is
/// dropped, as the new device counts from zero. Counters of names neither reading knows are
/// kept as they are.
pub fn follow(baseline: Counters, before: &Devices, now: &Devices) -> Counters {
    if before == now {
        return baseline;
    }
    let was: HashMap<&str, u32> = before.iter().map(|(i, n)| (n.as_str(), *i)).collect();
    let is: HashMap<&str, u32> = now.iter().map(|(i, n)| (n.as_str(), *i)).collect();
    let mut out = Counters::new();
    for (name, v) in baseline {
        let Some((layer, dev, rest)) = split(&name) else {
            out.insert(name, v);
            continue;
        };
        let renamed = match was.get(dev) {
            // The device still there: under its name now.
            Some(index) => match now.get(index) {
                Some(new) if new == dev => None,
                Some(new) => Some(format!("{layer}:{new}:{rest}")),
                // Gone: its counters stay, unless a new device has its name.
                None if is.contains_key(dev) => continue,
                None => None,
            },
            // A name no device had then (a gone device's, kept) that a new device has now.
            None if is.contains_key(dev) => continue,
            None => None,
        };
        match renamed {
            // Two of the old names may not land on one: the first reading of each is kept.
            Some(new) => {
                out.entry(new).or_insert(v);
            }
            None => {
                out.entry(name).or_insert(v);
            }
        }
    }
    out
}

/// Adds to `now_counters` (read with the devices `now`) the counters of `latest` (read with
/// the devices `before`) of each device gone since, and of each kept so before, that grew
/// since `baseline`: their growth stays in the window, as a gone namespace's does (one that
/// did not grow is forgotten). A device renamed is not gone (its baseline follows it), and a
/// gone device whose name a new device took is not kept: the name is the new device's.
pub fn keep_gone(
    now_counters: &mut Counters,
    latest: &Counters,
    baseline: Option<&Counters>,
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
        let grew = baseline.and_then(|b| b.get(name)) != Some(&v);
        if renamed || is.contains(dev) || !grew || now_counters.contains_key(name) {
            continue;
        }
        if budget.left == 0 {
            budget.left_out += 1;
            continue;
        }
        budget.left -= 1;
        now_counters.insert(name.clone(), v);
    }
}

/// The most counters of gone devices kept over all namespaces: a process that makes and
/// deletes devices cannot grow the readings without bound.
pub const MAX_GONE_COUNTERS: usize = 4096;

/// What one reading may still keep of gone devices' counters, and how many it left out.
#[derive(Debug)]
pub struct GoneBudget {
    /// Counters it may still keep.
    pub left: usize,
    /// Counters of gone devices that grew and were not kept.
    pub left_out: usize,
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

/// A per-device counter's name, split: `(layer, device, rest)`.
fn split(name: &str) -> Option<(&str, &str, &str)> {
    let (layer, rest) = name.split_once(':')?;
    if !BY_DEVICE.contains(&layer) {
        return None;
    }
    let (dev, rest) = rest.split_once(':')?;
    Some((layer, dev, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(list: &[(u32, &str)]) -> Devices {
        list.iter().map(|(i, n)| (*i, n.to_string())).collect()
    }

    fn counters(list: &[(&str, u64)]) -> Counters {
        list.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn a_renamed_device_keeps_its_baseline_under_its_new_name() {
        let base = counters(&[
            ("Link:veth12:rx_dropped", 40),
            ("Dev:veth12:RxDrop", 40),
            ("Qdisc:veth12:noqueue 0::drops", 3),
            ("Ethtool:veth12:rx_xdp_drops", 7),
            ("Xsk:veth12:q0:sk9:rx_dropped", 2),
            ("Link:lo:tx_dropped", 1),
            ("Udp:NoPorts", 5),
            ("Softnet:cpu0:dropped", 6),
        ]);
        let after = follow(
            base,
            &devices(&[(1, "lo"), (7, "veth12")]),
            &devices(&[(1, "lo"), (7, "eth0")]),
        );
        assert_eq!(
            after,
            counters(&[
                ("Link:eth0:rx_dropped", 40),
                ("Dev:eth0:RxDrop", 40),
                ("Qdisc:eth0:noqueue 0::drops", 3),
                ("Ethtool:eth0:rx_xdp_drops", 7),
                ("Xsk:eth0:q0:sk9:rx_dropped", 2),
                ("Link:lo:tx_dropped", 1),
                ("Udp:NoPorts", 5),
                ("Softnet:cpu0:dropped", 6),
            ])
        );
    }

    #[test]
    fn swapped_names_swap_baselines() {
        let base = counters(&[("Link:a:rx_dropped", 10), ("Link:b:rx_dropped", 20)]);
        let after = follow(
            base,
            &devices(&[(2, "a"), (3, "b")]),
            &devices(&[(2, "b"), (3, "a")]),
        );
        assert_eq!(
            after,
            counters(&[("Link:b:rx_dropped", 10), ("Link:a:rx_dropped", 20)])
        );
    }

    #[test]
    fn a_new_device_under_an_old_name_counts_from_zero() {
        let base = counters(&[("Link:a:rx_dropped", 10), ("Dev:a:RxDrop", 10)]);
        // `a` deleted and made again (a new index): its old values are no baseline of the new.
        let after = follow(base, &devices(&[(2, "a")]), &devices(&[(9, "a")]));
        assert!(after.is_empty(), "{after:?}");
        // A gone device's counters, kept, and a new device under its name: from zero.
        let base = counters(&[("Link:a:rx_dropped", 10)]);
        let after = follow(
            base,
            &devices(&[(1, "lo")]),
            &devices(&[(1, "lo"), (9, "a")]),
        );
        assert!(after.is_empty(), "{after:?}");
        // `a` renamed to `b` and a new `a` made: the old values follow `b`.
        let base = counters(&[("Link:a:rx_dropped", 10)]);
        let after = follow(base, &devices(&[(2, "a")]), &devices(&[(2, "b"), (9, "a")]));
        assert_eq!(after, counters(&[("Link:b:rx_dropped", 10)]));
    }

    #[test]
    fn gone_and_unknown_devices_keep_their_counters() {
        let base = counters(&[("Link:a:rx_dropped", 10), ("Dev:z:RxDrop", 4)]);
        // `a` gone, no one took its name; `z` in neither list (read from /proc/net/dev only).
        let after = follow(base.clone(), &devices(&[(2, "a")]), &devices(&[(1, "lo")]));
        assert_eq!(after, base);
        // Nothing changed: the same map back.
        let same = devices(&[(2, "a")]);
        assert_eq!(follow(base.clone(), &same, &same), base);
    }

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
            Some(&base),
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
        keep_gone(&mut next, &now, Some(&base), (&after, &after), &mut budget);
        assert_eq!(
            next,
            counters(&[("Link:a:rx_dropped", 10), ("Link:c:rx_dropped", 6)])
        );
        // A renamed device is not gone: its old name's counters are not kept.
        let mut renamed = counters(&[("Link:z:rx_dropped", 6)]);
        keep_gone(
            &mut renamed,
            &counters(&[("Link:c:rx_dropped", 6)]),
            None,
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
            None,
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

    #[test]
    fn hostile_names_neither_panic_nor_merge_silently() {
        let base = counters(&[
            ("Link:", 1),
            ("Link::", 2),
            ("Qdisc:a", 3),
            ("Link:a:x", 4),
            ("Link:b:x", 5),
        ]);
        // `a` renamed to `b` while `b`, gone, left its counter: `a`'s values win its name.
        let after = follow(base, &devices(&[(1, "a"), (2, "b")]), &devices(&[(1, "b")]));
        assert_eq!(after.get("Link:b:x"), Some(&4), "{after:?}");
        assert_eq!(after.get("Link:"), Some(&1));
        assert_eq!(after.get("Link::"), Some(&2));
        assert_eq!(after.get("Qdisc:a"), Some(&3));
    }
}
