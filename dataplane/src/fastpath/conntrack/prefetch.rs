//! The connection table's bucket hash, and [`PrefetchTarget`]: the buckets a packet's
//! lookup will read, computed for a whole burst and issued a few packets ahead of the
//! lookups (the general path's pipelined prefetch, as the `established_burst32_pipelined`
//! bench runs it; `Worker::poll`'s vector path hashes and loads a burst's buckets in its
//! stage 2 instead, `conntrack/fast.rs`), carrying the key's bucket hash so the lookup
//! does not hash again (one hash per packet). A child of [`super`].

use super::{Bucket, ConnTable};
use super::CtKey;
use spillway_shared::flow::{fmix64, FlowAddr};

impl<A: FlowAddr> ConnTable<A> {
    /// The key's two candidate buckets (distinct whenever there are two buckets or more):
    /// one seeded multiply-xor of two words and one murmur3 finaliser; the low bits pick
    /// the first bucket, the high bits the second. IPv4: the words are the seeded client
    /// address and (client port, service number). IPv6: the address's high half goes
    /// through a finaliser with the seed first and its low half is folded in after
    /// ([`Self::buckets_of_words`]), two finalisers in all. The seed enters before any
    /// mixing, so without it nobody can aim keys at a bucket.
    #[inline]
    pub(super) fn buckets_of(&self, k: &CtKey<A>) -> (usize, usize) {
        self.buckets_of_words(self.words(k))
    }

    /// The raw words of `k` that [`Self::buckets_of_words`] hashes, and that a lookup
    /// compares with the prefetch pass's [`Hash`] to reuse its buckets: IPv4
    /// `[(client << 32) ^ seed, port << 16 | service, 0]` (one shift and xor); IPv6 `[the
    /// client address's high and low halves, port << 16 | service]` (no mixing at all,
    /// so a hit costs three compares instead of hashing a 128-bit address again).
    #[inline(always)]
    pub(super) fn words(&self, k: &CtKey<A>) -> [u64; 3] {
        let b = (u64::from(k.sport) << 16) | u64::from(k.service);
        if A::BITS == 128 {
            let (hi, lo) = k.src.halves();
            [hi, lo, b]
        } else {
            [A::pair_word(k.src, A::default(), self.seed), b, 0]
        }
    }

    #[inline(always)]
    fn buckets_of_words(&self, w: [u64; 3]) -> (usize, usize) {
        let (a, b) = if A::BITS == 128 { (self.mix_high(w[0]) ^ w[1], w[2]) } else { (w[0], w[1]) };
        self.buckets_of_pair(a, b)
    }

    /// An IPv6 key's high address half as [`Self::buckets_of_words`] mixes it (with the
    /// table's seed): the part a run of keys from one /64 shares
    /// ([`ConnTable::bucket_pair6_memo`]).
    #[inline(always)]
    pub(super) fn mix_high(&self, hi: u64) -> u64 {
        fmix64(hi ^ self.seed)
    }

    /// The bucket pair of the two words `(a, b)` [`Self::buckets_of_words`] reduces a key to.
    #[inline(always)]
    pub(super) fn buckets_of_pair(&self, a: u64, b: u64) -> (usize, usize) {
        let x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_add(self.seed.rotate_left(32));
        let h = fmix64(x);
        let b1 = (h & self.mask) as usize;
        let mut b2 = ((h >> 32) & self.mask) as usize;
        if b2 == b1 {
            b2 = b1 ^ (self.mask as usize & 1);
        }
        (b1, b2)
    }

    /// What names this table's bucket function beside the words: its seed, and its mask
    /// with the top bit set for an IPv6 table (the families hash their words differently,
    /// so a target of one family's table must never match the other's, even with the same
    /// seed). A mask is at most 2^32 - 1, so the bit is free.
    #[inline(always)]
    pub(super) fn table_id(&self) -> (u64, u64) {
        (self.seed, if A::BITS == 128 { self.mask | 1 << 63 } else { self.mask })
    }

    /// [`Self::buckets_of`] for the packet path: the buckets the prefetch pass computed
    /// when `k` is the key it was given ([`ConnTable::expect`]), else hashed now.
    #[inline(always)]
    pub(super) fn pair(&self, k: &CtKey<A>) -> (usize, usize) {
        let words = self.words(k);
        let h = &self.hint;
        // An IPv4 key's third word is always 0: not compared.
        let same = h.words[0] == words[0] && h.words[1] == words[1] && (A::BITS != 128 || h.words[2] == words[2]);
        if same && h.table == self.table_id() {
            return (h.buckets.0 as usize, h.buckets.1 as usize);
        }
        self.buckets_of_words(words)
    }

