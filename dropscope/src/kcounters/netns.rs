//! Network namespaces to read counters in, and the reading itself: one thread of its own
//! enters each namespace in turn with setns(2) (only that thread changes namespace), reads
//! `/proc/thread-self/net/*` there, and goes back to the initial namespace after each reading.
//!
//! No namespace but the initial one is held open between reads: each is opened for its read
//! and closed right after, so dropscope never keeps a namespace alive. The initial namespace's
//! files and rtnetlink socket stay open and are read again from their start (`pread`), so a
//! reading costs few system calls. One is read only while a
//! process is in it or a `/run/netns` file names it (checked on every refresh); a namespace
//! whose processes have all exited is forgotten.
//!
//! A reading is asked for and taken when it has ended ([`Namespaces::ask`],
//! [`Namespaces::take`]): the collector never waits for one, and goes on with the latest
//! finished reading, which keeps the time it was taken. The thread reads the initial namespace
//! first, then others, at most [`MAX_READ_PER_POLL`] - 1 and for at most [`READ_BUDGET`] a
//! reading; the rest are read in turn by the next readings (round robin by inode), and how many
//! waited is reported, so the namespaces a local user makes in bulk slow only their own turn,
//! never the host's counters. A blocking read ([`Namespaces::read`]: the baseline, a report's
//! last reading) waits at most [`READ_WAIT`].
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fs::File,
    io::Read as _,
    os::{
        fd::AsRawFd,
        unix::fs::{FileExt as _, MetadataExt},
    },
    path::{Path, PathBuf},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{hooks::Hooked, parse, parse::Counters, rtnl::Found};
use crate::vocab::{devices::Devices, reading::RUN_NETNS};

/// The most namespaces read in one poll, the initial one included.
pub const MAX_READ_PER_POLL: usize = 256;

/// How long a blocking read waits for the reading thread; past it the reading is skipped
/// (noted), and none is asked for until the late one has ended, so a namespace or file that
/// never answers costs one stuck thread, never a stuck collector.
pub const READ_WAIT: Duration = Duration::from_secs(5);

/// How long one reading spends on namespaces other than the initial one (which is read first,
/// whatever the others cost): those not reached wait for the next reading, in turn.
pub const READ_BUDGET: Duration = Duration::from_secs(1);

/// A namespace read through a path (not held open).
#[derive(Debug)]
struct Ns {
    /// The way in: a `/run/netns` file or `/proc/PID/ns/net` of one of its processes.
    path: PathBuf,
    /// Whether it has been read since it was found (its first reading is its baseline).
    read: bool,
    /// The cookie of the namespace last read under this inode: the kernel gives a freed inode
    /// to a later namespace, whose first reading is a baseline of its own however soon it
    /// came.
    cookie: Option<u64>,
}

/// One reading of the counters.
#[derive(Debug, Default)]
pub struct Reading {
    /// Counters per namespace read.
    pub counters: BTreeMap<u64, Counters>,
    /// Namespaces read for the first time since they were found (or since their inode was
    /// given to another namespace).
    pub first: BTreeSet<u64>,
    /// The cookie of each namespace read (where it could be read).
    pub cookies: BTreeMap<u64, u64>,
    /// Namespaces that could not be read, and why.
    pub errors: Vec<String>,
    /// Namespaces left for a later reading by [`MAX_READ_PER_POLL`] or [`READ_BUDGET`].
    pub deferred: usize,
    /// How many of the namespaces asked for (after the initial one) the reading reached.
    pub reached: usize,
    /// When the reading ended, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The first part of a reading: the initial namespace alone, sent as soon as it is read
    /// (the others follow in a second part, which says how many were reached).
    pub initial_only: bool,
    /// The XDP and tc programs attached to devices, per namespace read (one whose link,
    /// qdisc or filter dump failed is left out: where its programs are is not known).
    pub hooks: BTreeMap<u64, Vec<Hooked>>,
    /// The devices of each namespace whose links were read, by interface index.
    pub devices: BTreeMap<u64, Devices>,
    /// The TCP listeners whose accept queue was full, per namespace read where any was.
    pub listeners: BTreeMap<u64, Vec<crate::vocab::reading::Listener>>,
    /// The nftables ruleset of each namespace read (where the kernel has nf_tables).
    pub rulesets: BTreeMap<u64, crate::culprit::ruleset::Ruleset>,
}

impl Reading {
    /// Adds a later part of the same reading.
    fn merge(&mut self, part: Reading) {
        self.counters.extend(part.counters);
        self.first.extend(part.first);
        self.cookies.extend(part.cookies);
        self.errors.extend(part.errors);
        self.deferred = part.deferred;
        self.reached = part.reached;
        self.hooks.extend(part.hooks);
        self.devices.extend(part.devices);
        self.listeners.extend(part.listeners);
        self.rulesets.extend(part.rulesets);
        self.unix_ms = part.unix_ms;
    }

