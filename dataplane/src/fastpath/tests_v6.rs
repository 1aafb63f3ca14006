//! Tests of the worker's IPv6 path (issue 12): balancing, fragments, Neighbor Discovery,
//! ICMPv6 errors, encapsulation over either family and Packet Too Big. Frames are built
//! and checked with etherparse.

use crate::control::snapshot::Snapshot;
use crate::control::{compile, CompileInput, HealthView, SlotMap};
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::*;
use crate::wire::DropReason;
use etherparse::{Icmpv6Header, Icmpv6Slice, Icmpv6Type, IpNumber, Ipv6FragmentHeader, PacketBuilder, SlicedPacket};
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
    let mut udp = Vec::new();
    PacketBuilder::ipv6(src, VIP, 64).udp(5000 + id as u16, 53).write(&mut udp, &[7u8; 2000]).unwrap();
    let payload = &udp[40..]; // UDP header + data
    let mut out = Vec::new();
    for (k, chunk) in payload.chunks(800).enumerate() {
        let more = (k + 1) * 800 < payload.len();
        let fh = Ipv6FragmentHeader::new(IpNumber::UDP, etherparse::IpFragOffset::try_new((k * 100) as u16).unwrap(), more, id);
        let mut f = Vec::new();
        etherparse::Ethernet2Header { source: CLIENT_MAC, destination: LB, ether_type: etherparse::EtherType::IPV6 }.write(&mut f).unwrap();
        let ip = etherparse::Ipv6Header { traffic_class: 0, flow_label: Default::default(), payload_length: (8 + chunk.len()) as u16, next_header: IpNumber::IPV6_FRAGMENTATION_HEADER, hop_limit: 64, source: src, destination: VIP };
        ip.write(&mut f).unwrap();
        fh.write(&mut f).unwrap();
        f.extend_from_slice(chunk);
        out.push(f);
    }
    if reversed {
        out.reverse();
    }
    out
}

/// Review finding (issue 12): a Destination Options header after the Fragment header
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

fn icmpv6(src: [u8; 16], dst: [u8; 16], hop_limit: u8, ty: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let h = Icmpv6Header::with_checksum(Icmpv6Type::Unknown { type_u8: ty, code_u8: 0, bytes5to8: rest }, src, dst, body).unwrap();
    let mut out = Vec::new();
    etherparse::Ethernet2Header { source: CLIENT_MAC, destination: [0x33, 0x33, 0xff, 0, 1, 0], ether_type: etherparse::EtherType::IPV6 }.write(&mut out).unwrap();
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
        let (v, fwd) = run(&mut w, &snap, &ptb, 1);
        assert_eq!((v, &fwd[0..6]), (Verdict::Forward, &out[0..6]), "PTB for flow {c} to the flow's backend");
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
