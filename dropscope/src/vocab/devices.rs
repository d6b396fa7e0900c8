//! A namespace's devices by interface index, and a per-device counter's baseline following its
//! device across a rename: the one rule both the live counters and a window between two
//! readings (a recording's too) apply.
//!
//! Per-device counters are named by the device (`Link:<dev>:…`, `Dev:<dev>:…`,
//! `Qdisc:<dev>:…`, `Ethtool:<dev>:…`, `Xsk:<dev>:…`), and growth is the later value minus the
//! earlier under the same name. A device renamed between two readings (as udev or a container
//! runtime renames one) would count from zero under its new name, its whole history as the
//! window's; a device created under the name of one deleted would count from the old one's
//! values.
use std::collections::{BTreeMap, HashMap};

/// A namespace's devices: escaped name by interface index.
pub type Devices = BTreeMap<u32, String>;

/// The counter layers named by a device, as their second field.
const BY_DEVICE: &[&str] = &["Link", "Dev", "Qdisc", "Ethtool", "Xsk"];

/// What becomes of one earlier counter with the devices as they are now.
enum Fate {
    /// Its name is still its device's (or no device's: a counter of the namespace).
    Keep,
    /// Its device is there under this counter name.
    Rename(String),
    /// A new device has its name: the new one counts from zero.
    Drop,
}

/// `baseline` (read when the namespace's devices were `before`) as it would read with the
/// devices `now`: a counter of a device still there under another name is renamed with it; one
/// whose name a new device took (its own device gone, or a gone device's counters kept) is
/// dropped, as the new device counts from zero. Counters of names neither reading knows are
/// kept as they are.
pub fn follow<K>(baseline: BTreeMap<K, u64>, before: &Devices, now: &Devices) -> BTreeMap<K, u64>
where
    K: Ord + AsRef<str> + From<String>,
{
    if before == now {
        return baseline;
    }
    let was: HashMap<&str, u32> = before.iter().map(|(i, n)| (n.as_str(), *i)).collect();
    let is: HashMap<&str, u32> = now.iter().map(|(i, n)| (n.as_str(), *i)).collect();
    let mut out = BTreeMap::new();
    for (name, v) in baseline {
        let fate = match split(name.as_ref()) {
            None => Fate::Keep,
            Some((layer, dev, rest)) => match was.get(dev) {
                // The device still there: under its name now.
                Some(index) => match now.get(index) {
                    Some(new) if new == dev => Fate::Keep,
                    Some(new) => Fate::Rename(format!("{layer}:{new}:{rest}")),
                    // Gone: its counters stay, unless a new device has its name.
                    None if is.contains_key(dev) => Fate::Drop,
                    None => Fate::Keep,
                },
                // A name no device had then (a gone device's, kept) that a new device has now.
                None if is.contains_key(dev) => Fate::Drop,
                None => Fate::Keep,
            },
        };
        // Two of the old names may not land on one: the first reading of each is kept.
        match fate {
            Fate::Keep => {
                out.entry(name).or_insert(v);
            }
            Fate::Rename(new) => {
                out.entry(K::from(new)).or_insert(v);
            }
            Fate::Drop => {}
        }
    }
    out
}

/// The device a per-device counter is named by (`eth0` of `Link:eth0:rx_dropped`).
pub fn device_of(name: &str) -> Option<&str> {
    split(name).map(|(_, dev, _)| dev)
}

/// A per-device counter's name, split: `(layer, device, rest)`.
pub(crate) fn split(name: &str) -> Option<(&str, &str, &str)> {
    let (layer, rest) = name.split_once(':')?;
    if !BY_DEVICE.contains(&layer) {
        return None;
    }
    let (dev, rest) = rest.split_once(':')?;
    Some((layer, dev, rest))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    type Counters = BTreeMap<String, u64>;

    /// Devices from (index, name) pairs.
    pub(crate) fn devices(list: &[(u32, &str)]) -> Devices {
        list.iter().map(|(i, n)| (*i, n.to_string())).collect()
    }

    /// Counters from (name, value) pairs.
    pub(crate) fn counters(list: &[(&str, u64)]) -> Counters {
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

    #[test]
    fn names_of_device_counters() {
        assert_eq!(device_of("Link:eth0:rx_dropped"), Some("eth0"));
        assert_eq!(device_of("Qdisc:eth0:pfifo 1::drops"), Some("eth0"));
        assert_eq!(device_of("Udp:NoPorts"), None);
        assert_eq!(device_of("Softnet:cpu0:dropped"), None);
    }
}
