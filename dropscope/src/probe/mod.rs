//! The eBPF probe: loads the program, attaches it to `kfree_skb`, and reads its maps.
//!
//! Attaching prefers the BTF-typed `tp_btf/kfree_skb`; the classic tracepoint is the fallback.
//! Everything is detached when the [`Probe`] is dropped (and by the kernel if the process dies).
pub mod btf;
pub mod errors;
pub mod reasons;
pub mod sys;
pub mod tracefs;

use std::{
    os::fd::AsFd,
    path::{Path, PathBuf},
};

use aya::{
    Btf, Ebpf, EbpfLoader, Endianness,
    maps::{Map, MapData, StackTraceMap},
    programs::{BtfTracePoint, TracePoint},
};
use dropscope_common::{
    Control, CpuCounters, DropKey, StackKey, StackValue, globals, maps, programs,
};

pub use errors::ProbeError;
use reasons::ReasonTable;
use sys::{MmapArray, ProgStats};
use tracefs::TracefsMount;

/// The compiled eBPF object.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dropscope"));

/// Which hook to attach to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeChoice {
    /// `tp_btf/kfree_skb`, falling back to the classic tracepoint.
    #[default]
    Auto,
    /// Only `tp_btf/kfree_skb` (needs kernel BTF).
    Btf,
    /// Only the classic `skb:kfree_skb` tracepoint (needs tracefs; mounted if absent).
    Tracepoint,
}

/// The hook in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// BTF-typed raw tracepoint.
    TpBtf,
    /// Classic tracepoint.
    Tracepoint,
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProbeKind::TpBtf => "tp_btf/kfree_skb",
            ProbeKind::Tracepoint => "tracepoint/skb/kfree_skb",
        })
    }
}

/// How to load the probe.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Hook choice.
    pub choice: ProbeChoice,
    /// Capacity of the keyed (reason, location) map.
    pub max_keys: u32,
    /// Kernel BTF file.
    pub btf_path: PathBuf,
    /// Also count dropscope's own syscalls (a `sys_enter` program filtered to this process).
    pub count_self_syscalls: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            choice: ProbeChoice::Auto,
            max_keys: dropscope_common::DEFAULT_MAX_KEYS,
            btf_path: PathBuf::from("/sys/kernel/btf/vmlinux"),
            count_self_syscalls: false,
        }
    }
}

/// Sum of the per-CPU counters: read through mmap, no syscall.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Every drop seen.
    pub total: u64,
    /// Drops that did not fit in the keyed map.
    pub overflow: u64,
    /// Stack samples captured.
    pub stack_samples: u64,
    /// Stack captures that failed.
    pub stack_errors: u64,
    /// Stack samples that did not fit in the stack-count map.
    pub stack_overflow: u64,
    /// dropscope's own syscalls (if counted).
    pub self_syscalls: u64,
    /// Times a CPU moved its pending run into the keyed map.
    pub flushes: u64,
}

impl Totals {
    /// The drop-related counters only (not dropscope's own syscall count), to detect change.
    pub fn drop_counts(&self) -> [u64; 5] {
        [
            self.total,
            self.overflow,
            self.stack_samples,
            self.stack_errors,
            self.stack_overflow,
        ]
    }
}

/// The loaded, attached probe. Dropping it detaches everything.
pub struct Probe {
    // Field order matters for Drop: mappings and map handles go before the object.
    counters: MmapArray<CpuCounters>,
    control: MmapArray<Control>,
    drops: MapData,
    stack_counts: MapData,
    stacks: StackTraceMap<MapData>,
    ebpf: Ebpf,
    kind: ProbeKind,
    reasons: ReasonTable,
    max_keys: u32,
    ncpus: usize,
    counts_self_syscalls: bool,
    _tracefs: Option<TracefsMount>,
}

