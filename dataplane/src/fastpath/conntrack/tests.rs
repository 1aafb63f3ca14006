//! Tests of the connection table, with a model-based proptest against a plain map.
use super::*;
use crate::wire::tcp_flags::*;

fn key(i: u32) -> CtKey {
    CtKey { src: 0x0a01_0000 + i, sport: 40000, service: 1 }
}

#[test]
fn entries_are_16_and_32_bytes_and_buckets_whole_cache_lines() {
    assert_eq!(std::mem::size_of::<Entry>(), 16);
    assert_eq!(std::mem::size_of::<Bucket<u32>>(), 64);
    assert_eq!(std::mem::size_of::<Entry<u128>>(), 32);
    assert_eq!(std::mem::size_of::<Bucket<u128>>(), 128);
    assert_eq!(ConnTable::<u128>::bytes_per_entry(), 32);
    // Every bucket of a table starts on a cache line of a 64-byte aligned allocation: an
    // IPv4 bucket is exactly one line, an IPv6 one two.
    let ct = ConnTable::<u32>::new(1 << 10, 1);
    assert!(ct.buckets.iter().all(|b| (b as *const Bucket<u32> as usize) % 64 == 0));
    let ct = ConnTable::<u128>::new(1 << 10, 1);
    assert!(ct.buckets.iter().all(|b| (b as *const Bucket<u128> as usize) % 64 == 0));
}

/// The 24-bit deadline across both wraps (the `u32` ms clock at 2^32 ms, the tick at 2^27
/// ms) and at every millisecond phase of a tick: an entry lives exactly its timeout, to 8
/// ms (never less), and its derived idle time is to 8 ms, never too high.
#[test]
fn the_deadline_and_idle_time_survive_the_clock_wrapping() {
    let t = Timeouts::default();
    let starts = [u32::MAX - 1_000, (1u32 << 27) - 2_003, 0, 5];
    for base in starts {
        for phase in 0..(2 * TICK_MS) {
            let start = base.wrapping_add(phase);
            let mut ct = ConnTable::new(64, 3);
            ct.insert(&key(1), 3, 1, start, &t);
            assert!(ct.peek(&key(1), start.wrapping_add(t.syn_ms - 1)).is_some(), "SYN lives its timeout");
            assert!(ct.peek(&key(1), start.wrapping_add(t.syn_ms + TICK_MS - 1)).is_none(), "SYN expired within 8 ms of its deadline");
            let conf = start.wrapping_add(2_000);
            assert!(ct.lookup(&key(1), ACK, conf, &t).is_some(), "confirmed across the wrap");
            let e = ct.buckets.iter().flat_map(|b| b.0.iter()).find(|e| e.raw_state() != 0).copied().unwrap();
            let rem = e.remaining_ms(conf);
            assert!((t.tcp_ms..t.tcp_ms + TICK_MS).contains(&rem), "remaining {rem} at {start:#x}");
            let later = conf.wrapping_add(t.tcp_ms - 1);
            assert!(ct.peek(&key(1), later).is_some(), "live 1 ms before its deadline (start {start:#x})");
            assert!((1..=TICK_MS).contains(&e.remaining_ms(later)));
            let idle = e.idle_ms(conf.wrapping_add(1_000), &t);
            assert!((1_000 - TICK_MS..=1_000).contains(&idle), "idle {idle}");
            let gone = conf.wrapping_add(t.tcp_ms + TICK_MS - 1);
            assert!(ct.peek(&key(1), gone).is_none(), "expired within 8 ms past its deadline (start {start:#x})");
            assert_eq!(e.remaining_ms(gone), 0);
            // and stays expired for the whole expired window (2^24 − LIVE_AHEAD ticks, 21 h)
            for late_ms in [1u32 << 20, 3_600_000, 20 * 3_600_000] {
                assert!(ct.peek(&key(1), gone.wrapping_add(late_ms)).is_none(), "looked live {late_ms} ms past its deadline");
            }
        }
    }
}

