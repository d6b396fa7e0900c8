//! Human names for network namespaces (by inode) and for interfaces (by index, inside a namespace).
//!
//! A namespace is named after what lives in it, by this rule (first that applies):
//! 1. the initial namespace (that of pid 1) is `host`;
//! 2. a Kubernetes pod: `pod:NAMESPACE/NAME` (from kubelet's `/var/log/pods`), else
//!    `pod:HOSTNAME` (a container's environment), else `pod:UID`;
//! 3. a container: `docker:NAME`, `podman:NAME` (from the engine's metadata when readable, else the
//!    12-digit short id), `cri:ID`, `containerd:ID`, `lxc:NAME`, `machine:NAME` (systemd-nspawn);
//! 4. the name given by `ip netns add NAME` (a file under `/run/netns`), as is;
//! 5. a systemd service of a process in it (`nginx.service`, e.g. one with `PrivateNetwork=yes`);
//! 6. `COMM[PID]` of its lowest-numbered process (e.g. `unshare -n` from a login shell).
//!
//! A container or pod wins over an ip-netns name because a name under `/run/netns` pointing into
//! a container is an alias someone made to enter it. An ip-netns name wins over a service because
//! processes run by `ip netns exec` stay in the cgroup of whoever ran it (a login shell, a script's
//! service): the namespace was named on purpose, the unit is incidental. Among processes of equal
//! rank, the lowest pid wins. Names come from the system and are kept as data (callers sanitize for
//! display), cut to [`MAX_NAME`] characters.
//!
//! Nothing here polls: a scan of `/run/netns` and `/proc/*/ns/net` happens only when an unknown
//! inode is asked for, at most once per second, and an inode that a scan did not find is not
//! looked for again for 30 s unless another unknown one triggers a scan.

mod cgroup;
mod devices;
mod meta;

