//! What the model computes over the kernel's own counters as a snapshot carries them (a
//! [`KernelReading`], [`crate::vocab::reading`]'s: how much each counter grew per network
//! namespace since the session started, read beside the probe's maps, live, or from a
//! recording): a window between two readings, a counter's growth, the packets a drop ratio
//! divides by.
//!
//! Counters are named as `nstat` groups them: `Udp:NoPorts`, `TcpExt:ListenDrops`,
//! `Dev:<interface>:RxDrop`, `Softnet:Dropped`. Besides the drop counters a reading holds the
//! packets the kernel handled (the denominators of drop ratios, see [`PACKET_COUNTERS`] and
//! `Dev:<interface>:RxPackets` / `TxPackets`).
use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
};

use serde::{Deserialize, Serialize};

use super::verdict_counter;
pub use crate::vocab::reading::KernelReading;
use crate::vocab::{
    counter::Counter,
    devices,
    reading::{Growth, Listener},
};

/// Per-namespace packet counters that are denominators of a namespace's drop ratio.
pub const PACKET_COUNTERS: &[&str] = &[
    "Ip:InReceives",
    "Ip6:InReceives",
    "Udp:InDatagrams",
    "Udp6:InDatagrams",
    "Tcp:InSegs",
];

/// A per-interface packet counter: `Dev:<interface>:RxPackets` or `TxPackets`.
pub fn device_packets(counter: &str) -> Option<(&str, Direction)> {
    match Counter::parse(counter)? {
        Counter::Dev {
            dev,
            stat: "RxPackets",
        } => Some((dev, Direction::Rx)),
        Counter::Dev {
            dev,
            stat: "TxPackets",
        } => Some((dev, Direction::Tx)),
        _ => None,
    }
}

/// Whether packets were received or sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Received.
    Rx,
    /// Sent.
    Tx,
}

impl Direction {
    /// `rx` or `tx`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
        }
    }
}

impl Listener {
    /// `listener 127.0.0.1:8080 nginx[812] accept queue 2/1` (terminal-safe).
    pub fn describe(&self) -> String {
        let who = match &self.process {
            Some(h) => format!("{}[{}]", crate::sanitize::terminal(&h.comm), h.pid),
            None => format!("socket {} (no process found)", self.inode),
        };
        format!(
            "listener {} {who} accept queue {}/{}",
            crate::sanitize::terminal(&self.addr),
            self.queue,
            self.backlog
        )
    }
}

impl KernelReading {
    /// The growth of `counter` in namespace `netns` (0 if it did not grow or was not read).
    pub fn growth(&self, netns: u64, counter: &str) -> u64 {
        self.netns
            .get(&netns)
            .and_then(|g| g.get(counter))
            .copied()
            .unwrap_or(0)
    }

    /// The packets a drop ratio of `direction` divides by: those `device` received
    /// (`Dev:<device>:RxPackets`) or sent (`TxPackets`); without a device, those the
    /// namespace received at the IP layer ([`KernelReading::netns_packets`]) or its devices
    /// sent.
    pub fn packets_of(&self, netns: u64, device: Option<&str>, direction: Direction) -> u64 {
        let stat = match direction {
            Direction::Rx => "RxPackets",
            Direction::Tx => "TxPackets",
        };
        match (device, direction) {
            (Some(dev), _) => self.growth(netns, &Counter::Dev { dev, stat }.to_string()),
            (None, Direction::Rx) => self.netns_packets(netns),
            (None, Direction::Tx) => (self.netns.get(&netns).into_iter().flatten())
                .filter(|(name, _)| device_packets(name).is_some_and(|(_, d)| d == direction))
                .fold(0, |t: u64, (_, &v)| t.saturating_add(v)),
        }
    }

    /// Packets a namespace received, by its best denominator: `Ip:InReceives` plus
    /// `Ip6:InReceives`.
    pub fn netns_packets(&self, netns: u64) -> u64 {
        self.growth(netns, "Ip:InReceives")
            .saturating_add(self.growth(netns, "Ip6:InReceives"))
    }

    /// Packets received in every namespace read: [`KernelReading::netns_packets`] summed.
    pub fn packets(&self) -> u64 {
        (self.netns.keys()).fold(0, |t: u64, &ns| t.saturating_add(self.netns_packets(ns)))
    }