    /// Takes in namespace `ns`'s counters and what its rtnetlink reading found: its programs
    /// only where every dump that finds them answered, its devices where its links were read.
    fn take(&mut self, ns: u64, counters: Counters, found: Found) {
        self.counters.insert(ns, counters);
        if found.hooks_whole {
            self.hooks.insert(ns, found.hooks);
        }
        if !found.devices.is_empty() {
            self.devices.insert(ns, found.devices);
        }
        if !found.listeners.is_empty() {
            self.listeners.insert(ns, found.listeners);
        }
        (self.errors).extend(found.notes.into_iter().map(|n| format!("netns {ns}: {n}")));
        if let Some(r) = found.ruleset {
            (self.errors).extend(r.notes.iter().map(|n| format!("netns {ns}: {n}")));
            self.rulesets.insert(ns, r);
        }
    }
}

/// The namespaces whose counters are read.
#[derive(Debug)]
pub struct Namespaces {
    initial: u64,
    initial_ns: (File, PathBuf),
    /// Every other namespace read, by inode.
    others: BTreeMap<u64, Ns>,
    /// The inode read last, where the next round-robin read starts after.
    cursor: u64,
    /// Namespace reads deferred by [`MAX_READ_PER_POLL`] so far.
    deferred: u64,
    proc: PathBuf,
    run_netns: PathBuf,
    /// The device of namespace files (nsfs): a name under `run_netns` that is not on it is a
    /// file whose bind mount this process does not see (made in another mount namespace that
    /// does not propagate to ours), no namespace. `None`: every name is taken (fake roots).
    nsfs: Option<u64>,
    /// The reading thread, started by the first read.
    reader: Option<Reader>,
    /// The namespaces of the reading asked for, in the order it reads them.
    asked: Vec<u64>,
    /// Which counters a reading keeps (the ledger's choice, given by the caller).
    keep: Keep,
}

/// Which counters a reading keeps, by name: those that count drops, and the packet counters
/// that are the denominators of drop ratios (the caller's, from the ledger).
pub type Keep = fn(&str) -> bool;

fn open(path: &Path) -> anyhow::Result<(u64, File)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let ino = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .ino();
    Ok((ino, file))
}

impl Namespaces {
    /// Opens the initial namespace (that of pid 1, else this process's own); its readings
    /// keep the counters `keep` wants.
    pub fn new(keep: Keep) -> anyhow::Result<Self> {
        let mut ns = Self::with_roots(Path::new("/proc"), Path::new(RUN_NETNS), keep)?;
        ns.nsfs = Some(
            ns.initial_ns
                .0
                .metadata()
                .context("the initial namespace")?
                .dev(),
        );
        Ok(ns)
    }

    /// Like [`Namespaces::new`], with other places than `/proc` and `/run/netns` (for tests).
    pub fn with_roots(proc: &Path, run_netns: &Path, keep: Keep) -> anyhow::Result<Self> {
        let path = Path::new("/proc/1/ns/net");
        let (initial, file, path) = match open(path) {
            Ok((i, f)) => (i, f, path.to_path_buf()),
            Err(_) => {
                let own = Path::new("/proc/self/ns/net");
                let (i, f) = open(own)?;
                (i, f, own.to_path_buf())
            }
        };
        Ok(Self {
            initial,
            initial_ns: (file, path),
            others: BTreeMap::new(),
            cursor: 0,
            deferred: 0,
            proc: proc.to_path_buf(),
            run_netns: run_netns.to_path_buf(),
            nsfs: None,
            reader: None,
            asked: Vec::new(),
            keep,
        })
    }

    /// The initial namespace's inode number.
    pub fn initial(&self) -> u64 {
        self.initial
    }

