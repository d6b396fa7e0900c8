//! AF_XDP sockets' drop statistics in the calling thread's namespace, through `sock_diag`
//! (`SOCK_DIAG_BY_FAMILY` for `AF_XDP` with `XDP_SHOW_INFO | XDP_SHOW_STATS`: what `ss --xdp`
//! asks, and what each socket's `XDP_STATISTICS` option gives its owner).
//!
//! Counters are named `Xsk:<dev>:q<queue>:sk<inode>:<stat>`: `rx_dropped` (no buffer in the
//! fill ring, or a frame too large), `rx_ring_full` (the application did not empty its rx
//! ring), and the details `fill_ring_empty`, `rx_invalid` and `tx_invalid`. A socket gets
//! packets only from an XDP program that redirects to it, so a namespace is asked only when
//! its link dump found an XDP program (no syscall otherwise).
//!
//! Bounded as the rtnetlink dumps are: at most [`MAX_SOCKETS`] sockets, [`DUMP_TIME`], and a
//! receive that waits longer than [`RECV_TIMEOUT`] ends the dump; each cut is a note.
use std::{collections::HashMap, time::Instant};

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};

use super::{
    netlink::{
        DUMP_TIME, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_HDR, RECV_TIMEOUT, SOCK_DIAG_BY_FAMILY, u16_at,
        u32_at,
    },
    parse::Counters,
};
use crate::vocab::{counter::Counter, note::NO_DIAG};

/// The most sockets read in one namespace.
pub const MAX_SOCKETS: usize = 1024;
/// `AF_XDP`.
const AF_XDP: u8 = 44;
const XDP_SHOW_INFO: u32 = 1;
const XDP_SHOW_STATS: u32 = 1 << 4;
const XDP_DIAG_INFO: u16 = 1;
const XDP_DIAG_STATS: u16 = 9;
/// `struct xdp_diag_msg`.
const XDP_DIAG_MSG: usize = 16;

/// The statistics kept, in `struct xdp_diag_stats` order (`None`: not a drop, left out).
const STATS: [Option<&str>; 6] = [
    Some("rx_dropped"),
    Some("rx_invalid"),
    Some("rx_ring_full"),
    Some("fill_ring_empty"),
    Some("tx_invalid"),
    None, // n_tx_ring_empty: the application had nothing to send
];

