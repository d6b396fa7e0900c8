//! The collector: polls the probe's maps adaptively and turns them into [`Snapshot`]s.
//!
//! Each poll reads the mmap'd totals first (no syscall). Only when they changed does it read the
//! counts (mmap reads; one batch syscall only when keys were added) and the sampled stack
//! weights. While drops arrive it polls every half base interval; while idle it checks the
//! totals as often (no BPF syscall) and sends a snapshot once per base interval, so a drop after
//! an idle spell is on screen within one base interval. It never wakes per event.
mod counts;

pub use counts::{CountMaps, CountRead, CountReader};
use std::{
    collections::HashMap,
    os::fd::OwnedFd,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tokio::sync::mpsc;

use dropscope_common::{StackKey, StackValue};

use crate::{
    kcounters::{self, KernelCounters},
    model::group::{self, Dim},
    model::{
        Attribution, DropCount, DropKey, Health, KeySamples, Sample, SessionInfo, Snapshot,
        StackCount,
    },
    names::Names,
    probe::{Probe, Totals},
    source::{Feed, KernelPace},
    symbolize::Symbolizer,
};

/// How the collector polls.
#[derive(Clone, Debug)]
pub struct CollectorOptions {
    /// Base poll interval (drops arriving are read twice as often).
    pub interval: Duration,
    /// Capture sampled kernel stacks.
    pub stacks: bool,
    /// Stack samples per second to aim for (the sampling period follows the drop rate).
    pub stack_budget: u64,
    /// Turn on kernel BPF run-time statistics while running (off again on exit).
    pub bpf_stats: bool,
    /// The dimensions counts are grouped by.
    pub by: Vec<Dim>,
    /// Read the kernel's own counters (the first reading is their baseline), this often.
    pub kernel_counters: Option<KernelPace>,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            stacks: true,
            stack_budget: 1000,
            bpf_stats: false,
            by: vec![Dim::Reason, Dim::Location],
            kernel_counters: None,
        }
    }
}

type Frames = Arc<[Arc<str>]>;

/// Owns the probe and the symbolizer; produces cumulative snapshots.
pub struct Collector {
    probe: Probe,
    symbolizer: Symbolizer,
    names: Names,
    /// The names' generation the current keys were named in.
    names_generation: u64,
    /// The last name found of each namespace with drops (at most one per key).
    known_names: HashMap<u64, Arc<str>>,
    opts: CollectorOptions,
    started: Instant,
    interval: Duration,
    counts: CountReader,
    last_totals: Option<Totals>,
    /// Time and consistent total of the last read of the counts (the attach, at first).
    last_read: (Instant, u64),
    last: Snapshot,
    stack_ids: HashMap<u32, Frames>,
    stack_base: HashMap<StackKey, StackValue>,
    stacks: HashMap<(DropKey, Frames), (u64, u64)>,
    stack_lost: u64,
    /// Per sampled slot: its packets read so far.
    sample_cache: HashMap<u32, Vec<Sample>>,
    stats_fd: Option<OwnedFd>,
    stats: Option<crate::probe::sys::ProgStats>,
    /// When the run statistics were last read.
    stats_read: Instant,
    /// The kernel's counters, when a consumer wants them.
    kernel: Option<KernelSource>,
}

/// The kernel's counters as the collector reads them: before the maps, on their own pace.
struct KernelSource {
    counters: KernelCounters,
    pace: KernelPace,
    /// When they were last read (`None`: read with the next poll).
    read_at: Option<Instant>,
    /// The latest reading, carried by every snapshot taken after it.
    reading: Option<Arc<crate::model::KernelReading>>,
}

