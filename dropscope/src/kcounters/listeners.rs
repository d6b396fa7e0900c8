//! TCP listeners whose accept queue is full, in the calling thread's namespace, through
//! `sock_diag` (`SOCK_DIAG_BY_FAMILY` with an `inet_diag_req_v2` for `IPPROTO_TCP` sockets in
//! `LISTEN`, `AF_INET` and `AF_INET6`: what `ss -ltn` asks), and the process holding each.
//!
//! For a listener the kernel answers the accept queue's length as `idiag_rqueue` and its
//! backlog as `idiag_wqueue`; a queue is full by the kernel's own test
//! (`sk_acceptq_is_full`: more waiting than the backlog), which is when a SYN is refused and
//! `TcpExt:ListenDrops` counts it. Only listeners full at reading time are kept: none full,
//! none named (never a guess). A namespace is asked only when its `TcpExt:ListenDrops` is not
//! zero (no syscall otherwise).
//!
//! Bounded as the other dumps are: at most [`MAX_LISTENERS`] listeners a namespace,
//! [`DUMP_TIME`], and a receive that waits longer than [`RECV_TIMEOUT`] ends the dump; each
//! cut is a note. The process is found by scanning `/proc/<pid>/fd` for `socket:[INODE]`,
//! only for full listeners, at most [`MAX_PROCESSES`] processes and [`MAX_FDS`] descriptors
//! a namespace, stopping once every full listener has a process.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, Ipv6Addr},
    path::Path,
    time::Instant,
};

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};

use super::{
    netlink::{
        DUMP_TIME, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_HDR, RECV_TIMEOUT, SOCK_DIAG_BY_FAMILY, u32_at,
    },
    parse::Counters,
};
use crate::vocab::{reading::Listener, socket::Holder};

/// The counter whose growth a full accept queue explains.
pub const LISTEN_DROPS: &str = "TcpExt:ListenDrops";
/// The most listeners read in one namespace.
pub const MAX_LISTENERS: usize = 256;
/// The most processes whose descriptors are looked through in one namespace's reading.
pub const MAX_PROCESSES: usize = 4096;
/// The most descriptors looked at in one namespace's reading.
pub const MAX_FDS: usize = 200_000;
/// `TCP_LISTEN`.
const TCP_LISTEN: u8 = 10;
/// `struct inet_diag_msg`.
const INET_DIAG_MSG: usize = 72;
const AF_INET: u8 = libc::AF_INET as u8;
const AF_INET6: u8 = libc::AF_INET6 as u8;

/// One listener's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sock {
    addr: String,
    port: u16,
    queue: u32,
    backlog: u32,
    inode: u32,
}

impl Sock {
    /// The kernel's test of a full accept queue (`sk_acceptq_is_full`).
    fn full(&self) -> bool {
        self.queue > self.backlog
    }
}

