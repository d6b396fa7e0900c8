//! Which packet a drop is: its network namespace, interface and protocols, read from the
//! `sk_buff` at offsets the loader found in the running kernel's BTF (no CO-RE needed).
use aya_ebpf::helpers::bpf_probe_read_kernel;
use dropscope_common::need;

/// How kernel memory is read: typed loads through BTF pointers (tp_btf, a few ns each; faults
/// read as zero) or `bpf_probe_read_kernel` (the classic tracepoint, whose pointers are plain
/// numbers to the verifier).
pub trait Mem {
    /// The u64 at `base + off` (0 if it cannot be read).
    fn u64(&self, base: *const u8, off: u32) -> u64;
    /// The u32 at `base + off` (0 if it cannot be read).
    fn u32(&self, base: *const u8, off: u32) -> u32;
    /// The u16 at `base + off` (0 if it cannot be read).
    fn u16(&self, base: *const u8, off: u32) -> u16;
}

/// Loads through BTF-typed pointers: the verifier checks each against the kernel's BTF and the
/// JIT turns a fault into a zero.
pub struct Typed;

impl Mem for Typed {
    #[inline(always)]
    fn u64(&self, base: *const u8, off: u32) -> u64 {
        // SAFETY: `base` is a BTF-typed kernel pointer and `off` a field offset from its BTF; the
        // verifier checks the access and a fault reads as zero.
        unsafe { core::ptr::read_volatile(base.add(off as usize).cast::<u64>()) }
    }
    #[inline(always)]
    fn u32(&self, base: *const u8, off: u32) -> u32 {
        // SAFETY: as above.
        unsafe { core::ptr::read_volatile(base.add(off as usize).cast::<u32>()) }
    }
    #[inline(always)]
    fn u16(&self, base: *const u8, off: u32) -> u16 {
        // SAFETY: as above.
        unsafe { core::ptr::read_volatile(base.add(off as usize).cast::<u16>()) }
    }
}

/// Reads with `bpf_probe_read_kernel`, which fails cleanly on any address.
pub struct Probed;

impl Mem for Probed {
    #[inline(always)]
    fn u64(&self, base: *const u8, off: u32) -> u64 {
        // SAFETY: bpf_probe_read_kernel checks the address itself.
        unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize).cast::<u64>()) }.unwrap_or(0)
    }
    #[inline(always)]
    fn u32(&self, base: *const u8, off: u32) -> u32 {
        // SAFETY: as above.
        unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize).cast::<u32>()) }.unwrap_or(0)
    }
    #[inline(always)]
    fn u16(&self, base: *const u8, off: u32) -> u16 {
        // SAFETY: as above.
        unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize).cast::<u16>()) }.unwrap_or(0)
    }
}

/// What is known of a dropped packet.
#[derive(Clone, Copy, Default)]
pub struct Packet {
    /// Network namespace inode (0: unknown).
    pub netns: u32,
    /// Interface index in that namespace (0: none).
    pub ifindex: u32,
    /// `ETH_P_*`, host order (0: unknown).
    pub l3proto: u16,
    /// `IPPROTO_*` (0: unknown or not IP).
    pub l4proto: u8,
    /// Destination port (0: none).
    pub dport: u16,
    /// The interface (`struct net_device *`), for the device-name filter (null: none).
    pub dev: *const u8,
}

const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const NO_HEADER: u16 = 0xffff;

/// Reads what the grouping and the filters need of `skb` (and, on 6.11+, the receiving socket).
#[inline(always)]
pub fn packet<M: Mem>(m: &M, needs: u32, skb: *const u8, rx_sk: *const u8) -> Packet {
    let mut p = Packet::default();
    if needs & need::NETDEV != 0 {
        let dev = m.u64(skb, setting!(skb_dev)) as *const u8;
        p.dev = dev;
        // The device's namespace; where the device is gone, the receiving socket's (6.11+),
        // else the owning socket's.
        let net = if !dev.is_null() {
            p.ifindex = m.u32(dev, setting!(dev_ifindex));
            m.u64(dev, setting!(dev_net))
        } else {
            p.ifindex = m.u32(skb, setting!(skb_iif));
            let sk = if rx_sk.is_null() {
                m.u64(skb, setting!(skb_sk)) as *const u8
            } else {
                rx_sk
            };
            if sk.is_null() {
                0
            } else {
                m.u64(sk, setting!(sk_net))
            }
        } as *const u8;
        if !net.is_null() {
            p.netns = m.u32(net, setting!(net_inum));
        }
    }
    if needs & need::HEADERS != 0 {
        p.l3proto = u16::from_be(m.u16(skb, setting!(skb_protocol)));
        if p.l3proto == ETH_P_IP || p.l3proto == ETH_P_IPV6 {
            transport(m, skb, &mut p);
        }
    }
    p
}

/// The L4 protocol and destination port, from the packet's headers when they are set.
#[inline(always)]
fn transport<M: Mem>(m: &M, skb: *const u8, p: &mut Packet) {
    let head = m.u64(skb, setting!(skb_head)) as *const u8;
    let nh = m.u16(skb, setting!(skb_network_header));
    if head.is_null() || nh == NO_HEADER {
        return;
    }
    let ip = head.wrapping_add(nh as usize);
    let (l4, ports_at) = if p.l3proto == ETH_P_IP {
        // SAFETY: bpf_probe_read_kernel checks the address itself.
        let Ok(b) = (unsafe { bpf_probe_read_kernel(ip.cast::<[u8; 24]>()) }) else {
            return;
        };
        let ihl = ((b[0] & 0xf) as usize) * 4;
        (
            b[9],
            if ihl == 20 {
                Some([b[22], b[23]])
            } else {
                None
            },
        )
    } else {
        // SAFETY: as above.
        let Ok(b) = (unsafe { bpf_probe_read_kernel(ip.cast::<[u8; 44]>()) }) else {
            return;
        };
        (b[6], Some([b[42], b[43]]))
    };
    p.l4proto = l4;
    // TCP, UDP, SCTP and UDP-Lite carry the destination port in bytes 2-3.
    if matches!(l4, 6 | 17 | 132 | 136) {
        let port = match ports_at {
            Some(b) => u16::from_be_bytes(b),
            None => {
                let th = m.u16(skb, setting!(skb_transport_header));
                if th == NO_HEADER {
                    return;
                }
                // SAFETY: as above.
                unsafe {
                    bpf_probe_read_kernel(head.wrapping_add(th as usize + 2).cast::<[u8; 2]>())
                }
                .map_or(0, u16::from_be_bytes)
            }
        };
        p.dport = port;
    }
}

/// Whether the interface `dev` is named `name` (NUL-padded).
#[inline(always)]
pub fn device_named(dev: *const u8, name: &[u8; 16]) -> bool {
    if dev.is_null() {
        return false;
    }
    // SAFETY: bpf_probe_read_kernel checks the address itself.
    match unsafe {
        bpf_probe_read_kernel(
            dev.wrapping_add(setting!(dev_name) as usize)
                .cast::<[u8; 16]>(),
        )
    } {
        Ok(n) => n == *name,
        Err(_) => false,
    }
}
