//! Loading and attaching the compiled eBPF object (the `live` feature), and reading its maps.
use std::{os::fd::AsFd, path::Path};

use aya::{
    Btf, Ebpf, EbpfLoader, Endianness,
    maps::{Map, MapData, Queue, StackTraceMap},
    programs::{BtfTracePoint, TracePoint},
};
use dropscope_common::{
    Config, Control, CpuCounters, DropKey, PacketSample, SAMPLED_KEYS, SAMPLES_PER_KEY, StackKey,
    StackValue, globals, maps, programs, specialised,
};

use super::{
    btf,
    errors::{self, ProbeError},
    kfunc, layout,
    options::{ProbeChoice, ProbeKind, ProbeOptions, Totals},
    reasons::{self, ReasonTable},
    sys::{self, MmapArray, ProgStats},
    tracefs::{self, TracefsMount},
};

/// The compiled eBPF object.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dropscope"));

/// The compiled eBPF object this dropscope embeds: empty when it was built without the eBPF
/// toolchain (the probe then refuses to load, saying why).
pub fn embedded_object() -> &'static [u8] {
    EBPF_OBJECT
}

/// The loaded, attached probe. Dropping it detaches everything.
pub struct Probe {
    // Field order matters for Drop: mappings and map handles go before the object.
    counters: MmapArray<CpuCounters>,
    control: MmapArray<Control>,
    slot_counts: MmapArray<u64>,
    samples: MmapArray<PacketSample>,
    sample_owner: MmapArray<u64>,
    keys: MapData,
    stack_counts: MapData,
    stacks: StackTraceMap<MapData>,
    ebpf: Ebpf,
    kind: ProbeKind,
    /// The attached kfree_skb program's name.
    program: &'static str,
    reasons: ReasonTable,
    max_keys: u32,
    ncpus: usize,
    counts_self_syscalls: bool,
    _tracefs: Option<TracefsMount>,
}

impl Probe {
    /// Loads and attaches the probe. Needs root (or CAP_BPF and CAP_PERFMON).
    pub fn attach(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        if EBPF_OBJECT.is_empty() {
            return Err(ProbeError::Load(
                "this dropscope was built without its eBPF program (the eBPF toolchain was \
                 missing): run `cargo xtask setup`, then rebuild"
                    .into(),
            ));
        }
        errors::check_privileges()?;
        let ncpus = aya::util::nr_cpus().map_err(|(what, e)| ProbeError::Cpus(what, e))?;
        let KernelFacts {
            btf,
            reasons,
            mut config,
            rdonly_cast,
        } = KernelFacts::read(opts)?;
        let use_btf = btf.is_some() && opts.choice != ProbeChoice::Tracepoint;
        super::filter::encode(&opts.by, &opts.filter, &reasons, &mut config)
            .map_err(|e| ProbeError::Selection(format!("{e:#}")))?;
        config.stacks = u32::from(opts.stacks);
        let filtering = opts.filter.netns.is_some()
            || opts.filter.device.is_some()
            || opts.filter.protocol.is_some()
            || opts.filter.port.is_some();
        if btf.is_none() && (config.group != 0 || filtering) {
            return Err(ProbeError::Selection(
                "grouping or filtering by namespace, interface, protocol or port reads the \
                 kernel's structures, which needs kernel BTF; use --by reason,location and no \
                 filters other than --reason"
                    .into(),
            ));
        }
        let (tracefs, tp_offsets) = if use_btf {
            (None, (0, 0))
        } else {
            let (mount, offsets) = tracepoint_offsets(&mut config)?;
            (Some(mount), offsets)
        };
        let slot_entries = u32::try_from(ncpus)
            .ok()
            .and_then(|n| n.checked_mul(opts.max_keys))
            .filter(|_| opts.max_keys > 0)
            .ok_or_else(|| {
                ProbeError::Load(format!(
                    "--max-keys {} times {ncpus} CPUs is out of range",
                    opts.max_keys
                ))
            })?;
        let object = kfunc::patch(EBPF_OBJECT, rdonly_cast)
            .map_err(|e| ProbeError::Load(format!("{e:#}")))?
            .0;
        let mut ebpf = load(
            opts,
            &reasons,
            &config,
            object.bytes(),
            tp_offsets,
            ncpus,
            slot_entries,
        )?;
        let (kind, drop_program) =
            attach_drop_program(&mut ebpf, btf.as_ref(), use_btf, opts, config.need)?;
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

        #[cfg(feature = "bench")]
        let synthetic = opts.bench_keys.min(opts.max_keys);
        #[cfg(not(feature = "bench"))]
        let synthetic = 0;
        fill_free_slots(&mut ebpf, synthetic, opts.max_keys)?;
        let counters = mmap_map(&mut ebpf, maps::COUNTERS, ncpus)?;
        let control = mmap_map(&mut ebpf, maps::CONTROL, 1)?;
        let slot_counts = mmap_map(&mut ebpf, maps::SLOT_COUNTS, slot_entries as usize)?;
        let keys = take_data(&mut ebpf, maps::KEYS)?;
        let samples = mmap_map(
            &mut ebpf,
            maps::SAMPLES,
            (SAMPLED_KEYS * SAMPLES_PER_KEY) as usize,
        )?;
        let sample_owner = mmap_map(&mut ebpf, maps::SAMPLE_OWNER, SAMPLED_KEYS as usize)?;
        #[cfg(feature = "bench")]
        if synthetic > 0 {
            add_synthetic_keys(&keys, &counters, &slot_counts, synthetic, opts.max_keys)?;
        }
        let stack_counts = take_data(&mut ebpf, maps::STACK_COUNTS)?;
        let stacks = match ebpf.take_map(maps::STACKS) {
            Some(m) => StackTraceMap::try_from(m).map_err(|e| ProbeError::Load(e.to_string()))?,
            None => return Err(ProbeError::Load(format!("no map {}", maps::STACKS))),
        };
        Ok(Self {
            counters,
            control,
            slot_counts,
            samples,
            sample_owner,
            keys,
            stack_counts,
            stacks,
            ebpf,
            kind,
            program: drop_program,
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
                t.new_keys += c.new_keys;
                t
            },
        )
    }

