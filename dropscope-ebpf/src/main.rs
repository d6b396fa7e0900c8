//! The dropscope eBPF program: counts every kernel packet drop in maps, never streams events.
//!
//! Per drop: one increment of this CPU's own counter for the drop's key (its slot in an mmap'd
//! array), then of this CPU's total. A key gets its slot once, through a hash lookup; a run of
//! drops of one key on one CPU skips even that. Only on a key's first drop, or once every
//! `sample_period` drops (and no more often than `min_gap_ns`), is a kernel stack captured,
//! weighted by the drops it stands for. See docs/counting-protocol.md.
#![no_std]
#![no_main]

/// One field of the load-time [`Config`], read on its own (one load: the verifier sees the
/// constant). Copying the whole struct per drop would cost a hundred-odd bytes of stack traffic.
macro_rules! setting {
    ($field:ident) => {{
        // SAFETY: CONFIG is a `Global<Config>` (transparent over the value) in the read-only
        // data the loader filled in; a volatile read keeps the compiler from folding it.
        #[allow(unused_unsafe)]
        let value = unsafe {
            core::ptr::read_volatile(core::ptr::addr_of!(
                (*core::ptr::addr_of!(crate::CONFIG).cast::<dropscope_common::Config>()).$field
            ))
        };
        value
    }};
}

/// Whether the bench build's skip program takes `$step` (a bit of `dropscope_common::skip`) out
/// of the per-drop path: `$bench` is the program's const parameter, so the real program (false)
/// has no trace of it. The setting is read-only, so the verifier removes the dead side.
macro_rules! taken_out {
    ($bench:ident, $step:ident) => {{
        #[cfg(feature = "bench")]
        let out = $bench && crate::BENCH_SKIP.load() & dropscope_common::skip::$step != 0;
        #[cfg(not(feature = "bench"))]
        let out = $bench && false;
        out
    }};
}

mod attribute;

use core::sync::atomic::{Ordering, compiler_fence};

use attribute::{Mem, Probed, Typed};
use aya_ebpf::{
    Global,
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns, generated},
    macros::{btf_tracepoint, map, tracepoint},
    maps::{Array, HashMap, PerCpuHashMap, Queue, StackTrace},
    programs::{BtfTracePointContext, TracePointContext, tracing::StackIdContext},
};
use dropscope_common::{
    BPF_F_MMAPABLE, Config, Control, CpuCounters, DEFAULT_MAX_KEYS, DropKey, MAX_CPUS, NO_SLOT,
    PacketSample, REASON_WORDS, ReasonWords, SAMPLE_BYTES, SAMPLED_KEYS, SAMPLES_PER_KEY,
    SOCK_INO_OVER, STACK_COUNT_ENTRIES, STACK_TRACE_ENTRIES, SkbLayout, StackKey, StackValue,
    filter, group, need, reason_bit, sample_caplen,
};

#[unsafe(no_mangle)]
static NON_DROP_BELOW: Global<u32> = Global::new(2);
#[unsafe(no_mangle)]
static TP_LOCATION_OFFSET: Global<u32> = Global::new(16);
#[unsafe(no_mangle)]
static TP_REASON_OFFSET: Global<u32> = Global::new(36);
#[unsafe(no_mangle)]
static SELF_TGID: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static MAX_KEYS: Global<u32> = Global::new(DEFAULT_MAX_KEYS);
#[unsafe(no_mangle)]
static SOCKET_KEYS_PER_CPU: Global<u32> = Global::new(8);
#[cfg(feature = "bench")]
#[unsafe(no_mangle)]
static BENCH_SKIP: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static CONFIG: Global<Config> = Global::new(Config {
    skb_dev: 0,
    skb_sk: 0,
    skb_iif: 0,
    skb_protocol: 0,
    skb_head: 0,
    skb_network_header: 0,
    skb_transport_header: 0,
    skb_len: 0,
    dev_ifindex: 0,
    dev_name: 0,
    dev_net: 0,
    sk_net: 0,
    net_inum: 0,
    net_cookie: 0,
    pad: 0,
    has_rx_sk: 0,
    tp_skb: 0,
    tp_rx_sk: 0,
    group: 0,
    filter_netns: 0,
    filter_l4: 0,
    filter_port: 0,
    filter_reasons: 0,
    filter_dev_on: 0,
    filter_dev: [0; 16],
    skb_data: 0,
    skb_data_len: 0,
    skb_tail: 0,
    need: 0,
    btf_iphdr: 0,
    btf_ipv6hdr: 0,
    btf_udphdr: 0,
    stacks: 0,
    sk_state: 0,
    sk_socket: 0,
    socket_file: 0,
    file_inode: 0,
    inode_ino: 0,
    pad2: 0,
    filter_reason_words: ReasonWords::EMPTY,
});