    /// Inode numbers of the namespaces named under `/run/netns` (`ip netns`).
    pub fn named(&self) -> impl Iterator<Item = u64> + '_ {
        (self.others.iter())
            .filter(|(_, ns)| ns.path.starts_with(&self.run_netns))
            .map(|(ino, _)| *ino)
    }

    /// Inode numbers of the namespaces read (the initial one first).
    pub fn inodes(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.initial).chain(self.others.keys().copied())
    }

    /// How many reads it takes to read every namespace known now once (the initial one is
    /// in each).
    pub fn readings_for_all(&self) -> u32 {
        let per = MAX_READ_PER_POLL - 1;
        self.others.len().div_ceil(per).max(1) as u32
    }

    /// Namespace reads deferred by [`MAX_READ_PER_POLL`] so far.
    pub fn deferred(&self) -> u64 {
        self.deferred
    }

    /// Brings the set up to date: the initial namespace, every namespace named under
    /// `/run/netns`, and those of `wanted` (by inode) that a process is in (looked for in
    /// `/proc/*/ns/net` on every refresh). A namespace that has neither any more is forgotten:
    /// it is gone, or going.
    pub fn refresh(&mut self, wanted: &[u64]) {
        self.refresh_searching(wanted, false);
    }

    /// Like [`Namespaces::refresh`]; with `every`, also every namespace a process is in (to
    /// find where newly loaded XDP and tc programs are attached: a namespace without drops,
    /// or a name, is otherwise not read). At most [`MAX_READ_PER_POLL`] are read a poll.
    pub fn refresh_searching(&mut self, wanted: &[u64], every: bool) {
        let mut found: BTreeMap<u64, PathBuf> = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(&self.run_netns) {
            for entry in dir.flatten() {
                let path = entry.path();
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if self.nsfs.is_none_or(|dev| meta.dev() == dev) {
                    found.entry(meta.ino()).or_insert(path);
                }
            }
        }
        let wanted: BTreeSet<u64> = wanted
            .iter()
            .copied()
            .filter(|i| *i != self.initial && !found.contains_key(i))
            .collect();
        if every {
            for (ino, path) in self.processes_in(None) {
                found.entry(ino).or_insert(path);
            }
        } else if !wanted.is_empty() {
            found.extend(self.processes_in(Some(&wanted)));
        }
        found.remove(&self.initial);
        let mut others = BTreeMap::new();
        for (ino, path) in found {
            let (read, cookie) =
                (self.others.get(&ino)).map_or((false, None), |n| (n.read, n.cookie));
            others.insert(ino, Ns { path, read, cookie });
        }
        self.others = others;
    }

    /// A way into each namespace of `inodes` that a process is in (into every one a process
    /// is in, with `None`): `/proc/PID/ns/net` of the lowest such pid.
    fn processes_in(&self, inodes: Option<&BTreeSet<u64>>) -> HashMap<u64, PathBuf> {
        let mut out = HashMap::new();
        let Ok(proc) = std::fs::read_dir(&self.proc) else {
            return out;
        };
        let mut pids: Vec<u32> = proc
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        for pid in pids {
            let path = self.proc.join(pid.to_string()).join("ns/net");
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            match inodes {
                None => {
                    out.entry(meta.ino()).or_insert(path);
                }
                Some(inodes) if inodes.contains(&meta.ino()) => {
                    out.entry(meta.ino()).or_insert(path);
                    if out.len() == inodes.len() {
                        break;
                    }
                }
                Some(_) => {}
            }
        }
        out
    }

    /// Reads the counters of the initial namespace and of others (see [`Namespaces::ask`]),
    /// waiting at most [`READ_WAIT`] (first for a reading asked for before, if one is awaited).
    /// A namespace that cannot be read is left out and its error returned beside; one that is
    /// gone since the refresh is left out silently.
    pub fn read(&mut self) -> Reading {
        let deadline = Instant::now() + READ_WAIT;
        let mut whole = Reading::default();
        let mut asked = false;
        loop {
            if self.awaited().is_none() {
                if asked {
                    return whole;
                }
                asked = true;
                if !self.ask() {
                    whole.errors.push(
                        "the counter reader: it could not be asked for a reading".to_string(),
                    );
                    return whole;
                }
            }
            match self.take(deadline.saturating_duration_since(Instant::now())) {
                Some(part) => whole.merge(part),
                None => {
                    whole.errors.push(format!(
                        "the counter reader: no reading within {READ_WAIT:.0?}: this one is \
                         skipped (a namespace or file does not answer)"
                    ));
                    return whole;
                }
            }
        }
    }

    /// Asks the reading thread for the counters of the initial namespace and of up to
    /// [`MAX_READ_PER_POLL`] - 1 others (those after the last one read, in inode order,
    /// wrapping), unless a reading asked for has not been taken yet; returns whether it asked.
    /// Never waits.
    pub fn ask(&mut self) -> bool {
        if self.awaited().is_some() {
            return false;
        }
        let chosen = pick(&self.others, self.cursor, MAX_READ_PER_POLL - 1);
        let ways: Vec<(u64, PathBuf)> = chosen
            .iter()
            .filter_map(|i| Some((*i, self.others.get(i)?.path.clone())))
            .collect();
        self.asked = ways.iter().map(|(i, _)| *i).collect();
        match self.reader().and_then(|r| r.ask(ways)) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("the counter reader: {e:#}");
                self.reader = None;
                false
            }
        }
    }

    /// How long the reading asked for has been awaited (`None`: none is).
    pub fn awaited(&self) -> Option<Duration> {
        self.reader.as_ref().and_then(Reader::awaited)
    }

    /// The next part of the reading asked for (the initial namespace's first, then the
    /// others'), once it has come (waiting at most `wait`; zero: not at all).
    pub fn take(&mut self, wait: Duration) -> Option<Reading> {
        let mut reading = match self.reader.as_mut()?.take(wait) {
            Ok(r) => r?,
            Err(e) => {
                self.reader = None;
                Reading {
                    errors: vec![format!("the counter reader: {e:#}")],
                    ..Reading::default()
                }
            }
        };
        if reading.initial_only {
            return Some(reading);
        }
        let asked = std::mem::take(&mut self.asked);
        let reached = &asked[..reading.reached.min(asked.len())];
        if let Some(&last) = reached.last() {
            self.cursor = last;
        }
        reading.deferred = self.others.len().saturating_sub(reached.len());
        self.deferred += reading.deferred as u64;
        for ino in reading.counters.keys() {
            if *ino == self.initial {
                continue;
            }
            if let Some(ns) = self.others.get_mut(ino) {
                let cookie = reading.cookies.get(ino).copied();
                let again = cookie.is_some() && std::mem::replace(&mut ns.cookie, cookie) != cookie;
                if !std::mem::replace(&mut ns.read, true) || again {
                    reading.first.insert(*ino);
                }
            }
        }
        Some(reading)
    }
}