impl Collector {
    /// Wraps an attached probe. With `bpf_stats`, kernel run-time statistics are enabled for as
    /// long as the collector lives (through a file descriptor: nothing to restore by hand).
    pub fn new(probe: Probe, opts: CollectorOptions) -> Self {
        let stats = opts
            .bpf_stats
            .then(|| aya::sys::enable_stats(aya::sys::Stats::RunTime).ok())
            .flatten();
        probe.set_stack_sampling(u64::from(opts.stacks), opts.stack_budget);
        let symbolizer = Symbolizer::new();
        symbolizer.warm_up();
        // The counters' baseline is read once the probe counts: drops between the two are
        // counted by the probe only, so none can read as unseen.
        let kernel = opts
            .kernel_counters
            .clone()
            .and_then(|pace| match KernelCounters::start() {
                Ok(counters) => Some(KernelSource {
                    counters,
                    pace,
                    read_at: Some(Instant::now()),
                    reading: None,
                }),
                Err(e) => {
                    tracing::warn!("not reading the kernel's drop counters: {e:#}");
                    None
                }
            });
        Self {
            interval: opts.interval,
            probe,
            symbolizer,
            names: Names::new(),
            names_generation: 0,
            known_names: HashMap::new(),
            opts,
            started: Instant::now(),
            counts: CountReader::default(),
            last_totals: None,
            last_read: (Instant::now(), 0),
            last: Snapshot::default(),
            stack_ids: HashMap::new(),
            stack_base: HashMap::new(),
            stacks: HashMap::new(),
            stack_lost: 0,
            sample_cache: HashMap::new(),
            stats_fd: stats,
            stats: None,
            stats_read: Instant::now(),
            kernel,
        }
    }

    /// One poll: reads the mmap'd totals and, only if they changed, the counts. Returns the
    /// new snapshot and whether any count changed. Adapts the interval.
    pub fn poll(&mut self) -> std::io::Result<(Snapshot, bool)> {
        // The kernel's counters are read before the maps: the snapshot then holds every drop
        // they counted (the same span or more), so a drop the probe saw never reads as unseen.
        let read_kernel = self.read_kernel_if_due();
        let totals = self.probe.totals();
        // Names are looked up beside the counting: when the lookups learnt some, the keys are
        // named again even if no count changed (a quiet namespace gets its name too).
        let names = self.names.generation();
        let changed = self
            .last_totals
            .is_none_or(|t| t.drop_counts() != totals.drop_counts())
            || names != self.names_generation
            || read_kernel;
        if changed {
            self.names_generation = names;
            self.read_maps()?;
        }
        self.interval = self.opts.interval / 2;
        self.last.elapsed = self.started.elapsed();
        self.last.unix_ms = unix_ms();
        self.last.health = self.health(changed);
        Ok((self.last.clone(), changed))
    }

    /// Reads the maps (and the kernel's counters, if read at all) now, whatever the totals
    /// say, and returns the snapshot.
    pub fn snapshot_now(&mut self) -> std::io::Result<Snapshot> {
        self.last_totals = None;
        if let Some(k) = &mut self.kernel {
            k.read_at = None;
        }
        Ok(self.poll()?.0)
    }

    /// Reads the kernel's counters when their pace says so; returns whether it did.
    fn read_kernel_if_due(&mut self) -> bool {
        let Some(k) = &mut self.kernel else {
            return false;
        };
        if k.read_at.is_some_and(|t| t.elapsed() < k.pace.get()) {
            return false;
        }
        k.counters.poll(&kcounters::drop_netns(&self.last));
        k.read_at = Some(Instant::now());
        let reading = Arc::new(k.counters.reading());
        k.reading = Some(reading.clone());
        self.last.kernel = Some(reading);
        true
    }

    fn read_maps(&mut self) -> std::io::Result<()> {
        let read = self.counts.read(&self.probe)?;
        let now = Instant::now();
        // The sampling period follows the drop rate measured between two real reads.
        let (then, before) = self.last_read;
        let dt = now.duration_since(then).as_secs_f64().max(1e-3);
        self.adapt_sampling(read.total.saturating_sub(before) as f64 / dt);
        self.last_read = (now, read.total);
        self.last_totals = Some(read.totals);
        self.symbolizer
            .prefetch(read.counts.iter().map(|(k, _)| k.location));
        let mut merged: HashMap<DropKey, u64> = HashMap::with_capacity(read.counts.len());
        for (k, count) in &read.counts {
            let key = self.model_key(k);
            *merged.entry(key).or_default() += count;
        }
        let mut samples: HashMap<DropKey, Vec<Sample>> = HashMap::new();
        for (k, slot) in self.counts.slots().to_vec() {
            let packets = self.samples_of(slot);
            if !packets.is_empty() {
                let key = self.model_key(&k);
                samples.entry(key).or_default().extend(packets);
            }
        }
        self.last.samples = samples
            .into_iter()
            .map(|(key, packets)| KeySamples { key, packets })
            .collect();
        // A gap between the kernel's own total and keyed + overflow that persists would be a
        // real loss: then the kernel's total is shown, and the header says MISMATCH.
        self.last.total = read.shown_total();
        self.last.overflow = read.overflow;
        self.last.drops = merged
            .into_iter()
            .map(|(key, count)| DropCount { key, count })
            .collect();
        // The kernel keeps an interface's namespace with it; `--by` may want it merged away.
        let grouped = group::regroup(&self.last, &self.opts.by);
        self.last.drops = grouped.drops;
        self.last.samples = grouped.samples;
        if self.opts.stacks {
            // Exact counts per row: each row's sampled stack weights are scaled to its count.
            let exact: HashMap<DropKey, u64> = (self.last.drops.iter())
                .map(|d| (d.key.clone(), d.count))
                .collect();
            self.read_stacks(&exact)?;
        }
        Ok(())
    }

