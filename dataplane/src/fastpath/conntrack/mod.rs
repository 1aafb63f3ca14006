//! Per-worker connection tracking table (spec/backend-selection.md "Connection tracking").
//!
//! A bounded, set-associative hash table: `capacity / WAYS` buckets of [`WAYS`] entries,
//! each entry 16 bytes (32 for IPv6), all allocated once at start (no allocation, no
//! rehash, no locks on the packet path). Two-choice hashing: a key may live in one of two
//! buckets (the first is preferred), so a lookup reads one 64-byte bucket (one cache line;
//! 128 bytes, two lines, for IPv6), or two on a miss or an overflowed key; with two choices
//! a bucket overflows only when both are full, which keeps premature evictions negligible
//! up to high load factors.
//!
//! **Key.** An entry is keyed by (client address, client port, service number) ([`CtKey`]):
//! the VIP, VIP port and protocol are implied by the service. The number is the service's
//! stable number (`ServiceSnap::id`, `SlotMap::service_number`), which stays the same
//! while the service exists, unlike its index in a snapshot. A tracked packet's service is
//! found by its exact (VIP, port, protocol), so the key names the 5-tuple one to one.
//!
//! **Relocation before eviction.** When both buckets of a new key are full, entries are
//! first moved to their other buckets (a bounded breadth-first cuckoo search, out of line:
//! `conntrack/relocate.rs`) to free a slot; only when that fails is an entry evicted. So
//! below about 96 % load no live entry is evicted (`dataplane/tests/conntrack_model.rs`
//! tests 95 %), where two choices alone start evicting at about 86 %.
//!
//! Eviction order when both buckets are full and no relocation frees a slot (documented in
//! docs/decisions.md):
//!
//! 1. an expired entry;
//! 2. the oldest SYN-only entry (by its last packet, derived from its deadline and the
//!    timeout of its state under its service's timeouts, [`ServiceTimeouts`]; ties: the
//!    nearest deadline);
//! 3. the oldest closing (FIN/RST) entry (likewise);
//! 4. never an established entry: a new entry (always unconfirmed) whose two buckets hold
//!    only established entries is not recorded, and the flow is forwarded untracked by its
//!    Maglev choice (`syn_not_tracked`).
//!
//! Each eviction is counted. So a SYN flood evicts SYN-only entries and never an
//! established flow; the handshake's next packet competes as an established entry. The
//! last-packet time is derived with the service's timeouts *now*: a live edit of a
//! service's timeouts (which apply from the next packet, docs/semantics.md) shifts the
//! derived ages of its entries, and so their eviction ranking, until their next packet.
//!
//! **Every live key is found.** A key lives in its first bucket, or in its second when the
//! first was full at insertion. A slot of the first bucket may be freed later (an expired
//! entry, a flush, a sweep), so a lookup that misses in the first bucket always reads the
//! second: a hit in the first bucket (the common case) reads one bucket, a miss two. A key
//! is never stored twice, because [`ConnTable::insert`] looks in both buckets first.
//!
//! The bucket hash is seeded per table (random at start), so an attacker cannot aim a flood
//! at one bucket.
//!
//! **Clock.** Times are `u32` milliseconds of the worker's monotonic clock. An entry
//! stores its deadline in 24 bits of [`TICK_MS`] (8 ms) units, rounded up, so an entry
//! never expires early: the tick of a time is `(now_ms >> 3) & 0xFF_FFFF`, consistent
//! across the wrap of the `u32` clock because 2^29 ticks (2^32 ms) are a multiple of 2^24.
//! An entry is live while its deadline is 1 to [`LIVE_AHEAD`] ticks ahead of the current
//! tick (mod 2^24): [`LIVE_AHEAD`] is the longest timeout (57,600 s = 7,200,000 ticks)
//! plus 2^17 ticks (17 min); so an entry with timeout `T` set at `now` is live for every
//! `now'` < `now + T` and expired from the next 8 ms boundary (at most 7 ms late). The
//! expired window is 2^24 − [`LIVE_AHEAD`] = 9,446,144 ticks (21 h): exact while no entry
//! stays in the table that long past its deadline without being looked at;
//! [`ConnTable::sweep_paced`], called by the worker every poll, clears expired entries long
//! before: it visits every bucket at least once per [`SWEEP_CYCLE_MS`] (60 s) of clock
//! time however rarely the worker polls, so an idle entry can never wrap around and look
//! live again. Only a worker thread stopped for more than 21 h (a process stopped by
//! SIGSTOP, a host suspended) can find entries whose deadline wrapped: they read as live,
//! to the sweep as well, until their false deadline (at most the longest timeout, 16 h)
//! passes; their packets still go through `keeps_backend` (the general path) or its
//! stricter subset `fast_mac` (the vector path). The last-packet time is not stored: it is the deadline minus the
//! timeout of the entry's state ([`Entry::idle_ms`]), to 8 ms.
//!
//! **Size.** 16 bytes per IPv4 entry, 32 per IPv6 entry (buckets of 64 and 128 bytes: one
//! and two cache lines); `benches/benches/conntrack.rs` prints the bytes of table per
//! tracked flow at 90 % load.