impl Namespaces {
    /// The reading thread, started now if it is not running (or ended).
    fn reader(&mut self) -> anyhow::Result<&mut Reader> {
        if self.reader.is_none() {
            let (file, path) = &self.initial_ns;
            let ns = file.try_clone().context("the initial namespace")?;
            self.reader = Some(Reader::spawn(self.initial, ns, path.clone(), self.keep)?);
        }
        self.reader.as_mut().context("no reader")
    }
}

/// The thread that reads the counters; it ends when this is dropped.
#[derive(Debug)]
struct Reader {
    jobs: mpsc::Sender<Vec<(u64, PathBuf)>>,
    done: mpsc::Receiver<Reading>,
    /// Since when the reading asked for has been awaited (`None`: none is).
    asked: Option<Instant>,
}

impl Reader {
    fn spawn(initial: u64, ns: File, path: PathBuf, keep: Keep) -> anyhow::Result<Self> {
        let mut home = InitialNs {
            keep,
            ino: initial,
            ns,
            path,
            files: None,
            rtnl: super::rtnl::Rtnl::default(),
            buf: Vec::new(),
            nft: Default::default(),
        };
        Self::spawn_with(move |ways, part| home.read_all(ways, part))
    }

    /// A reader whose thread reads with `read_all`.
    /// `read_all` hands each part of a reading to its second argument, which returns false once
    /// nobody takes them any more; it returns what that last returned.
    fn spawn_with(
        mut read_all: impl FnMut(&[(u64, PathBuf)], &dyn Fn(Reading) -> bool) -> bool + Send + 'static,
    ) -> anyhow::Result<Self> {
        let (jobs, job_rx) = mpsc::channel::<Vec<(u64, PathBuf)>>();
        let (done_tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("dropscope-kcounters".into())
            .spawn(move || {
                while let Ok(ways) = job_rx.recv() {
                    let part = |r: Reading| done_tx.send(r).is_ok();
                    if !read_all(&ways, &part) {
                        break;
                    }
                }
            })
            .context("starting the counter reader")?;
        Ok(Self {
            jobs,
            done,
            asked: None,
        })
    }

    /// Asks for a reading of the initial namespace and of `ways` (none is awaited).
    fn ask(&mut self, ways: Vec<(u64, PathBuf)>) -> anyhow::Result<()> {
        self.jobs
            .send(ways)
            .map_err(|_| anyhow::anyhow!("it ended"))?;
        self.asked = Some(Instant::now());
        Ok(())
    }

    /// How long the reading asked for has been awaited.
    fn awaited(&self) -> Option<Duration> {
        self.asked.map(|t| t.elapsed())
    }

    /// The next part of the reading asked for, if it came within `wait` (`Ok(None)`: not yet,
    /// or none asked for); the reading is awaited until its last part is taken.
    fn take(&mut self, wait: Duration) -> anyhow::Result<Option<Reading>> {
        if self.asked.is_none() {
            return Ok(None);
        }
        let got = if wait.is_zero() {
            self.done.try_recv().map_err(|e| match e {
                mpsc::TryRecvError::Empty => mpsc::RecvTimeoutError::Timeout,
                mpsc::TryRecvError::Disconnected => mpsc::RecvTimeoutError::Disconnected,
            })
        } else {
            self.done.recv_timeout(wait)
        };
        match got {
            Ok(reading) => {
                if !reading.initial_only {
                    self.asked = None;
                }
                Ok(Some(reading))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.asked = None;
                anyhow::bail!("it ended")
            }
        }
    }
}

/// Now, in ms since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Calls `read` on each of `ways` in turn until `budget` is spent (measured from the first);
/// returns how many it reached.
fn within_budget<T>(ways: &[T], budget: Duration, mut read: impl FnMut(&T)) -> usize {
    let start = Instant::now();
    let mut reached = 0;
    for way in ways {
        if start.elapsed() >= budget {
            break;
        }
        read(way);
        reached += 1;
    }
    reached
}

/// The initial namespace's files, opened in it and kept.
struct ProcFiles {
    snmp: File,
    netstat: File,
    dev: File,
    /// Absent without IPv6 (ipv6.disable=1).
    snmp6: Option<File>,
    softnet: File,
}

/// What the reading thread keeps of the initial namespace.
struct InitialNs {
    ino: u64,
    ns: File,
    path: PathBuf,
    files: Option<ProcFiles>,
    rtnl: super::rtnl::Rtnl,
    buf: Vec<u8>,
    /// The last ruleset read of each namespace (see [`super::nftables`]).
    nft: super::nftables::Cache,
    /// Which counters a reading keeps.
    keep: Keep,
}

impl InitialNs {
    /// One reading, in two parts handed to `part`: the initial namespace, then each of `ways`
    /// (entering each in turn) within [`READ_BUDGET`]. Returns false once `part` does.
    fn read_all(&mut self, ways: &[(u64, PathBuf)], part: &dyn Fn(Reading) -> bool) -> bool {
        let mut r = Reading {
            initial_only: true,
            ..Reading::default()
        };
        let initial = self.ino;
        match self.read() {
            Ok((c, found)) => r.take(initial, c, found),
            Err(e) => r.errors.push(format!("netns {initial}: {e:#}")),
        }
        r.unix_ms = now_ms();
        if !part(r) {
            return false;
        }
        let mut r = Reading::default();
        let buf = &mut self.buf;
        r.reached = within_budget(ways, READ_BUDGET, |(ino, path)| {
            // Gone since the refresh (its last process exited, its pid was reused).
            let Ok((i, file)) = open(path) else {
                return;
            };
            if i != *ino {
                return;
            }
            match read_in(&file, path, buf, self.keep).map(|(c, mut found)| {
                found.ruleset = super::nftables::read(*ino, &mut self.nft, super::nftables::OTHER);
                (c, found)
            }) {
                Ok((c, found)) => {
                    if let Ok(cookie) = crate::names::cookie::current() {
                        r.cookies.insert(*ino, cookie);
                    }
                    r.take(*ino, c, found)
                }
                Err(e) => r.errors.push(format!("netns {ino}: {e:#}")),
            }
        });
        // Back home: a thread left in a namespace would keep it alive until the next reading.
        if !ways.is_empty()
            && let Err(e) = enter(&self.ns, &self.path)
        {
            r.errors.push(format!("netns {initial}: {e:#}"));
        }
        r.unix_ms = now_ms();
        part(r)
    }

