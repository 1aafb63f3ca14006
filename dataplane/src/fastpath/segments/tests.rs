//! Multi-segment packets through the worker, on in-memory buffers that
//! model chained mbufs ([`MemBuf::segmented`]): a packet split into any segments is
//! forwarded exactly as the same packet in one buffer, in every forwarding mode; headers
//! that straddle segments are pulled up; the `multi_segment` drop is counted only where
//! the modelled device cannot do it.

use crate::control::snapshot::Snapshot;
use crate::control::{compile, CompileInput, HealthView, SlotMap};
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, MemPort, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::{PortInfo, Verdict, Worker};
use crate::wire::{tcp_flags, DropReason, Ipv4Repr, PROTO_TCP};
use proptest::prelude::*;
use spillway_shared::config::Config;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const LB: [u8; 6] = [2, 0, 0, 0, 0, 1];

fn snap(mode: &str, encap_mtu: u16) -> Snapshot {
    let mut t = String::from("[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n");
    t += &format!("[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nprotocol = \"tcp\"\nforwarding_mode = \"{mode}\"\nencap_mtu = {encap_mtu}\n");
    for i in 1..=4 {
        t += &format!("[[services.backends]]\nname = \"b{i}\"\naddress = \"10.0.11.{i}\"\nmac = \"02:00:00:00:0b:0{i}\"\nzone = \"z1\"\n");
    }
    let cfg = Config::from_toml(&t).unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let mut states = std::collections::HashMap::new();
    compile(&cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut states, now_sec: 0.0, generation: 1, port_addrs: vec![0x0a00_0002] })
}

pub(super) fn worker() -> Worker {
    let ports = vec![PortInfo { mac: LB, forward_to: 0, addr: 0x0a00_0002 }];
    Worker::new(0, 1024, 7, Timeouts::default(), Arc::new(WorkerStats::default()), ports)
}

/// A TCP packet to the VIP: `tags` VLAN tags, `payload` bytes after a 20-byte TCP header,
/// DF as given, `pad` bytes of trailing garbage after the IP packet.
fn frame(tags: usize, payload: usize, sport: u16, flags: u8, df: bool, pad: usize) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f[..6].copy_from_slice(&LB);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0x10, 5]);
    let tpids = [0x88a8u16, 0x8100];
    for t in 0..tags {
        f.extend_from_slice(&tpids[2 - tags + t].to_be_bytes());
        f.extend_from_slice(&(100 + t as u16).to_be_bytes());
    }
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let l3 = f.len();
    f.resize(l3 + 40 + payload, 0);
    Ipv4Repr { src: 0x0a01_0005, dst: 0x0a00_0064, protocol: PROTO_TCP, payload_len: 20 + payload, ident: 9, dont_fragment: df, ttl: 64 }.emit(&mut f[l3..]).unwrap();
    let tcp = &mut f[l3 + 20..];
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = flags;
    for (i, b) in f[l3 + 40..].iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    f.extend(std::iter::repeat_n(0xee, pad));
    f
}

/// Segment lengths summing to at least `len`: a first segment of `first` bytes, then
/// chunks of `chunk`.
pub(super) fn split(len: usize, first: usize, chunk: usize) -> Vec<usize> {
    let mut v = vec![first];
    let mut at = first;
    while at < len {
        v.push(chunk);
        at += chunk;
    }
    v
}

/// A verdict, the bytes sent, the segment count.
pub(super) type Outcome = (Verdict, Vec<u8>, u16);

/// Runs one packet through a fresh worker, contiguous and segmented; returns both
/// (verdict, bytes) and (verdict, bytes, segment count).
fn both(mode: &str, encap_mtu: u16, f: &[u8], segs: &[usize]) -> ((Verdict, Vec<u8>), Outcome) {
    contiguous_and_chained(&snap(mode, encap_mtu), f, segs, usize::MAX)
}

/// [`both`] for snapshot `s`, the chain's first segment growable to `head_cap` bytes
/// (`usize::MAX`: unbounded; 2,048: an mbuf's data room).
pub(super) fn contiguous_and_chained(s: &Snapshot, f: &[u8], segs: &[usize], head_cap: usize) -> ((Verdict, Vec<u8>), Outcome) {
    let mut one = MemBuf::new(f);
    let v1 = worker().process(&mut one, 0, s, 0);
    let mut many = MemBuf::segmented(f, segs, head_cap);
    assert_eq!(many.to_vec(), f);
    let v2 = worker().process(&mut many, 0, s, 0);
    ((v1, one.to_vec()), (v2, many.to_vec(), many.segments()))
}

