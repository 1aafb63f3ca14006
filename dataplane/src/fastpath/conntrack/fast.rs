//! The connection table's side of the worker's vector fast path
//! (`fastpath/worker/vector.rs`, docs/architecture.md "The vector fast path"): a burst's
//! keys are hashed to their bucket pairs in one stage ([`ConnTable::bucket_pair`]), their
//! buckets prefetched by index ([`ConnTable::prefetch_bucket`]), and each hit on an
//! established entry is taken by [`ConnTable::hit_established`], which changes nothing
//! unless every condition of the fast path holds, so a packet it declines goes to the general path ([`ConnTable::lookup`]) as if
//! the fast path had never looked. A child of [`super`].

use super::{deadline, timeout_of, ConnTable, CtKey, State, Timeouts, RELAYED};
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

    /// [`ConnTable::bucket_pair`] of an IPv6 key (in an IPv6 table), with the mix of its
    /// address's high half taken from `memo` (`(high half, its mix)`) when the half is the
    /// memo's, as it is for a run of packets from one /64; `memo` then holds this key's.
    /// The same pair either way. An IPv4 table hashes as [`ConnTable::bucket_pair`].
    #[inline(always)]
    pub fn bucket_pair6_memo(&self, k: &CtKey<A>, memo: &mut (u64, u64)) -> (u32, u32) {
        if A::BITS != 128 {
            return self.bucket_pair(k);
        }
        let w = self.words(k);
        if w[0] != memo.0 || memo.1 == 0 {
            *memo = (w[0], self.mix_high(w[0]));
        }
        let (b1, b2) = self.buckets_of_pair(memo.1 ^ w[1], w[2]);
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

    /// The entry life word ([`Entry::life`](super::Entry)'s deadline bits, state bits 0)
    /// an established entry gets from a packet at `now` under the service's timeouts `t`:
    /// what [`ConnTable::lookup`] writes for a hit that leaves the state established. The
    /// vector path computes it once per service and burst and hands it to
    /// [`ConnTable::hit_established`].
    #[inline]
    pub fn established_life(now: u32, t: &Timeouts) -> u32 {
        deadline(now, timeout_of(State::Established as u8, t)) << 8
    }

    /// The fast path's hit: `k`'s entry in `buckets` (its [`ConnTable::bucket_pair`]),
    /// refreshed as [`ConnTable::lookup`] refreshes it for a packet that changes no state
    /// (a TCP segment without SYN, FIN or RST, or a UDP datagram), and its backend slot,
    /// only when:
    /// - the entry is live, established and this host's own (not a peer's [`REMOTE`](super::REMOTE) copy,
    ///   whose first packet is an adoption, counted and handled by the general path; not
    ///   SYN-only or closing, whose next packet may change the state, which the general
    ///   path decides and, with fleet sync on, sends to peers);
    /// - `keep(backend, incarnation)` holds: the caller's rules for the entry's backend
    ///   slot.
    ///
    /// Then its life becomes `life` (from [`ConnTable::established_life`] for the same
    /// packet time and timeouts) with its state bits kept, and `hits` counts it; the
    /// occupancy counts do not change (the state does not). Otherwise `None`, and *nothing*
    /// has changed: the general path then looks the key up as if this call had not
    /// happened.
    #[inline(always)]
    pub fn hit_established(&mut self, k: &CtKey<A>, buckets: (u32, u32), now: u32, life: u32, keep: impl FnOnce(u16, u16) -> bool) -> Option<u16> {
        let (b1, b2) = (buckets.0 as usize, buckets.1 as usize);
        let (b, i) = match self.buckets.get(b1).and_then(|bk| bk.way_of(k)) {
            Some(i) => (b1, i),
            None => (b2, self.buckets.get(b2)?.way_of(k)?),
        };
        let e = self.buckets.get_mut(b)?.0.get_mut(i)?;
        let raw = e.raw_state();
        if raw & !RELAYED != State::Established as u8 || e.past_deadline(now) || !keep(e.backend, e.incarnation) {
            return None;
        }
        e.life = life | u32::from(raw);
        self.counters.hits += 1;
        Some(e.backend)
    }
}
