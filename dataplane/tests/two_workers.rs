//! Two workers share no mutable state (docs/architecture.md "Packet path rules"): each owns
//! its connection table, counters and scratch; the only thing they share is the immutable
//! snapshot. Run side by side on two threads over disjoint traffic, each sees exactly its
//! own packets and flows, and both pick exactly the backends a lone worker picks (the
//! Maglev choice does not depend on the worker).

use etherparse::PacketBuilder;
use spillway_dataplane::fastpath::conntrack::{CtKey, Timeouts};
use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap};
use spillway_dataplane::fastpath::port::{MemBuf, MemPort, PacketBuf};
use spillway_dataplane::control::snapshot::Snapshot;
use spillway_dataplane::control::counters::read;
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PollBuffers, PortInfo, Worker};
use spillway_shared::config::Config;
use std::collections::HashMap;
use std::sync::Arc;

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn snapshot() -> Snapshot {
    let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n");
    for i in 1..=8 {
        t.push_str(&format!("[[services.backends]]\nname = \"b{i}\"\nmac = \"02:00:00:00:0b:{i:02x}\"\n"));
    }
    let cfg = Config::from_toml(&t).unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    compile(&cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut HashMap::new(), now_sec: 0.0, generation: 1, port_addrs: vec![0] })
}

fn frames(net: u8, n: u32, syn: bool) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], MAC).ipv4([10, net, (i >> 8) as u8, i as u8], [10, 0, 0, 100], 64);
            let b = if syn { b.tcp(1000 + (i % 50000) as u16, 80, 1, 1000).syn() } else { b.tcp(1000 + (i % 50000) as u16, 80, 2, 1000).ack(1) };
            let mut out = Vec::new();
            b.write(&mut out, &[]).unwrap();
            out
        })
        .collect()
}

fn worker(id: usize) -> Worker {
    Worker::new(id, 1 << 18, 1234 + id as u64, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac: MAC, forward_to: 0, addr: 0 }])
}

/// Runs `frames` through `w`; returns the destination MAC of every frame sent.
fn run(w: &mut Worker, snap: &Snapshot, frames: &[Vec<u8>]) -> Vec<[u8; 6]> {
    let mut ports = vec![MemPort::new(MAC)];
    let mut tx = PollBuffers::<MemBuf>::new(1);
    let mut out = Vec::new();
    for chunk in frames.chunks(32) {
        ports[0].rx.extend(chunk.iter().map(|f| MemBuf::new(f)));
        w.poll(&mut ports, &mut tx, snap, 1);
        out.extend(ports[0].tx.drain(..).map(|b| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&b.data()[0..6]);
            m
        }));
    }
    out
}

#[test]
fn workers_share_nothing_but_the_snapshot() {
    fn owned_by_one_thread<T: Send + 'static>() {}
    owned_by_one_thread::<Worker>();

    let snap = Arc::new(snapshot());
    let (a_syn, a_ack) = (frames(1, 20_000, true), frames(1, 20_000, false));
    let (b_syn, b_ack) = (frames(2, 20_000, true), frames(2, 20_000, false));
    // reference: one lone worker sees both traffics
    let mut lone = worker(9);
    let ref_a = run(&mut lone, &snap, &a_syn);
    let ref_b = run(&mut lone, &snap, &b_syn);

    let spawn = |id: usize, syn: Vec<Vec<u8>>, ack: Vec<Vec<u8>>, snap: Arc<Snapshot>| {
        std::thread::spawn(move || {
            let mut w = worker(id);
            let mut macs = run(&mut w, &snap, &syn);
            macs.extend(run(&mut w, &snap, &ack));
            (w, macs)
        })
    };
    let ha = spawn(0, a_syn.clone(), a_ack, snap.clone());
    let hb = spawn(1, b_syn.clone(), b_ack, snap.clone());
    let (wa, ma) = ha.join().unwrap();
    let (wb, mb) = hb.join().unwrap();

    assert!(!Arc::ptr_eq(&wa.stats, &wb.stats), "each worker has its own counters");
    let (ca, cb) = (read(&wa.stats), read(&wb.stats));
    assert_eq!((ca.rx, ca.forwarded, ca.new_connections), (40_000, 40_000, 20_000));
    assert_eq!((cb.rx, cb.forwarded, cb.new_connections), (40_000, 40_000, 20_000));
    // each table holds only its own worker's flows
    let key = |net: u8, i: u32| CtKey { src: u32::from_be_bytes([10, net, (i >> 8) as u8, i as u8]), sport: 1000 + (i % 50000) as u16, service: snap.services[0].id };
    for i in (0..20_000).step_by(97) {
        assert!(wa.ct.peek(&key(1, i), 2).is_some() && wa.ct.peek(&key(2, i), 2).is_none());
        assert!(wb.ct.peek(&key(2, i), 2).is_some() && wb.ct.peek(&key(1, i), 2).is_none());
    }
    // same choices as a lone worker, and every ACK followed its SYN's backend
    assert_eq!(&ma[..20_000], &ref_a[..]);
    assert_eq!(&mb[..20_000], &ref_b[..]);
    assert_eq!(&ma[..20_000], &ma[20_000..]);
    assert_eq!(&mb[..20_000], &mb[20_000..]);
}
