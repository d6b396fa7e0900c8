//! Which drops to count and how to group them: `--by` and the filters. Live, they become the
//! program's grouping bits and in-kernel filters; in the model they regroup counts coarser
//! (without losing any) and filter recordings.
use std::{collections::HashMap, os::unix::fs::MetadataExt as _, path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use dropscope_common::{Config, filter, group, need};

use crate::{
    model::{DropCount, DropKey, KeySamples, Reason, Sample, Snapshot, packet},
    probe::reasons::ReasonTable,
};

/// A dimension drops can be grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Dim {
    /// The kernel's drop reason.
    Reason,
    /// The kernel function (and offset) that dropped the packet.
    Location,
    /// The packet's network namespace (container, pod, `ip netns`).
    Netns,
    /// The interface (within its namespace).
    Device,
    /// The L4 protocol (udp, tcp, icmp, icmpv6, or its number).
    Protocol,
    /// The destination port (multiplies keys: opt-in).
    Port,
}

/// The grouping when `--by` is not given: answers "which namespace and interface" with a
/// handful of keys per drop site for a few ns per drop (four loads through the kernel's own
/// pointers). The protocol and port are opt-in: they read the packet's headers, which costs
/// tens of ns per drop, and the port multiplies keys.
pub const DEFAULT_BY: &str = "reason,location,netns,device";

/// `--by` and the filters, shared by every command that shows drops.
#[derive(Clone, Debug, Default, Args)]
pub struct Selection {
    /// Group drops by these dimensions (a comma list of reason, location, netns, device,
    /// protocol, port). Live, the kernel keeps exactly these; `b` in the TUI regroups coarser.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_BY, value_name = "DIMS")]
    pub by: Vec<Dim>,
    /// Count only drops in this network namespace: a name from `ip netns`, a path to a
    /// namespace file, a PID, or an inode number.
    #[arg(long, value_name = "NS")]
    pub netns: Option<String>,
    /// Count only drops on the interface with this name.
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Count only drops of this L4 protocol: udp, tcp, icmp, icmpv6 or a number.
    #[arg(long, value_parser = parse_protocol, value_name = "PROTO")]
    pub protocol: Option<u8>,
    /// Count only drops to this destination port.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..), value_name = "N")]
    pub port: Option<u16>,
    /// Count only these drop reasons (comma list of names, e.g. NO_SOCKET,NETFILTER_DROP).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub reason: Vec<String>,
    /// Count every drop reason but these (comma list of names).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NAMES",
        conflicts_with = "reason"
    )]
    pub exclude_reason: Vec<String>,
}

impl Selection {
    /// Whether any filter is set.
    pub fn filtering(&self) -> bool {
        self.netns.is_some()
            || self.device.is_some()
            || self.protocol.is_some()
            || self.port.is_some()
            || !self.reason.is_empty()
            || !self.exclude_reason.is_empty()
    }