use spillway_shared::flow::{FlowAddr, FlowKeyOf};

mod prefetch;
use prefetch::Hash;
pub use prefetch::PrefetchTarget;
mod sync;
mod mem;
mod relocate;
mod entry;
mod fast;
use entry::{deadline, timeout_of};
pub use entry::{CtKey, Entry, LIVE_AHEAD, TICK_MS};
use relocate::recount;
pub use relocate::{Occupancy, BUDGET_BANK, BUDGET_PER_MS, MAX_MOVES, MAX_SEARCH};
use mem::BucketMem;
pub use sync::{InstallOutcome, SyncWalk, Synced};

/// Flag in [`Entry::state`]: the entry was installed from a peer's sync message
/// ([`ConnTable::install`]) and has seen no packet here yet. It is the fleet's connection,
/// not this host's: never sent back to peers by the refresh walk, and replaced by a peer's
/// newer record. Its first packet here clears the flag ([`ConnTable::lookup`]).
pub const REMOTE: u8 = 0x80;

/// Flag in [`Entry::state`], with [`REMOTE`]: the peer that sent the entry held it as
/// another host's copy (a dump relays those), so it never replaces a copy that came from
/// the connection's own host ([`ConnTable::install`]).
pub const RELAYED: u8 = 0x40;

/// Entries per bucket.
pub const WAYS: usize = 4;

/// Lifecycle state of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Free slot.
    Empty = 0,
    /// Only a SYN (or the first packet of a non-TCP flow) was seen: short-lived.
    SynOnly = 1,
    /// Traffic beyond the first SYN was seen.
    Established = 2,
    /// FIN or RST seen: short life.
    Closing = 3,
}

/// [`WAYS`] entries: 64 bytes for IPv4 (one cache line), 128 for IPv6 (two), in a 64-byte
/// aligned allocation (`conntrack/mem.rs`).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Bucket<A>([Entry<A>; WAYS]);

impl<A: FlowAddr> Bucket<A> {
    /// The way holding a non-empty entry (live or expired) for `k`, if any.
    ///
    /// IPv4: an entry's key fields are its first 8 bytes ([`Entry::key_word`]), so each
    /// way is one 64-bit compare and the four results form a mask; the lowest set bit is
    /// the answer when its slot is not empty. A slot emptied in place keeps its old key,
    /// so when the lowest match is an empty slot the ways are compared one by one
    /// (`matches`) instead: the same answer, a little slower. That happens to the first
    /// packets of a flow whose entry expired or was flushed, until the slot is reused. A loop with a branch per way costs a
    /// misprediction per lookup once keys sit in random ways of fuller buckets (1 M flows:
    /// docs/benchmarks.md, "1 M flows: where the last 15 % goes"). IPv6: way by way.
    #[inline(always)]
    fn way_of(&self, k: &CtKey<A>) -> Option<usize> {
        if A::BITS == 32 {
            let kw = k.word();
            let e = &self.0;
            let m = u32::from(e[0].key_word() == kw)
                | u32::from(e[1].key_word() == kw) << 1
                | u32::from(e[2].key_word() == kw) << 2
                | u32::from(e[3].key_word() == kw) << 3;
            if m == 0 {
                return None;
            }
            let i = m.trailing_zeros() as usize;
            if e.get(i).is_some_and(|e| e.raw_state() != State::Empty as u8) {
                return Some(i);
            }
            return self.way_by_way(k);
        }
        self.0.iter().position(|e| e.matches(k))
    }

