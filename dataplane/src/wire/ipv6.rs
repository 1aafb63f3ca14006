//! IPv6 headers (RFC 8200 §3) and the extension-header chain (RFC 8200 §4): a checked view
//! for parsing, [`Ipv6Repr`] for writing, and [`walk_ext`], the bounded walk from the fixed
//! header's Next Header to the upper-layer header.
//!
//! The walk knows the headers of RFC 8200 §4 and RFC 4302:
//! - Hop-by-Hop Options (0), Routing (43) and Destination Options (60): length in 8-octet
//!   units, not counting the first 8 octets (RFC 8200 §4.3, §4.4, §4.6);
//! - Fragment (44): 8 octets (RFC 8200 §4.5); in a fragment whose offset is not 0 nothing
//!   after it is read (its ports are not there);
//! - Authentication Header (51): length in 4-octet units minus 2 (RFC 4302 §2.2);
//! - it stops at ESP (50, encrypted beyond) and No Next Header (59), which have no ports.
//!
//! At most [`MAX_EXT_HEADERS`] extension headers are walked: a longer chain is dropped as
//! `ipv6_ext_chain` (a bound on per-packet work, RFC 7112 §5 and RFC 8200 §4.1 let a node
//! discard what it cannot process within its limits).

use super::{be16, view_invariant_broken, DropReason};

/// Fixed IPv6 header length.
pub const IPV6_LEN: usize = 40;
/// Next Header: Hop-by-Hop Options.
pub const NH_HOP_BY_HOP: u8 = 0;
/// Next Header: IPv4 (IPv4-in-IPv6, RFC 2473).
pub const NH_IPV4: u8 = 4;
/// Next Header: IPv6 (IPv6-in-IPv6 RFC 2473; IPv6-in-IPv4 RFC 4213).
pub const NH_IPV6: u8 = 41;
/// Next Header: Routing.
pub const NH_ROUTING: u8 = 43;
/// Next Header: Fragment.
pub const NH_FRAGMENT: u8 = 44;
/// Next Header: Encapsulating Security Payload (RFC 4303).
pub const NH_ESP: u8 = 50;
/// Next Header: Authentication Header (RFC 4302).
pub const NH_AH: u8 = 51;
/// Next Header: ICMPv6 (RFC 4443).
pub const NH_ICMPV6: u8 = 58;
/// Next Header: No Next Header.
pub const NH_NONE: u8 = 59;
/// Next Header: Destination Options.
pub const NH_DEST_OPTS: u8 = 60;
/// Most extension headers [`walk_ext`] follows before dropping the packet.
pub const MAX_EXT_HEADERS: usize = 8;

/// Whether Next Header value `nh` names an extension header the walk steps over (Hop-by-Hop,
/// Routing, Fragment, Destination Options, AH; RFC 8200 §4, RFC 4302), i.e. not an
/// upper-layer protocol nor ESP / No Next Header, where the walk stops.
#[inline]
pub fn is_extension_header(nh: u8) -> bool {
    matches!(nh, NH_HOP_BY_HOP | NH_ROUTING | NH_FRAGMENT | NH_DEST_OPTS | NH_AH)
}
/// Fragment header length (RFC 8200 §4.5).
pub const FRAG_HEADER_LEN: usize = 8;

/// Named byte ranges of the fixed header (RFC 8200 §3), relative to its start.
pub(crate) mod field {
    use std::ops::Range;
    /// Version (4 bits), Traffic Class (8), Flow Label (20).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length: bytes after the fixed header (extension headers included).
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    /// Next Header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
}

/// A 16-byte address field as a host-order `u128` (`u128::from(Ipv6Addr)`).
#[inline(always)]
pub(crate) fn be128(b: &[u8], r: std::ops::Range<usize>) -> u128 {
    match b.get(r).and_then(|s| <[u8; 16]>::try_from(s).ok()) {
        Some(a) => u128::from_be_bytes(a),
        None => 0,
    }
}

