//! The processes holding given sockets, found by scanning `/proc/<pid>/fd` for `socket:[INODE]`
//! (as `ss -p` does), bounded: at most [`Bounds::processes`] processes and [`Bounds::fds`]
//! descriptors a scan, and [`Bounds::fds_per_process`] of any one process, so a process with
//! thousands of sockets costs the scan a bounded share and a note, never a hang. Each holder's
//! `comm` is cut and escaped as it is read.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use crate::vocab::socket::Holder;

/// How far one scan looks.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Processes whose descriptors are looked through.
    pub processes: usize,
    /// Descriptors looked at in all.
    pub fds: usize,
    /// Descriptors looked at in one process.
    pub fds_per_process: usize,
    /// Holders kept per socket (more are counted, not named).
    pub per_socket: usize,
    /// End the scan once every socket has this many holders (0: look at every process).
    pub enough: usize,
}

/// One process holding a socket, and the descriptor it holds it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The process.
    pub holder: Holder,
    /// Its descriptor of the socket.
    pub fd: u32,
}

/// What a scan found: the holders of each socket (lowest pids first), how many more held it,
/// and where a bound was reached, what it left out (the note's text).
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Holders by inode.
    pub held: BTreeMap<u32, Vec<Held>>,
    /// Holders seen beyond [`Bounds::per_socket`], by inode.
    pub more: BTreeMap<u32, u32>,
    /// The bound reached, if one was (the scan is then incomplete).
    pub cut: Option<String>,
    /// Processes whose descriptors this process may not read (without CAP_SYS_PTRACE and
    /// CAP_DAC_READ_SEARCH, those of other users): a socket they hold is not found.
    pub refused: usize,
}

/// Looks under `proc` for the processes holding each socket of `inodes`, within `b`.
pub fn scan(proc: &Path, inodes: &BTreeSet<u32>, b: Bounds) -> Scan {
    let mut out = Scan::default();
    if inodes.is_empty() {
        return out;
    }
    let Ok(dir) = std::fs::read_dir(proc) else {
        return out;
    };
    let mut pids: Vec<u32> = (dir.flatten())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let (mut processes, mut fds) = (0, 0);
    let mut crowded = Vec::new();
    for pid in pids {
        if b.enough > 0
            && out.held.len() == inodes.len()
            && out.held.values().all(|h| h.len() >= b.enough)
        {
            break;
        }
        if processes >= b.processes || fds >= b.fds {
            out.cut = Some(format!(
                "not looked for past {} processes and {} descriptors",
                b.processes, b.fds
            ));
            break;
        }
        processes += 1;
        let base = proc.join(pid.to_string());
        let entries = match std::fs::read_dir(base.join("fd")) {
            Ok(entries) => entries,
            Err(e) => {
                out.refused += usize::from(e.kind() == std::io::ErrorKind::PermissionDenied);
                continue;
            }
        };
        let mut comm = None;
        for (n, e) in entries.flatten().enumerate() {
            if n >= b.fds_per_process {
                crowded.push(pid);
                break;
            }
            fds += 1;
            if fds > b.fds {
                break;
            }
            let Ok(link) = std::fs::read_link(e.path()) else {
                continue;
            };
            let Some(inode) = socket_inode(link.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            if !inodes.contains(&inode) {
                continue;
            }
            let Some(fd) = e.file_name().to_str().and_then(|f| f.parse().ok()) else {
                continue;
            };
            let held = out.held.entry(inode).or_default();
            if held.iter().any(|h| h.holder.pid == pid) {
                continue;
            }
            if held.len() >= b.per_socket {
                *out.more.entry(inode).or_default() += 1;
                continue;
            }
            let comm = comm.get_or_insert_with(|| read_comm(&base)).clone();
            held.push(Held {
                holder: Holder { pid, comm },
                fd,
            });
        }
    }
    if out.cut.is_none() && !crowded.is_empty() {
        let shown: Vec<String> = crowded.iter().take(4).map(u32::to_string).collect();
        out.cut = Some(format!(
            "{} process(es) hold more than {} descriptors (pid {}{}): only their first were \
             looked at",
            crowded.len(),
            b.fds_per_process,
            shown.join(", "),
            if crowded.len() > 4 { ", ..." } else { "" }
        ));
    }
    out
}

/// A process's `comm`, cut to 64 characters and escaped.
fn read_comm(base: &Path) -> String {
    let comm = std::fs::read(base.join("comm")).unwrap_or_default();
    let comm = String::from_utf8_lossy(&comm);
    let comm = crate::sanitize::truncate(comm.trim_end_matches('\n'), 64);
    crate::sanitize::kernel_name(&comm).into_owned()
}

/// The inode of a descriptor's link `socket:[INODE]`.
pub fn socket_inode(link: &[u8]) -> Option<u32> {
    let inner = link.strip_prefix(b"socket:[")?.strip_suffix(b"]")?;
    std::str::from_utf8(inner).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::os::{fd::AsRawFd, unix::fs::MetadataExt};

    use super::*;

    const WIDE: Bounds = Bounds {
        processes: 100_000,
        fds: 1_000_000,
        fds_per_process: 100_000,
        per_socket: 8,
        enough: 0,
    };

    fn inode_of(fd: &impl AsRawFd) -> u32 {
        let meta = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("fd");
        meta.ino() as u32
    }

    #[test]
    fn this_process_is_found_holding_its_socket_by_its_descriptor() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let inode = inode_of(&s);
        let found = scan(Path::new("/proc"), &BTreeSet::from([inode]), WIDE);
        let held = found.held.get(&inode).expect("held");
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].holder.pid, std::process::id());
        assert_eq!(held[0].fd, s.as_raw_fd() as u32);
        assert_eq!(found.cut, None);
    }

    #[test]
    fn a_process_with_many_descriptors_is_looked_at_only_so_far_and_said_so() {
        let many: Vec<_> = (0..64)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let last = inode_of(many.last().expect("one"));
        let b = Bounds {
            fds_per_process: 16,
            ..WIDE
        };
        let found = scan(Path::new("/proc"), &BTreeSet::from([last]), b);
        assert!(!found.held.contains_key(&last), "{:?}", found.held);
        let cut = found.cut.expect("a note");
        assert!(cut.contains("more than 16 descriptors"), "{cut}");
    }

    #[test]
    fn socket_links_are_parsed() {
        assert_eq!(socket_inode(b"socket:[12345]"), Some(12345));
        assert_eq!(socket_inode(b"pipe:[12345]"), None);
        assert_eq!(socket_inode(b"socket:[99999999999]"), None);
    }
}
