//! Drop ratios: the probe's exact drops over the packets the kernel handled, per namespace
//! (over `Ip:InReceives` + `Ip6:InReceives`) and per device (over its received packets), for
//! the same window.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{KernelReading, Snapshot, kernel::Direction};

/// Drops per packet in one namespace, or on one device of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// The namespace's inode number.
    pub netns: u64,
    /// The device (`None`: the whole namespace).
    pub device: Option<String>,
    /// Drops the probe counted there.
    pub drops: u64,
    /// Packets the kernel handled there: received at the IP layer (namespace), or received
    /// by the device.
    pub packets: u64,
    /// `drops / packets`; `None` without packets.
    pub ratio: Option<f64>,
}

/// The ratios of a window: `reading` (counter growth) and `snap` (the probe's counts over it).
/// Only drops whose key holds their namespace (and device, for devices) can be placed; with
/// counts grouped without the namespace, only the host-wide ratio is given (namespace 0:
/// every drop over the packets of every namespace read).
pub fn ratios(reading: &KernelReading, snap: &Snapshot) -> Vec<Ratio> {
    let ratio = |drops: u64, packets: u64| (packets > 0).then(|| drops as f64 / packets as f64);
    let by_netns = snap.drops.iter().all(|d| d.key.attr.netns.is_some());
    let mut out = Vec::new();
    if !by_netns {
        let packets = reading.packets();
        out.push(Ratio {
            netns: 0,
            device: None,
            drops: snap.total,
            packets,
            ratio: ratio(snap.total, packets),
        });
        return out;
    }
    let mut ns_drops: BTreeMap<u64, u64> = BTreeMap::new();
    let mut dev_drops: BTreeMap<(u64, &str), u64> = BTreeMap::new();
    for d in &snap.drops {
        let Some(ns) = d.key.attr.netns else { continue };
        *ns_drops.entry(ns).or_default() += d.count;
        if let Some(dev) = d.key.attr.device.as_deref() {
            *dev_drops.entry((ns, dev)).or_default() += d.count;
        }
    }
    let namespaces: std::collections::BTreeSet<u64> = ns_drops
        .keys()
        .chain(reading.netns.keys())
        .copied()
        .collect();
    for ns in namespaces {
        let drops = ns_drops.get(&ns).copied().unwrap_or(0);
        let packets = reading.netns_packets(ns);
        if drops > 0 || packets > 0 {
            out.push(Ratio {
                netns: ns,
                device: None,
                drops,
                packets,
                ratio: ratio(drops, packets),
            });
        }
    }
    let mut devices: BTreeMap<(u64, &str), u64> = BTreeMap::new();
    for (ns, dev, dir, v) in reading.device_packets() {
        if dir == Direction::Rx {
            devices.insert((ns, dev), v);
        }
    }
    for &(ns, dev) in dev_drops.keys() {
        devices.entry((ns, dev)).or_insert(0);
    }
    for ((ns, dev), packets) in devices {
        let drops = dev_drops.get(&(ns, dev)).copied().unwrap_or(0);
        out.push(Ratio {
            netns: ns,
            device: Some(dev.to_string()),
            drops,
            packets,
            ratio: ratio(drops, packets),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{Attribution, DropCount, DropKey, Reason};

    fn drop(netns: Option<u64>, device: &str, count: u64) -> DropCount {
        DropCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: "NO_SOCKET".into(),
                },
                location: "__udp4_lib_rcv+0x1".into(),
                attr: Attribution {
                    netns,
                    device: Some(Arc::from(device)),
                    ..Default::default()
                },
            },
            count,
        }
    }

    fn reading() -> KernelReading {
        let mut r = KernelReading::default();
        let g = r.netns.entry(7).or_default();
        g.insert("Ip:InReceives".into(), 1000);
        g.insert("Dev:veth1:RxPackets".into(), 1000);
        g.insert("Dev:lo:RxPackets".into(), 4);
        r
    }

    #[test]
    fn a_tenth_dropped_reads_ten_percent_per_namespace_and_device() {
        let snap = Snapshot {
            total: 100,
            drops: vec![drop(Some(7), "veth1", 100)],
            ..Default::default()
        };
        let r = ratios(&reading(), &snap);
        let ns = r.iter().find(|r| r.device.is_none()).expect("namespace");
        assert_eq!((ns.netns, ns.drops, ns.packets), (7, 100, 1000));
        assert_eq!(ns.ratio, Some(0.1));
        let dev = (r.iter())
            .find(|r| r.device.as_deref() == Some("veth1"))
            .expect("device");
        assert_eq!((dev.drops, dev.packets, dev.ratio), (100, 1000, Some(0.1)));
        let lo = (r.iter())
            .find(|r| r.device.as_deref() == Some("lo"))
            .expect("lo");
        assert_eq!((lo.drops, lo.ratio), (0, Some(0.0)));
    }

    #[test]
    fn without_namespaces_in_the_keys_only_the_host_wide_ratio() {
        let snap = Snapshot {
            total: 50,
            drops: vec![drop(None, "veth1", 50)],
            ..Default::default()
        };
        let r = ratios(&reading(), &snap);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].netns, r[0].drops, r[0].packets), (0, 50, 1000));
        // No packets: no ratio, never infinity.
        let r = ratios(&KernelReading::default(), &snap);
        assert_eq!(r[0].ratio, None);
    }
}
