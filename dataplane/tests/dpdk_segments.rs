//! Chained mbufs on real DPDK: the worker's multi-segment path over
//! `Mbuf` (the C helpers `spw_pktmbuf_pull_up` / `spw_pktmbuf_trim_to`, multi-segment
//! `truncate`, `prepend` on the head) gives the same verdicts and bytes as the in-memory
//! model `MemBuf::segmented` that the unit tests use, frees every segment it drops, and
//! chains survive a trip through a `net_ring` port with multi-segment TX.
//! EAL starts once per process, so this file has exactly one test.

use proptest::test_runner::{Config, TestRunner};
use spillway_dataplane::control::snapshot::Snapshot;
use spillway_dataplane::dpdk::{Eal, EthPort, Mempool};
use spillway_dataplane::fastpath::port::{Burst, MemBuf, PacketBuf, Port};
use spillway_dataplane::fastpath::worker::{PollBuffers, Verdict};
use spillway_dataplane::wire::{Ipv4Repr, PROTO_TCP};

mod common {
    pub mod chains;
}
use common::chains;
use chains::{split, worker, LB};

fn snap(mode: &str, encap_mtu: u16) -> Snapshot {
    let mut t = String::from("[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n");
    t += &format!("[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nprotocol = \"tcp\"\nforwarding_mode = \"{mode}\"\nencap_mtu = {encap_mtu}\n");
    for i in 1..=4 {
        t += &format!("[[services.backends]]\nname = \"b{i}\"\naddress = \"10.0.11.{i}\"\nmac = \"02:00:00:00:0b:0{i}\"\nzone = \"z1\"\n");
    }
    chains::snapshot(&t)
}


/// TCP to the VIP with `tags` VLAN tags and an IP packet of `ip_len` bytes, DF as given,
/// then `pad` bytes after it.
fn frame(tags: usize, ip_len: usize, df: bool, pad: usize) -> Vec<u8> {
    let mut f = [LB, [2, 0, 0, 0, 0x10, 5]].concat();
    for t in 0..tags {
        f.extend_from_slice(&[[0x88, 0xa8], [0x81, 0x00]][2 - tags + t]);
        f.extend_from_slice(&(100 + t as u16).to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00]);
    let l3 = f.len();
    f.resize(l3 + ip_len, 0);
    Ipv4Repr { src: 0x0a01_0005, dst: 0x0a00_0064, protocol: PROTO_TCP, payload_len: ip_len - 20, ident: 9, dont_fragment: df, ttl: 64 }.emit(&mut f[l3..]).unwrap();
    f[l3 + 20..l3 + 22].copy_from_slice(&40000u16.to_be_bytes());
    f[l3 + 22..l3 + 24].copy_from_slice(&80u16.to_be_bytes());
    f[l3 + 32] = 0x50;
    f[l3 + 33] = 0x02;
    for (i, b) in f[l3 + 40..].iter_mut().enumerate() {
        *b = (i * 13 + 1) as u8;
    }
    f.extend(std::iter::repeat_n(0xee, pad));
    f
}