    /// [`Self::way_of`] way by way, out of line: IPv4's case of the key's old copy in an
    /// empty slot (kept out of the inlined lookup so its registers are not spilled for it).
    #[cold]
    #[inline(never)]
    fn way_by_way(&self, k: &CtKey<A>) -> Option<usize> {
        self.0.iter().position(|e| e.matches(k))
    }
}
const _: () = assert!(WAYS == 4, "Bucket::way_of compares four ways");

/// The timeouts of the entries of each service, by service number: what the out-of-line
/// paths that rank or age entries of several services need (eviction, the sync refresh
/// walk). The worker answers from its snapshot (`ServiceSnap::id`); a plain [`Timeouts`]
/// answers the same for every service (tests, benchmarks).
pub trait ServiceTimeouts {
    /// The timeouts of the entries of the service numbered `service`, as given to
    /// [`ConnTable::lookup`] for its packets.
    fn of(&self, service: u16) -> Timeouts;
    /// Whether an entry of service number `service` on endpoint slot `backend` with
    /// `incarnation` is dead: its service was removed, or its slot no longer holds that
    /// endpoint of that service (removed, or its address changed), so no packet can keep
    /// it (the worker's `keeps_backend` would re-pick). Eviction takes dead entries first,
    /// whatever their state. Default: none is.
    fn dead(&self, _service: u16, _backend: u16, _incarnation: u16) -> bool {
        false
    }
    /// [`Self::of`] for service number `service`, and a handle for [`Self::dead_in`]:
    /// what eviction looks up once per service instead of once per entry (it ranks up to
    /// eight entries, mostly of one service). Default: `(self.of(service), Some(service))`.
    fn resolve(&self, service: u16) -> (Timeouts, Option<u16>) {
        (self.of(service), Some(service))
    }
    /// [`Self::dead`] for an entry of service number `service`, whose [`Self::resolve`]
    /// gave `handle`. Default: `self.dead(service, backend, incarnation)`.
    fn dead_in(&self, _handle: Option<u16>, service: u16, backend: u16, incarnation: u16) -> bool {
        self.dead(service, backend, incarnation)
    }
}

impl ServiceTimeouts for Timeouts {
    #[inline]
    fn of(&self, _: u16) -> Timeouts {
        *self
    }
}

/// A function of the service number (tests and benchmarks with services of several
/// protocols).
impl<F: Fn(u16) -> Timeouts> ServiceTimeouts for F {
    #[inline]
    fn of(&self, service: u16) -> Timeouts {
        self(service)
    }
}

/// Counters of the table (plain integers: the table is owned by one worker).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtCounters {
    /// Lookups that found a live entry.
    pub hits: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// Entries inserted.
    pub inserts: u64,
    /// Full-bucket evictions of SYN-only entries.
    pub evicted_syn_only: u64,
    /// Full-bucket evictions of closing entries.
    pub evicted_closing: u64,
    /// Dead entries reused for a new one: expired, or dead by the snapshot (a removed
    /// service or endpoint: [`ServiceTimeouts::dead`]).
    pub expired_reused: u64,
    /// New entries not recorded because both their buckets held only established entries
    /// (a new entry never evicts an established connection; the packet is still forwarded
    /// by the Maglev pick). The counter that says the table is too small.
    pub syn_not_tracked: u64,
    /// Expired entries cleared by [`ConnTable::sweep`].
    pub swept: u64,
    /// Peers' entries installed ([`ConnTable::install`]) in a free, expired or evictable slot.
    pub sync_installed: u64,
    /// Peers' entries that replaced an older copy of theirs.
    pub sync_updated: u64,
    /// Peers' entries not installed because this host has a live entry of its own for the
    /// key (a synced entry never overrides a live local one).
    pub sync_conflicts: u64,
    /// Peers' entries not installed because both buckets held only established entries.
    pub sync_no_room: u64,
    /// Lookups that found a peer's entry (a flow moved here and kept its backend).
    pub sync_adopted: u64,
    /// Relayed copies not installed over a copy from the connection's own host.
    pub sync_older: u64,
    /// Entries moved to their other bucket to make room for a new one (relocation,
    /// `conntrack/relocate.rs`).
    pub relocated: u64,
    /// Insertions into two full buckets for which no chain of moves was found within the
    /// search bounds, or for which no search ran because the table is above the occupancy
    /// gate and the read budget was spent (`SearchBudget`); an eviction follows, if any.
    pub relocation_failed: u64,
    /// Buckets read by relocation searches beyond the new key's two: the search's cost in
    /// cache misses (tests and benches; not a status field).
    pub relocation_reads: u64,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Backend slot.
    pub backend: u16,
    /// Backend incarnation.
    pub incarnation: u16,
    /// State before this packet.
    pub state: State,
    /// State after this packet.
    pub after: State,
    /// The entry was a peer's ([`REMOTE`]) and this is its first packet here: a flow that
    /// moved to this host and kept its backend through fleet sync.
    pub adopted: bool,
}

