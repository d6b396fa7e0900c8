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