#[map]
static KEYS: HashMap<DropKey, u32> = HashMap::with_max_entries(DEFAULT_MAX_KEYS, 0);
#[map]
static FREE_SLOTS: Queue<u32> = Queue::with_max_entries(DEFAULT_MAX_KEYS, 0);
#[map]
static SLOT_COUNTS: Array<u64> = Array::with_max_entries(DEFAULT_MAX_KEYS, BPF_F_MMAPABLE);
#[map]
static COUNTERS: Array<CpuCounters> = Array::with_max_entries(MAX_CPUS, BPF_F_MMAPABLE);
#[map]
static CONTROL: Array<Control> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static SAMPLES: Array<PacketSample> =
    Array::with_max_entries(SAMPLED_KEYS * SAMPLES_PER_KEY, BPF_F_MMAPABLE);
#[map]
static SAMPLE_OWNER: Array<u64> = Array::with_max_entries(SAMPLED_KEYS, BPF_F_MMAPABLE);
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(STACK_TRACE_ENTRIES, 0);
#[map]
static STACK_COUNTS: PerCpuHashMap<StackKey, StackValue> =
    PerCpuHashMap::with_max_entries(STACK_COUNT_ENTRIES, 0);

/// `tp_btf/kfree_skb(skb, location, reason[, rx_sk])`: typed arguments, no tracefs.
#[btf_tracepoint(function = "kfree_skb")]
pub fn kfree_skb_btf(ctx: BtfTracePointContext) -> i32 {
    typed::<false, ANY_NEED>(ctx)
}

/// `tp_btf/kfree_skb` compiled for counting by reason and location alone, with no filter (the
/// loader attaches it for that configuration): what the general program reads from the `need`
/// setting is a constant here, so the compiler leaves out the attribution and filter code and
/// the registers it keeps live.
#[btf_tracepoint(function = "kfree_skb")]
pub fn kfree_skb_count(ctx: BtfTracePointContext) -> i32 {
    typed::<false, { dropscope_common::specialised::COUNT }>(ctx)
}

/// As [`kfree_skb_count`], for the namespace and interface.
#[btf_tracepoint(function = "kfree_skb")]
pub fn kfree_skb_dev(ctx: BtfTracePointContext) -> i32 {
    typed::<false, { dropscope_common::specialised::NETDEV }>(ctx)
}

/// As [`kfree_skb_count`], for the default grouping: namespace, interface and protocol.
#[btf_tracepoint(function = "kfree_skb")]
pub fn kfree_skb_dfl(ctx: BtfTracePointContext) -> i32 {
    typed::<false, { dropscope_common::specialised::DEFAULT }>(ctx)
}

/// `tp_btf/kfree_skb` of the bench build whose steps `BENCH_SKIP` takes out (`--bench-skip`).
#[cfg(feature = "bench")]
#[btf_tracepoint(function = "kfree_skb")]
pub fn kfree_skb_skip(ctx: BtfTracePointContext) -> i32 {
    typed::<true, ANY_NEED>(ctx)
}

/// `NEED` of the general program: what a drop needs is read from the `need` setting.
const ANY_NEED: u32 = u32::MAX;

#[inline(always)]
fn typed<const BENCH: bool, const NEED: u32>(ctx: BtfTracePointContext) -> i32 {
    let skb: *const u8 = ctx.arg(0);
    let location: u64 = ctx.arg(1);
    let reason: u32 = ctx.arg(2);
    // `rx_sk` exists from 6.11 on; reading a fourth argument on an older kernel is rejected by
    // the verifier, so the branch must be dead there (the loader sets `has_rx_sk`).
    let rx_sk: *const u8 = if setting!(has_rx_sk) == 1 {
        ctx.arg(3)
    } else {
        core::ptr::null()
    };
    count_drop::<BENCH, NEED, _, _>(&ctx, &Typed, reason, location, skb, rx_sk);
    0
}

