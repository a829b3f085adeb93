//! The process's allocator. musl's own gives every group of small blocks back to the kernel as
//! soon as it empties, so a command that builds and drops many small values pays an mmap, a
//! munmap and fresh page faults for each (90 pairs in a 500-file no-op, the largest cost after
//! the files' stats: docs/performance.md, H5). The commands a person or a script runs, which end
//! soon after, therefore take their small blocks from an arena (dlmalloc) that keeps freed
//! memory for the next block and never gives it back (`use_arena`). The service does not: it
//! lives on, and an arena keeps the high-water mark of its largest run (a 20,000-file run left
//! it at 8.5 MiB idle instead of 2.7); musl's gives that back. Large blocks (`LARGE`) are always
//! musl's, which maps each alone and unmaps it when freed.
//!
//! Which allocator made a block is told by its address: the arena's memory is one range of
//! address space reserved at its first block, so a block made before `use_arena` (musl's) is
//! freed to musl whatever the time, and one the arena could not make comes from musl too.

// Under cargo fuzz the allocator is not installed (below), so nothing here is used.
#![cfg_attr(fuzzing, allow(dead_code))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dlmalloc::Dlmalloc;

/// From this size on, a block is musl's, mapped alone and unmapped when freed. Above musl's own
/// threshold (128 KiB): the blocks a run makes and frees once per chunk (a chunk's observations,
/// 2,048 of some 170 bytes) are then the arena's, reused by the next chunk, not mapped and
/// faulted in afresh each time (a 20,000-file no-op: 3,400 page faults instead of 4,100).
const LARGE: usize = 512 * 1024;

/// Address space the arena may use: reserved without memory behind it, given memory as the arena
/// grows (a 64 MiB declaration of small files needs some 200 MiB of small blocks).
const RESERVED: usize = 16 << 30;

/// How much the arena grows by at once: a system call per 256 KiB of small blocks.
const GROWTH: usize = 256 * 1024;

/// Whether small blocks come from the arena (`use_arena`); not before, and never in the service.
static ARENA_ON: AtomicBool = AtomicBool::new(false);

/// Where the reserved range starts (0 until the arena's first block).
static BASE: AtomicUsize = AtomicUsize::new(0);

static ARENA: Locked = Locked {
    busy: AtomicBool::new(false),
    arena: UnsafeCell::new({
        let mut arena = Dlmalloc::new_with_allocator(Region {
            used: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
        });
        arena.set_granularity(GROWTH);
        arena
    }),
};

/// The arena behind a lock of its own: std's `Mutex` checks for poisoning around its futex on
/// every lock and unlock, two calls per block that opt-level s does not inline (some 0.4 ms of
/// a 20,000-file no-op). Held only inside one call of the allocator, which never panics or
/// calls out, and mesh-host allocates from one thread, so it is not contended in practice; a
/// second thread would wait, spinning.
struct Locked {
    busy: AtomicBool,
    arena: UnsafeCell<Dlmalloc<Region>>,
}

// SAFETY: the arena is reached only through `Locked::lock`, whose guard is the only one while
// `busy` is set, so no two threads reach it at once.
unsafe impl Sync for Locked {}

impl Locked {
    #[inline]
    fn lock(&self) -> Guard<'_> {
        while (self.busy)
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        Guard(self)
    }
}

/// The arena, locked until dropped.
struct Guard<'l>(&'l Locked);

impl std::ops::Deref for Guard<'_> {
    type Target = Dlmalloc<Region>;
    #[inline]
    fn deref(&self) -> &Dlmalloc<Region> {
        // SAFETY: this guard holds the lock (`busy`), so nothing else reaches the arena.
        unsafe { &*self.0.arena.get() }
    }
}

impl std::ops::DerefMut for Guard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Dlmalloc<Region> {
        // SAFETY: as for `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.0.arena.get() }
    }
}

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

/// Small blocks come from the arena from now on (a command that ends soon after; never the
/// service).
pub fn use_arena() {
    ARENA_ON.store(true, Ordering::Relaxed);
}

/// Drops `value`, or, in a command (the arena on), which ends soon after, leaves it to the
/// process's exit: a large run's declaration or ledger is thousands of blocks, which exit frees
/// at once where dropping walks and frees each (some 1.5 ms of a 20,000-file no-op). The
/// service drops it.
pub fn drop_or_leave<T>(value: T) {
    match ARENA_ON.load(Ordering::Relaxed) {
        true => std::mem::forget(value),
        false => drop(value),
    }
}

#[inline]
fn arena() -> Guard<'static> {
    ARENA.lock()
}

/// Whether `ptr` is in the arena's range (then the arena made it).
#[inline]
fn in_arena(ptr: *mut u8) -> bool {
    let base = BASE.load(Ordering::Acquire);
    base != 0 && (ptr as usize).wrapping_sub(base) < RESERVED
}

#[inline]
fn is_small(size: usize) -> bool {
    size < LARGE && ARENA_ON.load(Ordering::Relaxed)
}

/// The arena's memory: the reserved range, given out from its start and never taken back.
/// Used only under `ARENA`'s lock.
struct Region {
    /// Bytes of the range given to the arena so far.
    used: AtomicUsize,
    /// The range could not be reserved: the arena makes nothing.
    failed: AtomicBool,
}