    /// The initial namespace's counters, through the kept files and socket (opened in it the
    /// first time, and again after an error).
    fn read(&mut self) -> anyhow::Result<(Counters, Found)> {
        // What is opened now must be opened here (the thread may have started elsewhere).
        if self.files.is_none() {
            enter(&self.ns, &self.path)?;
            let open = |name: &str| {
                let path = format!("/proc/thread-self/net/{name}");
                File::open(&path).with_context(|| format!("opening {path}"))
            };
            self.files = Some(ProcFiles {
                snmp: open("snmp")?,
                netstat: open("netstat")?,
                dev: open("dev")?,
                snmp6: open("snmp6").ok(),
                softnet: open("softnet_stat")?,
            });
        }
        let result = self.read_files();
        if result.is_err() {
            self.files = None;
        }
        let mut all = result?;
        let mut found = self.rtnl.read(&mut all);
        listeners(&all, &mut found);
        found.ruleset = super::nftables::read(self.ino, &mut self.nft, super::nftables::HOST);
        all.retain(|name, _| (self.keep)(name));
        Ok((all, found))
    }

    fn read_files(&mut self) -> anyhow::Result<Counters> {
        let f = self.files.as_ref().context("no files")?;
        let (buf, keep) = (&mut self.buf, self.keep);
        let mut all = Counters::new();
        parse::snmp(reread(&f.snmp, buf, "snmp")?, &mut all, keep);
        parse::snmp(reread(&f.netstat, buf, "netstat")?, &mut all, keep);
        parse::dev(reread(&f.dev, buf, "dev")?, &mut all);
        if let Some(snmp6) = &f.snmp6 {
            parse::snmp6(reread(snmp6, buf, "snmp6")?, &mut all, keep);
        }
        parse::softnet(reread(&f.softnet, buf, "softnet_stat")?, &mut all);
        Ok(all)
    }
}

/// The most bytes read of one counter file (a namespace with thousands of devices has a
/// `dev` of a few MB).
const MAX_FILE: usize = 16 << 20;

/// Files the kernel prints whole in one go (`single_open`): a read that leaves room in the
/// buffer got all of it, and the read that would say so is spared. Files printed record by
/// record (`dev`, `softnet_stat`) can answer short before their end, and are read to it.
const WHOLE_AT_ONCE: &[&str] = &["snmp", "netstat", "snmp6"];

/// Reads a counter file into `buf` with `read(buf, offset)` until its end (see
/// [`WHOLE_AT_ONCE`]), at most [`MAX_FILE`] bytes.
fn fill<'a>(
    name: &str,
    buf: &'a mut Vec<u8>,
    mut read: impl FnMut(&mut [u8], u64) -> std::io::Result<usize>,
) -> anyhow::Result<&'a str> {
    let whole = WHOLE_AT_ONCE.contains(&name);
    buf.clear();
    let mut at = 0;
    loop {
        if buf.len() < at + 16384 {
            buf.resize(at + 65536, 0);
        }
        let room = buf.len() - at;
        let n = read(&mut buf[at..], at as u64).with_context(|| format!("reading {name}"))?;
        at += n;
        anyhow::ensure!(at <= MAX_FILE, "{name}: longer than {MAX_FILE} bytes");
        if n == 0 || (whole && n < room) {
            break;
        }
    }
    buf.truncate(at);
    std::str::from_utf8(buf).with_context(|| format!("{name}: not UTF-8"))
}

/// The whole of a kept file, read again from its start into `buf`.
fn reread<'a>(f: &File, buf: &'a mut Vec<u8>, name: &str) -> anyhow::Result<&'a str> {
    fill(name, buf, |b, at| f.read_at(b, at))
}

