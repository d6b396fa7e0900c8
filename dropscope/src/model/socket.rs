//! The socket a drop had reached: its identity, which the kernel keys the drop by (the socket's
//! inode, and which of the drop's sockets it is), and what was found of it beside the key (the
//! processes holding it, its protocol, local address and receive buffer limit), which says how
//! sure it is: exact, or unknown and why.
use std::{fmt::Write as _, sync::Arc};

use serde::{Deserialize, Serialize};

use super::kernel::Holder;

/// The most processes named for one socket (a socket shared by more is said so, with how many
/// more were seen).
pub const MAX_HOLDERS: usize = 8;

/// Longest socket cell of a table, in characters (the JSON and the detail view have it all).
pub const MAX_CELL: usize = 72;

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

/// Whether drops of reason `name` are of a full buffer, so the socket's limit explains them.
pub fn buffer_reason(name: &str) -> bool {
    matches!(
        name,
        "SOCKET_RCVBUFF" | "PROTO_MEM" | "SOCKET_BACKLOG" | "TCP_OFO_QUEUE_PRUNE"
    )
}

impl Socket {
    /// `socket: nginx[812] udp 0.0.0.0:53 rcvbuf 4608` (the limit where `buffer`), or
    /// `socket: unknown (why)`; terminal-safe.
    pub fn describe(&self, buffer: bool) -> String {
        format!("{}: {}", self.via.label(), self.what(buffer))
    }

    /// A table's cell: [`Self::describe`] without `socket: `, an owning socket marked `owner`.
    pub fn cell(&self, buffer: bool) -> String {
        match self.via {
            Via::Receiving => self.what(buffer),
            Via::Owner => format!("owner {}", self.what(buffer)),
        }
    }

    /// `nginx[812] udp 0.0.0.0:53 rcvbuf 4608` or `unknown (why)`; terminal-safe.
    fn what(&self, buffer: bool) -> String {
        let mut s = String::new();
        match &self.about {
            About::Exact(f) => {
                let who: Vec<String> = f
                    .holders
                    .iter()
                    .map(|h| format!("{}[{}]", crate::sanitize::terminal(&h.comm), h.pid))
                    .collect();
                s.push_str(&who.join(","));
                if f.more_holders > 0 {
                    let _ = write!(s, " and {} more", f.more_holders);
                }
                for part in [&f.protocol, &f.local].into_iter().flatten() {
                    let _ = write!(s, " {}", crate::sanitize::terminal(part));
                }
                if buffer && let Some(r) = f.rcvbuf {
                    let _ = write!(s, " rcvbuf {r}");
                }
            }
            About::Unknown { why } => {
                let _ = write!(s, "unknown ({})", crate::sanitize::terminal(why));
            }
        }
        s
    }
}

/// A row's socket in the JSON report: the socket (`via`, `inode`, and what was found: `sure`
/// `exact` with `holders`, `protocol`, `local`, `rcvbuf`, or `unknown` with `why`), and its
/// line as the text report and the TUI show it.
#[derive(Debug, Serialize)]
pub struct SocketJson<'a> {
    /// The socket.
    #[serde(flatten)]
    pub socket: &'a Socket,
    /// `socket: nginx[812] udp 0.0.0.0:53 rcvbuf 4608`, the limit shown where the row's
    /// reason is a full buffer.
    pub text: String,
}

impl<'a> SocketJson<'a> {
    /// `socket` of a row whose reason is `reason`.
    pub fn new(socket: &'a Socket, reason: &str) -> Self {
        Self {
            socket,
            text: socket.describe(buffer_reason(reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> Socket {
        Socket {
            via: Via::Receiving,
            inode: 4242,
            about: About::Exact(Found {
                holders: vec![Holder {
                    pid: 812,
                    comm: "nginx".into(),
                }],
                more_holders: 0,
                protocol: Some("udp".into()),
                local: Some("0.0.0.0:53".into()),
                rcvbuf: Some(4608),
            }),
        }
    }

    #[test]
    fn described_as_ss_shows_it() {
        assert_eq!(
            found().describe(true),
            "socket: nginx[812] udp 0.0.0.0:53 rcvbuf 4608"
        );
        assert_eq!(found().describe(false), "socket: nginx[812] udp 0.0.0.0:53");
        let s = Socket {
            via: Via::Owner,
            inode: 0,
            about: About::unknown("a time-wait or request socket"),
        };
        assert_eq!(
            s.describe(true),
            "owning socket: unknown (a time-wait or request socket)"
        );
    }

    #[test]
    fn identity_is_the_inode_and_which_socket() {
        let mut other = found();
        other.about = About::unknown("not looked up yet");
        assert_eq!(found(), other);
        other.via = Via::Owner;
        assert_ne!(found(), other);
    }

    #[test]
    fn a_hostile_name_cannot_reach_the_terminal() {
        let mut s = found();
        if let About::Exact(f) = &mut s.about {
            f.holders[0].comm = "evil\x1b[2J".into();
        }
        assert!(!s.describe(true).contains('\x1b'), "{}", s.describe(true));
    }

    #[test]
    fn json_is_flat_and_reads_back() {
        let json = serde_json::to_value(found()).expect("json");
        assert_eq!(json["sure"], "exact", "{json}");
        assert_eq!(json["holders"][0]["comm"], "nginx", "{json}");
        assert_eq!(json["rcvbuf"], 4608, "{json}");
        let back: Socket = serde_json::from_value(json).expect("reads back");
        assert_eq!(back.about, found().about);
    }

    #[test]
    fn only_buffer_reasons_show_the_limit() {
        assert!(buffer_reason("SOCKET_RCVBUFF"));
        assert!(buffer_reason("PROTO_MEM"));
        assert!(!buffer_reason("NO_SOCKET"));
    }
}
