//! What a socket is, by its inode: the processes holding it ([`super::holders`]'s bounded
//! `/proc/<pid>/fd` scan), and, through a copy of one holder's descriptor
//! (`pidfd_getfd(2)`, 5.6+), its protocol, local address and receive buffer limit
//! (`getsockname`, `SO_PROTOCOL`, `SO_RCVBUF`), as `ss -p` shows them. The copy is checked to be
//! the same inode before anything is read from it (a descriptor closed and reused meanwhile is
//! another socket), read without changing the socket, and closed at once.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, Ipv6Addr},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    sync::Arc,
};

use super::holders::{self, Bounds};
use crate::vocab::socket::{About, Found, MAX_HOLDERS};

/// How far one lookup looks for the holders of the sockets asked about.
pub const BOUNDS: Bounds = Bounds {
    processes: 4096,
    fds: 200_000,
    fds_per_process: 16_384,
    per_socket: MAX_HOLDERS,
    enough: 0,
};

/// What each socket of `inodes` is, looked for under `proc` (this pid namespace's) within `b`.
pub fn describe(proc: &Path, inodes: &BTreeSet<u32>, b: Bounds) -> BTreeMap<u32, About> {
    let scan = holders::scan(proc, inodes, b);
    inodes
        .iter()
        .map(|&inode| {
            let about = match scan.held.get(&inode) {
                Some(held) if !held.is_empty() => {
                    let mut f = Found {
                        holders: held.iter().map(|h| h.holder.clone()).collect(),
                        more_holders: scan.more.get(&inode).copied().unwrap_or(0),
                        ..Found::default()
                    };
                    // The first holder whose descriptor still is this socket.
                    if let Some(fd) = held.iter().find_map(|h| copy(h.holder.pid, h.fd, inode)) {
                        read_socket(&fd, &mut f);
                    }
                    About::Exact(f)
                }
                _ => About::unknown(&not_held(&scan)),
            };
            (inode, about)
        })
        .collect()
}

/// Why a scan found no holder of a socket: a bound it reached, processes whose descriptors it
/// was refused, or none holds it.
fn not_held(scan: &holders::Scan) -> String {
    match (&scan.cut, scan.refused) {
        (Some(cut), _) => format!("no holder found: {cut}"),
        (None, 0) => "no process holds it (closed, or the kernel's own)".into(),
        (None, n) => format!(
            "no holder found: the descriptors of {n} process(es) could not be read (permission \
             denied: CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH read other users')"
        ),
    }
}

/// A descriptor of this process for descriptor `fd` of process `pid`, if it is socket `inode`.
fn copy(pid: u32, fd: u32, inode: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return None;
    }
    // SAFETY: the descriptor was just returned to us and is owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number and flags; it returns a new
    // descriptor or -1.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd as i32, 0) };
    if got < 0 {
        return None;
    }
    // SAFETY: as above.
    let got = unsafe { OwnedFd::from_raw_fd(got as i32) };
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", got.as_raw_fd())).ok()?;
    use std::os::unix::fs::MetadataExt;
    (meta.ino() == u64::from(inode)).then_some(got)
}

/// The socket option `opt` at `level` (an int).
fn int_opt(fd: &OwnedFd, level: i32, opt: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for the kernel to write an int and its length.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&raw mut v).cast(),
            &raw mut len,
        )
    };
    (r == 0).then_some(v)
}

/// Protocol, local address and receive buffer of the socket `fd`.
fn read_socket(fd: &OwnedFd, f: &mut Found) {
    let domain = int_opt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN);
    let kind = int_opt(fd, libc::SOL_SOCKET, libc::SO_TYPE);
    let proto = int_opt(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL);
    f.rcvbuf = int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v.max(0) as u32);
    f.protocol = protocol(domain, kind, proto).map(Arc::from);
    let mut ss: libc::sockaddr_storage = unsafe_zeroed();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `ss` has room for any address and `len` says so.
    let r = unsafe { libc::getsockname(fd.as_raw_fd(), (&raw mut ss).cast(), &raw mut len) };
    if r == 0 {
        f.local = local(&ss).map(Arc::from);
    }
}