#[test]
fn jumbo_segment_is_forwarded_like_a_contiguous_one() {
    let f = frame(0, 9000 - 40, 40000, tcp_flags::ACK, true, 0);
    assert_eq!(f.len(), 9014);
    for mode in ["L2_DSR", "IPIP", "GUE"] {
        let ((v1, b1), (v2, b2, n)) = both(mode, 9216, &f, &split(f.len(), 2048, 2048));
        assert_eq!(v1, Verdict::Forward, "{mode}");
        assert_eq!((v2, &b2), (v1, &b1), "{mode}");
        assert_eq!(n, 5, "{mode}: segments kept, nothing copied");
        let oh = match mode { "IPIP" => 20, "GUE" => 28, _ => 0 };
        assert_eq!(b2.len(), 9014 + oh, "{mode}");
        if oh > 0 {
            // outer total length covers the whole inner packet
            assert_eq!(u16::from_be_bytes([b2[16], b2[17]]) as usize, oh + 9000, "{mode}");
        }
    }
}

#[test]
fn too_big_for_the_tunnel_gets_frag_needed_in_one_segment() {
    let f = frame(1, 9000 - 40, 40000, tcp_flags::ACK, true, 0);
    let ((v1, b1), (v2, b2, n)) = both("IPIP", 1500, &f, &split(f.len(), 1024, 2048));
    assert_eq!(v1, Verdict::Reply);
    assert_eq!((v2, b2), (v1, b1));
    assert_eq!(n, 1, "the reply is the first segment; the rest is freed");
}

#[test]
fn headers_beyond_a_full_first_segment_are_a_counted_drop() {
    let f = frame(2, 3000, 40000, tcp_flags::SYN, true, 0);
    let s = snap("L2_DSR", 1500);
    // a first segment of 30 bytes that cannot grow: the IPv4 header is not in it
    let mut b = MemBuf::segmented(&f, &[30, 2048], 30);
    assert_eq!(worker().process(&mut b, 0, &s, 0), Verdict::Drop(DropReason::MultiSegment));
    assert_eq!(b.to_vec(), f, "a failed pull-up leaves the packet as it was");
    // with room, the same split is pulled up and forwarded
    let mut b = MemBuf::segmented(&f, &[30, 2048], 2048);
    assert_eq!(worker().process(&mut b, 0, &s, 0), Verdict::Forward);
    assert!(b.segment_lens()[0] >= crate::fastpath::segments::SEGMENTED_HEADERS_MAX);
}

#[test]
fn poll_counts_multi_segment_only_where_the_port_cannot_send_it() {
    let s = snap("L2_DSR", 1500);
    for single_only in [false, true] {
        // the daemon tells the worker what each port can send (main.rs)
        let mut w = worker().with_tx_multi_seg(vec![!single_only]);
        let mut port = MemPort::new(LB);
        port.tx_single_segment_only = single_only;
        let big = frame(0, 9000 - 40, 40001, tcp_flags::SYN, true, 0);
        port.rx.push_back(MemBuf::segmented(&big, &split(big.len(), 2048, 2048), usize::MAX));
        port.rx.push_back(MemBuf::new(&frame(0, 100, 40002, tcp_flags::SYN, true, 0)));
        let mut ports = [port];
        let mut tx = crate::fastpath::worker::PollBuffers::new(1);
        assert_eq!(w.poll(&mut ports, &mut tx, &s, 0), 2);
        let dropped = w.stats.drops[DropReason::MultiSegment as usize].load(Relaxed);
        let sent: Vec<usize> = ports[0].tx.iter().map(|b| b.pkt_len()).collect();
        let backend_packets: u64 = w.stats.backend_packets.iter().map(|c| c.load(Relaxed)).sum();
        if single_only {
            assert_eq!((dropped, sent), (1, vec![154]));
            assert_eq!(w.stats.forwarded.load(Relaxed), 1);
            // Dropped before its flow is tracked or counted for a backend (fresh-user QA:
            // it counted as a new connection of the backend the port then never sent to);
            // the "fragmentation needed" check comes first (its answer is pulled up).
            assert_eq!((w.stats.new_connections.load(Relaxed), backend_packets, w.ct.counters.inserts), (1, 1, 1));
        } else {
            assert_eq!((dropped, sent), (0, vec![9014, 154]));
            assert_eq!(w.stats.forwarded.load(Relaxed), 2);
            assert_eq!((w.stats.new_connections.load(Relaxed), backend_packets, w.ct.counters.inserts), (2, 2, 2));
        }
    }
}

#[test]
fn membuf_segments_model_chained_mbufs() {
    let f: Vec<u8> = (0..100u8).collect();
    let mut b = MemBuf::segmented(&f, &[10, 0, 30, 30], usize::MAX);
    assert_eq!(b.segment_lens(), vec![10, 30, 30, 30]);
    assert_eq!((b.segments(), b.pkt_len(), b.data().len()), (4, 100, 10));
    assert!(b.pull_up(45));
    assert_eq!(b.segment_lens(), vec![45, 25, 30]);
    assert_eq!(b.to_vec(), f);
    assert!(b.pull_up(1000), "pull-up stops at the packet's end");
    assert_eq!(b.segment_lens(), vec![100]);
    let mut b = MemBuf::segmented(&f, &[10, 30], usize::MAX);
    b.truncate(40);
    assert_eq!(b.segment_lens(), vec![10, 30]);
    b.truncate(25);
    assert_eq!(b.segment_lens(), vec![10, 15]);
    b.truncate(5);
    assert_eq!((b.segment_lens(), b.to_vec()), (vec![5], f[..5].to_vec()));
    assert!(b.append(3) && b.pkt_len() == 8);
}