/// `tp_btf/kfree_skb` that does nothing: the floor the benchmark measures the cost of counting
/// against (`--probe floor`, hidden).
#[btf_tracepoint(function = "kfree_skb")]
pub fn kfree_skb_floor(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// Classic `tracepoint/skb/kfree_skb`, with field offsets read from tracefs at load time.
#[tracepoint(category = "skb", name = "kfree_skb")]
pub fn kfree_skb_tp(ctx: TracePointContext) -> u32 {
    // SAFETY: the offsets come from this kernel's tracepoint format file; read_at goes through
    // bpf_probe_read_kernel, which fails cleanly on a bad address.
    // SAFETY: as above.
    let fields = unsafe {
        (
            ctx.read_at::<u64>(TP_LOCATION_OFFSET.load() as usize),
            ctx.read_at::<u32>(TP_REASON_OFFSET.load() as usize),
            ctx.read_at::<u64>(setting!(tp_skb) as usize),
        )
    };
    let rx_sk = if setting!(tp_rx_sk) != 0 {
        // SAFETY: as above.
        unsafe { ctx.read_at::<u64>(setting!(tp_rx_sk) as usize) }.unwrap_or(0)
    } else {
        0
    };
    if let (Ok(location), Ok(reason), Ok(skb)) = fields {
        count_drop::<false, ANY_NEED, _, _>(
            &ctx,
            &Probed,
            reason,
            location,
            skb as *const u8,
            rx_sk as *const u8,
        );
    }
    0
}

/// `tp_btf/sys_enter`: counts the syscalls of dropscope itself, for its cost display.
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(_ctx: BtfTracePointContext) -> i32 {
    if (bpf_get_current_pid_tgid() >> 32) as u32 == SELF_TGID.load()
        && let Some(c) = this_cpu()
    {
        // SAFETY: the slot belongs to this CPU and the kernel runs one instance of this program
        // per CPU at a time (nested runs are skipped and counted as misses).
        unsafe { (*c).self_syscalls += 1 };
    }
    0
}

#[inline(always)]
fn this_cpu() -> Option<*mut CpuCounters> {
    // SAFETY: bpf_get_smp_processor_id has no preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    COUNTERS.get_ptr_mut(cpu)
}

/// Whether the reason filter lets `reason` be counted: one bit test.
#[inline(always)]
fn reason_wanted<const BENCH: bool>(reason: u32) -> bool {
    let mode = setting!(filter_reasons);
    let listed = match reason_bit(reason) {
        Some(_) if taken_out!(BENCH, REASON_LOOKUP) => false,
        Some(bit) => {
            // One load from the read-only settings. The index goes through the stack so that
            // the compiler cannot fold the mask away (it knows `bit` is below 4,096; 6.1's
            // and 6.12's verifiers lose that bound), and the verifier sees it in the bitmap.
            let word = (bit / 64) as usize;
            // SAFETY: a volatile read of a local that is initialised.
            let word = unsafe { core::ptr::read_volatile(&word) } & (REASON_WORDS - 1);
            // SAFETY: CONFIG is a `Global<Config>` (transparent over the value) in the
            // read-only data; `word` is below REASON_WORDS, so the read is in the bitmap.
            let w = unsafe {
                core::ptr::read_volatile(
                    core::ptr::addr_of!(
                        (*core::ptr::addr_of!(CONFIG).cast::<dropscope_common::Config>())
                            .filter_reason_words
                    )
                    .cast::<u64>()
                    .add(word),
                )
            };
            w & (1 << (bit % 64)) != 0
        }
        None => false,
    };
    listed == (mode == filter::REASONS_ONLY)
}

#[inline(always)]
fn count_drop<const BENCH: bool, const NEED: u32, C: StackIdContext, M: Mem>(
    ctx: &C,
    m: &M,
    reason: u32,
    location: u64,
    skb: *const u8,
    rx_sk: *const u8,
) {
    // Not a drop (`NOT_DROPPED_YET`, `CONSUMED`): one compare, the non-drop values being the
    // enum's first.
    if !taken_out!(BENCH, NON_DROP) && reason < NON_DROP_BELOW.load() {
        return;
    }
    // One word says what this drop needs beyond counting: the common case tests it and goes on.
    let needs = if NEED == ANY_NEED {
        setting!(need)
    } else {
        NEED
    };
    if needs & need::REASONS != 0 && !reason_wanted::<BENCH>(reason) {
        return;
    }
    let p = if taken_out!(BENCH, ATTRIBUTION) {
        attribute::Packet::default()
    } else if taken_out!(BENCH, SOCKET) {
        attribute::packet(m, needs & !need::SOCKET, skb, rx_sk)
    } else {
        attribute::packet(m, needs, skb, rx_sk)
    };
    // Filters: a drop filtered out is not counted anywhere.
    if needs & need::FILTER != 0 {
        let (netns, l4, port) = (
            setting!(filter_netns),
            setting!(filter_l4),
            setting!(filter_port),
        );
        if (netns != 0 && p.netns != netns)
            || (l4 != 0 && u32::from(p.l4proto) + 1 != l4)
            || (port != 0 && u32::from(p.dport) != port)
            || (setting!(filter_dev_on) == 1
                && !attribute::device_named(p.dev, &setting!(filter_dev)))
        {
            return;
        }
    }
    // SAFETY: bpf_get_smp_processor_id has no preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let Some(c) = COUNTERS.get_ptr_mut(cpu) else {
        return;
    };
    // SAFETY: `c` is this CPU's slot and the kernel runs one instance of this program per CPU
    // at a time (a nested run is skipped and counted as a miss), so nothing else writes it.
    let c = unsafe { &mut *c };
    // Runs of drops of one key on one CPU (the flood case), or of two keys taking turns, reuse
    // the slots found for their first drops: no hash lookup. The newer of the two is tested
    // first; they never trade places (a copy each time would cost more than the compare).
    let hit = if taken_out!(BENCH, KEY) {
        (c.cached_valid == 1).then_some(c.cached_slot)
    } else {
        let words = drop_key(needs, location, reason, &p).words();
        // SAFETY: `c.cached` is a DropKey in this CPU's counters.
        let newer = || unsafe { DropKey::stored_equals(&c.cached, &words) };
        // SAFETY: as above, `c.older`.
        let older = || unsafe { DropKey::stored_equals(&c.older, &words) };
        if c.cached_valid == 1 && (taken_out!(BENCH, COMPARE) || newer()) {
            Some(c.cached_slot)
        } else if c.older_valid == 1 && older() {
            Some(c.older_slot)
        } else {
            None
        }
    };
    let (slot, first) = if let Some(slot) = hit {
        (slot, false)
    } else {
        let mut key = drop_key(needs, location, reason, &p);
        // A socket not keyed yet, once this CPU has keyed its share of sockets: counted with
        // the others beyond it (a second look-up, only on this path).
        if key.sock_ino != 0 && c.socket_keys >= u64::from(SOCKET_KEYS_PER_CPU.load()) {
            // SAFETY: the value is a plain u32, not kept.
            if unsafe { KEYS.get(key) }.is_none() {
                key.sock_ino = SOCK_INO_OVER;
            }
        }
        match slot_of(c, &key) {
            Some(found) => {
                if found.1 && key.sock_ino != 0 && key.sock_ino != SOCK_INO_OVER {
                    c.socket_keys += 1;
                }
                copy_key(&mut c.older, &c.cached);
                c.older_slot = c.cached_slot;
                c.older_valid = c.cached_valid;
                copy_key(&mut c.cached, &key);
                c.cached_slot = found.0;
                c.cached_valid = 1;
                found
            }
            None => {
                c.overflow += 1;
                compiler_fence(Ordering::SeqCst);
                c.total += 1;
                sample_stack(ctx, c, reason, location, NO_SLOT, false);
                return;
            }
        }
    };
    let index = cpu.wrapping_mul(MAX_KEYS.load()).wrapping_add(slot);
    let n = match SLOT_COUNTS.get_ptr_mut(index) {
        // Taken out, no packet is sampled either.
        _ if taken_out!(BENCH, SLOT) => u64::MAX,
        // SAFETY: this CPU's counters (index `cpu * MAX_KEYS + slot`) are written only by this
        // CPU, one program run at a time (see above).
        Some(n) => unsafe {
            if !taken_out!(BENCH, INCREMENTS) {
                *n += 1;
            }
            *n
        },
        // Cannot happen (slots < MAX_KEYS, CPUs < the array's CPU count); counted if it did.
        None => {
            c.overflow += 1;
            0
        }
    };
    if !taken_out!(BENCH, PACKET_SAMPLE)
        && slot < SAMPLED_KEYS
        && n <= u64::from(SAMPLES_PER_KEY)
        && n > 0
    {
        sample_packet(m, skb, cpu, slot, first, n as u32 - 1);
    }
    // The total goes last: a reader that sees it (on this CPU's program order) also sees the
    // keyed or overflow count it stands for.
    compiler_fence(Ordering::SeqCst);
    if !taken_out!(BENCH, INCREMENTS) {
        c.total += 1;
    }
    if !taken_out!(BENCH, SAMPLING) {
        sample_stack(ctx, c, reason, location, slot, first);
    }
}

