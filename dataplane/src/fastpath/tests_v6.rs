//! Tests of the worker's IPv6 path: balancing, fragments, Neighbor Discovery,
//! ICMPv6 errors, encapsulation over either family and Packet Too Big. Frames are built
//! and checked with etherparse.

use crate::control::snapshot::Snapshot;
use crate::control::{compile, CompileInput, HealthView, SlotMap};
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::*;
use crate::fastpath::frag::{DatagramId, HOLD_LIFETIME_MS, HOLD_SLOTS};
use crate::fastpath::port::MemPort;
use crate::wire::DropReason;
use etherparse::{Icmpv6Header, Icmpv6Slice, Icmpv6Type, IpNumber, PacketBuilder, SlicedPacket};
use proptest::prelude::*;
use spillway_shared::config::Config;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const LB: [u8; 6] = [2, 0, 0, 0, 0, 1];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const VIP: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];

fn client(i: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfd;
    a[1] = 1;
    a[14..16].copy_from_slice(&i.to_be_bytes());
    a
}

/// IPv6 services on fd00::100 (tcp/80 with 4 backends, udp/53 with 2) plus an IPv4 one;
/// `extra` goes into the tcp/80 service (e.g. a forwarding mode); port address 10.0.0.2
/// and fd00::2.
fn config(extra: &str, backend_addr: &dyn Fn(u8) -> String) -> Config {
    let mut t = String::from(
        "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\naddress6 = \"fd00::2\"\n[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n[[client_zones]]\nprefix = \"fd01::/64\"\nzone = \"z1\"\n",
    );
    t += &format!("[[services]]\nname = \"web6\"\nvip = \"fd00::100\"\nport = 80\nprotocol = \"tcp\"\n{extra}\n");
    for i in 1..=4u8 {
        t += &format!("[[services.backends]]\nname = \"w{i}\"\naddress = \"{}\"\nmac = \"02:00:00:00:21:{i:02x}\"\nzone = \"z1\"\n", backend_addr(i));
    }
    t += "[[services]]\nname = \"dns6\"\nvip = \"fd00::100\"\nport = 53\nprotocol = \"udp\"\n";
    for i in 1..=2u8 {
        t += &format!("[[services.backends]]\nname = \"d{i}\"\naddress = \"fd00:22::{i}\"\nmac = \"02:00:00:00:22:{i:02x}\"\nzone = \"z1\"\n");
    }
    t += "[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nprotocol = \"tcp\"\nforwarding_mode = \"IPIP\"\n[[services.backends]]\nname = \"v4\"\naddress = \"fd00:11::1\"\nmac = \"02:00:00:00:11:01\"\nzone = \"z1\"\n";
    let c = Config::from_toml(&t).unwrap();
    c.validate().unwrap();
    c
}

fn snapshot(cfg: &Config) -> Snapshot {
    let mut slots = SlotMap::default();
    slots.sync(cfg).unwrap();
    compile(cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut Default::default(), now_sec: 0.0, generation: 1, port_addrs: vec![0x0a00_0002] })
}

fn v6_backend(i: u8) -> String {
    format!("fd00:21::{i}")
}

fn worker() -> Worker {
    Worker::new(0, 1024, 9, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac: LB, forward_to: 0, addr: 0x0a00_0002 }])
}

fn tcp6(src: [u8; 16], sport: u16, syn: bool, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT_MAC, LB).ipv6(src, VIP, 64).tcp(sport, 80, 1, 1000);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

fn run(w: &mut Worker, snap: &Snapshot, frame: &[u8], now: u32) -> (Verdict, Vec<u8>) {
    let mut b = MemBuf::new(frame);
    let v = w.process(&mut b, 0, snap, now);
    (v, b.data().to_vec())
}

#[test]
fn ipv6_flows_are_balanced_and_pinned_with_the_header_as_it_came() {
    let cfg = config("", &v6_backend);
    let snap = snapshot(&cfg);
    let mut w = worker();
    let mut macs = std::collections::BTreeSet::new();
    for c in 0..64u16 {
        let syn = tcp6(client(c), 40000 + c, true, &[]);
        let (v, out) = run(&mut w, &snap, &syn, 0);
        assert_eq!(v, Verdict::Forward);
        assert_eq!(&out[14..], &syn[14..], "L2 DSR leaves the IPv6 packet as it came");
        assert_eq!(&out[6..12], &LB);
        let first = out[0..6].to_vec();
        for t in 1..4 {
            let (v, out) = run(&mut w, &snap, &tcp6(client(c), 40000 + c, false, b"data"), t);
            assert_eq!((v, &out[0..6]), (Verdict::Forward, &first[..]), "flow {c} stays on its backend");
        }
        macs.insert(first);
    }
    assert!(macs.len() >= 3, "64 flows spread over the 4 backends: {macs:?}");
    assert!(w.ct6.live(5) >= 64 && w.ct.live(5) == 0, "IPv6 flows live in the IPv6 table");
}

