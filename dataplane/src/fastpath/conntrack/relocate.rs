//! Relocation on insert (cuckoo displacement), eviction when it finds no room, the
//! occupancy counters and the control-plane walks of the connection table. A child of
//! [`super`]; relocation and eviction are called only from [`ConnTable::insert`] and
//! [`ConnTable::install`] when both buckets of a new key are full, never on a lookup.
//!
//! **Relocation.** Every entry may live in either of its two buckets. When both buckets of
//! a new key are full, a breadth-first search over the entries of those buckets looks for
//! a chain of at most [`MAX_MOVES`] moves, each taking an entry to its *other* bucket, that
//! ends in a free (empty or expired) slot; the chain is carried out from its free end back
//! to the new key's bucket, which then has a free slot. Only when no chain exists is an
//! entry evicted, in the documented order (module docs of [`super`]). A move changes
//! neither the entry nor its state, only its slot, and a key is in one of its two buckets
//! before and after every move, so every lookup (which reads both buckets) stays right.
//! With two choices, four ways and chains of up to eight moves, tables of random keys first
//! ran out of room at 96.3–98.8 % (median 97.9 %) over 40 seeds of 1 Ki slots and at
//! 97.1–97.7 % (median 97.5 %) over 40 of 64 Ki (`fill_level_at_first_failure`,
//! 2026-12-02, with the earlier 2,000-read search); 95 % is tested (`dataplane/tests/conntrack_model.rs`).
//! Without relocation the first eviction came at about 86 %.
//!
//! **Cost bound.** The search reads at most [`MAX_SEARCH`] buckets. While more than
//! [`FULL_NUM`]/[`FULL_DEN`] of the slots hold an entry (the occupancy gate) the searches
//! that *fail* draw on a budget ([`SearchBudget`]): [`BUDGET_BANK`] bucket reads banked
//! (two failed searches), refilled at [`BUDGET_PER_MS`] a millisecond (4,000 a second:
//! one failed search). A search starts while anything is left and may overdraw it by
//! one (so a burst reads at most 12,000 buckets in failed searches: two at once, a third a
//! millisecond later); an insertion into two full buckets when the budget is spent skips the search and
//! evicts. A SYN flood against a full table thus pays at most one failed search a second
//! after the first three, and otherwise what it cost without relocation: an eviction of the
//! oldest SYN-only entry. Successful searches are free: a table that counts more than the
//! gate only because of expired entries no sweep has cleared yet (below) finds room on
//! every search, at any connection rate, so the budget never closes there (review,
//! 2026-12-02: a budget charged for every read would have skipped searches at 95 % live
//! under 10,000 new flows a second, test `expired_entries_at_64_ki_slots`). Until
//! 2026-12-02 a back-off closed the search for 1 ms to 1 s after a failed search and each
//! success restarted it at 1 ms: against a table whose SYN-only entries expire here and
//! there, successes and failed 4,000-read searches alternated and 52 % of the worker went
//! to the search (`perf record` of the `spillway_syn64_random` run); the budget does not
//! refill on a success (test `a_flood_against_a_full_table_spends_the_read_budget`).
//! Not off above the gate: the counts include expired entries no sweep has cleared yet (up
//! to [`super::SWEEP_CYCLE_MS`] after their deadline), so a table that
//! counts 97 % may hold 94 % of live entries and expired slots within reach (review,
//! 2026-12-02: 93.75 % live and 3.1 % expired SYN-only entries evicted live ones).
//!
//! **Occupancy.** The table counts its slots by state ([`Occupancy`]) on every change of a
//! slot (insert, install, confirm, close, expiry seen by a lookup, sweep, flush, remove,
//! eviction, move), so `flows count` and `/metrics` read counters and never walk a table.

use super::{ConnTable, Entry, FlowAddr, ServiceTimeouts, State, Timeouts, TICK_MS};

// `ConnTable::evict` packs the time left (ms) into 26 bits and the slot of two buckets
// into 3.
const _: () = assert!((super::LIVE_AHEAD as u64) * (TICK_MS as u64) < 1 << 26 && super::WAYS == 4);