/// A zeroed `sockaddr_storage`.
fn unsafe_zeroed() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; all zeros is a valid (AF_UNSPEC) value.
    unsafe { std::mem::zeroed() }
}

/// `udp`, `tcp`, ... as `ss` names them; `unix`, `netlink`, `packet` for other families.
fn protocol(domain: Option<i32>, kind: Option<i32>, proto: Option<i32>) -> Option<String> {
    match domain? {
        libc::AF_INET | libc::AF_INET6 => {
            if kind == Some(libc::SOCK_RAW) {
                return Some("raw".into());
            }
            let p = u8::try_from(proto?).ok()?;
            Some(crate::vocab::dims::protocol_name(p))
        }
        libc::AF_UNIX => Some("unix".into()),
        libc::AF_NETLINK => Some("netlink".into()),
        libc::AF_PACKET => Some("packet".into()),
        d => Some(format!("family {d}")),
    }
}

/// `0.0.0.0:53` or `[::1]:53` for an IP socket's address.
fn local(ss: &libc::sockaddr_storage) -> Option<String> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it has room for.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(format!("{ip}:{}", u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(format!("[{ip}]:{}", u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_socket_not_found_says_why_a_refused_scan_is_not_none_holding_it() {
        let mut scan = holders::Scan::default();
        assert!(not_held(&scan).starts_with("no process holds it"));
        scan.refused = 3;
        let why = not_held(&scan);
        assert!(why.contains("3 process(es) could not be read"), "{why}");
        assert!(!why.contains("no process holds it"), "{why}");
        // A bound reached says so first: the scan did not look everywhere.
        scan.cut = Some("not looked for past 4096 processes".into());
        assert!(not_held(&scan).contains("past 4096"));
    }

    #[test]
    fn a_socket_of_this_process_is_described_as_ss_does() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let port = s.local_addr().expect("addr").port();
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd())).expect("fd");
        let inode = meta.ino() as u32;
        let found = describe(Path::new("/proc"), &BTreeSet::from([inode]), BOUNDS);
        let About::Exact(f) = &found[&inode] else {
            panic!("{found:?}");
        };
        assert_eq!(f.holders[0].pid, std::process::id());
        assert_eq!(f.protocol.as_deref(), Some("udp"));
        assert_eq!(
            f.local.as_deref(),
            Some(format!("127.0.0.1:{port}").as_str())
        );
        let own = OwnedFd::from(s.try_clone().expect("clone"));
        let rcvbuf = int_opt(&own, libc::SOL_SOCKET, libc::SO_RCVBUF);
        assert_eq!(f.rcvbuf.map(|r| r as i32), rcvbuf);
    }

    #[test]
    fn a_socket_nobody_holds_is_unknown_and_says_why() {
        let found = describe(Path::new("/proc"), &BTreeSet::from([u32::MAX - 7]), BOUNDS);
        let About::Unknown { why } = &found[&(u32::MAX - 7)] else {
            panic!("{found:?}");
        };
        assert!(why.contains("no process holds it"), "{why}");
    }

    #[test]
    fn addresses_read_as_ss_writes_them() {
        let v6: std::net::SocketAddr = "[::1]:53".parse().expect("addr");
        let s = socket2::SockAddr::from(v6);
        // SAFETY: SockAddr's storage is a sockaddr_storage.
        let ss = unsafe { &*s.as_ptr().cast::<libc::sockaddr_storage>() };
        assert_eq!(local(ss).as_deref(), Some("[::1]:53"));
        assert_eq!(
            protocol(Some(libc::AF_INET), Some(libc::SOCK_RAW), Some(253)).as_deref(),
            Some("raw")
        );
    }
}
