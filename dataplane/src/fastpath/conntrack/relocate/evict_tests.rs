//! Eviction against a reference model: the strict-`<` scan eviction used until 2026-12-04
//! (kept here as written then) must pick the same slot and count the same class as the
//! branchless minimum of `ConnTable::evict` (module docs of `conntrack_relocate`), for any
//! contents of the two buckets: every state byte (sync flags, garbage bits), live and
//! expired deadlines, services with their own timeouts (0 included), dead entries, equal
//! ranks (ties), and a key whose two buckets are one. A child of `relocate`.

use super::super::{Bucket, ConnTable, CtCounters, Entry, ServiceTimeouts, State, Timeouts, TICK_MS, WAYS};
use proptest::prelude::*;

/// Services 0..4 with their own timeouts; an entry is dead when its service is 3 (a
/// removed service: no handle) or its backend slot is a multiple of 5.
struct Services([Timeouts; 4]);

impl ServiceTimeouts for Services {
    fn of(&self, service: u16) -> Timeouts {
        self.0[usize::from(service) % 4]
    }
    fn resolve(&self, service: u16) -> (Timeouts, Option<u16>) {
        (self.of(service), (service % 4 != 3).then_some(service))
    }
    fn dead_in(&self, handle: Option<u16>, _service: u16, backend: u16, _incarnation: u16) -> bool {
        handle.is_none() || backend % 5 == 0
    }
}

/// The eviction of 2026-12-02..04, verbatim in its logic: ranks `class << 62 | (u32::MAX -
/// age) << 30 | left`, the first strictly lower rank wins.
fn reference(buckets: [&Bucket<u32>; 2], pair: [usize; 2], now: u32, t: &Services) -> Option<((usize, usize), u64)> {
    let (mut best, mut at) = (u64::MAX, None);
    let (mut memo, mut ts, mut handle) = (u32::MAX, Timeouts::default(), None);
    for (bucket, b) in buckets.into_iter().zip(pair) {
        for (i, e) in bucket.0.iter().enumerate() {
            if memo != u32::from(e.service) {
                (ts, handle) = t.resolve(e.service);
                memo = u32::from(e.service);
            }
            let class: u64 = match e.state() {
                _ if t.dead_in(handle, e.service, e.backend, e.incarnation) => 0,
                State::SynOnly => 1,
                State::Closing => 2,
                _ => continue,
            };
            let left = e.remaining_ms(now);
            let age = if class == 0 {
                u32::MAX
            } else {
                let timeout = if class == 1 { ts.syn_ms } else { ts.closing_ms };
                if left >= timeout.saturating_add(TICK_MS) { u32::MAX - 1 } else { timeout.saturating_sub(left) }
            };
            let rank = class << 62 | u64::from(u32::MAX - age) << 30 | u64::from(left);
            if rank < best {
                (best, at) = (rank, Some((b, i)));
            }
        }
    }
    at.map(|a| (a, best >> 62))
}

fn entry() -> impl Strategy<Value = Entry<u32>> {
    // state bytes: mostly the four states with or without sync flags, sometimes anything;
    // deadlines near `now` (ties, expiry) or anywhere
    let state = prop_oneof![4 => (0u8..4, prop_oneof![Just(0u8), Just(0x80), Just(0xC0)]).prop_map(|(s, f)| s | f), 1 => any::<u8>()];
    let deadline = prop_oneof![3 => 0u32..16, 1 => 0u32..(1 << 24)];
    (0u16..4, 0u16..12, 0u16..3, state, deadline).prop_map(|(service, backend, incarnation, s, d)| Entry {
        src: 1,
        sport: 2,
        service,
        backend,
        incarnation,
        life: (d << 8) | u32::from(s),
    })
}

fn timeouts() -> impl Strategy<Value = Timeouts> {
    (prop_oneof![Just(0u32), 0u32..200, 0u32..100_000], prop_oneof![Just(0u32), 0u32..200, 0u32..100_000])
        .prop_map(|(syn_ms, closing_ms)| Timeouts { syn_ms, closing_ms, ..Timeouts::default() })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]
    #[test]
    fn evict_picks_what_the_reference_scan_picks(
        first in proptest::array::uniform4(entry()),
        second in proptest::array::uniform4(entry()),
        t in proptest::array::uniform4(timeouts()),
        now_tick in 0u32..16,
        now_sub in 0u32..TICK_MS,
        one_bucket in proptest::bool::weighted(0.1),
        swap in any::<bool>(),
    ) {
        let t = Services(t);
        let now = now_tick * TICK_MS + now_sub;
        let mut ct = ConnTable::<u32>::new(64, 7);
        let pair = if one_bucket { [5, 5] } else if swap { [9, 2] } else { [2, 9] };
        ct.buckets[pair[0]].0 = first;
        if !one_bucket {
            ct.buckets[pair[1]].0 = second;
        }
        let want = reference([&ct.buckets[pair[0]], &ct.buckets[pair[1]]], pair, now, &t);
        let before = ct.counters;
        let got = ct.evict(pair[0], pair[1], now, &t);
        prop_assert_eq!(got, want.map(|(at, _)| at));
        let c = ct.counters;
        let counted = |c: &CtCounters| (c.expired_reused, c.evicted_syn_only, c.evicted_closing);
        let (d0, d1, d2) = (c.expired_reused - before.expired_reused, c.evicted_syn_only - before.evicted_syn_only, c.evicted_closing - before.evicted_closing);
        match want {
            None => prop_assert_eq!(counted(&c), counted(&before)),
            Some((_, class)) => prop_assert_eq!((d0, d1, d2), [(1, 0, 0), (0, 1, 0), (0, 0, 1)][class as usize]),
        }
        prop_assert!(WAYS == 4);
    }
}