/// Longest chain of moves one insertion may carry out.
pub const MAX_MOVES: usize = 8;

/// Most buckets one search reads besides the new key's two. The worst case of one
/// insertion is a search that fails: about 4,000 cache misses (200–400 µs without the RX
/// ring being polled), which happens only near the occupancy gate ([`FULL_NUM`]; above it
/// at most about once a second, [`SearchBudget`]); a search stops at the first free slot
/// (breadth-first: the shortest chain). Its queue is reserved in the table (32 KiB). Five moves
/// and 500 reads were not enough (1 case in about 500 lost a SYN-only entry at 94.8 % load
/// of a 1 Ki table), nor were 2,000 reads: the clean-clone CI run of 2026-12-02 found a
/// handshake burst that lost one at 972 flows (94.9 %), kept by 4,000
/// (`handshake_regression_a_chain_beyond_the_search_bound`; 10 moves did not help).
pub const MAX_SEARCH: usize = 4000;

/// The occupancy gate: while `entries × FULL_DEN >= capacity × FULL_NUM` (31/32 = 96.9 %
/// of the slots hold an entry, expired ones not yet swept included) relocation searches
/// only while failed searches have not spent the [`SearchBudget`].
pub const FULL_NUM: u64 = 31;
/// See [`FULL_NUM`].
pub const FULL_DEN: u64 = 32;

/// Most bucket reads of failed searches the relocation budget banks above the occupancy
/// gate ([`SearchBudget`]): two failed searches.
pub const BUDGET_BANK: u32 = 2 * MAX_SEARCH as u32;

/// Bucket reads the relocation budget gains per millisecond of clock ([`SearchBudget`]):
/// one failed search a second.
pub const BUDGET_PER_MS: u32 = MAX_SEARCH as u32 / 1000;

/// The failed-search reads relocation may still spend above the occupancy gate
/// ([`FULL_NUM`]; module docs, "Cost bound"): a token bucket of [`BUDGET_BANK`] reads,
/// refilled at [`BUDGET_PER_MS`] per ms of the table's clock; a search that fails spends
/// what it read, one that succeeds nothing. Wrap-safe: the elapsed time is the clock's
/// wrapping difference, and a difference above 2^31 ms (a clock that stepped back) refills
/// nothing. Full at start.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SearchBudget {
    /// Reads spent and not yet refilled (0 = a full bank; above the bank by at most one
    /// search).
    spent: u32,
    /// Clock of the last refill, ms.
    at: u32,
}

impl SearchBudget {
    /// Refills for the time since the last call and tells whether a search may start at
    /// `now` (ms): while anything is left of the bank. A search may so overdraw it by up
    /// to one search: a full bank lets two failed searches of [`MAX_SEARCH`] reads through
    /// at once and a third a millisecond later (at most `BUDGET_BANK + MAX_SEARCH` =
    /// 12,000 reads in a burst), then one a second. Kept so (review, 2026-12-04): starting
    /// only while a whole search is left would also stop the searches that fail early
    /// after a few hundred reads (a small neighbourhood), which at the gate are most of
    /// them, and evict live entries a later search would have found room for.
    fn allows(&mut self, now: u32) -> bool {
        let dt = now.wrapping_sub(self.at);
        if dt <= u32::MAX / 2 {
            self.spent = self.spent.saturating_sub(dt.saturating_mul(BUDGET_PER_MS));
        }
        self.at = now;
        self.spent < BUDGET_BANK
    }

    /// A search that read `reads` buckets failed.
    fn spend(&mut self, reads: u32) {
        self.spent = self.spent.saturating_add(reads);
    }
}

/// Keys moved behind a running sync dump pass that its next step offers first
/// ([`ConnTable::sync_walk`]); the queue is allocated once with the table.
pub const DUMP_PENDING: usize = 64;