/// The longest timeout a config allows (16 h, a peer's longest lifetime) fits the live
/// window, at any start.
#[test]
fn the_longest_timeout_is_live_to_its_end() {
    let long = Timeouts { tcp_ms: sync::MAX_SYNCED_LIFETIME_MS, ..Timeouts::default() };
    for start in [0u32, 7, (1 << 27) - 1, u32::MAX - 3] {
        let mut ct = ConnTable::new(64, 3);
        ct.insert(&key(1), 3, 1, start, &long);
        ct.lookup(&key(1), ACK, start, &long).unwrap();
        assert!(ct.peek(&key(1), start.wrapping_add(long.tcp_ms - 1)).is_some());
        assert!(ct.peek(&key(1), start.wrapping_add(long.tcp_ms + TICK_MS)).is_none());
    }
}

fn key6(i: u128) -> CtKey<u128> {
    CtKey { src: (0xfd01u128 << 112) + i, sport: 40000, service: 1 }
}

#[test]
fn ipv6_table_tells_keys_apart_by_high_address_bits() {
    let t = Timeouts::default();
    let mut ct = ConnTable::<u128>::new(1024, 7);
    ct.insert(&key6(1), 3, 1, 0, &t);
    assert_eq!(ct.lookup(&key6(1), ACK, 1, &t).map(|h| h.backend), Some(3));
    // same low 64 bits, another /64: another flow
    let other = CtKey { src: key6(1).src ^ (1u128 << 80), ..key6(1) };
    assert!(ct.lookup(&other, ACK, 1, &t).is_none());
    for i in 0..600u128 {
        ct.insert(&key6(i << 64), (i % 7) as u16, 0, 2, &t);
    }
    let found = (0..600u128).filter(|i| ct.peek(&key6(i << 64), 3).is_some_and(|h| h.backend == (i % 7) as u16)).count();
    assert!(found > 550, "two-choice table keeps nearly all of 600 keys in 1024 slots: {found}");
}

#[test]
fn insert_lookup_and_states() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(1024, 7);
    assert!(ct.lookup(&key(1), SYN, 0, &t).is_none());
    ct.insert(&key(1), 3, 1, 0, &t);
    let h = ct.lookup(&key(1), ACK, 10, &t).unwrap();
    assert_eq!((h.backend, h.state), (3, State::SynOnly));
    let h = ct.lookup(&key(1), ACK, 20, &t).unwrap();
    assert_eq!(h.state, State::Established);
    // established: lives 600 s
    assert!(ct.lookup(&key(1), ACK, 20 + 599_000, &t).is_some());
    ct.lookup(&key(1), FIN | ACK, 20 + 599_001, &t).unwrap();
    // closing: gone after 10 s idle (to the 8 ms tick)
    assert!(ct.lookup(&key(1), ACK, 20 + 599_001 + 10_000 + TICK_MS, &t).is_none());
}

#[test]
fn syn_only_expires_quickly() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(1024, 7);
    ct.insert(&key(1), 3, 1, 0, &t);
    assert!(ct.lookup(&key(1), SYN, 5_000 + TICK_MS, &t).is_none());
}

#[test]
fn flood_evicts_syn_only_first() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(1024, 99);
    // 64 established flows
    for i in 0..64 {
        ct.insert(&key(i), (i % 4) as u16, 1, 0, &t);
        ct.lookup(&key(i), ACK, 1, &t).unwrap();
    }
    // 20,000 SYN-only entries from other sources
    for i in 0..20_000u32 {
        let k = CtKey { src: 0xc000_0000 + i, ..key(0) };
        ct.insert(&k, 0, 1, 2, &t);
    }
    assert!(ct.counters.evicted_syn_only > 18_000);
    for i in 0..64 {
        assert_eq!(ct.lookup(&key(i), ACK, 3, &t).unwrap().backend, (i % 4) as u16);
    }
}

