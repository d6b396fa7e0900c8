//! The collector: polls the probe's maps adaptively and turns them into [`Snapshot`]s.
//!
//! Each poll reads the mmap'd totals first (no syscall). Only when they changed does it read the
//! counts (mmap reads; one batch syscall only when keys were added) and the sampled stack
//! weights. While drops arrive it polls every half base interval; while idle it checks the
//! totals as often (no BPF syscall) and sends a snapshot once per base interval, so a drop after
//! an idle spell is on screen within one base interval. It never wakes per event.
mod attribution;
mod counts;
mod feed;
mod kernel_source;
mod session;
pub mod sockets;
mod stack_owner;
mod stacks;

pub use counts::{CountMaps, CountRead, CountReader};
pub use kernel_source::KernelSource;
pub use session::session_info;
use std::{
    collections::HashMap,
    os::fd::OwnedFd,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::mpsc;

use dropscope_common::{StackKey, StackValue};

use crate::{
    clock::unix_ms,
    kcounters,
    model::group::{self, Dim},
    model::{Attribution, DropCount, DropKey, Health, KeySamples, Sample, Snapshot, StackCount},
    names::Names,
    probe::{Probe, Totals},
    source::{Feed, KernelPace, Stopper},
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
    /// What the sockets of drops are, looked up beside the counting.
    sockets: sockets::Sockets,
    /// The names' generation the current keys were named in.
    names_generation: u64,
    /// The last name found of each namespace with drops (at most one per key), by cookie (by
    /// inode where the cookie is unknown).
    known_names: HashMap<u64, Arc<str>>,
    /// The cookie of the namespace that holds each inode now, as read in the names'
    /// generation given (`None`: it could not be read).
    holders: HashMap<u64, (u64, Option<u64>)>,
    /// The names the last kernel reading gave its namespaces, with the cookie each was read
    /// with: a namespace whose cookie and name have not changed keeps its name without a check
    /// of who holds its inode (one per namespace read, at each new names' generation, would
    /// otherwise be paid on the poll path).
    reading_named: HashMap<u64, (Option<u64>, Arc<str>)>,
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
    /// The session's stack weights and samples, by the kernel's key of their drop's row (the
    /// model's key is made afresh for each snapshot, so a name found later names them too).
    stacks: HashMap<(stack_owner::Owner, Frames), (u64, u64)>,
    stack_lost: u64,
    /// Per sampled slot: its packets read so far.
    sample_cache: HashMap<u32, Vec<Sample>>,
    stats_fd: Option<OwnedFd>,
    stats: Option<crate::probe::sys::ProgStats>,
    /// When the run statistics were last read.
    stats_read: Instant,
    /// This process's CPU time (µs) as last read, and when (`None`: never).
    self_cpu: u64,
    cpu_read: Option<Instant>,
    /// The kernel's counters, when a consumer wants them.
    kernel: Option<KernelSource>,
}

impl Collector {
    /// Wraps an attached probe. With `bpf_stats`, kernel run-time statistics are enabled for as
    /// long as the collector lives (through a file descriptor: nothing to restore by hand).
    pub fn new(probe: Probe, opts: CollectorOptions) -> Self {
        // The probe counts already: session time starts now, not after the symbolizer's
        // warm-up (which takes a few hundred ms), or every rate would read that much high.
        let started = Instant::now();
        let stats = opts
            .bpf_stats
            .then(|| aya::sys::enable_stats(aya::sys::Stats::RunTime).ok())
            .flatten();
        probe.set_stack_sampling(u64::from(opts.stacks), opts.stack_budget);
        let symbolizer = Symbolizer::new();
        symbolizer.warm_up();
        Self {
            interval: opts.interval,
            probe,
            symbolizer,
            names: Names::new(),
            sockets: Default::default(),
            names_generation: 0,
            known_names: HashMap::new(),
            holders: HashMap::new(),
            reading_named: HashMap::new(),
            opts,
            started,
            counts: CountReader::default(),
            last_totals: None,
            last_read: (started, 0),
            last: Snapshot::default(),
            stack_ids: HashMap::new(),
            stack_base: HashMap::new(),
            stacks: HashMap::new(),
            stack_lost: 0,
            sample_cache: HashMap::new(),
            stats_fd: stats,
            stats: None,
            stats_read: Instant::now(),
            self_cpu: 0,
            cpu_read: None,
            // Read by `spawn` (`opts.kernel_counters`), before it returns.
            kernel: None,
        }
    }

    /// One poll: reads the mmap'd totals and, only if they changed, the counts. Returns the
    /// new snapshot and whether any count changed. Adapts the interval.
    pub fn poll(&mut self) -> std::io::Result<(Snapshot, bool)> {
        // The kernel's counters are read before the maps: the snapshot then holds every drop
        // they counted (the same span or more), so a drop the probe saw never reads as unseen.
        let read_kernel = self.read_kernel_if_due();
        let programs = !read_kernel && self.refresh_programs_if_due(self.opts.interval);
        let totals = self.probe.totals();
        // Names are looked up beside the counting: when the lookups learnt some, the keys are
        // named again even if no count changed (a quiet namespace gets its name too).
        let names = self.names.generation() + self.sockets.generation();
        let counts_changed = self
            .last_totals
            .is_none_or(|t| t.drop_counts() != totals.drop_counts())
            || names != self.names_generation;
        // A new kernel reading alone needs no map read: totals that did not change mean counts
        // that did not either, so the snapshot still holds every drop the reading counted.
        if counts_changed {
            self.names_generation = names;
            self.read_maps()?;
        }
        self.program_samples();
        self.interval = self.opts.interval / 2;
        self.last.elapsed = self.started.elapsed();
        self.last.unix_ms = unix_ms();
        self.last.health = self.health(counts_changed);
        Ok((self.last.clone(), counts_changed || read_kernel || programs))
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
            self_cpu_us: {
                // getrusage at most once per base interval, as the run statistics.
                if self
                    .cpu_read
                    .is_none_or(|t| t.elapsed() >= self.opts.interval)
                {
                    self.self_cpu = self_cpu_us();
                    self.cpu_read = Some(Instant::now());
                }
                self.self_cpu
            },
            poll_interval_ms: self.interval.as_millis() as u64,
        }
    }

    /// Keys in the kernel's key map (each takes one slot of its capacity).
    fn counts_keys(&self) -> u64 {
        self.last_totals.map_or(0, |t| t.new_keys)
    }
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
