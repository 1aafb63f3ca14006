//! QUIC-LB decode of a short-header DCID (draft-ietf-quic-load-balancers-19), per
//! algorithm, with a fresh nonce per CID: the cost a short-header packet adds instead of a
//! connection-table lookup (compare with `conntrack/hit`). CIDs are pre-built, 1024 of
//! them, cycled.
//!
//! Run: `cargo bench -p spillway-benches --bench quic_lb -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use spillway_benches::xorshift;
use spillway_shared::quic_lb::{QuicLbConfig, ServerId};

fn bench(c: &mut Criterion) {
    let key = Some([0x8f; 16]);
    let mut g = c.benchmark_group("quic_lb");
    g.throughput(Throughput::Elements(1));
    for (name, sid_len, nonce_len, key) in [("plaintext_2_6", 2, 6, None), ("four_pass_2_6", 2, 6, key), ("four_pass_10_5", 10, 5, key), ("single_pass_8_8", 8, 8, key)] {
        let cfg = QuicLbConfig::new(0, sid_len, nonce_len, key).unwrap();
        let mut s = 0x1234_5678u64;
        let cids: Vec<([u8; 20], usize)> = (0..1024)
            .map(|_| {
                let sid = ServerId::new(&xorshift(&mut s).to_be_bytes().repeat(2)[..usize::from(sid_len)]).unwrap();
                let nonce = xorshift(&mut s).to_be_bytes().repeat(3);
                cfg.encode(&sid, &nonce[..usize::from(nonce_len)]).unwrap()
            })
            .collect();
        let mut i = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) & 1023;
                let (cid, len) = &cids[i];
                cfg.decode(black_box(&cid[..*len]))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
