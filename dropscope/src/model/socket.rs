//! The socket a drop had reached, as it is shown: its line (`socket: nginx[812] udp
//! 0.0.0.0:53`, or unknown and why), a table's cell and the JSON report's, with the buffer's
//! limit where the reason is a full buffer. The socket itself (its identity and what was found
//! of it) is [`crate::vocab::socket`]'s.
use std::fmt::Write as _;

use serde::Serialize;

use crate::vocab::socket::{About, Socket, Via};

/// Longest socket cell of a table, in characters (the JSON and the detail view have it all).
pub const MAX_CELL: usize = 72;

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
    use crate::vocab::socket::{Found, Holder};

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