    /// The model's key for a kernel key: reason and location named, packets attributed.
    fn model_key(&mut self, k: &dropscope_common::DropKey) -> DropKey {
        DropKey {
            reason: self.probe.reasons().reason(k.reason),
            location: self.symbolizer.name(k.location),
            attr: self.attribution(k),
        }
    }

    /// The sampled packets of `slot`: those its sampling CPU has counted and finished writing
    /// (the program sets a sample's time last). Read until a key has all it will get.
    fn samples_of(&mut self, slot: u32) -> Vec<Sample> {
        let Some(owner) = self.probe.sample_owner(slot) else {
            return Vec::new();
        };
        let counted = self.probe.slot_count(owner, slot);
        let want = counted.min(dropscope_common::SAMPLES_PER_KEY as u64) as usize;
        let cached = self.sample_cache.entry(slot).or_default();
        if cached.len() < want {
            let offset = unix_ms() as i128 - monotonic_ms() as i128;
            *cached = self
                .probe
                .samples(slot, want as u64)
                .into_iter()
                .map(|s| Sample {
                    unix_ms: (s.ts_ns as i128 / 1_000_000 + offset).max(0) as u64,
                    len: s.len,
                    l3proto: s.l3proto,
                    bytes: s.data[..usize::from(s.caplen).min(s.data.len())].into(),
                })
                .collect();
        }
        cached.clone()
    }

    /// The name of namespace `inode`: the latest found, or the last one known once it is
    /// gone (its drops keep the name they had).
    fn netns_name(&mut self, inode: u64) -> Option<Arc<str>> {
        match self.names.netns(inode) {
            Some(name) => {
                if self.known_names.get(&inode) != Some(&name) {
                    self.known_names.insert(inode, name.clone());
                }
                Some(name)
            }
            None => self.known_names.get(&inode).cloned(),
        }
    }

    /// What a kernel key says of its packets, as the model shows it.
    fn attribution(&mut self, k: &dropscope_common::DropKey) -> Attribution {
        let ip = matches!(k.l3proto, 0x0800 | 0x86DD);
        let netns = (k.netns != 0).then_some(u64::from(k.netns));
        Attribution {
            netns,
            netns_name: netns.and_then(|n| self.netns_name(n)),
            ifindex: (k.ifindex != 0).then_some(k.ifindex),
            // An interface whose name cannot be read (gone, or no right to enter its
            // namespace) is shown by index.
            device: (k.ifindex != 0).then(|| {
                netns
                    .and_then(|n| self.names.device(n, k.ifindex))
                    .unwrap_or_else(|| Arc::from(format!("if{}", k.ifindex)))
            }),
            protocol: ip.then(|| Arc::from(group::protocol_name(k.l4proto))),
            port: (k.port != 0).then_some(k.port),
        }
    }

