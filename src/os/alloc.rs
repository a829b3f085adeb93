//! The process's allocator. musl's own gives every group of small blocks back to the kernel as
//! soon as it empties, so a run that builds and drops many small values pays an mmap, a munmap
//! and fresh page faults for each (90 pairs in a 500-file no-op, the largest cost after the
//! files' stats: docs/performance.md, H5). Small blocks therefore come from dlmalloc's arena,
//! which keeps freed memory for the next allocation; large ones stay musl's, which maps each
//! alone and unmaps it when freed, so a big run's buffers do not stay in the arena afterwards
//! (dlmalloc alone raised the 20,000-file converge's peak by 1.8 MiB).

use std::alloc::{GlobalAlloc, Layout, System};

use dlmalloc::GlobalDlmalloc;

/// From this size on, a block is musl's (its own threshold for mapping a block alone is 128 KiB).
const LARGE: usize = 128 * 1024;

/// Small blocks from dlmalloc, large ones from the system, chosen by the block's size: the
/// layout given back when freeing or growing is the one the block was made with, so both sides
/// agree which allocator holds it.
pub struct Allocator;

// Not under the fuzzers: their address sanitizer checks blocks that the C library's allocator
// hands out, which dlmalloc's arena would hide from it.
#[cfg(not(fuzzing))]
#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

fn is_large(size: usize) -> bool {
    size >= LARGE
}

// SAFETY: every call is passed on to one of two allocators that uphold GlobalAlloc's contract,
// always the same one for a given block: `is_large` of the size it was made with, which
// GlobalAlloc's callers give back unchanged; a block that crosses `LARGE` when resized is moved.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout has a non-zero size, as GlobalAlloc::alloc requires.
        unsafe {
            match is_large(layout.size()) {
                true => System.alloc(layout),
                false => GlobalDlmalloc.alloc(layout),
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe {
            match is_large(layout.size()) {
                true => System.alloc_zeroed(layout),
                false => GlobalDlmalloc.alloc_zeroed(layout),
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was made by this allocator with `layout`, so by the side chosen here.
        unsafe {
            match is_large(layout.size()) {
                true => System.dealloc(ptr, layout),
                false => GlobalDlmalloc.dealloc(ptr, layout),
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (is_large(layout.size()), is_large(new_size)) {
            // SAFETY: `ptr` was made with `layout` by the side both sizes belong to.
            (true, true) => unsafe { System.realloc(ptr, layout, new_size) },
            // SAFETY: as above.
            (false, false) => unsafe { GlobalDlmalloc.realloc(ptr, layout, new_size) },
            _ => {
                // SAFETY: GlobalAlloc::realloc's caller guarantees `new_size`, rounded up to
                // `layout.align()`, does not overflow isize, and is non-zero.
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: a non-zero size (above).
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    // SAFETY: both blocks are valid for the smaller of their sizes and distinct;
                    // `ptr` was made with `layout` and is freed once, here.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                new
            }
        }
    }
}
