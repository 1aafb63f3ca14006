//! The connection table's side of the worker's vector fast path
//! (`fastpath/worker/vector.rs`, docs/architecture.md "The vector fast path"): a burst's
//! keys are hashed to their bucket pairs in one stage ([`ConnTable::bucket_pair`]), their
//! buckets prefetched by index ([`ConnTable::prefetch_bucket`]), and each hit is taken by
//! [`ConnTable::hit_if`], which changes nothing unless every condition of the fast path
//! holds, so a packet it declines goes to the general path ([`ConnTable::lookup`]) as if
//! the fast path had never looked. A child of [`super`].

use super::{advance, deadline, recount, timeout_of, ConnTable, CtKey, Timeouts, REMOTE};
use spillway_shared::flow::FlowAddr;

impl<A: FlowAddr> ConnTable<A> {
    /// The key's two candidate buckets, `(first, second)`, as indices below the table's
    /// bucket count: the same pair [`ConnTable::lookup`] and [`ConnTable::insert`] use
    /// (`buckets_of`, seeded per table).
    #[inline(always)]
    pub fn bucket_pair(&self, k: &CtKey<A>) -> (u32, u32) {
        let (b1, b2) = self.buckets_of(k);
        (b1 as u32, b2 as u32)
    }

    /// Starts loading bucket `b` into the cache (every line of it: one for IPv4, two for
    /// IPv6); a no-op for an index past the table. A hint: it never faults.
    #[inline(always)]
    pub fn prefetch_bucket(&self, b: u32) {
        if let Some(bk) = self.buckets.get(b as usize) {
            super::prefetch::prefetch_lines(bk as *const _ as *const u8, std::mem::size_of_val(bk));
        }
    }

    /// Tells the table that the next lookup or insertion is for `k`, whose buckets are
    /// `buckets` (from [`ConnTable::bucket_pair`] of this table): it takes them instead of
    /// hashing the key again, as [`ConnTable::expect`] does for a prefetch target. A key
    /// other than `k` is hashed as usual.
    #[inline(always)]
    pub fn expect_buckets(&mut self, k: &CtKey<A>, buckets: (u32, u32)) {
        self.hint = super::prefetch::Hash { words: self.words(k), table: self.table_id(), buckets };
    }

    /// The fast path's hit: `k`'s live entry in `buckets` (its [`ConnTable::bucket_pair`]),
    /// advanced as [`ConnTable::lookup`] would advance it for a packet with TCP `flags`
    /// (0 for a non-TCP packet) at `now` under the service's timeouts `t`, and its backend
    /// slot, only when:
    /// - the entry is live and this host's own (not a peer's [`REMOTE`] copy, whose first
    ///   packet is an adoption, counted and handled by the general path);
    /// - `keep(backend, incarnation, state_changes)` holds: the caller's rules for the
    ///   entry's backend slot, and whether this packet may change its state (the worker
    ///   says no while fleet sync is on: a confirmed or closing connection is sent to peers
    ///   by the general path, `Worker::sync_state_change`).
    ///
    /// Otherwise `None`, and *nothing* has changed: no state, deadline or counter. The
    /// general path then looks the key up as if this call had not happened. When it does
    /// hit, the entry, the occupancy counts and `hits` change exactly as in
    /// [`ConnTable::lookup`].
    #[inline(always)]
    pub fn hit_if(&mut self, k: &CtKey<A>, buckets: (u32, u32), flags: u8, now: u32, t: &Timeouts, keep: impl FnOnce(u16, u16, bool) -> bool) -> Option<u16> {
        let (b1, b2) = (buckets.0 as usize, buckets.1 as usize);
        let (b, i) = match self.buckets.get(b1).and_then(|bk| bk.way_of(k)) {
            Some(i) => (b1, i),
            None => (b2, self.buckets.get(b2)?.way_of(k)?),
        };
        let e = self.buckets.get_mut(b)?.0.get_mut(i)?;
        let raw = e.raw_state();
        if raw & REMOTE != 0 || e.expired(now) {
            return None;
        }
        let new = advance(raw, flags);
        if !keep(e.backend, e.incarnation, new != raw) {
            return None;
        }
        recount(&mut self.occ, raw, new);
        e.life = (deadline(now, timeout_of(new, t)) << 8) | u32::from(new);
        self.counters.hits += 1;
        Some(e.backend)
    }
}
