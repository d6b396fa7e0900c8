//! A kernel counter's name, typed: which kind of counter it is and its parts. Its text form
//! (`Link:eth0:rx_dropped`, `Xdp:veth1:xdpdrv:drop_udp#42:drop`, `Udp:NoPorts`) is the one
//! readings, recordings, JSON and metric labels carry: [`Counter::parse`] reads it, `Display`
//! writes it back unchanged.
use std::{collections::BTreeMap, fmt};

/// Counters by `Group:Name` (`nstat` names them `GroupName`), as a reading reads them.
pub type Counters = BTreeMap<String, u64>;

/// `Softnet:Dropped`: the machine's backlog drops, the sum of the CPUs'.
pub const SOFTNET_DROPPED: &str = "Softnet:Dropped";

/// Which layer a program's verdict counter is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgramLayer {
    /// An XDP program's (`Xdp:`).
    Xdp,
    /// A tc program's (`Tc:`).
    Tc,
}

impl ProgramLayer {
    /// `Xdp` or `Tc`, as a counter's name begins.
    pub fn as_str(self) -> &'static str {
        match self {
            ProgramLayer::Xdp => "Xdp",
            ProgramLayer::Tc => "Tc",
        }
    }
}

/// A counter's name, split into its parts (borrowed from the name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter<'a> {
    /// `Link:<dev>:<stat>`: a stats64 counter of a device (rtnetlink).
    Link {
        /// The device (it may hold a `:`: the stat is after the last one).
        dev: &'a str,
        /// `rx_dropped`, `tx_dropped`, ...
        stat: &'a str,
    },
    /// `Ethtool:<dev>:<stat>`: a driver's own statistic.
    Ethtool {
        /// The device.
        dev: &'a str,
        /// The driver's name for it.
        stat: &'a str,
    },
    /// `<Xdp|Tc>:<dev>:<hook>:<prog>#<id>:<verdict>`: a program's verdicts.
    Verdict {
        /// XDP or tc.
        layer: ProgramLayer,
        /// The device it is shown on.
        dev: &'a str,
        /// Where on it (`xdpdrv`, `ingress`, `tcx-egress`, `netkit-peer`, ...).
        hook: &'a str,
        /// `<name>#<id>` (`?` for a program with no name).
        program: &'a str,
        /// `drop`, `aborted`, `shot`, ...
        verdict: &'a str,
    },
    /// `Xsk:<dev>:q<queue>:sk<inode>:<stat>`: an AF_XDP socket's.
    Xsk {
        /// The device it is bound to.
        dev: &'a str,
        /// The queue's number.
        queue: &'a str,
        /// The socket's inode.
        socket: &'a str,
        /// `rx_dropped`, `rx_ring_full`, ...
        stat: &'a str,
    },
    /// `Qdisc:<dev>:<label>:<stat>`: a queueing discipline's.
    Qdisc {
        /// The device.
        dev: &'a str,
        /// `tbf 1:`, `pfifo_fast 0: parent :1` (it holds `:`s: the stat is after the last).
        label: &'a str,
        /// `drops`, `overlimits`, `requeues`.
        stat: &'a str,
    },
    /// `Softnet:Dropped`: the machine's backlog drops.
    SoftnetDropped,
    /// `Softnet:cpu<N>:<stat>`: one CPU's backlog.
    Softnet {
        /// The CPU's number.
        cpu: &'a str,
        /// `dropped`, `flow_limit`, `time_squeeze`.
        stat: &'a str,
    },
    /// `Dev:<dev>:<stat>`: `/proc/net/dev`'s columns (`RxDrop`, `RxPackets`, ...).
    Dev {
        /// The device (the stat is after the last `:`).
        dev: &'a str,
        /// The column.
        stat: &'a str,
    },
    /// `<group>:<field>`: a protocol counter (`/proc/net/snmp`, `netstat`, `snmp6`).
    Mib {
        /// `Udp`, `TcpExt`, `Ip6`, ...
        group: &'a str,
        /// `NoPorts`, `ListenDrops`, ...
        field: &'a str,
    },
}

impl<'a> Counter<'a> {
    /// The counter a name stands for; `None` for a name of none of the forms (one with no
    /// `:`, or one of a layer's prefix with its parts missing).
    pub fn parse(name: &'a str) -> Option<Self> {
        let (group, rest) = name.split_once(':')?;
        Some(match group {
            "Link" => {
                let (dev, stat) = rest.rsplit_once(':')?;
                Counter::Link { dev, stat }
            }
            "Ethtool" => {
                let (dev, stat) = rest.split_once(':')?;
                Counter::Ethtool { dev, stat }
            }
            "Xdp" | "Tc" => {
                // A device name has no `:`, nor has a hook.
                let layer = if group == "Xdp" {
                    ProgramLayer::Xdp
                } else {
                    ProgramLayer::Tc
                };
                let (dev, rest) = rest.split_once(':')?;
                let (hook, rest) = rest.split_once(':')?;
                let (program, verdict) = rest.rsplit_once(':')?;
                Counter::Verdict {
                    layer,
                    dev,
                    hook,
                    program,
                    verdict,
                }
            }
            "Xsk" => {
                let (dev, rest) = rest.split_once(':')?;
                let (queue, rest) = rest.split_once(':')?;
                let (socket, stat) = rest.split_once(':')?;
                Counter::Xsk {
                    dev,
                    queue: queue.strip_prefix('q')?,
                    socket: socket.strip_prefix("sk")?,
                    stat,
                }
            }
            "Qdisc" => {
                let (dev, rest) = rest.split_once(':')?;
                let (label, stat) = rest.rsplit_once(':')?;
                Counter::Qdisc { dev, label, stat }
            }
            "Softnet" if rest == "Dropped" => Counter::SoftnetDropped,
            "Softnet" if rest.starts_with("cpu") => {
                let (cpu, stat) = rest.strip_prefix("cpu")?.split_once(':')?;
                Counter::Softnet { cpu, stat }
            }
            "Dev" => {
                let (dev, stat) = rest.rsplit_once(':')?;
                Counter::Dev { dev, stat }
            }
            _ => Counter::Mib { group, field: rest },
        })
    }