/// One socket's answer.
#[derive(Debug, Default, PartialEq, Eq)]
struct Xsk {
    inode: u32,
    /// Device index and queue, where the socket is bound.
    bound: Option<(u32, u32)>,
    stats: Option<[u64; 6]>,
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The dump request.
fn request(sequence: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(NLMSG_HDR + 20);
    b.extend_from_slice(&((NLMSG_HDR + 20) as u32).to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b.extend_from_slice(&sequence.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    // struct xdp_diag_req: family, protocol, pad, ino, show, cookie[2].
    b.extend_from_slice(&[AF_XDP, 0, 0, 0]);
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&(XDP_SHOW_INFO | XDP_SHOW_STATS).to_ne_bytes());
    b.extend_from_slice(&[0u8; 8]);
    b
}

/// One `xdp_diag_msg` and its attributes.
fn socket(payload: &[u8]) -> Option<Xsk> {
    let mut x = Xsk {
        inode: u32_at(payload, 4)?,
        ..Xsk::default()
    };
    let mut at = XDP_DIAG_MSG;
    while at + 4 <= payload.len() {
        let len = usize::from(u16_at(payload, at)?);
        let kind = u16_at(payload, at + 2)? & 0x3fff;
        if len < 4 || at + len > payload.len() {
            break;
        }
        let value = &payload[at + 4..at + len];
        match kind {
            XDP_DIAG_INFO => x.bound = Some((u32_at(value, 0)?, u32_at(value, 4)?)),
            XDP_DIAG_STATS => {
                let mut s = [0u64; 6];
                for (i, v) in s.iter_mut().enumerate() {
                    *v = u64_at(value, i * 8)?;
                }
                x.stats = Some(s);
            }
            _ => {}
        }
        at += len.next_multiple_of(4);
    }
    Some(x)
}

/// What one datagram of the answer held: sockets, whether the dump is done, an error.
fn datagram(b: &[u8], sequence: u32, out: &mut Vec<Xsk>) -> std::io::Result<bool> {
    super::netlink::sock_diag_datagram(b, sequence, |p| out.extend(socket(p)))
}

/// Adds the AF_XDP sockets' counters of the calling thread's namespace to `out`, devices named
/// by `names` (index to escaped name); notes for what could not be read or was cut.
pub fn read(names: &HashMap<u32, String>, out: &mut Counters) -> Vec<String> {
    match dump() {
        Ok((sockets, note)) => {
            counters(&sockets, names, out);
            note.into_iter().collect()
        }
        // A kernel without AF_XDP has no such sockets.
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => Vec::new(),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => vec![format!(
            "{NO_DIAG}: this kernel answers no AF_XDP sock_diag request (built without \
             CONFIG_XDP_SOCKETS_DIAG, or its xsk_diag module cannot be loaded)"
        )],
        Err(e) => vec![format!("{NO_DIAG}: {e}")],
    }
}

fn dump() -> std::io::Result<(Vec<Xsk>, Option<String>)> {
    let s = Socket::new(NETLINK_SOCK_DIAG)?;
    socket2::SockRef::from(&s).set_read_timeout(Some(RECV_TIMEOUT))?;
    let sequence = 1;
    s.send_to(&request(sequence), &SocketAddr::new(0, 0), 0)?;
    let start = Instant::now();
    let mut out = Vec::new();
    let mut recv = vec![0u8; 32 << 10];
    loop {
        if out.len() >= MAX_SOCKETS || start.elapsed() > DUMP_TIME {
            return Ok((
                out,
                Some(format!(
                    "AF_XDP sockets: dump cut (at most {MAX_SOCKETS} in {}s)",
                    DUMP_TIME.as_secs()
                )),
            ));
        }
        let n = match s.recv(&mut &mut recv[..], 0) {
            Ok(n) => n.min(recv.len()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let note = "AF_XDP sockets: the kernel stopped answering".to_string();
                return Ok((out, Some(note)));
            }
            Err(e) => return Err(e),
        };
        if n == 0 || datagram(&recv[..n], sequence, &mut out)? {
            return Ok((out, None));
        }
    }
}

/// The counters of `sockets` that are not zero.
fn counters(sockets: &[Xsk], names: &HashMap<u32, String>, out: &mut Counters) {
    for x in sockets {
        let (Some((ifindex, queue)), Some(stats)) = (x.bound, x.stats) else {
            continue;
        };
        let dev = names
            .get(&ifindex)
            .cloned()
            .unwrap_or_else(|| format!("if{ifindex}"));
        for (name, v) in STATS.iter().zip(stats) {
            if let (Some(name), true) = (name, v > 0) {
                let (queue, socket) = (queue.to_string(), x.inode.to_string());
                let c = Counter::Xsk {
                    dev: &dev,
                    queue: &queue,
                    socket: &socket,
                    stat: name,
                };
                out.insert(c.to_string(), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kcounters::netlink::{NLMSG_DONE, NLMSG_ERROR};

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    fn message(seq: u32, kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((NLMSG_HDR + payload.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(payload);
        b
    }

    fn xsk(inode: u32, ifindex: u32, queue: u32, stats: [u64; 6]) -> Vec<u8> {
        let mut p = vec![AF_XDP, 3, 0, 0];
        p.extend_from_slice(&inode.to_ne_bytes());
        p.extend_from_slice(&[0u8; 8]);
        let info: Vec<u8> = [ifindex, queue]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        p.extend(attr(XDP_DIAG_INFO, &info));
        p.extend(attr(5, &[1, 2, 3])); // another attribute, skipped
        let s: Vec<u8> = stats.iter().flat_map(|v| v.to_ne_bytes()).collect();
        p.extend(attr(XDP_DIAG_STATS, &s));
        p
    }

    #[test]
    fn sockets_become_counters_of_their_device_and_queue() {
        let mut b = message(
            7,
            SOCK_DIAG_BY_FAMILY,
            &xsk(1234, 3, 0, [500, 0, 2, 500, 1, 9]),
        );
        b.extend(message(6, SOCK_DIAG_BY_FAMILY, &xsk(99, 3, 0, [1; 6]))); // an older dump's
        b.extend(message(7, SOCK_DIAG_BY_FAMILY, &xsk(55, 42, 3, [0; 6])));
        b.extend(message(7, NLMSG_DONE, &[0; 4]));
        let mut found = Vec::new();
        assert!(datagram(&b, 7, &mut found).expect("parsed"));
        assert_eq!(found.len(), 2);
        let mut out = Counters::new();
        counters(&found, &HashMap::from([(3, "vb".to_string())]), &mut out);
        let got: Vec<(&str, u64)> = out.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            got,
            [
                ("Xsk:vb:q0:sk1234:fill_ring_empty", 500),
                ("Xsk:vb:q0:sk1234:rx_dropped", 500),
                ("Xsk:vb:q0:sk1234:rx_ring_full", 2),
                ("Xsk:vb:q0:sk1234:tx_invalid", 1),
            ]
        );
        assert_eq!(request(9).len(), 36);
    }

    #[test]
    fn truncated_or_hostile_answers_end_the_parse_without_panicking() {
        let whole = message(7, SOCK_DIAG_BY_FAMILY, &xsk(1, 3, 0, [5; 6]));
        for cut in 0..whole.len() {
            let mut found = Vec::new();
            let _ = datagram(&whole[..cut], 7, &mut found);
            assert!(found.iter().all(|x| x.stats.is_none_or(|s| s == [5; 6])));
        }
        // A length of zero, or past the end, in a header or an attribute.
        let mut bad = whole.clone();
        bad[NLMSG_HDR + XDP_DIAG_MSG] = 0;
        bad[NLMSG_HDR + XDP_DIAG_MSG + 1] = 0;
        let mut found = Vec::new();
        assert!(!datagram(&bad, 7, &mut found).expect("parsed"));
        assert_eq!(
            found,
            [Xsk {
                inode: 1,
                ..Xsk::default()
            }]
        );
        let err = message(7, NLMSG_ERROR, &(-libc::ENOENT).to_ne_bytes());
        let e = datagram(&err, 7, &mut Vec::new()).expect_err("an error");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    /// This namespace's dump answers (with no socket, or with those some process has), or,
    /// where the kernel has no AF_XDP sock_diag, says so.
    #[test]
    fn this_namespace_dumps_or_says_why_not() {
        let mut out = Counters::new();
        let notes = read(&HashMap::new(), &mut out);
        match dump() {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                assert_eq!(notes.len(), 1, "{notes:?}");
                assert!(notes[0].starts_with(NO_DIAG) && notes[0].contains("CONFIG_XDP"));
            }
            _ => assert!(notes.is_empty(), "{notes:?}"),
        }
    }
}
