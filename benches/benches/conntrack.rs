//! Connection table lookups, hit and miss, at 1 K, 1 M and 8 M tracked flows, and the
//! worker's prefetch-then-lookup pair with and without reusing the prefetch pass's hash.
//!
//! Each size uses a table of exactly that capacity, filled with that many distinct keys
//! (two-choice 4-way buckets with relocation on insert keep ~97 % of them at load 1.0; hits are looked up
//! among the keys that stayed, in a shuffled order read sequentially). Keys are drawn at random (xorshift), so at 1 M and 8 M
//! nearly every lookup is a cache miss to DRAM. Prints bytes of table memory per tracked
//! flow for each size, and at 90 % load for IPv4 and IPv6 (`bytes_per_flow_at_90`).
//!
//! Run: `cargo bench -p spillway-benches --bench conntrack -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use spillway_benches::{key_of, xorshift};
use spillway_dataplane::fastpath::conntrack::{ConnTable, CtKey, Timeouts};

/// The table key of flow `i` of [`key_of`] (one service, number 1).
fn ct_key(i: u32) -> CtKey {
    CtKey::of(&key_of(i), 1)
}

const ACK: u8 = 0x10;

/// Bytes of table memory per tracked flow with the table 90 % full (1 Mi entries), IPv4
/// and IPv6, and whether every flow was recorded (relocation: no loss below ~96 %).
fn bytes_per_flow_at_90_percent(t: &Timeouts) {
    fn fill<A: spillway_shared::flow::FlowAddr>(t: &Timeouts, key: impl Fn(u32) -> CtKey<A>) -> (f64, usize) {
        let cap = 1usize << 20;
        let mut ct = ConnTable::<A>::new(cap, 0xfeed);
        let n = cap * 9 / 10;
        for i in 0..n as u32 {
            ct.insert(&key(i), 1, 1, 0, t);
        }
        let live = ct.live(1);
        ((ct.capacity() * ConnTable::<A>::bytes_per_entry()) as f64 / live as f64, live)
    }
    let (b4, l4) = fill::<u32>(t, ct_key);
    let (b6, l6) = fill::<u128>(t, |i| {
        let k = ct_key(i);
        CtKey { src: (0xfd01u128 << 112) | u128::from(k.src), sport: k.sport, service: k.service }
    });
    let n = (1usize << 20) * 9 / 10;
    eprintln!("conntrack/bytes_per_flow_at_90: ipv4 {b4:.1} bytes per tracked flow ({l4} of {n} flows tracked), ipv6 {b6:.1} ({l6} of {n})");
}

fn bench(c: &mut Criterion) {
    let t = Timeouts::default();
    bytes_per_flow_at_90_percent(&t);
    let mut g = c.benchmark_group("conntrack");
    g.throughput(Throughput::Elements(1));
    for (name, n) in [("1k", 1usize << 10), ("1m", 1 << 20), ("8m", 8 << 20)] {
        let started = std::time::Instant::now();
        let mut ct = ConnTable::new(n, 0xfeed);
        for i in 0..n as u32 {
            ct.insert(&ct_key(i), (i % 64) as u16, 1, 0, &t);
        }
        let live = ct.live(1);
        // indices of keys that are present (bounded list so setup stays short)
        let mut present: Vec<u32> = Vec::with_capacity(n.min(1 << 20));
        let mut s = 7u64;
        while present.len() < n.min(1 << 20) {
            let i = (xorshift(&mut s) % n as u64) as u32;
            if ct.lookup(&ct_key(i), ACK, 1, &t).is_some() {
                present.push(i);
            }
        }
        // Shuffle, then read the list in order: the list itself streams (hardware
        // prefetch), so the hit figure is the table's own cost, not a miss on the list.
        let mut s = 11u64;
        for j in (1..present.len()).rev() {
            let k = (xorshift(&mut s) % (j as u64 + 1)) as usize;
            present.swap(j, k);
        }
        let bytes = ct.capacity() * ConnTable::<u32>::bytes_per_entry();
        eprintln!(
            "conntrack/{name}: capacity {} filled with {n} keys, {live} live ({:.1} %), {:.1} bytes of table per tracked flow; setup {:.2?}",
            ct.capacity(),
            100.0 * live as f64 / n as f64,
            bytes as f64 / live as f64,
            started.elapsed()
        );
        let mask = present.len() - 1;
        let mut j = 0usize;
        g.bench_function(BenchmarkId::new("hit", name), |b| {
            b.iter(|| {
                j = (j + 1) & mask;
                let i = present[j];
                ct.lookup(black_box(&ct_key(i)), ACK, 2, &t)
            })
        });
        // The worker's order: the prefetch pass hashes the key (and starts loading its
        // bucket), then the lookup. `prefetch_hit` reuses that hash (`expect`: one hash per
        // packet); `prefetch_hit_rehash` hashes again in the lookup (the table before the
        // lookup took the prefetch pass's hash).
        for (bench, reuse) in [("prefetch_hit", true), ("prefetch_hit_rehash", false)] {
            g.bench_function(BenchmarkId::new(bench, name), |b| {
                b.iter(|| {
                    j = (j + 1) & mask;
                    let k = ct_key(present[j]);
                    let target = ct.prefetch_target(black_box(&k), false);
                    target.issue();
                    if reuse {
                        ct.expect(&target);
                    }
                    ct.lookup(black_box(&k), ACK, 2, &t)
                })
            });
        }
        let mut s = 0x51u64;
        g.bench_function(BenchmarkId::new("miss", name), |b| {
            b.iter(|| {
                let i = xorshift(&mut s) as u32;
                let k = CtKey { service: 2, ..ct_key(i) };
                ct.lookup(black_box(&k), ACK, 2, &t)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
