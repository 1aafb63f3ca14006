//! Tests of [`super`] (ICMPv6 and Neighbor Discovery), checked with etherparse.

use super::*;
use crate::wire::ethernet::emit_header;
use crate::wire::{parse, Parsed};
use etherparse::{Icmpv6Header, Icmpv6Slice, Icmpv6Type, Ipv6HeaderSlice};
use proptest::prelude::*;

const OUR_MAC: MacAddr = [2, 0, 0, 0, 0, 1];
const HOST_MAC: MacAddr = [2, 0, 0, 0, 0, 9];
const VIP: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0100;
const CLIENT: u128 = 0xfd01_0000_0000_0000_0000_0000_0000_0005;

/// A frame carrying an ICMPv6 message `ty`/`code` with `body` (after the 4 bytes of
/// `rest`) from `src` to `dst`, with a valid checksum computed by etherparse.
fn icmpv6_frame(src: u128, dst: u128, hop_limit: u8, ty: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let h = Icmpv6Header::with_checksum(Icmpv6Type::Unknown { type_u8: ty, code_u8: code, bytes5to8: rest }, src.to_be_bytes(), dst.to_be_bytes(), body).unwrap();
    let mut msg = h.to_bytes().to_vec();
    msg.extend_from_slice(body);
    let mut f = vec![0u8; ETH_LEN + IPV6_LEN];
    emit_header(&mut f, [0x33, 0x33, 0xff, 0, 1, 0], HOST_MAC, ETHERTYPE_IPV6).unwrap();
    Ipv6Repr { src, dst, next_header: NH_ICMPV6, payload_len: msg.len(), hop_limit, flow_label: 0 }.emit(&mut f[ETH_LEN..]).unwrap();
    f.extend_from_slice(&msg);
    f
}

/// A Neighbor Solicitation for `target` from `src` with a Source Link-Layer option.
fn ns(src: u128, target: u128, hop_limit: u8) -> Vec<u8> {
    let mut body = target.to_be_bytes().to_vec();
    body.extend_from_slice(&[OPT_SOURCE_LL, 1]);
    body.extend_from_slice(&HOST_MAC);
    let snm = 0xff02_0000_0000_0000_0000_0001_ff00_0000 | (target & 0xff_ffff);
    icmpv6_frame(src, snm, hop_limit, TYPE_NEIGHBOR_SOLICITATION, 0, [0; 4], &body)
}

fn v6(f: &[u8]) -> Ipv6Info {
    match parse(f) {
        Ok(Parsed::Ipv6(p)) => p,
        other => panic!("not IPv6: {other:?}"),
    }
}

/// Checks an NA frame with etherparse: IPv6 from `target` with hop limit 255, ICMPv6 type
/// 136 with a valid checksum, the flags, the target and a TLLA option with our MAC.
fn check_na(f: &[u8], target: u128, dst: u128, solicited: bool) {
    let ip = Ipv6HeaderSlice::from_slice(&f[ETH_LEN..]).unwrap();
    assert_eq!((ip.hop_limit(), ip.source(), ip.destination()), (255, target.to_be_bytes(), dst.to_be_bytes()));
    let icmp = Icmpv6Slice::from_slice(&f[ETH_LEN + IPV6_LEN..]).unwrap();
    assert!(icmp.is_checksum_valid(ip.source(), ip.destination()), "NA checksum");
    assert_eq!((icmp.type_u8(), icmp.code_u8()), (TYPE_NEIGHBOR_ADVERTISEMENT, 0));
    let flags = icmp.bytes5to8()[0];
    assert_eq!(flags & NA_FLAG_SOLICITED != 0, solicited);
    assert!(flags & NA_FLAG_OVERRIDE != 0 && flags & 0x80 == 0, "Override set, Router clear");
    let p = icmp.payload();
    assert_eq!(&p[..16], &target.to_be_bytes());
    assert_eq!((p[16], p[17], &p[18..24]), (OPT_TARGET_LL, 1, &OUR_MAC[..]));
    assert_eq!(&f[6..12], &OUR_MAC);
}