impl Probe {
    /// Loads and attaches the probe. Needs root (or CAP_BPF and CAP_PERFMON).
    pub fn attach(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        errors::check_privileges()?;
        let ncpus = aya::util::nr_cpus().map_err(|(what, e)| ProbeError::Cpus(what, e))?;
        // Only the running kernel's own BTF may be absent (then the tracepoint format serves);
        // any other unreadable, empty or non-BTF file is an error, never ignored.
        let btf = match btf::read(&opts.btf_path) {
            Ok(bytes) => Some(bytes),
            Err(e @ btf::BtfFileError::Missing(_))
                if opts.choice != ProbeChoice::Btf
                    && opts.btf_path == Path::new(btf::KERNEL_BTF) =>
            {
                tracing::info!("{e}; using the classic tracepoint");
                None
            }
            Err(e @ btf::BtfFileError::Missing(_)) if opts.choice == ProbeChoice::Btf => {
                return Err(ProbeError::NoBtf(opts.btf_path.clone(), e.to_string()));
            }
            Err(e) => return Err(ProbeError::BadBtf(e)),
        };
        let reasons = match &btf {
            Some(bytes) => ReasonTable::from_btf_bytes(bytes),
            None => ReasonTable::from_running_kernel(),
        }
        .map_err(|e| match e.downcast::<reasons::NoDropReasons>() {
            Ok(_) => ProbeError::NoReasons(reasons::kernel_release()),
            Err(e) => ProbeError::Reasons(format!("{e:#}")),
        })?;
        let btf = match btf {
            Some(bytes) => Some(Btf::parse(&bytes, Endianness::default()).map_err(|e| {
                ProbeError::BadBtf(btf::BtfFileError::Corrupt(
                    opts.btf_path.clone(),
                    e.to_string(),
                ))
            })?),
            None => None,
        };
        let use_btf = btf.is_some() && opts.choice != ProbeChoice::Tracepoint;
        let (not_dropped, consumed) = reasons
            .non_drop_values()
            .map_err(|e| ProbeError::Reasons(format!("{e:#}")))?;

        let mut tracefs = None;
        let (loc_off, reason_off) = if use_btf {
            (0u32, 0u32)
        } else {
            let mount =
                TracefsMount::ensure().map_err(|e| ProbeError::Tracefs(format!("{e:#}")))?;
            tracefs = Some(mount);
            let format =
                tracefs::kfree_skb_format().map_err(|e| ProbeError::Tracefs(format!("{e:#}")))?;
            let off = |f| {
                tracefs::field_offset(&format, f)
                    .ok_or_else(|| ProbeError::Tracefs(format!("kfree_skb has no `{f}` field")))
            };
            (off("location")?, off("reason")?)
        };
        let tgid = std::process::id();

        let mut ebpf = EbpfLoader::new()
            .override_global(globals::NOT_DROPPED_YET, &not_dropped, true)
            .override_global(globals::CONSUMED, &consumed, true)
            .override_global(globals::TP_LOCATION_OFFSET, &loc_off, true)
            .override_global(globals::TP_REASON_OFFSET, &reason_off, true)
            .override_global(globals::SELF_TGID, &tgid, true)
            .map_max_entries(maps::DROPS, opts.max_keys)
            .map_max_entries(maps::COUNTERS, ncpus as u32)
            .load(EBPF_OBJECT)
            .map_err(|e| ProbeError::Load(format!("{e:#}")))?;

        let kind = match (&btf, use_btf) {
            (Some(btf), true) => {
                let prog: &mut BtfTracePoint = program(&mut ebpf, programs::KFREE_SKB_BTF)?;
                prog.load("kfree_skb", btf)
                    .and_then(|()| prog.attach().map(drop))
                    .map_err(|e| ProbeError::Attach("tp_btf/kfree_skb", format!("{e:#}")))?;
                ProbeKind::TpBtf
            }
            _ => {
                let prog: &mut TracePoint = program(&mut ebpf, programs::KFREE_SKB_TP)?;
                prog.load()
                    .and_then(|()| prog.attach("skb", "kfree_skb").map(drop))
                    .map_err(|e| {
                        ProbeError::Attach("tracepoint/skb/kfree_skb", format!("{e:#}"))
                    })?;
                ProbeKind::Tracepoint
            }
        };
        let counts_self_syscalls = match (&btf, opts.count_self_syscalls) {
            (Some(btf), true) => {
                let prog: &mut BtfTracePoint = program(&mut ebpf, programs::SYS_ENTER)?;
                prog.load("sys_enter", btf)
                    .and_then(|()| prog.attach().map(drop))
                    .map_err(|e| ProbeError::Attach("tp_btf/sys_enter", format!("{e:#}")))?;
                true
            }
            _ => false,
        };

        let counters = mmap_map(&mut ebpf, maps::COUNTERS, ncpus)?;
        let control = mmap_map(&mut ebpf, maps::CONTROL, 1)?;
        let drops = take_data(&mut ebpf, maps::DROPS)?;
        let stack_counts = take_data(&mut ebpf, maps::STACK_COUNTS)?;
        let stacks = match ebpf.take_map(maps::STACKS) {
            Some(m) => StackTraceMap::try_from(m).map_err(|e| ProbeError::Load(e.to_string()))?,
            None => return Err(ProbeError::Load(format!("no map {}", maps::STACKS))),
        };
        Ok(Self {
            counters,
            control,
            drops,
            stack_counts,
            stacks,
            ebpf,
            kind,
            reasons,
            max_keys: opts.max_keys,
            ncpus,
            counts_self_syscalls,
            _tracefs: tracefs,
        })
    }

    /// The hook in use.
    pub fn kind(&self) -> ProbeKind {
        self.kind
    }

    /// The running kernel's reason table.
    pub fn reasons(&self) -> &ReasonTable {
        &self.reasons
    }

    /// Capacity of the keyed map.
    pub fn max_keys(&self) -> u32 {
        self.max_keys
    }

    /// Whether dropscope's own syscalls are being counted.
    pub fn counts_self_syscalls(&self) -> bool {
        self.counts_self_syscalls
    }

