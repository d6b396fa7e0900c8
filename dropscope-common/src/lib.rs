//! Map keys, values and names shared by the dropscope eBPF program and userspace.
//!
//! Every type here is `#[repr(C)]` with explicit padding fields, so the kernel and userspace agree
//! on its bytes; each has a `const` size assertion.
#![no_std]

/// Slots in the mmap'd per-CPU counter array; userspace shrinks it to the possible CPU count.
pub const MAX_CPUS: u32 = 512;
/// Default capacity of the keyed map (distinct keys).
pub const DEFAULT_MAX_KEYS: u32 = 10_240;
/// Capacity of the kernel stack-trace map.
pub const STACK_TRACE_ENTRIES: u32 = 16_384;
/// Capacity of the (reason, location, stack) weight map.
pub const STACK_COUNT_ENTRIES: u32 = 16_384;
/// Frames the kernel stores per stack trace (`PERF_MAX_STACK_DEPTH`).
pub const MAX_STACK_DEPTH: usize = 127;
/// Packets whose headers are kept per key (the first ones seen on the key's first CPU).
pub const SAMPLES_PER_KEY: u32 = 8;
/// Keys (slots `0..SAMPLED_KEYS`) that keep sampled packets.
pub const SAMPLED_KEYS: u32 = 1024;
/// Bytes of a sampled packet kept, from its network header on.
pub const SAMPLE_BYTES: usize = 128;
/// `BPF_F_MMAPABLE`: an array map that userspace can `mmap`.
pub const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Map names, as the eBPF object declares them.
pub mod maps {
    /// Hash: [`super::DropKey`] → slot index in [`SLOT_COUNTS`] (written once per key).
    pub const KEYS: &str = "KEYS";
    /// Queue of free slot indices; userspace fills it with `0..max_keys` at load.
    pub const FREE_SLOTS: &str = "FREE_SLOTS";
    /// mmap'able array of u64 drop counts, `cpu * max_keys + slot`: one writer per counter.
    pub const SLOT_COUNTS: &str = "SLOT_COUNTS";
    /// mmap'able array of [`super::CpuCounters`], one slot per CPU.
    pub const COUNTERS: &str = "COUNTERS";
    /// mmap'able array with one [`super::Control`].
    pub const CONTROL: &str = "CONTROL";
    /// mmap'able array of [`super::PacketSample`], `slot * SAMPLES_PER_KEY + i`.
    pub const SAMPLES: &str = "SAMPLES";
    /// mmap'able array of u64: the CPU (plus one) that samples a slot's packets (0: none yet).
    pub const SAMPLE_OWNER: &str = "SAMPLE_OWNER";
    /// Kernel stack traces, by stack id.
    pub const STACKS: &str = "STACKS";
    /// Per-CPU hash: [`super::StackKey`] → [`super::StackValue`].
    pub const STACK_COUNTS: &str = "STACK_COUNTS";
}

/// Load-time globals of the eBPF program.
pub mod globals {
    /// Reasons below it are not drops: 2 where the kernel has `SKB_NOT_DROPPED_YET` (0) and
    /// `SKB_CONSUMED` (1), 1 where it has no `SKB_CONSUMED` (6.1), 0 where it has neither.
    pub const NON_DROP_BELOW: &str = "NON_DROP_BELOW";
    /// Byte offset of `location` in the classic `skb:kfree_skb` record.
    pub const TP_LOCATION_OFFSET: &str = "TP_LOCATION_OFFSET";
    /// Byte offset of `reason` in the classic `skb:kfree_skb` record.
    pub const TP_REASON_OFFSET: &str = "TP_REASON_OFFSET";
    /// Thread-group id whose syscalls the `sys_enter` program counts (dropscope itself).
    pub const SELF_TGID: &str = "SELF_TGID";
    /// Slots per CPU in the slot-count array (the keyed capacity).
    pub const MAX_KEYS: &str = "MAX_KEYS";
    /// Keys with a socket each CPU may add (see [`super::socket_keys_per_cpu`]).
    pub const SOCKET_KEYS_PER_CPU: &str = "SOCKET_KEYS_PER_CPU";
    /// The [`super::Config`]: kernel struct offsets, grouping and filters.
    pub const CONFIG: &str = "CONFIG";
    /// Benchmark builds only: bits of [`super::skip`], the steps taken out of the per-drop path.
    #[cfg(feature = "bench")]
    pub const BENCH_SKIP: &str = "BENCH_SKIP";
}