#[test]
fn solicitation_for_ours_is_answered_in_place() {
    let mut f = ns(CLIENT, VIP, 255);
    let p = v6(&f);
    assert_eq!(ns_target(&f, &p), Ok(Some(VIP)));
    let n = na_reply_in_place(&mut f, &p, VIP, OUR_MAC).unwrap();
    assert_eq!(n, ETH_LEN + IPV6_LEN + NA_LEN);
    check_na(&f[..n], VIP, CLIENT, true);
    assert_eq!(&f[0..6], &HOST_MAC, "back to the requester");
}

#[test]
fn dad_solicitation_is_answered_to_all_nodes_unsolicited() {
    let mut f = ns(0, VIP, 255);
    let p = v6(&f);
    let n = na_reply_in_place(&mut f, &p, VIP, OUR_MAC).unwrap();
    check_na(&f[..n], VIP, ALL_NODES, false);
    assert_eq!(&f[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
}

#[test]
fn invalid_solicitations_are_ignored() {
    // hop limit below 255: may have come through a router (RFC 4861 §7.1.1)
    let f = ns(CLIENT, VIP, 254);
    assert_eq!(ns_target(&f, &v6(&f)), Err(DropReason::NdInvalid));
    // bad checksum
    let mut f = ns(CLIENT, VIP, 255);
    let last = f.len() - 1;
    f[last] ^= 1;
    assert_eq!(ns_target(&f, &v6(&f)), Err(DropReason::NdInvalid));
    // an option of length 0 (RFC 4861 §7.1.1; fresh-user QA: it was answered), alone or
    // after a valid one, and an option running past the message
    for opts in [&[OPT_SOURCE_LL, 0, 0, 0, 0, 0, 0, 0][..], &[OPT_SOURCE_LL, 1, 2, 0, 0, 0, 0, 9, 14, 0, 0, 0, 0, 0, 0, 0], &[OPT_SOURCE_LL, 2, 2, 0, 0, 0, 0, 9]] {
        let mut body = VIP.to_be_bytes().to_vec();
        body.extend_from_slice(opts);
        let snm = 0xff02_0000_0000_0000_0000_0001_ff00_0000 | (VIP & 0xff_ffff);
        let f = icmpv6_frame(CLIENT, snm, 255, TYPE_NEIGHBOR_SOLICITATION, 0, [0; 4], &body);
        assert_eq!(ns_target(&f, &v6(&f)), Err(DropReason::NdInvalid), "options {opts:?}");
    }
    // Duplicate Address Detection (from ::): never with a Source Link-Layer option, only to
    // the solicited-node group; without the option, to that group, it is valid
    let f = ns(0, VIP, 255);
    assert_eq!(ns_target(&f, &v6(&f)), Err(DropReason::NdInvalid), "DAD with a source link-layer option");
    let snm = 0xff02_0000_0000_0000_0000_0001_ff00_0000 | (VIP & 0xff_ffff);
    let f = icmpv6_frame(0, snm, 255, TYPE_NEIGHBOR_SOLICITATION, 0, [0; 4], &VIP.to_be_bytes());
    assert_eq!(ns_target(&f, &v6(&f)), Ok(Some(VIP)), "DAD");
    let f = icmpv6_frame(0, VIP, 255, TYPE_NEIGHBOR_SOLICITATION, 0, [0; 4], &VIP.to_be_bytes());
    assert_eq!(ns_target(&f, &v6(&f)), Err(DropReason::NdInvalid), "DAD to a unicast address");
    // not a solicitation
    let f = icmpv6_frame(CLIENT, VIP, 64, 128, 0, [0; 4], &[1, 2, 3, 4]);
    assert_eq!(ns_target(&f, &v6(&f)), Ok(None));
}

#[test]
fn unsolicited_advertisement_is_valid() {
    let mut f = [0u8; UNSOLICITED_NA_FRAME_LEN];
    let n = unsolicited_na(&mut f, VIP, OUR_MAC).unwrap();
    assert_eq!(n, f.len());
    check_na(&f, VIP, ALL_NODES, false);
}

/// the Neighbor Solicitation resolving a next hop, checked with etherparse:
/// Ethernet 33:33:ff + the target's low 24 bits (RFC 2464 §7), IPv6 from our address to
/// the solicited-node group ff02::1:ffXX:XXXX (RFC 4291 §2.7.1), hop limit 255, ICMPv6
/// type 135 code 0 with a valid checksum, the target, and our MAC in a Source Link-Layer
/// Address option; 86 bytes, the control-frame size. Our own parser takes it as a valid
/// solicitation for that target.
#[test]
fn neighbor_solicitation_asks_the_solicited_node_group() {
    let target: u128 = 0xfd00_0000_0000_0000_0000_0000_21ab_cdef;
    let mut f = [0xeeu8; SOLICITATION_FRAME_LEN];
    assert_eq!(neighbor_solicitation(&mut f, CLIENT, target, OUR_MAC), Ok(86));
    assert_eq!(&f[0..6], &[0x33, 0x33, 0xff, 0xab, 0xcd, 0xef]);
    assert_eq!(&f[6..12], &OUR_MAC);
    let ip = Ipv6HeaderSlice::from_slice(&f[ETH_LEN..]).unwrap();
    let snm: std::net::Ipv6Addr = "ff02::1:ffab:cdef".parse().unwrap();
    assert_eq!((ip.hop_limit(), ip.source(), ip.destination(), ip.payload_length()), (255, CLIENT.to_be_bytes(), snm.octets(), 32));
    let icmp = Icmpv6Slice::from_slice(&f[ETH_LEN + IPV6_LEN..]).unwrap();
    assert!(icmp.is_checksum_valid(ip.source(), ip.destination()), "NS checksum");
    assert_eq!((icmp.type_u8(), icmp.code_u8(), icmp.bytes5to8()), (TYPE_NEIGHBOR_SOLICITATION, 0, [0; 4]));
    let body = icmp.payload();
    assert_eq!(&body[..16], &target.to_be_bytes());
    assert_eq!((body[16], body[17], &body[18..24]), (OPT_SOURCE_LL, 1, &OUR_MAC[..]));
    assert_eq!(ns_target(&f, &v6(&f)), Ok(Some(target)));
    assert_eq!(neighbor_solicitation(&mut [0u8; 85], CLIENT, target, OUR_MAC), Err(DropReason::NoHeadroom), "a short buffer is an error, not a panic");
}

const BACKEND: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0011;

/// A Neighbor Advertisement for `target` from `src` to `dst` with `flags` (first body byte)
/// and `opts` after the target, valid checksum (etherparse).
fn na(dst: u128, hop_limit: u8, code: u8, flags: u8, target: u128, opts: &[u8]) -> Vec<u8> {
    let mut body = target.to_be_bytes().to_vec();
    body.extend_from_slice(opts);
    icmpv6_frame(target, dst, hop_limit, TYPE_NEIGHBOR_ADVERTISEMENT, code, [flags, 0, 0, 0], &body)
}

const TLLA: [u8; 8] = [OPT_TARGET_LL, 1, 2, 0, 0, 0, 0, 0x11];
const S_O: u8 = NA_FLAG_SOLICITED | NA_FLAG_OVERRIDE;

#[test]
fn advertisements_are_read_with_their_flags_and_target_link_layer_address() {
    let f = na(CLIENT, 255, 0, S_O, BACKEND, &TLLA);
    let want = NaInfo { target: BACKEND, mac: Some([2, 0, 0, 0, 0, 0x11]), solicited: true, overrides: true };
    assert_eq!(na_info(&f, &v6(&f)), Ok(Some(want)));
    let f = na(CLIENT, 255, 0, NA_FLAG_SOLICITED, BACKEND, &TLLA);
    assert_eq!(na_info(&f, &v6(&f)), Ok(Some(NaInfo { overrides: false, ..want })));
    // Unsolicited to all-nodes (as our own announcements): valid, Solicited clear.
    let f = na(ALL_NODES, 255, 0, NA_FLAG_OVERRIDE, BACKEND, &TLLA);
    assert_eq!(na_info(&f, &v6(&f)), Ok(Some(NaInfo { solicited: false, ..want })));
    // No option: valid (RFC 4861 §4.4 allows it for unicast solicitations), no MAC.
    let f = na(CLIENT, 255, 0, S_O, BACKEND, &[]);
    assert_eq!(na_info(&f, &v6(&f)), Ok(Some(NaInfo { mac: None, ..want })));
    // An unknown option before the TLLA is skipped.
    let opts = [[14, 1, 0, 0, 0, 0, 0, 0], TLLA].concat();
    let f = na(CLIENT, 255, 0, S_O, BACKEND, &opts);
    assert_eq!(na_info(&f, &v6(&f)), Ok(Some(want)));
    // Not an advertisement.
    let f = ns(CLIENT, VIP, 255);
    assert_eq!(na_info(&f, &v6(&f)), Ok(None));
}

/// RFC 4861 §7.1.2: each of these is invalid (`nd_invalid`).
#[test]
fn invalid_advertisements_are_refused() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("hop limit 254: may come from off-link", na(CLIENT, 254, 0, S_O, BACKEND, &TLLA)),
        ("code 1", na(CLIENT, 255, 1, S_O, BACKEND, &TLLA)),
        ("multicast target", na(CLIENT, 255, 0, S_O, ALL_NODES, &TLLA)),
        ("Solicited set to a multicast destination", na(ALL_NODES, 255, 0, S_O, BACKEND, &TLLA)),
        ("zero-length option", na(CLIENT, 255, 0, S_O, BACKEND, &[OPT_TARGET_LL, 0, 2, 0, 0, 0, 0, 0x11])),
        ("option past the message", na(CLIENT, 255, 0, S_O, BACKEND, &[OPT_TARGET_LL, 2, 2, 0, 0, 0, 0, 0x11])),
        ("trailing byte", na(CLIENT, 255, 0, S_O, BACKEND, &[TLLA.as_slice(), &[0]].concat())),
        ("ICMPv6 length 20 < 24", icmpv6_frame(BACKEND, CLIENT, 255, TYPE_NEIGHBOR_ADVERTISEMENT, 0, [S_O, 0, 0, 0], &BACKEND.to_be_bytes()[..12])),
    ];
    for (what, f) in cases {
        assert_eq!(na_info(&f, &v6(&f)), Err(DropReason::NdInvalid), "{what}");
    }
    let mut f = na(CLIENT, 255, 0, S_O, BACKEND, &TLLA);
    let last = f.len() - 1;
    f[last] ^= 1;
    assert_eq!(na_info(&f, &v6(&f)), Err(DropReason::NdInvalid), "bad checksum");
}