    /// Tells the table the next lookup is for the key of `t` (a target of this table,
    /// [`ConnTable::prefetch_target`]): that lookup, and an insertion after it, take the
    /// key's buckets from `t` instead of hashing the key again. A lookup for another key
    /// hashes as usual, so a stale or foreign target costs a compare, never a wrong answer
    /// (the buckets depend only on the hashed words, the family, the seed and the mask,
    /// all compared: [`Self::table_id`]).
    #[inline(always)]
    pub fn expect(&mut self, t: &PrefetchTarget) {
        self.hint = t.hash;
    }


    /// Where `k`'s lookup will read: its first-choice bucket (all of its cache lines), and
    /// with `both` its second: for packets that will insert (a SYN), whose insertion reads
    /// the second bucket when the first is full — always the case in a SYN flood against a
    /// full table. The pipelined prefetch computes the targets of a whole burst first and
    /// issues them a few packets ahead of their lookups ([`PrefetchTarget::issue`],
    /// `worker::PREFETCH_DISTANCE`), so the DRAM misses of a large table overlap with the
    /// processing of earlier packets instead of being waited for (docs/benchmarks.md,
    /// "conntrack at 1 M flows").
    #[inline]
    pub fn prefetch_target(&self, k: &CtKey<A>, both: bool) -> PrefetchTarget {
        let words = self.words(k);
        let (b1, b2) = self.buckets_of_words(words);
        let at = |b: usize| self.buckets.get(b).map_or(std::ptr::null(), |bk| bk as *const Bucket<A> as *const u8);
        let hash = Hash { words, table: self.table_id(), buckets: (b1 as u32, b2 as u32) };
        let mut t = PrefetchTarget::new(at(b1), if both { at(b2) } else { std::ptr::null() }, std::mem::size_of::<Bucket<A>>(), hash);
        t.ipv6 = A::BITS == 128;
        t
    }

}

/// The buckets one packet's lookup will read ([`ConnTable::prefetch_target`]): their
/// addresses, never dereferenced (a prefetch is a hint), and the [`Hash`] of the key, which
/// the lookup reuses instead of hashing the key again ([`ConnTable::expect`]).
#[derive(Clone, Copy, Debug)]
pub struct PrefetchTarget {
    first: *const u8,
    second: *const u8,
    len: u32,
    /// A target of an IPv6 table (`ConnTable<u128>`).
    ipv6: bool,
    pub(super) hash: Hash,
}

/// What the bucket hash of one key computed: the raw words it mixed (`ConnTable::words`)
/// and the two buckets they gave, with the table's family, seed and mask (`table`,
/// `ConnTable::table_id`). The buckets are a function of the words, family, seed and mask
/// alone, so a key with the same words in a table with the same `table` has these
/// buckets: reusing them can never be wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hash {
    pub(super) words: [u64; 3],
    pub(super) table: (u64, u64),
    pub(super) buckets: (u32, u32),
}

impl Hash {
    /// Matches no key (its table word pair is one no table has: a mask is `2^n - 1`).
    pub(super) const NONE: Hash = Hash { words: [0; 3], table: (0, u64::MAX - 1), buckets: (0, 0) };
}

impl PrefetchTarget {
    /// Nothing to prefetch (a packet that is not TCP/UDP of a service, or a QUIC short
    /// header).
    pub const NONE: PrefetchTarget = PrefetchTarget { first: std::ptr::null(), second: std::ptr::null(), len: 0, ipv6: false, hash: Hash::NONE };

    /// Whether this is a target of an IPv6 table (hand it to that table's
    /// [`ConnTable::expect`]; [`PrefetchTarget::NONE`] says IPv4).
    #[inline(always)]
    pub fn is_ipv6(&self) -> bool {
        self.ipv6
    }

    /// The buckets at `first` and `second` (null: none), each `len` bytes, of a key whose
    /// bucket hash is `hash`.
    #[inline(always)]
    pub(super) fn new(first: *const u8, second: *const u8, len: usize, hash: Hash) -> PrefetchTarget {
        PrefetchTarget { first, second, len: len as u32, ipv6: false, hash }
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

/// Prefetches the cache lines of a bucket of `len` bytes at `p` (one for IPv4's 64-byte
/// buckets, two for IPv6's 128: buckets are 64-byte aligned, so the lines at `p`,
/// `p + 64`, ... cover the bucket; a no-op off x86-64).
#[inline(always)]
pub(super) fn prefetch_lines(p: *const u8, len: usize) {
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
