//! A socket a drop had reached, as the readers find it and a key carries it: its identity
//! (the socket's inode, and which of the drop's sockets it is), what was found of it beside the
//! key (the processes holding it, its protocol, local address and receive buffer limit) and how
//! sure that is, and a process holding a socket open. How it is shown is the model's
//! (`model::socket`).
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The most processes named for one socket (a socket shared by more is said so, with how many
/// more were seen).
pub const MAX_HOLDERS: usize = 8;

/// Which of a drop's sockets a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The receiving socket the kernel names to the tracepoint (`rx_sk`, 6.11+): the packet
    /// had reached it.
    Receiving,
    /// The socket owning the skb (`skb->sk`): the socket that sent it, or one that had taken
    /// it in (before 6.11 the only socket a drop shows).
    Owner,
}

impl Via {
    /// The kernel key's value (`dropscope_common::sock_via`), `None` for no socket.
    pub fn from_kernel(v: u16) -> Option<Via> {
        match v {
            dropscope_common::sock_via::RX_SK => Some(Via::Receiving),
            dropscope_common::sock_via::SKB_SK => Some(Via::Owner),
            _ => None,
        }
    }

    /// What a line starts with: `socket` (the receiving socket) or `owning socket`.
    pub fn label(self) -> &'static str {
        match self {
            Via::Receiving => "socket",
            Via::Owner => "owning socket",
        }
    }
}

/// The socket of a drop: its identity (`via`, `inode`) and what is known of it (`about`).
/// Equal (and hashed and ordered) by identity alone: what was found of it is an attribute.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Socket {
    /// Which of the drop's sockets.
    pub via: Via,
    /// Its inode (`socket:[INODE]`); 0 for a socket without one (time-wait, request, or a
    /// kernel socket with no file).
    pub inode: u32,
    /// What was found of it (its fields beside `via` and `inode` in JSON).
    #[serde(flatten)]
    pub about: About,
}

impl PartialEq for Socket {
    fn eq(&self, other: &Self) -> bool {
        (self.via, self.inode) == (other.via, other.inode)
    }
}

impl Eq for Socket {}

impl std::hash::Hash for Socket {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.via, self.inode).hash(state);
    }
}

impl PartialOrd for Socket {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Socket {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.via, self.inode).cmp(&(other.via, other.inode))
    }
}

/// What was found of a socket, and how sure it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "sure", rename_all = "snake_case")]
pub enum About {
    /// Found: every process named held a descriptor of this very inode when looked at, and the
    /// address and buffer were read from that descriptor.
    Exact(Found),
    /// Not known; `why` says why.
    Unknown {
        /// Why (`not looked up yet`, `no process holds it`, a bound reached, ...).
        why: Arc<str>,
    },
}

impl About {
    /// Unknown for `why`.
    pub fn unknown(why: &str) -> About {
        About::Unknown { why: why.into() }
    }
}

/// A socket as `ss -p` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    /// The processes holding it (lowest pids first, at most [`MAX_HOLDERS`]).
    pub holders: Vec<Holder>,
    /// Processes seen holding it beyond those named.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_holders: u32,
    /// `udp`, `tcp`, `raw`, ... (`None`: not read).
    pub protocol: Option<Arc<str>>,
    /// The local address and port, `0.0.0.0:53` or `[::1]:53` (`None`: not read, or not an
    /// IP socket).
    pub local: Option<Arc<str>>,
    /// The receive buffer limit in bytes (`SO_RCVBUF`: `sk_rcvbuf`, what a queued packet's
    /// memory is held against).
    pub rcvbuf: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A process holding a socket open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Its pid (in dropscope's pid namespace).
    pub pid: u32,
    /// Its command name (`comm`), escaped.
    pub comm: String,
}