/// Benchmark builds only: steps of the per-drop path that a read-only setting takes out (bits
/// of the program's `BENCH_SKIP`), so the bench can time each step by its absence. The verifier
/// sees the setting as a constant and removes the step's code, so a program with a step taken
/// out is the program without it, not the program plus a test. Some of them make counts wrong
/// (the bench does not check counts there): they exist to be timed, never to count.
#[cfg(feature = "bench")]
pub mod skip {
    /// The test that the reason is a drop (not `NOT_DROPPED_YET` or `CONSUMED`).
    pub const NON_DROP: u32 = 1;
    /// The reason filter's look-up (a filtered drop then reads as not listed).
    pub const REASON_LOOKUP: u32 = 1 << 1;
    /// The attribution loads (namespace, interface, protocol, port read as zero).
    pub const ATTRIBUTION: u32 = 1 << 2;
    /// The key's build and the compare with the cached key (the cached slot is taken as is).
    pub const KEY: u32 = 1 << 3;
    /// The compare with the cached key only (the key is still built).
    pub const COMPARE: u32 = 1 << 4;
    /// The slot counter's array look-up and its increment.
    pub const SLOT: u32 = 1 << 5;
    /// The two increments (slot counter and total), the look-ups kept.
    pub const INCREMENTS: u32 = 1 << 6;
    /// The test for a packet sample (the key's first packets).
    pub const PACKET_SAMPLE: u32 = 1 << 7;
    /// The stack-sampling test (the control look-up and what follows).
    pub const SAMPLING: u32 = 1 << 8;
    /// The socket's reads (the socket reads as none): the program before sockets were keyed.
    pub const SOCKET: u32 = 1 << 9;
    /// Names, as `--bench-skip` takes them.
    pub const NAMES: [(&str, u32); 10] = [
        ("non-drop", NON_DROP),
        ("reason-lookup", REASON_LOOKUP),
        ("attribution", ATTRIBUTION),
        ("key", KEY),
        ("compare", COMPARE),
        ("slot", SLOT),
        ("increments", INCREMENTS),
        ("packet-sample", PACKET_SAMPLE),
        ("sampling", SAMPLING),
        ("socket", SOCKET),
    ];
}

/// Attribution dimensions a key can be grouped by (bits of [`Config::group`]).
pub mod group {
    /// The packet's network namespace.
    pub const NETNS: u32 = 1;
    /// The interface (with its namespace: an ifindex means something only within one).
    pub const DEVICE: u32 = 2;
    /// The L3 and L4 protocols.
    pub const PROTOCOL: u32 = 4;
    /// The destination port.
    pub const PORT: u32 = 8;
    /// The socket the packet had reached (its inode), where the drop has one.
    pub const SOCKET: u32 = 16;
}

/// Which drops to count at all (fields of [`Config`]); a drop filtered out is not counted.
pub mod filter {
    /// `reasons`: count every reason.
    pub const REASONS_ALL: u32 = 0;
    /// `reasons`: count only the reasons set in the reason bitmap.
    pub const REASONS_ONLY: u32 = 1;
    /// `reasons`: count every reason but those set in the reason bitmap.
    pub const REASONS_EXCEPT: u32 = 2;
    /// Bits in the reason bitmap: index `(subsystem & 0xf) << 8 | (reason & 0xff)`.
    pub const REASON_BITS: u32 = 4096;
}

/// How a drop reason's code is laid out: the kernel's `enum skb_drop_reason` value, with a
/// subsystem's reasons carrying the subsystem id in the high 16 bits; the two highest bits,
/// which no kernel reason has, mark the rows set beside the probe's. One definition for the
/// program and userspace.
pub mod reason {
    /// Subsystem reasons carry their subsystem id from this bit up.
    pub const SUBSYS_SHIFT: u32 = 16;
    /// The bit set in a program verdict row's reason code.
    pub const PROGRAM: u32 = 0x8000_0000;
    /// The bit set in a counter-only row's reason code.
    pub const COUNTER: u32 = 0x4000_0000;
}

/// The bit of a drop reason in the reason filter's bitmap: `(subsystem << 8) | reason` for
/// reasons below 256 of subsystems below 16 (every kernel's so far); `None` for any other
/// value, which the filter can neither list nor alias onto another reason's bit. One
/// definition for the program and userspace.
#[inline(always)]
pub const fn reason_bit(value: u32) -> Option<u32> {
    let subsystem = value >> reason::SUBSYS_SHIFT;
    if value & 0xff00 == 0 && subsystem < 16 {
        Some(subsystem << 8 | (value & 0xff))
    } else {
        None
    }
}

