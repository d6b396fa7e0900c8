//! Heap bytes held by the current thread, for tests that bound what a reader holds per byte of
//! input: the test binary's allocator wraps the system's and counts each thread's allocations.
use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

/// The system allocator, counting what each thread holds and the most it held.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(bytes: isize) {
    // A thread being torn down counts nothing more.
    let _ = HELD.try_with(|h| {
        let now = h.get() + bytes;
        h.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; the counting touches
// only thread-local cells initialized without allocating.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (the system's) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, with the caller's new size.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as the block's new size: the system grows a large block in place or by
            // moving its pages, and copies only small ones.
            add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The most heap bytes the current thread held at once while `f` ran, over what it held when
/// `f` started, and `f`'s result.
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let start = HELD.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get);
    ((peak - start).max(0) as usize, out)
}
