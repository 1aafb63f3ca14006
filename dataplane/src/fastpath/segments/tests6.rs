//! IPv6 jumbo frames in chained mbufs, on in-memory buffers that model
//! them ([`MemBuf::segmented`]): an IPv6 packet (with VLAN tags and extension headers)
//! split at any point is forwarded exactly as the same packet in one buffer, by L2 DSR and
//! by IPIP/GUE over either underlay (and an IPv4 VIP over an IPv6 underlay); the result is
//! checked with etherparse on the reassembled bytes.

use crate::control::snapshot::Snapshot;
use crate::control::{compile, CompileInput, HealthView, SlotMap};
use crate::fastpath::port::MemBuf;
use crate::fastpath::segments::{sum_words_from, SEGMENTED_HEADERS_MAX_V6};
use crate::fastpath::worker::Verdict;
use crate::wire::ipv6::{Ipv6Repr, NH_DEST_OPTS, NH_HOP_BY_HOP};
use crate::wire::{checksum, DropReason, PROTO_TCP};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use proptest::prelude::*;
use spillway_shared::config::Config;
use super::tests::{contiguous_and_chained, split, worker, Outcome};

const LB: [u8; 6] = [2, 0, 0, 0, 0, 1];
const VIP6: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0100;
const CLIENT6: u128 = 0xfd01_0000_0000_0000_0000_0000_0000_0005;

/// An IPv6 VIP fd00::100 tcp/80 and an IPv4 VIP 10.0.0.100 tcp/80, both in `mode`, whose
/// backends are IPv6 (`under6`) or IPv4; port addresses 10.0.0.2 and fd00::2.
fn snap(mode: &str, encap_mtu: u16, under6: bool) -> Snapshot {
    let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\naddress6 = \"fd00::2\"\n[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n");
    for (name, vip) in [("web6", "fd00::100"), ("web", "10.0.0.100")] {
        let v6_vip = vip.contains(':');
        // L2 DSR backends share the VIP's family
        let b6 = if mode == "L2_DSR" { v6_vip } else { under6 };
        t += &format!("[[services]]\nname = \"{name}\"\nvip = \"{vip}\"\nport = 80\nprotocol = \"tcp\"\nforwarding_mode = \"{mode}\"\nencap_mtu = {encap_mtu}\n");
        for i in 1..=3 {
            let addr = if b6 { format!("fd00:21::{i}") } else { format!("10.0.11.{i}") };
            t += &format!("[[services.backends]]\nname = \"{name}{i}\"\naddress = \"{addr}\"\nmac = \"02:00:00:00:0b:0{i}\"\nzone = \"z1\"\n");
        }
    }
    let cfg = Config::from_toml(&t).unwrap();
    cfg.validate().unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let mut states = std::collections::HashMap::new();
    compile(&cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut states, now_sec: 0.0, generation: 1, port_addrs: vec![0x0a00_0002] })
}