/// The helper id the program calls where it means the `bpf_rdonly_cast` kfunc: no kernel has
/// a helper by this number. The loader rewrites each such call into a call of the kfunc
/// (`BPF_PSEUDO_KFUNC_CALL` with its BTF id), or, on a kernel without it (before 6.2), into
/// `r0 = 0` on a path the settings never take.
pub const RDONLY_CAST_MARK: u32 = 0x7ead_ca57;

/// Load-time settings of the program (a read-only global: the verifier sees constants).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Byte offset of `sk_buff.dev`.
    pub skb_dev: u32,
    /// Byte offset of `sk_buff.sk`.
    pub skb_sk: u32,
    /// Byte offset of `sk_buff.skb_iif`.
    pub skb_iif: u32,
    /// Byte offset of `sk_buff.protocol`.
    pub skb_protocol: u32,
    /// Byte offset of `sk_buff.head`.
    pub skb_head: u32,
    /// Byte offset of `sk_buff.network_header`.
    pub skb_network_header: u32,
    /// Byte offset of `sk_buff.transport_header`.
    pub skb_transport_header: u32,
    /// Byte offset of `sk_buff.len`.
    pub skb_len: u32,
    /// Byte offset of `sk_buff.data` (`unsigned char *`).
    pub skb_data: u32,
    /// Byte offset of `sk_buff.data_len` (bytes in paged fragments, not in the linear head).
    pub skb_data_len: u32,
    /// Byte offset of `sk_buff.tail` (`sk_buff_data_t`: an offset from `head` on 64-bit).
    pub skb_tail: u32,
    /// Byte offset of `net_device.ifindex`.
    pub dev_ifindex: u32,
    /// Byte offset of `net_device.name`.
    pub dev_name: u32,
    /// Byte offset of `net_device.nd_net.net`.
    pub dev_net: u32,
    /// Byte offset of `sock.__sk_common.skc_net.net`.
    pub sk_net: u32,
    /// Byte offset of `net.ns.inum`.
    pub net_inum: u32,
    /// Byte offset of `net.net_cookie` (u64, 5.14+).
    pub net_cookie: u32,
    /// Explicit padding; always zero.
    pub pad: u32,
    /// 1 when `tp_btf/kfree_skb` has the `rx_sk` argument (6.11+).
    pub has_rx_sk: u32,
    /// Classic tracepoint: byte offset of `skbaddr` in the record.
    pub tp_skb: u32,
    /// Classic tracepoint: byte offset of `rx_skaddr` in the record (0: none).
    pub tp_rx_sk: u32,
    /// Dimensions grouped by: bits of [`group`].
    pub group: u32,
    /// Count only drops in this network namespace (inode; 0: any).
    pub filter_netns: u32,
    /// Count only this L4 protocol, plus one (0: any).
    pub filter_l4: u32,
    /// Count only this destination port (0: any).
    pub filter_port: u32,
    /// Reason filter mode: one of [`filter`]'s `REASONS_*`.
    pub filter_reasons: u32,
    /// 1: count only drops on an interface named `filter_dev`.
    pub filter_dev_on: u32,
    /// Interface name to count (NUL-padded).
    pub filter_dev: [u8; 16],
    /// What the program must read per drop: bits of [`need`] (derived from the rest, so the
    /// common path tests one word).
    pub need: u32,
    /// BTF id of `struct iphdr`, for `bpf_rdonly_cast` (0: no such kfunc, the headers are
    /// read with `bpf_probe_read_kernel`).
    pub btf_iphdr: u32,
    /// BTF id of `struct ipv6hdr` (as above).
    pub btf_ipv6hdr: u32,
    /// BTF id of `struct udphdr` (as above: the destination port of UDP, TCP, SCTP and
    /// UDP-Lite is at the same place).
    pub btf_udphdr: u32,
    /// 1 when stacks may be sampled (not `--no-stacks`); 0 takes the sampling test out of the
    /// per-drop path (the verifier drops the dead code).
    pub stacks: u32,
    /// Byte offset of `sock.__sk_common.skc_state` (u8): a time-wait or request socket has no
    /// `sk_socket` to read.
    pub sk_state: u32,
    /// Byte offset of `sock.sk_socket` (`struct socket *`).
    pub sk_socket: u32,
    /// Byte offset of `socket.file` (`struct file *`).
    pub socket_file: u32,
    /// Byte offset of `file.f_inode` (`struct inode *`).
    pub file_inode: u32,
    /// Byte offset of `inode.i_ino` (`unsigned long`; sockfs numbers its inodes in 32 bits).
    pub inode_ino: u32,
    /// Explicit padding; always zero.
    pub pad2: u32,
    /// The reason filter's bitmap (bits of [`reason_bit`]): read-only like the rest, so the
    /// test is one load, and set before the program counts anything.
    pub filter_reason_words: ReasonWords,
}
const _: () = assert!(core::mem::size_of::<Config>() == 168 + 8 * REASON_WORDS);