    /// Folds the kernel's cumulative stack weights into the session's, by difference with what
    /// was read last time. The kernel maps are only emptied when they near capacity.
    fn read_stacks(&mut self, exact: &HashMap<DropKey, u64>) -> std::io::Result<()> {
        let full = self.stack_ids.len() > dropscope_common::STACK_TRACE_ENTRIES as usize / 2
            || self.stack_base.len() > dropscope_common::STACK_COUNT_ENTRIES as usize * 3 / 4;
        let entries = self.probe.read_stack_counts(full)?;
        let mut deltas = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let base = self.stack_base.entry(k).or_default();
            let delta = StackValue {
                weight: v.weight.saturating_sub(base.weight),
                samples: v.samples.saturating_sub(base.samples),
            };
            *base = v;
            if delta.samples > 0 {
                deltas.push((k, delta));
            }
        }
        self.resolve_stacks(deltas.iter().map(|(k, _)| k.stack_id));
        let slots: HashMap<u32, dropscope_common::DropKey> = (self.counts.slots().iter())
            .map(|&(k, slot)| (slot, k))
            .collect();
        for (k, v) in deltas {
            let Some(frames) = self.stack_ids.get(&k.stack_id).cloned() else {
                // The kernel no longer has this stack's frames: counted, never guessed.
                self.stack_lost += v.samples;
                continue;
            };
            // The stack belongs to its drop's row (a drop that got no slot: to its reason and
            // location only).
            let key = match slots.get(&k.slot) {
                Some(kernel) => self.model_key(kernel),
                None => DropKey {
                    reason: self.probe.reasons().reason(k.reason),
                    location: self.symbolizer.name(k.location),
                    attr: Attribution::default(),
                },
            };
            let key = group::coarser(&key, &self.opts.by);
            let e = self.stacks.entry((key, frames)).or_default();
            e.0 += v.weight;
            e.1 += v.samples;
        }
        if full {
            // Start over so the kernel's maps never stay full: frames were copied out already.
            self.stack_base.clear();
            for id in std::mem::take(&mut self.stack_ids).into_keys() {
                self.probe.forget_stack(id);
            }
        }
        let mut stacks: Vec<StackCount> = self
            .stacks
            .iter()
            .map(|((key, frames), (weight, samples))| StackCount {
                key: key.clone(),
                frames: frames.clone(),
                weight: *weight,
                samples: *samples,
            })
            .collect();
        calibrate(&mut stacks, exact);
        self.last.stacks = stacks;
        Ok(())
    }

    /// Copies out and symbolizes (in one batch) the frames of stacks not seen before.
    fn resolve_stacks(&mut self, ids: impl Iterator<Item = u32>) {
        let mut raw = Vec::new();
        for id in ids {
            if self.stack_ids.contains_key(&id) || raw.iter().any(|(i, _)| *i == id) {
                continue;
            }
            if let Some(addrs) = self.probe.stack_frames(id) {
                raw.push((id, addrs));
            }
        }
        self.symbolizer
            .prefetch(raw.iter().flat_map(|(_, a)| a.iter().copied()));
        for (id, addrs) in raw {
            let frames: Vec<Arc<str>> = addrs
                .iter()
                .rev()
                .map(|a| self.symbolizer.name(*a))
                .filter(|n| !is_probe_frame(n))
                .collect();
            self.stack_ids.insert(id, frames.into());
        }
    }

    /// Sets the sampling period so that stack captures stay near the budget.
    fn adapt_sampling(&mut self, drops_per_sec: f64) {
        if !self.opts.stacks {
            return;
        }
        let budget = self.opts.stack_budget.max(1) as f64;
        let period = (drops_per_sec / budget)
            .ceil()
            .clamp(1.0, (1u64 << 24) as f64) as u64;
        self.probe
            .set_stack_sampling(period, self.opts.stack_budget);
        self.last.health.sample_period = period;
    }

    /// The probe's health. The program's run statistics (one syscall) are read only when drops
    /// arrived: while idle they cannot change, and no BPF syscall is made at all.
    fn health(&mut self, changed: bool) -> Health {
        let t = self.last_totals.unwrap_or_default();
        let keys_used = self.counts_keys();
        // At most once per base interval: the header shows it per second anyway.
        let due = self.stats_read.elapsed() >= self.opts.interval;
        if self.stats.is_none() || (changed && due) {
            self.stats = self.probe.prog_stats();
            self.stats_read = Instant::now();
        }
        let stats = self.stats;
        Health {
            keys_used,
            keys_capacity: u64::from(self.probe.max_keys()),
            stack_samples: t.stack_samples,
            stack_errors: t.stack_errors,
            stack_overflow: t.stack_overflow,
            stack_lost: self.stack_lost,
            sample_period: if self.opts.stacks {
                self.last.health.sample_period.max(1)
            } else {
                0
            },
            recursion_misses: stats.map_or(0, |s| s.recursion_misses),
            // Run statistics exist while they are enabled: by --bpf-stats, or by someone else
            // through kernel.bpf_stats_enabled (then run_cnt grows).
            bpf_run_ns: stats
                .filter(|s| self.stats_fd.is_some() || s.run_cnt > 0)
                .map(|s| s.run_time_ns),
            bpf_run_cnt: stats
                .filter(|s| self.stats_fd.is_some() || s.run_cnt > 0)
                .map(|s| s.run_cnt),
            self_syscalls: self
                .probe
                .counts_self_syscalls()
                .then(|| self.probe.totals().self_syscalls),
            self_cpu_us: self_cpu_us(),
            poll_interval_ms: self.interval.as_millis() as u64,
        }
    }

    /// Keys in the kernel's key map (each takes one slot of its capacity).
    fn counts_keys(&self) -> u64 {
        self.last_totals.map_or(0, |t| t.new_keys)
    }

    /// Runs a collector on a thread of its own (the symbolizer is not `Send`), feeding a
    /// [`Feed`]. It stops when the [`Stopper`] is used or dropped, sending one last snapshot
    /// read right then, or when the feed's receiver is dropped.
    pub fn spawn(probe: Probe, opts: CollectorOptions) -> std::io::Result<(Feed, Stopper)> {
        let (tx, rx) = mpsc::channel(64);
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let info = session_info(&probe);
        let kernel_pace = opts.kernel_counters.clone();
        let handle = std::thread::Builder::new().name("collector".into()).spawn(
            move || -> std::io::Result<()> {
                // The symbolizer is not `Send`: it is created here, on the collector's thread.
                let base = opts.interval;
                let c = &mut Collector::new(probe, opts);
                let mut sent = Instant::now();
                let mut first = true;
                loop {
                    let (s, changed) = c.poll()?;
                    // Idle checks cost no syscall and send nothing; a snapshot goes out when
                    // counts changed, and once per base interval for the clock.
                    if changed || first || sent.elapsed() >= base {
                        if tx.blocking_send(s).is_err() {
                            return Ok(());
                        }
                        sent = Instant::now();
                        first = false;
                    }
                    match stop_rx.recv_timeout(c.interval) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
                // The last snapshot is what a report prints and a recording ends with: a read
                // asks for the names of every key, and the lookups get a moment (never more)
                // to answer before the read that is sent.
                c.snapshot_now()?;
                c.names.wait_idle(FINAL_NAMES_WAIT);
                let _ = tx.blocking_send(c.snapshot_now()?);
                Ok(())
            },
        )?;
        let feed = Feed {
            info,
            snapshots: rx,
            replay: None,
            kernel_pace,
        };
        Ok((
            feed,
            Stopper {
                stop: stop_tx,
                handle: Some(handle),
            },
        ))
    }
}