/// Slots of one table by state ([`super::Entry::state`] with its sync flags masked off).
/// `syn_only + established + closing + empty` is the capacity. An expired entry counts in
/// its state until a lookup, a sweep or an insertion clears it (at most one sweep cycle:
/// `worker::SWEEP_BUCKETS_PER_POLL`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Unconfirmed entries (SYN-only, a flow's first packet).
    pub syn_only: u64,
    /// Established entries.
    pub established: u64,
    /// Closing (FIN/RST seen) entries.
    pub closing: u64,
    /// Free slots.
    pub empty: u64,
}

impl Occupancy {
    /// Slots holding an entry.
    pub fn entries(&self) -> u64 {
        self.syn_only + self.established + self.closing
    }
}

/// Moves one slot's count from the state of raw state byte `old` to that of `new`.
#[inline(always)]
pub(super) fn recount(occ: &mut [u64; 4], old: u8, new: u8) {
    // The low two bits of a state byte are its `State` (the flags are 0x80 and 0x40).
    let (o, n) = ((old & 3) as usize, (new & 3) as usize);
    if o != n {
        occ[o] = occ[o].wrapping_sub(1);
        occ[n] = occ[n].wrapping_add(1);
    }
}

/// One node of the search: a full bucket, reached by moving the entry at way `way` of
/// node `parent`'s bucket into it (roots: the new key's two buckets, `parent == ROOT`).
#[derive(Clone, Copy)]
pub(super) struct Node {
    bucket: u32,
    parent: u16,
    way: u8,
    depth: u8,
}

/// `parent` of a root.
const ROOT: u16 = u16::MAX;

/// Whether bucket `b` is node `at`'s bucket or one of its ancestors' (a root's sibling
/// included: both roots are full and are where the freed slot must end up).
fn on_path(nodes: &[Node], mut at: usize, b: usize) -> bool {
    if nodes[0].bucket as usize == b || nodes[1].bucket as usize == b {
        return true;
    }
    loop {
        if nodes[at].bucket as usize == b {
            return true;
        }
        if nodes[at].parent == ROOT {
            return false;
        }
        at = nodes[at].parent as usize;
    }
}

impl<A: FlowAddr> ConnTable<A> {
    /// The table's slots by state, read from counters (no walk).
    pub fn occupancy(&self) -> Occupancy {
        let o = &self.occ;
        Occupancy { empty: o[State::Empty as usize], syn_only: o[State::SynOnly as usize], established: o[State::Established as usize], closing: o[State::Closing as usize] }
    }

    /// Whether moving `e` from bucket `from` to `to` would hide it from a running sync dump
    /// pass: a confirmed entry (what the pass sends) taken from a bucket the pass has still
    /// to visit into one it has passed. Such a move queues the key to be offered at the
    /// pass's next step (`dump_pending`, [`DUMP_PENDING`] keys at most; with no room for a
    /// whole chain the move is not considered). A starting peer must learn every connection.
    #[inline]
    fn hides_from_dump(&self, e: &super::Entry<A>, from: usize, to: usize) -> bool {
        let ahead = |b: usize| b.wrapping_sub(self.sync.dump_cursor) & (self.buckets.len() - 1) < self.dump_left;
        self.dump_left > 0 && e.state() != State::SynOnly && ahead(from) && !ahead(to)
    }

    /// A free (empty or expired) way of bucket `b`, if any.
    #[inline]
    pub(super) fn free_way(&self, b: usize, now: u32) -> Option<usize> {
        self.buckets.get(b)?.0.iter().position(|e| e.expired(now))
    }

    /// Moves the entry at `from` into the free slot `to` (an expired entry there is
    /// dropped, counted as reused); `from` becomes empty.
    fn move_entry(&mut self, from: (usize, usize), to: (usize, usize)) {
        let e = self.buckets[from.0].0[from.1];
        if self.hides_from_dump(&e, from.0, to.0) && self.dump_pending.len() < DUMP_PENDING {
            self.dump_pending.push(e.key());
        }
        let old = self.buckets[to.0].0[to.1].raw_state();
        if old != State::Empty as u8 {
            self.counters.expired_reused += 1;
        }
        recount(&mut self.occ, old, e.raw_state());
        self.buckets[to.0].0[to.1] = e;
        recount(&mut self.occ, e.raw_state(), State::Empty as u8);
        self.buckets[from.0].0[from.1].set_raw_state(State::Empty as u8);
        self.counters.relocated += 1;
    }

