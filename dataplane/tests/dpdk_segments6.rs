//! IPv6 jumbo frames in chained mbufs on real DPDK, beside
//! `dpdk_segments.rs` (IPv4): over `Mbuf` chains the worker gives the same verdicts and
//! bytes as the in-memory model `MemBuf::segmented` for IPv6 packets (VLAN tags, extension
//! headers) by L2 DSR, IP-in-IPv6, GUE over IPv6 (its UDP checksum summed over the mbuf
//! chain, `PacketBuf::for_each_segment`) and over IPv4, and Packet Too Big; etherparse
//! reads every forwarded chain; a GUE-over-IPv6 chain survives a `net_ring` port with
//! multi-segment TX. EAL starts once per process, so this file has exactly one test.

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use proptest::test_runner::{Config, TestRunner};
use spillway_dataplane::control::snapshot::Snapshot;
use spillway_dataplane::dpdk::{Eal, EthPort, Mempool};
use spillway_dataplane::fastpath::port::{Burst, MemBuf, PacketBuf, Port};
use spillway_dataplane::fastpath::worker::{PollBuffers, Verdict};
use spillway_dataplane::wire::ipv6::Ipv6Repr;
use spillway_dataplane::wire::PROTO_TCP;

mod common {
    pub mod chains;
}
use common::chains;
use chains::{split, worker, LB};

/// fd00::100 tcp/80 in `mode`, backends IPv6 (`under6`) or IPv4; port addresses 10.0.0.2
/// and fd00::2.
fn snap(mode: &str, encap_mtu: u16, under6: bool) -> Snapshot {
    let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\naddress6 = \"fd00::2\"\n[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n");
    t += &format!("[[services]]\nname = \"web6\"\nvip = \"fd00::100\"\nport = 80\nprotocol = \"tcp\"\nforwarding_mode = \"{mode}\"\nencap_mtu = {encap_mtu}\n");
    for i in 1..=4 {
        let addr = if under6 { format!("fd00:21::{i}") } else { format!("10.0.11.{i}") };
        t += &format!("[[services.backends]]\nname = \"b{i}\"\naddress = \"{addr}\"\nmac = \"02:00:00:00:0b:0{i}\"\nzone = \"z1\"\n");
    }
    chains::snapshot(&t)
}


/// TCP (ACK) from fd01::5 to fd00::100 with `tags` VLAN tags, a Destination Options
/// header of `opt_units` 8-octet units when given, an IPv6 payload of `payload_len`
/// bytes in all, then `pad` bytes.
fn frame6(tags: usize, opt_units: Option<u8>, payload_len: usize, pad: usize) -> Vec<u8> {
    let mut f = [LB, [2, 0, 0, 0, 0x10, 5]].concat();
    for t in 0..tags {
        f.extend_from_slice(&[[0x88, 0xa8], [0x81, 0x00]][2 - tags + t]);
        f.extend_from_slice(&(100 + t as u16).to_be_bytes());
    }
    f.extend_from_slice(&[0x86, 0xdd]);
    let l3 = f.len();
    let mut body = Vec::new();
    if let Some(u) = opt_units {
        let mut h = vec![0u8; (usize::from(u) + 1) * 8];
        (h[0], h[1], h[2], h[3]) = (PROTO_TCP, u, 1, (usize::from(u) * 8 + 4) as u8);
        body.extend_from_slice(&h);
    }
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    (tcp[12], tcp[13]) = (0x50, 0x10);
    body.extend_from_slice(&tcp);
    let fill = payload_len.saturating_sub(body.len());
    body.extend((0..fill).map(|i| (i * 13 + 1) as u8));
    f.resize(l3 + 40, 0);
    let next_header = if opt_units.is_some() { 60 } else { PROTO_TCP };
    Ipv6Repr { src: 0xfd01 << 112 | 5, dst: 0xfd00 << 112 | 0x100, next_header, payload_len: body.len(), hop_limit: 64, flow_label: 1 }.emit(&mut f[l3..]).unwrap();
    f.extend_from_slice(&body);
    f.extend(std::iter::repeat_n(0xee, pad));
    f
}