#[test]
fn syn_never_evicts_established() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(4, 1); // one bucket
    for i in 0..4 {
        ct.insert(&key(i), i as u16, 1, i, &t);
        ct.lookup(&key(i), ACK, i, &t).unwrap();
    }
    ct.insert(&key(9), 9, 1, 10, &t);
    assert_eq!(ct.counters.syn_not_tracked, 1);
    assert!(ct.lookup(&key(9), ACK, 11, &t).is_none());
    for i in 0..4 {
        assert_eq!(ct.lookup(&key(i), ACK, 12, &t).unwrap().backend, i as u16);
    }
    // The handshake's next packet (an untracked flow's ACK) does not evict either.
    ct.insert(&key(9), 9, 1, 13, &t);
    assert_eq!(ct.counters.syn_not_tracked, 2);
}

#[test]
fn peek_changes_nothing() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(1024, 7);
    ct.insert(&key(1), 3, 1, 0, &t);
    let before = ct.counters;
    assert_eq!(ct.peek(&key(1), 100).unwrap().state, State::SynOnly);
    assert_eq!(ct.peek(&key(1), 100).unwrap().state, State::SynOnly);
    assert_eq!(ct.counters, before);
    // not refreshed: still expires 5 s after the SYN (to the tick)
    assert!(ct.peek(&key(1), 4_999).is_some());
    assert!(ct.peek(&key(1), 5_000 + TICK_MS).is_none());
    assert!(ct.peek(&key(2), 1).is_none());
}

#[test]
fn new_flows_evict_closing_before_established_and_never_established() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(4, 1); // one bucket
    for i in 0..4 {
        ct.insert(&key(i), i as u16, 1, i, &t);
        ct.lookup(&key(i), ACK, i, &t).unwrap(); // confirmed: established
    }
    ct.lookup(&key(2), FIN | ACK, 5, &t).unwrap(); // key 2 closing
    ct.insert(&key(9), 9, 1, 10, &t);
    assert_eq!(ct.counters.evicted_closing, 1);
    assert!(ct.lookup(&key(2), ACK, 11, &t).is_none());
    assert!(ct.lookup(&key(9), ACK, 11, &t).is_some());
    // now all four are established: a new flow (ACK picked up mid-stream) is not tracked
    ct.insert(&key(10), 10, 1, 12, &t);
    assert_eq!(ct.counters.syn_not_tracked, 1);
}

#[test]
fn udp_and_midstream_entries_start_unconfirmed() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(1024, 3);
    let u = CtKey { service: 2, ..key(1) };
    let tu = t.for_service(17, t.udp_ms);
    ct.insert(&u, 1, 1, 0, &tu);
    assert_eq!(ct.lookup(&u, 0, 1, &tu).unwrap().state, State::SynOnly);
    assert_eq!(ct.lookup(&u, 0, 2, &tu).unwrap().state, State::Established);
    assert!(ct.peek(&u, 2 + t.udp_ms - 1).is_some(), "the UDP idle timeout");
    ct.insert(&key(2), 1, 1, 0, &t);
    assert_eq!(ct.lookup(&key(2), ACK, 1, &t).unwrap().state, State::SynOnly);
    assert_eq!(ct.lookup(&key(2), ACK, 2, &t).unwrap().state, State::Established);
}

/// a key stored in its second bucket is found after a slot of its
/// first bucket is freed (flush, expiry). The old lookup stopped at the first bucket
/// whenever it held an empty slot.
#[test]
fn key_in_second_bucket_found_after_first_bucket_frees_a_slot() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(64, 5);
    // fill until some key lands in its second bucket
    let mut second = None;
    for i in 0..10_000u32 {
        let k = key(i);
        if !ct.insert(&k, 1, 1, 0, &t) {
            continue;
        }
        ct.lookup(&k, ACK, 0, &t).unwrap();
        let (b1, b2) = ct.buckets_of(&k);
        if ct.find(&k).map(|f| f.0) == Some(b2) && b1 != b2 {
            second = Some((k, b1));
            break;
        }
    }
    let (k, b1) = second.expect("some key overflowed into its second bucket");
    // free one slot of the first bucket (as a flush of another backend would)
    let victim = ct.buckets[b1].0[0].key();
    assert!(ct.remove(&victim));
    assert!(ct.lookup(&k, ACK, 1, &t).is_some(), "live key missed after its first bucket freed a slot");
}