    /// Sums the per-CPU counters through the mmap: no syscall.
    pub fn totals(&self) -> Totals {
        (0..self.counters.len()).map(|i| self.counters.get(i)).fold(
            Totals::default(),
            |mut t, c| {
                t.total += c.total;
                t.overflow += c.overflow;
                t.stack_samples += c.stack_samples;
                t.stack_errors += c.stack_errors;
                t.stack_overflow += c.stack_overflow;
                t.self_syscalls += c.self_syscalls;
                t.flushes += c.flushes;
                t
            },
        )
    }

    /// The drops each CPU counted for its last key but has not yet added to the keyed map
    /// (read through the mmap: no syscall). They belong to that key's exact count.
    pub fn pending(&self) -> Vec<(DropKey, u64)> {
        (0..self.counters.len())
            .map(|i| self.counters.get(i))
            .filter(|c| c.cached_valid == 1 && c.pending > 0)
            .map(|c| (c.cached, c.pending))
            .collect()
    }

    /// Reads every (reason, location) count in the keyed map, summed over CPUs, in one batch
    /// syscall (without the CPUs' [`pending`](Self::pending) runs).
    pub fn read_drops(&self) -> std::io::Result<Vec<(DropKey, u64)>> {
        let entries = sys::per_cpu_batch::<DropKey, u64>(
            self.drops.fd().as_fd(),
            self.max_keys as usize,
            self.ncpus,
            false,
        )?;
        Ok(entries
            .into_iter()
            .map(|(k, v)| (k, v.iter().sum()))
            .collect())
    }

    /// Reads the cumulative stack weights, summed over CPUs; with `delete`, also removes them
    /// (only to start over when the maps fill: a sample landing during the removal is lost).
    pub fn read_stack_counts(&self, delete: bool) -> std::io::Result<Vec<(StackKey, StackValue)>> {
        let entries = sys::per_cpu_batch::<StackKey, StackValue>(
            self.stack_counts.fd().as_fd(),
            dropscope_common::STACK_COUNT_ENTRIES as usize,
            self.ncpus,
            delete,
        )?;
        let summed = entries
            .into_iter()
            .map(|(k, v)| {
                let sum = v.iter().fold(StackValue::default(), |a, b| StackValue {
                    weight: a.weight + b.weight,
                    samples: a.samples + b.samples,
                });
                (k, sum)
            })
            .filter(|(_, v)| v.samples > 0)
            .collect();
        Ok(summed)
    }

    /// The kernel addresses of a captured stack, innermost first; None once it was removed.
    pub fn stack_frames(&self, stack_id: u32) -> Option<Vec<u64>> {
        let trace = self.stacks.get(&stack_id, 0).ok()?;
        Some(trace.frames().iter().map(|f| f.ip).collect())
    }

    /// Removes a stack from the kernel's stack map (after its frames were copied out).
    pub fn forget_stack(&mut self, stack_id: u32) {
        let _ = self.stacks.remove(&stack_id);
    }

    /// Turns stack sampling on (period ≥ 1: one sample per `period` drops per CPU, and no more
    /// than `budget` periodic samples per second in all) or off (period 0).
    pub fn set_stack_sampling(&self, period: u64, budget: u64) {
        self.control.set(
            0,
            Control {
                stacks_enabled: u64::from(period > 0),
                sample_period: period.max(1),
                min_gap_ns: 1_000_000_000 * self.ncpus as u64 / budget.max(1),
            },
        );
    }

    /// Run statistics of the attached kfree_skb program (one syscall).
    pub fn prog_stats(&self) -> Option<ProgStats> {
        let name = match self.kind {
            ProbeKind::TpBtf => programs::KFREE_SKB_BTF,
            ProbeKind::Tracepoint => programs::KFREE_SKB_TP,
        };
        let prog = self.ebpf.program(name)?;
        let fd = prog.fd().ok()?;
        sys::prog_stats(fd.as_fd()).ok()
    }
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, ProbeError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program>,
{
    let prog = ebpf
        .program_mut(name)
        .ok_or_else(|| ProbeError::Load(format!("no program {name} in the eBPF object")))?;
    prog.try_into()
        .map_err(|_| ProbeError::Load(format!("program {name} has an unexpected type")))
}

fn take_data(ebpf: &mut Ebpf, name: &str) -> Result<MapData, ProbeError> {
    match ebpf.take_map(name) {
        Some(Map::PerCpuHashMap(data) | Map::Array(data) | Map::HashMap(data)) => Ok(data),
        Some(_) => Err(ProbeError::Load(format!(
            "map {name} has an unexpected type"
        ))),
        None => Err(ProbeError::Load(format!(
            "no map {name} in the eBPF object"
        ))),
    }
}

fn mmap_map<T: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &str,
    len: usize,
) -> Result<MmapArray<T>, ProbeError> {
    let data = take_data(ebpf, name)?;
    let m = MmapArray::new(data.fd().as_fd(), len)
        .map_err(|e| ProbeError::Load(format!("mmap of map {name}: {e}")))?;
    // The mapping keeps the map alive on its own; the handle can go.
    drop(data);
    Ok(m)
}
