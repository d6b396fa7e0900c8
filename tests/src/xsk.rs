//! An AF_XDP socket for the tests of the ledger's AF_XDP layer: bound in copy mode to one
//! queue of a device in a test namespace, with rings and a UMEM but no buffer ever given to
//! the kernel, so that every packet redirected to it is dropped (`rx_dropped`).
use std::{
    io,
    mem::{size_of, zeroed},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

const AF_XDP: i32 = 44;
const SOL_XDP: i32 = 283;
const XDP_RX_RING: i32 = 2;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_COPY: u16 = 1 << 1;
const FRAMES: usize = 16;
const FRAME: usize = 4096;

/// `struct xdp_statistics`: the socket's own counts, as its owner reads them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    /// Packets dropped for want of a buffer (or too large).
    pub rx_dropped: u64,
    /// Invalid fill-ring descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid tx descriptors.
    pub tx_invalid_descs: u64,
    /// Packets dropped with the rx ring full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the tx ring was empty.
    pub tx_ring_empty_descs: u64,
}

/// The socket and its UMEM (unmapped when dropped, after the socket is closed).
pub struct Socket {
    fd: Option<OwnedFd>,
    umem: *mut libc::c_void,
}

// SAFETY: the UMEM pointer is only unmapped, once, by the owner.
unsafe impl Send for Socket {}

impl Socket {
    /// An AF_XDP socket in the namespace at `netns`, bound to queue `queue` of `dev` there.
    pub fn bind(netns: &Path, dev: &str, queue: u32) -> io::Result<Self> {
        let netns = netns.to_path_buf();
        let dev = std::ffi::CString::new(dev).map_err(io::Error::other)?;
        // A thread of its own enters the namespace (the socket keeps it: descriptors are the
        // process's).
        std::thread::spawn(move || -> io::Result<Socket> {
            let ns = std::fs::File::open(&netns)?;
            // SAFETY: setns(2) on a namespace file we hold, for this thread only.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a NUL-terminated name.
            let ifindex = unsafe { libc::if_nametoindex(dev.as_ptr()) };
            if ifindex == 0 {
                return Err(io::Error::last_os_error());
            }
            Socket::open(ifindex, queue)
        })
        .join()
        .map_err(|_| io::Error::other("the binding thread panicked"))?
    }

    fn open(ifindex: u32, queue: u32) -> io::Result<Self> {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an anonymous private mapping; unmapped in Drop.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FRAMES * FRAME,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let s = Socket { fd: Some(fd), umem };
        // struct xdp_umem_reg as every kernel since 4.18 takes it: addr, len, chunk_size,
        // headroom.
        let reg: [u64; 3] = [umem as u64, (FRAMES * FRAME) as u64, FRAME as u64];
        s.set(XDP_UMEM_REG, &reg)?;
        for opt in [XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_RX_RING] {
            s.set(opt, &4u32)?;
        }
        // SAFETY: sockaddr_xdp is plain data.
        let mut addr: [u8; 16] = unsafe { zeroed() };
        addr[0..2].copy_from_slice(&(AF_XDP as u16).to_ne_bytes());
        addr[2..4].copy_from_slice(&XDP_COPY.to_ne_bytes());
        addr[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        addr[8..12].copy_from_slice(&queue.to_ne_bytes());
        // SAFETY: a 16-byte sockaddr_xdp.
        let rc =
            unsafe { libc::bind(s.raw(), addr.as_ptr().cast(), addr.len() as libc::socklen_t) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(s)
    }

    fn raw(&self) -> i32 {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    fn set<T>(&self, opt: i32, value: &T) -> io::Result<()> {
        // SAFETY: `value` is valid for its size.
        let rc = unsafe {
            libc::setsockopt(
                self.raw(),
                SOL_XDP,
                opt,
                (value as *const T).cast(),
                size_of::<T>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Its descriptor (for an XSKMAP).
    pub fn fd(&self) -> u32 {
        self.raw() as u32
    }

    /// Its inode number (what `sock_diag` and `ss` name it by).
    pub fn inode(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(std::fs::metadata(format!("/proc/self/fd/{}", self.raw()))?.ino())
    }

    /// Its statistics (`XDP_STATISTICS`).
    pub fn statistics(&self) -> io::Result<Statistics> {
        let mut st = Statistics::default();
        let mut len = size_of::<Statistics>() as libc::socklen_t;
        // SAFETY: `st` is valid for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.raw(),
                SOL_XDP,
                XDP_STATISTICS,
                (&mut st as *mut Statistics).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        drop(self.fd.take());
        // SAFETY: the mapping made in `open`, unmapped once, after its socket is closed.
        unsafe { libc::munmap(self.umem, FRAMES * FRAME) };
    }
}

/// Whether this kernel answers `sock_diag` requests for AF_XDP sockets (`ss --xdp`): `Err`
/// with the kernel's answer where it does not (built without `CONFIG_XDP_SOCKETS_DIAG`).
pub fn diag_available() -> io::Result<()> {
    const NETLINK_SOCK_DIAG: i32 = 4;
    // SAFETY: plain socket(2).
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // nlmsghdr (SOCK_DIAG_BY_FAMILY, request and dump) and xdp_diag_req (AF_XDP, show info).
    let mut req = Vec::new();
    req.extend_from_slice(&36u32.to_ne_bytes());
    req.extend_from_slice(&20u16.to_ne_bytes());
    req.extend_from_slice(&0x301u16.to_ne_bytes());
    req.extend_from_slice(&[0u8; 8]);
    req.extend_from_slice(&[AF_XDP as u8, 0, 0, 0]);
    req.extend_from_slice(&[0u8; 4]);
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&[0u8; 8]);
    // SAFETY: `req` is valid for its length.
    if unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 8192];
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 20 {
        return Err(io::Error::other("no answer from sock_diag"));
    }
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    let errno = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
    match kind {
        // NLMSG_ERROR with an error.
        2 if errno != 0 => Err(io::Error::from_raw_os_error(-errno)),
        _ => Ok(()),
    }
}