/// An ICMPv6 error of `ty` from a router to the VIP quoting the backend's reply
/// VIP:vip_port → client:client_port (`quoted` bytes of TCP).
fn error_quoting(ty: u8, vip_port: u16, client_port: u16, quoted: usize) -> Vec<u8> {
    let mut inner = vec![0u8; IPV6_LEN];
    Ipv6Repr { src: VIP, dst: CLIENT, next_header: PROTO_TCP, payload_len: 20, hop_limit: 60, flow_label: 0 }.emit(&mut inner).unwrap();
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&vip_port.to_be_bytes());
    tcp[2..4].copy_from_slice(&client_port.to_be_bytes());
    inner.extend_from_slice(&tcp[..quoted]);
    icmpv6_frame(0xfd09 << 112 | 1, VIP, 64, ty, 0, 1280u32.to_be_bytes(), &inner)
}

#[test]
fn quote_needs_header_and_eight_bytes() {
    let f = error_quoting(TYPE_PACKET_TOO_BIG, 80, 40000, 8);
    assert_eq!(icmpv6_quote(&f, &v6(&f)), Ok(Some(Icmpv6Quote { icmp_type: 2, client: CLIENT, vip: VIP, client_port: 40000, vip_port: 80, proto: PROTO_TCP })));
    let f = error_quoting(TYPE_PACKET_TOO_BIG, 80, 40000, 7);
    assert_eq!(icmpv6_quote(&f, &v6(&f)), Err(DropReason::IcmpQuoteTooShort));
    let echo = icmpv6_frame(CLIENT, VIP, 64, 128, 0, [0; 4], &[0; 8]);
    assert_eq!(icmpv6_quote(&echo, &v6(&echo)), Ok(None));
}