/// Timeouts per state, ms (from `[conntrack]` of the config). The table applies `syn_ms`
/// to SYN-only entries, `tcp_ms` to established ones and `closing_ms` to closing ones;
/// [`Timeouts::for_service`] gives what a service's entries get (its idle timeout; a
/// non-TCP service's entries have one timeout in every state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// SYN-only TCP entries.
    pub syn_ms: u32,
    /// Established TCP entries.
    pub tcp_ms: u32,
    /// After FIN/RST.
    pub closing_ms: u32,
    /// UDP and others.
    pub udp_ms: u32,
}

impl Timeouts {
    /// The timeouts of the entries of a service of IP protocol `proto` whose idle timeout
    /// is `idle_ms` (spec/backend-selection.md "Connection tracking"): TCP keeps the SYN
    /// and closing timeouts and takes `idle_ms` for established entries; any other
    /// protocol takes `idle_ms` in every state (its first datagram included).
    pub fn for_service(self, proto: u8, idle_ms: u32) -> Timeouts {
        if proto == crate::wire::PROTO_TCP {
            Timeouts { tcp_ms: idle_ms, ..self }
        } else {
            Timeouts { syn_ms: idle_ms, tcp_ms: idle_ms, closing_ms: idle_ms, udp_ms: idle_ms }
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { syn_ms: 5_000, tcp_ms: 600_000, closing_ms: 10_000, udp_ms: 30_000 }
    }
}

/// Longest time (ms of the worker clock) between two visits of one bucket by
/// [`ConnTable::sweep_paced`] while it is called at least that often: 60 s, so an entry is
/// cleared at most a minute after its deadline, far inside the 21 h expired window of the
/// 24-bit deadline (module docs, "Clock").
pub const SWEEP_CYCLE_MS: u32 = 60_000;

/// Most buckets one [`ConnTable::sweep_paced`] call visits (2^16 buckets: 4 MiB of IPv4
/// table, about a millisecond): after a clock gap the rest is caught up over the next polls.
pub const MAX_SWEEP_PER_CALL: usize = 1 << 16;

/// Buckets [`ConnTable::sweep`] prefetches for its next call (the usual per-poll pace).
const SWEEP_PREFETCH: usize = 4;
/// The table, generic over the address type: `ConnTable` (= `ConnTable<u32>`) for IPv4,
/// `ConnTable<u128>` for IPv6 (32-byte entries).
pub struct ConnTable<A: FlowAddr = u32> {
    buckets: BucketMem<A>,
    mask: u64,
    seed: u64,
    /// Next bucket [`ConnTable::sweep`] visits.
    cursor: usize,
    /// Clock of the last [`ConnTable::sweep_paced`], ms; `None` before the first (which
    /// owes nothing: an IPv6 table first swept at the first IPv6 packet must not pay for
    /// the time before it).
    swept_at: Option<u32>,
    /// Buckets [`ConnTable::sweep_paced`] owes per elapsed ms: the table in
    /// [`SWEEP_CYCLE_MS`].
    sweep_per_ms: usize,
    /// Fleet sync between walk steps: cursors, flushed entries' removals ([`sync::SyncSide`]).
    sync: sync::SyncSide<A>,
    /// Counters.
    pub counters: CtCounters,
    /// Slots by state, indexed by `State as usize` ([`Occupancy`]); kept on every change.
    occ: [u64; 4],
    /// Buckets a sync dump pass still has to visit from its cursor on (0: no pass), so
    /// relocation never moves an entry the pass must send behind it
    /// ([`ConnTable::set_dump_pass_left`]).
    dump_left: usize,
    /// Keys of confirmed entries relocation moved behind the running dump pass, offered by
    /// its next step (capacity `relocate::DUMP_PENDING`, reserved at start: never grows).
    dump_pending: Vec<CtKey<A>>,
    /// The bucket hash of the key the next lookup is expected to be for
    /// ([`ConnTable::expect`]); any other key is hashed as usual.
    hint: Hash,
    /// The bucket reads relocation may spend above the occupancy gate ([`relocate::SearchBudget`]).
    budget: relocate::SearchBudget,
    /// The relocation search's queue, reserved at start (`MAX_SEARCH + 2` nodes, 32 KiB):
    /// a search neither allocates nor clears 32 KiB of stack.
    search_nodes: Vec<relocate::Node>,
}

impl<A: FlowAddr> ConnTable<A> {
    /// A table of at least `capacity` entries (rounded up to a power of two, ≥ `WAYS`),
    /// bucket hash seeded with `seed`. Memory: [`Self::bytes_per_entry`] × capacity.
    pub fn new(capacity: usize, seed: u64) -> ConnTable<A> {
        let n_buckets = (capacity.max(WAYS) / WAYS).next_power_of_two();
        ConnTable {
            buckets: BucketMem::new(n_buckets),
            mask: n_buckets as u64 - 1,
            seed,
            cursor: 0, swept_at: None,
            sweep_per_ms: n_buckets.div_ceil(SWEEP_CYCLE_MS as usize),
            sync: sync::SyncSide::default(),
            counters: CtCounters::default(),
            occ: [(n_buckets * WAYS) as u64, 0, 0, 0],
            dump_pending: Vec::with_capacity(relocate::DUMP_PENDING),
            dump_left: 0, hint: Hash::NONE,
            budget: relocate::SearchBudget::default(),
            search_nodes: Vec::with_capacity(relocate::MAX_SEARCH + 2),
        }
    }

