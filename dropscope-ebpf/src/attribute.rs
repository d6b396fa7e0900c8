//! Which packet a drop is: its network namespace, interface and protocols, read from the
//! `sk_buff` at offsets the loader found in the running kernel's BTF (no CO-RE needed).
use aya_ebpf::helpers::bpf_probe_read_kernel;
use dropscope_common::{RDONLY_CAST_MARK, need, sock_via};

/// How kernel memory is read: typed loads through BTF pointers (tp_btf, a few ns each; faults
/// read as zero) or `bpf_probe_read_kernel` (the classic tracepoint, whose pointers are plain
/// numbers to the verifier).
pub trait Mem {
    /// Whether pointers are BTF-typed (so `bpf_rdonly_cast` may type a header).
    const TYPED: bool;
    /// The u64 at `base + off` (0 if it cannot be read).
    fn u64(&self, base: *const u8, off: u32) -> u64;
    /// The u32 at `base + off` (0 if it cannot be read).
    fn u32(&self, base: *const u8, off: u32) -> u32;
    /// The u16 at `base + off` (0 if it cannot be read).
    fn u16(&self, base: *const u8, off: u32) -> u16;
    /// The u8 at `base + off` (0 if it cannot be read).
    fn u8(&self, base: *const u8, off: u32) -> u8;
}

/// Loads through BTF-typed pointers: the verifier checks each against the kernel's BTF and the
/// JIT turns a fault into a zero.
pub struct Typed;

impl Mem for Typed {
    const TYPED: bool = true;
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
    #[inline(always)]
    fn u8(&self, base: *const u8, off: u32) -> u8 {
        // SAFETY: as above.
        unsafe { core::ptr::read_volatile(base.add(off as usize)) }
    }
}

/// Reads with `bpf_probe_read_kernel`, which fails cleanly on any address.
pub struct Probed;

impl Mem for Probed {
    const TYPED: bool = false;
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
    #[inline(always)]
    fn u8(&self, base: *const u8, off: u32) -> u8 {
        // SAFETY: as above.
        unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize)) }.unwrap_or(0)
    }
}

/// What is known of a dropped packet.
#[derive(Clone, Copy, Default)]
pub struct Packet {
    /// Network namespace inode (0: unknown).
    pub netns: u32,
    /// Network namespace cookie (0: unknown): its identity, where an inode may be reused.
    pub netns_cookie: u64,
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
    /// Which socket `sock_ino` is: one of [`sock_via`] (`NONE`: the drop had none).
    pub sock_via: u16,
    /// The socket's inode (0: none, or a socket without a file).
    pub sock_ino: u32,
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
            p.netns_cookie = m.u64(net, setting!(net_cookie));
        }
    }
    if needs & need::SOCKET != 0 {
        // The receiving socket the kernel names (6.11+), else the skb's owner: a drop without
        // either costs this load and two null tests.
        let (sk, via) = if rx_sk.is_null() {
            (m.u64(skb, setting!(skb_sk)) as *const u8, sock_via::SKB_SK)
        } else {
            (rx_sk, sock_via::RX_SK)
        };
        if !sk.is_null() {
            socket(m, sk, via, &mut p);
        }
    }
    if needs & need::HEADERS != 0 {
        p.l3proto = u16::from_be(m.u16(skb, setting!(skb_protocol)));
        if p.l3proto == ETH_P_IP || p.l3proto == ETH_P_IPV6 {
            transport(m, skb, needs & need::PORT != 0, &mut p);
        }
    }
    p
}

/// `TCP_TIME_WAIT` and `TCP_NEW_SYN_RECV`: `sk` is then a time-wait or request socket, smaller
/// than a `struct sock` and with no `sk_socket`.
const TCP_TIME_WAIT: u8 = 6;
const TCP_NEW_SYN_RECV: u8 = 12;