/// How long the last snapshot waits for names still being looked up.
const FINAL_NAMES_WAIT: Duration = Duration::from_secs(1);

/// Stops a spawned collector: it takes a last snapshot, sends it, and detaches the probe (on its
/// own thread, which [`Stopper::finish`] and `Drop` wait for, so nothing outlives the process's
/// orderly exit: programs, a tracefs mount, BPF statistics).
pub struct Stopper {
    stop: std::sync::mpsc::Sender<()>,
    handle: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Stopper {
    /// Asks the collector to take a last snapshot and stop; the feed closes after it.
    pub fn stop(&self) {
        let _ = self.stop.send(());
    }

    /// Stops the collector, waits until the probe is detached, and returns what ended it.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.stop();
        match self.handle.take().map(std::thread::JoinHandle::join) {
            Some(Ok(Ok(()))) | None => Ok(()),
            Some(Ok(Err(e))) => Err(anyhow::Error::new(e).context("reading the probe's maps")),
            Some(Err(_)) => Err(anyhow::anyhow!("the collector thread panicked")),
        }
    }
}

impl Drop for Stopper {
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Host, kernel, start time and probe kind of a live session starting now.
pub fn session_info(probe: &Probe) -> SessionInfo {
    SessionInfo {
        host: uname_field(|u| &u.nodename),
        kernel: uname_field(|u| &u.release),
        started_unix_ms: unix_ms(),
        probe: probe.kind().to_string(),
    }
}

/// Scales each row's sampled stack weights so they add up to its exact count:
/// the samples give the shares of its stacks, the counter gives the total. (A sample weighs the
/// drops on its CPU since the previous one, so weight leaks across keys that interleave on a
/// CPU, and the drops after a CPU's last sample are in no sample yet.) Largest remainders keep
/// the sum exact.
fn calibrate(stacks: &mut [StackCount], exact: &HashMap<DropKey, u64>) {
    let mut groups: HashMap<&DropKey, Vec<usize>> = HashMap::new();
    for (i, s) in stacks.iter().enumerate() {
        groups.entry(&s.key).or_default().push(i);
    }
    let groups: Vec<(DropKey, Vec<usize>)> =
        groups.into_iter().map(|(k, v)| (k.clone(), v)).collect();
    for (key, members) in groups {
        let Some(&count) = exact.get(&key) else {
            continue;
        };
        let sampled: u128 = members.iter().map(|&i| u128::from(stacks[i].weight)).sum();
        if sampled == 0 {
            continue;
        }
        let mut given = 0u64;
        let mut rest: Vec<(u128, usize)> = Vec::with_capacity(members.len());
        for &i in &members {
            let share = u128::from(stacks[i].weight) * u128::from(count);
            let w = (share / sampled) as u64;
            stacks[i].weight = w;
            given += w;
            rest.push((share % sampled, i));
        }
        rest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i) in rest.into_iter().take((count - given.min(count)) as usize) {
            stacks[i].weight += 1;
        }
    }
}