#[test]
fn hop_limit_zero_and_unknown_destinations_are_dropped_with_reasons() {
    let snap = snapshot(&config("", &v6_backend));
    let mut w = worker();
    let mut f = tcp6(client(1), 1, true, &[]);
    f[14 + 7] = 0;
    assert_eq!(run(&mut w, &snap, &f, 0).0, Verdict::Drop(DropReason::HopLimitExceeded));
    let mut f = tcp6(client(1), 1, true, &[]);
    f[14 + 24 + 15] = 0x99; // fd00::199
    assert_eq!(run(&mut w, &snap, &f, 0).0, Verdict::Drop(DropReason::NotForVip));
    let mut f = tcp6(client(1), 1, true, &[]);
    f[14 + 40 + 3] = 81; // VIP, no service on 81
    assert_eq!(run(&mut w, &snap, &f, 0).0, Verdict::Drop(DropReason::NoService));
}

/// UDP datagram `id` of 3 fragments (Fragment header), optionally last-first.
fn fragments(id: u32, src: [u8; 16], reversed: bool) -> Vec<Vec<u8>> {
    fragments_to(id, src, 53, reversed)
}

/// UDP datagram `id` to `dport` of 3 fragments (offsets 0, 100, 200 in 8-octet units),
/// optionally last-first.
fn fragments_to(id: u32, src: [u8; 16], dport: u16, reversed: bool) -> Vec<Vec<u8>> {
    let mut udp = Vec::new();
    PacketBuilder::ipv6(src, VIP, 64).udp(5000 + id as u16, dport).write(&mut udp, &[7u8; 2000]).unwrap();
    let payload = &udp[40..]; // UDP header + data
    let mut out = Vec::new();
    for (k, chunk) in payload.chunks(800).enumerate() {
        let more = (k + 1) * 800 < payload.len();
        let mut f = Vec::new();
        etherparse::Ethernet2Header { source: CLIENT_MAC, destination: LB, ether_type: etherparse::EtherType::IPV6 }.write(&mut f).unwrap();
        let ip = etherparse::Ipv6Header { traffic_class: 0, flow_label: Default::default(), payload_length: (8 + chunk.len()) as u16, next_header: IpNumber::IPV6_FRAGMENTATION_HEADER, hop_limit: 64, source: src, destination: VIP };
        ip.write(&mut f).unwrap();
        // Fragment header by hand (RFC 8200 §4.5): etherparse 0.16 writes the offset and
        // the M flag in IPv4's bit layout.
        f.extend_from_slice(&[17, 0]);
        f.extend_from_slice(&(((k * 100) as u16) << 3 | u16::from(more)).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(chunk);
        out.push(f);
    }
    if reversed {
        out.reverse();
    }
    out
}

/// Review finding: a Destination Options header after the Fragment header
/// (RFC 8200 §4.1 order) shows the upper protocol only in the first fragment; every
/// fragment must still reach the first one's service and one backend.
#[test]
fn fragments_with_options_after_the_fragment_header_stay_together() {
    let snap = snapshot(&config("", &v6_backend));
    for id in 0..6u32 {
        let mut w = worker();
        // Destination Options (next: UDP, 8 bytes: one PadN) + UDP to :53 + data
        let mut inner = vec![17u8, 0, 1, 4, 0, 0, 0, 0];
        let mut udp = Vec::new();
        PacketBuilder::ipv6(client(9 + id as u16), VIP, 64).udp(5009, 53).write(&mut udp, &[7u8; 1500]).unwrap();
        inner.extend_from_slice(&udp[40..]);
        let mut frames = Vec::new();
        for (k, chunk) in inner.chunks(608).enumerate() {
            let more = (k + 1) * 608 < inner.len();
            let mut f = Vec::new();
            etherparse::Ethernet2Header { source: CLIENT_MAC, destination: LB, ether_type: etherparse::EtherType::IPV6 }.write(&mut f).unwrap();
            let ip = etherparse::Ipv6Header { traffic_class: 0, flow_label: Default::default(), payload_length: (8 + chunk.len()) as u16, next_header: IpNumber::IPV6_FRAGMENTATION_HEADER, hop_limit: 64, source: client(9 + id as u16), destination: VIP };
            ip.write(&mut f).unwrap();
            // Fragment header by hand (RFC 8200 §4.5): Next Header 60, offset in 8-octet units, M
            let off_m = ((k * 608 / 8) as u16) << 3 | u16::from(more);
            f.extend_from_slice(&[60, 0]);
            f.extend_from_slice(&off_m.to_be_bytes());
            f.extend_from_slice(&(1000 + id).to_be_bytes());
            f.extend_from_slice(chunk);
            frames.push(f);
        }
        assert_eq!(frames.len(), 3);
        let mut macs = std::collections::BTreeSet::new();
        for (i, f) in frames.iter().enumerate() {
            let (v, out) = run(&mut w, &snap, f, 1);
            assert_eq!(v, Verdict::Forward, "datagram {id}, fragment {i}");
            macs.insert(out[0..6].to_vec());
        }
        assert_eq!(macs.len(), 1, "datagram {id} split over backends: {macs:?}");
        assert_eq!(&macs.iter().next().unwrap()[0..5], &[2, 0, 0, 0, 0x22], "a dns6 backend");
    }
}

#[test]
fn every_fragment_of_a_datagram_reaches_one_backend() {
    let snap = snapshot(&config("", &v6_backend));
    let mut w = worker();
    let mut used = std::collections::BTreeSet::new();
    for id in 0..12u32 {
        let mut macs = std::collections::BTreeSet::new();
        for f in fragments(0x8000_0000 | id, client(id as u16), id % 2 == 1) {
            let (v, out) = run(&mut w, &snap, &f, id);
            assert_eq!(v, Verdict::Forward);
            assert!(out[0..5] == [2, 0, 0, 0, 0x22], "to a dns6 backend: {:?}", &out[0..6]);
            macs.insert(out[0..6].to_vec());
        }
        assert_eq!(macs.len(), 1, "datagram {id} split");
        used.extend(macs);
    }
    assert_eq!(used.len(), 2, "datagrams spread over both dns6 backends");
    assert!(w.stats.fragments.load(Relaxed) >= 36);
}

/// Two UDP services on the IPv6 VIP fd00::100 (dns6 :53 on MACs 02:00:00:00:22:0N,
/// mdns6 :5353 on 02:00:00:00:23:0N) and two on the IPv4 VIP 10.0.0.100 (dns :53 on
/// 02:00:00:00:42:0N, mdns :5353 on 02:00:00:00:43:0N): a later fragment alone names
/// neither service of its family.
fn two_udp_services() -> Snapshot {
    let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\naddress6 = \"fd00::2\"\n[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n[[client_zones]]\nprefix = \"fd01::/64\"\nzone = \"z1\"\n");
    for (name, vip, port, net, addr) in [("dns6", "fd00::100", 53, 0x22, "fd00:22::"), ("mdns6", "fd00::100", 5353, 0x23, "fd00:23::"), ("dns", "10.0.0.100", 53, 0x42, "10.0.42."), ("mdns", "10.0.0.100", 5353, 0x43, "10.0.43.")] {
        t += &format!("[[services]]\nname = \"{name}\"\nvip = \"{vip}\"\nport = {port}\nprotocol = \"udp\"\n");
        for i in 1..=3u8 {
            t += &format!("[[services.backends]]\nname = \"{name}-{i}\"\naddress = \"{addr}{i}\"\nmac = \"02:00:00:00:{net:02x}:{i:02x}\"\nzone = \"z1\"\n");
        }
    }
    let c = Config::from_toml(&t).unwrap();
    c.validate().unwrap();
    snapshot(&c)
}

