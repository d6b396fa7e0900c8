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
//! What a user could have made up is labelled as that user's claim: `user 1000: podman:NAME`.
//! That is a name from a cgroup delegated to a user (below `user@UID.service`, or in a cgroup
//! directory a user other than root owns: any user session can create `libpod-<id>.scope`), and
//! a rootless Podman name read from a user's home. Metadata files are read by
//! [`meta::read_bounded`] only: never through a symlink, never blocking on a FIFO, only regular
//! files of bounded size owned by whom they should be (root, or the user whose home holds them).
//!
//! Asking never waits: [`Names::netns`] and [`Names::device`] answer from a cache at once, and
//! an unknown inode is handed to one worker thread, which scans `/run/netns` and
//! `/proc/*/ns/net` (at most once per second) or lists a namespace's interfaces; the answer is
//! there on a later call. One lookup is in flight at a time, so a file that stalls it (a slow
//! mount in a home) stalls names, never the caller, and spawns nothing more; the worker is
//! detached and never keeps the process alive. A scan reads engine metadata for at most
//! [`SCAN_DEADLINE`], then names the rest by their ids. An inode that a scan did not find is not
//! looked for again for 30 s unless another unknown one triggers a scan.

mod cgroup;
pub mod cookie;
mod devices;
mod meta;
pub mod spec;