/// an entry idle for 20 h past its deadline is still expired, and a swept table cannot
/// bring it back when the deadline's 24-bit tick or the u32 clock wraps.
#[test]
fn idle_entries_never_come_back_when_the_clock_wraps() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(16, 5);
    ct.insert(&key(1), 1, 1, 0, &t);
    ct.lookup(&key(1), ACK, 1, &t).unwrap();
    assert!(ct.peek(&key(1), 600_000).is_some());
    assert!(ct.peek(&key(1), 600_001 + 20 * 3_600_000).is_none(), "idle 20 h looked live");
    // the sweep runs long before the clock wraps
    let swept: usize = (0..ct.buckets.len()).map(|_| ct.sweep(700_000, 1)).sum();
    assert_eq!(swept, 1);
    assert!(ct.peek(&key(1), 5).is_none());
    assert!(ct.lookup(&key(1), ACK, 0u32.wrapping_sub(1).wrapping_add(3), &t).is_none());
    assert_eq!(ct.live(700_000), 0);
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        /// Insert and confirm key i (tracked keys are established: never evicted).
        Add(u16),
        /// Remove key i, as a flush does.
        Remove(u16),
        /// Look key i up.
        Look(u16),
        /// Sweep n buckets.
        Sweep(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u16..600).prop_map(Op::Add),
            2 => (0u16..600).prop_map(Op::Remove),
            3 => (0u16..600).prop_map(Op::Look),
            1 => any::<u8>().prop_map(Op::Sweep),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        /// Against a plain map: every key the table accepted and that was not removed
        /// is found with its backend, whatever was removed or swept in between, at any
        /// load up to 100 % (256-entry table, up to 600 keys).
        #[test]
        fn every_tracked_key_is_found(ops in proptest::collection::vec(op(), 1..400), seed in any::<u64>()) {
            let t = Timeouts::default();
            let mut ct = ConnTable::new(256, seed);
            let mut model: HashMap<u16, u16> = HashMap::new();
            for (step, o) in ops.into_iter().enumerate() {
                let now = step as u32;
                match o {
                    Op::Add(i) => {
                        if model.contains_key(&i) { continue; }
                        let backend = i.wrapping_mul(7);
                        if ct.insert(&key(i.into()), backend, 1, now, &t) {
                            prop_assert!(ct.lookup(&key(i.into()), ACK, now, &t).is_some());
                            model.insert(i, backend);
                        }
                    }
                    Op::Remove(i) => {
                        prop_assert_eq!(ct.remove(&key(i.into())), model.remove(&i).is_some());
                    }
                    Op::Look(i) => {
                        let got = ct.lookup(&key(i.into()), ACK, now, &t).map(|h| h.backend);
                        prop_assert_eq!(got, model.get(&i).copied(), "key {}", i);
                    }
                    Op::Sweep(n) => {
                        prop_assert_eq!(ct.sweep(now, n.into()), 0);
                    }
                }
                prop_assert_eq!(ct.live(now), model.len());
            }
            for (i, b) in &model {
                prop_assert_eq!(ct.peek(&key((*i).into()), 500).map(|h| h.backend), Some(*b));
            }
        }
    }
}

