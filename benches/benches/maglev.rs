//! Maglev lookup (M = 65537, 100 backends) with a fresh flow hash per lookup.
//!
//! Run: `cargo bench -p spillway-benches --bench maglev -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use spillway_benches::{key_of, xorshift};
use spillway_shared::maglev::{MaglevEntry, MaglevTable};

fn bench(c: &mut Criterion) {
    let names: Vec<String> = (0..100).map(|i| format!("backend-{i}")).collect();
    let e: Vec<MaglevEntry<'_>> = names.iter().map(|n| MaglevEntry { name: n, weight: 1.0 }).collect();
    let t = MaglevTable::build(&e, 65537);
    let mut g = c.benchmark_group("maglev");
    g.throughput(Throughput::Elements(1));
    let mut s = 0x1234_5678u64;
    g.bench_function("lookup_65537", |b| b.iter(|| t.lookup(black_box(xorshift(&mut s)))));
    let mut i = 0u32;
    g.bench_function("hash_and_lookup_65537", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            t.lookup(key_of(black_box(i)).hash())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
