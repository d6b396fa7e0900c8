//! The few BPF syscalls aya does not offer: batch map reads, program run statistics, mmap.
use std::{
    io,
    marker::PhantomData,
    mem::{size_of, zeroed},
    os::fd::{AsRawFd, BorrowedFd},
    ptr::NonNull,
};

use aya::Pod;
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};

pub(crate) fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<()> {
    bpf_ret(cmd, attr).map(drop)
}

/// A BPF command and what it returned (a new file descriptor, for some).
pub(crate) fn bpf_ret(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, initialised bpf_attr of the size passed; the kernel reads and
    // writes only within it and within the buffers its fields point to, which callers keep alive.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            size_of::<bpf_attr>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Entries of a map: each key with its value (on every possible CPU, for a per-CPU map).
pub type Entries<K, V> = Vec<(K, Vec<V>)>;

/// Reads every entry of a hash map in as few syscalls as the kernel allows
/// (`BPF_MAP_LOOKUP_BATCH`, or `BPF_MAP_LOOKUP_AND_DELETE_BATCH` with `delete`), summing nothing:
/// each key comes with its value, or with its per-CPU values when `per_cpu` gives the number
/// of possible CPUs.
pub fn batch<K: Pod, V: Pod>(
    fd: BorrowedFd<'_>,
    capacity: usize,
    per_cpu: Option<usize>,
    delete: bool,
) -> io::Result<Entries<K, V>> {
    // Per-CPU values are 8-byte strided; a plain map's values are packed.
    let (ncpus, stride) = match per_cpu {
        Some(n) => (n, size_of::<V>().next_multiple_of(8)),
        None => (1, size_of::<V>()),
    };
    let chunk = capacity.clamp(1, 4096);
    // SAFETY: K and V are Pod: all-zero bytes are valid values.
    let mut keys: Vec<K> = vec![unsafe { zeroed() }; chunk];
    let mut values = vec![0u8; chunk * ncpus * stride];
    let mut out = Vec::new();
    let mut token = [0u64; 2];
    let mut first = true;
    loop {
        // SAFETY: bpf_attr is plain data; zero is its documented initial state.
        let mut attr: bpf_attr = unsafe { zeroed() };
        attr.batch.in_batch = if first { 0 } else { token.as_ptr() as u64 };
        attr.batch.out_batch = token.as_mut_ptr() as u64;
        attr.batch.keys = keys.as_mut_ptr() as u64;
        attr.batch.values = values.as_mut_ptr() as u64;
        attr.batch.count = chunk as u32;
        attr.batch.map_fd = fd.as_raw_fd() as u32;
        let cmd = if delete {
            bpf_cmd::BPF_MAP_LOOKUP_AND_DELETE_BATCH
        } else {
            bpf_cmd::BPF_MAP_LOOKUP_BATCH
        };
        let res = bpf(cmd, &mut attr);
        // SAFETY: the kernel wrote `count` back into the batch variant.
        let n = unsafe { attr.batch.count } as usize;
        for (i, key) in keys.iter().enumerate().take(n.min(chunk)) {
            let base = i * ncpus * stride;
            let per_cpu = (0..ncpus)
                .map(|c| {
                    let at = base + c * stride;
                    // SAFETY: `at + size_of::<V>()` lies within `values`; V is Pod, so any bytes
                    // are a valid V; read_unaligned copes with the byte buffer's alignment.
                    unsafe { values.as_ptr().add(at).cast::<V>().read_unaligned() }
                })
                .collect();
            out.push((*key, per_cpu));
        }
        match res {
            Ok(()) => first = false,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
            Err(e) => return Err(e),
        }
    }
}

/// Sets `key` to `value` in a (non-per-CPU) map: one syscall.
pub fn update<K: Pod, V: Pod>(fd: BorrowedFd<'_>, key: &K, value: &V) -> io::Result<()> {
    // SAFETY: bpf_attr is plain data; zero is its documented initial state.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.__bindgen_anon_2.map_fd = fd.as_raw_fd() as u32;
    attr.__bindgen_anon_2.key = (key as *const K) as u64;
    attr.__bindgen_anon_2.__bindgen_anon_1.value = (value as *const V) as u64;
    bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr)
}