/// Measurement, not a check (run with `--ignored --nocapture`, release): the load at which
/// a table of random keys first fails to record a new flow (no free slot within the
/// relocation search), over 40 seeds, for 1 Ki and 64 Ki slots. Quoted in
/// docs/architecture.md "Connection tracking".
#[test]
#[ignore]
fn fill_level_at_first_failure() {
    let t = Timeouts::default();
    for cap in [1024usize, 65536] {
        let mut loads = Vec::new();
        for seed in 0..40u64 {
            let mut ct = ConnTable::new(cap, seed);
            let mut n = 0;
            for i in 0..(cap as u32 * 2) {
                let r = spillway_shared::flow::fmix64(seed << 32 | u64::from(i));
                let k = CtKey { src: r as u32, sport: (r >> 40) as u16, service: 1 };
                ct.insert(&k, 1, 1, 0, &t);
                ct.lookup(&k, ACK, 0, &t);
                if ct.counters.syn_not_tracked > 0 || ct.counters.evicted_syn_only > 0 { break; }
                n += 1;
            }
            loads.push(n as f64 / cap as f64);
        }
        loads.sort_by(|a, b| a.partial_cmp(b).unwrap());
        eprintln!("cap {cap}: min {:.4} median {:.4} max {:.4}", loads[0], loads[loads.len() / 2], loads[loads.len() - 1]);
    }
}

/// The lookup after [`ConnTable::expect`] takes its buckets from the prefetch target (the
/// key is hashed once per packet), and a target of another key or another table changes
/// nothing.
#[test]
fn a_lookup_reuses_the_prefetch_hash_of_its_own_key_only() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(1024, 7);
    let other = ConnTable::<u32>::new(1024, 8);
    for i in 0..900 {
        ct.insert(&key(i), (i % 5) as u16, 1, 0, &t);
    }
    for i in 0..900 {
        let want = ct.peek(&key(i), 1).map(|h| h.backend);
        for target in [ct.prefetch_target(&key(i), true), ct.prefetch_target(&key(i + 1), false), other.prefetch_target(&key(i), true), PrefetchTarget::NONE] {
            ct.expect(&target);
            assert_eq!(ct.lookup(&key(i), ACK, 1, &t).map(|h| h.backend), want, "key {i}");
        }
    }
    // Proof that the buckets come from the target: a target whose buckets were altered
    // sends the lookup of its key to the wrong buckets.
    let mut bad = ct.prefetch_target(&key(3), false);
    let (b1, b2) = ct.buckets_of(&key(3));
    bad.hash.buckets = (((b1 + 1) & 255) as u32, ((b2 + 1) & 255) as u32);
    ct.expect(&bad);
    if ![b1, b2].contains(&((b1 + 1) & 255)) && ![b1, b2].contains(&((b2 + 1) & 255)) {
        assert!(ct.peek(&key(3), 1).is_none(), "the lookup hashed the key again");
    }
    ct.expect(&PrefetchTarget::NONE);
    assert!(ct.peek(&key(3), 1).is_some());
}

/// Eviction ranks unconfirmed entries by age, not by deadline: a fresh TCP SYN (5 s) is not
/// evicted before older UDP first datagrams (30 s), so a one-packet UDP flood cannot push
/// handshakes out first (the order of the module doc: the oldest unconfirmed entry).
#[test]
fn a_fresh_syn_outlives_older_udp_entries() {
    let t = Timeouts::default();
    // service 1 is TCP, service 2 UDP (30 s for its first datagram)
    let by_service = |s: u16| if s == 2 { t.for_service(17, t.udp_ms) } else { t };
    let mut ct = ConnTable::new(4, 7);
    let udp = |i: u32| CtKey { src: 0x0b00_0000 + i, sport: 5000, service: 2 };
    for i in 0..3 {
        assert!(ct.insert(&udp(i), 1, 1, i * 1_000, &by_service));
    }
    assert!(ct.insert(&key(1), 2, 1, 10_000, &by_service), "the SYN takes the last way");
    assert!(ct.insert(&udp(3), 1, 1, 10_001, &by_service), "a new UDP flow evicts an unconfirmed entry");
    assert!(ct.peek(&key(1), 10_001).is_some(), "the fresh SYN survives");
    assert!(ct.peek(&udp(0), 10_001).is_none(), "the oldest UDP entry went");
    assert!(ct.peek(&udp(1), 10_001).is_some() && ct.peek(&udp(2), 10_001).is_some());
    assert_eq!(ct.counters.evicted_syn_only, 1);
}