/// Fragment offset (8-octet units) of an IPv6 frame with a Fragment header right after
/// the fixed header.
fn offset6(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[14 + 40 + 2], f[14 + 40 + 3]]) >> 3
}

/// An IPv4 UDP fragment from 10.1.0.7 to 10.0.0.100 with identification `ident`: the
/// first (offset 0, MF, the UDP header to `dport`) or the last (offset 4, 8 bytes).
fn frag4(ident: u16, first: bool, dport: u16) -> Vec<u8> {
    let mut payload = Vec::new();
    if first {
        etherparse::UdpHeader { source_port: 7000, destination_port: dport, length: 40, checksum: 0 }.write(&mut payload).unwrap();
        payload.resize(32, 0);
    } else {
        payload.resize(8, 0);
    }
    let mut ip = etherparse::Ipv4Header::new(payload.len() as u16, 64, IpNumber::UDP, [10, 1, 0, 7], [10, 0, 0, 100]).unwrap();
    ip.identification = ident;
    ip.more_fragments = first;
    ip.fragment_offset = etherparse::IpFragOffset::try_new(if first { 0 } else { 4 }).unwrap();
    let mut out = Vec::new();
    etherparse::Ethernet2Header { source: CLIENT_MAC, destination: LB, ether_type: etherparse::EtherType::IPV4 }.write(&mut out).unwrap();
    ip.write(&mut out).unwrap();
    out.extend_from_slice(&payload);
    out
}

