//! The connection table's memory: one allocation of buckets, aligned and advised for
//! transparent huge pages, faulted in at start. A child of [`super`].

use super::{Bucket, State};

/// The buckets: one zeroed allocation aligned to 2 MiB and advised for transparent huge
/// pages (`MADV_HUGEPAGE`), then touched page by page so no page fault happens on the
/// packet path. With 4 KiB pages a 1 Mi-entry IPv4 table (16 MiB) spans 4,096 pages and
/// every lookup of a flow in a cold page also missed the TLB (page walk); with THP it spans
/// 8 (docs/benchmarks.md). An all-zero [`Entry`] is an empty slot, so zeroed memory is an
/// empty table.
pub(super) struct BucketMem<A> {
    ptr: std::ptr::NonNull<Bucket<A>>,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: BucketMem owns its allocation exclusively (like a Box<[Bucket]>).
unsafe impl<A: Send> Send for BucketMem<A> {}
// SAFETY: shared access only hands out `&[Bucket]`.
unsafe impl<A: Sync> Sync for BucketMem<A> {}

const HUGE_PAGE: usize = 2 << 20;

impl<A> BucketMem<A> {
    /// `len` buckets. Panics when `len` buckets cannot be described to the allocator
    /// (their size overflows `isize`): the config caps a table at 2^26 entries, so only a
    /// direct caller (a test or bench) can ask for that; never a slice longer than the
    /// allocation.
    pub(super) fn new(len: usize) -> BucketMem<A> {
        let bytes = len.checked_mul(std::mem::size_of::<Bucket<A>>()).expect("connection table size overflows usize");
        // At least a cache line, so a bucket spans as few lines as its size allows.
        let align = if bytes >= HUGE_PAGE { HUGE_PAGE } else { std::mem::align_of::<Bucket<A>>().max(64) };
        let layout = std::alloc::Layout::from_size_align(bytes.max(std::mem::size_of::<Bucket<A>>()), align)
            .expect("connection table size exceeds what one allocation may hold");
        // Not alloc_zeroed: that would write (fault in) every 4 KiB page before the advice.
        // SAFETY: layout has non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw as *mut Bucket<A>) else {
            std::alloc::handle_alloc_error(layout)
        };
        #[cfg(target_os = "linux")]
        if align == HUGE_PAGE {
            // SAFETY: [raw, raw + size) is our own allocation, 2 MiB aligned; MADV_HUGEPAGE
            // only changes how the kernel backs it (ignored where THP is off).
            unsafe {
                libc::madvise(raw as *mut libc::c_void, layout.size(), libc::MADV_HUGEPAGE);
            }
        }
        // Zero it now (an all-zero table is empty), faulting every page in at start, not
        // on the packet path.
        // SAFETY: the whole allocation is ours and u8 has no invalid values.
        unsafe { std::ptr::write_bytes(raw, 0, layout.size()) };
        const { assert!(State::Empty as u8 == 0) };
        BucketMem { ptr, len, layout }
    }
}

impl<A> std::ops::Deref for BucketMem<A> {
    type Target = [Bucket<A>];
    fn deref(&self) -> &[Bucket<A>] {
        // SAFETY: ptr points at `len` initialised (zeroed = empty) buckets we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<A> std::ops::DerefMut for BucketMem<A> {
    fn deref_mut(&mut self) -> &mut [Bucket<A>] {
        // SAFETY: as in deref, with exclusive access through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<A> Drop for BucketMem<A> {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, self.layout) };
    }
}

