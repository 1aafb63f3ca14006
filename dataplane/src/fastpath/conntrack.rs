//! Per-worker connection tracking table (spec/backend-selection.md "Connection tracking").
//!
//! A bounded, set-associative hash table: `capacity / WAYS` buckets of [`WAYS`] entries,
//! each entry 24 bytes (48 for IPv6), all allocated once at start (no allocation, no rehash, no locks on
//! the packet path). Two-choice hashing: a key may live in one of two buckets (the first
//! is preferred), so a lookup reads one 96-byte bucket (two cache lines), or two on a miss
//! or an overflowed key; with two choices a bucket overflows only when both are full,
//! which keeps premature evictions negligible up to high load factors.
//!
//! **Relocation before eviction.** When both buckets of a new key are full, entries are
//! first moved to their other buckets (a bounded breadth-first cuckoo search, out of line:
//! `conntrack_relocate.rs`) to free a slot; only when that fails is an entry evicted. So
//! below about 96 % load no live entry is evicted (`dataplane/tests/conntrack_model.rs`
//! tests 95 %), where two choices alone start evicting at about 86 %.
//!
//! Eviction order when both buckets are full and no relocation frees a slot (documented in
//! docs/decisions.md):
//!
//! 1. an expired entry;
//! 2. the oldest SYN-only entry (by its last packet, in [`SEEN_UNIT_MS`] units; ties: the
//!    nearest deadline);
//! 3. the oldest closing (FIN/RST) entry (likewise);
//! 4. never an established entry: a new entry (always unconfirmed) whose two buckets hold
//!    only established entries is not recorded, and the flow is forwarded untracked by its
//!    Maglev choice (`syn_not_tracked`).
//!
//! Each eviction is counted. So a SYN flood evicts SYN-only entries and never an
//! established flow; the handshake's next packet competes as an established entry.
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
//! **Clock.** Times are `u32` milliseconds of the worker's monotonic clock, compared with
//! wrapping arithmetic: an entry is live while its deadline is at most [`LIVE_AHEAD_MS`]
//! (the longest timeout, 16 h, plus 17 min) ahead of `now` (mod 2^32), and expired from
//! the first millisecond after it. That is exact while no entry stays in the table for
//! 2^32 − [`LIVE_AHEAD_MS`] ms (49 days) past its deadline without being looked at; [`ConnTable::sweep`], called by the worker a
//! few buckets per poll, clears expired entries long before (a full cycle takes minutes),
//! so an idle entry can never wrap around and look live again. The coarse last-packet time
//! ([`Entry::seen`], units of [`SEEN_UNIT_MS`]) spans more than the longest timeout, so it
//! cannot wrap on a live entry either.
//!
//! **Size.** 24 bytes per IPv4 entry, 48 per IPv6 entry: at 90 % load 26.7 and 53.3 bytes
//! of table per tracked flow (`benches/benches/conntrack.rs` prints it). A 16-byte IPv4
//! entry would need a stable service number in place of VIP:port:proto (indices shift
//! when a service is removed) and a deadline of 16 bits (2 s units), which the SYN timeout
//! (5 s) cannot take; see docs/architecture.md "Connection tracking".

use spillway_shared::flow::{FlowAddr, FlowKeyOf};

#[path = "conntrack_prefetch.rs"]
mod prefetch;
use prefetch::Hash;
pub use prefetch::PrefetchTarget;
#[path = "conntrack_sync.rs"]
mod sync;
#[path = "conntrack_mem.rs"]
mod mem;
#[path = "conntrack_relocate.rs"]
mod relocate;
use relocate::recount;
pub use relocate::{Occupancy, MAX_MOVES};
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

/// How far (ms) a live entry's deadline may be ahead of `now`: the longest idle timeout
/// (57,600 s, the longest a peer's entry is installed for) plus about 17 minutes (2^20 ms) for a
/// caller whose clock steps back a little (the worker's never does). A deadline further
/// ahead is one that `now` passed long ago (the `u32` clock wrapped): expired.
pub const LIVE_AHEAD_MS: u32 = sync::MAX_SYNCED_LIFETIME_MS + (1 << 20);

