//! The process's allocator: the system's, with a per-thread cache of small blocks.

/// The system allocator with a per-thread cache of small blocks in front of it. The decoders
/// allocate and free many small blocks per record (the `apache-avro` crate: every string and
/// bytes value it reads, about 25 per oceanbase-avro record, all freed at once), more of one
/// size than glibc's own thread cache keeps (7), so most took its slower bins. Blocks of up to
/// 256 bytes are kept here, 64 per 16-byte size class and thread (at most 256 KiB a thread,
/// left to the process when a thread ends), and every such block is allocated at its class's
/// full size, so any block of a class serves any request of it. Zeroed blocks are allocated and
/// then cleared: glibc's `calloc` bypasses its thread cache, and the crate allocates every value
/// it reads zeroed (`vec![0; n]`).
struct Allocator;

const CLASS: usize = 16;
const CLASSES: usize = 16;
const DEPTH: usize = 64;

struct Cache {
    blocks: [[*mut u8; DEPTH]; CLASSES],
    counts: [usize; CLASSES],
}

thread_local! {
    // const-initialised, nothing to drop: no allocation and no destructor behind it
    static CACHE: std::cell::UnsafeCell<Cache> = const {
        std::cell::UnsafeCell::new(Cache { blocks: [[std::ptr::null_mut(); DEPTH]; CLASSES], counts: [0; CLASSES] })
    };
}

/// The size class of a block (None: not cached).
#[inline]
fn class_of(size: usize, align: usize) -> Option<usize> {
    (size > 0 && size <= CLASS * CLASSES && align <= CLASS).then(|| (size - 1) / CLASS)
}

#[inline]
fn class_layout(class: usize, align: usize) -> std::alloc::Layout {
    // SAFETY: align is a power of two no larger than the class size
    unsafe { std::alloc::Layout::from_size_align_unchecked((class + 1) * CLASS, align) }
}

unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let Some(class) = class_of(layout.size(), layout.align()) else { return std::alloc::System.alloc(layout) };
        let cached = CACHE
            .try_with(|c| {
                // SAFETY: this thread's cache, not borrowed anywhere else (no reentry from here)
                let c = &mut *c.get();
                (c.counts[class] > 0).then(|| {
                    c.counts[class] -= 1;
                    c.blocks[class][c.counts[class]]
                })
            })
            .ok()
            .flatten();
        match cached {
            Some(p) => p,
            None => std::alloc::System.alloc(class_layout(class, layout.align())),
        }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // black_box: LLVM would fold a malloc + memset back into calloc
        let p = std::hint::black_box(self.alloc(layout));
        if !p.is_null() {
            std::ptr::write_bytes(p, 0, layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        let Some(class) = class_of(layout.size(), layout.align()) else { return std::alloc::System.dealloc(ptr, layout) };
        let kept = CACHE
            .try_with(|c| {
                // SAFETY: as in `alloc`
                let c = &mut *c.get();
                (c.counts[class] < DEPTH).then(|| {
                    c.blocks[class][c.counts[class]] = ptr;
                    c.counts[class] += 1;
                })
            })
            .ok()
            .flatten();
        if kept.is_none() {
            std::alloc::System.dealloc(ptr, class_layout(class, layout.align()));
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let old = class_of(layout.size(), layout.align());
        match class_of(new_size, layout.align()) {
            // a small block stays small enough for its class: the same block
            Some(new) if old.is_some_and(|old| new <= old) => ptr,
            // a block that becomes small is made as large as its class
            Some(new) => std::alloc::System.realloc(ptr, layout, (new + 1) * CLASS),
            None => std::alloc::System.realloc(ptr, layout, new_size),
        }
    }
}

#[global_allocator]
static ALLOCATOR: Allocator = Allocator;