#[test]
fn packet_too_big_quotes_within_the_minimum_mtu() {
    for size in [1300usize, 1500, 9000] {
        let mut f = vec![0u8; ETH_LEN + IPV6_LEN];
        emit_header(&mut f, OUR_MAC, HOST_MAC, ETHERTYPE_IPV6).unwrap();
        let payload = size - IPV6_LEN;
        Ipv6Repr { src: CLIENT, dst: VIP, next_header: PROTO_TCP, payload_len: payload, hop_limit: 64, flow_label: 0 }.emit(&mut f[ETH_LEN..]).unwrap();
        f.resize(ETH_LEN + size, 0xab);
        let original = f.clone();
        let p = v6(&f);
        let n = packet_too_big_in_place(&mut f, &p, 1000, OUR_MAC).unwrap();
        assert_eq!(n - ETH_LEN, 1280, "the error fills the minimum MTU");
        let ip = Ipv6HeaderSlice::from_slice(&f[ETH_LEN..n]).unwrap();
        assert_eq!((ip.source(), ip.destination()), (VIP.to_be_bytes(), CLIENT.to_be_bytes()));
        let icmp = Icmpv6Slice::from_slice(&f[ETH_LEN + IPV6_LEN..n]).unwrap();
        assert!(icmp.is_checksum_valid(ip.source(), ip.destination()));
        assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1280 }, "never below 1280");
        assert_eq!(icmp.payload(), &original[ETH_LEN..ETH_LEN + MAX_QUOTE]);
        assert_eq!((&f[0..6], &f[6..12]), (&HOST_MAC[..], &OUR_MAC[..]));
    }
}

