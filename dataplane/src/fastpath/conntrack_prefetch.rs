//! [`PrefetchTarget`]: the connection-table buckets a packet's lookup will read, computed
//! for a whole burst and issued a few packets ahead of the lookups (`Worker::poll`,
//! docs/benchmarks.md "conntrack at 1 M flows"), carrying the key's bucket hash so the lookup
//! does not hash again (one hash per packet). A child of [`super`].

/// The buckets one packet's lookup will read ([`ConnTable::prefetch_target`]): their
/// addresses, never dereferenced (a prefetch is a hint), and the [`Hash`] of the key, which
/// the lookup reuses instead of hashing the key again ([`ConnTable::expect`]).
#[derive(Clone, Copy, Debug)]
pub struct PrefetchTarget {
    first: *const u8,
    second: *const u8,
    len: u32,
    pub(super) hash: Hash,
}

/// What the bucket hash of one key computed: the two words it mixed and the two buckets
/// they gave, with the table's seed and mask. The buckets are a function of the words,
/// seed and mask alone, so a key with the same words in a table with the same seed and
/// mask has these buckets: reusing them can never be wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hash {
    pub(super) words: (u64, u64),
    pub(super) table: (u64, u64),
    pub(super) buckets: (u32, u32),
}

impl Hash {
    /// Matches no key (its table word pair is one no table has: a mask is `2^n - 1`).
    pub(super) const NONE: Hash = Hash { words: (0, 0), table: (0, u64::MAX - 1), buckets: (0, 0) };
}

impl PrefetchTarget {
    /// Nothing to prefetch (a packet that is not TCP/UDP over IPv4).
    pub const NONE: PrefetchTarget = PrefetchTarget { first: std::ptr::null(), second: std::ptr::null(), len: 0, hash: Hash::NONE };

    /// The buckets at `first` and `second` (null: none), each `len` bytes, of a key whose
    /// bucket hash is `hash`.
    #[inline(always)]
    pub(super) fn new(first: *const u8, second: *const u8, len: usize, hash: Hash) -> PrefetchTarget {
        PrefetchTarget { first, second, len: len as u32, hash }
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
