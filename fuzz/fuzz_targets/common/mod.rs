//! What the fuzz targets share: a counting allocator that checks a reader's memory budget, and
//! the frame layout to fix a recording's checksums after a mutation (so that it reaches the
//! payload decoders instead of stopping at the checksum), and a byte source for generators.
// Each target uses a part of it.
#![allow(dead_code)]
use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicUsize, Ordering},
};

use dropscope::record::budget::MEMORY_BUDGET;

/// Heap bytes in use, and the most in use since the last reset.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting the bytes in use.
struct Counting;

impl Counting {
    fn grew(by: usize) {
        let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            Self::grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f`, failing if it held more than the reader's memory budget at any moment.
pub fn within_budget<T>(f: impl FnOnce() -> T) -> T {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    assert!(
        peak <= MEMORY_BUDGET,
        "reading one input held {peak} bytes, beyond the budget of {MEMORY_BUDGET}"
    );
    out
}

pub const FILE_HEADER: usize = 16;
pub const FRAME_HEADER: usize = 20;

/// Rewrites every complete frame's CRC32 (over header bytes 0..16, then the payload).
pub fn fix_checksums(b: &mut [u8]) {
    let mut at = FILE_HEADER;
    while at + FRAME_HEADER <= b.len() {
        let len = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
        let Some(end) = (at + FRAME_HEADER)
            .checked_add(len)
            .filter(|&e| e <= b.len())
        else {
            return;
        };
        let mut h = crc32fast::Hasher::new();
        h.update(&b[at..at + 16]);
        h.update(&b[at + FRAME_HEADER..end]);
        b[at + 16..at + 20].copy_from_slice(&h.finalize().to_le_bytes());
        at = end;
    }
}

/// A byte source that yields zeros when exhausted.
pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    /// Two bytes, little-endian.
    pub fn u16(&mut self) -> u64 {
        u64::from(u16::from_le_bytes([self.byte(), self.byte()]))
    }

    pub fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    pub fn u64(&mut self) -> u64 {
        // Mostly small numbers, sometimes huge ones.
        match self.byte() {
            0..=200 => u64::from(self.byte()),
            201..=250 => u64::from(u16::from_le_bytes([self.byte(), self.byte()])) << 8,
            _ => u64::from_le_bytes(std::array::from_fn(|_| self.byte())),
        }
    }
}