/// `*dst = *src`, word by word: LLVM's BPF back end fails to expand a 40-byte struct copy
/// (the memcpy it makes of one), so the key's five words are copied as five loads and stores.
#[inline(always)]
fn copy_key(dst: &mut DropKey, src: &DropKey) {
    let (d, s) = (
        (dst as *mut DropKey).cast::<u64>(),
        (src as *const DropKey).cast::<u64>(),
    );
    for i in 0..dropscope_common::KEY_WORDS {
        // SAFETY: both are DropKeys (40 bytes aligned to 8, no implicit padding), so each of
        // the five words read and written lies inside one.
        unsafe { *d.add(i) = *s.add(i) };
    }
}

/// The drop's key: reason, location and what `--by` keeps of the packet.
#[inline(always)]
fn drop_key(needs: u32, location: u64, reason: u32, p: &attribute::Packet) -> DropKey {
    // Most groupings keep all that was read (what was not read is zero): the key is the packet.
    // The setting is read-only, so the verifier keeps one of the two branches.
    if needs & need::MASK == 0 {
        return DropKey {
            location,
            reason,
            netns: p.netns,
            netns_cookie: p.netns_cookie,
            ifindex: p.ifindex,
            l3proto: p.l3proto,
            l4proto: p.l4proto,
            port: p.dport,
            sock_via: p.sock_via,
            sock_ino: p.sock_ino,
            ..DropKey::default()
        };
    }
    let dims = setting!(group);
    DropKey {
        location,
        reason,
        netns: if dims & (group::NETNS | group::DEVICE) != 0 {
            p.netns
        } else {
            0
        },
        netns_cookie: if dims & (group::NETNS | group::DEVICE) != 0 {
            p.netns_cookie
        } else {
            0
        },
        ifindex: if dims & group::DEVICE != 0 {
            p.ifindex
        } else {
            0
        },
        l3proto: if dims & group::PROTOCOL != 0 {
            p.l3proto
        } else {
            0
        },
        l4proto: if dims & group::PROTOCOL != 0 {
            p.l4proto
        } else {
            0
        },
        port: if dims & group::PORT != 0 { p.dport } else { 0 },
        sock_via: if dims & group::SOCKET != 0 {
            p.sock_via
        } else {
            0
        },
        sock_ino: if dims & group::SOCKET != 0 {
            p.sock_ino
        } else {
            0
        },
        ..DropKey::default()
    }
}