    /// Total entries.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Bytes of table memory per entry slot.
    pub const fn bytes_per_entry() -> usize {
        std::mem::size_of::<Entry<A>>()
    }

    /// Index (bucket, way) of the entry for `k` (live or expired), if any.
    ///
    /// Reads the first bucket, and the second only when the key is not in the first: a key
    /// may live in its second bucket whatever was freed in the first after it was inserted
    /// (module docs, "Every live key is found"). A hit in the first bucket, the common
    /// case, touches one bucket (one cache line for IPv4).
    ///
    /// Always inlined: the caller's key then stays in registers. Called out of line with a
    /// key the caller has just stored field by field (4 + 2 + 2 bytes), its load of port
    /// and service as one 4-byte word spanned two stores, which store-to-load forwarding
    /// cannot serve: a stall of 3–4 ns on every lookup (docs/benchmarks.md, "After the
    /// destination-MAC rule").
    ///
    /// IPv4 buckets are matched by [`Bucket::way_of`] (one 64-bit compare per way, no
    /// branch per way); IPv6 ones way by way.
    #[inline(always)]
    fn find(&self, k: &CtKey<A>) -> Option<(usize, usize)> {
        let (b1, b2) = self.pair(k);
        if let Some(i) = self.buckets.get(b1).and_then(|b| b.way_of(k)) {
            return Some((b1, i));
        }
        let second = self.buckets.get(b2)?;
        second.way_of(k).map(|i| (b2, i))
    }