/// Polls `frames` through `w` at `now`; the frames sent, in order.
fn poll(w: &mut Worker, bufs: &mut PollBuffers<MemBuf>, snap: &Snapshot, frames: Vec<Vec<u8>>, now: u32) -> Vec<Vec<u8>> {
    let mut ports = vec![MemPort::new(LB)];
    ports[0].rx.extend(frames.iter().map(|f| MemBuf::new(f)));
    w.poll(&mut ports, bufs, snap, now);
    std::mem::take(&mut ports[0].tx).iter().map(|b| b.data().to_vec()).collect()
}

fn drops(w: &Worker, r: DropReason) -> u64 {
    w.stats.drops[r as usize].load(Relaxed)
}

/// a later IPv6 fragment whose first fragment was
/// not seen, on a VIP with two UDP services, is held (not dropped), its datagram kept on
/// the worker with its 128-bit addresses, the Fragment header's Next Header and the full
/// 32-bit identification; `Verdict` stays within two bytes.
#[test]
fn later_ipv6_fragment_of_an_ambiguous_service_is_held() {
    assert!(std::mem::size_of::<Verdict>() <= 2, "the datagram is kept on the worker, not in the verdict");
    let snap = two_udp_services();
    let mut w = worker();
    let frags = fragments_to(0x8000_0007, client(7), 5353, false);
    assert_eq!(run(&mut w, &snap, &frags[2], 0).0, Verdict::Hold);
    let id = DatagramId::V6 { src: client(7), dst: VIP, next: 17, ident: 0x8000_0007 };
    assert_eq!(w.held_id, id);
    // once its first fragment is known, the same fragment is placed at once
    assert_eq!(run(&mut w, &snap, &frags[0], 1).0, Verdict::Forward);
    let (v, out) = run(&mut w, &snap, &frags[2], 2);
    assert_eq!((v, &out[0..5]), (Verdict::Forward, &[2, 0, 0, 0, 0x23][..]), "to an mdns6 backend");
}

/// IPv6 fragments in reverse order with two services on the VIP are held by the
/// poll loop and follow their first fragment to its backend (first fragment first, then
/// the held ones in arrival order); a datagram whose first fragment never comes is dropped
/// as `fragment_unknown` after [`HOLD_LIFETIME_MS`]; beyond [`HOLD_SLOTS`] held fragments
/// a new one is dropped as `fragment_hold_full`.
#[test]
fn reordered_ipv6_fragments_are_held_until_their_first_fragment() {
    let snap = two_udp_services();
    let mut w = worker();
    let mut bufs = PollBuffers::new(1);
    let held = |w: &Worker| w.stats.fragments_held.load(Relaxed);
    for (k, dport, net) in [(1u32, 5353u16, 0x23u8), (2, 53, 0x22)] {
        let f = fragments_to(0x8000_0000 | k, client(k as u16), dport, true); // last first
        assert_eq!(poll(&mut w, &mut bufs, &snap, f[..2].to_vec(), 10 * k), Vec::<Vec<u8>>::new());
        assert_eq!(held(&w), 2 * u64::from(k));
        assert_eq!(w.stats.drops.iter().map(|c| c.load(Relaxed)).sum::<u64>(), 0, "nothing dropped while held");
        let out = poll(&mut w, &mut bufs, &snap, vec![f[2].clone()], 10 * k + 1);
        assert_eq!(out.iter().map(|o| offset6(o)).collect::<Vec<_>>(), vec![0, 200, 100], "first fragment, then the held ones in arrival order");
        assert!(out.iter().all(|o| o[0..6] == out[0][0..6] && o[4] == net), "one backend of the first fragment's service (:{dport}): {:?}", out.iter().map(|o| &o[0..6]).collect::<Vec<_>>());
        for (o, i) in out.iter().zip([&f[2], &f[0], &f[1]]) {
            assert_eq!(&o[12..], &i[12..], "L2 DSR leaves the fragment as it came");
        }
    }
    assert_eq!((w.stats.forwarded.load(Relaxed), w.stats.fragments.load(Relaxed)), (6, 6));
    // a datagram whose first fragment never comes: held, then dropped after the lifetime
    assert!(poll(&mut w, &mut bufs, &snap, vec![fragments_to(99, client(9), 53, false).remove(1)], 100).is_empty());
    assert!(poll(&mut w, &mut bufs, &snap, vec![], 100 + HOLD_LIFETIME_MS).is_empty());
    assert_eq!(drops(&w, DropReason::FragmentUnknown), 0, "dropped before the lifetime");
    assert!(poll(&mut w, &mut bufs, &snap, vec![], 101 + HOLD_LIFETIME_MS).is_empty());
    assert_eq!(drops(&w, DropReason::FragmentUnknown), 1);
    // a full hold: the extra fragments are dropped and counted, the held ones still complete
    let t = 2000;
    for id in 0..HOLD_SLOTS as u32 + 3 {
        poll(&mut w, &mut bufs, &snap, vec![fragments_to(1000 + id, client(20), 53, false).remove(2)], t);
    }
    assert_eq!(drops(&w, DropReason::FragmentHoldFull), 3);
    assert_eq!(held(&w), 4 + 1 + HOLD_SLOTS as u64);
    let out = poll(&mut w, &mut bufs, &snap, vec![fragments_to(1000, client(20), 53, false).remove(0)], t + 1);
    assert_eq!(out.iter().map(|o| offset6(o)).collect::<Vec<_>>(), vec![0, 200]);
    assert!(out[0][4] == 0x22 && out[1][0..6] == out[0][0..6], "dns6 backend for both");
}