    /// Frees a slot in bucket `b1` or `b2` (both full of live entries) by a chain of moves
    /// (module docs); returns it, or `None` when no chain within the bounds exists or, above
    /// the occupancy gate, failed searches have spent the budget ([`SearchBudget`]).
    #[cold]
    #[inline(never)]
    pub(super) fn relocate(&mut self, b1: usize, b2: usize, now: u32) -> Option<(usize, usize)> {
        let full = self.occupancy().entries() * FULL_DEN >= self.capacity() as u64 * FULL_NUM;
        if !full {
            return self.search(b1, b2, now);
        }
        if !self.budget.allows(now) {
            // Counted as a failure too: no move freed a slot (review F7: while the search
            // was off, `relocation_failed` stood still as the table refused room).
            self.counters.relocation_failed += 1;
            return None;
        }
        let before = self.counters.relocation_reads;
        let found = self.search(b1, b2, now);
        if found.is_none() {
            self.budget.spend((self.counters.relocation_reads - before) as u32);
        }
        found
    }

    /// Eviction in two full buckets (out of line): the oldest SYN-only entry, else the
    /// oldest closing one — by age (the last packet, derived from the deadline and the
    /// timeout of the entry's state under its service's timeouts), then the nearest
    /// deadline; counted. By age, not by deadline: a fresh TCP SYN (5 s) must outlive an
    /// older UDP first datagram (30 s or more), or a one-packet UDP flood would evict every
    /// handshake first. An entry of a removed service or endpoint ([`ServiceTimeouts::dead`])
    /// goes before all of them, whatever its state. `None` when both hold only established
    /// entries.
    #[cold]
    #[inline(never)]
    pub(super) fn evict(&mut self, b1: usize, b2: usize, now: u32, t: &impl ServiceTimeouts) -> Option<(usize, usize)> {
        // The best (lowest) key so far: class << 61 | (u32::MAX - age) << 29 | time left
        // (ms, < 2^26: at most LIVE_AHEAD ticks) << 3 | slot (0..=7: the way, + 4 in the
        // second bucket); u64::MAX is above every key (class <= 2). The slot in the low
        // bits makes the minimum the first slot of the lowest rank, as a strict `<` scan
        // would find, and lets it be taken without a branch on the comparison: which of
        // eight random entries is oldest is a coin toss to the branch predictor, and the
        // mispredictions were most of this function's time in a SYN flood (`perf record`
        // of `spillway_syn64_random`, 2026-12-04).
        let mut best = u64::MAX;
        // The service of the last entry, resolved once: a bucket's entries are mostly of
        // one service (all of them in a flood). `memo` is a service number or, before the
        // first, a value none is.
        let (mut memo, mut ts, mut handle) = (u32::MAX, Timeouts::default(), None);
        for (half, b) in [b1, b2].into_iter().enumerate() {
            let Some(bucket) = self.buckets.get(b) else { continue };
            for (i, e) in bucket.0.iter().enumerate() {
                if memo != u32::from(e.service) {
                    (ts, handle) = t.resolve(e.service);
                    memo = u32::from(e.service);
                }
                let class: u64 = match e.state() {
                    // an entry of a removed service matches no packet (its number names no
                    // service): a dead slot, whatever its state
                    _ if t.dead_in(handle, e.service, e.backend, e.incarnation) => 0,
                    State::SynOnly => 1,
                    State::Closing => 2,
                    _ => continue,
                };
                let left = e.remaining_ms(now);
                // Age from today's timeout of the entry's state. An entry with more time
                // left than that timeout was set before a live edit lowered it, so it is
                // older than every entry set since: it ranks as the oldest (a flood's UDP
                // entries must not look fresh after the operator shortens the UDP
                // timeout). A dead entry (class 0) can match no packet: first of all.
                // u32::MAX - age: the oldest ranks lowest.
                let age = if class == 0 {
                    u32::MAX
                } else {
                    let timeout = if class == 1 { ts.syn_ms } else { ts.closing_ms };
                    // (a fresh entry has up to TICK_MS - 1 ms more than its timeout: the
                    // deadline is rounded up to its tick)
                    if left >= timeout.saturating_add(TICK_MS) { u32::MAX - 1 } else { timeout.saturating_sub(left) }
                };
                let key = class << 61 | u64::from(u32::MAX - age) << 29 | u64::from(left) << 3 | (half * super::WAYS + i) as u64;
                best = best.min(key);
            }
        }
        if best == u64::MAX {
            return None;
        }
        match best >> 61 {
            0 => self.counters.expired_reused += 1, // dead like an expired entry
            1 => self.counters.evicted_syn_only += 1,
            _ => self.counters.evicted_closing += 1,
        }
        let slot = (best & 7) as usize;
        Some((if slot < super::WAYS { b1 } else { b2 }, slot % super::WAYS))
    }