/// Unit of [`Entry::seen`], ms (2^10: about 1 s). A `u16` of these spans 67,108 s, more
/// than the longest idle timeout (57,600 s), so the idle time of a live entry never wraps.
pub const SEEN_UNIT_MS: u32 = 1 << 10;

/// [`Entry::seen`] of time `now` (ms).
#[inline(always)]
fn seen_of(now: u32) -> u16 {
    (now / SEEN_UNIT_MS) as u16
}

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

/// One tracked connection: 24 bytes with IPv4 addresses (`Entry<u32>`), 48 bytes with
/// IPv6 addresses (`Entry<u128>`); a bucket of [`WAYS`] is 96 bytes (two cache lines) or
/// 192 (three). Generic over the address type so IPv6 gets a table of its own.
///
/// The entry holds the whole 5-tuple (13 bytes for IPv4), not a service index: service
/// indices shift when a service is removed, and an entry must survive that (the endpoint
/// slot, with its incarnation, names the service: `worker::keeps_backend`). Time is one
/// exact deadline plus a coarse last-packet time: the timeout of a state is the service's
/// (`Timeouts`, given to every lookup), so it is not stored.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Entry<A = u32> {
    /// Client address.
    pub src: A,
    /// VIP.
    pub dst: A,
    /// Expiry deadline, ms of the worker clock: the entry is expired once `now` is past it
    /// (wrapping comparison, module docs "Clock"). Set on every packet to `now` + the
    /// idle timeout of the entry's state; a peer's entry gets its remaining lifetime.
    pub expires: u32,
    /// Client port.
    pub sport: u16,
    /// VIP port.
    pub dport: u16,
    /// Endpoint slot in the snapshot.
    pub backend: u16,
    /// Incarnation of that slot (a removed-and-reused slot does not match).
    pub incarnation: u16,
    /// Time of the last packet in units of [`SEEN_UNIT_MS`] (wrapping `u16`): for the
    /// sync refresh walk's "active" test and the idle time `flows show` prints.
    pub seen: u16,
    /// IP protocol.
    pub proto: u8,
    /// [`State`] as u8, with the [`REMOTE`] and [`RELAYED`] flags.
    pub state: u8,
}

const _: () = assert!(std::mem::size_of::<Entry<u32>>() == 24 && std::mem::size_of::<Entry<u128>>() == 48);

impl<A: FlowAddr> Entry<A> {
    #[inline]
    fn matches(&self, k: &FlowKeyOf<A>) -> bool {
        self.state != State::Empty as u8
            && self.src == k.src
            && self.dst == k.dst
            && self.sport == k.sport
            && self.dport == k.dport
            && self.proto == k.proto
    }
    /// Empty, or `now` is past its deadline: `expires - now` (mod 2^32) above
    /// [`LIVE_AHEAD_MS`]. Exact while no entry stays 2^32 − [`LIVE_AHEAD_MS`] ms (about 49
    /// days) past its deadline without being looked at, which [`ConnTable::sweep`]
    /// guarantees (module docs, "Clock").
    #[inline]
    fn expired(&self, now: u32) -> bool {
        self.state == State::Empty as u8 || self.expires.wrapping_sub(now) > LIVE_AHEAD_MS
    }
    /// The entry's state ([`REMOTE`] and [`RELAYED`] masked off).
    pub fn state(&self) -> State {
        match self.state & !(REMOTE | RELAYED) {
            1 => State::SynOnly,
            2 => State::Established,
            3 => State::Closing,
            _ => State::Empty,
        }
    }
    /// Whether the entry came from a peer and has seen no packet here ([`REMOTE`]).
    pub fn is_remote(&self) -> bool {
        self.state & REMOTE != 0
    }
    /// Whether a peer's entry was relayed by a host that was not the connection's own
    /// ([`RELAYED`]).
    pub fn is_relayed(&self) -> bool {
        self.state & RELAYED != 0
    }
    /// Lifetime left at `now` if no packet arrives, ms.
    pub fn remaining_ms(&self, now: u32) -> u32 {
        if self.expired(now) {
            0
        } else {
            self.expires.wrapping_sub(now)
        }
    }
    /// Time since the entry's last packet (or its installation from a peer), ms, to
    /// [`SEEN_UNIT_MS`] (about 1 s).
    pub fn idle_ms(&self, now: u32) -> u32 {
        u32::from(seen_of(now).wrapping_sub(self.seen)) * SEEN_UNIT_MS
    }
    /// The key of the entry.
    pub fn key(&self) -> FlowKeyOf<A> {
        FlowKeyOf { src: self.src, dst: self.dst, sport: self.sport, dport: self.dport, proto: self.proto }
    }
}