/// A checked view of an IPv6 header and its payload. After [`Ipv6Packet::new_checked`]:
/// version 6, at least 40 bytes, and `40 + payload length ≤ buffer length` (bytes after it,
/// Ethernet padding, are allowed).
#[derive(Debug)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Checks the header: `Err(MalformedIpv6)` when shorter than 40 bytes or version ≠ 6;
    /// `Err(TruncatedIpv6)` when the payload length runs past the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let len = buffer.as_ref().len();
        Self::new_checked_head(buffer, len)
    }

    /// Like [`Self::new_checked`] for the first bytes of a packet that is `packet_len`
    /// bytes long from this header on (the first segment of a jumbo frame received into
    /// chained mbufs; as [`super::Ipv4Packet::new_checked_head`]): the
    /// payload length is checked against `packet_len` (`Err(TruncatedIpv6)` when
    /// `40 + payload length` exceeds it), and [`Self::payload`] stops at the end of
    /// `buffer`. The fixed header must be in `buffer` (`Err(MalformedIpv6)` otherwise).
    #[inline]
    pub fn new_checked_head(buffer: T, packet_len: usize) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        let packet_len = packet_len.max(b.len());
        let h = b.first_chunk::<IPV6_LEN>().ok_or(DropReason::MalformedIpv6)?;
        if h[0] >> 4 != 6 {
            return Err(DropReason::MalformedIpv6);
        }
        if IPV6_LEN + usize::from(be16(h, field::PAYLOAD_LEN)) > packet_len {
            return Err(DropReason::TruncatedIpv6);
        }
        Ok(Ipv6Packet { buffer })
    }

    #[inline]
    fn fixed(&self) -> &[u8; IPV6_LEN] {
        match self.buffer.as_ref().first_chunk::<IPV6_LEN>() {
            Some(h) => h,
            None => view_invariant_broken(),
        }
    }

    /// Payload length (bytes after the fixed header).
    #[inline]
    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.fixed(), field::PAYLOAD_LEN))
    }

    /// Next Header of the fixed header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.fixed()[field::NEXT_HEADER]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.fixed()[field::HOP_LIMIT]
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        let h = self.fixed();
        u32::from_be_bytes([0, h[1] & 0x0f, h[2], h[3]])
    }

    /// Source address (host-order `u128`).
    #[inline]
    pub fn src_addr(&self) -> u128 {
        be128(self.fixed(), field::SRC)
    }

    /// Destination address (host-order `u128`).
    #[inline]
    pub fn dst_addr(&self) -> u128 {
        be128(self.fixed(), field::DST)
    }

    /// The payload: bytes `40..40 + payload length` (padding after it excluded); for a
    /// [`Self::new_checked_head`] view, up to the end of the buffer (the first segment).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        b.get(IPV6_LEN..(IPV6_LEN + self.payload_len()).min(b.len())).unwrap_or(&[])
    }
}

/// The Fragment header of a packet (RFC 8200 §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Frag6 {
    /// Fragment offset in 8-octet units.
    pub offset: u16,
    /// M flag: more fragments follow.
    pub more: bool,
    /// Identification (32 bits): with source and destination, names the datagram.
    pub ident: u32,
    /// The Fragment header's Next Header: the same in every fragment of a datagram, unlike
    /// the upper-layer protocol, which only the first fragment shows when more extension
    /// headers (Destination Options, AH) follow the Fragment header (RFC 8200 §4.1, §4.5).
    pub next: u8,
}

/// What [`walk_ext`] found after the extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtWalk {
    /// The upper-layer protocol (TCP, UDP, ICMPv6, ...), or ESP / No Next Header where the
    /// walk stopped, or for a non-first fragment the Fragment header's Next Header.
    pub proto: u8,
    /// Offset of the upper-layer header from the start of the IPv6 payload.
    pub offset: usize,
    /// The Fragment header, when there is one.
    pub frag: Option<Frag6>,
    /// Extension headers walked.
    pub headers: u8,
}