/// The sweep is paced by the clock: called once per 10 ms (an idle worker at the largest
/// `idle_sleep_us`) on a table of 2^18 entries, two buckets per call would take 328 s per
/// cycle; every expired entry is still cleared within `SWEEP_CYCLE_MS` of its deadline,
/// so none can stay unswept long enough for its 24-bit deadline to look live again (21 h).
#[test]
fn the_sweep_clears_every_expired_entry_within_a_cycle_however_rarely_it_runs() {
    let t = Timeouts::default();
    let mut ct = ConnTable::new(1 << 18, 9);
    for i in 0..64 {
        assert!(ct.insert(&key(i * 7919), 1, 1, 0, &t));
        ct.lookup(&key(i * 7919), ACK, 1, &t).unwrap(); // established: deadline 600,001 ms
    }
    let live = |ct: &ConnTable| ct.buckets.iter().flat_map(|b| b.0.iter()).filter(|e| e.raw_state() != State::Empty as u8).count();
    let deadline = 600_001 + TICK_MS;
    let mut now = 0;
    while now <= deadline + SWEEP_CYCLE_MS + 10 {
        ct.sweep_paced(now, crate::fastpath::worker::SWEEP_BUCKETS_PER_POLL);
        if now < 600_000 && now % 50_000 == 0 {
            assert_eq!(live(&ct), 64, "swept before the deadline at {now} ms");
        }
        now += 10;
    }
    assert_eq!(live(&ct), 0, "an expired entry was not swept within {SWEEP_CYCLE_MS} ms of its deadline");
    // a clock gap of 20 h (inside the 21 h window): the next call catches up, at most
    // MAX_SWEEP_PER_CALL buckets (here the whole table)
    for i in 0..64 {
        assert!(ct.insert(&key(i * 7919), 1, 1, now, &t));
    }
    now += 20 * 3_600_000;
    assert_eq!(ct.sweep_paced(now, 2), 64, "one call after the gap sweeps the whole 2^16-bucket table");
}

/// Timeouts for eviction tests: service 2 (UDP) with `udp_ms`, service 3 removed.
struct EditedTimeouts(u32);
impl ServiceTimeouts for EditedTimeouts {
    fn of(&self, s: u16) -> Timeouts {
        let t = Timeouts::default();
        if s == 2 { t.for_service(17, self.0) } else { t }
    }
    fn dead(&self, s: u16, _: u16, _: u16) -> bool {
        s == 3
    }
}

/// A fresh TCP SYN outlives older UDP first datagrams also after a live edit that lowers
/// the UDP service's idle timeout (57,600 s -> 30 s): their time left exceeds today's
/// timeout, so they were set before the edit and rank as the oldest.
#[test]
fn a_fresh_syn_outlives_older_udp_entries_after_a_timeout_edit() {
    let (before, after) = (EditedTimeouts(57_600_000), EditedTimeouts(30_000));
    let mut ct = ConnTable::new(4, 7);
    let udp = |i: u32| CtKey { src: 0x0b00_0000 + i, sport: 5000, service: 2 };
    for i in 0..3 {
        assert!(ct.insert(&udp(i), 1, 1, i * 1_000, &before));
    }
    assert!(ct.insert(&key(1), 2, 1, 9_000, &after));
    assert!(ct.insert(&udp(3), 1, 1, 10_000, &after), "a new UDP flow evicts an unconfirmed entry");
    assert!(ct.peek(&key(1), 10_000).is_some(), "the 1-s-old SYN was evicted before UDP entries 8-10 s old");
}

