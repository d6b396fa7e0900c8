//! What the kernel-counter readers' netlink dumps share: the bounds every dump keeps
//! (rtnetlink's links, qdiscs and filters; sock_diag's AF_XDP sockets and TCP listeners), and
//! the sock_diag message layout read by hand.
use std::time::Duration;

/// The longest one dump may take.
pub const DUMP_TIME: Duration = Duration::from_secs(2);
/// The longest one receive waits for the kernel.
pub const RECV_TIMEOUT: Duration = Duration::from_millis(500);

/// `SOCK_DIAG_BY_FAMILY`.
pub const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_DUMP`.
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `struct nlmsghdr`.
pub const NLMSG_HDR: usize = 16;

/// The native-endian `u16` at `at`, where `b` holds it.
pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The native-endian `u32` at `at`, where `b` holds it.
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// One netlink message of a dump's answer: its type, its flags and its payload.
pub type Message<'a> = (u16, u16, &'a [u8]);

/// Reads the answer to a dump request sent on `s` with `sequence`: every message of that
/// sequence is handed to `each` (which returns false to stop), until `NLMSG_DONE`, an error
/// (returned), `limit` (`Ok(Some(note))`; [`DUMP_TIME`] at most) or a receive that waits
/// longer than the socket's timeout (`Ok(Some(note))`). `what` names the dump in notes.
pub fn answer(
    s: &netlink_sys::Socket,
    sequence: u32,
    what: &str,
    limit: Duration,
    mut each: impl FnMut(Message<'_>) -> bool,
) -> std::io::Result<Option<String>> {
    let start = std::time::Instant::now();
    let mut recv = vec![0u8; 64 << 10];
    loop {
        let limit = limit.min(DUMP_TIME);
        if start.elapsed() > limit {
            return Ok(Some(format!("{what}: dump cut after {limit:?}")));
        }
        let n = match s.recv(&mut &mut recv[..], 0) {
            Ok(n) => n.min(recv.len()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Ok(Some(format!("{what}: the kernel stopped answering")));
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(None);
        }
        match walk(&recv[..n], sequence, &mut each)? {
            Walk::More => {}
            Walk::Done => return Ok(None),
            Walk::Stopped => return Ok(Some(format!("{what}: dump cut"))),
        }
    }
}

/// How far the messages of one datagram took a dump.
#[derive(Debug, PartialEq, Eq)]
enum Walk {
    /// More datagrams follow.
    More,
    /// `NLMSG_DONE`, or the acknowledgement that ends a request that is not a dump.
    Done,
    /// The reader of the messages asked to stop.
    Stopped,
}

/// Walks the messages of one datagram `b`: each of `sequence` but `NLMSG_DONE` and
/// `NLMSG_ERROR` is handed to `each` (false: stop); the error the kernel answered is
/// returned. A message cut short ends the walk, never read past the datagram.
fn walk(
    b: &[u8],
    sequence: u32,
    mut each: impl FnMut(Message<'_>) -> bool,
) -> std::io::Result<Walk> {
    let mut at = 0;
    while at + NLMSG_HDR <= b.len() {
        let (Some(len), Some(kind), Some(flags), Some(seq)) = (
            u32_at(b, at),
            u16_at(b, at + 4),
            u16_at(b, at + 6),
            u32_at(b, at + 8),
        ) else {
            break;
        };
        let len = len as usize;
        if len < NLMSG_HDR || at + len > b.len() {
            break;
        }
        let payload = &b[at + NLMSG_HDR..at + len];
        if seq == sequence {
            match kind {
                NLMSG_DONE => return Ok(Walk::Done),
                NLMSG_ERROR => {
                    let errno = u32_at(payload, 0).map_or(0, |e| e as i32);
                    if errno != 0 {
                        return Err(std::io::Error::from_raw_os_error(-errno));
                    }
                    return Ok(Walk::Done);
                }
                _ => {
                    if !each((kind, flags, payload)) {
                        return Ok(Walk::Stopped);
                    }
                }
            }
        }
        at += len.next_multiple_of(4);
    }
    Ok(Walk::More)
}

/// Walks one datagram of a `sock_diag` dump's answer: hands each `SOCK_DIAG_BY_FAMILY`
/// payload of `sequence` to `each`; whether the dump is done (`NLMSG_DONE`), or the error the
/// kernel answered. A message cut short or of another sequence ends or is skipped, never read
/// past the datagram.
pub fn sock_diag_datagram(
    b: &[u8],
    sequence: u32,
    mut each: impl FnMut(&[u8]),
) -> std::io::Result<bool> {
    let walked = walk(b, sequence, |(kind, _, payload)| {
        if kind == SOCK_DIAG_BY_FAMILY {
            each(payload);
        }
        true
    })?;
    Ok(walked == Walk::Done)
}

/// A peer that answers a dump forever: multipart messages, never `NLMSG_DONE`.
#[cfg(test)]
pub mod endless {
    use std::{os::fd::FromRawFd as _, os::unix::net::UnixDatagram, thread::JoinHandle};

    /// A socket to read a dump from, and the thread sending `datagram` into it again and
    /// again until the socket is dropped.
    pub fn peer(datagram: Vec<u8>) -> (netlink_sys::Socket, JoinHandle<u64>) {
        let (ours, theirs) = UnixDatagram::pair().expect("a socket pair");
        ours.set_read_timeout(Some(super::RECV_TIMEOUT))
            .expect("a timeout");
        let sent = std::thread::spawn(move || {
            let mut sent = 0u64;
            while theirs.send(&datagram).is_ok() {
                sent += 1;
            }
            sent
        });
        // SAFETY: the descriptor is a socket this function owns (taken out of `ours`, which
        // gives it up), handed to exactly one owner.
        let s =
            unsafe { netlink_sys::Socket::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(ours)) };
        (s, sent)
    }

    /// `count` messages of `kind` with `NLM_F_MULTI` in sequence `seq`, each with 4 bytes of
    /// payload.
    pub fn multipart(seq: u32, kind: u16, count: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for _ in 0..count {
            b.extend(20u32.to_ne_bytes());
            b.extend(kind.to_ne_bytes());
            b.extend(2u16.to_ne_bytes()); // NLM_F_MULTI
            b.extend(seq.to_ne_bytes());
            b.extend(0u32.to_ne_bytes());
            b.extend([0u8; 4]);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A peer that keeps sending a dump's messages and never `NLMSG_DONE` (the nftables
    /// readers' loop): the answer is cut at its time limit with a note, never a hang.
    #[test]
    fn a_dump_that_never_ends_is_cut_with_a_note() {
        let (s, sender) = endless::peer(endless::multipart(7, 0x0a06, 64));
        let mut seen = 0u64;
        let note = answer(&s, 7, "nftables rules", Duration::from_millis(300), |_| {
            seen += 1;
            true
        })
        .expect("no error");
        drop(s);
        assert!(sender.join().expect("the peer") > 0);
        let note = note.expect("a note: the dump was cut");
        assert!(note.starts_with("nftables rules: dump cut after"), "{note}");
        assert!(seen > 0);
        // A reader that stops at its bound of messages is cut there, and says so.
        let (s, sender) = endless::peer(endless::multipart(9, 0x0a06, 64));
        let mut seen = 0;
        let note = answer(&s, 9, "nftables chains", DUMP_TIME, |_| {
            seen += 1;
            seen < 1000
        })
        .expect("no error");
        drop(s);
        sender.join().expect("the peer");
        assert_eq!(seen, 1000);
        assert_eq!(note.as_deref(), Some("nftables chains: dump cut"));
    }

    /// Another sequence's messages (an answer to a request cut short) are skipped, and its
    /// `NLMSG_DONE` does not end this dump.
    #[test]
    fn only_the_dumps_own_messages_are_read() {
        let mut b = endless::multipart(3, 0x0a06, 2);
        let mut done = endless::multipart(3, NLMSG_DONE, 1);
        b.append(&mut done);
        b.extend(endless::multipart(4, 0x0a06, 1));
        let mut kinds = Vec::new();
        let walked = walk(&b, 4, |(kind, _, _)| {
            kinds.push(kind);
            true
        })
        .expect("no error");
        assert_eq!((walked, kinds), (Walk::More, vec![0x0a06]));
    }
}