    /// Number of CPUs the counters are kept for.
    pub fn ncpus(&self) -> usize {
        self.ncpus
    }

    /// Every key in the key map with its slot, in one batch syscall (only worth doing when
    /// [`Totals::new_keys`] grew).
    pub fn key_slots(&self) -> std::io::Result<Vec<(DropKey, u32)>> {
        sys::batch::<DropKey, u32>(self.keys.fd().as_fd(), self.max_keys as usize, None, false)
            .map(|entries| entries.into_iter().map(|(k, v)| (k, v[0])).collect())
    }

    /// The drops CPU `cpu` counted in slot `slot`, read through the mmap: no syscall.
    pub fn slot_count(&self, cpu: usize, slot: u32) -> u64 {
        let index = cpu * self.max_keys as usize + slot as usize;
        if index < self.slot_counts.len() {
            self.slot_counts.load_u64(index)
        } else {
            0
        }
    }

    /// The first `counted` (at most [`SAMPLES_PER_KEY`]) sampled packets of `slot` whose
    /// writing is finished (the program sets the time last).
    pub fn samples(&self, slot: u32, counted: u64) -> Vec<PacketSample> {
        if slot >= SAMPLED_KEYS {
            return Vec::new();
        }
        let n = counted.min(u64::from(SAMPLES_PER_KEY)) as u32;
        (0..n)
            .map(|i| self.samples.get((slot * SAMPLES_PER_KEY + i) as usize))
            .filter(|s| s.ts_ns != 0)
            .collect()
    }

    /// The CPU that samples `slot`'s packets, once the key has one.
    pub fn sample_owner(&self, slot: u32) -> Option<usize> {
        if slot >= SAMPLED_KEYS {
            return None;
        }
        match self.sample_owner.get(slot as usize) {
            0 => None,
            cpu => Some(cpu as usize - 1),
        }
    }

