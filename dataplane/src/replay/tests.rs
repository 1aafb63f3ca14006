//! Flow attribution of the replay ([`super::flow`]) on IPv6 fragments and ICMPv6 errors,
//! and the probe frame (the IPv4 forms are covered end to end by ctl/tests/replay_cli.rs).

use super::flow::{classify, probe, Flow, FragMap, Kind};
use etherparse::{IpNumber, Ipv6FragmentHeader, Ipv6Header, PacketBuilder};
use std::net::{IpAddr, Ipv6Addr};

const CLIENT: [u8; 16] = [0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
const VIP: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
const MACS: ([u8; 6], [u8; 6]) = ([2, 0, 0, 0, 0x10, 5], [2, 0, 0, 0, 0, 1]);

fn flow() -> Flow {
    Flow { src: IpAddr::V6(Ipv6Addr::from(CLIENT)), sport: 5000, dst: IpAddr::V6(Ipv6Addr::from(VIP)), dport: 53, proto: 17 }
}

/// An IPv6 fragment of UDP datagram `id`: the first carries the UDP header.
fn fragment(id: u32, first: bool) -> Vec<u8> {
    let body: Vec<u8> = if first { [5000u16.to_be_bytes(), 53u16.to_be_bytes(), 24u16.to_be_bytes(), [0, 0]].concat().into_iter().chain([1u8; 8]).collect() } else { vec![2u8; 8] };
    let frag = Ipv6FragmentHeader::new(IpNumber::UDP, etherparse::IpFragOffset::try_new(if first { 0 } else { 2 }).unwrap(), first, id);
    let ip = Ipv6Header { payload_length: (8 + body.len()) as u16, next_header: IpNumber::IPV6_FRAGMENTATION_HEADER, hop_limit: 64, source: CLIENT, destination: VIP, ..Default::default() };
    let mut f = [MACS.1.as_slice(), MACS.0.as_slice(), &[0x86, 0xdd]].concat();
    f.extend_from_slice(&ip.to_bytes());
    f.extend_from_slice(&frag.to_bytes());
    f.extend_from_slice(&body);
    f
}

#[test]
fn ipv6_fragments_follow_their_first_fragment() {
    let mut frags = FragMap::default();
    assert_eq!(classify(&fragment(7, true), &mut frags), Some((flow(), Kind::Transport { closes: false, syn: false })));
    assert_eq!(classify(&fragment(7, false), &mut frags), Some((flow(), Kind::Fragment)));
    // a later fragment of a datagram whose first was not seen: a flow without ports
    let (f, k) = classify(&fragment(8, false), &mut frags).unwrap();
    assert_eq!((f.sport, f.dport, k), (0, 0, Kind::Fragment));
}

#[test]
fn icmpv6_errors_belong_to_the_quoted_flow() {
    // the VIP's reply to the client, quoted by a router's Packet Too Big
    let mut quoted = Vec::new();
    PacketBuilder::ipv6(VIP, CLIENT, 64).udp(53, 5000).write(&mut quoted, b"answer").unwrap();
    let mut f = Vec::new();
    let router = [0xfd, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    PacketBuilder::ethernet2(MACS.0, MACS.1).ipv6(router, VIP, 64).icmpv6(etherparse::Icmpv6Type::PacketTooBig { mtu: 1280 }).write(&mut f, &quoted).unwrap();
    assert_eq!(classify(&f, &mut FragMap::default()), Some((flow(), Kind::IcmpError)));
}

#[test]
fn the_probe_continues_the_flow() {
    let p = probe(&flow(), MACS.0, MACS.1).unwrap();
    assert_eq!(classify(&p, &mut FragMap::default()), Some((flow(), Kind::Transport { closes: false, syn: false })));
    let tcp = Flow { proto: 6, dport: 80, ..flow() };
    assert_eq!(classify(&probe(&tcp, MACS.0, MACS.1).unwrap(), &mut FragMap::default()), Some((tcp, Kind::Transport { closes: false, syn: false })));
    assert!(probe(&Flow { proto: 1, ..flow() }, MACS.0, MACS.1).is_none());
}