proptest! {
    /// Any frame (0–2 VLAN tags, up to 9,000-byte IP packets, trailing padding), split
    /// anywhere (headers straddling segments included), in any mode: the segmented packet
    /// gets the verdict and the bytes of the contiguous one.
    #[test]
    fn segmented_equals_contiguous(
        tags in 0usize..3,
        payload in 0usize..8960,
        pad in prop_oneof![Just(0usize), 0usize..64],
        first in 1usize..2200,
        chunk in 1usize..4096,
        mode in prop_oneof![Just("L2_DSR"), Just("IPIP"), Just("GUE")],
        encap_mtu in prop_oneof![Just(1500u16), Just(9216u16)],
        df in any::<bool>(),
        sport in 1024u16..,
    ) {
        let f = frame(tags, payload, sport, tcp_flags::SYN, df, pad);
        let ((v1, b1), (v2, b2, _)) = both(mode, encap_mtu, &f, &split(f.len(), first, chunk));
        prop_assert_eq!(v2, v1);
        prop_assert_eq!(b2, b1);
    }

    /// Random bytes in random segments never panic, and every packet ends forwarded,
    /// replied or dropped with a reason, with its length accounted for.
    #[test]
    fn random_segmented_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..3000), first in 1usize..200, chunk in 1usize..512, mode in prop_oneof![Just("L2_DSR"), Just("IPIP"), Just("GUE")]) {
        let s = snap(mode, 1500);
        let mut b = MemBuf::segmented(&bytes, &split(bytes.len(), first, chunk), 256);
        let v = worker().process(&mut b, 0, &s, 0);
        if let Verdict::Drop(_) = v {
            prop_assert_eq!(b.to_vec(), bytes);
        }
    }
}

/// `frame` from another IPv4 source (header checksum recomputed).
fn from(src: [u8; 4], f: &[u8]) -> Vec<u8> {
    let mut f = f.to_vec();
    let l3 = 14;
    f[l3 + 12..l3 + 16].copy_from_slice(&src);
    f[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
    let c = crate::wire::checksum::checksum(&f[l3..l3 + 20]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    f
}

/// RFC 1812 §4.3.2.7: no ICMP error to a broadcast, multicast, unspecified, loopback or
/// reserved source (a spoofed one, or the VIP would reflect for it); counted, not answered.
#[test]
fn no_frag_needed_to_sources_that_may_not_get_one() {
    let s = snap("IPIP", 1400);
    let big = frame(0, 1460, 40000, tcp_flags::ACK, true, 0);
    for src in [[255, 255, 255, 255], [224, 0, 0, 5], [0, 0, 0, 0], [127, 0, 0, 1], [240, 0, 0, 1]] {
        let mut w = worker();
        assert_eq!(w.process(&mut MemBuf::new(&from(src, &big)), 0, &s, 0), Verdict::Drop(DropReason::IcmpErrorForbidden), "{src:?}");
        assert_eq!(w.stats.icmp_frag_needed_sent.load(Relaxed), 0);
    }
    assert_eq!(worker().process(&mut MemBuf::new(&big), 0, &s, 0), Verdict::Reply, "a unicast source is told");
}

/// RFC 1812 §4.3.2.8 / RFC 4443 §2.4(f): ICMP errors are rate limited per worker (a burst
/// of 50, then the configured rate); the packet answered is neither tracked nor counted
/// as the backend's.
#[test]
fn frag_needed_is_rate_limited_and_the_packet_is_not_tracked() {
    let s = snap("GUE", 1400);
    let mut w = worker().with_icmp_errors_per_sec(100);
    let big = frame(0, 1460, 40000, tcp_flags::ACK, true, 0);
    let verdicts = |w: &mut Worker, now: u32, n: usize| (0..n).map(|_| w.process(&mut MemBuf::new(&big), 0, &s, now)).collect::<Vec<_>>();
    let answers = |w: &mut Worker, now: u32, n: usize| verdicts(w, now, n).iter().filter(|v| **v == Verdict::Reply).count();
    let first = verdicts(&mut w, 0, 200);
    assert_eq!(first.iter().filter(|v| **v == Verdict::Reply).count(), 50, "the burst");
    assert_eq!(first.iter().filter(|v| **v == Verdict::Drop(DropReason::IcmpErrorRateLimited)).count(), 150);
    assert_eq!(answers(&mut w, 100, 200), 10, "100 per second: 10 in 100 ms");
    assert_eq!(w.ct.counters.inserts, 0, "the too-big packet was recorded as a connection");
    assert!(w.stats.backend_packets.iter().all(|c| c.load(Relaxed) == 0), "counted as a backend's packets");
    let mut none = worker().with_icmp_errors_per_sec(0);
    assert_eq!(answers(&mut none, 0, 10), 0, "0: never");
}