/// Words of the reason filter's bitmap.
pub const REASON_WORDS: usize = (filter::REASON_BITS / 64) as usize;

/// The reason filter's bitmap: bit `b` is bit `b % 64` of word `b / 64`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasonWords(pub [u64; REASON_WORDS]);

impl ReasonWords {
    /// No reason set.
    pub const EMPTY: Self = Self([0; REASON_WORDS]);

    /// Sets `bit` (below [`filter::REASON_BITS`]; others are ignored).
    pub fn set(&mut self, bit: u32) {
        if let Some(w) = self.0.get_mut((bit / 64) as usize) {
            *w |= 1 << (bit % 64);
        }
    }
}

impl Default for ReasonWords {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// The [`Config::need`] words a program is compiled for (the general program reads the
/// setting): the loader attaches the program of the configuration's word where there is one.
pub mod specialised {
    use super::need;

    /// Counting by reason and location, no filter.
    pub const COUNT: u32 = 0;
    /// The namespace and interface.
    pub const NETDEV: u32 = need::NETDEV;
    /// The default grouping: namespace, interface, protocol and socket.
    pub const DEFAULT: u32 = need::NETDEV | need::HEADERS | need::SOCKET;
}

/// Bits of [`Config::need`].
pub mod need {
    /// Read the device and namespace (grouped by, or filtered on).
    pub const NETDEV: u32 = 1;
    /// Read the packet's headers (protocol or port grouped by, or filtered on).
    pub const HEADERS: u32 = 2;
    /// Some filter other than the reason filter is set.
    pub const FILTER: u32 = 4;
    /// The reason filter is set.
    pub const REASONS: u32 = 8;
    /// The key keeps less than what is read of the packet (a filter reads a dimension the
    /// grouping drops, or the grouping keeps the namespace without the interface, or the port
    /// without the protocol), so each field is masked by the grouping. Unset, the key is the packet
    /// as read, with no per-field test.
    pub const MASK: u32 = 16;
    /// Read the destination port too (port grouped by, or filtered on): with
    /// [`HEADERS`] alone, only the protocol is read.
    pub const PORT: u32 = 32;
    /// Read the socket the packet had reached (`rx_sk`, else `skb->sk`): a drop without one
    /// pays a null test.
    pub const SOCKET: u32 = 64;
}

/// The headers of one dropped packet, kept as an example of its key.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketSample {
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC) when it was dropped.
    pub ts_ns: u64,
    /// `skb->len`.
    pub len: u32,
    /// Bytes of `data` that belong to the packet (see [`sample_caplen`]); the rest is zero.
    pub caplen: u16,
    /// `ETH_P_*` of the packet, host order.
    pub l3proto: u16,
    /// The packet from its network header on.
    pub data: [u8; SAMPLE_BYTES],
}
const _: () = assert!(core::mem::size_of::<PacketSample>() == 144);

impl Default for PacketSample {
    fn default() -> Self {
        Self {
            ts_ns: 0,
            len: 0,
            caplen: 0,
            l3proto: 0,
            data: [0; SAMPLE_BYTES],
        }
    }
}

/// Where a dropped skb's bytes lie, as read from its `struct sk_buff` (addresses and offsets
/// exactly as the kernel holds them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkbLayout {
    /// `skb->head`: start of the linear buffer.
    pub head: u64,
    /// `skb->data`: start of the packet's current layer.
    pub data: u64,
    /// `skb->len`: bytes from `data` on, linear and paged.
    pub len: u32,
    /// `skb->data_len`: of those, the bytes in paged fragments (not after `data` in memory).
    pub data_len: u32,
    /// `skb->network_header`: offset of the network header from `head` (`0xffff`: unset).
    pub network_header: u16,
    /// `skb->tail`: offset of the end of the linear data from `head`.
    pub tail: u32,
}