    /// Looks `k` up; on a hit advances the state with the TCP `flags` of this packet
    /// (SYN-only → established on a packet without SYN; → closing on FIN/RST; the caller
    /// passes 0 for a non-TCP packet) and sets the deadline to `now` + the timeout of the
    /// new state from `t` (the service's, [`Timeouts::for_service`]). Expired entries are
    /// misses.
    #[inline(always)]
    pub fn lookup(&mut self, k: &CtKey<A>, flags: u8, now: u32, t: &Timeouts) -> Option<Hit> {
        if let Some((b, i)) = self.find(k) {
            if let Some(e) = self.buckets.get_mut(b).and_then(|bk| bk.0.get_mut(i)) {
                if e.expired(now) {
                    recount(&mut self.occ, e.raw_state(), State::Empty as u8);
                    e.set_raw_state(State::Empty as u8);
                } else {
                    let adopted = e.raw_state() & REMOTE != 0;
                    if adopted {
                        sync::adopt(e);
                        self.counters.sync_adopted += 1;
                    }
                    let before = e.state();
                    let raw = e.raw_state();
                    let new = advance(raw, flags);
                    recount(&mut self.occ, raw, new);
                    e.life = (deadline(now, timeout_of(new, t)) << 8) | u32::from(new);
                    self.counters.hits += 1;
                    return Some(Hit { backend: e.backend, incarnation: e.incarnation, state: before, after: e.state(), adopted });
                }
            }
        }
        self.counters.misses += 1;
        None
    }

    /// Looks `k` up without touching the entry (no state change, no deadline refresh,
    /// no counters): for ICMP errors, which are not flow traffic and can be forged.
    #[inline]
    pub fn peek(&self, k: &CtKey<A>, now: u32) -> Option<Hit> {
        let (b, i) = self.find(k)?;
        let e = self.buckets.get(b)?.0.get(i)?;
        (!e.expired(now)).then(|| Hit { backend: e.backend, incarnation: e.incarnation, state: e.state(), after: e.state(), adopted: false })
    }

    /// Inserts or overwrites the entry for `k` and returns whether it is now recorded.
    /// Evicts per the documented order when both buckets are full, except that a new entry
    /// never evicts an established one: when both buckets hold only established entries
    /// nothing is recorded (`false`, counted in `syn_not_tracked`), so a SYN flood cannot
    /// push out established connections. `t` gives the timeouts of every service's entries
    /// (the new entry's, and those eviction ranks).
    #[inline]
    pub fn insert(&mut self, k: &CtKey<A>, backend: u16, incarnation: u16, now: u32, t: &impl ServiceTimeouts) -> bool {
        let (b, i) = match self.find(k) {
            Some(found) => found,
            None => match self.victim(k, now, t) {
                Some(v) => v,
                None => {
                    self.counters.syn_not_tracked += 1;
                    return false;
                }
            },
        };
        let Some(bucket) = self.buckets.get_mut(b) else { return false };
        let e = &mut bucket.0[i];
        recount(&mut self.occ, e.raw_state(), State::SynOnly as u8);
        // Every new entry starts unconfirmed (`SynOnly`): a TCP SYN — or the first packet
        // picked up mid-stream, e.g. after a restart — and the first datagram of a UDP flow.
        // The flow's next packet confirms it (see `advance`).
        let state = State::SynOnly as u8;
        let life = (deadline(now, timeout_of(state, &t.of(k.service))) << 8) | u32::from(state);
        *e = Entry { src: k.src, sport: k.sport, service: k.service, backend, incarnation, life };
        self.counters.inserts += 1;
        true
    }

    /// The slot a new entry for `k` takes when `k` has none: the best victim over both
    /// buckets in the documented order (an empty or expired slot, else the oldest SYN-only
    /// entry, else the oldest closing one), counted; `None` when both buckets hold only
    /// established entries (a new entry never evicts one). Ages are derived with `t`.
    #[inline]
    fn victim(&mut self, k: &CtKey<A>, now: u32, t: &impl ServiceTimeouts) -> Option<(usize, usize)> {
        let (b1, b2) = self.pair(k);
        // An empty or expired slot of the first bucket, then of the second, wins outright;
        // the ranking of live entries (which reads their services' timeouts) runs only when
        // both buckets are full.
        for b in [b1, b2] {
            if let Some(i) = self.free_way(b, now) {
                if self.buckets[b].0[i].raw_state() != State::Empty as u8 {
                    self.counters.expired_reused += 1;
                }
                return Some((b, i));
            }
        }
        // Both buckets are full of live entries: make room by moving entries to their
        // other buckets before anything is evicted (out of line, bounded).
        if let Some(free) = self.relocate(b1, b2, now) {
            return Some(free);
        }
        self.evict(b1, b2, now, t)
    }