    /// The breadth-first search of [`Self::relocate`], carried out when it finds a chain.
    fn search(&mut self, b1: usize, b2: usize, now: u32) -> Option<(usize, usize)> {
        // The queue lives in the table (reserved at start); taken out for the search so the
        // moves may borrow the table. `mem::take` leaves an empty Vec: no allocation.
        let mut nodes = std::mem::take(&mut self.search_nodes);
        let found = self.search_in(&mut nodes, b1, b2, now);
        self.search_nodes = nodes;
        found
    }

    /// [`Self::search`] over the queue `nodes` (capacity `MAX_SEARCH + 2`, never exceeded).
    fn search_in(&mut self, nodes: &mut Vec<Node>, b1: usize, b2: usize, now: u32) -> Option<(usize, usize)> {
        nodes.clear();
        nodes.push(Node { bucket: b1 as u32, parent: ROOT, way: 0, depth: 0 });
        nodes.push(Node { bucket: b2 as u32, parent: ROOT, way: 0, depth: 0 });
        let (mut head, mut reads) = (0usize, 0usize);
        'search: while head < nodes.len() {
            let n = nodes[head];
            let nb = n.bucket as usize;
            // The other buckets of this bucket's entries, loaded together: their misses
            // overlap instead of following one another (most of a search's time).
            let mut alts = [usize::MAX; super::WAYS];
            for (way, alt) in alts.iter_mut().enumerate() {
                let Some(e) = self.buckets.get(nb).map(|b| b.0[way]) else { break };
                let (x1, x2) = self.buckets_of(&e.key());
                *alt = if x1 == nb { x2 } else { x1 };
                if let Some(b) = self.buckets.get(*alt) {
                    super::prefetch::prefetch_lines(b as *const super::Bucket<A> as *const u8, std::mem::size_of::<super::Bucket<A>>());
                }
            }
            for (way, &alt) in alts.iter().enumerate() {
                let Some(e) = self.buckets.get(nb).map(|b| b.0[way]) else { break };
                if alt == nb || on_path(nodes, head, alt) || (self.hides_from_dump(&e, nb, alt) && self.dump_pending.len() + MAX_MOVES > DUMP_PENDING) {
                    continue;
                }
                if reads == MAX_SEARCH {
                    break 'search;
                }
                reads += 1;
                self.counters.relocation_reads += 1;
                if let Some(free) = self.free_way(alt, now) {
                    // Carry the chain out from its free end: each move fills the slot the
                    // previous one left, so no key is ever outside its two buckets. The
                    // path's buckets are distinct (`on_path`), so every slot it reads still
                    // holds the entry the search saw there.
                    self.move_entry((nb, way), (alt, free));
                    let (mut cur, mut hole) = (head, way);
                    while nodes[cur].parent != ROOT {
                        let c = nodes[cur];
                        let p = nodes[c.parent as usize];
                        self.move_entry((p.bucket as usize, c.way as usize), (c.bucket as usize, hole));
                        hole = c.way as usize;
                        cur = c.parent as usize;
                    }
                    return Some((nodes[cur].bucket as usize, hole));
                }
                if usize::from(n.depth) + 1 < MAX_MOVES && nodes.len() < MAX_SEARCH + 2 {
                    nodes.push(Node { bucket: alt as u32, parent: head as u16, way: way as u8, depth: n.depth + 1 });
                }
            }
            head += 1;
        }
        self.counters.relocation_failed += 1;
        None
    }
}