/// Keeps the headers of a key's first packets: only the CPU that added the key writes them (its
/// first `SAMPLES_PER_KEY` drops of it), so a sample has one writer and needs no lock.
#[inline(always)]
fn sample_packet<M: Mem>(m: &M, skb: *const u8, cpu: u32, slot: u32, first: bool, i: u32) {
    let Some(owner) = SAMPLE_OWNER.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: the owner is written once, by the CPU that added the key, before any sample.
    unsafe {
        if first {
            *owner = u64::from(cpu) + 1;
        } else if *owner != u64::from(cpu) + 1 {
            return;
        }
    }
    let Some(s) = SAMPLES.get_ptr_mut(slot * SAMPLES_PER_KEY + i) else {
        return;
    };
    // SAFETY: sample `i` of this slot is written only here, by the owning CPU, once.
    let s = unsafe { &mut *s };
    s.len = m.u32(skb, setting!(skb_len));
    s.l3proto = u16::from_be(m.u16(skb, setting!(skb_protocol)));
    s.caplen = 0;
    // The two pointers are read as plain numbers (a typed load would give the verifier
    // pointers, and their arithmetic would not be a length); this runs for a key's first few
    // packets only.
    let layout = SkbLayout {
        head: Probed.u64(skb, setting!(skb_head)),
        data: Probed.u64(skb, setting!(skb_data)),
        len: s.len,
        data_len: m.u32(skb, setting!(skb_data_len)),
        network_header: m.u16(skb, setting!(skb_network_header)),
        tail: m.u32(skb, setting!(skb_tail)),
    };
    // Only the linear part of the packet: what follows it in memory is not the packet.
    let n = sample_caplen(&layout);
    // 6.1's verifier follows paths the tests above rule out (it cannot drop zero from a range
    // after a `!= 0` test, nor decide `const > reg`) and can reach the read with a length it
    // takes for negative. Read back through the stack the length is opaque to the compiler,
    // which then keeps the mask below, and the mask gives every verifier a bound.
    // SAFETY: a read of a local.
    let n = (unsafe { core::ptr::read_volatile(&n) } & 0xff) as usize;
    if n > 0 && n <= SAMPLE_BYTES {
        let from = layout.head + u64::from(layout.network_header);
        // SAFETY: `n` bytes fit in `s.data` (checked above; the verifier checks it again) and
        // bpf_probe_read_kernel checks the source address itself.
        let read = unsafe {
            generated::bpf_probe_read_kernel(
                s.data.as_mut_ptr().cast(),
                n as u32,
                from as *const core::ffi::c_void,
            )
        };
        if read == 0 {
            s.caplen = n as u16;
        }
    }
    // The time goes last: a reader takes a sample whose time is set as complete.
    compiler_fence(Ordering::SeqCst);
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    s.ts_ns = unsafe { bpf_ktime_get_ns() };
}