/// How many bytes from the network header on may be copied into a sample: only the linear
/// part of the packet (`data .. data + len - data_len`, and never past `tail`), at most
/// [`SAMPLE_BYTES`]. Paged data lies elsewhere; what follows the linear part in memory is the
/// head's slack and `skb_shared_info` (kernel pointers), which must never be copied. Any
/// inconsistent layout (unset header, `data_len > len`, a header outside the linear part)
/// gives 0. Used by the eBPF program and tested over arbitrary layouts in userspace.
#[inline(always)]
pub fn sample_caplen(l: &SkbLayout) -> u32 {
    if l.head == 0 || l.network_header == 0xffff || l.data < l.head || l.data_len > l.len {
        return 0;
    }
    let from = l.head.saturating_add(u64::from(l.network_header));
    let linear_end = l.data.saturating_add(u64::from(l.len - l.data_len));
    let tail_end = l.head.saturating_add(u64::from(l.tail));
    let end = if linear_end < tail_end {
        linear_end
    } else {
        tail_end
    };
    if from >= end {
        return 0;
    }
    let n = end - from;
    if n > SAMPLE_BYTES as u64 {
        SAMPLE_BYTES as u32
    } else {
        n as u32
    }
}

/// Program names in the eBPF object (each within the 15 bytes of a name the kernel keeps).
pub mod programs {
    /// `tp_btf/kfree_skb`: typed arguments, no tracefs needed.
    pub const KFREE_SKB_BTF: &str = "kfree_skb_btf";
    /// `tp_btf/kfree_skb` compiled for [`super::specialised::COUNT`].
    pub const KFREE_SKB_COUNT: &str = "kfree_skb_count";
    /// `tp_btf/kfree_skb` compiled for [`super::specialised::NETDEV`].
    pub const KFREE_SKB_NETDEV: &str = "kfree_skb_dev";
    /// `tp_btf/kfree_skb` compiled for [`super::specialised::DEFAULT`].
    pub const KFREE_SKB_DEFAULT: &str = "kfree_skb_dfl";
    /// `tp_btf/kfree_skb` that does nothing: the benchmark's floor.
    pub const KFREE_SKB_FLOOR: &str = "kfree_skb_floor";
    /// Benchmark builds only: `tp_btf/kfree_skb` with steps taken out (see [`super::skip`]).
    #[cfg(feature = "bench")]
    pub const KFREE_SKB_SKIP: &str = "kfree_skb_skip";
    /// Classic `tracepoint/skb/kfree_skb`: the fallback.
    pub const KFREE_SKB_TP: &str = "kfree_skb_tp";
    /// `tp_btf/sys_enter`: counts dropscope's own syscalls.
    pub const SYS_ENTER: &str = "sys_enter";
}

/// What an exact drop count is keyed by: reason, location and the packet's attribution.
///
/// Attribution fields that are not grouped by, or not known, are zero. A network namespace is
/// identified by its cookie, which the kernel never gives to another namespace while it runs;
/// its inode (given again to a later namespace once it is freed) rides along for display.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DropKey {
    /// Kernel address that freed the skb.
    pub location: u64,
    /// Cookie of the packet's network namespace, `net->net_cookie` (0: unknown or not grouped).
    pub netns_cookie: u64,
    /// `enum skb_drop_reason` value.
    pub reason: u32,
    /// Inode of the packet's network namespace (0: unknown or not grouped).
    pub netns: u32,
    /// Interface index within that namespace (0: none or not grouped).
    pub ifindex: u32,
    /// L3 protocol, `ETH_P_*` in host byte order (0: unknown or not grouped).
    pub l3proto: u16,
    /// L4 protocol, `IPPROTO_*` (0: unknown or not grouped).
    pub l4proto: u8,
    /// Explicit padding; always zero.
    pub pad0: u8,
    /// Destination port (0: none or not grouped).
    pub port: u16,
    /// How the socket was found: one of [`sock_via`] (`NONE` with `sock_ino` 0).
    pub sock_via: u16,
    /// Inode of the socket the packet had reached (0: none, no file, or not grouped): what
    /// `/proc/PID/fd` (`socket:[INODE]`) and sock_diag name it by.
    pub sock_ino: u32,
}
const _: () = assert!(core::mem::size_of::<DropKey>() == 40);
const _: () = assert!(core::mem::align_of::<DropKey>() == 8);