proptest! {
    /// Random ICMPv6 messages never panic in any reader; a solicitation for a random
    /// target answers with a valid advertisement.
    #[test]
    fn random_messages_never_panic(ty in any::<u8>(), body in prop::collection::vec(any::<u8>(), 0..80), cut in 0usize..40, target in any::<u128>()) {
        let mut f = icmpv6_frame(CLIENT, VIP, 255, ty, 0, [0; 4], &body);
        let n = f.len().saturating_sub(cut);
        f.truncate(n);
        if let Ok(Parsed::Ipv6(p)) = parse(&f) {
            let _ = icmpv6_quote(&f, &p);
            let _ = ns_target(&f, &p);
            let _ = na_info(&f, &p);
            let mut g = f.clone();
            g.resize(p.l3 + IPV6_LEN + NA_LEN, 0);
            let _ = na_reply_in_place(&mut g, &p, target, OUR_MAC);
            let _ = packet_too_big_in_place(&mut f.clone(), &p, 1280, OUR_MAC);
        }
        let target = target & !(0xffu128 << 120); // not multicast
        let mut s = ns(CLIENT, target, 255);
        let p = v6(&s);
        prop_assert_eq!(ns_target(&s, &p), Ok(Some(target)));
        let n = na_reply_in_place(&mut s, &p, target, OUR_MAC).unwrap();
        check_na(&s[..n], target, CLIENT, true);
    }
}