/// The whole of a file opened now (and closed right after) in the calling thread's namespace.
fn read_once<'a>(name: &str, buf: &'a mut Vec<u8>) -> anyhow::Result<&'a str> {
    let path = format!("/proc/thread-self/net/{name}");
    let mut f = File::open(&path).with_context(|| format!("opening {path}"))?;
    fill(name, buf, |b, _| f.read(b))
}

/// Moves the calling thread into namespace `ns` (opened from `path`).
fn enter(ns: &File, path: &Path) -> anyhow::Result<()> {
    // SAFETY: setns(2) with a namespace file descriptor we own; CLONE_NEWNET changes only the
    // calling thread's network namespace, and only the reading thread calls this.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("entering {}", path.display()));
    }
    Ok(())
}

/// Adds the full TCP listeners of the calling thread's namespace, whose counters are `all`, to
/// `found` (see [`super::listeners`]: asked only where `TcpExt:ListenDrops` is not zero). The
/// processes holding them are looked for in `/proc`: the reading thread changed its network
/// namespace only, so these are dropscope's pids.
fn listeners(all: &Counters, found: &mut Found) {
    let (listeners, notes) = super::listeners::read(all, Path::new("/proc"));
    found.listeners = listeners;
    found.notes.extend(notes);
}

/// Up to `max` inodes of `all`, those after `cursor` first, then from the start: a round robin.
fn pick<V>(all: &BTreeMap<u64, V>, cursor: u64, max: usize) -> Vec<u64> {
    all.range(cursor.saturating_add(1)..)
        .chain(all.range(..=cursor))
        .map(|(i, _)| *i)
        .take(max)
        .collect()
}

