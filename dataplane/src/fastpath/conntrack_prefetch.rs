//! [`PrefetchTarget`]: the connection-table buckets a packet's lookup will read, computed
//! for a whole burst and issued a few packets ahead of the lookups (`Worker::poll`,
//! docs/benchmarks.md "conntrack at 1 M flows"). A child of [`super`].

/// The buckets one packet's lookup will read ([`ConnTable::prefetch_target`]): addresses
/// only, never dereferenced (a prefetch is a hint), so a stale target is harmless.
#[derive(Clone, Copy, Debug)]
pub struct PrefetchTarget {
    first: *const u8,
    second: *const u8,
    len: u32,
}

impl PrefetchTarget {
    /// Nothing to prefetch (a packet that is not TCP/UDP over IPv4).
    pub const NONE: PrefetchTarget = PrefetchTarget { first: std::ptr::null(), second: std::ptr::null(), len: 0 };

    /// The buckets at `first` and `second` (null: none), each `len` bytes.
    #[inline(always)]
    pub(super) fn new(first: *const u8, second: *const u8, len: usize) -> PrefetchTarget {
        PrefetchTarget { first, second, len: len as u32 }
    }

    /// Starts loading the target's buckets into the cache (PREFETCHT0 of each line).
    #[inline(always)]
    pub fn issue(&self) {
        for p in [self.first, self.second] {
            if !p.is_null() {
                prefetch_lines(p, self.len as usize);
            }
        }
    }
}

/// Prefetches the cache lines of a bucket of `len` bytes at `p` (two for IPv4's 96-byte
/// buckets, three for IPv6's 192: buckets are 32-byte aligned, so the lines at `p`,
/// `p + 64`, ... cover the bucket; a no-op off x86-64).
#[inline(always)]
fn prefetch_lines(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut off = 0;
        while off < len {
            // SAFETY: PREFETCHT0 is a hint: it never faults and has no architectural
            // effect, whatever the address; the lines are inside one bucket anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}