/// Values of [`DropKey::sock_via`]: which of the drop's sockets the key names.
pub mod sock_via {
    /// No socket (or not grouped by socket).
    pub const NONE: u16 = 0;
    /// The receiving socket the kernel passed to the tracepoint (`rx_sk`, 6.11+).
    pub const RX_SK: u16 = 1;
    /// The socket owning the skb (`skb->sk`): a sending socket, or a receiving one that had
    /// taken the skb.
    pub const SKB_SK: u16 = 2;
}

/// [`DropKey::sock_ino`] of the drops of sockets beyond what a CPU may key: each CPU adds at most
/// [`socket_keys_per_cpu`] keys with a socket, so sockets made in bulk (by anyone) take at most
/// a quarter of the keyed map, and their drops beyond it are counted on one key per reason,
/// location and the rest, never as overflow of others' keys.
pub const SOCK_INO_OVER: u32 = u32::MAX;

/// Keys with a socket each CPU may add: a quarter of `max_keys` shared by `ncpus`, at least 8.
pub const fn socket_keys_per_cpu(max_keys: u32, ncpus: u32) -> u32 {
    let n = max_keys / 4 / if ncpus == 0 { 1 } else { ncpus };
    if n < 8 { 8 } else { n }
}

/// Words of a [`DropKey`].
pub const KEY_WORDS: usize = core::mem::size_of::<DropKey>() / 8;

impl DropKey {
    /// The key as five words, for a compare of five loads instead of one per field (the eBPF
    /// program's cached-key test). Packed by hand, field by field as `repr(C)` lays them out on a
    /// little-endian machine, so equal keys give equal words and unequal keys unequal ones.
    #[inline(always)]
    pub fn words(&self) -> [u64; KEY_WORDS] {
        [
            self.location,
            self.netns_cookie,
            u64::from(self.reason) | u64::from(self.netns) << 32,
            u64::from(self.ifindex)
                | u64::from(self.l3proto) << 32
                | u64::from(self.l4proto) << 48
                | u64::from(self.pad0) << 56,
            u64::from(self.port) | u64::from(self.sock_via) << 16 | u64::from(self.sock_ino) << 32,
        ]
    }

    /// Whether the key stored at `stored` (aligned, as every `DropKey` is) equals `words`: five
    /// loads and one branch. On a little-endian machine the memory of a `DropKey` is exactly its
    /// [`Self::words`].
    ///
    /// # Safety
    /// `stored` must point to a readable `DropKey`.
    #[inline(always)]
    pub unsafe fn stored_equals(stored: *const DropKey, words: &[u64; KEY_WORDS]) -> bool {
        let w = stored.cast::<u64>();
        // SAFETY: the caller gives a readable `DropKey`: 40 bytes aligned to 8, no implicit
        // padding (every byte is a field), so five u64 reads stay inside it.
        let (a, b, c, d, e) = unsafe { (*w, *w.add(1), *w.add(2), *w.add(3), *w.add(4)) };
        (a ^ words[0]) | (b ^ words[1]) | (c ^ words[2]) | (d ^ words[3]) | (e ^ words[4]) == 0
    }
}

/// Key of a sampled stack's weight.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackKey {
    /// Kernel address that freed the skb.
    pub location: u64,
    /// `enum skb_drop_reason` value.
    pub reason: u32,
    /// Id in the stack-trace map.
    pub stack_id: u32,
    /// Slot of the drop's key (so a stack is weighed for its row: namespace, interface,
    /// protocol and port too), or [`NO_SLOT`] for a drop counted as overflow.
    pub slot: u32,
    /// Explicit padding; always zero.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<StackKey>() == 24);

/// [`StackKey::slot`] of a drop that got no slot (counted as overflow).
pub const NO_SLOT: u32 = u32::MAX;

/// Weight of a sampled stack: each sample stands for `period` drops.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackValue {
    /// Sum of the sampling periods of the samples: an estimate of the drops on this stack.
    pub weight: u64,
    /// Number of captured samples.
    pub samples: u64,
}
const _: () = assert!(core::mem::size_of::<StackValue>() == 16);