/// Enters namespace `ns` (opened from `path`) on the calling thread and reads its counters,
/// opening each file for this read only. Device and qdisc counters are read through an
/// rtnetlink socket made for this read after the thread entered the namespace (so in it);
/// what of them could not be read is returned as notes beside the counters.
fn read_in(
    ns: &File,
    path: &Path,
    buf: &mut Vec<u8>,
    keep: Keep,
) -> anyhow::Result<(Counters, Found)> {
    enter(ns, path)?;
    let mut all = Counters::new();
    parse::snmp(read_once("snmp", buf)?, &mut all, keep);
    parse::snmp(read_once("netstat", buf)?, &mut all, keep);
    parse::dev(read_once("dev", buf)?, &mut all);
    // Without IPv6 (ipv6.disable=1) there is no snmp6.
    if let Ok(text) = read_once("snmp6", buf) {
        parse::snmp6(text, &mut all, keep);
    }
    let mut found = super::rtnl::Rtnl::default().read(&mut all);
    listeners(&all, &mut found);
    // Only counters that count drops, and packets (the denominators of ratios), are kept.
    all.retain(|name, _| keep(name));
    Ok((all, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `text` that answers at most `chunk` bytes a read, counting the reads.
    fn chunked(
        text: &[u8],
        chunk: usize,
        reads: &mut u32,
    ) -> impl FnMut(&mut [u8], u64) -> std::io::Result<usize> {
        move |b, at| {
            *reads += 1;
            let at = at as usize;
            let n = b.len().min(chunk).min(text.len() - at.min(text.len()));
            b[..n].copy_from_slice(&text[at..at + n]);
            Ok(n)
        }
    }

    #[test]
    fn files_printed_record_by_record_are_read_to_their_end_and_whole_ones_in_one_read() {
        let text: Vec<u8> = (0..10_000).map(|i| b'a' + (i % 26) as u8).collect();
        let mut buf = Vec::new();
        // `dev` answers a page at a time, short of the buffer each time: all of it is read.
        let mut reads = 0;
        let got = fill("dev", &mut buf, chunked(&text, 4096, &mut reads)).expect("read");
        assert_eq!(got.as_bytes(), &text[..]);
        assert_eq!(reads, 4, "three pages and the read that says the end");
        // `snmp` comes whole: one read that leaves room is all of it.
        let mut reads = 0;
        let got = fill("snmp", &mut buf, chunked(&text, usize::MAX, &mut reads)).expect("read");
        assert_eq!((got.len(), reads), (text.len(), 1));
        // One that fills the buffer is read on.
        let long: Vec<u8> = vec![b'x'; 200_000];
        let mut reads = 0;
        let got = fill("snmp", &mut buf, chunked(&long, usize::MAX, &mut reads)).expect("read");
        assert_eq!(got.len(), long.len());
        assert!(reads > 1);
    }

    #[test]
    fn a_reading_is_never_waited_for_and_the_initial_namespace_comes_first_on_its_own() {
        // The second reading's other namespaces hang until the test lets them go; every
        // reading is numbered, and so is its time.
        let (release, hold) = mpsc::channel::<()>();
        let mut n = 0u64;
        let mut reader = Reader::spawn_with(move |_, part| {
            n += 1;
            let initial = Reading {
                initial_only: true,
                unix_ms: n,
                ..Reading::default()
            };
            if !part(initial) {
                return false;
            }
            if n == 2 {
                let _ = hold.recv();
            }
            part(Reading {
                unix_ms: 100 + n,
                ..Reading::default()
            })
        })
        .expect("a reader");
        let times = |reader: &mut Reader, wait| {
            let mut t = Vec::new();
            while let Some(r) = reader.take(wait).expect("no error") {
                t.push(r.unix_ms);
            }
            t
        };
        reader.ask(Vec::new()).expect("asked");
        assert_eq!(times(&mut reader, Duration::from_secs(5)), vec![1, 101]);
        assert!(reader.awaited().is_none());
        // The hanging one: its initial part comes; taking the rest does not wait.
        reader.ask(Vec::new()).expect("asked");
        assert_eq!(
            reader
                .take(Duration::from_secs(5))
                .expect("ok")
                .map(|r| r.unix_ms),
            Some(2)
        );
        for _ in 0..3 {
            let t = Instant::now();
            assert!(reader.take(Duration::ZERO).expect("no error").is_none());
            // The reading never ends until released: any bound shows it was not waited for.
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "waited {:?}",
                t.elapsed()
            );
            assert!(
                reader.awaited().is_some(),
                "the reading is awaited until it ends"
            );
        }
        // Once it ends, its last part is taken, with its own time.
        release.send(()).expect("the reader waits");
        assert_eq!(times(&mut reader, Duration::from_secs(5)), vec![102]);
        assert!(reader.awaited().is_none());
    }

    #[test]
    fn namespaces_beyond_the_time_budget_wait_for_the_next_reading() {
        let ways: Vec<u64> = (1..=10).collect();
        let budget = Duration::from_millis(120);
        let start = Instant::now();
        let mut started = Vec::new();
        let reached = within_budget(&ways, budget, |w| {
            started.push((*w, start.elapsed()));
            std::thread::sleep(Duration::from_millis(50));
        });
        let spent = start.elapsed();
        assert_eq!(reached, started.len());
        // Read in order, each begun within the budget, and cut once it was spent (10 reads
        // of 50 ms each cannot fit in 120 ms, however busy the machine).
        assert!(
            (started.iter().enumerate()).all(|(i, (w, at))| *w == i as u64 + 1 && *at < budget),
            "{started:?}"
        );
        assert!(
            (1..10).contains(&reached) && spent >= budget,
            "{reached} reached in {spent:?}"
        );
        // A spent budget reaches none (the initial namespace is read before, outside it).
        assert_eq!(within_budget(&ways, Duration::ZERO, |_| {}), 0);
        assert_eq!(within_budget(&ways, Duration::from_secs(5), |_| {}), 10);
    }

    #[test]
    fn reads_go_round_robin_within_the_bound() {
        let all: BTreeMap<u64, ()> = (1..=10).map(|i| (i * 10, ())).collect();
        assert_eq!(pick(&all, 0, 4), vec![10, 20, 30, 40]);
        assert_eq!(pick(&all, 40, 4), vec![50, 60, 70, 80]);
        assert_eq!(pick(&all, 80, 4), vec![90, 100, 10, 20]);
        assert_eq!(pick(&all, 55, 100).len(), 10, "each once");
        assert_eq!(pick(&all, 100, 3), vec![10, 20, 30]);
        assert!(pick(&BTreeMap::<u64, ()>::new(), 7, 3).is_empty());
    }

    /// A fake `/proc` whose processes' `ns/net` are plain files: their inodes stand for
    /// namespaces.
    struct Fake {
        dir: tempfile::TempDir,
    }

    impl Fake {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::create_dir(dir.path().join("proc")).expect("mkdir");
            std::fs::create_dir(dir.path().join("netns")).expect("mkdir");
            Self { dir }
        }

        /// A process `pid` in the namespace of `like` (a pid), or in a new one; its inode.
        fn process(&self, pid: u32, like: Option<u32>) -> u64 {
            let ns = self.dir.path().join(format!("proc/{pid}/ns"));
            std::fs::create_dir_all(&ns).expect("mkdir");
            match like {
                Some(other) => {
                    let target = self.dir.path().join(format!("proc/{other}/ns/net"));
                    std::fs::hard_link(target, ns.join("net")).expect("link");
                }
                None => std::fs::write(ns.join("net"), "").expect("write"),
            }
            std::fs::metadata(ns.join("net")).expect("stat").ino()
        }

        fn exit(&self, pid: u32) {
            std::fs::remove_dir_all(self.dir.path().join(format!("proc/{pid}"))).expect("rm");
        }

        fn namespaces(&self) -> Namespaces {
            Namespaces::with_roots(
                &self.dir.path().join("proc"),
                &self.dir.path().join("netns"),
                crate::ledger::layers::is_kept,
            )
            .expect("the initial namespace")
        }
    }

    fn others(ns: &Namespaces) -> Vec<u64> {
        ns.inodes().skip(1).collect()
    }

    #[test]
    fn a_name_whose_bind_mount_is_not_seen_here_is_no_namespace() {
        let f = Fake::new();
        let a = f.process(10, None);
        let b = f.process(20, None);
        // Names `ip netns add` made in a mount namespace that does not propagate to ours: the
        // plain files their bind mounts cover there (here, files of the fake's own filesystem).
        std::fs::hard_link(
            f.dir.path().join("proc/20/ns/net"),
            f.dir.path().join("netns/b"),
        )
        .expect("link");
        std::fs::write(f.dir.path().join("netns/late"), b"").expect("plain file");
        let mut ns = f.namespaces();
        // This process's namespace files are on nsfs; the names are not.
        let nsfs = std::fs::metadata("/proc/self/ns/net").expect("nsfs").dev();
        assert_ne!(nsfs, std::fs::metadata(f.dir.path()).expect("fake").dev());
        ns.nsfs = Some(nsfs);
        ns.refresh(&[a]);
        // Only the namespace a process is in, found through /proc.
        assert_eq!(others(&ns), vec![a]);
        // Without the check (fake roots), every name is taken.
        ns.nsfs = None;
        ns.refresh(&[a]);
        assert_eq!(others(&ns).len(), 3, "{:?} and b {b}", others(&ns));
    }

    #[test]
    fn a_namespace_is_kept_only_while_a_process_or_a_name_holds_it() {
        let f = Fake::new();
        let a = f.process(10, None);
        f.process(11, Some(10));
        let b = f.process(20, None);
        let named = f.dir.path().join("netns/blue");
        // A hard link stands in for the bind mount: the same inode.
        std::fs::hard_link(f.dir.path().join("proc/20/ns/net"), &named).expect("link");
        let mut ns = f.namespaces();
        ns.refresh(&[a, b, 4242]);
        assert_eq!(others(&ns), vec![a.min(b), a.max(b)]);
        // One of a's two processes exits: a stays, through the other.
        f.exit(10);
        ns.refresh(&[a, b, 4242]);
        assert_eq!(others(&ns), vec![a.min(b), a.max(b)]);
        // b's process exits, but its name holds it.
        f.exit(20);
        ns.refresh(&[a, b]);
        assert!(others(&ns).contains(&b));
        // a's last process exits: a is forgotten, though drops were seen there.
        f.exit(11);
        ns.refresh(&[a, b]);
        assert_eq!(others(&ns), vec![b]);
        // The name goes: so does b.
        std::fs::remove_file(&named).expect("rm");
        ns.refresh(&[a, b]);
        assert!(others(&ns).is_empty());
    }

    /// A namespace that ended and a later one given its inode between two readings: the
    /// later one's first reading is a baseline of its own (its cookie is another), never a
    /// continuation of the ended one's.
    #[test]
    fn an_inode_given_to_another_namespace_is_read_first_again() {
        let f = Fake::new();
        let a = f.process(10, None);
        let mut ns = f.namespaces();
        ns.refresh(&[a]);
        let mut cookies = [5u64, 5, 9, 9].into_iter();
        ns.reader = Some(
            Reader::spawn_with(move |ways, part| {
                if !part(Reading {
                    initial_only: true,
                    ..Reading::default()
                }) {
                    return false;
                }
                let mut r = Reading {
                    reached: ways.len(),
                    ..Reading::default()
                };
                let cookie = cookies.next().expect("a cookie");
                for (ino, _) in ways {
                    r.counters.insert(*ino, Counters::new());
                    r.cookies.insert(*ino, cookie);
                }
                part(r)
            })
            .expect("a reader"),
        );
        let mut firsts = Vec::new();
        for _ in 0..4 {
            assert!(ns.ask());
            let mut first = false;
            while let Some(r) = ns.take(Duration::from_secs(5)) {
                first |= r.first.contains(&a);
                if !r.initial_only {
                    break;
                }
            }
            firsts.push(first);
        }
        assert_eq!(firsts, [true, false, true, false]);
    }

    #[test]
    fn reads_are_bounded_and_the_rest_wait_their_turn() {
        let f = Fake::new();
        let n = MAX_READ_PER_POLL + 44;
        let inodes: Vec<u64> = (0..n as u32).map(|i| f.process(100 + i, None)).collect();
        let mut ns = f.namespaces();
        ns.refresh(&inodes);
        assert_eq!(others(&ns).len(), n);
        // Plain files cannot be entered: each namespace read is an error naming it.
        let initial = ns.initial();
        let tried = |r: &Reading| -> BTreeSet<u64> {
            r.errors
                .iter()
                .filter_map(|e| e.strip_prefix("netns ")?.split(':').next()?.parse().ok())
                .filter(|i| *i != initial)
                .collect()
        };
        let r = ns.read();
        assert_eq!(r.deferred, n - (MAX_READ_PER_POLL - 1));
        assert_eq!(tried(&r).len(), MAX_READ_PER_POLL - 1);
        let r2 = ns.read();
        assert_eq!(tried(&r2).len(), MAX_READ_PER_POLL - 1);
        assert_eq!(ns.deferred(), 2 * (n - (MAX_READ_PER_POLL - 1)) as u64);
        // Over two polls every namespace was tried.
        let both: BTreeSet<u64> = tried(&r).union(&tried(&r2)).copied().collect();
        for i in &inodes {
            assert!(both.contains(i), "namespace {i} never read");
        }
    }
}
