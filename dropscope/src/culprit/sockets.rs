//! Who dropped a socket's row: the processes holding the socket the kernel keyed the drop by
//! (`SOCKET_RCVBUFF`, `SOCKET_FILTER`, `PROTO_MEM`, `SOCKET_BACKLOG`, TCP drops with a socket),
//! as its holders were found off the poll path (`collector::sockets`).
//!
//! - Exact: the kernel keyed the drops by the socket it had reached (`rx_sk`, 6.11+), and the
//!   processes holding that very inode were found.
//! - Candidates: the kernel named only the socket owning the packet (before 6.11): the one it
//!   had reached, or the one that sent it.
//! - Unknown, with why, where its holders were not found.
use std::collections::HashMap;

use super::{Culprit, Who};
use crate::{
    model::{DropKey, Snapshot, socket::buffer_reason},
    vocab::socket::{About, Socket, Via},
};

/// Whether a drop of reason `name` is the socket's doing (its buffer, its filter, its queue).
pub fn socket_reason(name: &str) -> bool {
    buffer_reason(name)
        || matches!(
            name,
            "SOCKET_FILTER" | "SOCKET_CLOSE" | "SOCKET_RCV_SHUTDOWN"
        )
        || name.starts_with("TCP_")
}

/// The socket of `key` as a culprit, where its reason is a socket's (see [`socket_reason`]).
pub fn culprit(key: &DropKey) -> Option<Culprit> {
    let s = key.attr.socket.as_deref()?;
    if !socket_reason(&key.reason.name) {
        return None;
    }
    let found = match &s.about {
        About::Exact(f) if !f.holders.is_empty() => f,
        About::Exact(_) => {
            return Some(Culprit::Unknown {
                why: format!(
                    "the kernel keyed these drops by socket {}, and no process held it when \
                     looked up",
                    s.inode
                ),
            });
        }
        About::Unknown { why } => {
            return Some(Culprit::Unknown {
                why: format!(
                    "the kernel keyed these drops by socket {}, whose holders were not found: \
                     {why}",
                    s.inode
                ),
            });
        }
    };
    let who = vec![who(s, found, buffer_reason(&key.reason.name))];
    Some(match s.via {
        Via::Receiving => Culprit::Exact {
            who,
            how: format!(
                "the kernel keyed these drops by the socket they had reached (inode {}), and \
                 these processes held it when looked up",
                s.inode
            ),
        },
        Via::Owner => Culprit::Candidates {
            who,
            why: format!(
                "this kernel names only the socket owning the packet (inode {}, before 6.11): \
                 the one it had reached, or the one that sent it",
                s.inode
            ),
        },
    })
}

fn who(s: &Socket, f: &crate::vocab::socket::Found, buffer: bool) -> Who {
    let t = |x: &str| crate::sanitize::terminal(x).into_owned();
    let mut processes: Vec<String> = (f.holders.iter())
        .map(|h| format!("{}[{}]", t(&h.comm), h.pid))
        .collect();
    if f.more_holders > 0 {
        processes.push(format!("and {} more", f.more_holders));
    }
    Who::Socket {
        local: f.local.as_deref().map_or_else(|| "?".into(), t),
        protocol: f.protocol.as_deref().map_or_else(|| "?".into(), t),
        processes,
        rcvbuf: f.rcvbuf.map(u64::from),
        inode: Some(s.inode),
        buffer,
    }
}

/// Who dropped each socket row of `snap`.
pub fn culprits(snap: &Snapshot) -> HashMap<DropKey, Culprit> {
    (snap.drops.iter())
        .filter_map(|d| Some((d.key.clone(), culprit(&d.key)?)))
        .collect()
}

/// Whether `key`'s culprit names its socket (then the socket's own cell would say it again).
pub fn named(key: &DropKey) -> bool {
    culprit(key).is_some_and(|c| !matches!(c, Culprit::Unknown { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(reason: &str, via: Via, about: About) -> DropKey {
        let k = crate::fixtures::key(9, reason, "udp_queue_rcv_one_skb+0x437");
        crate::fixtures::with_socket(k, via, about)
    }

    fn found() -> About {
        crate::fixtures::found("nginx\u{1b}[2J", "127.0.0.1:5353", 2304)
    }

    #[test]
    fn a_full_buffer_names_the_process_and_its_socket_exactly() {
        let k = key("SOCKET_RCVBUFF", Via::Receiving, found());
        let c = culprit(&k).expect("a culprit");
        assert_eq!(c.certainty(), "exact");
        let cell = crate::culprit::tui::cell(Some(&c));
        assert_eq!(cell, "nginx\\u{1b}[2J[812] udp 127.0.0.1:5353 rcvbuf 2304");
        assert!(c.line().contains("(inode 4242)"), "{}", c.line());
        let change = &c.changes()[0];
        for part in [
            "nginx\\u{1b}[2J[812] reads udp 127.0.0.1:5353 too slowly",
            "(now 2304 bytes) with SO_RCVBUF",
            "net.core.rmem_max",
            "`ss -uatnmp 'sport = :5353'`",
        ] {
            assert!(change.contains(part), "{part}: {change}");
        }
        assert!(named(&k));
    }

    #[test]
    fn an_owning_socket_is_a_candidate_and_an_unfound_one_unknown() {
        let owner = culprit(&key("SOCKET_RCVBUFF", Via::Owner, found())).expect("culprit");
        assert_eq!(owner.certainty(), "candidates");
        assert!(owner.because().contains("before 6.11"), "{owner:?}");
        let k = key(
            "PROTO_MEM",
            Via::Receiving,
            About::unknown("not looked up yet"),
        );
        let c = culprit(&k).expect("culprit");
        assert_eq!(c.certainty(), "unknown");
        assert!(c.because().contains("not looked up yet"), "{c:?}");
        assert!(!named(&k));
        // A filter's drop says to look at the socket, not at its buffer.
        let f = culprit(&key("SOCKET_FILTER", Via::Receiving, found())).expect("culprit");
        assert!(f.changes()[0].contains("a socket filter"), "{f:?}");
        assert!(!crate::culprit::tui::cell(Some(&f)).contains("rcvbuf"));
        // A drop that is not the socket's doing names nobody.
        assert!(culprit(&key("NETFILTER_DROP", Via::Owner, found())).is_none());
    }
}