/// IPv4 and IPv6 fragments share the hold; each is released by a first fragment of its
/// own family only (the release consults `frags` for IPv4, `frags6` for IPv6), and goes to
/// a backend of its own family's service.
#[test]
fn held_fragments_of_both_families_wait_for_their_own_first_fragment() {
    let snap = two_udp_services();
    let mut w = worker();
    let mut bufs = PollBuffers::new(1);
    let f6 = fragments_to(7, client(7), 5353, false);
    assert!(poll(&mut w, &mut bufs, &snap, vec![frag4(7, false, 0), f6[1].clone()], 0).is_empty());
    assert_eq!(w.stats.fragments_held.load(Relaxed), 2);
    // the IPv6 first fragment releases the IPv6 fragment only
    let out = poll(&mut w, &mut bufs, &snap, vec![f6[0].clone()], 1);
    assert_eq!(out.iter().map(|o| (o[4], offset6(o))).collect::<Vec<_>>(), vec![(0x23, 0), (0x23, 100)]);
    // the IPv4 first fragment releases the IPv4 one, to an IPv4 mdns backend
    let out = poll(&mut w, &mut bufs, &snap, vec![frag4(7, true, 5353)], 2);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|o| o[0..6] == out[0][0..6] && o[4] == 0x43), "{:?}", out.iter().map(|o| &o[0..6]).collect::<Vec<_>>());
    assert_eq!(w.stats.drops.iter().map(|c| c.load(Relaxed)).sum::<u64>(), 0);
}

fn icmpv6(src: [u8; 16], dst: [u8; 16], hop_limit: u8, ty: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let h = Icmpv6Header::with_checksum(Icmpv6Type::Unknown { type_u8: ty, code_u8: 0, bytes5to8: rest }, src, dst, body).unwrap();
    let mut out = Vec::new();
    // Neighbor Discovery to the solicited-node multicast MAC; errors to our port's MAC
    let destination = if (133..=137).contains(&ty) { [0x33, 0x33, 0xff, 0, 1, 0] } else { LB };
    etherparse::Ethernet2Header { source: CLIENT_MAC, destination, ether_type: etherparse::EtherType::IPV6 }.write(&mut out).unwrap();
    etherparse::Ipv6Header { traffic_class: 0, flow_label: Default::default(), payload_length: (8 + body.len()) as u16, next_header: IpNumber::IPV6_ICMP, hop_limit, source: src, destination: dst }.write(&mut out).unwrap();
    out.extend_from_slice(&h.to_bytes());
    out.extend_from_slice(body);
    out
}

fn solicitation(target: [u8; 16]) -> Vec<u8> {
    let mut body = target.to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&CLIENT_MAC);
    let mut snm = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    snm[13..16].copy_from_slice(&target[13..16]);
    icmpv6(client(5), snm, 255, 135, [0; 4], &body)
}