    /// A one-line description of the filters, for headers and reports (None without any).
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(n) = &self.netns {
            parts.push(format!("netns {n}"));
        }
        if let Some(d) = &self.device {
            parts.push(format!("device {d}"));
        }
        if let Some(p) = self.protocol {
            parts.push(format!("protocol {}", protocol_name(p)));
        }
        if let Some(p) = self.port {
            parts.push(format!("port {p}"));
        }
        if !self.reason.is_empty() {
            parts.push(format!("reason {}", self.reason.join(",")));
        }
        if !self.exclude_reason.is_empty() {
            parts.push(format!("not {}", self.exclude_reason.join(",")));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// The program's grouping bits for `--by`.
    pub fn group_bits(&self) -> u32 {
        self.by.iter().fold(0, |bits, d| {
            bits | match d {
                Dim::Netns => group::NETNS,
                // An interface index means something only within its namespace.
                Dim::Device => group::DEVICE | group::NETNS,
                Dim::Protocol => group::PROTOCOL,
                Dim::Port => group::PORT,
                Dim::Reason | Dim::Location => 0,
            }
        })
    }

    /// Fills the grouping and filter fields of the program's config, and returns the reason
    /// bitmap of the reason filter. Errors name what cannot be resolved.
    pub fn kernel(&self, reasons: &ReasonTable, cfg: &mut Config) -> anyhow::Result<Vec<u64>> {
        cfg.group = self.group_bits();
        if let Some(spec) = &self.netns {
            cfg.filter_netns = u32::try_from(netns_inode(spec)?)
                .context("this namespace's inode does not fit the filter")?;
        }
        if let Some(name) = &self.device {
            if name.is_empty() || name.len() > 15 {
                bail!("--device {name:?}: an interface name has 1 to 15 bytes");
            }
            cfg.filter_dev_on = 1;
            cfg.filter_dev = [0; 16];
            cfg.filter_dev[..name.len()].copy_from_slice(name.as_bytes());
        }
        if let Some(p) = self.protocol {
            cfg.filter_l4 = u32::from(p) + 1;
        }
        cfg.filter_port = self.port.map_or(0, u32::from);
        let mut bits = vec![0u64; (filter::REASON_BITS / 64) as usize];
        let (mode, names) = if !self.reason.is_empty() {
            (filter::REASONS_ONLY, &self.reason)
        } else if !self.exclude_reason.is_empty() {
            (filter::REASONS_EXCEPT, &self.exclude_reason)
        } else {
            (filter::REASONS_ALL, &self.reason)
        };
        cfg.filter_reasons = mode;
        cfg.need = 0;
        if cfg.group & (group::NETNS | group::DEVICE) != 0
            || cfg.filter_netns != 0
            || cfg.filter_dev_on != 0
        {
            cfg.need |= need::NETDEV;
        }
        if cfg.group & (group::PROTOCOL | group::PORT) != 0
            || cfg.filter_l4 != 0
            || cfg.filter_port != 0
        {
            cfg.need |= need::HEADERS;
        }
        if cfg.filter_netns != 0
            || cfg.filter_dev_on != 0
            || cfg.filter_l4 != 0
            || cfg.filter_port != 0
        {
            cfg.need |= need::FILTER;
        }
        if mode != filter::REASONS_ALL {
            cfg.need |= need::REASONS;
        }
        for name in names {
            let value = reasons
                .value_of(&name.to_ascii_uppercase())
                .with_context(|| {
                    let near = crate::explain::did_you_mean(name, reasons.iter().map(|(_, n)| n));
                    format!("unknown drop reason {name:?}{near} (`dropscope reasons` lists them)")
                })?;
            let bit = reason_bit(value)
                .with_context(|| format!("drop reason {name} cannot be filtered in the kernel"))?;
            bits[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        Ok(bits)
    }

    /// Whether a count of a recording passes the filters. A dimension the recording was not
    /// grouped by cannot match a filter on it.
    pub fn matches(&self, key: &DropKey) -> bool {
        let a = &key.attr;
        let eq = |got: Option<&str>, want: &str| got.is_some_and(|g| g == want);
        self.netns.as_ref().is_none_or(|n| {
            eq(a.netns_name.as_deref(), n) || a.netns.is_some_and(|i| i.to_string() == *n)
        }) && self
            .device
            .as_ref()
            .is_none_or(|d| eq(a.device.as_deref(), d))
            && self
                .protocol
                .is_none_or(|p| eq(a.protocol.as_deref(), &protocol_name(p)))
            && self.port.is_none_or(|p| a.port == Some(p))
            && (self.reason.is_empty() || self.reason.iter().any(|r| same_reason(&key.reason, r)))
            && !self
                .exclude_reason
                .iter()
                .any(|r| same_reason(&key.reason, r))
    }
}

fn same_reason(reason: &Reason, name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    let name = name.strip_prefix("SKB_DROP_REASON_").unwrap_or(&name);
    reason.name.as_ref() == name
}

/// Bit of a reason in the program's reason bitmap (subsystem in the high bits).
fn reason_bit(value: u32) -> Option<u32> {
    (value & 0xff00 == 0 && (value >> 16) < 16).then_some(((value >> 16) & 0xf) << 8 | value & 0xff)
}

/// The inode of a network namespace given by `ip netns` name, path, PID or inode number.
pub fn netns_inode(spec: &str) -> anyhow::Result<u64> {
    let named = Path::new("/run/netns").join(spec);
    let path = if !spec.contains('/') && named.exists() {
        named
    } else if spec.contains('/') {
        spec.into()
    } else if let Ok(n) = spec.parse::<u64>() {
        let proc = Path::new("/proc").join(spec).join("ns/net");
        // PIDs are small; namespace inodes are large (4026531840 and up).
        if n < (1 << 22) && proc.exists() {
            proc
        } else {
            return Ok(n);
        }
    } else {
        bail!(
            "--netns {spec:?}: no such namespace (give a name from `ip netns`, a path to a \
             namespace file, a PID or an inode)"
        );
    };
    let meta = std::fs::metadata(&path).with_context(|| format!("--netns {}", path.display()))?;
    Ok(meta.ino())
}

/// `udp`, `tcp`, `icmp`, `icmpv6`, or the number.
pub fn protocol_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmpv6".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

fn parse_protocol(s: &str) -> Result<u8, String> {
    match s.to_ascii_lowercase().as_str() {
        "icmp" => Ok(1),
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "icmpv6" => Ok(58),
        "sctp" => Ok(132),
        n => n
            .parse()
            .map_err(|_| format!("{s:?}: give udp, tcp, icmp, icmpv6, sctp or a number 0-255")),
    }
}

/// The snapshot with its counts grouped by `by` only: dimensions left out are merged (their
/// counts summed, their sampled packets pooled), so nothing is lost and the invariant holds.
pub fn regroup(s: &Snapshot, by: &[Dim]) -> Snapshot {
    let mut merged: HashMap<DropKey, u64> = HashMap::with_capacity(s.drops.len());
    for d in &s.drops {
        *merged.entry(coarser(&d.key, by)).or_default() += d.count;
    }
    let mut samples: HashMap<DropKey, Vec<Sample>> = HashMap::new();
    for k in &s.samples {
        samples
            .entry(coarser(&k.key, by))
            .or_default()
            .extend(k.packets.iter().cloned());
    }
    Snapshot {
        drops: merged
            .into_iter()
            .map(|(key, count)| DropCount { key, count })
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

/// `key` with the dimensions not in `by` merged away.
pub fn coarser(key: &DropKey, by: &[Dim]) -> DropKey {
    let has = |d| by.contains(&d);
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
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Attribution;

    fn count(reason: &str, netns: u64, device: &str, proto: &str, n: u64) -> DropCount {
        DropCount {
            key: DropKey {
                reason: Reason {
                    code: reason.len() as u32,
                    name: reason.into(),
                },
                location: "f+0x1".into(),
                attr: Attribution {
                    ifindex: None,
                    netns: Some(netns),
                    netns_name: Some(format!("ns{netns}").into()),
                    device: Some(device.into()),
                    protocol: Some(proto.into()),
                    port: None,
                },
            },
            count: n,
        }
    }

    fn snap() -> Snapshot {
        let drops = vec![
            count("NO_SOCKET", 1, "lo", "udp", 10),
            count("NO_SOCKET", 2, "lo", "udp", 20),
            count("NO_SOCKET", 2, "veth0", "tcp", 5),
            count("NETFILTER_DROP", 2, "veth0", "udp", 7),
        ];
        Snapshot {
            total: 42,
            drops,
            ..Snapshot::default()
        }
    }

    #[test]
    fn regrouping_coarser_merges_and_keeps_every_count() {
        let s = snap();
        let by_ns = regroup(&s, &[Dim::Netns]);
        assert_eq!(by_ns.drops.len(), 2);
        assert!(by_ns.invariant_holds());
        let ns2 = by_ns
            .drops
            .iter()
            .find(|d| d.key.attr.netns == Some(2))
            .expect("ns 2");
        assert_eq!(ns2.count, 32);
        assert_eq!(ns2.key.attr.device, None);
        let by_reason_proto = regroup(&s, &[Dim::Reason, Dim::Protocol]);
        assert_eq!(by_reason_proto.drops.len(), 3);
        assert_eq!(by_reason_proto.keyed_sum(), 42);
        let everything = regroup(&s, &[]);
        assert_eq!(everything.drops.len(), 1);
        assert_eq!(everything.drops[0].count, 42);
    }

    #[test]
    fn filters_match_names_numbers_and_reasons() {
        let s = snap();
        let sel = |f: &dyn Fn(&mut Selection)| {
            let mut x = Selection::default();
            f(&mut x);
            s.drops
                .iter()
                .filter(|d| x.matches(&d.key))
                .map(|d| d.count)
                .sum::<u64>()
        };
        assert_eq!(sel(&|x| x.netns = Some("ns2".into())), 32);
        assert_eq!(sel(&|x| x.netns = Some("1".into())), 10);
        assert_eq!(sel(&|x| x.device = Some("veth0".into())), 12);
        assert_eq!(sel(&|x| x.protocol = Some(6)), 5);
        assert_eq!(sel(&|x| x.reason = vec!["netfilter_drop".into()]), 7);
        assert_eq!(sel(&|x| x.exclude_reason = vec!["NO_SOCKET".into()]), 7);
        assert_eq!(
            sel(&|x| x.port = Some(53)),
            0,
            "not grouped by port: cannot match"
        );
    }

    #[test]
    fn group_bits_keep_the_namespace_with_the_device() {
        let s = Selection {
            by: vec![Dim::Reason, Dim::Device],
            ..Selection::default()
        };
        assert_eq!(s.group_bits(), group::DEVICE | group::NETNS);
    }

    #[test]
    fn protocols_parse_by_name_and_number() {
        assert_eq!(parse_protocol("UDP"), Ok(17));
        assert_eq!(parse_protocol("253"), Ok(253));
        assert!(parse_protocol("carrier-pigeon").is_err());
        assert_eq!(protocol_name(58), "icmpv6");
    }

    #[test]
    fn a_namespace_inode_is_taken_as_is_and_a_pid_is_looked_up() {
        assert_eq!(netns_inode("4026599999").expect("inode"), 4_026_599_999);
        let own = std::fs::metadata("/proc/self/ns/net")
            .expect("own netns")
            .ino();
        let pid = std::process::id().to_string();
        assert_eq!(netns_inode(&pid).expect("pid"), own);
        assert!(netns_inode("no-such-namespace-here").is_err());
    }
}