    /// The device of a `Link:` counter's name.
    pub fn link_device(name: &'a str) -> Option<&'a str> {
        match Counter::parse(name)? {
            Counter::Link { dev, .. } => Some(dev),
            _ => None,
        }
    }

    /// The device it counts on, for the counters of one.
    pub fn device(&self) -> Option<&'a str> {
        match *self {
            Counter::Link { dev, .. }
            | Counter::Ethtool { dev, .. }
            | Counter::Verdict { dev, .. }
            | Counter::Xsk { dev, .. }
            | Counter::Qdisc { dev, .. }
            | Counter::Dev { dev, .. } => Some(dev),
            Counter::SoftnetDropped | Counter::Softnet { .. } | Counter::Mib { .. } => None,
        }
    }
}

impl fmt::Display for Counter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Counter::Link { dev, stat } => write!(f, "Link:{dev}:{stat}"),
            Counter::Ethtool { dev, stat } => write!(f, "Ethtool:{dev}:{stat}"),
            Counter::Verdict {
                layer,
                dev,
                hook,
                program,
                verdict,
            } => write!(f, "{}:{dev}:{hook}:{program}:{verdict}", layer.as_str()),
            Counter::Xsk {
                dev,
                queue,
                socket,
                stat,
            } => write!(f, "Xsk:{dev}:q{queue}:sk{socket}:{stat}"),
            Counter::Qdisc { dev, label, stat } => write!(f, "Qdisc:{dev}:{label}:{stat}"),
            Counter::SoftnetDropped => f.write_str(SOFTNET_DROPPED),
            Counter::Softnet { cpu, stat } => write!(f, "Softnet:cpu{cpu}:{stat}"),
            Counter::Dev { dev, stat } => write!(f, "Dev:{dev}:{stat}"),
            Counter::Mib { group, field } => write!(f, "{group}:{field}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_into_its_parts_and_writes_back_unchanged() {
        let names = [
            "Link:veth0:rx_dropped",
            "Ethtool:eth0:rx_xdp_drop",
            "Xdp:veth1:xdpdrv:drop_udp#42:drop",
            "Tc:eth0:tcx-egress:?#7:shot",
            "Xsk:vb:q0:sk1234:fill_ring_empty",
            "Qdisc:eth0:pfifo_fast 0: parent :1:drops",
            "Softnet:Dropped",
            "Softnet:cpu3:time_squeeze",
            "Dev:eth0:RxDrop",
            "Udp:NoPorts",
            "TcpExt:ListenOverflows",
        ];
        for name in names {
            let c = Counter::parse(name).expect(name);
            assert_eq!(c.to_string(), name);
        }
        assert_eq!(
            Counter::parse("Qdisc:eth0:tbf 1::drops"),
            Some(Counter::Qdisc {
                dev: "eth0",
                label: "tbf 1:",
                stat: "drops"
            })
        );
        assert_eq!(
            Counter::parse("Xsk:vb:q2:sk99:rx_dropped"),
            Some(Counter::Xsk {
                dev: "vb",
                queue: "2",
                socket: "99",
                stat: "rx_dropped"
            })
        );
        assert_eq!(
            Counter::parse("Link:a:b:tx_dropped").and_then(|c| c.device()),
            Some("a:b")
        );
        assert_eq!(
            Counter::parse("Softnet:Dropped"),
            Some(Counter::SoftnetDropped)
        );
        assert_eq!(Counter::parse("Udp:NoPorts").and_then(|c| c.device()), None);
    }

    #[test]
    fn names_with_their_parts_missing_are_none() {
        for name in [
            "",
            "Link",
            "Link:eth0",
            "Xdp:",
            "Tc:a:b:c",
            "Xsk:vb:0:sk1:x",
            "Xsk:vb:q0",
            "Softnet:cpu3",
            "Dev:eth0",
            "Qdisc:eth0",
        ] {
            assert_eq!(Counter::parse(name), None, "{name}");
        }
        // Odd but whole: read as written (what shows it sanitizes it).
        for name in ["Xdp::::", "Xdp:a:b:c:\u{1b}[2J"] {
            assert_eq!(
                Counter::parse(name).map(|c| c.to_string()).as_deref(),
                Some(name)
            );
        }
    }
}