/// [`WAYS`] entries: 96 bytes for IPv4, 192 for IPv6. Aligned to 32 bytes in a 64-byte
/// aligned allocation (`conntrack_mem.rs`), so an IPv4 bucket spans exactly two cache
/// lines and an IPv6 bucket three.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(super) struct Bucket<A>([Entry<A>; WAYS]);

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
    /// Expired entries reused.
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
    /// `conntrack_relocate.rs`).
    pub relocated: u64,
    /// Insertions into two full buckets for which no chain of moves was found within the
    /// search bounds (or the table was too full to search); an eviction follows, if any.
    pub relocation_failed: u64,
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

/// Timeouts per state, ms (from `[conntrack]` of the config).
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

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { syn_ms: 5_000, tcp_ms: 600_000, closing_ms: 10_000, udp_ms: 30_000 }
    }
}

/// The table, generic over the address type: `ConnTable` (= `ConnTable<u32>`) for IPv4,
/// `ConnTable<u128>` for IPv6 (48-byte entries).
pub struct ConnTable<A: FlowAddr = u32> {
    buckets: BucketMem<A>,
    mask: u64,
    seed: u64,
    /// Next bucket [`ConnTable::sweep`] visits.
    cursor: usize,
    /// Next bucket the sync refresh walk visits ([`ConnTable::sync_walk`]).
    sync_cursor: usize,
    /// Counters.
    pub counters: CtCounters,
    /// Slots by state, indexed by `State as usize` ([`Occupancy`]); kept on every change.
    occ: [u64; 4],
    /// Buckets a sync dump pass still has to visit from `sync_cursor` on (0: no pass), so
    /// relocation never moves an entry the pass must send behind it
    /// ([`ConnTable::set_dump_pass_left`]).
    dump_left: usize,
    /// Keys of confirmed entries relocation moved behind the running dump pass, offered by
    /// its next step (capacity `relocate::DUMP_PENDING`, reserved at start: never grows).
    dump_pending: Vec<FlowKeyOf<A>>,
    /// The bucket hash of the key the next lookup is expected to be for
    /// ([`ConnTable::expect`]); any other key is hashed as usual.
    hint: Hash,
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
            cursor: 0,
            sync_cursor: 0,
            counters: CtCounters::default(),
            occ: [(n_buckets * WAYS) as u64, 0, 0, 0],
            dump_left: 0,
            dump_pending: Vec::with_capacity(relocate::DUMP_PENDING),
            hint: Hash::NONE,
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
    /// case, touches one bucket (two cache lines).
    #[inline]
    fn find(&self, k: &FlowKeyOf<A>) -> Option<(usize, usize)> {
        let (b1, b2) = self.pair(k);
        if let Some(i) = self.buckets.get(b1).and_then(|b| b.0.iter().position(|e| e.matches(k))) {
            return Some((b1, i));
        }
        let second = self.buckets.get(b2)?;
        second.0.iter().position(|e| e.matches(k)).map(|i| (b2, i))
    }