/// Ethernet with `tags` VLAN tags and `ethertype`.
fn l2(tags: usize, ethertype: u16) -> Vec<u8> {
    let mut f = LB.to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 0x10, 5]);
    let tpids = [0x88a8u16, 0x8100];
    for t in 0..tags {
        f.extend_from_slice(&tpids[2 - tags + t].to_be_bytes());
        f.extend_from_slice(&(100 + t as u16).to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// A TCP header (20 bytes, flags ACK) from `sport` to 80, then `payload` patterned bytes.
fn tcp_and_payload(sport: u16, payload: usize) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[12] = 0x50;
    t[13] = crate::wire::tcp_flags::ACK;
    t.extend((0..payload).map(|i| (i * 7 + 3) as u8));
    t
}

/// An IPv6 TCP packet to the VIP: `tags` VLAN tags, extension headers of the given
/// lengths in 8-octet units (Hop-by-Hop first, then Destination Options), `payload`
/// bytes after the TCP header, `pad` bytes of trailing garbage.
fn frame6(tags: usize, exts: &[u8], payload: usize, sport: u16, pad: usize) -> Vec<u8> {
    let mut f = l2(tags, 0x86dd);
    let mut body = Vec::new();
    for (i, &units) in exts.iter().enumerate() {
        let mut h = vec![0u8; (usize::from(units) + 1) * 8];
        h[0] = if i + 1 < exts.len() { NH_DEST_OPTS } else { PROTO_TCP };
        h[1] = units;
        h[2] = 1; // PadN over the rest
        h[3] = h.len() as u8 - 4;
        body.extend_from_slice(&h);
    }
    body.extend(tcp_and_payload(sport, payload));
    let first = match exts.len() {
        0 => PROTO_TCP,
        1 => NH_DEST_OPTS,
        _ => NH_HOP_BY_HOP,
    };
    // with two or more, Hop-by-Hop comes first (its Next Header is Destination Options)
    let l3 = f.len();
    f.resize(l3 + 40, 0);
    Ipv6Repr { src: CLIENT6, dst: VIP6, next_header: first, payload_len: body.len(), hop_limit: 64, flow_label: 7 }.emit(&mut f[l3..]).unwrap();
    f.extend_from_slice(&body);
    f.extend(std::iter::repeat_n(0xee, pad));
    f
}

/// An IPv4 TCP packet to 10.0.0.100 (DF), `payload` bytes after the TCP header.
fn frame4(tags: usize, payload: usize, sport: u16) -> Vec<u8> {
    let mut f = l2(tags, 0x0800);
    let l3 = f.len();
    f.resize(l3 + 20, 0);
    crate::wire::Ipv4Repr { src: 0x0a01_0005, dst: 0x0a00_0064, protocol: PROTO_TCP, payload_len: 20 + payload, ident: 9, dont_fragment: true, ttl: 64 }.emit(&mut f[l3..]).unwrap();
    f.extend(tcp_and_payload(sport, payload));
    f
}

/// One packet through fresh workers, in one buffer and split as `segs` (first segment
/// growable to 2,048 bytes, as an mbuf): (verdict, bytes) of both, and the segment count.
fn both(s: &Snapshot, f: &[u8], segs: &[usize]) -> ((Verdict, Vec<u8>), Outcome) {
    contiguous_and_chained(s, f, segs, 2048)
}

/// Checks a forwarded frame with etherparse: the inner IP packet (at `l3` of the received
/// frame) is `inner` unchanged; for encapsulation, the outer lengths cover it and a
/// GUE-over-IPv6 UDP checksum is valid.
fn check_forwarded(out: &[u8], l3: usize, inner: &[u8], mode: &str) {
    let p = SlicedPacket::from_ethernet(out).expect("etherparse reads the frame");
    match mode {
        "L2_DSR" => {
            assert!(out.get(l3..l3 + inner.len()) == Some(inner), "L2 DSR leaves the packet as it came");
            assert_eq!(&out[..6], &[2, 0, 0, 0, 0x0b, out[5]]);
        }
        _ => {
            let (outer_payload, udp_ok) = match (&p.net, &p.transport) {
                (Some(NetSlice::Ipv4(ip)), t) => (usize::from(ip.header().total_len()) - 20, matches!(t, None | Some(TransportSlice::Udp(_)))),
                (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Udp(u))) => {
                    let want = u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap();
                    (usize::from(ip.header().payload_length()), u.checksum() == want)
                }
                (Some(NetSlice::Ipv6(ip)), _) => (usize::from(ip.header().payload_length()), true),
                other => panic!("not encapsulated: {other:?}"),
            };
            assert!(udp_ok, "{mode}: GUE checksum covers every segment");
            let oh = if mode == "GUE" { 8 } else { 0 };
            assert_eq!(outer_payload, oh + inner.len(), "{mode}: outer length covers the whole inner packet");
            assert!(out.len() > inner.len() && out[out.len() - inner.len()..] == *inner, "{mode}: inner packet unchanged, padding dropped");
        }
    }
}

#[test]
fn ipv6_jumbo_in_five_segments_is_forwarded_in_every_mode_and_underlay() {
    let f = frame6(1, &[0, 2], 9000 - 40 - 32 - 20, 40000, 0);
    assert_eq!(f.len(), 18 + 9000);
    for (mode, under6) in [("L2_DSR", true), ("IPIP", true), ("GUE", true), ("IPIP", false), ("GUE", false)] {
        let s = snap(mode, 9216, under6);
        let ((v1, b1), (v2, b2, n)) = both(&s, &f, &split(f.len(), 2048, 2048));
        assert_eq!(v1, Verdict::Forward, "{mode} {under6}");
        assert_eq!((v2, &b2), (v1, &b1), "{mode} {under6}");
        assert_eq!(n, 5, "{mode}: segments kept, nothing copied");
        check_forwarded(&b2, 18, &f[18..], mode);
    }
    // an IPv4 VIP over an IPv6 underlay, chained
    let f = frame4(0, 9000 - 40, 40001);
    for mode in ["IPIP", "GUE"] {
        let ((v1, b1), (v2, b2, _)) = both(&snap(mode, 9216, true), &f, &split(f.len(), 2048, 2048));
        assert_eq!((v2, &b2), (v1, &b1), "{mode}");
        assert_eq!(v2, Verdict::Forward);
        assert_eq!(&b2[12..14], &[0x86, 0xdd]);
        check_forwarded(&b2, 14, &f[14..], mode);
    }
}

#[test]
fn too_big_for_the_tunnel_gets_packet_too_big_from_the_first_segment() {
    let f = frame6(0, &[], 9000 - 40 - 20, 40000, 0);
    let ((v1, b1), (v2, b2, n)) = both(&snap("IPIP", 1500, true), &f, &split(f.len(), 512, 2048));
    assert_eq!(v1, Verdict::Reply);
    assert_eq!((v2, &b2), (v1, &b1));
    assert_eq!((n, b2.len()), (1, 14 + 1280), "the error fills 1,280 bytes in the first segment; the rest is freed");
}