/// The walks of the control plane (never on the packet path).
impl<A: FlowAddr> ConnTable<A> {
    /// Live (unexpired) entries at `now`: a full scan, for the control plane only.
    pub fn live(&self, now: u32) -> usize {
        self.buckets.iter().flat_map(|b| b.0.iter()).filter(|e| !e.expired(now)).count()
    }

    /// Removes every entry for which `f` is true; returns how many (control-plane scans).
    pub fn retain(&mut self, mut keep: impl FnMut(&Entry<A>) -> bool) -> usize {
        let mut n = 0;
        for b in self.buckets.iter_mut() {
            for e in b.0.iter_mut() {
                if e.raw_state() != State::Empty as u8 && !keep(e) {
                    recount(&mut self.occ, e.raw_state(), State::Empty as u8);
                    e.set_raw_state(State::Empty as u8);
                    n += 1;
                }
            }
        }
        n
    }

    /// Visits every live entry.
    pub fn for_each_live(&self, now: u32, mut f: impl FnMut(&Entry<A>)) {
        for b in self.buckets.iter() {
            for e in b.0.iter() {
                if !e.expired(now) {
                    f(e);
                }
            }
        }
    }

    /// The same figures as [`ConnTable::occupancy`], by walking every slot: for tests that
    /// check the counters against the table (never called by the daemon).
    pub fn occupancy_by_walk(&self) -> Occupancy {
        let mut occ = [0u64; 4];
        for e in self.buckets.iter().flat_map(|b| b.0.iter()) {
            occ[(e.raw_state() & 3) as usize] += 1;
        }
        Occupancy { empty: occ[0], syn_only: occ[1], established: occ[2], closing: occ[3] }
    }
}

#[cfg(test)]
mod evict_tests;

#[cfg(test)]
mod budget_tests {
    use super::{SearchBudget, BUDGET_BANK, BUDGET_PER_MS, MAX_SEARCH};

    /// The budget's exact sequence (module docs, "Cost bound"): two failed searches of
    /// [`MAX_SEARCH`] reads at once, a third a millisecond later (the overdraft), then
    /// nothing until the refill brings the spent reads below the bank again (one search a
    /// second); searches that fail early cost what they read; a clock that steps back
    /// refills nothing.
    #[test]
    fn two_failed_searches_at_once_a_third_after_a_millisecond_then_one_a_second() {
        let full = MAX_SEARCH as u32;
        let mut b = SearchBudget::default();
        let now = 1_000u32;
        for _ in 0..2 {
            assert!(b.allows(now));
            b.spend(full);
        }
        assert!(!b.allows(now), "a third at once");
        assert!(b.allows(now + 1), "the overdraft, a millisecond later");
        b.spend(full);
        assert!(b.spent <= BUDGET_BANK + full);
        let refill_ms = full / BUDGET_PER_MS;
        assert!(!b.allows(now + refill_ms), "shut for the second after the overdraft");
        assert!(b.allows(now + 1 + refill_ms), "one search a second");
        b.spend(full);
        assert!(!b.allows(now + 2 + refill_ms));
        assert!(!b.allows(now), "a clock that stepped back refills nothing");
        // early failures: 500 reads each, while anything is left
        let mut b = SearchBudget::default();
        let mut n = 0;
        while b.allows(now) {
            b.spend(500);
            n += 1;
        }
        assert_eq!(n, BUDGET_BANK / 500);
        assert!(b.allows(now + 1_000_000));
        assert_eq!(b.spent, 0);
    }
}