    /// Looks `k` up; on a hit advances the state with the TCP `flags` of this packet
    /// (SYN-only → established on a non-SYN packet; → closing on FIN/RST) and sets the
    /// deadline to `now` + the timeout of the new state from `t` (the service's). Expired
    /// entries are misses.
    #[inline(always)]
    pub fn lookup(&mut self, k: &FlowKeyOf<A>, flags: u8, now: u32, t: &Timeouts) -> Option<Hit> {
        if let Some((b, i)) = self.find(k) {
            if let Some(e) = self.buckets.get_mut(b).and_then(|bk| bk.0.get_mut(i)) {
                if e.expired(now) {
                    recount(&mut self.occ, e.state, State::Empty as u8);
                    e.state = State::Empty as u8;
                } else {
                    let adopted = e.state & REMOTE != 0;
                    if adopted {
                        sync::adopt(e);
                        self.counters.sync_adopted += 1;
                    }
                    let before = e.state();
                    let raw = e.state;
                    advance(e, flags);
                    recount(&mut self.occ, raw, e.state);
                    e.expires = now.wrapping_add(timeout_of(e.state, e.proto, t));
                    e.seen = seen_of(now);
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
    pub fn peek(&self, k: &FlowKeyOf<A>, now: u32) -> Option<Hit> {
        let (b, i) = self.find(k)?;
        let e = self.buckets.get(b)?.0.get(i)?;
        (!e.expired(now)).then(|| Hit { backend: e.backend, incarnation: e.incarnation, state: e.state(), after: e.state(), adopted: false })
    }

    /// Inserts or overwrites the entry for `k` and returns whether it is now recorded.
    /// Evicts per the documented order when both buckets are full, except that a new entry
    /// never evicts an established one: when both buckets hold only established entries
    /// nothing is recorded (`false`, counted in `syn_not_tracked`), so a SYN flood cannot
    /// push out established connections.
    #[inline]
    pub fn insert(&mut self, k: &FlowKeyOf<A>, backend: u16, incarnation: u16, now: u32, t: &Timeouts) -> bool {
        let (b, i) = match self.find(k) {
            Some(found) => found,
            None => match self.victim(k, now) {
                Some(v) => v,
                None => {
                    self.counters.syn_not_tracked += 1;
                    return false;
                }
            },
        };
        let Some(bucket) = self.buckets.get_mut(b) else { return false };
        let e = &mut bucket.0[i];
        recount(&mut self.occ, e.state, State::SynOnly as u8);
        // Every new entry starts unconfirmed (`SynOnly`): a TCP SYN — or the first packet
        // picked up mid-stream, e.g. after a restart — and the first datagram of a UDP flow.
        // The flow's next packet confirms it (see `advance`).
        let state = State::SynOnly as u8;
        *e = Entry {
            src: k.src,
            dst: k.dst,
            expires: now.wrapping_add(timeout_of(state, k.proto, t)),
            sport: k.sport,
            dport: k.dport,
            backend,
            incarnation,
            seen: seen_of(now),
            proto: k.proto,
            state,
        };
        self.counters.inserts += 1;
        true
    }

    /// The slot a new entry for `k` takes when `k` has none: the best victim over both
    /// buckets in the documented order (an empty or expired slot, else the oldest SYN-only
    /// entry, else the oldest closing one), counted; `None` when both buckets hold only
    /// established entries (a new entry never evicts one).
    #[inline]
    fn victim(&mut self, k: &FlowKeyOf<A>, now: u32) -> Option<(usize, usize)> {
        // Rank: lower is evicted first; within a class the oldest (least recent packet, in
        // `seen` units), then the nearest deadline. By age, not by deadline: a fresh TCP
        // SYN (5 s) must outlive an older UDP first datagram (30 s or more), or a one-packet
        // UDP flood would evict every handshake first. An empty or expired slot of the first
        // bucket wins outright.
        let (b1, b2) = self.pair(k);
        let mut victim = (b1, 0usize);
        let mut rank = (u8::MAX, u16::MAX, u32::MAX);
        let now_seen = seen_of(now);
        'scan: for b in [b1, b2] {
            let Some(bucket) = self.buckets.get(b) else { continue };
            for (i, e) in bucket.0.iter().enumerate() {
                let left = e.expires.wrapping_sub(now);
                let class = if e.expired(now) {
                    0
                } else {
                    match e.state() {
                        State::SynOnly => 1,
                        State::Closing => 2,
                        State::Established => 3,
                        State::Empty => 0,
                    }
                };
                // u16::MAX - age: the oldest ranks lowest
                let young = u16::MAX - now_seen.wrapping_sub(e.seen);
                if class < rank.0 || (class == rank.0 && class != 0 && (young, left) < (rank.1, rank.2)) {
                    victim = (b, i);
                    rank = (class, young, left);
                    if class == 0 {
                        break 'scan;
                    }
                }
            }
        }
        // A new entry is unconfirmed (SYN-only class): it never evicts an established
        // connection, so neither a SYN flood nor a flood of stray ACKs/UDP datagrams can
        // push real connections out of the table.
        if rank.0 != 0 {
            // Both buckets are full of live entries: make room by moving entries to their
            // other buckets before anything is evicted (out of line, bounded).
            if let Some(free) = self.relocate(b1, b2, now) {
                return Some(free);
            }
        }
        match rank.0 {
            0 => {
                if self.buckets.get(victim.0).is_some_and(|b| b.0[victim.1].state != State::Empty as u8) {
                    self.counters.expired_reused += 1;
                }
            }
            1 => self.counters.evicted_syn_only += 1,
            2 => self.counters.evicted_closing += 1,
            _ => return None,
        }
        Some(victim)
    }

    /// Clears expired entries in the next `buckets` buckets (a cursor walks the table
    /// round-robin) and returns how many. The worker calls it every poll iteration, so the
    /// whole table is visited every `capacity / WAYS / buckets` iterations: no idle entry
    /// lives long enough for its `u32` millisecond age to wrap (module docs, "Clock").
    /// Costs one bucket read per bucket; never allocates.
    #[inline]
    pub fn sweep(&mut self, now: u32, buckets: usize) -> usize {
        let mut n = 0;
        let len = self.buckets.len();
        for _ in 0..buckets.min(len) {
            self.cursor = (self.cursor + 1) & (len - 1);
            if let Some(b) = self.buckets.get_mut(self.cursor) {
                for e in b.0.iter_mut() {
                    if e.state != State::Empty as u8 && e.expired(now) {
                        recount(&mut self.occ, e.state, State::Empty as u8);
                        e.state = State::Empty as u8;
                        n += 1;
                    }
                }
            }
        }
        self.counters.swept += n as u64;
        n
    }

    /// Removes the entry for `k`, if any.
    pub fn remove(&mut self, k: &FlowKeyOf<A>) -> bool {
        match self.find(k) {
            Some((b, i)) => {
                recount(&mut self.occ, self.buckets[b].0[i].state, State::Empty as u8);
                self.buckets[b].0[i].state = State::Empty as u8;
                true
            }
            None => false,
        }
    }

}

/// Idle timeout (ms) of an entry in raw state `state` of protocol `proto`: the SYN, TCP
/// (the service's idle timeout) or closing timeout for TCP, the UDP one (the service's)
/// for anything else.
#[inline(always)]
fn timeout_of(state: u8, proto: u8, t: &Timeouts) -> u32 {
    if proto != crate::wire::PROTO_TCP {
        return t.udp_ms;
    }
    match state & 3 {
        1 => t.syn_ms,
        3 => t.closing_ms,
        _ => t.tcp_ms,
    }
}

/// TCP state machine of an entry for one packet's `flags` (the deadline follows the new
/// state: [`timeout_of`]).
#[inline]
fn advance<A>(e: &mut Entry<A>, flags: u8) {
    use crate::wire::tcp_flags::*;
    if e.proto != crate::wire::PROTO_TCP {
        // UDP and others: the second packet confirms the flow (idle timeout unchanged).
        if e.state == State::SynOnly as u8 {
            e.state = State::Established as u8;
        }
        return;
    }
    if flags & (FIN | RST) != 0 {
        e.state = State::Closing as u8;
    } else if e.state == State::SynOnly as u8 && flags & SYN == 0 {
        e.state = State::Established as u8;
    }
}

#[cfg(test)]
#[path = "conntrack_tests.rs"]
mod tests;
