//! `--by` and the filters on the command line, and what they become: the [`Filter`] and
//! [`Dim`]s the model groups and filters by, resolved against this machine for counting live,
//! or taken as written for a recording (checked against one by the commands, `cmd::selection`).
use clap::{Args, ValueEnum, builder::PossibleValue};

use crate::{
    names::spec,
    vocab::dims::{self, Dim, Filter, NetnsFilter},
};

/// The grouping when `--by` is not given: answers "which namespace, interface and protocol"
/// with a handful of keys per drop site for a few ns per drop (loads through the kernel's own
/// pointers; the IP header typed by `bpf_rdonly_cast`, 6.2+; before 6.2 it is read with
/// `bpf_probe_read_kernel`, tens of ns). The port is opt-in: it multiplies keys. The socket
/// (where the drop has one: a null test for a drop without) keys socket drops by the socket
/// they had reached, named by its process and address beside the key.
pub const DEFAULT_BY: &str = "reason,location,netns,device,protocol,socket";

impl ValueEnum for Dim {
    fn value_variants<'a>() -> &'a [Self] {
        &Dim::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            Dim::Reason => "the kernel's drop reason",
            Dim::Location => "the kernel function (and offset) that dropped the packet",
            Dim::Netns => "the packet's network namespace (container, pod, ip netns)",
            Dim::Device => "the interface (within its namespace)",
            Dim::Protocol => "the L4 protocol (udp, tcp, icmp, icmpv6, or its number)",
            Dim::Port => "the destination port (multiplies keys: opt-in)",
            Dim::Socket => "the socket the packet had reached (its process and local address)",
            Dim::Culprit => {
                "who dropped it (rule, chain policy, program, socket), derived beside the keys; \
                 rows whose culprit is unknown group under `unknown`, rows nobody is named for \
                 under `none`"
            }
        };
        Some(PossibleValue::new(self.name()).help(help))
    }
}

/// `--by` and the filters, shared by every command that shows drops, live or recorded.
#[derive(Clone, Debug, Default, Args)]
pub struct Selection {
    /// Group drops by these dimensions (a comma list of reason, location, netns, device,
    /// protocol, port, socket, culprit). Live, the kernel keeps exactly these; on a recording, its
    /// counts are grouped coarser; `b` in the TUI regroups coarser. culprit (who dropped it: the
    /// rule, chain policy, program or socket, with its certainty) is derived per snapshot from
    /// the kernel's view: the kernel then counts by reason, location, netns, device and socket
    /// too, and rows are grouped after the derivation; every row whose culprit is unknown groups
    /// under `unknown`, a row nobody is named for (no rule, program or socket makes such drops)
    /// under `none`.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_BY, value_name = "DIMS")]
    pub by: Vec<Dim>,
    /// Only drops in this network namespace: a name from `ip netns`, a path to a namespace
    /// file, a PID, or an inode number (on a recording: its namespace name or inode).
    #[arg(long, value_name = "NS")]
    pub netns: Option<String>,
    /// Only drops on the interface with this name.
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Only drops of this L4 protocol: udp, tcp, icmp, icmpv6, sctp, hopopt (IPv6 hop-by-hop)
    /// or a number.
    #[arg(long, value_parser = parse_protocol, value_name = "PROTO")]
    pub protocol: Option<u8>,
    /// Only drops to this destination port.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..), value_name = "N")]
    pub port: Option<u16>,
    /// Only these drop reasons (comma list of names, e.g. NO_SOCKET,NETFILTER_DROP).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub reason: Vec<String>,
    /// Every drop reason but these (comma list of names).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NAMES",
        conflicts_with = "reason"
    )]
    pub exclude_reason: Vec<String>,
    /// Only the rows whose culprit (who dropped them, as the report prints it: its certainty
    /// and the rules, chain policies, programs or sockets it names) contains PATTERN, in any
    /// case (e.g. `cali:`, `handle 4`, `exact`); the total is then theirs. The culprit is
    /// derived from the finer keys it needs (as for `--by culprit`), before grouping.
    #[arg(long, value_name = "PATTERN")]
    pub culprit: Option<String>,
}

impl Selection {
    /// Whether `--by` was left at its default (a recording is then shown as it was counted).
    pub fn default_by(&self) -> bool {
        let default: Vec<Dim> = DEFAULT_BY
            .split(',')
            .filter_map(|d| Dim::from_str(d, false).ok())
            .collect();
        self.by == default
    }

    /// Whether the culprit is derived (grouped or filtered by).
    pub fn derives_culprit(&self) -> bool {
        self.culprit.is_some() || self.by.contains(&Dim::Culprit)
    }