/// One CPU's counters, on cache lines of their own so CPUs never share a line.
///
/// `total` counts every drop seen; `overflow` counts drops that could not be keyed. Every other
/// drop is one increment of this CPU's counter for its key's slot, so that
/// `sum(slot counts) + overflow == total` always holds. See docs/counting-protocol.md.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuCounters {
    /// Every drop seen (reason not NOT_DROPPED_YET nor CONSUMED), incremented last.
    pub total: u64,
    /// Drops not keyed because every slot was taken.
    pub overflow: u64,
    /// Stack samples captured and weighted.
    pub stack_samples: u64,
    /// Stack captures that failed (hash collision or full stack map).
    pub stack_errors: u64,
    /// Stack samples whose weight did not fit in the stack-count map.
    pub stack_overflow: u64,
    /// Drops on this CPU since its last periodic stack sample (a key's first drop excluded):
    /// the weight of the next sample.
    pub since_sample: u64,
    /// Syscalls made by dropscope itself (when the `sys_enter` program is attached).
    pub self_syscalls: u64,
    /// `bpf_ktime_get_ns` of this CPU's last periodic stack sample.
    pub last_sample_ns: u64,
    /// `since_sample` at which this CPU next considers a sample (reads the clock only then).
    pub next_check: u64,
    /// Keys this CPU added to the key map: the sum over CPUs is the number of keys, so a
    /// reader knows when to read the key map again.
    pub new_keys: u64,
    /// The key of this CPU's last drop, whose slot is `cached_slot` (valid when
    /// `cached_valid` is 1): a run of one key skips the hash lookup. Private to the writer.
    pub cached: DropKey,
    /// Slot of `cached`.
    pub cached_slot: u32,
    /// 1 when `cached` and `cached_slot` are valid.
    pub cached_valid: u32,
    /// The key cached before `cached` (valid when `older_valid` is 1): drops of two keys that
    /// interleave on one CPU both skip the hash lookup. Private to the writer.
    pub older: DropKey,
    /// Slot of `older`.
    pub older_slot: u32,
    /// 1 when `older` and `older_slot` are valid.
    pub older_valid: u32,
    /// Keys with a socket this CPU added (at most `SOCKET_KEYS_PER_CPU`).
    pub socket_keys: u64,
    /// Explicit padding to three cache lines; always zero.
    pub pad: u64,
}
const _: () = assert!(core::mem::size_of::<CpuCounters>() == 192);

