//! The interfaces of another network namespace, listed from a short-lived thread that enters it
//! with setns(2): the caller's threads never change namespace.

use std::{
    collections::HashMap,
    ffi::CStr,
    fs::File,
    io,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::Path,
    sync::Arc,
};

use super::cut::bound;

/// Interface index to name, inside the network namespace at `path` (a `/proc/PID/ns/net` or a
/// `/run/netns` file), which must still be namespace `inode` (a pid may have been reused).
pub fn read(path: &Path, inode: u64) -> io::Result<HashMap<u32, Arc<str>>> {
    let ns = File::open(path)?;
    if ns.metadata()?.ino() != inode {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the namespace is gone",
        ));
    }
    let worker = std::thread::Builder::new()
        .name("netns-devices".into())
        .spawn(move || {
            // SAFETY: setns on a valid, open namespace file descriptor; it changes only this
            // thread's network namespace, and the thread ends right after.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            list()
        })?;
    worker
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// The interfaces of the calling thread's network namespace (netlink RTM_GETLINK in libc).
fn list() -> io::Result<HashMap<u32, Arc<str>>> {
    // SAFETY: if_nameindex has no preconditions; it returns null or an array we free below.
    let head = unsafe { libc::if_nameindex() };
    if head.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut out = HashMap::new();
    let mut at = head;
    loop {
        // SAFETY: `at` points into the array, which ends with an entry of index 0.
        let entry = unsafe { &*at };
        if entry.if_index == 0 || entry.if_name.is_null() {
            break;
        }
        // SAFETY: if_name is a NUL-terminated string owned by the array.
        let name = unsafe { CStr::from_ptr(entry.if_name) }.to_string_lossy();
        out.insert(entry.if_index, bound(&name));
        // SAFETY: the terminating entry has not been reached, so the next one exists.
        at = unsafe { at.add(1) };
    }
    // SAFETY: `head` came from if_nameindex and is freed once.
    unsafe { libc::if_freenameindex(head) };
    Ok(out)
}
