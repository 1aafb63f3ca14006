//! Model-based test of the connection table's capacity promise (docs/architecture.md
//! "Connection tracking"): below 95 % load no live flow loses its entry, whatever the
//! arrival order; a SYN flood evicts no established entry; relocations (entries moved to
//! their other bucket to make room) happen, and every lookup stays right during and after
//! them; the occupancy counters equal a walk of the table.
//!
//! The reference model is a plain map from flow to (backend, state, last packet, timeout)
//! with the table's rules (spec/backend-selection.md "Connection tracking": every new entry
//! starts unconfirmed, the next packet confirms it, FIN/RST closes it, an entry idle longer
//! than its state's timeout is gone) and a capacity promise instead of buckets: while the
//! flows it holds are at most 95 % of the table's slots, every new flow is recorded and
//! nothing is ever evicted.
//!
//! The table is driven the way the worker drives it: a packet is a lookup, and a miss is an
//! insertion of an unconfirmed entry.

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use spillway_dataplane::fastpath::conntrack::{ConnTable, CtKey, Timeouts, TICK_MS};
use spillway_dataplane::wire::tcp_flags::{ACK, FIN, SYN};
use spillway_shared::flow::{fmix64, FlowAddr};
use std::collections::HashMap;

/// Slots of the table under test (256 buckets of 4).
const CAP: usize = 1024;
/// Flows of the universe: 95 % of the slots.
const FLOWS: usize = CAP * 95 / 100;
const T: Timeouts = Timeouts { syn_ms: 5_000, tcp_ms: 600_000, closing_ms: 10_000, udp_ms: 30_000 };

/// One flow of the model.
#[derive(Clone, Copy, Debug)]
struct Flow {
    backend: u16,
    /// 1 unconfirmed, 2 established, 3 closing (the table's `State` numbers).
    state: u8,
    last_seen: u32,
    timeout: u32,
}

impl Flow {
    /// Live before its deadline rounded up to the table's 8 ms tick (the table's clock
    /// rule; this test's clock does not wrap).
    fn live(&self, now: u32) -> bool {
        u64::from(now) < (u64::from(self.last_seen) + u64::from(self.timeout)).div_ceil(u64::from(TICK_MS)) * u64::from(TICK_MS)
    }
}

/// A random TCP key from `r` (IPv4 or IPv6 addresses).
trait Addr: FlowAddr {
    fn from_random(r: u64) -> Self;
}
impl Addr for u32 {
    fn from_random(r: u64) -> u32 {
        r as u32
    }
}
impl Addr for u128 {
    fn from_random(r: u64) -> u128 {
        (0xfd01u128 << 112) | (u128::from(fmix64(r)) << 32) | u128::from(r as u32)
    }
}

fn key<A: Addr>(seed: u64, i: usize) -> CtKey<A> {
    let r = fmix64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    CtKey { src: A::from_random(r), sport: (r >> 40) as u16 | 1024, service: 1 }
}

/// The table and the model side by side.
struct Pair<A: Addr> {
    ct: ConnTable<A>,
    model: HashMap<usize, Flow>,
    keys: Vec<CtKey<A>>,
    now: u32,
}

impl<A: Addr> Pair<A> {
    fn new(table_seed: u64, key_seed: u64, flows: usize) -> Pair<A> {
        Pair::sized(CAP, table_seed, key_seed, flows)
    }

    /// A table of `cap` slots and `flows` keys.
    fn sized(cap: usize, table_seed: u64, key_seed: u64, flows: usize) -> Pair<A> {
        Pair { ct: ConnTable::new(cap, table_seed), model: HashMap::new(), keys: (0..flows).map(|i| key(key_seed, i)).collect(), now: 1 }
    }

