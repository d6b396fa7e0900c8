//! One reading of the kernel's own counters, as the readers ([`crate::kcounters`], the
//! programs' verdicts of `probe::verdicts`) make it and a snapshot carries it: how much each
//! counter grew per network namespace since the session started, with what was found beside
//! the counts (the devices its counters name, full TCP listeners, the namespaces' cookies, drop
//! rules and attached programs). What the model computes over readings (a window between two,
//! packets, growth) is `model::kernel`'s.
//!
//! Counters are named as `nstat` groups them: `Udp:NoPorts`, `TcpExt:ListenDrops`,
//! `Dev:<interface>:RxDrop`, `Softnet:Dropped`. Besides the drop counters a reading holds the
//! packets the kernel handled (the denominators of drop ratios).
use std::{collections::BTreeMap, sync::Arc};

use serde::{Deserialize, Serialize};

use super::{devices::Devices, socket::Holder};
use crate::culprit::{attached::Attached, ruleset::RulesWindow};

/// Where named namespaces are bound (`ip netns add`): where the readers look for them, and
/// where the commands a row suggests enter them.
pub const RUN_NETNS: &str = "/run/netns";

/// Counter growth per counter name in one namespace.
pub type Growth = BTreeMap<Arc<str>, u64>;

/// One reading of the kernel's counters, as growth since the session started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelReading {
    /// When it was read, milliseconds since the Unix epoch. A live snapshot carries the
    /// latest reading taken before its own maps were read, so every drop a counter had
    /// counted by then, the snapshot's counts have too.
    pub unix_ms: u64,
    /// The initial network namespace's inode number.
    pub initial_netns: u64,
    /// Growth since the session started (or since the namespace was first read), per
    /// namespace inode; counters that did not grow are left out.
    pub netns: BTreeMap<u64, Growth>,
    /// Namespaces that could not be read, and why (and how many waited for a later poll).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Per namespace, the devices its per-device counters name, by interface index (where
    /// the reading knew them): a window between two readings follows a device renamed between
    /// them (`KernelReading::since`, the model's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<u64, Devices>,
    /// Per namespace, the TCP listeners whose accept queue was full when it was read (see
    /// [`Listener`]); a namespace where none was is left out. Recordings carry them from
    /// format 8 on (an older one's replayed readings have none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub listeners: BTreeMap<u64, Vec<Listener>>,
    /// Per namespace inode, the cookie of the namespace read under it (where it was read):
    /// the kernel gives a freed inode to a later namespace, so a drop whose key has another
    /// cookie is of a namespace that ended, and is never matched with these counters.
    /// Recordings carry them from format 8 on (an older one's replayed readings match by
    /// inode).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cookies: BTreeMap<u64, u64>,
    /// Per namespace inode (the initial one aside), its name as the collector found it (see
    /// [`crate::names`]; kept as data, escaped where shown), so that a namespace no drop names
    /// (only unseen drops, or only counters) is named in the ledger and `serve`'s series as
    /// its drops would be. Recordings carry them from format 10 on (an older one's replayed
    /// readings name only the namespaces their drops name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<u64, Arc<str>>,
    /// Per namespace, its nftables drop rules and chains as last read, and each counted
    /// rule's growth (see [`crate::culprit`]). Recordings carry them from format 8 on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<u64, RulesWindow>,
    /// Per namespace, the BPF programs attached to its devices as last read (see
    /// [`crate::culprit::programs`]). Recordings carry them from format 8 on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attached: BTreeMap<u64, Vec<Attached>>,
    /// Whether `rules` and `attached` were read (a live reading, or one recorded from format 8
    /// on); a reading of an older recording has neither (see [`crate::culprit`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attributed: bool,
}

/// A TCP listener whose accept queue was full when the kernel's counters were read (the
/// kernel's own test: more connections waiting to be accepted than its backlog), so the one
/// refusing handshakes then (`TcpExt:ListenDrops`); names are escaped where they are read (see
/// [`crate::sanitize::kernel_name`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    /// Its local address and port: `127.0.0.1:8080`, `[::]:443`.
    pub addr: String,
    /// Its local port.
    pub port: u16,
    /// Connections waiting to be accepted.
    pub queue: u32,
    /// Its backlog (the accept queue's limit).
    pub backlog: u32,
    /// The socket's inode number.
    pub inode: u64,
    /// The process holding it (the first found with the socket open), where one was found.
    pub process: Option<Holder>,
}
