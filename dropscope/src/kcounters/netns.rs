//! Network namespaces to read counters in, and the reading itself: one short-lived thread
//! enters each namespace in turn with setns(2) (only that thread changes namespace) and reads
//! `/proc/thread-self/net/*` there.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use super::{map, parse, parse::Counters};

/// Where named namespaces are bound (`ip netns add`).
pub const RUN_NETNS: &str = "/run/netns";

/// An open network namespace.
#[derive(Debug)]
struct Ns {
    file: File,
    /// Where it was opened from (for messages, and to drop it when the name goes away).
    path: PathBuf,
}

/// The namespaces whose counters are read, with their files kept open between reads.
#[derive(Debug)]
pub struct Namespaces {
    initial: u64,
    open: BTreeMap<u64, Ns>,
    /// Inodes already looked for through `/proc` (each is looked for once: no scan per poll).
    searched: BTreeSet<u64>,
}

fn open(path: &Path) -> anyhow::Result<(u64, File)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let ino = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .ino();
    Ok((ino, file))
}

impl Namespaces {
    /// Opens the initial namespace (that of pid 1, else this process's own).
    pub fn new() -> anyhow::Result<Self> {
        let path = Path::new("/proc/1/ns/net");
        let (initial, file, path) = match open(path) {
            Ok((i, f)) => (i, f, path.to_path_buf()),
            Err(_) => {
                let own = Path::new("/proc/self/ns/net");
                let (i, f) = open(own)?;
                (i, f, own.to_path_buf())
            }
        };
        let mut open = BTreeMap::new();
        open.insert(initial, Ns { file, path });
        Ok(Self {
            initial,
            open,
            searched: BTreeSet::new(),
        })
    }

    /// The initial namespace's inode number.
    pub fn initial(&self) -> u64 {
        self.initial
    }

    /// Inode numbers of the namespaces read.
    pub fn inodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.open.keys().copied()
    }

    /// Brings the set up to date: the initial namespace, every namespace named under
    /// `/run/netns` (names that went away are closed, so a deleted namespace is not kept alive),
    /// and the namespaces in `wanted` (by inode, looked for once through `/proc/*/ns/net`; one
    /// found that way stays open, so its counters keep their baseline).
    pub fn refresh(&mut self, wanted: &[u64]) {
        let mut named = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(RUN_NETNS) {
            for entry in dir.flatten() {
                let path = entry.path();
                // Stat first: an entry already open is not opened again.
                if let Ok(meta) = std::fs::metadata(&path) {
                    named.insert(meta.ino(), path);
                }
            }
        }
        let wanted: Vec<u64> = wanted
            .iter()
            .copied()
            .filter(|i| {
                !self.open.contains_key(i) && !named.contains_key(i) && !self.searched.contains(i)
            })
            .collect();
        self.open.retain(|ino, ns| {
            *ino == self.initial || named.contains_key(ino) || !ns.path.starts_with(RUN_NETNS)
        });
        for (ino, path) in named {
            if self.open.contains_key(&ino) {
                continue;
            }
            if let Ok((i, file)) = open(&path)
                && i == ino
            {
                self.open.insert(ino, Ns { file, path });
            }
        }
        if !wanted.is_empty() {
            self.find_by_inode(&wanted);
            self.searched.extend(wanted);
        }
    }

    /// Opens the namespaces of `inodes` through any process that is in them.
    fn find_by_inode(&mut self, inodes: &[u64]) {
        let Ok(proc) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in proc.flatten() {
            if !entry
                .file_name()
                .as_encoded_bytes()
                .iter()
                .all(u8::is_ascii_digit)
            {
                continue;
            }
            let path = entry.path().join("ns/net");
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let ino = meta.ino();
            if inodes.contains(&ino)
                && !self.open.contains_key(&ino)
                && let Ok((i, file)) = open(&path)
                && i == ino
            {
                self.open.insert(ino, Ns { file, path });
            }
        }
    }

    /// Reads the counters of every namespace, on one thread that enters each in turn. A
    /// namespace that cannot be read is left out and its error returned beside.
    pub fn read(&self) -> (BTreeMap<u64, Counters>, Vec<String>) {
        let initial = self.initial;
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut out = BTreeMap::new();
                let mut errors = Vec::new();
                for (ino, ns) in &self.open {
                    match read_in(ns, *ino == initial) {
                        Ok(c) => {
                            out.insert(*ino, c);
                        }
                        Err(e) => errors.push(format!("netns {ino}: {e:#}")),
                    }
                }
                (out, errors)
            })
            .join()
            .unwrap_or_else(|_| (BTreeMap::new(), vec!["the counter reader panicked".into()]))
        })
    }
}

/// Enters `ns` on the calling thread and reads its counters; the machine-wide softnet counter
/// only in the initial namespace.
fn read_in(ns: &Ns, initial: bool) -> anyhow::Result<Counters> {
    // SAFETY: setns(2) with a namespace file descriptor we own; CLONE_NEWNET changes only the
    // calling thread's network namespace, and this thread is ours and ends after reading.
    let rc = unsafe { libc::setns(ns.file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("entering {}", ns.path.display()));
    }
    let read = |name: &str| {
        let path = format!("/proc/thread-self/net/{name}");
        std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))
    };
    let mut all = Counters::new();
    parse::snmp(&read("snmp")?, &mut all);
    parse::snmp(&read("netstat")?, &mut all);
    parse::dev(&read("dev")?, &mut all);
    // Without IPv6 (ipv6.disable=1) there is no snmp6.
    if let Ok(text) = read("snmp6") {
        parse::snmp6(&text, &mut all);
    }
    if initial {
        parse::softnet(&read("softnet_stat")?, &mut all);
    }
    // Only counters that count drops are kept.
    all.retain(|name, _| map::lookup(name).is_some());
    Ok(all)
}
