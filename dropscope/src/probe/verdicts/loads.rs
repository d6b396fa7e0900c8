//! Program loads on the host, seen without a system call: a perf side-band event per CPU
//! (`bpf_event`, on the software `dummy` event) whose ring's head moves when the kernel loads
//! or unloads a BPF program on that CPU. The program watch reads the heads (memory reads) on
//! each poll and walks the program ids only when one moved.
use std::{
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    ptr::{self, NonNull},
    sync::atomic::{Ordering, fence},
};

use aya_obj::generated::{
    PERF_FLAG_FD_CLOEXEC, perf_event_attr, perf_event_mmap_page, perf_sw_ids::PERF_COUNT_SW_DUMMY,
    perf_type_id::PERF_TYPE_SOFTWARE,
};

/// One CPU's side-band event and its ring (a control page and one data page).
struct Ring {
    _fd: OwnedFd,
    page: NonNull<perf_event_mmap_page>,
    len: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `LoadWatch::open` with this length and is not used
        // after the ring goes.
        unsafe { libc::munmap(self.page.as_ptr().cast(), self.len) };
    }
}

/// Whether BPF programs were loaded or unloaded since the last look.
pub struct LoadWatch {
    rings: Vec<Ring>,
}

// SAFETY: the mappings belong to the watch alone and are read and written only through
// `&mut self`; the kernel's side of them is the perf ring protocol (see `changed`).
unsafe impl Send for LoadWatch {}

impl LoadWatch {
    /// Opens a side-band event on every online CPU (root, or CAP_PERFMON). A CPU that comes
    /// online later is not watched: the program watch's slow look covers it.
    pub fn open() -> io::Result<Self> {
        let cpus = aya::util::online_cpus().map_err(|(_, e)| e)?;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::other("no page size"))?;
        let len = 2 * page;
        let mut rings = Vec::with_capacity(cpus.len());
        for cpu in cpus {
            // SAFETY: perf_event_attr is plain data; zero is its documented initial state.
            let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
            attr.type_ = PERF_TYPE_SOFTWARE as u32;
            attr.size = std::mem::size_of::<perf_event_attr>() as u32;
            attr.config = PERF_COUNT_SW_DUMMY as u64;
            attr.set_bpf_event(1);
            // SAFETY: perf_event_open(2) reads `attr`, which outlives the call; the result is
            // checked.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    ptr::addr_of!(attr),
                    -1 as libc::pid_t,
                    cpu as libc::c_int,
                    -1 as libc::c_int,
                    libc::c_ulong::from(PERF_FLAG_FD_CLOEXEC),
                )
            };
            let fd = libc::c_int::try_from(fd)
                .ok()
                .filter(|fd| *fd >= 0)
                .ok_or_else(io::Error::last_os_error)?;
            // SAFETY: a new descriptor nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: maps the event's ring (its control page and one data page), shared with
            // the kernel, as perf_event_open(2) documents; the result is checked.
            let map = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let page = NonNull::new(map.cast()).ok_or_else(|| io::Error::other("mmap: null"))?;
            rings.push(Ring { _fd: fd, page, len });
        }
        Ok(Self { rings })
    }

    /// Whether a program was loaded or unloaded since the last call (or since the watch was
    /// opened). What the rings hold is consumed unread: the records say only that something
    /// happened, and the program ids say what.
    pub fn changed(&mut self) -> bool {
        let mut changed = false;
        for r in &self.rings {
            let p = r.page.as_ptr();
            // SAFETY: `p` is the ring's control page, mapped as long as `r` lives. The kernel
            // writes `data_head` and reads `data_tail`; the reader reads the head, then (after
            // an acquire fence, as perf_event_open(2) prescribes) consumes up to it by writing
            // the tail, so that the ring never fills and every later record moves the head.
            unsafe {
                let head = ptr::read_volatile(ptr::addr_of!((*p).data_head));
                fence(Ordering::Acquire);
                let tail = ptr::read_volatile(ptr::addr_of!((*p).data_tail));
                if head != tail {
                    changed = true;
                    fence(Ordering::Release);
                    ptr::write_volatile(ptr::addr_of_mut!((*p).data_tail), head);
                }
            }
        }
        changed
    }
}
