//! Reordered IPv6 fragments through the real `spillway` binary (docs/semantics.md
//! "Fragments"), as `packet_cases.rs` does for IPv4 with
//! `reordered_udp_fragments_with_two_services_are_held_and_follow_their_first`: two UDP
//! services on the IPv6 VIP fd00::100 (dns6 :53 on backends 12–13, mdns6 :5353 on backends
//! 14–15), every datagram's fragments sent last first. A later fragment alone cannot name
//! its service, so the worker holds it until its first fragment arrives; then all of the
//! datagram's fragments reach one backend of the first fragment's service, none is lost.
//!
//! The frames are generated here: the IPv6 header and UDP datagram with etherparse, the
//! Fragment header by hand (RFC 8200 §4.5; etherparse 0.16 writes its offset and M flag in
//! IPv4's bit layout), and the output is read back the same way.

mod common;

use common::*;
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv6Header, Ipv6HeaderSlice, PacketBuilder};
use std::collections::BTreeMap;

const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0x0c, 1];
const VIP6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];
/// Fragment payload bytes (a multiple of 8).
const CHUNK: usize = 600;

/// A client in the client zone fd01::/64.
fn client(i: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    (a[0], a[1], a[15]) = (0xfd, 1, i);
    a
}

/// The three fragments of UDP datagram `ident` from `src` to fd00::100:`dport` (1,400
/// bytes of data), in the order sent: offset 0 (with the UDP header) first.
fn fragments(src: [u8; 16], ident: u32, dport: u16) -> Vec<Vec<u8>> {
    let mut datagram = Vec::new();
    PacketBuilder::ipv6(src, VIP6, 64).udp(40_000 + (ident as u16), dport).write(&mut datagram, &[ident as u8; 1400]).expect("udp");
    let upper = &datagram[40..];
    let mut out = Vec::new();
    for (k, chunk) in upper.chunks(CHUNK).enumerate() {
        let more = (k + 1) * CHUNK < upper.len();
        let mut f = Vec::new();
        Ethernet2Header { source: CLIENT_MAC, destination: LB_MAC, ether_type: EtherType::IPV6 }.write(&mut f).expect("eth");
        let ip = Ipv6Header { traffic_class: 0, flow_label: Default::default(), payload_length: (8 + chunk.len()) as u16, next_header: IpNumber::IPV6_FRAGMENTATION_HEADER, hop_limit: 64, source: src, destination: VIP6 };
        ip.write(&mut f).expect("ipv6");
        // Next Header UDP, reserved, offset (8-octet units) << 3 | M, Identification
        f.extend_from_slice(&[17, 0]);
        f.extend_from_slice(&(((k * CHUNK / 8) as u16) << 3 | u16::from(more)).to_be_bytes());
        f.extend_from_slice(&ident.to_be_bytes());
        f.extend_from_slice(chunk);
        out.push(f);
    }
    out
}

/// (source, identification, offset in 8-octet units) of an IPv6 frame with a Fragment
/// header right after the fixed header.
fn fragment_of(f: &[u8]) -> ([u8; 16], u32, u16) {
    let h = Ipv6HeaderSlice::from_slice(&f[14..]).expect("IPv6 header");
    assert_eq!(h.next_header(), IpNumber::IPV6_FRAGMENTATION_HEADER, "a Fragment header follows");
    let fh = &f[54..62];
    (h.source(), u32::from_be_bytes([fh[4], fh[5], fh[6], fh[7]]), u16::from_be_bytes([fh[2], fh[3]]) >> 3)
}

/// A datagram: (source, identification).
type Datagram = ([u8; 16], u32);

#[test]
fn reordered_ipv6_fragments_with_two_services_are_held_and_follow_their_first() {
    // six datagrams, alternately to :53 and :5353, each sent last fragment first
    let mut input = Vec::new();
    let mut port_of = BTreeMap::new();
    for i in 0..6u8 {
        let (src, ident, dport) = (client(10 + i), 0x8000_0000 | u32::from(i) << 16 | 7, if i % 2 == 0 { 53 } else { 5353 });
        let mut f = fragments(src, ident, dport);
        assert_eq!(f.len(), 3);
        f.reverse();
        input.extend(f);
        port_of.insert((src, ident), dport);
    }
    let setup = Setup { ipv6: true, udp53: true, udp5353: true, ..Setup::default() };
    let run = run_frames("ipv6-frag-hold", &setup, &input, 2.0);
    assert!(run.success, "{}", run.stderr);
    assert_eq!(run.status.total.rx, 18);
    assert_eq!(run.out.len(), 18, "every fragment forwarded; drops: {:?}", run.nonzero_drops());
    assert_eq!(run.total_drops(), 0);
    assert_eq!(run.status.total.fragments_held, 12, "the two later fragments of each of the six datagrams");
    assert_eq!(run.status.total.forwarded, 18);

    // datagram → (backends, offsets in the order sent)
    let mut seen: BTreeMap<Datagram, (Vec<usize>, Vec<u16>)> = BTreeMap::new();
    for f in &run.out {
        let (src, ident, offset) = fragment_of(f);
        let e = seen.entry((src, ident)).or_default();
        e.0.push(backend_of_mac(&f[0..6]).unwrap_or_else(|| panic!("no backend MAC: {:02x?}", &f[0..6])));
        e.1.push(offset);
        assert_eq!(&f[6..12], &LB_MAC);
    }
    assert_eq!(seen.len(), 6);
    for (k, (backends, offsets)) in &seen {
        assert!(backends.iter().all(|b| *b == backends[0]), "datagram {k:02x?} split over backends {backends:?}");
        let want = if port_of[k] == 53 { 12..14 } else { 14..16 };
        assert!(want.contains(&backends[0]), "datagram {k:02x?} to :{} reached backend {}", port_of[k], backends[0]);
        assert_eq!(offsets, &vec![0, 2 * CHUNK as u16 / 8, CHUNK as u16 / 8], "datagram {k:02x?}: its first fragment, then the held ones in arrival order");
    }
    // each frame left unchanged past the MACs
    let mut sent: Vec<&[u8]> = run.out.iter().map(|f| &f[12..]).collect();
    let mut got: Vec<&[u8]> = input.iter().map(|f| &f[12..]).collect();
    sent.sort();
    got.sort();
    assert_eq!(sent, got);
}