#[test]
fn neighbor_solicitations_are_answered_for_our_addresses_only() {
    let snap = snapshot(&config("", &v6_backend));
    let mut w = worker();
    let mut port_addr = [0u8; 16];
    port_addr[0] = 0xfd;
    port_addr[15] = 2;
    for target in [VIP, port_addr] {
        let (v, out) = run(&mut w, &snap, &solicitation(target), 0);
        assert_eq!(v, Verdict::Reply);
        let p = SlicedPacket::from_ethernet(&out).unwrap();
        let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else { panic!("not IPv6") };
        assert_eq!((ip.header().hop_limit(), ip.header().source(), ip.header().destination()), (255, target, client(5)));
        let icmp = Icmpv6Slice::from_slice(&out[54..]).unwrap();
        assert!(icmp.is_checksum_valid(target, client(5)));
        assert_eq!(icmp.type_u8(), 136);
        assert_eq!(icmp.bytes5to8()[0] & 0x60, 0x60, "Solicited and Override");
        assert_eq!(&icmp.payload()[16..24], &[2, 1, 2, 0, 0, 0, 0, 1], "Target Link-Layer Address option");
        assert_eq!((&out[0..6], &out[6..12]), (&CLIENT_MAC[..], &LB[..]));
    }
    let mut other = VIP;
    other[15] = 0x99;
    assert_eq!(run(&mut w, &snap, &solicitation(other), 0).0, Verdict::Drop(DropReason::NdIgnored));
    assert_eq!((w.stats.nd_advertisements.load(Relaxed), w.stats.nd_not_ours.load(Relaxed)), (2, 1));
}

#[test]
fn packet_too_big_quoting_a_flow_goes_to_its_backend() {
    let snap = snapshot(&config("", &v6_backend));
    let mut w = worker();
    for c in 0..8u16 {
        let (_, out) = run(&mut w, &snap, &tcp6(client(c), 41000 + c, true, &[]), 0);
        // the backend's reply VIP:80 → client, quoted by a router
        let mut reply = Vec::new();
        PacketBuilder::ipv6(VIP, client(c), 60).tcp(80, 41000 + c, 9, 1000).ack(1).write(&mut reply, &[0; 1300]).unwrap();
        let mut router = [0u8; 16];
        router[0] = 0xfd;
        router[1] = 9;
        let ptb = icmpv6(router, VIP, 64, 2, 1280u32.to_be_bytes(), &reply[..1232]);
        // sent to a multicast MAC it is not forwarded (RFC 1812 §5.3.4), nor to another host's
        for dst in [[0x33, 0x33, 0, 0, 0, 1], [2, 0, 0, 0, 0x55, 0x55]] {
            let mut flooded = ptb.clone();
            flooded[0..6].copy_from_slice(&dst);
            assert_eq!(run(&mut w, &snap, &flooded, 1).0, Verdict::Drop(DropReason::NotOurMac), "PTB to {dst:02x?}");
        }
        let (v, fwd) = run(&mut w, &snap, &ptb, 1);
        assert_eq!((v, &fwd[0..6]), (Verdict::Forward, &out[0..6]), "PTB for flow {c} to the flow's backend");
    }
    assert_eq!(w.stats.icmp_forwarded.load(Relaxed), 8);
    // The same error from a source that is never unicast (multicast, unspecified,
    // loopback) is spoofed: dropped as martian_source, not forwarded as a PMTU update.
    let mut reply = Vec::new();
    PacketBuilder::ipv6(VIP, client(0), 60).tcp(80, 41000, 9, 1000).ack(1).write(&mut reply, &[0; 1300]).unwrap();
    let mut loopback = [0u8; 16];
    loopback[15] = 1;
    for src in [[0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0; 16], loopback] {
        let ptb = icmpv6(src, VIP, 64, 2, 1280u32.to_be_bytes(), &reply[..1232]);
        assert_eq!(run(&mut w, &snap, &ptb, 1).0, Verdict::Drop(DropReason::MartianSource), "PTB from {src:02x?}");
    }
    assert_eq!(w.stats.icmp_forwarded.load(Relaxed), 8);
    let echo = icmpv6(client(1), VIP, 64, 128, [0; 4], &[0; 8]);
    assert_eq!(run(&mut w, &snap, &echo, 2).0, Verdict::Drop(DropReason::IcmpIgnored));
}

