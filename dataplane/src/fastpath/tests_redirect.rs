//! Two workers on in-memory ports with redirect rings (fastpath/worker/redirect.rs): ICMP
//! and ICMPv6 errors and IPv4 and IPv6 fragments of a flow tracked on one worker, received
//! by the other (as RSS delivers them: by the router's address, by the 2-tuple), reach the
//! flow's backend.
//!
//! The flows are opened under a snapshot with 4 backends per service and the errors and
//! fragments sent under one with 8, so a worker without the flow's entry would send many of
//! them to another backend (the new Maglev pick or the 3-tuple hash); each test checks that
//! a lone worker does.

use crate::control::snapshot::Snapshot;
use crate::control::{compile, CompileInput, HealthView, SlotMap};
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, MemPort, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::*;
use crate::sync::Placement;
use crate::wire::DropReason;
use etherparse::{Icmpv4Type, Icmpv6Type, IpNumber, PacketBuilder};
use crate::tests_config::Toml;
use spillway_shared::config::Config;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const LB: [u8; 6] = [2, 0, 0, 0, 0, 1];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const VIP4: [u8; 4] = [10, 0, 0, 100];
const VIP6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
const ROUTER4: [u8; 4] = [10, 9, 0, 1];
const ROUTER6: [u8; 16] = [0xfd, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// Microsoft's RSS verification key ("Verifying the RSS Hash Calculation").
const KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4,
    0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];
/// Flows per test.
const FLOWS: u16 = 32;

fn placement() -> Placement {
    Placement::rss(KEY.to_vec(), (0..128).map(|i| (i % 2) as u16).collect())
}

/// TCP services web (10.0.0.100:80), tls (10.0.0.100:443: a second service on the VIP, so a
/// later fragment before its first is held), web6 ([fd00::100]:80) and tls6 ([fd00::100]:443,
/// the same for IPv6), `n` backends each; without tls and tls6 when `one_service` (each VIP
/// has one service: a later fragment before its first is forwarded at once).
fn config(n: u8, one_service: bool) -> Config {
    let mut t = Toml::new().port("p0", "net_null0", "address = \"10.0.0.2\"\naddress6 = \"fd00::2\"");
    for (name, vip, port, net) in [("web", "10.0.0.100", 80, 0x21), ("tls", "10.0.0.100", 443, 0x22), ("web6", "fd00::100", 80, 0x23), ("tls6", "fd00::100", 443, 0x24)] {
        if one_service && port == 443 {
            continue;
        }
        t = t.service(name, vip, port, "protocol = \"tcp\"");
        for i in 1..=n {
            let addr = if vip.contains(':') { format!("fd00:{net:x}::{i}") } else { format!("10.0.{net}.{i}") };
            t = t.backend(&format!("{name}-{i}"), &addr, &format!("mac = \"02:00:00:00:{net:02x}:{i:02x}\""));
        }
    }
    t.config()
}

/// The snapshots with 4 and then 8 backends per service (slots kept across them).
fn snapshots() -> (Snapshot, Snapshot) {
    snapshots_of(false)
}

/// [`snapshots`] of [`config`]`(_, one_service)`.
fn snapshots_of(one_service: bool) -> (Snapshot, Snapshot) {
    let (mut slots, mut states) = (SlotMap::default(), HashMap::new());
    let mut mk = |n: u8, generation: u64| {
        let cfg = config(n, one_service);
        slots.sync(&cfg).unwrap();
        compile(&cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut states, now_sec: 0.0, generation, port_addrs: vec![0x0a00_0002] })
    };
    (mk(4, 1), mk(8, 2))
}

fn worker(id: usize, redirect: bool) -> Worker {
    let w = Worker::new(id, 4096, 7, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac: LB, forward_to: 0, addr: 0x0a00_0002 }]);
    if redirect {
        w.with_redirect(Arc::new(placement()), 2)
    } else {
        w
    }
}

/// Worker `id` with its own queue of port 0 and its poll buffers (the shared `rings`).
struct Side {
    w: Worker,
    port: Vec<MemPort>,
    bufs: PollBuffers<MemBuf>,
}

impl Side {
    fn new(id: usize, rings: &Arc<RedirectRings<MemBuf>>) -> Side {
        Side { w: worker(id, true), port: vec![MemPort::new(LB)], bufs: PollBuffers::new(1).with_redirect(Some(rings.clone())) }
    }

    /// Receives `frames` on this worker's queue and polls once.
    fn rx(&mut self, snap: &Snapshot, frames: &[Vec<u8>], now: u32) {
        self.port[0].rx.extend(frames.iter().map(|f| MemBuf::new(f)));
        self.w.poll(&mut self.port, &mut self.bufs, snap, now);
    }