#[test]
fn chained_mbufs() {
    let args: Vec<String> = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--log-level=warning", "--vdev=net_ring0"].iter().map(|s| s.to_string()).collect();
    let _eal = Eal::init(&args).expect("EAL init");
    let pool = Mempool::new("seg_pool", 8191, 0, -1).expect("mempool");

    // 1. Worker over chained mbufs = worker over the MemBuf model, and no segment leaks.
    let snaps: Vec<(&str, Snapshot)> = [("L2_DSR", 1500), ("IPIP", 9216), ("GUE", 9216), ("IPIP", 1500)].iter().map(|&(m, mtu)| (m, snap(m, mtu))).collect();
    let mut runner = TestRunner::new(Config { cases: 64, ..Config::default() });
    let strategy = (0usize..3, 40usize..9001, proptest::bool::ANY, 0usize..40, 1usize..2048, 64usize..2048, 0usize..4);
    runner
        .run(&strategy, |(tags, ip_len, df, pad, first, chunk, which)| {
            let (mode, s) = &snaps[which];
            let f = frame(tags, ip_len, df, pad);
            let segs = split(f.len(), first, chunk);
            let mut model = MemBuf::segmented(&f, &segs, 2048 - 128);
            let mut m = pool.alloc_segmented(&f, &segs).expect("chain");
            assert_eq!(m.to_vec(), f);
            assert_eq!((m.segments(), m.pkt_len()), (model.segments(), f.len()));
            let v_model = worker().process(&mut model, 0, s, 0);
            let v = worker().process(&mut m, 0, s, 0);
            assert_eq!(v, v_model, "{mode} tags {tags} ip_len {ip_len} segs {segs:?}");
            assert_eq!(m.to_vec(), model.to_vec(), "{mode}: bytes");
            assert_eq!(usize::from(m.segments()), model.segments() as usize, "{mode}: segments");
            assert_eq!(m.pkt_len(), model.pkt_len());
            if v != Verdict::Drop(spillway_dataplane::wire::DropReason::MultiSegment) {
                assert_eq!(m.data().len(), model.data().len(), "{mode}: first segment");
            }
            drop(m);
            assert_eq!(pool.in_use(), 0, "every segment back in the pool");
            Ok(())
        })
        .unwrap();

    // 2. trim and pull-up directly
    let f: Vec<u8> = (0..3100u32).map(|i| (i * 7) as u8).collect();
    let mut m = pool.alloc_segmented(&f, &[100, 1000, 1000, 1000]).unwrap();
    assert_eq!(m.segments(), 4);
    assert!(m.pull_up(150));
    assert_eq!((m.data().len(), m.segments(), m.to_vec()), (150, 4, f.clone()));
    assert!(m.pull_up(1100), "the second segment is emptied and freed");
    assert_eq!((m.data().len(), m.segments(), m.to_vec()), (1100, 3, f.clone()));
    assert!(!m.pull_up(4000), "no tailroom for that: unchanged");
    assert_eq!(m.to_vec(), f);
    m.truncate(2500);
    assert_eq!((m.segments(), m.to_vec()), (3, f[..2500].to_vec()));
    m.truncate(2100);
    assert_eq!((m.segments(), m.to_vec()), (2, f[..2100].to_vec()));
    m.truncate(7);
    assert_eq!((m.segments(), m.to_vec()), (1, f[..7].to_vec()));
    drop(m);
    assert_eq!(pool.in_use(), 0);

    // 3. A chained jumbo frame through poll on a ring port with multi-segment TX (net_ring
    //    passes mbuf pointers, so the chain comes back as it was sent).
    let mut port = EthPort::by_name("net_ring0").expect("port");
    port.configure(1, 1, 1024, &pool).expect("configure");
    port.start().expect("start");
    let mut q = port.queue(0);
    q.tx_multi_seg = true;
    let big = frame(0, 9000, true, 0);
    let mut tx: Burst<_> = Burst::new();
    tx.push(pool.alloc_segmented(&big, &split(big.len(), 2048, 2048)).unwrap());
    assert_eq!(q.tx_burst(&mut tx), 1);
    let s = snap("GUE", 9216);
    let mut w = worker();
    let mut ports = [q];
    let mut out = PollBuffers::new(1);
    assert_eq!(w.poll(&mut ports, &mut out, &s, 0), 1, "received the chain");
    let mut rx: Burst<_> = Burst::new();
    assert_eq!(ports[0].rx_burst(&mut rx), 1, "forwarded the chain back into the ring");
    let got = rx[0].to_vec();
    assert_eq!((rx[0].segments(), got.len()), (5, 14 + 28 + 9000));
    assert_eq!(u16::from_be_bytes([got[16], got[17]]), 28 + 9000, "outer total length");
    assert_eq!(&got[14 + 28..], &big[14..], "inner packet unchanged");
    drop(rx);
    // the same chain to a port without multi-segment TX: dropped and counted
    ports[0].tx_multi_seg = false;
    let mut tx: Burst<_> = Burst::new();
    tx.push(pool.alloc_segmented(&big, &split(big.len(), 2048, 2048)).unwrap());
    assert_eq!(ports[0].tx_burst(&mut tx), 1, "the ring itself takes chains");
    assert_eq!(w.poll(&mut ports, &mut out, &s, 1), 1);
    let mut rx: Burst<_> = Burst::new();
    assert_eq!(ports[0].rx_burst(&mut rx), 0);
    assert_eq!(w.stats.drops[spillway_dataplane::wire::DropReason::MultiSegment as usize].load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(pool.in_use(), 0);
}