#[test]
fn ipv6_headers_beyond_the_first_segment_are_counted_drops() {
    // extension headers longer than the pull-up, in a first segment too short for them
    let long = frame6(0, &[40], 3000, 40000, 0); // 328-byte Destination Options
    const { assert!(14 + 40 + 328 + 20 > SEGMENTED_HEADERS_MAX_V6) };
    let s = snap("L2_DSR", 1500, true);
    let mut b = MemBuf::segmented(&long, &[100, 4096], 2048);
    assert_eq!(worker().process(&mut b, 0, &s, 0), Verdict::Drop(DropReason::TruncatedIpv6));
    // the same chain already in a (2,048-byte) first segment parses
    let mut b = MemBuf::segmented(&long, &[2048, 4096], 2048);
    assert_eq!(worker().process(&mut b, 0, &s, 0), Verdict::Forward);
    // a TCP header cut by the first segment's end, which cannot grow
    let f = frame6(0, &[], 3000, 40000, 0);
    let mut b = MemBuf::segmented(&f, &[64, 4096], 64);
    assert_eq!(worker().process(&mut b, 0, &s, 0), Verdict::Drop(DropReason::MultiSegment));
    assert_eq!(b.to_vec(), f, "a failed pull-up leaves the packet as it was");
    // a payload length beyond the frame (over all segments)
    let mut f = frame6(0, &[], 3000, 40000, 0);
    f[18..20].copy_from_slice(&4000u16.to_be_bytes());
    let mut b = MemBuf::segmented(&f, &[1024, 4096], 2048);
    assert_eq!(worker().process(&mut b, 0, &s, 0), Verdict::Drop(DropReason::TruncatedIpv6));
}

#[test]
fn sum_over_segments_is_the_sum_of_the_bytes() {
    let f: Vec<u8> = (0..301u32).map(|i| (i * 37 + 11) as u8).collect();
    for segs in [vec![301], vec![1, 300], vec![3, 5, 7, 286], vec![150, 1, 150]] {
        let b = MemBuf::segmented(&f, &segs, usize::MAX);
        for off in [0, 1, 2, 4, 5, 300] {
            assert_eq!(checksum::fold(sum_words_from(&b, off, 0)), checksum::fold(checksum::sum_words(&f[off..], 0)), "{segs:?} from {off}");
        }
    }
}

proptest! {
    /// Any IPv6 frame (0–2 VLAN tags, 0–2 extension headers of up to 136 bytes, up to
    /// 9,000-byte packets, trailing padding), split anywhere (headers straddling segments
    /// included), in any mode and underlay, with or without Packet Too Big: the segmented
    /// packet gets the verdict and the bytes of the contiguous one, which etherparse reads.
    #[test]
    fn ipv6_segmented_equals_contiguous(
        tags in 0usize..3,
        exts in prop::collection::vec(0u8..17, 0..3),
        payload in 0usize..8700,
        pad in prop_oneof![Just(0usize), 0usize..64],
        first in 1usize..2100,
        chunk in 1usize..4096,
        mode in prop_oneof![Just("L2_DSR"), Just("IPIP"), Just("GUE")],
        under6 in any::<bool>(),
        encap_mtu in prop_oneof![Just(1500u16), Just(9216u16)],
        sport in 1024u16..,
    ) {
        let f = frame6(tags, &exts, payload, sport, pad);
        let s = snap(mode, encap_mtu, under6);
        let ((v1, b1), (v2, b2, _)) = both(&s, &f, &split(f.len(), first, chunk));
        prop_assert_eq!(v2, v1);
        prop_assert!(b2 == b1, "segmented bytes differ from contiguous ones");
        if v2 == Verdict::Forward {
            let l3 = 14 + 4 * tags;
            check_forwarded(&b2, l3, &f[l3..f.len() - pad], mode);
        }
    }

    /// Random bytes behind an IPv6 Ethernet header, in random segments, never panic, and a
    /// dropped packet is left as it came.
    #[test]
    fn random_ipv6_segmented_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..3000), first in 1usize..200, chunk in 1usize..512, mode in prop_oneof![Just("L2_DSR"), Just("IPIP"), Just("GUE")], under6 in any::<bool>()) {
        let mut f = l2(0, 0x86dd);
        f.extend_from_slice(&bytes);
        if let Some(v) = f.get_mut(14) {
            *v = 0x60 | (*v & 0x0f);
        }
        let s = snap(mode, 1500, under6);
        let mut b = MemBuf::segmented(&f, &split(f.len(), first, chunk), 256);
        if let Verdict::Drop(_) = worker().process(&mut b, 0, &s, 0) {
            prop_assert_eq!(b.to_vec(), f);
        }
    }
}
