//! Buffers the kernel fills through a pointer (an ioctl's answer) that end at an inaccessible
//! page: an answer longer than the buffer (a driver whose statistics grew between the ioctl
//! that counted them and the one that reads them, which a user who owns a namespace can
//! cause) fails with `EFAULT` at the guard instead of writing over dropscope's heap.
use std::io;

/// A reusable buffer whose last byte is followed by a `PROT_NONE` page.
pub struct Guarded {
    base: *mut libc::c_void,
    /// Bytes mapped, the guard page included.
    mapped: usize,
    /// Bytes usable before the guard.
    capacity: usize,
}

fn page_size() -> usize {
    // SAFETY: sysconf with a constant name reads a system value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(4096)
}

impl Guarded {
    /// A buffer of at least `capacity` usable bytes.
    pub fn new(capacity: usize) -> io::Result<Self> {
        let page = page_size();
        let capacity = capacity.max(1).div_ceil(page) * page;
        let mapped = capacity + page;
        // SAFETY: a new private anonymous mapping (no address hint, no file); checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let guarded = Self {
            base,
            mapped,
            capacity,
        };
        // SAFETY: the last page of the mapping just made, which nothing else refers to.
        let rc = unsafe { libc::mprotect(base.cast::<u8>().add(capacity).cast(), page, 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(guarded)
    }

    /// The last `len` bytes before the guard (the buffer grows to hold them), so that any
    /// byte written past them faults. What they hold is whatever the last use left.
    pub fn tail(&mut self, len: usize) -> io::Result<&mut [u8]> {
        if len > self.capacity {
            *self = Self::new(len)?;
        }
        // SAFETY: `capacity` bytes from `base` are mapped readable and writable for as long
        // as `self` lives, and this is the only reference to them (borrowed from `&mut self`).
        let all = unsafe { std::slice::from_raw_parts_mut(self.base.cast::<u8>(), self.capacity) };
        Ok(&mut all[self.capacity - len..])
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made by `new`, unmapped once; no slice of it outlives `self`.
        unsafe { libc::munmap(self.base, self.mapped) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_cannot_write_past_the_end() -> anyhow::Result<()> {
        let mut buf = Guarded::new(100)?;
        let mut fds = [0; 2];
        // SAFETY: pipe(2) into a two-int array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let sent = [7u8; 200];
        // SAFETY: writes 200 bytes from a 200-byte array to the pipe just made.
        let n = unsafe { libc::write(fds[1], sent.as_ptr().cast(), sent.len()) };
        assert_eq!(n, 200);
        let tail = buf.tail(50)?;
        // The kernel is told the buffer is 200 bytes long: it copies what fits before the
        // guard and stops there (a short read or EFAULT), never past it.
        // SAFETY: a read into memory dropscope mapped; the guard page bounds what is written.
        let n = unsafe { libc::read(fds[0], tail.as_mut_ptr().cast(), 200) };
        assert!(n == 50 || n == -1, "read {n}");
        if n == 50 {
            assert!(tail.iter().all(|b| *b == 7));
        }
        // SAFETY: closing the two descriptors made above.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        // Growing remaps; the tail still ends at the guard.
        let big = buf.tail(10_000)?;
        assert_eq!(big.len(), 10_000);
        big[9_999] = 1;
        Ok(())
    }
}
