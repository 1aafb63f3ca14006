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

use super::{ethernet, ipv4, ipv6, l4, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, PROTO_TCP, PROTO_UDP};

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

/// Big-endian u16 at the constant range `r` of the fixed-size header `h` (folded to one
/// load after inlining: no bounds check, no panic path).
#[inline(always)]
fn at16<const N: usize>(h: &[u8; N], r: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([h[r.start], h[r.start + 1]])
}

/// Big-endian u32 at the constant range `r` of `h`, as [`at16`].
#[inline(always)]
fn at32<const N: usize>(h: &[u8; N], r: std::ops::Range<usize>) -> u32 {
    u32::from_be_bytes([h[r.start], h[r.start + 1], h[r.start + 2], h[r.start + 3]])
}

/// Big-endian u128 at the constant range `r` of `h`, as [`at16`].
#[inline(always)]
fn at128<const N: usize>(h: &[u8; N], r: std::ops::Range<usize>) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[r]);
    u128::from_be_bytes(b)
}

/// IPv4 header and a UDP header (the ports of TCP too).
const V4_HEAD: usize = ipv4::IPV4_MIN_LEN + l4::UDP_LEN;
/// IPv6 fixed header and a UDP header.
const V6_HEAD: usize = ipv6::IPV6_LEN + l4::UDP_LEN;

/// The TCP flags of the L4 header at `off` of `l3` (the frame from its L3 header on),
/// inside an IP payload of `payload_len` bytes (0 for UDP), when the header fits as
/// [`super::parse`] requires; `None` else. A UDP datagram needs only its 8 octets in the
/// frame, a TCP segment its 20.
#[inline(always)]
fn l4_flags(l3: &[u8], off: usize, proto: u8, payload_len: usize) -> Option<u8> {
    if proto == PROTO_TCP {
        let tcp = l3.get(off..)?.first_chunk::<{ l4::TCP_MIN_LEN }>()?;
        let doff = usize::from(tcp[l4::tcp_field::DATA_OFF] >> 4) * 4;
        (doff >= l4::TCP_MIN_LEN && doff <= payload_len).then_some(tcp[l4::tcp_field::FLAGS])
    } else if proto == PROTO_UDP && payload_len >= l4::UDP_LEN {
        Some(0)
    } else {
        None
    }
}

/// The fast path's IPv4 packet in `l3` (the frame from its L3 header on).
#[inline(always)]
fn v4(l3: &[u8]) -> Fast {
    let Some(h) = l3.first_chunk::<V4_HEAD>() else { return Fast::General };
    let total = usize::from(at16(h, ipv4::field::TOTAL_LEN));
    let proto = h[ipv4::field::PROTOCOL];
    let ok = h[ipv4::field::VER_IHL] == 0x45 && at16(h, ipv4::field::FLAGS_FRAG) & 0x3fff == 0 && h[ipv4::field::TTL] != 0 && total >= ipv4::IPV4_MIN_LEN && total <= l3.len();
    const L4: usize = ipv4::IPV4_MIN_LEN;
    match l4_flags(l3, L4, proto, total.wrapping_sub(L4)) {
        Some(flags) if ok => Fast::V4(FastTuple {
            src: at32(h, ipv4::field::SRC),
            dst: at32(h, ipv4::field::DST),
            sport: at16(h, L4..L4 + 2),
            dport: at16(h, L4 + 2..L4 + 4),
            proto,
            flags,
        }),
        _ => Fast::General,
    }
}

/// The fast path's IPv6 packet in `l3` (the frame from its L3 header on). Its tail repeats
/// [`v4`]'s on purpose: one generic helper for both (tried 2026-12-07) cost 20 instructions
/// per established packet and per SYN (`packet_ir`), by the code layout it gave.
#[inline(always)]
fn v6(l3: &[u8]) -> Fast {
    let Some(h) = l3.first_chunk::<V6_HEAD>() else { return Fast::General };
    let payload = usize::from(at16(h, ipv6::field::PAYLOAD_LEN));
    let proto = h[ipv6::field::NEXT_HEADER];
    let ok = h[0] >> 4 == 6 && h[ipv6::field::HOP_LIMIT] != 0 && ipv6::IPV6_LEN + payload <= l3.len();
    const L4: usize = ipv6::IPV6_LEN;
    match l4_flags(l3, L4, proto, payload) {
        Some(flags) if ok => Fast::V6(FastTuple {
            src: at128(h, ipv6::field::SRC),
            dst: at128(h, ipv6::field::DST),
            sport: at16(h, L4..L4 + 2),
            dport: at16(h, L4 + 2..L4 + 4),
            proto,
            flags,
        }),
        _ => Fast::General,
    }
}

/// Classifies `frame` (one segment holding the whole frame) for the fast path, reading
/// only its first 58 (IPv4) or 78 (IPv6) octets at fixed offsets (module docs): with one
/// tag, the IP header and 20 octets of TCP or 8 of UDP.
#[inline(always)]
pub fn classify(frame: &[u8]) -> Fast {
    let Some(eth) = frame.first_chunk::<TAGGED>() else { return Fast::General };
    if eth[SRC_MAC_FIRST] & 1 != 0 {
        return Fast::General;
    }
    let et = at16(eth, ethernet::field::ETHERTYPE);
    let (l3, et) = if et == ETHERTYPE_IPV4 || et == ETHERTYPE_IPV6 {
        (ETH_LEN, et)
    } else if ethernet::is_vlan_tpid(et) {
        (TAGGED, at16(eth, TAGGED - 2..TAGGED))
    } else {
        return Fast::General;
    };
    let rest = frame.get(l3..).unwrap_or(&[]);
    match et {
        ETHERTYPE_IPV4 => v4(rest),
        ETHERTYPE_IPV6 => v6(rest),
        _ => Fast::General,
    }
}