    /// The frames this worker sent, oldest first.
    fn sent(&mut self) -> Vec<Vec<u8>> {
        self.port[0].tx.drain(..).map(|b| b.data().to_vec()).collect()
    }
}

fn two_workers(capacity: usize) -> (Arc<RedirectRings<MemBuf>>, [Side; 2]) {
    let rings = Arc::new(RedirectRings::new(2, capacity));
    let sides = [Side::new(0, &rings), Side::new(1, &rings)];
    (rings, sides)
}

fn client4(i: u16) -> [u8; 4] {
    [10, 1, (i >> 8) as u8, i as u8]
}

fn client6(i: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    (a[0], a[1]) = (0xfd, 1);
    a[14..16].copy_from_slice(&i.to_be_bytes());
    a
}

fn sport(i: u16) -> u16 {
    40_000 + i
}

/// The worker RSS gives flow `i` (IPv4 or IPv6) by the placement.
fn owner(i: u16, v6: bool) -> usize {
    let (src, dst) = if v6 { (u128::from_be_bytes(client6(i)), u128::from_be_bytes(VIP6)) } else { (u128::from(u32::from_be_bytes(client4(i))), u128::from(u32::from_be_bytes(VIP4))) };
    placement().workers(v6, src, dst, sport(i), 80).start
}

fn tcp(i: u16, v6: bool, syn: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT_MAC, LB);
    let b = if v6 { b.ipv6(client6(i), VIP6, 64) } else { b.ipv4(client4(i), VIP4, 64) };
    let b = b.tcp(sport(i), 80, 1, 1000);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut out = Vec::new();
    b.write(&mut out, &[]).unwrap();
    out
}

/// A router's "fragmentation needed" (IPv4) or Packet Too Big (IPv6) quoting the
/// backend's reply VIP:80 → client of flow `i`.
fn too_big(i: u16, v6: bool) -> Vec<u8> {
    let mut reply = Vec::new();
    let b = if v6 { PacketBuilder::ipv6(VIP6, client6(i), 60) } else { PacketBuilder::ipv4(VIP4, client4(i), 60) };
    b.tcp(80, sport(i), 9, 1000).ack(1).write(&mut reply, &[0; 64]).unwrap();
    let quote = &reply[..if v6 { 40 + 20 } else { 20 + 8 }];
    let mut out = Vec::new();
    let b = PacketBuilder::ethernet2(CLIENT_MAC, LB);
    if v6 {
        b.ipv6(ROUTER6, VIP6, 64).icmpv6(Icmpv6Type::PacketTooBig { mtu: 1280 }).write(&mut out, quote).unwrap();
    } else {
        let t = Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 });
        b.ipv4(ROUTER4, VIP4, 64).icmpv4(t).write(&mut out, quote).unwrap();
    }
    out
}

/// IPv4 or IPv6 fragment of a TCP segment (ACK) of flow `i`, IP ID (IPv6: Fragment header
/// Identification) `ident`: the first (offset 0, more fragments, the TCP header and 20
/// bytes) or the last (offset 5, 8 bytes).
fn frag(i: u16, ident: u32, first: bool, v6: bool) -> Vec<u8> {
    let mut payload = Vec::new();
    if first {
        let mut h = etherparse::TcpHeader::new(sport(i), 80, 2, 1000);
        (h.ack, h.acknowledgment_number) = (true, 1);
        h.write(&mut payload).unwrap();
        payload.resize(40, 0);
    } else {
        payload.resize(8, 0);
    }
    if v6 {
        return frag6(i, ident, first, &payload);
    }
    let mut ip = etherparse::Ipv4Header::new(payload.len() as u16, 64, IpNumber::TCP, client4(i), VIP4).unwrap();
    ip.identification = ident as u16;
    ip.more_fragments = first;
    ip.fragment_offset = etherparse::IpFragOffset::try_new(if first { 0 } else { 5 }).unwrap();
    let mut out = Vec::new();
    etherparse::Ethernet2Header { source: CLIENT_MAC, destination: LB, ether_type: etherparse::EtherType::IPV4 }.write(&mut out).unwrap();
    ip.write(&mut out).unwrap();
    out.extend_from_slice(&payload);
    out
}