/// Walks the extension headers of an IPv6 payload (module docs) from `next_header` (the
/// fixed header's). `Err(Ipv6ExtChain)` beyond [`MAX_EXT_HEADERS`] headers;
/// `Err(Ipv6RoutingType0)` for a Type 0 Routing Header with Segments Left > 0 (RFC 5095
/// §3: deprecated, must not be processed; with Segments Left 0 it is ignored as RFC 8200
/// §4.4 says for any routing type);
/// `Err(TruncatedIpv6)` when a header runs past the payload. No allocation, at most
/// `MAX_EXT_HEADERS` iterations.
#[inline]
pub fn walk_ext(next_header: u8, payload: &[u8]) -> Result<ExtWalk, DropReason> {
    let mut nh = next_header;
    let mut at = 0usize;
    let mut frag = None;
    let mut headers = 0u8;
    loop {
        let len = match nh {
            NH_HOP_BY_HOP | NH_ROUTING | NH_DEST_OPTS => {
                let h = payload.get(at..).and_then(|p| p.first_chunk::<2>()).ok_or(DropReason::TruncatedIpv6)?;
                (usize::from(h[1]) + 1) * 8
            }
            NH_AH => {
                let h = payload.get(at..).and_then(|p| p.first_chunk::<2>()).ok_or(DropReason::TruncatedIpv6)?;
                (usize::from(h[1]) + 2) * 4
            }
            NH_FRAGMENT => FRAG_HEADER_LEN,
            _ => return Ok(ExtWalk { proto: nh, offset: at, frag, headers }),
        };
        if usize::from(headers) >= MAX_EXT_HEADERS {
            return Err(DropReason::Ipv6ExtChain);
        }
        let h = payload.get(at..at + len).ok_or(DropReason::TruncatedIpv6)?;
        // Routing Type 0 with Segments Left > 0 (bytes 2, 3): RFC 5095 §3.
        if nh == NH_ROUTING && h.get(2) == Some(&0) && h.get(3).is_some_and(|&left| left > 0) {
            return Err(DropReason::Ipv6RoutingType0);
        }
        headers += 1;
        let next = h.first().copied().unwrap_or(NH_NONE);
        if nh == NH_FRAGMENT {
            let f = h.first_chunk::<FRAG_HEADER_LEN>().ok_or(DropReason::TruncatedIpv6)?;
            let off_m = u16::from_be_bytes([f[2], f[3]]);
            let fr = Frag6 { offset: off_m >> 3, more: off_m & 1 != 0, ident: u32::from_be_bytes([f[4], f[5], f[6], f[7]]), next };
            frag = Some(fr);
            // RFC 8200 §4.5: a fragment that is the whole datagram (offset 0, M clear) is an
            // "atomic fragment": its headers continue as usual. A non-first fragment: its
            // payload continues the datagram at `offset`; nothing after the header is ours
            // to parse.
            if fr.offset != 0 {
                return Ok(ExtWalk { proto: next, offset: at + len, frag, headers });
            }
        }
        at += len;
        nh = next;
    }
}

/// An IPv6 header to write: traffic class 0, the given flow label, valid lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address (host-order `u128`).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Next Header.
    pub next_header: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Flow label (low 20 bits used; RFC 6437/6438: entropy for ECMP and tunnels).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Writes the 40-byte header at the start of `buf`. `Err(TruncatedIpv6)` when `buf` is
    /// shorter than 40 bytes; `Err(MalformedIpv6)` when the payload exceeds 65,535 bytes
    /// (no jumbograms).
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), DropReason> {
        let len = u16::try_from(self.payload_len).map_err(|_| DropReason::MalformedIpv6)?;
        let h = buf.first_chunk_mut::<IPV6_LEN>().ok_or(DropReason::TruncatedIpv6)?;
        let vtf = (6u32 << 28) | (self.flow_label & 0x000f_ffff);
        h[field::VER_TC_FLOW].copy_from_slice(&vtf.to_be_bytes());
        h[field::PAYLOAD_LEN].copy_from_slice(&len.to_be_bytes());
        h[field::NEXT_HEADER] = self.next_header;
        h[field::HOP_LIMIT] = self.hop_limit;
        h[field::SRC].copy_from_slice(&self.src.to_be_bytes());
        h[field::DST].copy_from_slice(&self.dst.to_be_bytes());
        Ok(())
    }
}

/// One's complement sum (deferred carries) of the IPv6 pseudo-header of RFC 8200 §8.1:
/// source, destination, upper-layer packet length (32 bits) and Next Header (32 bits,
/// zero-padded). Add the upper-layer bytes with [`super::checksum::sum_words`] and fold.
#[inline]
pub fn pseudo_header_sum(src: u128, dst: u128, upper_len: usize, next_header: u8) -> u64 {
    let mut acc = 0u64;
    for a in [src, dst] {
        for i in 0..8 {
            acc += u64::from((a >> (112 - 16 * i)) as u16);
        }
    }
    let l = upper_len as u32;
    acc + u64::from(l >> 16) + u64::from(l & 0xffff) + u64::from(next_header)
}