#[test]
fn encapsulation_over_either_underlay_and_packet_too_big() {
    // IPv6 VIP over an IPv6 underlay (GUE), and over an IPv4 underlay (IPIP)
    for (mode, addr, outer_v6) in [("GUE", v6_backend as fn(u8) -> String, true), ("IPIP", (|i| format!("10.21.0.{i}")) as fn(u8) -> String, false)] {
        let cfg = config(&format!("forwarding_mode = \"{mode}\"\nencap_mtu = 1500"), &addr);
        let snap = snapshot(&cfg);
        let mut w = worker();
        let syn = tcp6(client(1), 40000, true, &[]);
        let (v, out) = run(&mut w, &snap, &syn, 0);
        assert_eq!(v, Verdict::Forward, "{mode}");
        let p = SlicedPacket::from_ethernet(&out).unwrap();
        match (&p.net, outer_v6) {
            (Some(etherparse::NetSlice::Ipv6(ip)), true) => {
                assert_eq!(ip.header().source(), [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2], "port address6 as outer source");
                let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else { panic!("GUE is UDP") };
                assert_eq!(u.destination_port(), 6080);
                assert_eq!(u.checksum(), u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap());
                assert_eq!(u.payload(), &syn[14..], "inner packet unchanged");
            }
            (Some(etherparse::NetSlice::Ipv4(ip)), false) => {
                assert_eq!(ip.header().protocol(), IpNumber::IPV6, "IPv6 in IPv4 is protocol 41");
                assert_eq!(&out[34..], &syn[14..]);
            }
            _ => panic!("{mode}: wrong outer family"),
        }
        // a 1510-byte IPv6 packet does not fit 1500 with the overhead: Packet Too Big back
        let big = tcp6(client(2), 40001, false, &[0u8; 1450]);
        let (v, out) = run(&mut w, &snap, &big, 1);
        assert_eq!(v, Verdict::Reply, "{mode}");
        let icmp = Icmpv6Slice::from_slice(&out[54..]).unwrap();
        assert!(icmp.is_checksum_valid(VIP, client(2)));
        let oh = if outer_v6 { 48 } else { 20 };
        assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1500 - oh });
    }
    // IPv4 VIP over an IPv6 underlay (IPIP → IPv4-in-IPv6, Next Header 4)
    let snap = snapshot(&config("", &v6_backend));
    let mut w = worker();
    let mut syn4 = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB).ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64).tcp(40000, 80, 1, 1000).syn().write(&mut syn4, &[]).unwrap();
    let (v, out) = run(&mut w, &snap, &syn4, 0);
    assert_eq!(v, Verdict::Forward);
    let p = SlicedPacket::from_ethernet(&out).unwrap();
    let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else { panic!("outer IPv6") };
    assert_eq!(ip.header().next_header(), IpNumber::IPV4);
    assert_eq!(&out[54..], &syn4[14..]);
}

#[test]
fn packet_too_big_never_reports_below_1280() {
    let cfg = config("forwarding_mode = \"GUE\"\nencap_mtu = 1328", &v6_backend);
    let snap = snapshot(&cfg);
    let mut w = worker();
    let (v, out) = run(&mut w, &snap, &tcp6(client(3), 1, false, &[0u8; 1250]), 0);
    assert_eq!(v, Verdict::Reply);
    let icmp = Icmpv6Slice::from_slice(&out[54..]).unwrap();
    assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1280 });
}

proptest! {
    /// Random and mutated IPv6 frames never panic the worker and always get a verdict;
    /// every drop has a reason.
    #[test]
    fn mutated_ipv6_frames_never_panic(idx in 0usize..100, val in any::<u8>(), cut in 0usize..60, which in 0usize..4, rnd in prop::collection::vec(any::<u8>(), 0..120)) {
        let snap = snapshot(&config("forwarding_mode = \"GUE\"", &v6_backend));
        let mut w = worker();
        let mut f = match which {
            0 => tcp6(client(1), 1, true, b"x"),
            1 => fragments(7, client(2), false).remove(1),
            2 => solicitation(VIP),
            _ => { let mut r = vec![0u8; 12]; r.extend_from_slice(&[0x86, 0xdd]); r.extend_from_slice(&rnd); r }
        };
        if idx < f.len() { f[idx] = val; }
        let n = f.len().saturating_sub(cut);
        f.truncate(n);
        let _ = run(&mut w, &snap, &f, 0);
    }
}