    /// Packets per (namespace, interface, direction), from `Dev:*:RxPackets` / `TxPackets`.
    pub fn device_packets(&self) -> impl Iterator<Item = (u64, &str, Direction, u64)> + '_ {
        self.netns.iter().flat_map(|(&ns, g)| {
            g.iter().filter_map(move |(name, &v)| {
                let (dev, dir) = device_packets(name)?;
                Some((ns, dev, dir, v))
            })
        })
    }

    /// The growth between `earlier` and `self` (both since the same session start): per
    /// counter, the later minus the earlier growth (a namespace or counter missing from
    /// `earlier` counts from zero). A device renamed between them (the same interface index
    /// under another name) is subtracted under its new name; a new device under an old name
    /// counts from zero; a program's verdicts are subtracted by program, whatever device and
    /// namespace they are shown on. Time, initial namespace, errors and devices are `self`'s.
    pub fn since(&self, earlier: &KernelReading) -> KernelReading {
        // A program's verdicts by program, whatever device and namespace they were shown on
        // (each program is counted once, on one of its places).
        let progs: HashMap<_, u64> = (earlier.netns.values().flat_map(|g| g.iter()))
            .filter_map(|(name, &v)| Some((verdict_counter::identity(name)?, v)))
            .collect();
        let netns: BTreeMap<u64, Growth> = self
            .netns
            .iter()
            .map(|(ns, g)| {
                // Followed where both readings list the namespace's devices; where one does
                // not (its link dumps had not answered), by name, as the reader counted it.
                let before = earlier.netns.get(ns).map(|b| {
                    match (earlier.devices.get(ns), self.devices.get(ns)) {
                        (Some(was), Some(is)) if was != is => {
                            Cow::Owned(devices::follow(b.clone(), was, is))
                        }
                        _ => Cow::Borrowed(b),
                    }
                });
                let g: Growth = g
                    .iter()
                    .filter_map(|(name, &v)| {
                        let b = (before.as_ref().and_then(|b| b.get(name)).copied())
                            .or_else(|| progs.get(&verdict_counter::identity(name)?).copied());
                        let d = v.saturating_sub(b.unwrap_or(0));
                        (d > 0).then(|| (name.clone(), d))
                    })
                    .collect();
                (*ns, g)
            })
            .filter(|(_, g)| !g.is_empty())
            .collect();
        let devices = (self.devices.iter())
            .filter(|(ns, _)| netns.contains_key(ns))
            .map(|(ns, d)| (*ns, d.clone()))
            .collect();
        KernelReading {
            unix_ms: self.unix_ms,
            initial_netns: self.initial_netns,
            netns,
            errors: self.errors.clone(),
            devices,
            listeners: self.listeners.clone(),
            rules: (self.rules.iter())
                .map(|(ns, w)| match earlier.rules.get(ns) {
                    Some(e) => (*ns, w.since(e)),
                    None => (*ns, w.clone()),
                })
                .collect(),
            attached: self.attached.clone(),
            attributed: self.attributed && earlier.attributed,
            cookies: self.cookies.clone(),
            names: self.names.clone(),
        }
    }

    /// Whether a drop of namespace `inode` (with `cookie`, where its key has one) is of the
    /// namespace this reading read under that inode: yes unless both cookies are known and
    /// differ (the drop's namespace ended and its inode went to another).
    pub fn reads(&self, inode: u64, cookie: Option<u64>) -> bool {
        match (self.cookies.get(&inode), cookie) {
            (Some(read), Some(drop)) => *read == drop,
            _ => true,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A reading of the initial namespace 1 at `unix_ms`, of (namespace, counter, growth).
    pub(crate) fn reading(unix_ms: u64, counters: &[(u64, &str, u64)]) -> KernelReading {
        crate::fixtures::reading(unix_ms, 1, counters)
    }

    #[test]
    fn since_subtracts_per_counter_and_drops_what_did_not_grow() {
        let a = reading(10, &[(1, "Udp:NoPorts", 5), (2, "Dev:lo:RxPackets", 7)]);
        let b = reading(
            20,
            &[
                (1, "Udp:NoPorts", 9),
                (2, "Dev:lo:RxPackets", 7),
                (3, "Tcp:InSegs", 4),
            ],
        );
        let w = b.since(&a);
        assert_eq!(w.unix_ms, 20);
        assert_eq!(w.growth(1, "Udp:NoPorts"), 4);
        assert_eq!(w.growth(3, "Tcp:InSegs"), 4);
        assert!(!w.netns.contains_key(&2), "{w:?}");
    }

    #[test]
    fn a_window_follows_a_device_renamed_or_made_again_between_its_readings() {
        let mut a = reading(
            10,
            &[
                (1, "Link:ifb0:rx_dropped", 40),
                (1, "Qdisc:ifb0:pfifo 1::drops", 4),
                (1, "Link:old:rx_dropped", 7),
                (1, "Link:gone:rx_dropped", 3),
                (1, "Udp:NoPorts", 2),
            ],
        );
        a.devices.insert(
            1,
            [(5, "ifb0"), (6, "old"), (8, "gone")]
                .map(|(i, n)| (i, n.to_owned()))
                .into(),
        );
        // `ifb0` renamed `ctr0` and dropped 15 more; `old` deleted and made again (a new
        // index) with 2 drops of its own; `gone` deleted, its growth kept by name.
        let mut b = reading(
            20,
            &[
                (1, "Link:ctr0:rx_dropped", 55),
                (1, "Qdisc:ctr0:pfifo 1::drops", 5),
                (1, "Link:old:rx_dropped", 2),
                (1, "Link:gone:rx_dropped", 3),
                (1, "Udp:NoPorts", 3),
            ],
        );
        b.devices.insert(
            1,
            [(5, "ctr0"), (9, "old")]
                .map(|(i, n)| (i, n.to_owned()))
                .into(),
        );
        let w = b.since(&a);
        assert_eq!(w.growth(1, "Link:ctr0:rx_dropped"), 15);
        assert_eq!(w.growth(1, "Qdisc:ctr0:pfifo 1::drops"), 1);
        assert_eq!(w.growth(1, "Link:old:rx_dropped"), 2);
        assert_eq!(w.growth(1, "Link:gone:rx_dropped"), 0);
        assert_eq!(w.growth(1, "Udp:NoPorts"), 1);
        assert_eq!(w.devices, b.devices);
        // A program's verdicts, shown on the device under its new name: by program.
        let mut pa = reading(1, &[(1, "Xdp:vb:xdpdrv:p#42:drop", 500)]);
        pa.netns
            .get_mut(&1)
            .expect("ns")
            .insert("Tc:vb:ingress:q#7:shot".into(), 9);
        let pb = reading(
            2,
            &[
                (1, "Xdp:ctr0:xdpdrv:p#42:drop", 600),
                (1, "Xdp:ctr0:xdpdrv:p#43:drop", 5),
                (1, "Tc:ctr0:ingress:q#7:shot", 9),
            ],
        );
        let w = pb.since(&pa);
        assert_eq!(w.growth(1, "Xdp:ctr0:xdpdrv:p#42:drop"), 100);
        assert_eq!(
            w.growth(1, "Xdp:ctr0:xdpdrv:p#43:drop"),
            5,
            "another program"
        );
        assert_eq!(w.growth(1, "Tc:ctr0:ingress:q#7:shot"), 0);
        // Shown in another namespace (its place there kept, the first one's gone).
        let pc = reading(3, &[(2, "Xdp:eth0:xdpdrv:p#42:drop", 650)]);
        assert_eq!(pc.since(&pa).growth(2, "Xdp:eth0:xdpdrv:p#42:drop"), 150);
        // Readings that know no devices (a recording before version 5) subtract by name.
        let (mut a, mut b) = (a, b);
        a.devices.clear();
        b.devices.clear();
        assert_eq!(b.since(&a).growth(1, "Link:ctr0:rx_dropped"), 55);
        assert_eq!(b.since(&a).growth(1, "Link:old:rx_dropped"), 0);
        // Only the later one lists them (the earlier one's link dumps had not answered): by
        // name too, never the device's whole growth since the session began.
        b.devices
            .insert(1, [(5, "ctr0")].map(|(i, n)| (i, n.to_owned())).into());
        (a.netns.get_mut(&1).expect("ns")).insert("Link:ctr0:rx_dropped".into(), 50);
        assert_eq!(b.since(&a).growth(1, "Link:ctr0:rx_dropped"), 5);
    }

    #[test]
    fn packets_per_namespace_and_device() {
        let r = reading(
            1,
            &[
                (1, "Ip:InReceives", 10),
                (1, "Ip6:InReceives", 5),
                (1, "Dev:eth0:RxPackets", 12),
                (1, "Dev:eth0:TxPackets", 3),
                (1, "Dev:eth0:RxDrop", 1),
            ],
        );
        assert_eq!(r.netns_packets(1), 15);
        let mut two = r.clone();
        two.netns
            .entry(2)
            .or_default()
            .insert("Ip:InReceives".into(), 100);
        assert_eq!(two.packets(), 115);
        let mut d: Vec<_> = r.device_packets().collect();
        d.sort();
        assert_eq!(
            d,
            [
                (1, "eth0", Direction::Rx, 12),
                (1, "eth0", Direction::Tx, 3)
            ]
        );
        assert_eq!(
            device_packets("Dev:a:b:RxPackets"),
            Some(("a:b", Direction::Rx))
        );
        assert_eq!(device_packets("Udp:InDatagrams"), None);
    }
}
