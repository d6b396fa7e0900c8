//! Drop ratios: the probe's exact drops over the packets the kernel handled, per namespace and
//! per device, for the same window. Receive-side drops are over packets received (the
//! namespace's `Ip:InReceives` + `Ip6:InReceives`, a device's received packets), transmit-side
//! drops (a qdisc's, a device's transmit drops: see [`layers::direction`]) over packets sent
//! (a device's, or its namespace's devices' together).
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::layers;
use crate::model::{KernelReading, Snapshot, kernel::Direction};

/// Drops per packet in one namespace, or on one device of it, one way.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    /// The namespace's inode number.
    pub netns: u64,
    /// The device (`None`: the whole namespace).
    pub device: Option<String>,
    /// Which way: receive-side drops over packets received (`rx`), or transmit-side drops
    /// over packets sent (`tx`).
    pub direction: Direction,
    /// Drops the probe counted there, that way.
    pub drops: u64,
    /// Packets the kernel handled there that way: received at the IP layer (namespace) or by
    /// the device; sent by the namespace's devices or by the device.
    pub packets: u64,
    /// `drops / packets`; `None` where there is no ratio (see [`of`]).
    pub ratio: Option<f64>,
}

/// `drops / packets`, a fraction of one. No packets: no ratio. More drops than packets: no
/// ratio either (the packets counted do not hold those drops, as a veth counts none of what
/// its peer's backlog refused), never a ratio over 100%.
pub fn of(drops: u64, packets: u64) -> Option<f64> {
    (packets > 0 && drops <= packets).then(|| drops as f64 / packets as f64)
}

/// The ratios of a window: `reading` (counter growth) and `snap` (the probe's counts over it).
/// Only drops whose key holds their namespace (and device, for devices) can be placed; with
/// counts grouped without the namespace, only the host-wide ratios are given (namespace 0:
/// every drop over the packets of every namespace read; drops counted without a key are on
/// the receive side there).
pub fn ratios(reading: &KernelReading, snap: &Snapshot) -> Vec<Ratio> {
    let way = |d: &crate::model::DropCount| layers::direction(&d.key.reason.name, &d.key.location);
    let by_netns = snap.drops.iter().all(|d| d.key.attr.netns.is_some());
    let mut out = Vec::new();
    if !by_netns {
        let mut drops: BTreeMap<Direction, u64> = BTreeMap::new();
        for d in &snap.drops {
            *drops.entry(way(d)).or_default() += d.count;
        }
        let keyed: u64 = drops.values().sum();
        *drops.entry(Direction::Rx).or_default() += snap.total.saturating_sub(keyed);
        for direction in [Direction::Rx, Direction::Tx] {
            let drops = drops.get(&direction).copied().unwrap_or(0);
            let packets = (reading.netns.keys()).fold(0u64, |t, &ns| {
                t.saturating_add(reading.packets_of(ns, None, direction))
            });
            if direction == Direction::Rx || drops > 0 {
                out.push(Ratio {
                    netns: 0,
                    device: None,
                    direction,
                    drops,
                    packets,
                    ratio: of(drops, packets),
                });
            }
        }
        return out;
    }
    let mut ns_drops: BTreeMap<(u64, Direction), u64> = BTreeMap::new();
    let mut dev_drops: BTreeMap<(u64, &str, Direction), u64> = BTreeMap::new();
    for d in &snap.drops {
        let Some(ns) = d.key.attr.netns else { continue };
        // A namespace that ended is not over the packets of the one given its inode.
        if !reading.reads(ns, d.key.attr.netns_cookie) {
            continue;
        }
        let direction = way(d);
        *ns_drops.entry((ns, direction)).or_default() += d.count;
        if let Some(dev) = d.key.attr.device.as_deref() {
            *dev_drops.entry((ns, dev, direction)).or_default() += d.count;
        }
    }
    let namespaces: BTreeSet<u64> = (ns_drops.keys().map(|(ns, _)| ns))
        .chain(reading.netns.keys())
        .copied()
        .collect();
    for ns in namespaces {
        for direction in [Direction::Rx, Direction::Tx] {
            let drops = ns_drops.get(&(ns, direction)).copied().unwrap_or(0);
            let packets = reading.packets_of(ns, None, direction);
            // A namespace's packets sent are its devices': shown where it dropped some.
            let shown = match direction {
                Direction::Rx => drops > 0 || packets > 0,
                Direction::Tx => drops > 0,
            };
            if shown {
                out.push(Ratio {
                    netns: ns,
                    device: None,
                    direction,
                    drops,
                    packets,
                    ratio: of(drops, packets),
                });
            }
        }
    }
    let mut devices: BTreeMap<(u64, &str, Direction), u64> = BTreeMap::new();
    for (ns, dev, direction, v) in reading.device_packets() {
        devices.insert((ns, dev, direction), v);
    }
    for &key in dev_drops.keys() {
        devices.entry(key).or_insert(0);
    }
    for ((ns, dev, direction), packets) in devices {
        let drops = dev_drops.get(&(ns, dev, direction)).copied().unwrap_or(0);
        out.push(Ratio {
            netns: ns,
            device: Some(dev.to_string()),
            direction,
            drops,
            packets,
            ratio: of(drops, packets),
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
        crate::fixtures::reading(
            0,
            0,
            &[
                (7, "Ip:InReceives", 1000),
                (7, "Dev:veth1:RxPackets", 1000),
                (7, "Dev:lo:RxPackets", 4),
            ],
        )
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
    fn egress_drops_are_over_packets_sent_and_no_ratio_exceeds_one() {
        let mut r = KernelReading::default();
        let g = r.netns.entry(7).or_default();
        g.insert("Ip:InReceives".into(), 1);
        g.insert("Dev:ux3v0:RxPackets".into(), 1);
        g.insert("Dev:ux3v0:TxPackets".into(), 50_000);
        let mut qdisc = drop(Some(7), "ux3v0", 406);
        qdisc.key.reason.name = "QDISC_DROP".into();
        qdisc.key.location = "__dev_xmit_skb+0x2f0".into();
        let snap = Snapshot {
            total: 406,
            drops: vec![qdisc],
            ..Default::default()
        };
        let r = ratios(&r, &snap);
        let dev = (r.iter())
            .find(|r| r.device.as_deref() == Some("ux3v0") && r.drops > 0)
            .expect("ux3v0's drops");
        assert_eq!((dev.drops, dev.packets), (406, 50_000), "{r:#?}");
        assert!(r.iter().all(|r| r.ratio.is_none_or(|x| x <= 1.0)), "{r:#?}");
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
