//! Network namespace cookies: the identity the kernel never gives to a second namespace while
//! it runs (an inode, freed with its namespace, goes to the next one made), read with
//! `getsockopt(SO_NETNS_COOKIE)` (5.14+) on a socket made inside the namespace.
use std::{
    fs::File,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::fs::MetadataExt as _,
    },
    path::Path,
};

/// The cookie of the calling thread's network namespace.
pub fn current() -> io::Result<u64> {
    // SAFETY: socket(2) with constant arguments; the descriptor is owned right after.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor just returned to us and owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut cookie = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt(2) writes at most `len` bytes (a u64) into `cookie`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NETNS_COOKIE,
            (&raw mut cookie).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cookie)
}

/// The inode and cookie of the namespace `path` (a `/run/netns` file or `/proc/PID/ns/net`)
/// names, read on a thread of its own that enters it and ends (so nothing is left in it).
pub fn of_path(path: &Path) -> io::Result<(u64, u64)> {
    let ns = File::open(path)?;
    let inode = ns.metadata()?.ino();
    let cookie = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns(2) with a namespace descriptor we own; CLONE_NEWNET changes only
            // this thread's network namespace, and the thread ends right after.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            current()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the cookie reader panicked")))
    })?;
    Ok((inode, cookie))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_namespace_has_one_cookie() {
        let here = current().expect("SO_NETNS_COOKIE");
        assert_ne!(here, 0);
        assert_eq!(current().expect("again"), here);
        // Entering the namespace one is in gives the same one (and needs no privilege beyond
        // what setns into one's own namespace needs: root, where the test runs as root).
        if let Ok((inode, cookie)) = of_path(Path::new("/proc/thread-self/ns/net")) {
            assert_eq!(cookie, here);
            let own = std::fs::metadata("/proc/thread-self/ns/net").expect("stat");
            assert_eq!(inode, own.ino());
        }
    }
}
