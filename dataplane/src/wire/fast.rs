//! The vector fast path's classifier (`fastpath/worker/vector.rs`): the common frame read
//! at fixed offsets of its first cache line, with exactly the checks [`super::parse`] makes
//! for it, so a frame it accepts is one `parse` accepts with the same fields. Anything else
//! (a second VLAN tag, IPv4 options or fragments, IPv6 extension headers, ICMP, ARP, a
//! multicast source MAC, TTL or hop limit 0, a truncated header) is `None` and takes the
//! general path, which parses it in full and names its drop reason. A child of [`super`].
//!
//! The frames it takes:
//! - Ethernet, untagged or one 802.1Q/802.1ad tag, from an individual source MAC;
//! - IPv4 with IHL 5 (no options), neither MF nor a fragment offset (DF allowed), TTL ≥ 1,
//!   `20 ≤ total length ≤ frame − L3 offset` (RFC 791); or IPv6 with TCP or UDP right
//!   after the fixed header, hop limit ≥ 1, `40 + payload length ≤ frame − L3 offset`
//!   (RFC 8200 §3);
//! - TCP with a data offset of 5 to 15 words inside the IP payload (RFC 9293 §3.1), or UDP
//!   with its 8-byte header inside it (RFC 768).

use super::{be16, be32, ethernet, ipv4, ipv6, l4, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, PROTO_TCP, PROTO_UDP};

/// Offset of the source MAC's first octet, whose low bit marks a group address.
const SRC_MAC_FIRST: usize = 6;
/// An untagged frame's L3 offset, and a frame with one tag's.
const TAGGED: usize = ETH_LEN + ethernet::VLAN_TAG_LEN;

/// The L4 fields the fast path needs, with the addresses of either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastTuple<A> {
    /// Source address (host order).
    pub src: A,
    /// Destination address: the VIP (host order).
    pub dst: A,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol: [`PROTO_TCP`] or [`PROTO_UDP`].
    pub proto: u8,
    /// TCP flags; 0 for UDP (as [`super::Ipv4Info::tcp_flags`]).
    pub flags: u8,
}

/// What [`classify`] found: a fast-path IPv4 or IPv6 frame, or `General` for any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fast {
    /// An IPv4 TCP/UDP frame the fast path may take.
    V4(FastTuple<u32>),
    /// An IPv6 TCP/UDP frame the fast path may take.
    V6(FastTuple<u128>),
    /// Anything else: the general path parses it.
    General,
}

/// The L3 offset (14 or 18) and ethertype of `frame`, and whether its source MAC is an
/// individual address; `None` for a frame shorter than a tagged header or with two tags.
#[inline(always)]
fn link(frame: &[u8]) -> Option<(usize, u16)> {
    let h = frame.first_chunk::<TAGGED>()?;
    if h[SRC_MAC_FIRST] & 1 != 0 {
        return None;
    }
    let et = be16(h, ethernet::field::ETHERTYPE);
    if !ethernet::is_vlan_tpid(et) {
        return Some((ETH_LEN, et));
    }
    let inner = be16(h, TAGGED - 2..TAGGED);
    (!ethernet::is_vlan_tpid(inner)).then_some((TAGGED, inner))
}

/// The TCP flags of the L4 header `l4` inside an IP payload of `payload_len` bytes
/// (`Some(0)` for UDP), when the header fits as [`super::parse`] requires; `None` else.
#[inline(always)]
fn l4_flags(l4: &[u8; l4::TCP_MIN_LEN], proto: u8, payload_len: usize) -> Option<u8> {
    if proto == PROTO_TCP {
        let doff = usize::from(l4[l4::tcp_field::DATA_OFF] >> 4) * 4;
        (doff >= l4::TCP_MIN_LEN && doff <= payload_len).then_some(l4[l4::tcp_field::FLAGS])
    } else if proto == PROTO_UDP && payload_len >= l4::UDP_LEN {
        Some(0)
    } else {
        None
    }
}

/// Classifies `frame` (one segment holding the whole frame) for the fast path, reading
/// only its first 58 (IPv4) or 78 (IPv6) octets at fixed offsets (module docs).
#[inline(always)]
pub fn classify(frame: &[u8]) -> Fast {
    let Some((l3, et)) = link(frame) else { return Fast::General };
    let room = frame.len().saturating_sub(l3);
    let Some(ip) = frame.get(l3..) else { return Fast::General };
    if et == ETHERTYPE_IPV4 {
        // the fixed header and the first 20 octets after it (a UDP datagram with less
        // payload is a short frame that only Ethernet padding can make this long)
        let Some(h) = ip.first_chunk::<{ ipv4::IPV4_MIN_LEN + l4::TCP_MIN_LEN }>() else { return Fast::General };
        let (iph, l4h) = h.split_at(ipv4::IPV4_MIN_LEN);
        let total = usize::from(be16(iph, ipv4::field::TOTAL_LEN));
        let ok = iph[ipv4::field::VER_IHL] == 0x45 && be16(iph, ipv4::field::FLAGS_FRAG) & 0x3fff == 0 && iph[ipv4::field::TTL] != 0 && total >= ipv4::IPV4_MIN_LEN && total <= room;
        let Some(l4h) = l4h.first_chunk::<{ l4::TCP_MIN_LEN }>() else { return Fast::General };
        let proto = iph[ipv4::field::PROTOCOL];
        return match l4_flags(l4h, proto, total.wrapping_sub(ipv4::IPV4_MIN_LEN)) {
            Some(flags) if ok => Fast::V4(FastTuple {
                src: be32(iph, ipv4::field::SRC),
                dst: be32(iph, ipv4::field::DST),
                sport: be16(l4h, l4::tcp_field::SRC_PORT),
                dport: be16(l4h, l4::tcp_field::DST_PORT),
                proto,
                flags,
            }),
            _ => Fast::General,
        };
    }
    if et != ETHERTYPE_IPV6 {
        return Fast::General;
    }
    let Some(h) = ip.first_chunk::<{ ipv6::IPV6_LEN + l4::TCP_MIN_LEN }>() else { return Fast::General };
    let (iph, l4h) = h.split_at(ipv6::IPV6_LEN);
    let payload = usize::from(be16(iph, ipv6::field::PAYLOAD_LEN));
    let ok = iph[0] >> 4 == 6 && iph[ipv6::field::HOP_LIMIT] != 0 && ipv6::IPV6_LEN + payload <= room;
    let Some(l4h) = l4h.first_chunk::<{ l4::TCP_MIN_LEN }>() else { return Fast::General };
    let proto = iph[ipv6::field::NEXT_HEADER];
    let addr = |r: std::ops::Range<usize>| iph.get(r).and_then(|b| b.first_chunk::<16>()).map_or(0, |b| u128::from_be_bytes(*b));
    match l4_flags(l4h, proto, payload) {
        Some(flags) if ok => Fast::V6(FastTuple {
            src: addr(ipv6::field::SRC),
            dst: addr(ipv6::field::DST),
            sport: be16(l4h, l4::tcp_field::SRC_PORT),
            dport: be16(l4h, l4::tcp_field::DST_PORT),
            proto,
            flags,
        }),
        _ => Fast::General,
    }
}