    /// Reads the cumulative stack weights, summed over CPUs; with `delete`, also removes them
    /// (only to start over when the maps fill: a sample landing during the removal is lost).
    pub fn read_stack_counts(&self, delete: bool) -> std::io::Result<Vec<(StackKey, StackValue)>> {
        let entries = sys::batch::<StackKey, StackValue>(
            self.stack_counts.fd().as_fd(),
            dropscope_common::STACK_COUNT_ENTRIES as usize,
            Some(self.ncpus),
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
        let prog = self.ebpf.program(self.program)?;
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
        Some(
            Map::PerCpuHashMap(data) | Map::Array(data) | Map::HashMap(data) | Map::Queue(data),
        ) => Ok(data),
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

/// Gives the program every slot of the slot-count array from `first` on, through its
/// free-slot queue.
fn fill_free_slots(ebpf: &mut Ebpf, first: u32, max_keys: u32) -> Result<(), ProbeError> {
    let data = take_data(ebpf, maps::FREE_SLOTS)?;
    let mut queue: Queue<MapData, u32> = Queue::try_from(Map::Queue(data))
        .map_err(|e| ProbeError::Load(format!("map {}: {e}", maps::FREE_SLOTS)))?;
    for slot in first..max_keys {
        queue
            .push(slot, 0)
            .map_err(|e| ProbeError::Load(format!("filling {}: {e}", maps::FREE_SLOTS)))?;
    }
    Ok(())
}

/// Benchmark only: keys `0..n` in slots `0..n`, each counted once on every CPU, as if real drops
/// had made them (totals included, so the invariant holds).
#[cfg(feature = "bench")]
fn add_synthetic_keys(
    keys: &MapData,
    counters: &MmapArray<CpuCounters>,
    slot_counts: &MmapArray<u64>,
    n: u32,
    max_keys: u32,
) -> Result<(), ProbeError> {
    let fd = keys.fd().as_fd();
    for slot in 0..n {
        let key = DropKey {
            location: 0xffff_ffff_0000_0000 | u64::from(slot),
            reason: 2,
            ..DropKey::default()
        };
        sys::update(fd, &key, &slot)
            .map_err(|e| ProbeError::Load(format!("adding synthetic keys: {e}")))?;
    }
    for cpu in 0..counters.len() {
        for slot in 0..n as usize {
            slot_counts.set(cpu * max_keys as usize + slot, 1);
        }
        let mut c = counters.get(cpu);
        c.total += u64::from(n);
        if cpu == 0 {
            c.new_keys += u64::from(n);
        }
        counters.set(cpu, c);
    }
    Ok(())
}

/// Whether the choice needs the typed hook (no fallback to the classic tracepoint).
fn btf_only(choice: ProbeChoice) -> bool {
    match choice {
        ProbeChoice::Btf => true,
        #[cfg(feature = "bench")]
        ProbeChoice::Floor => true,
        _ => false,
    }
}

/// What the probe needs to know of the kernel before loading: its BTF (parsed), drop reasons
/// and the struct offsets attribution reads (from the same BTF).
struct KernelFacts {
    btf: Option<Btf>,
    reasons: ReasonTable,
    config: Config,
    /// `bpf_rdonly_cast`'s BTF id, where the kernel has it (6.2+).
    rdonly_cast: Option<u32>,
}

impl KernelFacts {
    fn read(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        // Only the running kernel's own BTF may be absent (then the tracepoint format serves);
        // any other unreadable, empty or non-BTF file is an error, never ignored.
        let bytes = match btf::read(&opts.btf_path) {
            Ok(bytes) => Some(bytes),
            Err(e @ btf::BtfFileError::Missing(_))
                if !btf_only(opts.choice) && opts.btf_path == Path::new(btf::KERNEL_BTF) =>
            {
                tracing::info!("{e}; using the classic tracepoint");
                None
            }
            Err(e @ btf::BtfFileError::Missing(_)) if btf_only(opts.choice) => {
                return Err(ProbeError::NoBtf(opts.btf_path.clone(), e.to_string()));
            }
            Err(e) => return Err(ProbeError::BadBtf(e)),
        };
        let reasons = match &bytes {
            Some(bytes) => ReasonTable::from_btf_bytes(bytes),
            None => ReasonTable::from_running_kernel(),
        }
        .map_err(|e| match e.downcast::<reasons::NoDropReasons>() {
            Ok(_) => ProbeError::NoReasons(reasons::kernel_release()),
            Err(e) => ProbeError::Reasons(format!("{e:#}")),
        })?;
        let mut config = Config::default();
        let mut rdonly_cast = None;
        if let Some(bytes) = &bytes {
            let b =
                btf_rs::Btf::from_bytes(bytes).map_err(|e| ProbeError::Layout(format!("{e:#}")))?;
            layout::fill(&b, &mut config).map_err(|e| ProbeError::Layout(format!("{e:#}")))?;
            if let Some(t) = kfunc::HeaderTypes::find(&b).filter(|_| kfunc::jit_enabled()) {
                (config.btf_iphdr, config.btf_ipv6hdr, config.btf_udphdr) =
                    (t.iphdr, t.ipv6hdr, t.udphdr);
                rdonly_cast = Some(t.rdonly_cast);
            }
        }
        let btf = match bytes {
            Some(bytes) => Some(Btf::parse(&bytes, Endianness::default()).map_err(|e| {
                ProbeError::BadBtf(btf::BtfFileError::Corrupt(
                    opts.btf_path.clone(),
                    e.to_string(),
                ))
            })?),
            None => None,
        };
        Ok(Self {
            btf,
            reasons,
            config,
            rdonly_cast,
        })
    }
}

/// The classic tracepoint's field offsets (tracefs mounted if need be, and kept mounted for as
/// long as the probe lives): the skb's and the receiving socket's into `config`, and
/// (location, reason) returned.
fn tracepoint_offsets(config: &mut Config) -> Result<(TracefsMount, (u32, u32)), ProbeError> {
    let mount = TracefsMount::ensure().map_err(|e| ProbeError::Tracefs(format!("{e:#}")))?;
    let format = tracefs::kfree_skb_format().map_err(|e| ProbeError::Tracefs(format!("{e:#}")))?;
    let off = |f| {
        tracefs::field_offset(&format, f)
            .ok_or_else(|| ProbeError::Tracefs(format!("kfree_skb has no `{f}` field")))
    };
    config.tp_skb = off("skbaddr")?;
    config.tp_rx_sk = tracefs::field_offset(&format, "rx_sk").unwrap_or(0);
    Ok((mount, (off("location")?, off("reason")?)))
}

/// Loads the eBPF object with its read-only settings and map sizes.
fn load(
    opts: &ProbeOptions,
    reasons: &ReasonTable,
    config: &Config,
    object: &[u8],
    (loc_off, reason_off): (u32, u32),
    ncpus: usize,
    slot_entries: u32,
) -> Result<Ebpf, ProbeError> {
    let non_drop_below = reasons
        .non_drop_below()
        .map_err(|e| ProbeError::Reasons(format!("{e:#}")))?;
    let tgid = std::process::id();
    let socket_keys = dropscope_common::socket_keys_per_cpu(opts.max_keys, ncpus as u32);
    let mut loader = EbpfLoader::new();
    loader
        .override_global(globals::NON_DROP_BELOW, &non_drop_below, true)
        .override_global(globals::TP_LOCATION_OFFSET, &loc_off, true)
        .override_global(globals::TP_REASON_OFFSET, &reason_off, true)
        .override_global(globals::SELF_TGID, &tgid, true)
        .override_global(globals::MAX_KEYS, &opts.max_keys, true)
        .override_global(globals::SOCKET_KEYS_PER_CPU, &socket_keys, true)
        .override_global(globals::CONFIG, config, true)
        .map_max_entries(maps::KEYS, opts.max_keys)
        .map_max_entries(maps::FREE_SLOTS, opts.max_keys)
        .map_max_entries(maps::SLOT_COUNTS, slot_entries)
        .map_max_entries(maps::COUNTERS, ncpus as u32);
    #[cfg(feature = "bench")]
    let skip = opts.bench_skip.unwrap_or(0);
    #[cfg(feature = "bench")]
    loader.override_global(globals::BENCH_SKIP, &skip, true);
    loader
        .load(object)
        .map_err(|e| ProbeError::Load(format!("{e:#}")))
}

/// The typed program compiled for what a drop needs (`Config::need`), or the general one.
fn typed_program(need: u32) -> &'static str {
    match need {
        specialised::COUNT => programs::KFREE_SKB_COUNT,
        specialised::NETDEV => programs::KFREE_SKB_NETDEV,
        specialised::DEFAULT => programs::KFREE_SKB_DEFAULT,
        _ => programs::KFREE_SKB_BTF,
    }
}

/// Attaches the drop-counting program: the typed hook where BTF allows (the program compiled
/// for `need`, where there is one), else the classic tracepoint; and says which.
fn attach_drop_program(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    use_btf: bool,
    opts: &ProbeOptions,
    need: u32,
) -> Result<(ProbeKind, &'static str), ProbeError> {
    // Only a bench build has other choices here (the floor, the program with steps taken out).
    let _ = opts;
    Ok(match (btf, use_btf) {
        #[cfg(feature = "bench")]
        (Some(btf), true) if opts.choice == ProbeChoice::Floor => {
            let prog: &mut BtfTracePoint = program(ebpf, programs::KFREE_SKB_FLOOR)?;
            prog.load("kfree_skb", btf)
                .and_then(|()| prog.attach().map(drop))
                .map_err(|e| ProbeError::Attach("tp_btf/kfree_skb", format!("{e:#}")))?;
            (ProbeKind::Floor, programs::KFREE_SKB_FLOOR)
        }
        #[cfg(feature = "bench")]
        (Some(btf), true) if opts.bench_skip.is_some() => {
            let prog: &mut BtfTracePoint = program(ebpf, programs::KFREE_SKB_SKIP)?;
            prog.load("kfree_skb", btf)
                .and_then(|()| prog.attach().map(drop))
                .map_err(|e| ProbeError::Attach("tp_btf/kfree_skb", format!("{e:#}")))?;
            (ProbeKind::Skip, programs::KFREE_SKB_SKIP)
        }
        (Some(btf), true) => {
            let name = typed_program(need);
            let prog: &mut BtfTracePoint = program(ebpf, name)?;
            prog.load("kfree_skb", btf)
                .and_then(|()| prog.attach().map(drop))
                .map_err(|e| ProbeError::Attach("tp_btf/kfree_skb", format!("{e:#}")))?;
            (ProbeKind::TpBtf, name)
        }
        _ => {
            let prog: &mut TracePoint = program(ebpf, programs::KFREE_SKB_TP)?;
            prog.load()
                .and_then(|()| prog.attach("skb", "kfree_skb").map(drop))
                .map_err(|e| ProbeError::Attach("tracepoint/skb/kfree_skb", format!("{e:#}")))?;
            (ProbeKind::Tracepoint, programs::KFREE_SKB_TP)
        }
    })
}
