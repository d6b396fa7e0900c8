//! What an attribution is (the types, a leaf the model's snapshot can hold): who dropped a
//! row's packets and how sure that is, and a row's culprit where rows are grouped by it. What
//! derives, names and groups them is in the modules beside this one.
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::ruleset::Verdict;

/// Who dropped the packets of one row, and how sure that is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "certainty", rename_all = "lowercase")]
pub enum Culprit {
    /// A counter or the kernel said so: these dropped them (with their counts where counted).
    Exact {
        /// Who.
        who: Vec<Who>,
        /// How it is known.
        how: String,
    },
    /// One or more of these dropped them; which cannot be told.
    Candidates {
        /// Who could have.
        who: Vec<Who>,
        /// Why it cannot be told which.
        why: String,
    },
    /// Who dropped them is not known.
    Unknown {
        /// Why not.
        why: String,
    },
}

/// One culprit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Who {
    /// An nftables (or iptables-nft) rule whose verdict drops.
    Rule {
        /// `inet`, `ip`, `ip6`, `arp`, `bridge`, `netdev`.
        family: String,
        /// Its table.
        table: String,
        /// Its chain.
        chain: String,
        /// Its chain's hook, where it is a base chain.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<String>,
        /// Its handle.
        handle: u64,
        /// Its place in its chain, from 1.
        position: u32,
        /// `drop` or `reject`.
        verdict: Verdict,
        /// Its comment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
        /// Packets its counter counted in the window (absent: the rule has no counter).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        counted: Option<u64>,
        /// Its expressions' kinds, in order.
        exprs: String,
    },
    /// A base chain whose policy is `drop`.
    Policy {
        /// Its family.
        family: String,
        /// Its table.
        table: String,
        /// The chain.
        chain: String,
        /// Its hook.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<String>,
    },
    /// A tc or XDP program at its attach point.
    Program {
        /// `prog NAME#ID`.
        program: String,
        /// Where: device and hook (`veth0 tc ingress`, `veth0 xdp generic`).
        attach: String,
        /// A tc filter's priority (`pref`), as `tc filter show` prints it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pref: Option<u16>,
        /// A tc filter's handle, as `tc filter show` prints it (`0x1`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        handle: Option<String>,
    },
    /// The socket the kernel keyed the drops by (its buffer full, its filter, its queue), and
    /// the processes holding it.
    Socket {
        /// Its local address and port.
        local: String,
        /// Its protocol.
        protocol: String,
        /// The processes holding it (`comm[pid]`).
        processes: Vec<String>,
        /// Its receive buffer's limit, in bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rcvbuf: Option<u64>,
        /// Its inode (`socket:[INODE]`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        inode: Option<u32>,
        /// Whether the drops were of a full buffer (the receive buffer explains them).
        #[serde(default)]
        buffer: bool,
    },
    /// More culprits than are listed.
    More {
        /// How many more.
        count: usize,
    },
}

/// A row's culprit where rows are grouped by it: the label it groups by, and the culprit of
/// the rows it merged (`None`: nobody is named).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grouped {
    /// What rows group by: the certainty and who is named, without counts.
    pub label: Arc<str>,
    /// The culprit (counts summed over the rows merged).
    pub culprit: Option<Culprit>,
}