/// etherparse reads a forwarded frame; a GUE-over-IPv6 UDP checksum is valid.
fn check_with_etherparse(out: &[u8]) {
    let p = SlicedPacket::from_ethernet(out).expect("etherparse reads the frame");
    if let (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Udp(u))) = (&p.net, &p.transport) {
        let want = u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap();
        assert_eq!(u.checksum(), want, "GUE over IPv6: checksum over every segment");
    }
}

#[test]
fn chained_ipv6_mbufs() {
    let args: Vec<String> = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--log-level=warning", "--vdev=net_ring0"].iter().map(|s| s.to_string()).collect();
    let _eal = Eal::init(&args).expect("EAL init");
    let pool = Mempool::new("seg6_pool", 8191, 0, -1).expect("mempool");

    // 1. Worker over chained mbufs = worker over the MemBuf model, and no segment leaks.
    let snaps: Vec<(&str, Snapshot)> = [("L2_DSR", 1500, true), ("IPIP", 9216, true), ("GUE", 9216, true), ("GUE", 9216, false), ("IPIP", 1500, true)].iter().map(|&(m, mtu, u6)| (m, snap(m, mtu, u6))).collect();
    let mut runner = TestRunner::new(Config { cases: 64, ..Config::default() });
    let strategy = (0usize..3, proptest::option::of(0u8..20), 20usize..8960, 0usize..40, 1usize..2048, 64usize..2048, 0usize..5);
    runner
        .run(&strategy, |(tags, opt, payload_len, pad, first, chunk, which)| {
            let (mode, s) = &snaps[which];
            let f = frame6(tags, opt, payload_len, pad);
            let segs = split(f.len(), first, chunk);
            let mut model = MemBuf::segmented(&f, &segs, 2048 - 128);
            let mut m = pool.alloc_segmented(&f, &segs).expect("chain");
            assert_eq!(m.to_vec(), f);
            let v_model = worker().process(&mut model, 0, s, 0);
            let v = worker().process(&mut m, 0, s, 0);
            assert_eq!(v, v_model, "{mode} tags {tags} opt {opt:?} len {payload_len} segs {segs:?}");
            let got = m.to_vec();
            assert!(got == model.to_vec(), "{mode}: bytes");
            assert_eq!(m.segments(), model.segments(), "{mode}: segments");
            if v == Verdict::Forward {
                check_with_etherparse(&got);
            }
            drop(m);
            assert_eq!(pool.in_use(), 0, "every segment back in the pool");
            Ok(())
        })
        .unwrap();

    // 2. A chained IPv6 jumbo frame through poll on a ring port with multi-segment TX,
    //    GUE over IPv6 (net_ring passes mbuf pointers: the chain comes back as sent).
    let mut port = EthPort::by_name("net_ring0").expect("port");
    port.configure(1, 1, 1024, &pool).expect("configure");
    port.start().expect("start");
    let mut q = port.queue(0);
    q.tx_multi_seg = true;
    let big = frame6(0, Some(1), 9000, 0);
    assert_eq!(big.len(), 14 + 40 + 9000);
    let mut tx: Burst<_> = Burst::new();
    tx.push(pool.alloc_segmented(&big, &split(big.len(), 2048, 2048)).unwrap());
    assert_eq!(q.tx_burst(&mut tx), 1);
    let s = snap("GUE", 9216, true);
    let mut w = worker();
    let mut ports = [q];
    let mut out = PollBuffers::new(1);
    assert_eq!(w.poll(&mut ports, &mut out, &s, 0), 1, "received the chain");
    let mut rx: Burst<_> = Burst::new();
    assert_eq!(ports[0].rx_burst(&mut rx), 1, "forwarded the chain back into the ring");
    let got = rx[0].to_vec();
    assert_eq!((rx[0].segments(), got.len()), (5, 14 + 48 + 9040));
    assert_eq!(usize::from(u16::from_be_bytes([got[18], got[19]])), 8 + 9040, "outer payload length");
    assert_eq!(&got[14 + 48..], &big[14..], "inner packet unchanged");
    check_with_etherparse(&got);
    drop(rx);
    assert_eq!(pool.in_use(), 0);
}