    /// Clears expired entries in the next `buckets` buckets (a cursor walks the table
    /// round-robin) and returns how many. The worker calls it every poll iteration, so the
    /// whole table is visited every `capacity / WAYS / buckets` iterations: no idle entry
    /// lives long enough for its 24-bit deadline to wrap (module docs, "Clock").
    /// Costs one bucket read per bucket; never allocates.
    #[inline]
    pub fn sweep(&mut self, now: u32, buckets: usize) -> usize {
        let mut n = 0;
        let len = self.buckets.len();
        for _ in 0..buckets.min(len) {
            self.cursor = (self.cursor + 1) & (len - 1);
            if let Some(b) = self.buckets.get_mut(self.cursor) {
                for e in b.0.iter_mut() {
                    if e.raw_state() != State::Empty as u8 && e.expired(now) {
                        recount(&mut self.occ, e.raw_state(), State::Empty as u8);
                        e.set_raw_state(State::Empty as u8);
                        n += 1;
                    }
                }
            }
        }
        self.counters.swept += n as u64;
        // The next call's buckets, loaded a poll ahead (in a big table, each a DRAM miss).
        for k in 1..=buckets.min(len).min(SWEEP_PREFETCH) {
            if let Some(b) = self.buckets.get((self.cursor + k) & (len - 1)) {
                prefetch::prefetch_lines(b as *const Bucket<A> as *const u8, std::mem::size_of::<Bucket<A>>());
            }
        }
        n
    }

    /// [`ConnTable::sweep`] paced by the clock, not only by the poll rate: at least `min`
    /// buckets, and enough that the whole table is swept at least once per
    /// [`SWEEP_CYCLE_MS`] of clock time however rarely it is called (an idle worker that
    /// sleeps `dataplane.idle_sleep_us` per poll: at 10 ms per poll and 2^26 entries, two
    /// buckets per poll would take 23 h, past the 24-bit deadline's 21 h expired window,
    /// module docs "Clock"); at most [`MAX_SWEEP_PER_CALL`] buckets per call, so a clock
    /// gap (a process stopped for a while) costs no long stall: the call after it sweeps
    /// up to that many buckets and the normal pace covers the rest of the table within
    /// [`SWEEP_CYCLE_MS`]. Returns the entries cleared. No division on this path.
    #[inline]
    pub fn sweep_paced(&mut self, now: u32, min: usize) -> usize {
        let elapsed = self.swept_at.map_or(0, |t| now.wrapping_sub(t));
        self.swept_at = Some(now);
        // a clock that stepped back (never the worker's) owes nothing
        let elapsed = if elapsed > u32::MAX / 2 { 0 } else { elapsed as usize };
        let due = self.sweep_per_ms.saturating_mul(elapsed).clamp(min, MAX_SWEEP_PER_CALL);
        self.sweep(now, due)
    }

    /// Removes the entry for `k`, if any.
    pub fn remove(&mut self, k: &CtKey<A>) -> bool {
        match self.find(k) {
            Some((b, i)) => {
                recount(&mut self.occ, self.buckets[b].0[i].raw_state(), State::Empty as u8);
                self.buckets[b].0[i].set_raw_state(State::Empty as u8);
                true
            }
            None => false,
        }
    }
}

/// The raw state after a packet with TCP `flags` (0 for a non-TCP packet: its second
/// packet confirms the flow): FIN or RST → closing; SYN-only → established on a packet
/// without SYN (the deadline follows the new state: [`timeout_of`]).
#[inline(always)]
fn advance(state: u8, flags: u8) -> u8 {
    use crate::wire::tcp_flags::*;
    let flags_only = state & (REMOTE | RELAYED);
    if flags & (FIN | RST) != 0 {
        State::Closing as u8 | flags_only
    } else if state & 3 == State::SynOnly as u8 && flags & SYN == 0 {
        State::Established as u8 | flags_only
    } else {
        state
    }
}

#[cfg(test)]
mod tests;