/// A fragment of UDP datagram `id` with a Destination Options header after the Fragment
/// header (RFC 8200 §4.5: in the fragmentable part): the first carries it and the UDP
/// header, a later one only data, its Fragment header naming Destination Options (60).
fn frag_with_dest_opts(id: u32, src: [u8; 16], dport: u16, first: bool) -> Vec<u8> {
    let mut body = Vec::new();
    if first {
        body.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // DestOpts: next UDP, len 0, PadN
        body.extend_from_slice(&7000u16.to_be_bytes());
        body.extend_from_slice(&dport.to_be_bytes());
        body.extend_from_slice(&64u16.to_be_bytes());
        body.extend_from_slice(&[0, 0]);
        body.resize(8 + 32, 0);
    } else {
        body.resize(16, 0);
    }
    let mut f = Vec::new();
    etherparse::Ethernet2Header { source: CLIENT_MAC, destination: LB, ether_type: etherparse::EtherType::IPV6 }.write(&mut f).unwrap();
    let ip = etherparse::Ipv6Header { traffic_class: 0, flow_label: Default::default(), payload_length: (8 + body.len()) as u16, next_header: IpNumber::IPV6_FRAGMENTATION_HEADER, hop_limit: 64, source: src, destination: VIP };
    ip.write(&mut f).unwrap();
    let off: u16 = if first { 0 } else { 5 };
    f.extend_from_slice(&[60, 0]);
    f.extend_from_slice(&(off << 3 | u16::from(first)).to_be_bytes());
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(&body);
    f
}

/// (Review finding.) a later fragment whose Fragment header's Next Header is Destination
/// Options arrives before its first fragment, on a VIP with two UDP services: it should
/// be held like any other (docs/semantics.md "Fragments"), and then follow its first.
#[test]
fn later_fragment_behind_destination_options_is_held() {
    let snap = two_udp_services();
    let mut w = worker();
    let later = frag_with_dest_opts(42, client(3), 5353, false);
    let first = frag_with_dest_opts(42, client(3), 5353, true);
    // sanity: in order, both reach one mdns6 backend
    let (v1, o1) = run(&mut w, &snap, &first, 0);
    let (v2, o2) = run(&mut w, &snap, &later, 1);
    assert_eq!((v1, v2), (Verdict::Forward, Verdict::Forward));
    assert_eq!((o1[4], &o1[0..6]), (0x23, &o2[0..6]));
    // reordered (another datagram): the later one first
    let mut w = worker();
    let later = frag_with_dest_opts(43, client(3), 5353, false);
    assert_eq!(run(&mut w, &snap, &later, 0).0, Verdict::Hold);
}

/// The prefetch pass (IPv4 and IPv6 targets, each handed to its own family's table) is
/// only a hint: a worker polled in bursts sends exactly what one fed frame by frame
/// through `process` sends, for SYNs then ACKs of both families, 20,000 flows each.
#[test]
fn the_prefetch_pass_changes_no_decision_in_either_family() {
    let snap = snapshot(&config("", &v6_backend));
    let mk = || Worker::new(0, 1 << 16, 9, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac: LB, forward_to: 0, addr: 0x0a00_0002 }]).with_ipv6_capacity(1 << 16, 11);
    let (mut polled, mut single, mut bufs) = (mk(), mk(), PollBuffers::new(1));
    let tcp4 = |i: u16, syn: bool| {
        let b = PacketBuilder::ethernet2(CLIENT_MAC, LB).ipv4([10, 1, (i >> 8) as u8, i as u8], [10, 0, 0, 100], 64).tcp(2000 + i % 7, 80, 1, 1000);
        let mut out = Vec::new();
        (if syn { b.syn() } else { b.ack(1) }).write(&mut out, &[]).unwrap();
        out
    };
    let n = 20_000;
    let frames: Vec<Vec<u8>> = [true, false].iter().flat_map(|&syn| (0..n).flat_map(move |i| [tcp6(client(i), 3000, syn, &[]), tcp4(i, syn)])).collect();
    let mut sent = Vec::new();
    for chunk in frames.chunks(32) {
        sent.extend(poll(&mut polled, &mut bufs, &snap, chunk.to_vec(), 5));
    }
    let want: Vec<Vec<u8>> = frames.iter().filter_map(|f| Some(run(&mut single, &snap, f, 5)).filter(|(v, _)| *v == Verdict::Forward).map(|(_, d)| d)).collect();
    assert_eq!(sent.len(), want.len());
    assert!(sent == want, "the polled worker decided differently");
    assert!(polled.prefetch_target(&MemBuf::new(&tcp6(client(1), 3000, false, &[])), &snap).is_ipv6(), "no IPv6 target");
    assert_eq!((polled.ct.counters.hits, polled.ct6.counters.hits), (single.ct.counters.hits, single.ct6.counters.hits));
}
