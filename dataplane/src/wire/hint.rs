//! The prefetch pass's hints: a frame's 5-tuple and SYN flag read at fixed offsets with
//! minimal checks (untagged or one tag, no IPv4 options, no IPv6 extension headers), for
//! `Worker::prefetch_target`; [`super::parse`] still decides every packet. A child of
//! [`super`].

use super::{be16, be32, ethernet, ipv4, ipv6, l4, tcp_flags, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, PROTO_TCP, PROTO_UDP};

/// The 5-tuple `(src, dst, sport, dport, proto)` of an unfragmented IPv4 TCP/UDP frame
/// (untagged or one 802.1Q/802.1ad tag), read at fixed offsets with minimal checks; `None`
/// for anything else. Only a hint (the worker's burst prefetch): [`super::parse`] still decides.
#[inline]
pub fn flow_tuple_hint(frame: &[u8]) -> Option<(u32, u32, u16, u16, u8)> {
    let (l3, et) = hint_l3(frame)?;
    if et != ETHERTYPE_IPV4 {
        return None;
    }
    // IPv4 header without options + the 4 port bytes.
    let h = frame.get(l3..)?.first_chunk::<{ ipv4::IPV4_MIN_LEN + 4 }>()?;
    let (ip, ports) = h.split_at(ipv4::IPV4_MIN_LEN);
    let proto = ip[ipv4::field::PROTOCOL];
    // version 4, IHL 5, no MF, offset 0
    if ip[ipv4::field::VER_IHL] != 0x45 || (proto != PROTO_TCP && proto != PROTO_UDP) || be16(ip, ipv4::field::FLAGS_FRAG) & 0x3fff != 0 {
        return None;
    }
    Some((be32(ip, ipv4::field::SRC), be32(ip, ipv4::field::DST), be16(ports, l4::tcp_field::SRC_PORT), be16(ports, l4::tcp_field::DST_PORT), proto))
}

/// The 5-tuple `(src, dst, sport, dport, next header)` of an IPv6 TCP/UDP frame without
/// extension headers (untagged or one tag: the upper header right after the fixed 40
/// octets, RFC 8200 §3), read at fixed offsets like [`flow_tuple_hint`]; `None` for
/// anything else. Only a hint (the worker's burst prefetch): [`super::parse`] still decides.
#[inline]
pub fn flow_tuple_hint6(frame: &[u8]) -> Option<(u128, u128, u16, u16, u8)> {
    let (l3, et) = hint_l3(frame)?;
    if et != ETHERTYPE_IPV6 {
        return None;
    }
    let h = frame.get(l3..)?.first_chunk::<{ ipv6::IPV6_LEN + 4 }>()?;
    let (ip, ports) = h.split_at(ipv6::IPV6_LEN);
    let proto = ip[ipv6::field::NEXT_HEADER];
    if ip[0] >> 4 != 6 || (proto != PROTO_TCP && proto != PROTO_UDP) {
        return None;
    }
    let addr = |r: std::ops::Range<usize>| ip.get(r).and_then(|b| b.first_chunk::<16>()).map_or(0, |b| u128::from_be_bytes(*b));
    Some((addr(ipv6::field::SRC), addr(ipv6::field::DST), be16(ports, l4::tcp_field::SRC_PORT), be16(ports, l4::tcp_field::DST_PORT), proto))
}

/// Whether `frame` looks like a TCP SYN without ACK, FIN or RST (a new connection, as the
/// worker's `select` reads one) — a hint for the
/// prefetch pass, read at fixed offsets like [`flow_tuple_hint`]; never an error.
#[inline]
pub fn syn_hint(frame: &[u8]) -> bool {
    let Some((l3, _)) = hint_l3(frame) else { return false };
    // IPv4 header without options + TCP up to the flags byte.
    const FLAGS: usize = ipv4::IPV4_MIN_LEN + l4::tcp_field::FLAGS;
    match frame.get(l3..).and_then(|h| h.first_chunk::<{ FLAGS + 1 }>()) {
        Some(h) if h[ipv4::field::VER_IHL] == 0x45 && h[ipv4::field::PROTOCOL] == PROTO_TCP => h[FLAGS] & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN | tcp_flags::RST) == tcp_flags::SYN,
        _ => false,
    }
}

/// Whether `frame` looks like an IPv6 TCP SYN without ACK, FIN or RST (no extension headers), as
/// [`syn_hint`] for IPv4; never an error.
#[inline]
pub fn syn_hint6(frame: &[u8]) -> bool {
    let Some((l3, ETHERTYPE_IPV6)) = hint_l3(frame) else { return false };
    const FLAGS: usize = ipv6::IPV6_LEN + l4::tcp_field::FLAGS;
    match frame.get(l3..).and_then(|h| h.first_chunk::<{ FLAGS + 1 }>()) {
        Some(h) if h[ipv6::field::NEXT_HEADER] == PROTO_TCP => h[FLAGS] & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN | tcp_flags::RST) == tcp_flags::SYN,
        _ => false,
    }
}

/// Offset of the L3 header and the EtherType for the hints: untagged or one tag.
#[inline]
fn hint_l3(frame: &[u8]) -> Option<(usize, u16)> {
    const TAGGED: usize = ETH_LEN + ethernet::VLAN_TAG_LEN;
    let h = frame.first_chunk::<TAGGED>()?;
    let et = be16(h, ethernet::field::ETHERTYPE);
    if ethernet::is_vlan_tpid(et) {
        Some((TAGGED, be16(h, TAGGED - 2..TAGGED)))
    } else {
        Some((ETH_LEN, et))
    }
}
