//! A listener whose accept queue overflows: SYNs refused (consumed, never freed as drops) and
//! handshakes that find the queue full, counted by `TcpExt:ListenDrops`.
use std::{
    fs::File,
    net::{Ipv4Addr, SocketAddrV4, TcpListener},
    os::fd::AsRawFd,
    time::Duration,
};

use crate::Netns;

/// Opens `n` connections to a listener with `backlog` that never accepts, from inside the
/// namespace (on a thread that enters it), and closes them before any SYN is retransmitted.
pub fn overflow_accept_queue(ns: &Netns, backlog: i32, n: usize) {
    overflow_accept_queue_then(ns, backlog, n, |_| ());
}

/// Like [`overflow_accept_queue`], but the listener stays open (its accept queue full) until
/// `then`, given its port, has returned; returns what `then` did.
pub fn overflow_accept_queue_then<R>(
    ns: &Netns,
    backlog: i32,
    n: usize,
    then: impl FnOnce(u16) -> R,
) -> R {
    let file = File::open(format!("/run/netns/{}", ns.name)).expect("namespace file");
    let listener = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns(2) on a file we own; only this thread changes namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            // SAFETY: listen(2) on the listener's own socket.
            assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), backlog) }, 0);
            let port = listener.local_addr().expect("addr").port();
            let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: addr.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*addr.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            let mut fds = Vec::new();
            for _ in 0..n {
                // SAFETY: plain socket and connect calls with a valid sockaddr_in; the fds are
                // closed below.
                unsafe {
                    let fd =
                        libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
                    assert!(fd >= 0, "socket");
                    libc::connect(
                        fd,
                        (&sin as *const libc::sockaddr_in).cast(),
                        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    );
                    fds.push(fd);
                }
            }
            // Well under the first SYN retransmission (1 s).
            std::thread::sleep(Duration::from_millis(300));
            for fd in fds {
                // SAFETY: each fd was opened above and is closed once.
                unsafe { libc::close(fd) };
            }
            listener
        })
        .join()
        .expect("the connecting thread")
    });
    let port = listener.local_addr().expect("addr").port();
    let out = then(port);
    drop(listener);
    out
}