use std::{
    collections::HashMap,
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use cgroup::Owner;
pub use meta::Roots;

/// The longest name returned, in characters.
pub const MAX_NAME: usize = 64;

/// The initial network namespace's inode on kernels that give it a fixed one (6.x onwards);
/// older kernels allocate it dynamically, from 0xF0000000 upwards, so it cannot collide.
const PROC_NET_INIT_INO: u64 = 0xEFFF_FFF9;

/// Ranks of the naming rule in the module documentation (higher wins).
const RANK_PROCESS: u8 = 1;
const RANK_SERVICE: u8 = 3;
const RANK_NETNS: u8 = 4;
const RANK_CONTAINER: u8 = 5;
const RANK_POD: u8 = 6;
const RANK_HOST: u8 = 9;

/// Cached names of network namespaces and of the interfaces inside them.
#[derive(Debug)]
pub struct Names {
    roots: Roots,
    namespaces: HashMap<u64, Netns>,
    missed: HashMap<u64, Instant>,
    devices: HashMap<u64, Devices>,
    last_scan: Option<Instant>,
    scans: u64,
    device_reads: u64,
    min_interval: Duration,
    miss_retry: Duration,
}

/// What the last scan learned about one namespace.
#[derive(Debug, Clone)]
struct Netns {
    name: Arc<str>,
    enter: PathBuf,
}

/// One namespace's interfaces, as last read.
#[derive(Debug)]
struct Devices {
    by_index: HashMap<u32, Arc<str>>,
    read_at: Instant,
}

impl Default for Names {
    fn default() -> Self {
        Self::new()
    }
}

impl Names {
    /// Names read from the running system; nothing is read until a name is asked for.
    pub fn new() -> Self {
        Self::with_roots(Roots::default())
    }

    /// Names read from other places than the system's own (for tests).
    pub fn with_roots(roots: Roots) -> Self {
        Self {
            roots,
            namespaces: HashMap::new(),
            missed: HashMap::new(),
            devices: HashMap::new(),
            last_scan: None,
            scans: 0,
            device_reads: 0,
            min_interval: Duration::from_secs(1),
            miss_retry: Duration::from_secs(30),
        }
    }

    /// A human name for the network namespace with inode `inode`, by the rule in the module
    /// documentation: `host` for the initial namespace, else its pod, container, `ip netns` name,
    /// systemd service or process. None if no process or `/run/netns` file holds it (or a scan
    /// is not due yet): callers then show the inode.
    pub fn netns(&mut self, inode: u64) -> Option<Arc<str>> {
        self.lookup(inode).map(|n| n.name.clone())
    }

    /// The name of interface `ifindex` inside namespace `inode`, or None if it is unknown or gone.
    /// A namespace's interfaces are read all at once, again when an unknown index is asked for,
    /// at most once per second.
    pub fn device(&mut self, inode: u64, ifindex: u32) -> Option<Arc<str>> {
        if let Some(d) = self.devices.get(&inode) {
            if let Some(name) = d.by_index.get(&ifindex) {
                return Some(name.clone());
            }
            if d.read_at.elapsed() < self.min_interval {
                return None;
            }
        }
        let mut read = self.read_devices(inode);
        if matches!(&read, Some(Err(e)) if e.kind() == io::ErrorKind::NotFound) {
            // The way in is stale (its process exited): look again, if a scan is due.
            self.namespaces.remove(&inode);
            read = self.read_devices(inode);
        }
        // Without CAP_SYS_ADMIN setns fails: no names, and no retry within the interval.
        let by_index = read.and_then(Result::ok).unwrap_or_default();
        let name = by_index.get(&ifindex).cloned();
        let read_at = Instant::now();
        self.devices.insert(inode, Devices { by_index, read_at });
        name
    }

    /// A file that enters namespace `inode` with setns(2): a `/run/netns` file if it has one,
    /// else `/proc/PID/ns/net` of one of its processes (check the inode after opening it: the
    /// process may have exited and its pid been reused).
    pub fn enter_path(&mut self, inode: u64) -> Option<PathBuf> {
        self.lookup(inode).map(|n| n.enter.clone())
    }

    /// How many scans of `/proc` and `/run/netns` have been made.
    pub fn scans(&self) -> u64 {
        self.scans
    }

    /// How many times a namespace's interfaces have been read.
    pub fn device_reads(&self) -> u64 {
        self.device_reads
    }

    fn read_devices(&mut self, inode: u64) -> Option<io::Result<HashMap<u32, Arc<str>>>> {
        let enter = self.lookup(inode)?.enter.clone();
        self.device_reads += 1;
        Some(devices::read(&enter, inode))
    }

    fn lookup(&mut self, inode: u64) -> Option<&Netns> {
        if !self.namespaces.contains_key(&inode) && self.scan_due(inode) {
            self.scan();
            if !self.namespaces.contains_key(&inode) {
                self.missed.insert(inode, Instant::now());
            }
        }
        self.namespaces.get(&inode)
    }

    fn scan_due(&self, inode: u64) -> bool {
        let recent = self
            .last_scan
            .is_some_and(|t| t.elapsed() < self.min_interval);
        let missed = self
            .missed
            .get(&inode)
            .is_some_and(|t| t.elapsed() < self.miss_retry);
        !recent && !missed
    }

    /// Rebuilds the namespace table from `/run/netns` and every process's `/proc/PID/ns/net`.
    fn scan(&mut self) {
        self.scans += 1;
        self.last_scan = Some(Instant::now());
        let found = scan(&self.roots);
        let retry = self.miss_retry;
        self.missed
            .retain(|inode, t| !found.contains_key(inode) && t.elapsed() < retry);
        // An inode can be reused once its namespace is gone: forget interfaces of the departed.
        self.devices.retain(|inode, _| found.contains_key(inode));
        self.namespaces = found
            .into_iter()
            .map(|(inode, c)| {
                let name = bound(&c.name);
                (
                    inode,
                    Netns {
                        name,
                        enter: c.enter,
                    },
                )
            })
            .collect();
    }
}

/// The best name found so far for one namespace.
struct Candidate {
    rank: u8,
    name: String,
    enter: PathBuf,
    lowest_pid: Option<u32>,
    /// Whether the name is the best this rank can give (not a fallback such as a pod's UID).
    settled: bool,
}

fn scan(roots: &Roots) -> HashMap<u64, Candidate> {
    let mut found: HashMap<u64, Candidate> = HashMap::new();
    let mut named: Vec<(String, PathBuf)> = fs::read_dir(&roots.netns)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    named.sort();
    for (name, path) in named {
        if let Ok(meta) = fs::metadata(&path) {
            found.entry(meta.ino()).or_insert(Candidate {
                rank: RANK_NETNS,
                name,
                enter: path,
                lowest_pid: None,
                settled: true,
            });
        }
    }

    let host = ns_inode(&roots.proc.join("1/ns/net"));
    let mut pids: Vec<u32> = fs::read_dir(&roots.proc)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut podman = meta::PodmanNames::default();
    for pid in pids {
        let dir = roots.proc.join(pid.to_string());
        let enter = dir.join("ns/net");
        let Some(inode) = ns_inode(&enter) else {
            continue;
        };
        let c = found.entry(inode).or_insert_with(|| Candidate {
            rank: 0,
            name: String::new(),
            enter: enter.clone(),
            lowest_pid: None,
            settled: false,
        });
        c.lowest_pid.get_or_insert(pid);
        if Some(inode) == host || inode == PROC_NET_INIT_INO {
            (c.rank, c.name, c.settled) = (RANK_HOST, "host".into(), true);
            continue;
        }
        if c.rank >= RANK_POD && c.settled {
            continue;
        }
        let Ok(text) = meta::read_bounded(&dir.join("cgroup"), 64 << 10) else {
            continue;
        };
        let Some(owner) = cgroup::owner(&String::from_utf8_lossy(&text)) else {
            continue;
        };
        let rank = match owner {
            Owner::Pod(_) => RANK_POD,
            Owner::Container(..) | Owner::Machine(_) => RANK_CONTAINER,
            Owner::Service(_) => RANK_SERVICE,
            Owner::Session => continue,
        };
        // An equal rank may still improve a fallback name (a pod's pause process has no
        // HOSTNAME; its other containers do).
        if rank > c.rank || (rank == c.rank && !c.settled) {
            let (name, settled) = owner_name(roots, &mut podman, &dir, owner);
            if rank > c.rank || settled {
                (c.rank, c.name, c.settled) = (rank, name, settled);
            }
        }
    }

    for c in found.values_mut() {
        if let (0, Some(pid)) = (c.rank, c.lowest_pid) {
            let dir = roots.proc.join(pid.to_string());
            let comm = fs::read_to_string(dir.join("comm")).unwrap_or_default();
            c.rank = RANK_PROCESS;
            c.name = format!("{}[{pid}]", comm.trim_end_matches('\n'));
        }
    }
    found
}

/// The displayed name of an owner, with its engine's metadata when readable, and whether it is
/// more than a fallback (an id).
fn owner_name(
    roots: &Roots,
    podman: &mut meta::PodmanNames,
    dir: &Path,
    owner: Owner,
) -> (String, bool) {
    match owner {
        Owner::Pod(uid) => {
            match meta::pod_name(&roots.pods, &uid).or_else(|| meta::environ_var(dir, "HOSTNAME")) {
                Some(name) => (format!("pod:{name}"), true),
                None => (format!("pod:{uid}"), false),
            }
        }
        Owner::Container(engine, id) => {
            let uid = fs::metadata(dir).map(|m| m.uid()).ok();
            match meta::container_name(roots, podman, engine, &id, uid) {
                Some(name) => (format!("{}:{name}", engine.label()), true),
                None => (format!("{}:{}", engine.label(), &id[..12]), false),
            }
        }
        Owner::Machine(name) | Owner::Service(name) => (name, true),
        Owner::Session => (String::new(), false),
    }
}

/// The namespace inode a `/proc/PID/ns/net` link names (`net:[4026531840]`).
fn ns_inode(link: &Path) -> Option<u64> {
    let target = fs::read_link(link).ok()?;
    target
        .to_str()?
        .strip_prefix("net:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// A name cut to [`MAX_NAME`] characters.
fn bound(name: &str) -> Arc<str> {
    match name.char_indices().nth(MAX_NAME) {
        Some((end, _)) => Arc::from(&name[..end]),
        None => Arc::from(name),
    }
}

#[cfg(test)]
mod tests;