/// The upper-layer checksum (TCP, UDP, ICMPv6) of `upper` (checksum field cleared, or
/// filled in to verify: then 0 means valid) over the pseudo-header (RFC 8200 §8.1).
#[inline]
pub fn upper_checksum(src: u128, dst: u128, next_header: u8, upper: &[u8]) -> u16 {
    !super::checksum::fold(super::checksum::sum_words(upper, pseudo_header_sum(src, dst, upper.len(), next_header)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    const SRC: [u8; 16] = [0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
    const DST: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0];

    /// An IPv6 packet with `exts` = (next header kind, header bytes) in front of UDP.
    fn with_exts(exts: &[(u8, Vec<u8>)], sport: u16, dport: u16) -> Vec<u8> {
        let mut udp = vec![0u8; 8];
        udp[0..2].copy_from_slice(&sport.to_be_bytes());
        udp[2..4].copy_from_slice(&dport.to_be_bytes());
        let mut payload = Vec::new();
        for (i, (_, h)) in exts.iter().enumerate() {
            let mut h = h.clone();
            h[0] = exts.get(i + 1).map_or(17, |e| e.0);
            payload.extend_from_slice(&h);
        }
        payload.extend_from_slice(&udp);
        let mut b = vec![0u8; IPV6_LEN];
        let first = exts.first().map_or(17, |e| e.0);
        Ipv6Repr { src: u128::from_be_bytes(SRC), dst: u128::from_be_bytes(DST), next_header: first, payload_len: payload.len(), hop_limit: 64, flow_label: 0 }.emit(&mut b).unwrap();
        b.extend_from_slice(&payload);
        b
    }

    fn opts(units: u8) -> Vec<u8> {
        let mut h = vec![0u8; (usize::from(units) + 1) * 8];
        h[1] = units;
        h
    }

    #[test]
    fn walks_each_kind_by_its_length_rule() {
        let mut ah = vec![0u8; 16]; // (2 + 2) * 4 = 16 octets
        ah[1] = 2;
        let mut frag0 = vec![0u8; 8];
        frag0[4..8].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        frag0[3] = 1; // offset 0, M
        for exts in [vec![], vec![(NH_HOP_BY_HOP, opts(0))], vec![(NH_DEST_OPTS, opts(2))], vec![(NH_ROUTING, opts(1)), (NH_AH, ah.clone())], vec![(NH_HOP_BY_HOP, opts(0)), (NH_FRAGMENT, frag0.clone()), (NH_DEST_OPTS, opts(0))]] {
            let b = with_exts(&exts, 4000, 53);
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            let w = walk_ext(p.next_header(), p.payload()).unwrap();
            let ext_len: usize = exts.iter().map(|e| e.1.len()).sum();
            assert_eq!((w.proto, w.offset, usize::from(w.headers)), (17, ext_len, exts.len()), "{exts:?}");
            let udp = &p.payload()[w.offset..];
            assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 53);
            // etherparse agrees on where the UDP header starts (it does not read into
            // fragments, atomic or not)
            if !exts.iter().any(|e| e.0 == NH_FRAGMENT) {
                let theirs = etherparse::SlicedPacket::from_ip(&b).unwrap();
                assert!(matches!(theirs.transport, Some(etherparse::TransportSlice::Udp(_))), "{exts:?}");
            }
        }
        let b = with_exts(&[(NH_FRAGMENT, frag0)], 1, 2);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(walk_ext(p.next_header(), p.payload()).unwrap().frag, Some(Frag6 { offset: 0, more: true, ident: 0xdead_beef, next: 17 }));
    }

    #[test]
    fn later_fragments_esp_and_no_next_header_stop_the_walk() {
        let mut frag = vec![0u8; 8];
        frag[2..4].copy_from_slice(&((185u16 << 3) | 1).to_be_bytes());
        let b = with_exts(&[(NH_FRAGMENT, frag)], 1, 2);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        let w = walk_ext(p.next_header(), p.payload()).unwrap();
        assert_eq!((w.proto, w.offset, w.frag.map(|f| f.offset)), (17, 8, Some(185)));
        for stop in [NH_ESP, NH_NONE] {
            let w = walk_ext(stop, &[0u8; 4]).unwrap();
            assert_eq!((w.proto, w.offset), (stop, 0));
        }
    }

    /// RFC 5095 §3: a Type 0 Routing Header with Segments Left > 0 is dropped with its
    /// reason wherever it is in the chain; with Segments Left 0, or another routing type
    /// (2, 4), the walk goes on (RFC 8200 §4.4).
    #[test]
    fn routing_header_type0_with_segments_left_is_dropped() {
        let rh = |ty: u8, left: u8| {
            let mut h = vec![0u8; 24]; // one address: (2 + 1) * 8 octets
            (h[1], h[2], h[3]) = (2, ty, left);
            h
        };
        for (left, at) in [(1, 0), (255, 0), (1, 1)] {
            let chain = if at == 0 { vec![(NH_ROUTING, rh(0, left))] } else { vec![(NH_HOP_BY_HOP, opts(0)), (NH_ROUTING, rh(0, left))] };
            let b = with_exts(&chain, 1, 2);
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(walk_ext(p.next_header(), p.payload()), Err(DropReason::Ipv6RoutingType0), "segments left {left}");
        }
        for (ty, left) in [(0, 0), (2, 1), (4, 3)] {
            let b = with_exts(&[(NH_ROUTING, rh(ty, left))], 1, 2);
            let p = Ipv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(walk_ext(p.next_header(), p.payload()).map(|w| (w.proto, w.offset)), Ok((17, 24)), "type {ty}, segments left {left}");
        }
    }

    #[test]
    fn chain_bound_and_truncation_have_reasons() {
        let many: Vec<(u8, Vec<u8>)> = (0..=MAX_EXT_HEADERS).map(|_| (NH_DEST_OPTS, opts(0))).collect();
        let b = with_exts(&many, 1, 2);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(walk_ext(p.next_header(), p.payload()), Err(DropReason::Ipv6ExtChain));
        let ok = with_exts(&many[..MAX_EXT_HEADERS], 1, 2);
        let p = Ipv6Packet::new_checked(&ok[..]).unwrap();
        assert_eq!(walk_ext(p.next_header(), p.payload()).map(|w| w.proto), Ok(17));
        assert_eq!(walk_ext(NH_HOP_BY_HOP, &[17, 1, 0, 0, 0, 0, 0, 0]), Err(DropReason::TruncatedIpv6));
        assert_eq!(Ipv6Packet::new_checked(&b[..39]).err(), Some(DropReason::MalformedIpv6));
        assert_eq!(Ipv6Packet::new_checked(&b[..b.len() - 1]).err(), Some(DropReason::TruncatedIpv6));
    }

    proptest! {
        /// The pseudo-header checksum matches etherparse's UDP checksum over IPv6.
        #[test]
        fn udp_checksum_matches_etherparse(payload in prop::collection::vec(any::<u8>(), 0..100), sport in any::<u16>(), src in any::<[u8; 16]>()) {
            let mut out = Vec::new();
            PacketBuilder::ipv6(src, DST, 64).udp(sport, 53).write(&mut out, &payload).unwrap();
            let p = Ipv6Packet::new_checked(&out[..]).unwrap();
            prop_assert_eq!(upper_checksum(p.src_addr(), p.dst_addr(), 17, p.payload()), 0);
            let mut cleared = p.payload().to_vec();
            let theirs = u16::from_be_bytes([cleared[6], cleared[7]]);
            cleared[6..8].copy_from_slice(&[0, 0]);
            let mine = upper_checksum(p.src_addr(), p.dst_addr(), 17, &cleared);
            prop_assert_eq!(if mine == 0 { 0xffff } else { mine }, theirs);
        }

        /// Random and mutated packets never panic; the walk stays inside the payload.
        #[test]
        fn mutated_never_panic(idx in 0usize..80, val in any::<u8>(), cut in 0usize..80, rnd in prop::collection::vec(any::<u8>(), 0..120)) {
            let mut m = with_exts(&[(NH_HOP_BY_HOP, opts(0)), (NH_DEST_OPTS, opts(1))], 1, 2);
            if idx < m.len() { m[idx] = val; }
            let n = m.len().saturating_sub(cut);
            m.truncate(n);
            for buf in [rnd.clone(), m] {
                if let Ok(p) = Ipv6Packet::new_checked(&buf[..]) {
                    prop_assert!(IPV6_LEN + p.payload_len() <= buf.len());
                    if let Ok(w) = walk_ext(p.next_header(), p.payload()) {
                        prop_assert!(w.offset <= p.payload().len());
                        prop_assert!(usize::from(w.headers) <= MAX_EXT_HEADERS);
                    }
                    let _ = (p.hop_limit(), p.flow_label(), p.src_addr(), p.dst_addr());
                }
            }
        }
    }
}