    /// The dimensions to count by: `--by`, or where the culprit is derived, what it is
    /// derived from besides (see [`Dim::counted`]).
    pub fn counted_by(&self) -> Vec<Dim> {
        if !self.derives_culprit() {
            return self.by.clone();
        }
        let mut by = self.by.clone();
        by.push(Dim::Culprit);
        Dim::counted(&by)
    }

    /// The filter as given, with the namespace taken as written (a recording's namespace is
    /// matched by its name or inode, whatever this machine has).
    pub fn filter(&self) -> Filter {
        Filter {
            netns: self.netns.as_ref().map(|text| NetnsFilter {
                inode: text.parse().ok(),
                text: text.clone(),
            }),
            device: self.device.clone(),
            protocol: self.protocol,
            port: self.port,
            reasons: self.reason.clone(),
            exclude_reasons: self.exclude_reason.clone(),
        }
    }

    /// The filter for counting live: the namespace resolved to its inode here, and an
    /// interface no namespace has refused (as a mistyped namespace is).
    pub fn live_filter(&self) -> anyhow::Result<Filter> {
        let mut f = self.filter();
        if let Some(ns) = &mut f.netns {
            ns.inode = Some(spec::netns_inode(&ns.text)?);
        }
        if let Some(d) = &f.device
            && !spec::device_exists(d)
        {
            anyhow::bail!(
                "--device {d:?}: no such interface in any network namespace here (`ip -all \
                 netns exec ip -brief link` lists them)"
            );
        }
        Ok(f)
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
            parts.push(format!("protocol {}", dims::protocol_name(p)));
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
        if let Some(c) = &self.culprit {
            parts.push(format!("culprit {c}"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// Refuses a reason name that neither `seen` (names of the counts at hand) nor the reason
/// guide has, with the closest names: a typo would match nothing, silently.
pub fn check_reason(name: &str, seen: &std::collections::BTreeSet<String>) -> anyhow::Result<()> {
    let n = dims::reason_name(name);
    let guide = crate::explain::Guide::builtin();
    if !seen.contains(&n) && !guide.reasons().iter().any(|e| e.name == n) {
        let near = crate::suggest::did_you_mean(
            name,
            seen.iter()
                .map(String::as_str)
                .chain(guide.reasons().iter().map(|e| e.name.as_str())),
        );
        anyhow::bail!("unknown drop reason {name:?}{near} (`dropscope reasons` lists them)");
    }
    Ok(())
}

fn parse_protocol(s: &str) -> Result<u8, String> {
    dims::protocol_number(s).ok_or_else(|| {
        format!("{s:?}: give udp, tcp, icmp, icmpv6, sctp, hopopt or a number 0-255")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_by_name_and_number() {
        assert_eq!(parse_protocol("UDP"), Ok(17));
        assert_eq!(parse_protocol("253"), Ok(253));
        assert!(parse_protocol("carrier-pigeon").is_err());
    }

    /// Grouping or filtering by culprit counts by what the culprit is derived from; the rest
    /// of `--by` is kept, the culprit itself never counted by the kernel.
    #[test]
    fn the_culprit_is_counted_by_what_it_is_derived_from() {
        let s = Selection {
            by: vec![Dim::Port, Dim::Culprit],
            ..Selection::default()
        };
        assert!(s.derives_culprit());
        assert_eq!(
            s.counted_by(),
            [
                Dim::Reason,
                Dim::Location,
                Dim::Netns,
                Dim::Device,
                Dim::Port,
                Dim::Socket
            ]
        );
        let s = Selection {
            by: vec![Dim::Reason],
            culprit: Some("cali:".into()),
            ..Selection::default()
        };
        assert!(s.counted_by().contains(&Dim::Netns) && !s.counted_by().contains(&Dim::Culprit));
        assert_eq!(s.describe().as_deref(), Some("culprit cali:"));
        let s = Selection {
            by: vec![Dim::Reason],
            ..Selection::default()
        };
        assert!(!s.derives_culprit());
        assert_eq!(s.counted_by(), [Dim::Reason]);
    }

    #[test]
    fn a_mistyped_device_is_refused_live() {
        let s = Selection {
            device: Some("nosuchdev0".into()),
            ..Selection::default()
        };
        let e = s.live_filter().expect_err("no such interface");
        assert!(e.to_string().contains("nosuchdev0"), "{e}");
        let lo = Selection {
            device: Some("lo".into()),
            ..Selection::default()
        };
        assert_eq!(lo.live_filter().expect("lo").device.as_deref(), Some("lo"));
    }
}
