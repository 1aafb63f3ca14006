//! `wire::parse` on a 64-byte TCP frame with one 802.1Q tag.
//!
//! Run: `cargo bench -p spillway-benches --bench parse -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use spillway_benches::tcp_frame;
use spillway_dataplane::wire::parse;

fn bench(c: &mut Criterion) {
    let f = tcp_frame(0x0a01_0005, 40000, 0x10);
    assert!(parse(&f).is_ok());
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    g.bench_function("tcp64_vlan", |b| b.iter(|| parse(black_box(&f))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