/// Frames of the tracing machinery itself, not of the network stack.
fn is_probe_frame(name: &str) -> bool {
    [
        "bpf_prog_",
        "bpf_trace_run",
        "__bpf_trace_",
        "__traceiter_",
        "bpf_trampoline",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// CLOCK_MONOTONIC in milliseconds: the clock of `bpf_ktime_get_ns`.
fn monotonic_ms() -> u64 {
    // SAFETY: clock_gettime writes into the zeroed timespec we pass and nothing else.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn self_cpu_us() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass and nothing else.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

fn uname_field(f: impl Fn(&libc::utsname) -> &[libc::c_char; 65]) -> String {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated C strings.
    let u = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        libc::uname(&mut u);
        u
    };
    let bytes: Vec<u8> = f(&u)
        .iter()
        .take_while(|c| **c != 0)
        // c_char is i8 on x86_64 and u8 on aarch64: its byte either way.
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod calibrate_tests {
    use super::*;
    use crate::model::Reason;

    fn stack(code: u32, frame: &str, weight: u64) -> StackCount {
        StackCount {
            key: DropKey {
                reason: Reason {
                    code,
                    name: format!("R{code}").into(),
                },
                location: "f+0x1".into(),
                attr: Attribution::default(),
            },
            frames: vec![Arc::<str>::from(frame)].into(),
            weight,
            samples: 1,
        }
    }

    #[test]
    fn weights_add_up_to_the_exact_count_in_their_sampled_shares() {
        let mut s = vec![
            stack(3, "a", 600),
            stack(3, "b", 300),
            stack(3, "c", 1),
            stack(7, "x", 1),
        ];
        let exact = HashMap::from([(s[0].key.clone(), 2000), (s[3].key.clone(), 1)]);
        calibrate(&mut s, &exact);
        let w: Vec<u64> = s.iter().map(|s| s.weight).collect();
        assert_eq!(w[0] + w[1] + w[2], 2000);
        assert_eq!((w[0], w[1]), (1332, 666));
        assert_eq!(w[3], 1, "a single rare drop keeps its weight of one");
    }

    /// Two rows of one reason and location (two namespaces): each row's stacks add up to its
    /// own count, never to the other's.
    #[test]
    fn each_row_gets_its_own_count() {
        let mut s = vec![stack(3, "a", 500), stack(3, "b", 500), stack(3, "c", 2)];
        s[2].key.attr.netns = Some(4026532002);
        let exact = HashMap::from([(s[0].key.clone(), 1486), (s[2].key.clone(), 1)]);
        calibrate(&mut s, &exact);
        assert_eq!(s[0].weight + s[1].weight, 1486);
        assert_eq!(
            s[2].weight, 1,
            "a row of one drop shows one, not an estimate of another"
        );
    }

    #[test]
    fn a_key_without_an_exact_count_is_left_as_sampled() {
        let mut s = vec![stack(3, "a", 17)];
        calibrate(&mut s, &HashMap::new());
        assert_eq!(s[0].weight, 17);
    }
}