impl Region {
    /// The range's start, reserved at the first call.
    fn base(&self) -> Option<usize> {
        match BASE.load(Ordering::Acquire) {
            0 if self.failed.load(Ordering::Relaxed) => None,
            0 => {
                let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
                // SAFETY: a fresh anonymous mapping with no access, placed by the kernel: it
                // overlaps nothing of the process.
                let at = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        RESERVED,
                        libc::PROT_NONE,
                        flags,
                        -1,
                        0,
                    )
                };
                if at == libc::MAP_FAILED {
                    self.failed.store(true, Ordering::Relaxed);
                    return None;
                }
                BASE.store(at as usize, Ordering::Release);
                Some(at as usize)
            }
            base => Some(base),
        }
    }
}

// SAFETY: `alloc` gives out each part of the reserved range once, readable and writable, never
// overlapping another; nothing is ever unmapped or moved (`remap`, `free_part`, `free` refuse).
unsafe impl dlmalloc::Allocator for Region {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let none = (std::ptr::null_mut(), 0, 0);
        let Some(base) = self.base() else {
            return none;
        };
        let used = self.used.load(Ordering::Relaxed);
        let size = size.next_multiple_of(GROWTH);
        if size > RESERVED - used {
            return none;
        }
        let at = (base + used) as *mut libc::c_void;
        // SAFETY: [at, at + size) lies inside the reserved range and was never given out.
        if unsafe { libc::mprotect(at, size, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            return none;
        }
        // The growth's memory in one system call: the blocks carved from it would fault each
        // page in alone. Only an optimisation (a kernel before 5.14 refuses it; they fault).
        // SAFETY: [at, at + size) is the part just made readable and writable, holding nothing;
        // MADV_POPULATE_WRITE maps its pages as writes would, changing no byte.
        unsafe { libc::madvise(at, size, libc::MADV_POPULATE_WRITE) };
        self.used.store(used + size, Ordering::Relaxed);
        (at.cast(), size, 0)
    }

    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        std::ptr::null_mut()
    }

    fn free_part(&self, _ptr: *mut u8, _old: usize, _new: usize) -> bool {
        false
    }

    fn free(&self, _ptr: *mut u8, _size: usize) -> bool {
        false
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        false
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        4096
    }
}

/// Small blocks from the arena once `use_arena` was called, everything else from musl.
pub struct Allocator;

// Not under the fuzzers: their address sanitizer checks blocks that the C library's allocator
// hands out, which the arena would hide from it.
#[cfg(not(fuzzing))]
#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

// SAFETY: each block is made by the arena or by musl and given back to the one that made it,
// told by its address (`in_arena`); a block that leaves the arena's sizes is moved.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_small(layout.size()) {
            // SAFETY: a non-zero size, as GlobalAlloc::alloc's caller guarantees.
            let block = unsafe { arena().malloc(layout.size(), layout.align()) };
            if !block.is_null() {
                return block;
            }
        }
        // SAFETY: as above.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_small(layout.size()) {
            // SAFETY: as for `alloc`.
            let block = unsafe { arena().calloc(layout.size(), layout.align()) };
            if !block.is_null() {
                return block;
            }
        }
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match in_arena(ptr) {
            // SAFETY: the arena made `ptr` with `layout`'s size and alignment.
            true => unsafe { arena().free(ptr, layout.size(), layout.align()) },
            // SAFETY: musl made `ptr` with `layout`.
            false => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (align, old_size) = (layout.align(), layout.size());
        match (in_arena(ptr), new_size < LARGE) {
            (true, true) => {
                // SAFETY: the arena made `ptr` with `layout`; `new_size` is non-zero.
                let block = unsafe { arena().realloc(ptr, old_size, align, new_size) };
                if !block.is_null() {
                    return block;
                }
            }
            // SAFETY: musl made `ptr` with `layout`; it stays musl's, whatever its size.
            (false, _) => return unsafe { System.realloc(ptr, layout, new_size) },
            (true, false) => {}
        }
        // SAFETY: GlobalAlloc::realloc's caller guarantees `new_size`, rounded up to `align`,
        // does not overflow isize, and is non-zero.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, align) };
        // SAFETY: a non-zero size (above).
        let block = unsafe { self.alloc(new_layout) };
        if !block.is_null() {
            // SAFETY: both blocks are valid for the smaller of their sizes and distinct; `ptr`,
            // made with `layout`, is freed once, here.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, block, old_size.min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks made before the arena was in use, in it, and moved across the size that divides
    /// them, are each given back to their maker with their bytes kept.
    #[test]
    fn blocks_go_back_to_their_maker_across_the_switch_and_sizes() {
        let before: Vec<u8> = (0..100u8).collect();
        use_arena();
        let mut small: Vec<u8> = (0..200u8).collect();
        assert!(
            in_arena(small.as_mut_ptr()),
            "a small block after the switch"
        );
        let mut grown = small.clone();
        grown.resize(LARGE + 1, 7);
        assert!(!in_arena(grown.as_mut_ptr()), "grown past LARGE: musl's");
        grown.truncate(10);
        grown.shrink_to_fit();
        assert_eq!(grown, (0..10u8).collect::<Vec<_>>());
        assert_eq!(before, (0..100u8).collect::<Vec<_>>());
        drop(before);
        small.extend_from_slice(&[1, 2, 3]);
        assert_eq!(small.len(), 203);
    }
}