    /// One packet of flow `i` with TCP `flags`; a new flow gets `backend`.
    fn packet(&mut self, i: usize, flags: u8, backend: u16) -> Result<(), TestCaseError> {
        let (now, k) = (self.now, self.keys[i]);
        let got = self.ct.lookup(&k, flags, now, &T).map(|h| h.backend);
        match self.model.get_mut(&i).filter(|f| f.live(now)) {
            Some(f) => {
                prop_assert_eq!(got, Some(f.backend), "live flow {} lost its entry or backend at t={}", i, now);
                if flags & FIN != 0 {
                    (f.state, f.timeout) = (3, T.closing_ms);
                } else if f.state == 1 && flags & SYN == 0 {
                    (f.state, f.timeout) = (2, T.tcp_ms);
                }
                f.last_seen = now;
            }
            None => {
                prop_assert_eq!(got, None, "flow {} found though it is gone", i);
                prop_assert!(self.ct.insert(&k, backend, 1, now, &T), "new flow {} not recorded at {} flows", i, self.model.len());
                self.model.insert(i, Flow { backend, state: 1, last_seen: now, timeout: T.syn_ms });
            }
        }
        Ok(())
    }

    /// Every live flow of the model is found with its backend; nothing was evicted; the
    /// occupancy counters equal a walk.
    fn check(&self) -> Result<(), TestCaseError> {
        for (i, f) in &self.model {
            let got = self.ct.peek(&self.keys[*i], self.now).map(|h| h.backend);
            if f.live(self.now) {
                let c = &self.ct.counters;
                prop_assert_eq!(got, Some(f.backend), "live flow {} (state {}) not found at t={} ({} flows; evicted {}, relocated {}, failed {})", i, f.state, self.now, self.model.len(), c.evicted_syn_only, c.relocated, c.relocation_failed);
            } else {
                prop_assert_eq!(got, None, "expired flow {} still found", i);
            }
        }
        let c = &self.ct.counters;
        prop_assert_eq!((c.evicted_syn_only, c.evicted_closing, c.syn_not_tracked), (0, 0, 0), "evictions below 95 % load");
        self.check_counters()
    }

    /// The occupancy counters against a walk (and against the model: every flow it holds
    /// is in the table until cleared, so at least its live flows are counted).
    fn check_counters(&self) -> Result<(), TestCaseError> {
        let (occ, walk) = (self.ct.occupancy(), self.ct.occupancy_by_walk());
        prop_assert_eq!(occ, walk, "occupancy counters differ from a walk");
        prop_assert_eq!(occ.entries() + occ.empty, self.ct.capacity() as u64);
        let live = |s: u8| self.model.values().filter(|f| f.state == s && f.live(self.now)).count() as u64;
        prop_assert!(occ.syn_only >= live(1) && occ.established >= live(2) && occ.closing >= live(3));
        Ok(())
    }

    /// Every entry on `backend` removed, as `spillwayctl flows flush` does.
    fn flush(&mut self, backend: u16) {
        self.ct.retain(|e| e.backend != backend);
        self.model.retain(|_, f| f.backend != backend);
    }
}

fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    // Fisher-Yates driven by a hash of (seed, step): deterministic per case.
    for i in (1..n).rev() {
        let j = (fmix64(seed ^ i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// Handshake order: all flows send a SYN, then all send an ACK (another order), then one
/// backend's flows are flushed and come back with a new SYN and ACK, then all send data.
fn handshake<A: Addr>(table_seed: u64, key_seed: u64) -> Result<(), TestCaseError> {
    let mut p = Pair::<A>::new(table_seed, key_seed, FLOWS);
    for i in permutation(FLOWS, key_seed) {
        p.packet(i, SYN, (i % 8) as u16)?;
    }
    p.check()?;
    p.now += 20;
    for i in permutation(FLOWS, !key_seed) {
        p.packet(i, ACK, 0)?;
    }
    p.check()?;
    prop_assert!(p.ct.counters.relocated > 0, "no entry was moved at 95 % load");
    p.flush(3);
    p.now += 20;
    for i in (0..FLOWS).filter(|i| i % 8 == 3) {
        p.packet(i, SYN, 9)?;
    }
    for i in (0..FLOWS).filter(|i| i % 8 == 3) {
        p.packet(i, ACK, 9)?;
    }
    p.now += 1_000;
    for i in permutation(FLOWS, key_seed.rotate_left(7)) {
        p.packet(i, ACK, 0)?;
    }
    p.check()
}

#[derive(Clone, Debug)]
enum Op {
    /// A packet of flow `i`: 0 SYN, 1–2 ACK, 3 FIN.
    Packet(usize, u8),
    /// The clock moves on by one of a few steps (1 ms to past the closing timeout).
    Tick(u8),
    /// The worker's sweep over `n` buckets.
    Sweep(u8),
    /// Flush one backend's entries.
    Flush(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0..FLOWS, 0u8..4).prop_map(|(i, f)| Op::Packet(i, f)),
        3 => (0u8..6).prop_map(Op::Tick),
        2 => any::<u8>().prop_map(Op::Sweep),
        1 => (0u16..8).prop_map(Op::Flush),
    ]
}

/// Random order: first every flow's SYN and ACK, the flows interleaved at random (up to
/// 95 % load), then packets of any flow in any order, clock steps that expire unconfirmed
/// and closing entries, sweeps and flushes.
fn random<A: Addr>(table_seed: u64, key_seed: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut p = Pair::<A>::new(table_seed, key_seed, FLOWS);
    let mut seen = vec![false; FLOWS];
    for (n, e) in permutation(2 * FLOWS, key_seed).into_iter().enumerate() {
        let i = e % FLOWS;
        p.packet(i, if seen[i] { ACK } else { SYN }, (i % 8) as u16)?;
        seen[i] = true;
        if n % 64 == 0 {
            p.check()?;
        }
    }
    p.check()?;
    prop_assert!(p.ct.counters.relocated > 0, "no entry was moved at 95 % load");
    for (step, o) in ops.iter().enumerate() {
        match *o {
            Op::Packet(i, f) => p.packet(i, [SYN, ACK, ACK, FIN | ACK][f as usize], (step % 8) as u16)?,
            Op::Tick(s) => p.now = p.now.wrapping_add([1, 10, 300, 2_000, 5_001, 10_001][s as usize]),
            Op::Sweep(n) => {
                p.ct.sweep(p.now, n.into());
            }
            Op::Flush(b) => p.flush(b),
        }
        if step % 32 == 0 {
            p.check()?;
        }
    }
    p.check()
}

/// A SYN flood (4 × the table of never-confirmed sources) against a table 95 % full of
/// established flows: every established flow keeps its entry and backend; the flood
/// evicts only its own entries.
fn flood<A: Addr>(table_seed: u64, key_seed: u64) -> Result<(), TestCaseError> {
    let mut p = Pair::<A>::new(table_seed, key_seed, FLOWS + 4 * CAP);
    for i in 0..FLOWS {
        p.packet(i, SYN, (i % 8) as u16)?;
        p.packet(i, ACK, 0)?;
    }
    p.check()?;
    for i in FLOWS..FLOWS + 4 * CAP {
        p.now += 1;
        let k = p.keys[i];
        if p.ct.lookup(&k, SYN, p.now, &T).is_none() {
            p.ct.insert(&k, 7, 1, p.now, &T);
        }
    }
    for i in 0..FLOWS {
        let f = p.model[&i];
        prop_assert_eq!(p.ct.peek(&p.keys[i], p.now).map(|h| h.backend), Some(f.backend), "established flow {} lost to the flood", i);
    }
    let c = &p.ct.counters;
    prop_assert!(c.evicted_syn_only + c.syn_not_tracked > 0, "the flood found room it could not have");
    p.check_counters()
}

/// Unconfirmed entries that expired but that no sweep has cleared yet still count in the
/// occupancy the relocation gate reads (review, 2026-12-02). 930 established flows, then 62
/// SYN-only entries that expire unconfirmed: the table counts 992 entries (the 31/32 gate)
/// though 930 are live. Then 42 new flows' handshakes bring it to 95 % of live flows: the
/// search must still run while the counts are at the gate (the expired slots within reach
/// are free), and no live flow may lose its entry. For a table of `cap` slots (the same
/// shares: at 64 Ki slots, 2,731 handshakes at one clock value).
fn expired_unswept<A: Addr>(cap: usize, table_seed: u64, key_seed: u64) -> Result<(), TestCaseError> {
    let flows = cap * 95 / 100;
    let first = flows - cap / 24;
    let dead = cap * 31 / 32 - first;
    let mut p = Pair::<A>::sized(cap, table_seed, key_seed, flows + dead);
    let order = permutation(flows, key_seed);
    for &i in &order[..first] {
        p.packet(i, SYN, (i % 8) as u16)?;
        p.packet(i, ACK, 0)?;
    }
    p.check()?;
    // The entries that will expire: at the edge of the table's reach (96.9 %), where an
    // insertion may fail (beyond the promise), so they are not flows of the model; only
    // the live flows' entries are checked, and the evictions from here on.
    p.now += 20;
    for i in flows..flows + dead {
        let k = p.keys[i];
        if p.ct.lookup(&k, SYN, p.now, &T).is_none() {
            p.ct.insert(&k, 7, 1, p.now, &T);
        }
    }
    let c = p.ct.counters;
    let before = (c.evicted_syn_only, c.evicted_closing, c.syn_not_tracked);
    p.now += T.syn_ms + 1_000;
    for &i in &order[first..] {
        p.packet(i, SYN, (i % 8) as u16)?;
    }
    p.now += 20;
    for &i in &order[first..] {
        p.packet(i, ACK, 0)?;
    }
    for (i, f) in &p.model {
        prop_assert_eq!(p.ct.peek(&p.keys[*i], p.now).map(|h| h.backend), Some(f.backend), "live flow {} (state {}) not found", i, f.state);
    }
    let c = p.ct.counters;
    prop_assert_eq!((c.evicted_syn_only, c.evicted_closing, c.syn_not_tracked), before, "evictions at 95 % of live flows (relocated {}, failed {})", c.relocated, c.relocation_failed);
    p.check_counters()
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(RunnerConfig { cases, failure_persistence: None, ..RunnerConfig::default() })
}

#[test]
fn handshake_order_at_95_percent_keeps_every_flow() {
    runner(128).run(&(any::<u64>(), any::<u64>()), |(t, k)| handshake::<u32>(t, k)).unwrap();
    runner(32).run(&(any::<u64>(), any::<u64>()), |(t, k)| handshake::<u128>(t, k)).unwrap();
}

#[test]
fn random_order_at_95_percent_keeps_every_flow() {
    let s = (any::<u64>(), any::<u64>(), proptest::collection::vec(op(), 1..4_000));
    runner(64).run(&s, |(t, k, ops)| random::<u32>(t, k, &ops)).unwrap();
    runner(16).run(&s, |(t, k, ops)| random::<u128>(t, k, &ops)).unwrap();
}

/// A case proptest found when the search stopped at 5 moves / 500 bucket reads: at 971
/// flows (94.8 %) relocation failed and an unconfirmed entry was evicted.
#[test]
fn random_order_regression_a_search_of_five_moves_was_too_short() {
    random::<u32>(5683090261150040571, 15110021874921185887, &[]).unwrap();
}

#[test]
fn a_syn_flood_evicts_no_established_entry() {
    runner(32).run(&(any::<u64>(), any::<u64>()), |(t, k)| flood::<u32>(t, k)).unwrap();
    runner(8).run(&(any::<u64>(), any::<u64>()), |(t, k)| flood::<u128>(t, k)).unwrap();
}

#[test]
fn expired_entries_not_yet_swept_do_not_stop_relocation() {
    runner(128).run(&(any::<u64>(), any::<u64>()), |(t, k)| expired_unswept::<u32>(CAP, t, k)).unwrap();
    runner(32).run(&(any::<u64>(), any::<u64>()), |(t, k)| expired_unswept::<u128>(CAP, t, k)).unwrap();
}

/// The same at 64 Ki slots (review, 2026-12-02): 2,731 handshakes at one clock value, over
/// the gate because of 1.9 % expired entries; a relocation budget charged for every read
/// (16,384 banked) skipped searches there and evicted live handshakes.
#[test]
fn expired_entries_at_64_ki_slots() {
    runner(4).run(&(any::<u64>(), any::<u64>()), |(t, k)| expired_unswept::<u32>(64 * CAP, t, k)).unwrap();
    runner(2).run(&(any::<u64>(), any::<u64>()), |(t, k)| expired_unswept::<u128>(64 * CAP, t, k)).unwrap();
}

/// A case of the clean-clone CI run of 2026-12-02: at 972 flows (94.9 %) of the handshake
/// burst, relocation found no chain and an unconfirmed entry was evicted.
#[test]
fn handshake_regression_a_chain_beyond_the_search_bound() {
    handshake::<u32>(12299003739962503021, 7188219138893612945).unwrap();
}

/// The cost bound above the occupancy gate (module docs of `conntrack_relocate`, "Cost
/// bound") under a SYN flood that finds room here and there: 10 new SYN-only entries a
/// millisecond that expire unconfirmed after 100 ms, so about as many live at once as the
/// table has slots (1,000 of 1,024), and free slots appear all the time. The table then
/// stays near the gate, where most SYNs meet two full buckets and a search succeeds after
/// tens of reads or fails after [`MAX_SEARCH`]. Until 2026-12-02 a success restarted the
/// back-off, and this flood read 31.4 M buckets in its 20 s (the same flood at full speed
/// spent 52 % of the worker in the search, `spillway_syn64_random`). Now: the failed
/// searches above the gate read at most [`BUDGET_BANK`] plus [`BUDGET_PER_MS`] per ms
/// (plus one overdraft), the budget did close (searches were skipped), all searches
/// together read under 1 % of that old figure, every SYN is recorded (a flood of SYN-only
/// entries evicts itself), some are still relocated, and the counters equal a walk.
#[test]
fn a_flood_against_a_full_table_spends_the_read_budget() {
    use spillway_dataplane::fastpath::conntrack::{BUDGET_BANK, BUDGET_PER_MS, MAX_SEARCH};
    let fast = Timeouts { syn_ms: 100, ..T };
    for seed in 1..=4u64 {
        let mut ct = ConnTable::<u32>::new(CAP, seed);
        let end = 20_000u32;
        let (mut failed_reads, mut skipped, mut i) = (0u64, 0u64, 0usize);
        for now in 1..end {
            for _ in 0..10 {
                let k = key::<u32>(seed, i);
                i += 1;
                let o = ct.occupancy();
                let full = o.entries() * 32 >= CAP as u64 * 31;
                let (r0, f0) = (ct.counters.relocation_reads, ct.counters.relocation_failed);
                assert!(ct.lookup(&k, SYN, now, &fast).is_none());
                assert!(ct.insert(&k, 1, 1, now, &fast), "SYN {i} not recorded (a SYN-only flood must evict itself)");
                let (dr, df) = (ct.counters.relocation_reads - r0, ct.counters.relocation_failed - f0);
                assert!(dr <= MAX_SEARCH as u64, "a search read {dr} buckets");
                if full && df > 0 {
                    if dr == 0 {
                        skipped += 1;
                    } else {
                        failed_reads += dr;
                    }
                }
            }
            ct.sweep_paced(now, 2);
        }
        let c = ct.counters;
        eprintln!(
            "seed {seed}: relocated {} failed {} (skipped {skipped}) evicted {}; reads {} (of failed searches above the gate {failed_reads})",
            c.relocated, c.relocation_failed, c.evicted_syn_only, c.relocation_reads
        );
        assert!(c.relocated > 0 && c.evicted_syn_only > 0, "not the regime under test: relocated {}, evicted {}", c.relocated, c.evicted_syn_only);
        assert!(skipped > 0, "seed {seed}: the budget never closed: not the regime under test");
        let budget = u64::from(BUDGET_BANK) + u64::from(end) * u64::from(BUDGET_PER_MS) + MAX_SEARCH as u64;
        assert!(failed_reads <= budget, "seed {seed}: failed searches above the gate read {failed_reads} buckets in {end} ms: over the budget of {budget}");
        assert!(c.relocation_reads < 314_000, "seed {seed}: {} bucket reads in {end} ms (the back-off of before: 31.4 M)", c.relocation_reads);
        assert_eq!(ct.occupancy(), ct.occupancy_by_walk(), "counters vs walk");
    }
}
