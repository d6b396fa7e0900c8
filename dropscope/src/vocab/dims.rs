//! The dimensions a drop is counted, grouped and filtered by, and the names of their values
//! (reasons, protocols): the words the command line, the probe's kernel filter and the model
//! share. What a filter or grouping does to snapshots is `model::group`'s.
use std::{fmt, sync::Arc};

use serde::{Deserialize, Serialize};

/// A drop reason: the kernel's `enum skb_drop_reason` value and its name (without the
/// `SKB_DROP_REASON_` prefix), e.g. `NO_SOCKET`, or `UNKNOWN(n)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Reason {
    /// The raw enum value.
    pub code: u32,
    /// Its name on the kernel that produced it.
    pub name: Arc<str>,
}

/// A dimension drops can be grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// The socket the packet had reached (its process, protocol and local address).
    Socket,
    /// Who dropped it (the rule, chain policy, program or socket), derived per snapshot from
    /// the kernel's view beside the finer keys it needs, never counted by the kernel.
    Culprit,
}

impl Dim {
    /// Every dimension, in the order of a key.
    pub const ALL: [Dim; 8] = [
        Dim::Reason,
        Dim::Location,
        Dim::Netns,
        Dim::Device,
        Dim::Protocol,
        Dim::Port,
        Dim::Socket,
        Dim::Culprit,
    ];

    /// The dimensions the kernel counts by for a grouping of `by`: `by` itself, or, where it
    /// groups by culprit, what the culprit is derived from (reason, location, namespace,
    /// interface and socket) besides the rest of `by`, and never the culprit itself.
    pub fn counted(by: &[Dim]) -> Vec<Dim> {
        if !by.contains(&Dim::Culprit) {
            return by.to_vec();
        }
        let mut out: Vec<Dim> = (Dim::ALL.into_iter())
            .filter(|d| {
                by.contains(d)
                    || matches!(
                        d,
                        Dim::Reason | Dim::Location | Dim::Netns | Dim::Device | Dim::Socket
                    )
            })
            .collect();
        out.retain(|d| *d != Dim::Culprit);
        out
    }

    /// Its name on the command line and in headers.
    pub fn name(self) -> &'static str {
        match self {
            Dim::Reason => "reason",
            Dim::Location => "location",
            Dim::Netns => "netns",
            Dim::Device => "device",
            Dim::Protocol => "protocol",
            Dim::Port => "port",
            Dim::Socket => "socket",
            Dim::Culprit => "culprit",
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A namespace as a filter names it: its inode where it could be resolved on this machine,
/// and the text given (a name from `ip netns`, a container name, or the inode's digits).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetnsFilter {
    /// The inode the text resolved to here, if it did.
    pub inode: Option<u64>,
    /// The text given.
    pub text: String,
}

/// Which drops to keep: every field set must match. The same filter the kernel applies live.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only drops in this namespace.
    pub netns: Option<NetnsFilter>,
    /// Only drops on the interface with this name.
    pub device: Option<String>,
    /// Only this L4 protocol (its number).
    pub protocol: Option<u8>,
    /// Only drops to this destination port.
    pub port: Option<u16>,
    /// Only these reasons (names, any case, with or without `SKB_DROP_REASON_`).
    pub reasons: Vec<String>,
    /// Every reason but these.
    pub exclude_reasons: Vec<String>,
}

impl Filter {
    /// Whether any field is set.
    pub fn is_set(&self) -> bool {
        *self != Filter::default()
    }
}

/// The canonical form of a reason name, as dropscope shows it: upper case, without the
/// kernel's `SKB_DROP_REASON_` (or `SKB_`) prefix. The one normalizer of reason names.
pub fn reason_name(name: &str) -> String {
    let name = name.trim().to_ascii_uppercase();
    let name = name.strip_prefix("SKB_DROP_REASON_").unwrap_or(&name);
    name.strip_prefix("SKB_").unwrap_or(name).to_string()
}

/// `udp`, `tcp`, `icmp`, `icmpv6`, `sctp`, `hopopt` (IPv6's hop-by-hop options header, next
/// header 0, as `/etc/protocols` names it), or the number.
pub fn protocol_name(p: u8) -> String {
    match p {
        0 => "hopopt".into(),
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmpv6".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

/// The protocol a name of [`protocol_name`] stands for (any case), or the number given.
pub fn protocol_number(name: &str) -> Option<u8> {
    let name = name.to_ascii_lowercase();
    (name.parse().ok()).or_else(|| (0..=u8::MAX).find(|&p| protocol_name(p) == name))
}