/// Settings userspace writes through the mmap'd control array while the probe runs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// Non-zero: capture stacks (on a key's first drop and then every `sample_period` drops).
    pub stacks_enabled: u64,
    /// Drops per periodic stack sample on each CPU (at least 1).
    pub sample_period: u64,
    /// Least time between two periodic samples on one CPU, so a sudden flood cannot make
    /// stack capture (about 1.5 µs each) run on every drop before the period adapts.
    pub min_gap_ns: u64,
}
const _: () = assert!(core::mem::size_of::<Control>() == 24);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is #[repr(C)], Copy, has no padding bytes (size assertions above) and
    // every bit pattern is a valid value.
    unsafe impl aya::Pod for super::DropKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::StackKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::StackValue {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CpuCounters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Control {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PacketSample {}
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn program_names_fit_in_what_the_kernel_keeps() {
        use programs::*;
        let names = [
            KFREE_SKB_BTF,
            KFREE_SKB_COUNT,
            KFREE_SKB_NETDEV,
            KFREE_SKB_DEFAULT,
            KFREE_SKB_FLOOR,
            KFREE_SKB_TP,
            SYS_ENTER,
        ];
        #[cfg(feature = "bench")]
        assert!(KFREE_SKB_SKIP.len() <= 15);
        assert!(names.iter().all(|n| n.len() <= 15), "{names:?}");
    }

    fn drop_key() -> impl Strategy<Value = DropKey> {
        (
            any::<[u64; 2]>(),
            any::<[u32; 3]>(),
            any::<(u16, u8, u8, u16)>(),
            any::<(u16, u32)>(),
        )
            .prop_map(
                |(
                    [location, netns_cookie],
                    [reason, netns, ifindex],
                    (l3proto, l4proto, pad0, port),
                    (sock_via, sock_ino),
                )| {
                    DropKey {
                        location,
                        netns_cookie,
                        reason,
                        netns,
                        ifindex,
                        l3proto,
                        l4proto,
                        pad0,
                        port,
                        sock_via,
                        sock_ino,
                    }
                },
            )
    }

    proptest! {
        /// The word compare the eBPF program uses agrees with the field compare, in both
        /// directions, and the words are the key's memory on this (little-endian) host.
        #[test]
        fn stored_key_compare_is_field_equality(a in drop_key(), b in drop_key(), pick in 0usize..11) {
            let mut c = a;
            // A key that differs from `a` in one field only (or not at all, when the draw
            // repeats it).
            match pick {
                0 => c.location = b.location,
                1 => c.reason = b.reason,
                2 => c.netns = b.netns,
                3 => c.ifindex = b.ifindex,
                4 => c.l3proto = b.l3proto,
                5 => c.l4proto = b.l4proto,
                6 => c.pad0 = b.pad0,
                7 => c.port = b.port,
                8 => c.netns_cookie = b.netns_cookie,
                9 => c.sock_via = b.sock_via,
                _ => c.sock_ino = b.sock_ino,
            }
            // SAFETY: `a` is a live DropKey.
            prop_assert_eq!(unsafe { DropKey::stored_equals(&a, &c.words()) }, a == c);
            // SAFETY: as above.
            prop_assert_eq!(unsafe { DropKey::stored_equals(&a, &b.words()) }, a == b);
            // SAFETY: DropKey is 40 bytes with no implicit padding.
            let memory: [u64; KEY_WORDS] = unsafe { core::mem::transmute(a) };
            prop_assert_eq!(memory, a.words());
        }
    }

    /// A layout as the kernel builds one: a linear buffer at `head` of `size` bytes with
    /// `data` and `tail` inside it, `frags` paged bytes, and a network header somewhere.
    fn layout() -> impl Strategy<Value = SkbLayout> {
        (
            1u64..u64::MAX / 2,
            0u32..4096,
            0u32..4096,
            0u32..4096,
            0u32..65536,
            0u16..=0xffff,
        )
            .prop_map(|(head, data_off, linear, slack, frags, nh)| SkbLayout {
                head,
                data: head + u64::from(data_off),
                len: linear + frags,
                data_len: frags,
                network_header: nh,
                tail: data_off + linear + slack % 2,
            })
    }

    proptest! {
        /// Never a byte past the linear part or `tail`, never more than a sample holds, and
        /// everything that is linear and fits is taken.
        #[test]
        fn only_linear_bytes_are_copied(l in layout()) {
            let n = u64::from(sample_caplen(&l));
            let from = l.head + u64::from(l.network_header);
            let linear_end = l.data + u64::from(l.len - l.data_len);
            let end = linear_end.min(l.head + u64::from(l.tail));
            prop_assert!(n <= SAMPLE_BYTES as u64);
            if n > 0 {
                prop_assert!(from + n <= linear_end && from + n <= end);
            }
            if l.network_header != 0xffff && from < end {
                prop_assert_eq!(n, (end - from).min(SAMPLE_BYTES as u64));
            } else {
                prop_assert_eq!(n, 0);
            }
        }

        /// Nonsense (as a torn or foreign read may give) copies nothing rather than anything.
        #[test]
        fn inconsistent_layouts_copy_nothing(
            head in any::<u64>(), data in any::<u64>(), len in any::<u32>(),
            data_len in any::<u32>(), nh in any::<u16>(), tail in any::<u32>(),
        ) {
            let l = SkbLayout { head, data, len, data_len, network_header: nh, tail };
            let n = u64::from(sample_caplen(&l));
            if data < head || data_len > len || head == 0 || nh == 0xffff {
                prop_assert_eq!(n, 0);
            } else {
                let from = head.saturating_add(u64::from(nh));
                prop_assert!(n == 0 || from.saturating_add(n) <= data.saturating_add(u64::from(len - data_len)));
                prop_assert!(n == 0 || from.saturating_add(n) <= head.saturating_add(u64::from(tail)));
            }
        }
    }

    #[test]
    fn reason_bits_never_alias() {
        assert_eq!(reason_bit(2), Some(2));
        assert_eq!(reason_bit(0x0003_0005), Some(0x305));
        assert_eq!(
            reason_bit(0x0011_0002),
            None,
            "subsystem 17 is not subsystem 1"
        );
        assert_eq!(reason_bit(0x100), None);
        let mut seen = std::collections::HashSet::new();
        for sub in 0..32u32 {
            for r in 0..512u32 {
                if let Some(bit) = reason_bit(sub << 16 | r) {
                    assert!(bit < filter::REASON_BITS && seen.insert(bit));
                }
            }
        }
    }

    #[test]
    fn a_tcp_segment_with_paged_payload_stops_after_its_headers() {
        // 1,400 bytes of payload in a page fragment; 52 bytes of IP and TCP headers linear,
        // followed in memory by the head's slack and skb_shared_info.
        let head = 0xffff_8880_0000_0000;
        let l = SkbLayout {
            head,
            data: head + 64,
            len: 52 + 1400,
            data_len: 1400,
            network_header: 64,
            tail: 64 + 52,
        };
        assert_eq!(sample_caplen(&l), 52);
    }
}
