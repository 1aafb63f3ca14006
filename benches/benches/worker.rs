//! The whole per-packet function `Worker::process` (parse → service → conntrack →
//! Maglev on a miss → L2 DSR rewrite) on 64-byte 802.1Q TCP frames in a `MemBuf`, with a
//! snapshot compiled from a config exactly as the daemon does (1 service, 16 backends,
//! 2 zones).
//!
//! - `established`: one established flow, the same packet again and again (table hot);
//! - `syn_new`: a new flow every packet (SYN; distinct 5-tuples), default 1 M-entry table;
//! - `syn_new_burst32_prefetch`: the same in bursts of 32 with `Worker::prefetch` first;
//! - `established_random/{1k,1m}`: packets of N pre-established flows picked at random,
//!   one at a time (each lookup waits for its own bucket);
//! - `established_burst32/{1k,1m}`: the same in bursts of 32 as `Worker::poll` runs them:
//!   first `Worker::prefetch` for the burst, then `process` for each packet. Throughput is
//!   per packet.
//!
//! Run: `cargo bench -p spillway-benches --bench worker -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use spillway_benches::{bench_config, readdress, set_flow, snapshot, tcp_frame, xorshift};
use spillway_dataplane::fastpath::conntrack::{PrefetchTarget, Timeouts};
use spillway_dataplane::fastpath::port::{MemBuf, PacketBuf};
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PortInfo, Verdict, Worker, PREFETCH_DISTANCE};
use std::sync::Arc;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn worker(capacity: usize) -> Worker {
    let ports = vec![
        PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 1, addr: 0 },
        PortInfo { mac: [2, 0, 0, 0, 0, 2], forward_to: 1, addr: 0 },
    ];
    Worker::new(0, capacity, 0xabcdef, Timeouts::default(), Arc::new(WorkerStats::default()), ports)
}

/// Establishes flows 0..n (SYN then ACK) in `w`.
fn establish(w: &mut Worker, snap: &spillway_dataplane::control::snapshot::Snapshot, n: u32) {
    let mut syn = MemBuf::new(&tcp_frame(0, 0, SYN));
    let mut ack = MemBuf::new(&tcp_frame(0, 0, ACK));
    for i in 0..n {
        set_flow(syn.data_mut(), i);
        set_flow(ack.data_mut(), i);
        assert_eq!(w.process(&mut syn, 0, snap, 0), Verdict::Forward);
        assert_eq!(w.process(&mut ack, 0, snap, 1), Verdict::Forward);
    }
}

fn bench(c: &mut Criterion) {
    let cfg = bench_config(16);
    let snap = snapshot(&cfg);
    let mut g = c.benchmark_group("process");
    g.throughput(Throughput::Elements(1));

    let mut w = worker(1 << 20);
    establish(&mut w, &snap, 1);
    let mut buf = MemBuf::new(&tcp_frame(0, 0, ACK));
    set_flow(buf.data_mut(), 0);
    g.bench_function("established", |b| {
        b.iter(|| {
            readdress(buf.data_mut());
            w.process(black_box(&mut buf), 0, &snap, 2)
        })
    });
    // what was measured is the forwarding path, not a drop
    readdress(buf.data_mut());
    assert_eq!(w.process(&mut buf, 0, &snap, 2), Verdict::Forward, "process/established forwards");

    let mut w = worker(1 << 20);
    let mut buf = MemBuf::new(&tcp_frame(0, 0, SYN));
    let mut i = 0u32;
    g.bench_function("syn_new", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            set_flow(buf.data_mut(), i);
            w.process(black_box(&mut buf), 0, &snap, 2)
        })
    });
    eprintln!("syn_new: {:?}", w.ct.counters);

    // SYNs in bursts of 32 with the all-at-once prefetch pass (`Worker::poll` issues the
    // same prefetches PREFETCH_DISTANCE packets ahead instead; see established_burst32_*).
    let mut w = worker(1 << 20);
    let mut bufs: Vec<MemBuf> = (0..32).map(|_| MemBuf::new(&tcp_frame(0, 0, SYN))).collect();
    g.throughput(Throughput::Elements(32));
    g.bench_function("syn_new_burst32_prefetch", |b| {
        b.iter(|| {
            for m in bufs.iter_mut() {
                i = i.wrapping_add(1);
                set_flow(m.data_mut(), i);
            }
            for m in bufs.iter() {
                w.prefetch(m, &snap);
            }
            let mut fwd = 0;
            for m in bufs.iter_mut() {
                fwd += usize::from(w.process(m, 0, &snap, 2) == Verdict::Forward);
            }
            fwd
        })
    });
    g.throughput(Throughput::Elements(1));

    for (name, n) in [("1k", 1u32 << 10), ("1m", 1 << 20)] {
        // Table of 2 N entries (64 bytes of table per tracked flow) so every flow stays.
        let mut w = worker(2 * n as usize);
        establish(&mut w, &snap, n);
        let mask = n - 1;
        let mut buf = MemBuf::new(&tcp_frame(0, 0, ACK));
        let mut s = 0x77u64;
        g.bench_function(BenchmarkId::new("established_random", name), |b| {
            b.iter(|| {
                set_flow(buf.data_mut(), xorshift(&mut s) as u32 & mask);
                w.process(black_box(&mut buf), 0, &snap, 3)
            })
        });
        let mut bufs: Vec<MemBuf> = (0..32).map(|_| MemBuf::new(&tcp_frame(0, 0, ACK))).collect();
        g.throughput(Throughput::Elements(32));
        // noprefetch; prefetch: every bucket of the burst first; pipelined: each bucket
        // PREFETCH_DISTANCE packets ahead of its lookup, every packet through the general
        // path (what `Worker::poll` did before the vector path); vector: as `Worker::poll`
        // does now, the vector path's stages then each packet in order
        for mode in ["noprefetch", "prefetch", "pipelined", "vector"] {
            g.bench_function(BenchmarkId::new(format!("established_burst32_{mode}"), name), |b| {
                b.iter(|| {
                    for m in bufs.iter_mut() {
                        set_flow(m.data_mut(), xorshift(&mut s) as u32 & mask);
                    }
                    if mode == "vector" {
                        w.plan_burst(&bufs, 0, &snap, 3);
                        let mut fwd = 0;
                        for (j, m) in bufs.iter_mut().enumerate() {
                            fwd += usize::from(w.decide_planned(j, m, 0, &snap) == Verdict::Forward);
                        }
                        return fwd;
                    }
                    let mut targets = [PrefetchTarget::NONE; 32];
                    match mode {
                        "prefetch" => bufs.iter().for_each(|m| w.prefetch(m, &snap)),
                        "pipelined" => {
                            for (t, m) in targets.iter_mut().zip(bufs.iter()) {
                                *t = w.prefetch_target(m, &snap);
                            }
                            targets.iter().take(PREFETCH_DISTANCE).for_each(|t| t.issue());
                        }
                        _ => {}
                    }
                    let mut fwd = 0;
                    for (j, m) in bufs.iter_mut().enumerate() {
                        if mode == "pipelined" {
                            if let Some(t) = targets.get(j + PREFETCH_DISTANCE) {
                                t.issue();
                            }
                        }
                        fwd += usize::from(w.process(m, 0, &snap, 3) == Verdict::Forward);
                    }
                    fwd
                })
            });
        }
        g.throughput(Throughput::Elements(1));
        let c = w.ct.counters;
        eprintln!("established/{name}: hits {} misses {} inserts {}", c.hits, c.misses, c.inserts);
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