/// Entries of a removed service can match no packet: eviction takes them first, even
/// established ones, before a fresh SYN.
#[test]
fn entries_of_a_removed_service_are_evicted_first() {
    let t = EditedTimeouts(600_000);
    let mut ct = ConnTable::new(4, 7);
    let gone = |i: u32| CtKey { src: 0x0b00_0000 + i, sport: 5000, service: 3 };
    for i in 0..3 {
        assert!(ct.insert(&gone(i), 1, 1, 8_000 + i, &t));
        ct.lookup(&gone(i), ACK, 8_500, &t.of(3)).unwrap();
    }
    assert!(ct.insert(&key(1), 2, 1, 9_000, &t));
    assert!(ct.insert(&key(2), 2, 1, 10_000, &t), "a new SYN takes a removed service's slot");
    assert!(ct.peek(&key(1), 10_000).is_some(), "the 1-s-old SYN was evicted before the removed service's entries");
    assert_eq!(ct.counters.syn_not_tracked, 0);
}

/// A full table of a removed service's established connections does not lock other
/// services out: those entries can match no packet any more (their service number
/// names no service), so new connections of the remaining service take their slots
/// (`expired_reused`) and every one is tracked (no `syn_not_tracked`).
#[test]
fn a_removed_services_entries_give_way_to_new_connections() {
    use crate::control::{compile, CompileInput, HealthView, SlotMap};
    use crate::fastpath::port::PacketBuf;
    use crate::fastpath::stats::WorkerStats;
    use crate::fastpath::worker::{PortInfo, Verdict, Worker};
    use spillway_shared::config::Config;
    use std::sync::Arc;
    let ports = vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0 }];
    let mut w = Worker::new(0, 16, 1, Timeouts::default(), Arc::new(WorkerStats::default()), ports);
    let cfg = |names: &[(&str, u16)]| {
        let mut t = String::new();
        for (n, port) in names {
            t += &format!("[[services]]\nname = \"{n}\"\nvip = \"10.0.0.100\"\nport = {port}\n[[services.backends]]\nname = \"{n}-b\"\naddress = \"10.10.0.{port}\"\nmac = \"02:00:00:00:00:0a\"\n");
        }
        Config::from_toml(&t).unwrap()
    };
    let mut slots = SlotMap::default();
    let mut build = |c: &Config, generation: u64| {
        slots.sync(c).unwrap();
        compile(c, &slots, CompileInput { health: &HealthView::new(), states: &mut std::collections::HashMap::new(), now_sec: 0.0, generation, port_addrs: vec![0] })
    };
    let both = build(&cfg(&[("web", 80), ("api", 81)]), 1);
    let pkt = |dport: u16, sport: u16, flags: u8| {
        let mut b = crate::fastpath::tests::syn(dport);
        b.data_mut()[34..36].copy_from_slice(&sport.to_be_bytes());
        b.data_mut()[47] = flags;
        b
    };
    for sport in 1000..1100 {
        for flags in [SYN, ACK] {
            assert_eq!(w.process(&mut pkt(80, sport, flags), 0, &both, 0), Verdict::Forward);
        }
    }
    let full = w.ct.occupancy();
    assert!(full.established >= 12 && full.empty == 0, "the table is full, mostly of web's established connections: {full:?}");
    let api_only = build(&cfg(&[("api", 81)]), 2);
    let (before, reused) = (w.ct.counters.syn_not_tracked, w.ct.counters.expired_reused);
    for sport in 2000..2016 {
        assert_eq!(w.process(&mut pkt(81, sport, SYN), 0, &api_only, 10), Verdict::Forward);
    }
    assert_eq!(w.ct.counters.syn_not_tracked - before, 0, "new connections of api went untracked behind dead entries");
    assert!(w.ct.counters.expired_reused - reused >= 12, "web dead entries were reused: {} of {full:?}, {:?}", w.ct.counters.expired_reused - reused, w.ct.counters);
}

