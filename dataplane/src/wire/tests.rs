//! Tests of [`super::parse`] and the rewrites over whole frames, checked against an
//! independent parser (etherparse).

use super::*;
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use std::net::Ipv4Addr;
use strum::{EnumCount, IntoEnumIterator};

fn tcp_syn_ttl(vlan: &[u16], ttl: u8) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 1]);
    let mut out = Vec::new();
    match vlan {
        [] => b.ipv4([10, 1, 0, 5], [10, 0, 0, 100], ttl).tcp(40000, 80, 1, 1024).syn().write(&mut out, &[]).unwrap(),
        [v] => b.single_vlan((*v).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], ttl).tcp(40000, 80, 1, 1024).syn().write(&mut out, &[]).unwrap(),
        [o, i] => b.double_vlan((*o).try_into().unwrap(), (*i).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], ttl).tcp(40000, 80, 1, 1024).syn().write(&mut out, &[]).unwrap(),
        _ => unreachable!(),
    }
    out
}

fn tcp_syn(vlan: &[u16]) -> Vec<u8> {
    tcp_syn_ttl(vlan, 64)
}

fn ipv4_of(f: &[u8]) -> Ipv4Info {
    match parse(f) {
        Ok(Parsed::Ipv4(p)) => p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn parses_tcp_through_vlan_tags() {
    for tags in [&[][..], &[100][..], &[200, 100][..]] {
        let p = ipv4_of(&tcp_syn(tags));
        assert_eq!(p.l3, 14 + 4 * tags.len());
        assert_eq!((p.sport, p.dport, p.proto), (40000, 80, PROTO_TCP));
        assert_eq!(p.tcp_flags & tcp_flags::SYN, tcp_flags::SYN);
        assert_eq!(Ipv4Addr::from(p.src), Ipv4Addr::new(10, 1, 0, 5));
        assert_eq!(Ipv4Addr::from(p.dst), Ipv4Addr::new(10, 0, 0, 100));
    }
}

#[test]
fn malformed_frames_have_reasons() {
    assert_eq!(parse(&[0u8; 5]), Err(DropReason::TruncatedEthernet));
    let mut f = tcp_syn(&[]);
    f[12] = 0x88;
    f[13] = 0xcc; // LLDP
    assert_eq!(parse(&f), Err(DropReason::UnsupportedEthertype));
    let mut f = tcp_syn(&[]);
    f[12] = 0x86;
    f[13] = 0xdd; // an IPv4 header under the IPv6 EtherType
    assert_eq!(parse(&f), Err(DropReason::MalformedIpv6));
    let mut f = tcp_syn(&[]);
    f[16] = 0x05; // total length 0x05xx > frame
    assert_eq!(parse(&f), Err(DropReason::TruncatedIpv4));
    let mut f = tcp_syn(&[]);
    f[14] = 0x65;
    assert_eq!(parse(&f), Err(DropReason::MalformedIpv4));
    let f = tcp_syn(&[]);
    assert_eq!(parse(&f[..14 + 20 + 4]), Err(DropReason::TruncatedIpv4));
}

/// TTL 0 is dropped as `ttl_exceeded` (before: forwarded); TTL 1 passes.
#[test]
fn ttl_zero_is_dropped_ttl_one_is_not() {
    for tags in [&[][..], &[100][..]] {
        assert_eq!(parse(&tcp_syn_ttl(tags, 0)), Err(DropReason::TtlExceeded));
        assert_eq!(ipv4_of(&tcp_syn_ttl(tags, 1)).ttl, 1);
    }
}

/// The derived names are the ones counters, `spillwayctl stats` and docs/architecture.md
/// show, in counter order (`reason as usize`).
#[test]
fn drop_reason_names_are_stable() {
    let names: Vec<&str> = DropReason::iter().map(DropReason::name).collect();
    assert_eq!(
        names,
        [
            "truncated_ethernet",
            "unsupported_ethertype",
            "malformed_ipv4",
            "truncated_ipv4",
            "truncated_l4",
            "arp_ignored",
            "not_for_vip",
            "no_service",
            "no_backend",
            "icmp_ignored",
            "icmp_quote_too_short",
            "encap_too_big",
            "no_headroom",
            "tx_full",
            "ttl_exceeded",
            "multi_segment",
            "martian_source",
            "fragment_unknown",
            "fragment_hold_full",
            "neighbor_queue_full",
            "next_hop_unresolved",
            "malformed_ipv6",
            "truncated_ipv6",
            "ipv6_ext_chain",
            "hop_limit_exceeded",
            "nd_ignored",
            "nd_invalid",
            "icmp_error_forbidden",
            "icmp_error_rate_limited",
            "multicast_source_mac",
            "ipv6_routing_type0",
            "not_our_mac",
            "redirect_ring_full",
        ]
    );
    assert_eq!(DropReason::COUNT, names.len());
    // `explain` names the drop with the shared rule's constant
    assert_eq!(DropReason::MartianSource.name(), spillway_shared::martian::MARTIAN_SOURCE);
    for (i, r) in DropReason::iter().enumerate() {
        assert_eq!(r as usize, i);
    }
}

#[test]
fn arp_reply_is_valid() {
    let mut out = Vec::new();
    out.extend_from_slice(&[0xff; 6]);
    out.extend_from_slice(&[2, 0, 0, 0, 0, 9]);
    out.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    out.extend_from_slice(&[2, 0, 0, 0, 0, 9, 10, 1, 0, 5]);
    out.extend_from_slice(&[0; 6]);
    out.extend_from_slice(&[10, 0, 0, 100]);
    let Parsed::Arp(a) = parse(&out).unwrap() else { panic!() };
    assert_eq!((a.oper, a.tpa), (1, Ipv4Addr::new(10, 0, 0, 100)));
    arp_reply_in_place(&mut out, &a, [2, 0, 0, 0, 0, 1]).unwrap();
    let Parsed::Arp(r) = parse(&out).unwrap() else { panic!() };
    assert_eq!((r.oper, r.spa, r.tpa), (2, Ipv4Addr::new(10, 0, 0, 100), Ipv4Addr::new(10, 1, 0, 5)));
    assert_eq!(&out[0..6], &[2, 0, 0, 0, 0, 9]);
    assert_eq!(&out[6..12], &[2, 0, 0, 0, 0, 1]);
    assert_eq!(&out[22..28], &[2, 0, 0, 0, 0, 1]);
    // an ArpInfo from another (longer) frame is refused, not half applied
    let before = out.clone();
    assert_eq!(arp_reply_in_place(&mut out[..40], &a, [2, 0, 0, 0, 0, 1]), Err(DropReason::ArpIgnored));
    assert_eq!(out, before);
}

fn tunnel(encap: Encap) -> Tunnel {
    Tunnel { encap, src: 0x0a00_0002, dst: 0x0a00_0b01, dst_mac: [2, 0, 0, 0, 0xb, 1], src_mac: [2, 0, 0, 0, 0, 1] }
}

/// Encapsulates `f` as the worker does: prepend the overhead, then rewrite.
fn encapsulated(f: &[u8], t: &Tunnel) -> Vec<u8> {
    let p = ipv4_of(f);
    let oh = t.encap.overhead();
    let mut buf = vec![0u8; oh];
    buf.extend_from_slice(f);
    let n = t.encapsulate(&mut buf, p.l3, p.total_len).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn ipip_and_gue_encapsulation_parse_back() {
    for encap in [Encap::Ipip, Encap::Gue { src_port: 55555 }] {
        let f = tcp_syn(&[100]);
        let buf = encapsulated(&f, &tunnel(encap));
        let s = SlicedPacket::from_ethernet(&buf).unwrap();
        let etherparse::NetSlice::Ipv4(outer) = s.net.unwrap() else { panic!() };
        assert_eq!(outer.header().destination(), [10, 0, 11, 1]);
        assert_eq!(outer.header().source(), [10, 0, 0, 2]);
        assert_eq!(checksum(outer.header().slice()), 0);
        if let Encap::Gue { src_port } = encap {
            let Some(TransportSlice::Udp(u)) = s.transport else { panic!() };
            assert_eq!((u.source_port(), u.destination_port()), (src_port, GUE_PORT));
            assert_eq!(usize::from(u.length()), 8 + f.len() - 18);
            assert_eq!(&buf[14 + 28..], &f[18..]);
        } else {
            assert_eq!(outer.header().protocol(), etherparse::IpNumber(4));
            assert_eq!(&buf[14 + 20..], &f[18..]);
        }
    }
}

/// the outer header is atomic (DF set, MF clear, offset 0; RFC 6864 §4.1
/// then allows ID 0) with a valid checksum, whatever the inner DF; the outer TTL is 64 and
/// the inner TTL is left as it came (docs/semantics.md "TTL").
#[test]
fn outer_header_sets_df_and_fresh_ttl() {
    for encap in [Encap::Ipip, Encap::gue(0x1234_5678)] {
        for inner_ttl in [1u8, 64] {
            let mut f = tcp_syn_ttl(&[], inner_ttl);
            f[20] &= !0x40; // inner DF clear (etherparse sets it)
            f[24..26].copy_from_slice(&[0, 0]);
            let c = checksum(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            assert!(!ipv4_of(&f).frag.dont_fragment);
            let buf = encapsulated(&f, &tunnel(encap));
            let outer = Ipv4Packet::new_checked(&buf[14..]).unwrap();
            assert!(outer.frag().dont_fragment && !outer.frag().is_fragment());
            assert_eq!((outer.ident(), outer.ttl()), (0, encap::OUTER_TTL));
            assert!(outer.verify_checksum());
            let inner = Ipv4Packet::new_checked(&buf[14 + encap.overhead()..]).unwrap();
            assert_eq!(inner.ttl(), inner_ttl);
            assert!(inner.verify_checksum());
        }
    }
}

#[test]
fn encapsulate_refuses_missing_room() {
    let f = tcp_syn(&[]);
    let p = ipv4_of(&f);
    let t = tunnel(Encap::Ipip);
    let mut buf = f.clone(); // no prepended room: the inner packet would end past the buffer
    assert_eq!(t.encapsulate(&mut buf, p.l3, p.total_len), Err(DropReason::NoHeadroom));
    assert_eq!(buf, f);
}

proptest::proptest! {
    /// GUE source ports stay in 49152–65535 and follow the flow hash.
    #[test]
    fn gue_port_in_dynamic_range(h in proptest::num::u64::ANY) {
        let Encap::Gue { src_port } = Encap::gue(h) else { unreachable!() };
        proptest::prop_assert!(src_port >= 49152);
        proptest::prop_assert_eq!(src_port & 0x3fff, (h >> 48) as u16 & 0x3fff);
    }
}

fn big_syn(tags: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 1]);
    let b = match tags {
        [] => b.ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64),
        [v] => b.single_vlan((*v).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64),
        [o, i] => b.double_vlan((*o).try_into().unwrap(), (*i).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64),
        _ => unreachable!(),
    };
    b.tcp(40000, 80, 1, 1024).write(&mut out, &[7u8; 1460]).unwrap();
    out
}

#[test]
fn frag_needed_reply() {
    let mut out = big_syn(&[]);
    let p = ipv4_of(&out);
    let n = icmp_frag_needed_in_place(&mut out, &p, 1480, [2, 0, 0, 0, 0, 1]).unwrap();
    out.truncate(n);
    let s = SlicedPacket::from_ethernet(&out).unwrap();
    let etherparse::NetSlice::Ipv4(ipv4) = s.net.unwrap() else { panic!() };
    assert_eq!(ipv4.header().source(), [10, 0, 0, 100]);
    assert_eq!(ipv4.header().destination(), [10, 1, 0, 5]);
    assert_eq!(checksum(ipv4.header().slice()), 0);
    assert_eq!(ipv4.header().fragments_offset().value(), 0);
    let icmp = &out[34..];
    assert_eq!((icmp[0], icmp[1]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), 1480);
    assert_eq!(checksum(icmp), 0);
    let outer = ipv4_of(&out);
    // our own quote parser sees the original flow reversed... of the client's packet
    let q = icmp_quote(&out, &outer).unwrap().unwrap();
    assert_eq!((q.vip, q.client), (0x0a01_0005, 0x0a00_0064));
}

#[test]
fn frag_needed_reply_keeps_vlan_tags() {
    for tags in [&[][..], &[100][..], &[200, 100][..]] {
        let mut out = big_syn(tags);
        let orig = out.clone();
        let p = ipv4_of(&out);
        let n = icmp_frag_needed_in_place(&mut out, &p, 1480, [2, 0, 0, 0, 0, 1]).unwrap();
        assert_eq!(n, frag_needed_len(p.l3, 20));
        out.truncate(n);
        assert_eq!(&out[12..p.l3], &orig[12..p.l3]);
        let r = ipv4_of(&out);
        assert_eq!((r.l3, r.proto, r.src, r.dst), (p.l3, PROTO_ICMP, p.dst, p.src));
        assert_eq!(checksum(&out[r.l3..r.l3 + 20]), 0);
        assert_eq!(checksum(&out[r.l4()..]), 0);
    }
}

#[test]
fn frag_needed_refuses_info_of_another_frame() {
    let big = big_syn(&[]);
    let p = ipv4_of(&big);
    let mut small = tcp_syn(&[]);
    let p_small = ipv4_of(&small);
    let before = small.clone();
    // the quote (IPv4 header + 8 bytes) is not all in the frame
    assert_eq!(icmp_frag_needed_in_place(&mut small[..40], &p_small, 1480, [2; 6]), Err(DropReason::TruncatedIpv4));
    // the reply (70 bytes) does not fit the 54-byte frame
    assert_eq!(icmp_frag_needed_in_place(&mut small, &p, 1480, [2; 6]), Err(DropReason::TruncatedIpv4));
    assert_eq!(small, before);
}

proptest::proptest! {
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        if let Ok(Parsed::Ipv4(p)) = parse(&bytes) {
            let _ = icmp_quote(&bytes, &p);
            let mut b = bytes.clone();
            let _ = icmp_frag_needed_in_place(&mut b, &p, 1400, [2; 6]);
            let mut b = vec![0u8; 28];
            b.extend_from_slice(&bytes);
            let _ = tunnel(Encap::gue(7)).encapsulate(&mut b, p.l3, p.total_len);
        }
        if let Ok(Parsed::Arp(a)) = parse(&bytes) {
            let mut b = bytes.clone();
            proptest::prop_assert!(arp_reply_in_place(&mut b, &a, [2; 6]).is_ok());
        }
        let _ = (flow_tuple_hint(&bytes), syn_hint(&bytes));
    }

    #[test]
    fn parse_never_panics_on_mutated_valid_frames(idx in 0usize..60, val in proptest::num::u8::ANY, cut in 0usize..60, icmp in proptest::bool::ANY) {
        let mut f = if icmp {
            let mut f = big_syn(&[100]);
            let p = ipv4_of(&f);
            let n = icmp_frag_needed_in_place(&mut f, &p, 1400, [2; 6]).unwrap();
            f.truncate(n);
            f
        } else {
            tcp_syn(&[100])
        };
        if idx < f.len() { f[idx] = val; }
        let len = f.len().saturating_sub(cut);
        if let Ok(Parsed::Ipv4(p)) = parse(&f[..len]) {
            let _ = icmp_quote(&f[..len], &p);
            proptest::prop_assert!(p.l3 + p.total_len <= len);
        }
    }

    /// parse → encapsulate → parse: the outer header parses, the inner packet is the
    /// original one byte for byte, the flow fields survive.
    #[test]
    fn encapsulation_round_trips(payload in proptest::collection::vec(proptest::num::u8::ANY, 0..100), tags in 0usize..3, hash in proptest::num::u64::ANY, gue in proptest::bool::ANY) {
        let b = PacketBuilder::ethernet2([4; 6], [2; 6]);
        let mut f = Vec::new();
        match tags {
            0 => b.ipv4([10, 1, 2, 3], [10, 0, 0, 100], 9).udp(4000, 53).write(&mut f, &payload).unwrap(),
            1 => b.single_vlan(7u16.try_into().unwrap()).ipv4([10, 1, 2, 3], [10, 0, 0, 100], 9).udp(4000, 53).write(&mut f, &payload).unwrap(),
            _ => b.double_vlan(8u16.try_into().unwrap(), 7u16.try_into().unwrap()).ipv4([10, 1, 2, 3], [10, 0, 0, 100], 9).udp(4000, 53).write(&mut f, &payload).unwrap(),
        }
        let p = ipv4_of(&f);
        let encap = if gue { Encap::gue(hash) } else { Encap::Ipip };
        let buf = encapsulated(&f, &tunnel(encap));
        let outer = ipv4_of(&buf);
        proptest::prop_assert_eq!(outer.l3, ETH_LEN);
        proptest::prop_assert_eq!(outer.total_len, p.total_len + encap.overhead());
        let inner_at = ETH_LEN + encap.overhead();
        proptest::prop_assert_eq!(&buf[inner_at..], &f[p.l3..p.l3 + p.total_len]);
        let inner = Ipv4Packet::new_checked(&buf[inner_at..]).unwrap();
        proptest::prop_assert_eq!((inner.src_addr(), inner.dst_addr(), inner.ttl()), (p.src, p.dst, p.ttl));
    }

    #[test]
    fn flow_tuple_hint6_agrees_with_parse(f in proptest::collection::vec(0u8.., 0..80), vlan in proptest::bool::ANY, tcp in proptest::bool::ANY) {
        let (src, dst) = ([0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34], [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        let mut out = Vec::new();
        let b = PacketBuilder::ethernet2([2; 6], [0; 6]);
        let b = if vlan { b.single_vlan(7u16.try_into().unwrap()).ipv6(src, dst, 64) } else { b.ipv6(src, dst, 64) };
        if tcp { b.tcp(4000, 80, 1, 1000).write(&mut out, &f).unwrap() } else { b.udp(4000, 80).write(&mut out, &f).unwrap() }
        let hint = flow_tuple_hint6(&out).unwrap();
        let mut p = Ipv6Info::default();
        let l3 = if vlan { ETH_LEN + 4 } else { ETH_LEN };
        proptest::prop_assert_eq!(parse_ipv4_frame(&out, &mut Ipv4Info::default()), Ok(FrameKind::Other { l3, ethertype: ETHERTYPE_IPV6 }));
        proptest::prop_assert_eq!(parse_ipv6_at(&out, l3, ETHERTYPE_IPV6, &mut p), Ok(true));
        proptest::prop_assert_eq!(Ok(Parsed::Ipv6(p)), parse(&out));
        proptest::prop_assert_eq!((p.src, p.dst, p.sport, p.dport, p.proto), hint);
        // no IPv4 hint for it, no IPv6 hint for IPv4 or random bytes; never panics
        proptest::prop_assert_eq!(flow_tuple_hint(&out), None);
        let _ = flow_tuple_hint6(&f);
    }

    #[test]
    fn flow_tuple_hint_agrees_with_parse(f in proptest::collection::vec(0u8.., 0..80), vlan in proptest::bool::ANY) {
        let mut out = Vec::new();
        let b = PacketBuilder::ethernet2([0; 6], [0; 6]);
        if vlan {
            b.single_vlan(7u16.try_into().unwrap()).ipv4([10, 1, 2, 3], [10, 0, 0, 100], 64).tcp(4000, 80, 1, 1000).write(&mut out, &f).unwrap();
        } else {
            b.ipv4([10, 1, 2, 3], [10, 0, 0, 100], 64).udp(4000, 80).write(&mut out, &f).unwrap();
        }
        proptest::prop_assert_eq!(flow_tuple_hint6(&out), None);
        let (src, dst, sport, dport, proto) = flow_tuple_hint(&out).unwrap();
        let p = ipv4_of(&out);
        proptest::prop_assert_eq!((p.src, p.dst, p.sport, p.dport, p.proto), (src, dst, sport, dport, proto));
        proptest::prop_assert_eq!(syn_hint(&out), false);
        // random bytes: never panics
        let _ = flow_tuple_hint(&f);
    }
}

/// Every drop reason is listed in docs/architecture.md and explained in docs/operations.md's
/// table (the architecture list once lacked `multi_segment` and `martian_source`).
#[test]
fn every_drop_reason_is_documented() {
    let doc = |f: &str| std::fs::read_to_string(format!("{}/../docs/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let (arch, ops) = (doc("architecture.md"), doc("operations.md"));
    for r in DropReason::iter() {
        let n = r.name();
        assert!(arch.contains(&format!("`{n}`")), "docs/architecture.md does not list {n}");
        assert!(ops.lines().any(|l| l.starts_with('|') && l.contains(&format!("`{n}`"))), "docs/operations.md's drop table does not explain {n}");
    }
}

/// The worker's in-place entries, chained as `Worker::process` chains them: IPv4
/// ([`parse_ipv4_frame`]), else IPv6 ([`parse_ipv6_at`] on the link layer it found), else
/// `Ok(None)` (the worker then calls [`parse`]).
fn parse_in_place(f: &[u8]) -> Result<Option<Parsed>, DropReason> {
    let mut p4 = Ipv4Info::default();
    match parse_ipv4_frame(f, &mut p4)? {
        FrameKind::Ipv4 => Ok(Some(Parsed::Ipv4(p4))),
        FrameKind::Other { l3, ethertype } => {
            let mut p6 = Ipv6Info::default();
            Ok(parse_ipv6_at(f, l3, ethertype, &mut p6)?.then_some(Parsed::Ipv6(p6)))
        }
    }
}

/// An IPv4 or IPv6 TCP/UDP frame with `tags` VLAN tags (0, 1 or 2: QinQ); IPv6
/// optionally with a Hop-by-Hop Options header or a Fragment header (`ext`: 0 none, 1
/// hop-by-hop, 2 fragment with offset `frag_off`) inserted after the fixed header, lengths
/// kept valid.
fn ip_frame(v6: bool, tags: usize, tcp: bool, ext: u8, frag_off: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let b = PacketBuilder::ethernet2([2; 6], [4; 6]);
    let b = if tags == 2 { b.double_vlan(8u16.try_into().unwrap(), 7u16.try_into().unwrap()) } else { b.double_vlan(0u16.try_into().unwrap(), 7u16.try_into().unwrap()) };
    let b = if v6 { b.ipv6([0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34], [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0], 64) } else { b.ipv4([10, 1, 2, 3], [10, 0, 0, 100], 64) };
    if tcp { b.tcp(4000, 80, 1, 1000).write(&mut out, payload).unwrap() } else { b.udp(4000, 80).write(&mut out, payload).unwrap() }
    // fewer tags: drop the outer ones (each tag's ethertype/TPID field moves up)
    out.drain(12..12 + 4 * (2 - tags));
    let l3 = ETH_LEN + 4 * tags;
    if v6 && ext != 0 {
        let nh = out[l3 + 6];
        let hdr: [u8; 8] = if ext == 1 { [nh, 0, 1, 4, 0, 0, 0, 0] } else { let o = (frag_off << 3).to_be_bytes(); [nh, 0, o[0], o[1], 0, 0, 0, 9] };
        out[l3 + 6] = if ext == 1 { ipv6::NH_HOP_BY_HOP } else { ipv6::NH_FRAGMENT };
        let plen = u16::from_be_bytes([out[l3 + 4], out[l3 + 5]]) + 8;
        out[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
        out.splice(l3 + 40..l3 + 40, hdr);
    }
    out
}

proptest::proptest! {
    /// The in-place entries the worker takes for IPv4 and IPv6 (fields written into the
    /// caller's local, IPv6's TCP/UDP-first shortcut past the extension-header walk, the
    /// link layer parsed once for both) decide exactly as [`parse`] on any frame:
    /// well-formed ones with and without extension headers and fragments, and the same
    /// with bytes overwritten and the end cut off.
    #[test]
    fn in_place_parsing_agrees_with_parse(v6 in proptest::bool::ANY, tags in 0usize..3, tcp in proptest::bool::ANY, ext in 0u8..3, frag_off in 0u16..3,
                                          payload in proptest::collection::vec(0u8.., 0..40),
                                          edits in proptest::collection::vec((0usize..100, 0u8..), 0..4), cut in 0usize..120) {
        let mut f = ip_frame(v6, tags, tcp, ext, frag_off, &payload);
        let intact = edits.is_empty() && !(cut < f.len() && cut % 3 == 0);
        for (at, byte) in edits {
            if let Some(b) = f.get_mut(at) {
                *b = byte;
            }
        }
        if !intact {
            f.truncate(if cut % 3 == 0 { cut } else { f.len() });
        }
        let whole = parse(&f);
        if intact {
            // Well formed: the ports etherparse reads (an independent parser walking the
            // same extension headers) are ours; a non-first fragment has none.
            let s = SlicedPacket::from_ethernet(&f).unwrap();
            let ports = match s.transport {
                Some(TransportSlice::Tcp(t)) => Some((t.source_port(), t.destination_port())),
                Some(TransportSlice::Udp(u)) => Some((u.source_port(), u.destination_port())),
                _ => None,
            };
            let ours = match &whole {
                Ok(Parsed::Ipv4(p)) => p.has_ports.then_some((p.sport, p.dport)),
                Ok(Parsed::Ipv6(p)) => p.has_ports.then_some((p.sport, p.dport)),
                other => panic!("{other:?}"),
            };
            proptest::prop_assert_eq!(ours, ports);
            proptest::prop_assert_eq!(ours.is_some(), !(v6 && ext == 2 && frag_off != 0));
        }
        // Not IPv4 or IPv6 after the tags: the in-place entries leave it to `parse`
        // (`Ok(None)`), whatever `parse` then decides (an ARP, a malformed ARP, an
        // unsupported ethertype); the first CI failure was an IPv4 frame whose inner
        // ethertype was overwritten to ARP's.
        let expected = match whole {
            Ok(Parsed::Arp(_)) | Err(DropReason::ArpIgnored | DropReason::UnsupportedEthertype) => Ok(None),
            other => other.map(Some),
        };
        proptest::prop_assert_eq!(parse_in_place(&f), expected);
    }
}

proptest::proptest! {
    /// The IPv6 in-place entry's shortcut ([`fill_ipv6`]: TCP or UDP right after the
    /// fixed header skips the walk) is what the walk answers for it, whatever follows.
    #[test]
    fn walk_ext_stops_at_once_at_tcp_or_udp(tcp in proptest::bool::ANY, payload in proptest::collection::vec(0u8.., 0..64)) {
        let nh = if tcp { PROTO_TCP } else { PROTO_UDP };
        proptest::prop_assert_eq!(ipv6::walk_ext(nh, &payload), Ok(ipv6::ExtWalk { proto: nh, offset: 0, frag: None, headers: 0 }));
    }
}