/// IPv6 fragment (RFC 8200 §4.5) of flow `i` carrying `payload`: the IPv6 header (Next
/// Header 44), a Fragment header (Next Header TCP, offset 0 or 5, M on the first) and the
/// fragment's bytes.
fn frag6(i: u16, ident: u32, first: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::Ethernet2Header { source: CLIENT_MAC, destination: LB, ether_type: etherparse::EtherType::IPV6 }.write(&mut out).unwrap();
    out.extend_from_slice(&[0x60, 0, 0, 0]);
    out.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    out.extend_from_slice(&[44, 64]);
    out.extend_from_slice(&client6(i));
    out.extend_from_slice(&VIP6);
    let offset_flags: u16 = if first { 1 } else { 5 << 3 };
    out.extend_from_slice(&[6, 0]);
    out.extend_from_slice(&offset_flags.to_be_bytes());
    out.extend_from_slice(&ident.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The fragment offset (8-byte units) of a frame [`frag`] built.
fn frag_offset(f: &[u8], v6: bool) -> u16 {
    if v6 {
        u16::from_be_bytes([f[56], f[57]]) >> 3
    } else {
        u16::from_be_bytes([f[20], f[21]]) & 0x1fff
    }
}

fn dst_mac(f: &[u8]) -> [u8; 6] {
    f[0..6].try_into().unwrap()
}

/// Opens flows 0..FLOWS of a family on their owners under `s1` (SYN, ACK); the backend
/// MAC of each.
fn open(sides: &mut [Side; 2], s1: &Snapshot, v6: bool) -> Vec<[u8; 6]> {
    (0..FLOWS)
        .map(|i| {
            let o = owner(i, v6);
            sides[o].rx(s1, &[tcp(i, v6, true), tcp(i, v6, false)], 1);
            let sent = sides[o].sent();
            assert_eq!(sent.len(), 2, "flow {i}: SYN and ACK forwarded");
            dst_mac(&sent[1])
        })
        .collect()
}

/// How many of `frames(i)`, decided by a lone worker without the flows' entries under `s2`,
/// leave for another backend than flow `i`'s.
fn lone_misses(s2: &Snapshot, backends: &[[u8; 6]], frames: impl Fn(u16) -> Vec<Vec<u8>>) -> usize {
    let mut lone = Side { w: worker(0, false), port: vec![MemPort::new(LB)], bufs: PollBuffers::new(1) };
    (0..FLOWS)
        .filter(|&i| {
            for f in frames(i) {
                lone.rx(s2, &[f], 10 + u32::from(i));
            }
            lone.sent().iter().any(|f| dst_mac(f) != backends[usize::from(i)])
        })
        .count()
}

/// ICMP errors quoting flows tracked on one worker, received by the other, reach each
/// flow's backend (n of n, both families); without redirection many went to the Maglev
/// pick of the new snapshot (QA B38: 3 of 8).
#[test]
fn icmp_errors_received_by_the_wrong_worker_reach_the_flows_backend() {
    let (s1, s2) = snapshots();
    for v6 in [false, true] {
        let (rings, mut sides) = two_workers(REDIRECT_RING_CAPACITY);
        let backends = open(&mut sides, &s1, v6);
        assert!((0..FLOWS).any(|i| owner(i, v6) == 0) && (0..FLOWS).any(|i| owner(i, v6) == 1), "flows on both workers");
        let misses = lone_misses(&s2, &backends, |i| vec![too_big(i, v6)]);
        assert!(misses >= 4, "the test needs errors a worker without the entry sends elsewhere ({misses} of {FLOWS}, v6 {v6})");
        let (mut reached, mut sent_by_wrong) = (0, 0);
        for i in 0..FLOWS {
            let (o, wrong) = (owner(i, v6), 1 - owner(i, v6));
            let now = 10 + 2 * u32::from(i);
            sides[wrong].rx(&s2, &[too_big(i, v6)], now);
            sides[o].rx(&s2, &[], now + 1);
            let (by_wrong, by_owner) = (sides[wrong].sent(), sides[o].sent());
            assert_eq!(by_wrong.len() + by_owner.len(), 1, "flow {i}: the error sent once");
            sent_by_wrong += by_wrong.len();
            reached += by_wrong.iter().chain(&by_owner).filter(|f| dst_mac(f) == backends[usize::from(i)]).count();
        }
        assert_eq!(reached, usize::from(FLOWS), "errors that reached their flow's backend (v6 {v6})");
        assert_eq!(sent_by_wrong, 0, "the owner sent every error");
        let redirected: u64 = sides.iter().map(|s| s.w.stats.redirected.load(Relaxed)).sum();
        let icmp: u64 = sides.iter().map(|s| s.w.stats.icmp_forwarded.load(Relaxed)).sum();
        assert_eq!((redirected, icmp), (u64::from(FLOWS), u64::from(FLOWS)));
        assert!(rings.is_empty(0) && rings.is_empty(1));
    }
}

/// Fragments of flows tracked on one worker, received by the other (NICs hash fragments on
/// the addresses), reach the flow's backend, first and later fragment alike, in order; also
/// when the later fragment comes first (held until its first, then redirected behind it).
/// IPv4 and IPv6 (Fragment header, 32-bit Identification) alike.
#[test]
fn fragments_received_by_the_wrong_worker_reach_the_flows_backend() {
    let (s1, s2) = snapshots();
    for (v6, later_first) in [(false, false), (false, true), (true, false), (true, true)] {
        let (_rings, mut sides) = two_workers(REDIRECT_RING_CAPACITY);
        let backends = open(&mut sides, &s1, v6);
        let ident = |i: u16| if v6 { 0x8000_0000 | u32::from(500 + i) } else { u32::from(500 + i) };
        let datagram = |i: u16| {
            let (first, last) = (frag(i, ident(i), true, v6), frag(i, ident(i), false, v6));
            if later_first { vec![last, first] } else { vec![first, last] }
        };
        let misses = lone_misses(&s2, &backends, datagram);
        assert!(misses >= 4, "the test needs fragments a worker without the entry sends elsewhere ({misses} of {FLOWS}, v6 {v6})");
        let (mut reached, mut sent_by_wrong) = (0, 0);
        for i in 0..FLOWS {
            let (o, wrong) = (owner(i, v6), 1 - owner(i, v6));
            let now = 10 + 2 * u32::from(i); // the worker clock never goes back
            if later_first {
                // apart: the later one is held until its first arrives
                sides[wrong].rx(&s2, &datagram(i)[..1], now);
                sides[wrong].rx(&s2, &datagram(i)[1..], now);
            } else {
                sides[wrong].rx(&s2, &datagram(i), now);
            }
            sides[o].rx(&s2, &[], now + 1);
            let (by_wrong, by_owner) = (sides[wrong].sent(), sides[o].sent());
            sent_by_wrong += by_wrong.len();
            let sent: Vec<Vec<u8>> = by_wrong.into_iter().chain(by_owner).collect();
            assert_eq!(sent.len(), 2, "flow {i}: both fragments sent (v6 {v6})");
            reached += usize::from(sent.iter().all(|f| dst_mac(f) == backends[usize::from(i)]));
            let offsets: Vec<u16> = sent.iter().map(|f| frag_offset(f, v6)).collect();
            assert_eq!(offsets, [0, 5], "flow {i}: the first fragment, then the later one (v6 {v6})");
        }
        assert_eq!(reached, usize::from(FLOWS), "datagrams whose fragments all reached their flow's backend (v6 {v6}, later first: {later_first})");
        assert_eq!(sent_by_wrong, 0, "the owner sent every fragment (v6 {v6})");
        let held: u64 = sides.iter().map(|s| s.w.stats.fragments_held.load(Relaxed)).sum();
        assert_eq!(held, if later_first { u64::from(FLOWS) } else { 0 });
        let redirected: u64 = sides.iter().map(|s| s.w.stats.redirected.load(Relaxed)).sum();
        assert_eq!(redirected, 2 * u64::from(FLOWS), "both fragments of every datagram handed over (v6 {v6})");
        // a fragment arriving later still follows its datagram's first
        let i = (0..FLOWS).find(|&i| owner(i, v6) == 1).unwrap();
        sides[0].rx(&s2, &[frag(i, ident(i), false, v6)], 100);
        sides[1].rx(&s2, &[], 101);
        let sent = sides[1].sent();
        assert_eq!((sent.len(), sides[0].sent().len()), (1, 0), "a late duplicate of the last fragment goes to the owner too (v6 {v6})");
        assert_eq!(dst_mac(&sent[0]), backends[usize::from(i)]);
    }
}

/// Why a later fragment that comes before its first is not redirected (docs/architecture.md
/// "Redirect rings", the limit): the owner depends on the ports, which only the first
/// fragment carries. One client's connections to one VIP land on both workers by their
/// source port alone, in either family.
#[test]
fn the_owner_of_a_flow_depends_on_its_ports() {
    for v6 in [false, true] {
        let owners: std::collections::HashSet<usize> = (0..64).map(|p| {
            let (src, dst) = if v6 { (u128::from_be_bytes(client6(0)), u128::from_be_bytes(VIP6)) } else { (u128::from(u32::from_be_bytes(client4(0))), u128::from(u32::from_be_bytes(VIP4))) };
            placement().workers(v6, src, dst, 40_000 + p, 80).start
        }).collect();
        assert_eq!(owners.len(), 2, "one address pair, 64 source ports: both workers own some (v6 {v6})");
    }
}

/// The limit docs/architecture.md "Redirect rings" states: on a VIP with one service, a
/// later fragment that comes before its first is forwarded at once by the 3-tuple on the
/// worker RSS gives it, and its first fragment follows it there, not to the flow's owner.
/// The datagram is never split: both fragments leave that worker for the backend a worker
/// without the flow's entry picks; nothing is redirected or held. Both families.
#[test]
fn a_later_fragment_first_on_a_one_service_vip_keeps_its_datagram_whole_where_it_arrives() {
    let (s1, s2) = snapshots_of(true);
    for v6 in [false, true] {
        let (_rings, mut sides) = two_workers(REDIRECT_RING_CAPACITY);
        open(&mut sides, &s1, v6);
        let mut lone = Side { w: worker(0, false), port: vec![MemPort::new(LB)], bufs: PollBuffers::new(1) };
        for i in 0..FLOWS {
            let (o, wrong) = (owner(i, v6), 1 - owner(i, v6));
            let datagram = [frag(i, 700 + u32::from(i), false, v6), frag(i, 700 + u32::from(i), true, v6)];
            let now = 10 + 2 * u32::from(i);
            sides[wrong].rx(&s2, &datagram[..1], now);
            sides[wrong].rx(&s2, &datagram[1..], now);
            sides[o].rx(&s2, &[], now + 1);
            lone.rx(&s2, &datagram, now);
            let (by_wrong, by_owner, by_lone) = (sides[wrong].sent(), sides[o].sent(), lone.sent());
            assert_eq!((by_wrong.len(), by_owner.len()), (2, 0), "flow {i}: both fragments sent where they arrived (v6 {v6})");
            assert_eq!(by_wrong.iter().map(|f| dst_mac(f)).collect::<Vec<_>>(), by_lone.iter().map(|f| dst_mac(f)).collect::<Vec<_>>(), "flow {i}: the backend a worker without the entry picks (v6 {v6})");
            assert_eq!(dst_mac(&by_wrong[0]), dst_mac(&by_wrong[1]), "flow {i}: not split (v6 {v6})");
        }
        let count = |f: fn(&WorkerStats) -> &std::sync::atomic::AtomicU64| sides.iter().map(|s| f(&s.w.stats).load(Relaxed)).sum::<u64>();
        assert_eq!((count(|s| &s.redirected), count(|s| &s.fragments_held)), (0, 0), "v6 {v6}");
    }
}

/// A full ring drops the packet as `redirect_ring_full`, without waiting; the owner decides
/// what the ring held.
#[test]
fn a_full_redirect_ring_counts_and_drops() {
    let (s1, s2) = snapshots();
    let (rings, mut sides) = two_workers(4);
    let backends = open(&mut sides, &s1, false);
    let theirs: Vec<u16> = (0..FLOWS).filter(|&i| owner(i, false) == 1).take(10).collect();
    assert_eq!(theirs.len(), 10);
    let errors: Vec<Vec<u8>> = theirs.iter().map(|&i| too_big(i, false)).collect();
    sides[0].rx(&s2, &errors, 10);
    let a = &sides[0].w.stats;
    assert_eq!((a.redirected.load(Relaxed), a.drops[DropReason::RedirectRingFull as usize].load(Relaxed)), (4, 6));
    assert_eq!(rings.len(1), 4);
    sides[1].rx(&s2, &[], 11);
    let sent = sides[1].sent();
    assert_eq!(sent.iter().map(|f| dst_mac(f)).collect::<Vec<_>>(), theirs[..4].iter().map(|&i| backends[usize::from(i)]).collect::<Vec<_>>());
    assert_eq!(DropReason::RedirectRingFull.name(), "redirect_ring_full");
}

/// Without an RSS placement (`broadcast`: the device reports no redirection table) nothing
/// is redirected: the worker that receives the packet decides it.
#[test]
fn without_an_rss_placement_nothing_is_redirected() {
    let (_, s2) = snapshots();
    let rings = Arc::new(RedirectRings::new(2, 16));
    let mut a = Side { w: worker(0, false).with_redirect(Arc::new(Placement::Broadcast(2)), 2), port: vec![MemPort::new(LB)], bufs: PollBuffers::new(1).with_redirect(Some(rings.clone())) };
    let errors: Vec<Vec<u8>> = (0..FLOWS).map(|i| too_big(i, false)).collect();
    a.rx(&s2, &errors, 1);
    assert_eq!((a.sent().len(), a.w.stats.redirected.load(Relaxed), rings.len(1)), (usize::from(FLOWS), 0, 0));
}