/// A fresh entry has up to `TICK_MS - 1` ms more than its timeout left (its deadline is
/// rounded up to a tick): that does not make it look "set under a longer timeout" and
/// rank as the oldest. A SYN inserted off a tick boundary outlives older UDP entries.
#[test]
fn a_fresh_syn_off_a_tick_boundary_outlives_older_udp_entries() {
    let t = EditedTimeouts(30_000);
    let udp = |i: u32| CtKey { src: 0x0b00_0000 + i, sport: 5000, service: 2 };
    for at in [9_001, 9_003, 9_007] {
        let mut ct = ConnTable::new(4, 7);
        for i in 0..3 {
            assert!(ct.insert(&udp(i), 1, 1, i * 1_000 + 3, &t));
        }
        assert!(ct.insert(&key(1), 2, 1, at, &t));
        assert!(ct.insert(&udp(3), 1, 1, at + 1, &t), "a new UDP flow evicts an unconfirmed entry");
        assert!(ct.peek(&key(1), at + 1).is_some(), "the SYN inserted at {at} ms was evicted before UDP entries 6-9 s old");
    }
}

/// A bucket's entry `i` of the differential test below: its key from a pool of three (so
/// keys repeat, and stale copies of the searched key sit in empty slots before and after a
/// live one), its state byte from all four states with the sync flags.
fn pool_entry<A: FlowAddr>(src: [A; 3], pick: u8, state: u8) -> Entry<A> {
    let i = usize::from(pick % 3);
    let raw = [0u8, 1, 2, 3, 0, 2 | REMOTE, 1 | REMOTE | RELAYED, 0][usize::from(state % 8)];
    Entry { src: src[i], sport: 40_000 + u16::from(pick % 2), service: 1 + u16::from(pick / 128), backend: 7, incarnation: 1, life: 0x0012_3400 | u32::from(raw) }
}

proptest::proptest! {
    /// [`Bucket::way_of`] (IPv4: one 64-bit compare per way and a mask; IPv6: way by way)
    /// answers what the plain first-match scan does, for any bucket: empty slots holding
    /// the key (emptied in place), repeats, keys differing only in port or service.
    #[test]
    fn way_match_is_the_first_non_empty_match(cells in proptest::collection::vec((proptest::num::u8::ANY, proptest::num::u8::ANY), WAYS), probe in proptest::num::u8::ANY) {
        let v4 = [0x0a00_0001u32, 0x0a00_0002, 0];
        let b4 = Bucket::<u32>(std::array::from_fn(|i| pool_entry(v4, cells[i].0, cells[i].1)));
        let k4 = pool_entry(v4, probe, 1).key();
        proptest::prop_assert_eq!(b4.way_of(&k4), b4.0.iter().position(|e| e.matches(&k4)));
        let v6 = [0xfd00_0000_0000_0000_0000_0000_0000_0001u128, 0x1, 0xfd00_0000_0000_0000_0000_0000_0000_0002];
        let b6 = Bucket::<u128>(std::array::from_fn(|i| pool_entry(v6, cells[i].0, cells[i].1)));
        let k6 = pool_entry(v6, probe, 1).key();
        proptest::prop_assert_eq!(b6.way_of(&k6), b6.0.iter().position(|e| e.matches(&k6)));
    }
}

/// The fixed cases of [`Bucket::way_of`]'s fallback, which the table's own operations never
/// produce (a new or moved entry takes the first free way, and an emptied copy is free) and
/// the random test above reaches only sometimes: the key's old copy in an empty way before
/// its live copy, and old copies alone.
#[test]
fn way_match_skips_an_emptied_copy_of_the_key() {
    let k = key(5);
    let live = Entry { src: k.src, sport: k.sport, service: k.service, backend: 3, incarnation: 1, life: 0x0012_3400 | State::Established as u32 };
    let emptied = Entry { life: 0x0012_3400, ..live };
    let other = Entry { src: k.src + 1, ..live };
    for (ways, want) in [
        ([emptied, live, other, other], Some(1)),
        ([other, emptied, emptied, live], Some(3)),
        ([emptied, other, emptied, other], None),
        ([live, emptied, other, other], Some(0)),
    ] {
        assert_eq!(Bucket::<u32>(ways).way_of(&k), want);
    }
}