/// The dump request of `family`'s listening TCP sockets.
fn request(family: u8, sequence: u32) -> Vec<u8> {
    let len = NLMSG_HDR + 56;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b.extend_from_slice(&sequence.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    // struct inet_diag_req_v2: family, protocol, ext, pad, states, then an empty sockid.
    b.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    b.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    b.extend_from_slice(&[0u8; 48]);
    b
}

/// One `inet_diag_msg`: a listener, or `None` for another state or a short message.
fn sock(p: &[u8]) -> Option<Sock> {
    if p.len() < INET_DIAG_MSG || p[1] != TCP_LISTEN {
        return None;
    }
    let port = u16::from_be_bytes([p[4], p[5]]);
    let ip = match p[0] {
        AF_INET => Ipv4Addr::from(<[u8; 4]>::try_from(&p[8..12]).ok()?).to_string(),
        AF_INET6 => {
            let a = Ipv6Addr::from(<[u8; 16]>::try_from(&p[8..24]).ok()?);
            format!("[{a}]")
        }
        _ => return None,
    };
    Some(Sock {
        addr: format!("{ip}:{port}"),
        port,
        queue: u32_at(p, 56)?,
        backlog: u32_at(p, 60)?,
        inode: u32_at(p, 68)?,
    })
}

/// What one datagram of the answer held: listeners, whether the dump is done, an error.
fn datagram(b: &[u8], sequence: u32, out: &mut Vec<Sock>) -> std::io::Result<bool> {
    super::netlink::sock_diag_datagram(b, sequence, |p| out.extend(sock(p)))
}

/// The full listeners of the calling thread's namespace, with their processes (looked for
/// under `proc`), where its `counters` (as read now) say the namespace ever refused a
/// handshake; notes for what could not be read or was cut.
pub fn read(counters: &Counters, proc: &Path) -> (Vec<Listener>, Vec<String>) {
    if counters.get(LISTEN_DROPS).copied().unwrap_or(0) == 0 {
        return (Vec::new(), Vec::new());
    }
    let (socks, mut notes) = match dump() {
        Ok(found) => found,
        Err(e) => return (Vec::new(), vec![format!("TCP listeners not read: {e}")]),
    };
    let full = full(socks);
    let inodes: BTreeSet<u32> = full.iter().map(|s| s.inode).collect();
    let (holders, note) = holders(proc, &inodes);
    notes.extend(note);
    let listeners = full
        .into_iter()
        .map(|s| Listener {
            process: holders.get(&s.inode).cloned(),
            addr: s.addr,
            port: s.port,
            queue: s.queue,
            backlog: s.backlog,
            inode: s.inode.into(),
        })
        .collect();
    (listeners, notes)
}

/// The listeners whose accept queue is full, in the order dumped.
fn full(socks: Vec<Sock>) -> Vec<Sock> {
    socks.into_iter().filter(Sock::full).collect()
}

/// Both families' listeners, at most [`MAX_LISTENERS`], and a note where the dump was cut.
fn dump() -> std::io::Result<(Vec<Sock>, Vec<String>)> {
    let s = Socket::new(NETLINK_SOCK_DIAG)?;
    socket2::SockRef::from(&s).set_read_timeout(Some(RECV_TIMEOUT))?;
    let start = Instant::now();
    let mut out = Vec::new();
    let mut notes = Vec::new();
    let mut recv = vec![0u8; 32 << 10];
    for (sequence, family) in [(1, AF_INET), (2, AF_INET6)] {
        s.send_to(&request(family, sequence), &SocketAddr::new(0, 0), 0)?;
        loop {
            if out.len() >= MAX_LISTENERS || start.elapsed() > DUMP_TIME {
                out.truncate(MAX_LISTENERS);
                notes.push(format!(
                    "TCP listeners: dump cut (at most {MAX_LISTENERS} in {}s): a full accept \
                     queue past them is not named",
                    DUMP_TIME.as_secs()
                ));
                return Ok((out, notes));
            }
            let n = match s.recv(&mut &mut recv[..], 0) {
                Ok(n) => n.min(recv.len()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    notes.push("TCP listeners: the kernel stopped answering".to_string());
                    return Ok((out, notes));
                }
                Err(e) => return Err(e),
            };
            match datagram(&recv[..n], sequence, &mut out) {
                Ok(false) if n > 0 => {}
                Ok(_) => break,
                // A kernel without IPv6 has no such listeners.
                Err(e) if family == AF_INET6 => {
                    if ![libc::EAFNOSUPPORT, libc::ENOENT].contains(&e.raw_os_error().unwrap_or(0))
                    {
                        notes.push(format!("TCP listeners (IPv6) not read: {e}"));
                    }
                    break;
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok((out, notes))
}

/// The process holding each socket of `inodes` (the first, by pid, with it open), looked for
/// under `proc` within [`MAX_PROCESSES`] and [`MAX_FDS`]; a note where the bound was reached
/// before every socket had one.
fn holders(proc: &Path, inodes: &BTreeSet<u32>) -> (BTreeMap<u32, Holder>, Option<String>) {
    let b = super::holders::Bounds {
        processes: MAX_PROCESSES,
        fds: MAX_FDS,
        fds_per_process: MAX_FDS,
        per_socket: 1,
        enough: 1,
    };
    let scan = super::holders::scan(proc, inodes, b);
    let found: BTreeMap<u32, Holder> = (scan.held.into_iter())
        .filter_map(|(inode, mut h)| Some((inode, h.drain(..).next()?.holder)))
        .collect();
    let note = scan.cut.filter(|_| found.len() < inodes.len()).map(|_| {
        format!(
            "TCP listeners: the processes holding {} full listeners not found within \
             {MAX_PROCESSES} processes and {MAX_FDS} descriptors",
            inodes.len() - found.len()
        )
    });
    (found, note)
}

#[cfg(test)]
mod tests {
    use crate::kcounters::netlink::{NLMSG_DONE, NLMSG_ERROR};
    use std::{
        net::{TcpListener, TcpStream},
        os::fd::AsRawFd,
    };

    use super::*;

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

    /// An `inet_diag_msg` of a socket of `family` in `state`, with an attribute after it.
    fn diag(family: u8, state: u8, ip: &[u8], port: u16, queue: u32, backlog: u32) -> Vec<u8> {
        let mut p = vec![family, state, 0, 0];
        p.extend_from_slice(&port.to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        let mut src = [0u8; 16];
        src[..ip.len()].copy_from_slice(ip);
        p.extend_from_slice(&src);
        p.extend_from_slice(&[0u8; 16 + 4 + 8 + 4]);
        for v in [queue, backlog, 0, 4242 + u32::from(port)] {
            p.extend_from_slice(&v.to_ne_bytes());
        }
        p.extend_from_slice(&[8, 0, 5, 0, 1, 2, 3, 4]); // an attribute, skipped
        p
    }

    #[test]
    fn listeners_are_parsed_and_only_full_ones_chosen() {
        let v6: Vec<u8> = Ipv6Addr::LOCALHOST.octets().to_vec();
        let mut b = message(
            1,
            SOCK_DIAG_BY_FAMILY,
            &diag(AF_INET, TCP_LISTEN, &[127, 0, 0, 1], 8080, 2, 1),
        );
        b.extend(message(
            1,
            SOCK_DIAG_BY_FAMILY,
            &diag(AF_INET6, TCP_LISTEN, &v6, 443, 1, 1),
        ));
        b.extend(message(
            1,
            SOCK_DIAG_BY_FAMILY,
            &diag(AF_INET6, TCP_LISTEN, &v6, 22, 129, 128),
        ));
        // Another state, an older dump's and a short message: none is a listener.
        b.extend(message(
            1,
            SOCK_DIAG_BY_FAMILY,
            &diag(AF_INET, 1, &[10, 0, 0, 1], 9, 5, 0),
        ));
        b.extend(message(
            0,
            SOCK_DIAG_BY_FAMILY,
            &diag(AF_INET, TCP_LISTEN, &[1; 4], 7, 5, 0),
        ));
        b.extend(message(
            1,
            SOCK_DIAG_BY_FAMILY,
            &[AF_INET, TCP_LISTEN, 0, 0],
        ));
        b.extend(message(1, NLMSG_DONE, &[0; 4]));
        let mut found = Vec::new();
        assert!(datagram(&b, 1, &mut found).expect("parsed"));
        let got: Vec<(&str, u16, u32, u32, u32)> = (found.iter())
            .map(|s| (s.addr.as_str(), s.port, s.queue, s.backlog, s.inode))
            .collect();
        assert_eq!(
            got,
            [
                ("127.0.0.1:8080", 8080, 2, 1, 12322),
                ("[::1]:443", 443, 1, 1, 4685),
                ("[::1]:22", 22, 129, 128, 4264),
            ]
        );
        // A queue as long as its backlog still takes one more: not full.
        let full: Vec<u16> = full(found).iter().map(|s| s.port).collect();
        assert_eq!(full, [8080, 22]);
        assert_eq!(request(AF_INET, 1).len(), 72);
        // Truncated answers end the parse without panicking.
        for cut in 0..b.len() {
            let _ = datagram(&b[..cut], 1, &mut Vec::new());
        }
        let err = message(1, NLMSG_ERROR, &(-libc::EINVAL).to_ne_bytes());
        let e = datagram(&err, 1, &mut Vec::new()).expect_err("an error");
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn a_listener_held_by_a_process_is_described_with_it() {
        let l = Listener {
            addr: "127.0.0.1:8080".into(),
            port: 8080,
            queue: 2,
            backlog: 1,
            inode: 9,
            process: Some(Holder {
                pid: 812,
                comm: "ngi\u{1b}nx".into(),
            }),
        };
        assert_eq!(
            l.describe(),
            "listener 127.0.0.1:8080 ngi\\u{1b}nx[812] accept queue 2/1"
        );
        let none = Listener { process: None, ..l };
        assert!(none.describe().contains("socket 9 (no process found)"));
    }

    /// A listener of this process whose queue is full is found in this namespace, with this
    /// process holding it (sock_diag of TCP needs no privilege).
    #[test]
    fn this_process_full_listener_is_found_with_its_process() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        // SAFETY: listen(2) on the listener's own socket, to shorten its backlog to 1.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 1) }, 0);
        let port = listener.local_addr().expect("addr").port();
        // Two wait within a backlog of 1; more are refused (or wait for their SYN again).
        let mut conns = Vec::new();
        for _ in 0..2 {
            conns.push(TcpStream::connect(("127.0.0.1", port)).expect("connect"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let counters = Counters::from([(LISTEN_DROPS.to_string(), 1)]);
        let (found, notes) = read(&counters, Path::new("/proc"));
        let Some(l) = found.iter().find(|l| l.port == port) else {
            panic!("no full listener on {port}: {found:?} {notes:?}");
        };
        assert_eq!((l.queue, l.backlog), (2, 1), "{l:?}");
        assert_eq!(l.addr, format!("127.0.0.1:{port}"));
        let h = l.process.as_ref().expect("a process");
        assert_eq!(h.pid, std::process::id());
        let comm = std::fs::read_to_string("/proc/self/comm").expect("comm");
        assert_eq!(h.comm, comm.trim_end());
        // Without a ListenDrops counter nothing is asked.
        assert_eq!(
            read(&Counters::new(), Path::new("/proc")),
            (Vec::new(), Vec::new())
        );
    }
}
