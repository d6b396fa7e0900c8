//! The clocks a live session reads: the kernel's monotonic clock (that of BPF timestamps) and
//! the wall clock, both in milliseconds.
use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_MONOTONIC in milliseconds: the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ms() -> u64 {
    // SAFETY: clock_gettime writes into the zeroed timespec we pass and nothing else.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The wall clock in milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