/// The ids of the programs attached to device `ifindex` of the calling thread's namespace at
/// `attach_type` (`BPF_PROG_QUERY`: tcx, 6.6+), at most `max`.
pub fn query_device(ifindex: u32, attach_type: u32, max: usize) -> io::Result<Vec<u32>> {
    let mut ids = vec![0u32; max];
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.query.__bindgen_anon_1.target_ifindex = ifindex;
    attr.query.attach_type = attach_type;
    attr.query.prog_ids = ids.as_mut_ptr() as u64;
    attr.query.__bindgen_anon_2.prog_cnt = max as u32;
    bpf(bpf_cmd::BPF_PROG_QUERY, &mut attr)?;
    // SAFETY: the kernel wrote the count back into the variant it was given.
    let n = unsafe { attr.query.__bindgen_anon_2.prog_cnt } as usize;
    ids.truncate(n.min(max));
    Ok(ids)
}

/// Run statistics of a loaded program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgStats {
    /// Cumulative run time in ns (counted only while BPF stats are enabled).
    pub run_time_ns: u64,
    /// Cumulative runs (counted only while BPF stats are enabled).
    pub run_cnt: u64,
    /// Runs skipped because the program was already running on that CPU.
    pub recursion_misses: u64,
}

/// Reads a program's run statistics (`BPF_OBJ_GET_INFO_BY_FD`): one syscall.
pub fn prog_stats(fd: BorrowedFd<'_>) -> io::Result<ProgStats> {
    // SAFETY: bpf_prog_info is plain data; zero is a valid initial state.
    let mut info: bpf_prog_info = unsafe { zeroed() };
    // SAFETY: as above for bpf_attr.
    let mut attr: bpf_attr = unsafe { zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = size_of::<bpf_prog_info>() as u32;
    attr.info.info = &mut info as *mut bpf_prog_info as u64;
    bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(ProgStats {
        run_time_ns: info.run_time_ns,
        run_cnt: info.run_cnt,
        recursion_misses: info.recursion_misses,
    })
}

/// An `mmap` of a `BPF_F_MMAPABLE` array map: reads and writes with no syscall.
pub struct MmapArray<T> {
    ptr: NonNull<T>,
    len: usize,
    bytes: usize,
    _t: PhantomData<T>,
}

// SAFETY: the mapping is plain shared memory owned by this value; accesses are volatile copies.
unsafe impl<T: Send> Send for MmapArray<T> {}

impl<T: Pod> MmapArray<T> {
    /// Maps `len` elements of the array map behind `fd`, read-write.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        assert!(
            size_of::<T>().is_multiple_of(8),
            "array values are 8-byte strided"
        );
        // The kernel maps whole pages of the map's own page size: 4 KiB on x86_64, and 4, 16
        // or 64 KiB on arm64, as the kernel was configured.
        let bytes = (len * size_of::<T>()).next_multiple_of(page_size());
        // SAFETY: mapping a BPF array map fd with the kernel's required MAP_SHARED; the result is
        // checked before use and unmapped in Drop.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(addr.cast::<T>()).ok_or_else(|| io::Error::other("mmap: null"))?;
        Ok(Self {
            ptr,
            len,
            bytes,
            _t: PhantomData,
        })
    }

    /// A copy of element `i` (volatile: the kernel writes concurrently).
    pub fn get(&self, i: usize) -> T {
        assert!(i < self.len);
        // SAFETY: i < len, inside the mapping; T is Pod, so any bytes are valid.
        unsafe { self.ptr.as_ptr().add(i).read_volatile() }
    }

    /// Writes element `i`.
    pub fn set(&self, i: usize, value: T) {
        assert!(i < self.len);
        // SAFETY: i < len, inside the writable shared mapping.
        unsafe { self.ptr.as_ptr().add(i).write_volatile(value) }
    }

    /// Number of elements mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no element is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The kernel's page size (`sysconf(_SC_PAGESIZE)`), 4 KiB if it cannot say.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; a negative result (an error) is handled.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| *p > 0)
        .unwrap_or(4096)
}

impl MmapArray<u64> {
    /// Element `i`, read as one atomic load: a counter with one writer is read whole and,
    /// read again, never goes backwards.
    pub fn load_u64(&self, i: usize) -> u64 {
        assert!(i < self.len);
        // SAFETY: i < len, inside the mapping; the mapping is page-aligned, so every u64 element
        // is 8-byte aligned; the kernel writes it only with plain aligned 64-bit stores.
        let atomic = unsafe { std::sync::atomic::AtomicU64::from_ptr(self.ptr.as_ptr().add(i)) };
        atomic.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<T> Drop for MmapArray<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped in `new`, once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}