/// The slot of `key`, taking a free one for a key never seen (then `true`); `None` when every
/// slot is taken (the drop counts as overflow).
#[inline(always)]
fn slot_of(c: &mut CpuCounters, key: &DropKey) -> Option<(u32, bool)> {
    // SAFETY: the value is a plain u32 copied out at once.
    if let Some(slot) = unsafe { KEYS.get(key) } {
        return Some((*slot, false));
    }
    let slot = FREE_SLOTS.pop().ok().flatten()?;
    if KEYS.insert(key, slot, BPF_NOEXIST as u64).is_ok() {
        c.new_keys += 1;
        return Some((slot, true));
    }
    // Another CPU added the key first (or the map is full): give the slot back.
    let _ = FREE_SLOTS.push(slot, 0);
    // SAFETY: as above.
    unsafe { KEYS.get(key) }.map(|slot| (*slot, false))
}

#[inline(always)]
fn sample_stack<C: StackIdContext>(
    ctx: &C,
    c: &mut CpuCounters,
    reason: u32,
    location: u64,
    slot: u32,
    first: bool,
) {
    if setting!(stacks) == 0 {
        return;
    }
    let Some(control) = CONTROL.get(0) else {
        return;
    };
    if control.stacks_enabled == 0 {
        return;
    }
    // A key's first drop is always captured, with weight 1. Otherwise a sample is due once
    // `sample_period` drops have passed on this CPU and at least `min_gap_ns` since the last
    // one; it weighs exactly the drops since the last sample, so estimates stay unbiased
    // whatever the period was.
    let weight = if first {
        1
    } else {
        c.since_sample += 1;
        if c.since_sample < c.next_check.max(control.sample_period) {
            return;
        }
        // SAFETY: bpf_ktime_get_ns has no preconditions.
        let now = unsafe { bpf_ktime_get_ns() };
        let elapsed = now.wrapping_sub(c.last_sample_ns);
        if elapsed < control.min_gap_ns {
            // Too soon: at the rate seen since the last sample, skip the drops that will pass
            // before the gap is over, so the clock is read rarely even during a flood.
            let seen = c.since_sample.min(1 << 20);
            let wait = seen * (control.min_gap_ns - elapsed) / elapsed.max(1);
            c.next_check = c.since_sample + wait.max(1);
            return;
        }
        c.last_sample_ns = now;
        c.next_check = 0;
        core::mem::take(&mut c.since_sample)
    };
    let Ok(id) = ctx.get_stackid(&STACKS, 0) else {
        c.stack_errors += 1;
        return;
    };
    let key = StackKey {
        location,
        reason,
        stack_id: id as u32,
        slot,
        pad: 0,
    };
    if let Some(v) = STACK_COUNTS.get_ptr_mut(key) {
        // SAFETY: a per-CPU hash value is this CPU's own.
        unsafe {
            (*v).weight += weight;
            (*v).samples += 1;
        }
    } else {
        let v = StackValue { weight, samples: 1 };
        if STACK_COUNTS.insert(key, v, 0).is_err() {
            c.stack_overflow += 1;
            return;
        }
    }
    c.stack_samples += 1;
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