use std::{
    collections::{HashMap, HashSet},
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use cgroup::Owner;
pub use meta::Roots;

/// The longest name returned, in characters.
pub const MAX_NAME: usize = 64;

/// How long one scan may spend reading engine metadata; after it, containers are named by id.
pub const SCAN_DEADLINE: Duration = Duration::from_secs(2);

/// At most this many unknown inodes wait for the next scan (more are asked for again later).
const MAX_ASKED: usize = 4096;

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

/// Cached names of network namespaces and of the interfaces inside them, looked up by a worker
/// thread.
#[derive(Debug)]
pub struct Names {
    shared: Arc<Shared>,
    worker: bool,
}

/// What the caller and the worker share: the cache and the requests, under one short lock
/// (never held during I/O).
#[derive(Debug)]
struct Shared {
    roots: Roots,
    state: Mutex<State>,
    /// Wakes the worker: something was asked for, or the names are dropped.
    wake: Condvar,
    /// Wakes [`Names::wait_idle`]: the worker finished a lookup.
    idle: Condvar,
}

#[derive(Debug)]
struct State {
    namespaces: HashMap<u64, Netns>,
    missed: HashMap<u64, Instant>,
    devices: HashMap<u64, Devices>,
    last_scan: Option<Instant>,
    scans: u64,
    device_reads: u64,
    /// Bumped whenever the worker learns names (see [`Names::generation`]).
    generation: u64,
    min_interval: Duration,
    miss_retry: Duration,
    /// Unknown inodes asked for since the last scan (a scan is wanted).
    asked: HashSet<u64>,
    /// Namespaces whose interfaces are wanted.
    devices_asked: HashSet<u64>,
    /// Whether the worker is in a lookup.
    busy: bool,
    /// The [`Names`] is gone: the worker ends.
    closed: bool,
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

impl Drop for Names {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
    }
}

impl Names {
    /// Names read from the running system; nothing is read until a name is asked for.
    pub fn new() -> Self {
        Self::with_roots(Roots::default())
    }

    /// Names read from other places than the system's own (for tests).
    pub fn with_roots(roots: Roots) -> Self {
        let state = State {
            namespaces: HashMap::new(),
            missed: HashMap::new(),
            devices: HashMap::new(),
            last_scan: None,
            scans: 0,
            device_reads: 0,
            generation: 0,
            min_interval: Duration::from_secs(1),
            miss_retry: Duration::from_secs(30),
            asked: HashSet::new(),
            devices_asked: HashSet::new(),
            busy: false,
            closed: false,
        };
        Self {
            shared: Arc::new(Shared {
                roots,
                state: Mutex::new(state),
                wake: Condvar::new(),
                idle: Condvar::new(),
            }),
            worker: false,
        }
    }

    /// A human name for the network namespace with inode `inode`, by the rule in the module
    /// documentation: `host` for the initial namespace, else its pod, container, `ip netns` name,
    /// systemd service or process. Never waits: None until the worker has found it (or if no
    /// process or `/run/netns` file holds it): callers then show the inode.
    pub fn netns(&mut self, inode: u64) -> Option<Arc<str>> {
        self.lookup(inode, |n| n.name.clone())
    }

    /// The name of interface `ifindex` inside namespace `inode`, or None if it is unknown or gone,
    /// or not read yet (never waits). A namespace's interfaces are read all at once, again when an
    /// unknown index is asked for, at most once per second.
    pub fn device(&mut self, inode: u64, ifindex: u32) -> Option<Arc<str>> {
        let mut s = self.shared.lock();
        if let Some(d) = s.devices.get(&inode) {
            if let Some(name) = d.by_index.get(&ifindex) {
                return Some(name.clone());
            }
            if d.read_at.elapsed() < s.min_interval {
                return None;
            }
        }
        if !s.namespaces.contains_key(&inode) {
            s.ask(inode);
        }
        if s.devices_asked.len() < MAX_ASKED {
            s.devices_asked.insert(inode);
        }
        drop(s);
        self.start();
        None
    }

    /// A file that enters namespace `inode` with setns(2): a `/run/netns` file if it has one,
    /// else `/proc/PID/ns/net` of one of its processes (check the inode after opening it: the
    /// process may have exited and its pid been reused). Never waits, like [`Names::netns`].
    pub fn enter_path(&mut self, inode: u64) -> Option<PathBuf> {
        self.lookup(inode, |n| n.enter.clone())
    }

    /// How many scans of `/proc` and `/run/netns` have been made.
    pub fn scans(&self) -> u64 {
        self.shared.lock().scans
    }

    /// How many times a namespace's interfaces have been read.
    pub fn device_reads(&self) -> u64 {
        self.shared.lock().device_reads
    }

    /// A number that changes whenever the worker has stored what it looked up: a caller that
    /// got None may ask again once it has changed.
    pub fn generation(&self) -> u64 {
        self.shared.lock().generation
    }

    /// Waits up to `timeout` until nothing asked for is left to look up; whether it was so (for
    /// tests, and callers that can afford to wait).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.lock();
        while s.busy || !s.asked.is_empty() || !s.devices_asked.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .shared
                .idle
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    fn lookup<T>(&mut self, inode: u64, f: impl FnOnce(&Netns) -> T) -> Option<T> {
        let mut s = self.shared.lock();
        if let Some(n) = s.namespaces.get(&inode) {
            return Some(f(n));
        }
        let asked = s.ask(inode);
        drop(s);
        if asked {
            self.start();
        }
        None
    }

    /// Wakes the worker, starting it the first time.
    fn start(&mut self) {
        self.shared.wake.notify_all();
        if self.worker {
            return;
        }
        let shared = self.shared.clone();
        // Detached: a lookup stuck in a file must not hold up the process's exit.
        self.worker = std::thread::Builder::new()
            .name("names".into())
            .spawn(move || work(&shared))
            .is_ok();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// Notes that `inode` is wanted by the next scan, unless it was missed recently; whether a
    /// scan is pending for it.
    fn ask(&mut self, inode: u64) -> bool {
        let missed = self
            .missed
            .get(&inode)
            .is_some_and(|t| t.elapsed() < self.miss_retry);
        if missed || self.asked.len() >= MAX_ASKED && !self.asked.contains(&inode) {
            return false;
        }
        self.asked.insert(inode);
        true
    }

    /// How long a wanted scan must still wait (at most one a second); zero when none is wanted.
    fn scan_wait(&self) -> Duration {
        match self.last_scan {
            Some(t) if !self.asked.is_empty() => self.min_interval.saturating_sub(t.elapsed()),
            _ => Duration::ZERO,
        }
    }

    /// Takes in a scan's findings; inodes in `asked` it did not find are missed.
    fn found(&mut self, found: HashMap<u64, Candidate>, asked: &HashSet<u64>) {
        let retry = self.miss_retry;
        self.missed
            .retain(|inode, t| !found.contains_key(inode) && t.elapsed() < retry);
        // Inodes asked for while this scan ran need no other scan if it found them.
        self.asked.retain(|inode| !found.contains_key(inode));
        let now = Instant::now();
        for inode in asked {
            if !found.contains_key(inode) {
                self.missed.insert(*inode, now);
            }
        }
        // An inode can be reused once its namespace is gone: forget interfaces of the departed.
        let devices = self.devices.len();
        self.devices.retain(|inode, _| found.contains_key(inode));
        let namespaces: HashMap<u64, Netns> = found
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
        // News only when a name changed, came or went: a caller asks again then, and a scan
        // that learnt nothing new (the common case) costs no one a second look.
        let changed = devices != self.devices.len()
            || namespaces.len() != self.namespaces.len()
            || namespaces
                .iter()
                .any(|(i, n)| self.namespaces.get(i).is_none_or(|o| o.name != n.name));
        self.generation += u64::from(changed);
        self.namespaces = namespaces;
    }
}

/// The worker: waits for requests, scans and reads interfaces, until the [`Names`] is dropped.
fn work(shared: &Shared) {
    loop {
        let (scan_for, devices) = {
            let mut s = shared.lock();
            loop {
                if s.closed {
                    return;
                }
                let wait = s.scan_wait();
                if (s.asked.is_empty() && s.devices_asked.is_empty()) || !wait.is_zero() {
                    let wait = if wait.is_zero() {
                        Duration::from_secs(3600)
                    } else {
                        wait
                    };
                    s = shared
                        .wake
                        .wait_timeout(s, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    continue;
                }
                break;
            }
            s.busy = true;
            let scan_for = (!s.asked.is_empty()).then(|| {
                s.scans += 1;
                s.last_scan = Some(Instant::now());
                std::mem::take(&mut s.asked)
            });
            (scan_for, std::mem::take(&mut s.devices_asked))
        };
        if let Some(asked) = scan_for {
            let found = scan(&shared.roots, Instant::now() + SCAN_DEADLINE);
            shared.lock().found(found, &asked);
        }
        for inode in devices {
            read_devices(shared, inode);
        }
        shared.lock().busy = false;
        shared.idle.notify_all();
    }
}

/// Lists the interfaces of namespace `inode` into the cache (none if it is unknown or cannot be
/// entered: no retry within the interval).
fn read_devices(shared: &Shared, inode: u64) {
    let enter = {
        let mut s = shared.lock();
        let enter = s.namespaces.get(&inode).map(|n| n.enter.clone());
        s.device_reads += u64::from(enter.is_some());
        enter
    };
    let read = enter.map(|enter| devices::read(&enter, inode));
    let mut s = shared.lock();
    if matches!(&read, Some(Err(e)) if e.kind() == io::ErrorKind::NotFound) {
        // The way in is stale (its process exited): the next ask scans again.
        s.namespaces.remove(&inode);
    }
    // Without CAP_SYS_ADMIN setns fails: no names, and no retry within the interval.
    let by_index = read.and_then(Result::ok).unwrap_or_default();
    let read_at = Instant::now();
    let changed = s
        .devices
        .get(&inode)
        .map_or(!by_index.is_empty(), |d| d.by_index != by_index);
    s.generation += u64::from(changed);
    s.devices.insert(inode, Devices { by_index, read_at });
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

/// Names every namespace that a `/run/netns` file or a process holds; engine metadata is read
/// only until `deadline`.
fn scan(roots: &Roots, deadline: Instant) -> HashMap<u64, Candidate> {
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
        let Ok(text) = meta::read_bounded(&dir.join("cgroup"), 64 << 10, None) else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        let Some(found) = cgroup::owner_at(&text) else {
            continue;
        };
        let owner = found.owner.clone();
        let rank = match owner {
            Owner::Pod(_) => RANK_POD,
            Owner::Container(..) | Owner::Machine(_) => RANK_CONTAINER,
            Owner::Service(_) => RANK_SERVICE,
            Owner::Session => continue,
        };
        // An equal rank may still improve a fallback name (a pod's pause process has no
        // HOSTNAME; its other containers do).
        if rank > c.rank || (rank == c.rank && !c.settled) {
            let claim = claimant(roots, &found);
            let metadata = Instant::now() < deadline;
            let (name, settled) = owner_name(roots, &mut podman, &dir, owner, claim, metadata);
            if rank > c.rank || settled {
                (c.rank, c.name, c.settled) = (rank, name, settled);
            }
        }
    }

    for c in found.values_mut() {
        if let (0, Some(pid)) = (c.rank, c.lowest_pid) {
            let dir = roots.proc.join(pid.to_string());
            let comm = meta::read_bounded(&dir.join("comm"), 64, None).unwrap_or_default();
            let comm = String::from_utf8_lossy(&comm);
            c.rank = RANK_PROCESS;
            c.name = format!("{}[{pid}]", comm.trim_end_matches('\n'));
        }
    }
    found
}

/// The user who named a cgroup, if not root: the one it is delegated to by systemd
/// (`user@UID.service`), else the first owner other than the admin of its directories (on the
/// unified hierarchy), from the top: whoever can write a directory can name what is in it.
fn claimant(roots: &Roots, found: &cgroup::Found<'_>) -> Option<u32> {
    if let Some(uid) = cgroup::delegated_to(found.path) {
        return (uid != roots.admin).then_some(uid);
    }
    if !found.unified {
        return None;
    }
    let mut dir = roots.cgroup.clone();
    for part in found
        .path
        .split('/')
        .filter(|p| !p.is_empty() && *p != "..")
    {
        dir.push(part);
        let uid = fs::symlink_metadata(&dir).ok()?.uid();
        if uid != roots.admin {
            return Some(uid);
        }
    }
    None
}

/// The displayed name of an owner, with its engine's metadata when readable (and `metadata`:
/// the scan's deadline has not passed), and whether it is more than a fallback (an id). A name
/// `claim`ed by a user, or read from a user's file, is labelled as that user's.
fn owner_name(
    roots: &Roots,
    podman: &mut meta::PodmanNames,
    dir: &Path,
    owner: Owner,
    claim: Option<u32>,
    metadata: bool,
) -> (String, bool) {
    let label = |uid: Option<u32>, name: String| match uid {
        Some(uid) => format!("user {uid}: {name}"),
        None => name,
    };
    match owner {
        Owner::Pod(uid) => {
            let found = metadata
                .then(|| {
                    meta::pod_name(&roots.pods, &uid).or_else(|| meta::environ_var(dir, "HOSTNAME"))
                })
                .flatten();
            match found {
                Some(name) => (label(claim, format!("pod:{name}")), true),
                None => (label(claim, format!("pod:{uid}")), false),
            }
        }
        Owner::Container(engine, id) => {
            // A rootless container's user: the cgroup's, else its process's.
            let user = claim.or_else(|| fs::metadata(dir).map(|m| m.uid()).ok());
            let found = metadata
                .then(|| meta::container_name(roots, podman, engine, &id, user))
                .flatten();
            match found {
                Some((name, from)) => (
                    label(claim.or(from), format!("{}:{name}", engine.label())),
                    true,
                ),
                None => (
                    label(claim, format!("{}:{}", engine.label(), &id[..12])),
                    false,
                ),
            }
        }
        Owner::Machine(name) | Owner::Service(name) => (label(claim, name), true),
        Owner::Session => (String::new(), false),
    }
}

/// Whether `name`, as [`Names::netns`] gives it, is one only root can give: `host`, an `ip
/// netns` name, or a container, pod, machine or service no user claims. A name made from a
/// process in the namespace (`COMM[PID]`) or claimed by a user (`user UID: ...`) is not: any
/// user can make those.
pub fn given_by_root(name: &str) -> bool {
    let process = (name.strip_suffix(']').and_then(|n| n.rsplit_once('[')))
        .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
    !process && !name.starts_with("user ")
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