/// The inode of socket `sk` (`sk->sk_socket->file->f_inode->i_ino`: the number `/proc/PID/fd`
/// shows), found `via` the receiving socket or the skb's owner. A socket without one (time-wait,
/// request, or a kernel socket with no file) keeps `via` with inode 0.
#[inline(always)]
fn socket<M: Mem>(m: &M, sk: *const u8, via: u16, p: &mut Packet) {
    p.sock_via = via;
    let state = m.u8(sk, setting!(sk_state));
    if state == TCP_TIME_WAIT || state == TCP_NEW_SYN_RECV {
        return;
    }
    let sock = m.u64(sk, setting!(sk_socket)) as *const u8;
    if sock.is_null() {
        return;
    }
    let file = m.u64(sock, setting!(socket_file)) as *const u8;
    if file.is_null() {
        return;
    }
    let inode = m.u64(file, setting!(file_inode)) as *const u8;
    if inode.is_null() {
        return;
    }
    // sockfs numbers its inodes with `get_next_ino` (32 bits).
    p.sock_ino = m.u64(inode, setting!(inode_ino)) as u32;
}

/// The L4 protocol and (with `port`) the destination port, from the packet's headers when
/// they are set.
#[inline(always)]
fn transport<M: Mem>(m: &M, skb: *const u8, port: bool, p: &mut Packet) {
    let head = m.u64(skb, setting!(skb_head)) as *const u8;
    let nh = m.u16(skb, setting!(skb_network_header));
    if head.is_null() || nh == NO_HEADER {
        return;
    }
    let ip = head.wrapping_add(nh as usize);
    if M::TYPED && setting!(btf_udphdr) != 0 {
        cast_transport(ip, port, p);
        return;
    }
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
    if port && matches!(l4, 6 | 17 | 132 | 136) {
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

/// `bpf_rdonly_cast(obj, btf_id)` (6.2+): `obj` as a read-only pointer to the kernel type
/// `btf_id`, whose fields are then read with plain loads (a fault reads as zero). The verifier
/// turns the call into a move. Emitted as a call of helper [`RDONLY_CAST_MARK`], which the
/// loader rewrites into the kfunc's call.
#[inline(always)]
fn rdonly_cast(obj: *const u8, btf_id: u32) -> *const u8 {
    // SAFETY: the mark is a call the loader rewrites into `bpf_rdonly_cast`, whose signature
    // this is (or, where the kernel has no such kfunc, into `r0 = 0` on a path never taken: the
    // settings then hold no BTF ids).
    unsafe {
        let cast: unsafe extern "C" fn(*const u8, u32) -> *const u8 =
            core::mem::transmute(RDONLY_CAST_MARK as usize);
        cast(obj, btf_id)
    }
}

/// The L4 protocol and destination port, with the headers typed by `bpf_rdonly_cast`: plain
/// loads, no helper call.
#[inline(always)]
fn cast_transport(ip: *const u8, port: bool, p: &mut Packet) {
    let (l4, l4_at) = if p.l3proto == ETH_P_IP {
        let h = rdonly_cast(ip, setting!(btf_iphdr));
        // SAFETY: `h` is a read-only BTF pointer to `struct iphdr` (20 bytes): the verifier
        // checks each offset against it and a fault reads as zero.
        let proto = unsafe { core::ptr::read_volatile(h.add(9)) };
        // The header's length (`ihl`, in words) only where the port is read.
        let at = if port {
            // SAFETY: as above: `ihl` and `version` share byte 0.
            let ihl = ((unsafe { core::ptr::read_volatile(h) } & 0xf) as usize) * 4;
            (ihl >= 20).then(|| ip.wrapping_add(ihl))
        } else {
            None
        };
        (proto, at)
    } else {
        let h = rdonly_cast(ip, setting!(btf_ipv6hdr));
        // SAFETY: as above, `struct ipv6hdr` (40 bytes): `nexthdr` at 6.
        let next = unsafe { core::ptr::read_volatile(h.add(6)) };
        (next, Some(ip.wrapping_add(40)))
    };
    p.l4proto = l4;
    // TCP, UDP, SCTP and UDP-Lite carry the destination port in bytes 2-3.
    if let (true, Some(at)) = (port && matches!(l4, 6 | 17 | 132 | 136), l4_at) {
        let u = rdonly_cast(at, setting!(btf_udphdr));
        // SAFETY: as above, `struct udphdr` (8 bytes): `dest` at 2.
        let dest = unsafe { core::ptr::read_volatile(u.add(2).cast::<u16>()) };
        p.dport = u16::from_be(dest);
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
