//! Encapsulation towards backends: IPv4-in-IPv4 (RFC 2003) and GUE variant 1, i.e. IPv4
//! directly in UDP to port 6080 (draft-ietf-intarea-gue §4, RFC 8086 style UDP tunnels).
//! Either family inside either family: [`Tunnel`] writes an IPv4 outer header (protocol 4
//! for an IPv4 inner packet, 41 for IPv6, RFC 4213 §3.5), [`Tunnel6`] an IPv6 outer header
//! (Next Header 4 or 41, RFC 2473); GUE variant 1 tells the inner family by its version
//! nibble. The inner family is read from the inner packet's first byte.
//!
//! Outer header choices (docs/semantics.md, "TTL" and "Encapsulation headers"):
//! - outer TTL is set to [`OUTER_TTL`], not copied from the inner header (RFC 2003 §3.1: "a
//!   value appropriate for delivery of the encapsulated datagram to the tunnel exit
//!   point"); the inner header is left as it came.
//! - outer DF is always set and the ID is 0: we never fragment (oversize packets get an
//!   ICMP "fragmentation needed" or are dropped), so the outer datagram is atomic and
//!   RFC 6864 §4.1 lets its ID be any value, 0 included.
//! - the GUE source port comes from the flow hash ([`Encap::gue`]), so the backend's RSS
//!   spreads one client's flows.

use super::ethernet::{emit_header, MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN};
use super::checksum::{fold, sum_words};
use super::ipv6::{pseudo_header_sum, upper_checksum, Ipv6Repr, IPV6_LEN, NH_IPV6};
use super::ipv4::{Ipv4Repr, IPV4_MIN_LEN, PROTO_IPIP, PROTO_UDP};
use super::l4::{UdpRepr, UDP_LEN};
use super::DropReason;

/// UDP destination port of GUE (draft-ietf-intarea-gue: 6080).
pub const GUE_PORT: u16 = 6080;
/// TTL of the outer header: a fresh hop budget for the path to the backend.
pub const OUTER_TTL: u8 = 64;
/// First port of the dynamic range the GUE source port is taken from (RFC 6335 §6:
/// 49152–65535).
pub const GUE_SRC_PORT_MIN: u16 = 0xC000;

/// Which encapsulation, with its per-packet parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encap {
    /// IPv4-in-IPv4 (RFC 2003): outer IPv4 header, protocol 4.
    Ipip,
    /// GUE variant 1: outer IPv4 + UDP (checksum 0) to [`GUE_PORT`] from `src_port`.
    Gue {
        /// Outer UDP source port (entropy for the backend's RSS).
        src_port: u16,
    },
}

impl Encap {
    /// GUE with the source port derived from `flow_hash` (the 5-tuple hash of the flow; the
    /// 3-tuple hash for fragments, so all fragments of a datagram share it): bits 48..62
    /// of the hash over [`GUE_SRC_PORT_MIN`], i.e. 49152–65535. High bits, because the
    /// Maglev pick reduces the same hash modulo the table size.
    #[inline]
    pub fn gue(flow_hash: u64) -> Encap {
        Encap::Gue { src_port: GUE_SRC_PORT_MIN | ((flow_hash >> 48) as u16 & 0x3fff) }
    }

    /// Bytes added in front of the inner packet with an IPv4 outer header: 20 (IPIP) or 28
    /// (GUE).
    #[inline]
    pub fn overhead(self) -> usize {
        match self {
            Encap::Ipip => IPV4_MIN_LEN,
            Encap::Gue { .. } => IPV4_MIN_LEN + UDP_LEN,
        }
    }

    /// Bytes added with an IPv6 outer header: 40 (IP-in-IPv6) or 48 (GUE over IPv6).
    #[inline]
    pub fn overhead6(self) -> usize {
        match self {
            Encap::Ipip => IPV6_LEN,
            Encap::Gue { .. } => IPV6_LEN + UDP_LEN,
        }
    }
}

/// IP protocol / Next Header of an inner packet starting with `first_byte`: 41 (IPv6) when
/// its version nibble is 6, else 4 (IPv4).
#[inline]
fn inner_protocol(first_byte: u8) -> u8 {
    if first_byte >> 4 == 6 {
        NH_IPV6
    } else {
        PROTO_IPIP
    }
}

/// The DS field (DSCP and ECN: RFC 2474 §3, RFC 3168 §5) of an inner packet whose first
/// two octets are `b0`, `b1`: the IPv4 TOS octet, or the IPv6 Traffic Class (split over
/// both octets); 0 for a packet too short to hold them. The outer header carries it as it
/// is: DSCP as in the uniform model (RFC 2983 §3.1), ECN as RFC 6040 §4.1's normal mode
/// asks ("copies the ECN field from the incoming header to the outgoing header"), so
/// congestion marks made in the underlay reach the backend's decapsulator.
#[inline(always)]
fn inner_ds(inner: Option<&[u8]>) -> u8 {
    match inner {
        Some(&[b0, b1, ..]) if b0 >> 4 == 6 => b0 << 4 | b1 >> 4,
        Some(&[_, b1, ..]) => b1,
        _ => 0,
    }
}

/// Writes the DS field `ds` into the outer IPv4 header at the start of `outer` (its TOS
/// octet) and recomputes the header checksum. `Err(NoHeadroom)` when `outer` is shorter
/// than 20 bytes.
#[inline(always)]
fn set_ds4(outer: &mut [u8], ds: u8) -> Result<(), DropReason> {
    let h = outer.get_mut(..IPV4_MIN_LEN).ok_or(DropReason::NoHeadroom)?;
    h[1] = ds;
    h[10..12].copy_from_slice(&[0, 0]);
    let c = super::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Writes the DS field `ds` into the Traffic Class of the outer IPv6 header at the start
/// of `outer` (bits 4..12; version and flow label kept). `Err(NoHeadroom)` when `outer` is
/// shorter than 2 bytes.
#[inline(always)]
fn set_ds6(outer: &mut [u8], ds: u8) -> Result<(), DropReason> {
    let h = outer.get_mut(..2).ok_or(DropReason::NoHeadroom)?;
    h[0] = (h[0] & 0xf0) | ds >> 4;
    h[1] = (h[1] & 0x0f) | ds << 4;
    Ok(())
}

/// The tunnel one packet is sent into: encapsulation, outer addresses, next-hop MACs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunnel {
    /// Encapsulation.
    pub encap: Encap,
    /// Outer source address (our port address, host order).
    pub src: u32,
    /// Outer destination address (the backend, host order).
    pub dst: u32,
    /// Ethernet destination (the backend or next hop).
    pub dst_mac: MacAddr,
    /// Ethernet source (our forwarding port).
    pub src_mac: MacAddr,
}

impl Tunnel {
    /// Encapsulates the IPv4 packet of `frame` in place. `frame` must already have
    /// `self.encap.overhead()` bytes of new room at the front (the caller prepended them),
    /// so the old Ethernet header (+ tags) starts at `overhead` and the inner packet at
    /// `overhead + inner_l3`; `inner_len` is its total length.
    ///
    /// Frame layout after: Ethernet (14 bytes, tags dropped) | outer IPv4 | [UDP] | inner
    /// IPv4. Returns the new frame length (the caller truncates). `Err(NoHeadroom)` when
    /// `frame` does not hold the prepended room plus the inner packet; `Err(MalformedIpv4)`
    /// when the outer length would exceed 65,535.
    #[inline]
    pub fn encapsulate(&self, frame: &mut [u8], inner_l3: usize, inner_len: usize) -> Result<usize, DropReason> {
        let overhead = self.encap.overhead();
        let inner_at = overhead + inner_l3;
        let new_inner_at = ETH_LEN + overhead;
        let total = new_inner_at + inner_len;
        if frame.len() < inner_at + inner_len || frame.len() < total {
            return Err(DropReason::NoHeadroom);
        }
        // Move the inner packet next to the new headers (over the old Ethernet header and
        // tags); in range by the check above.
        frame.copy_within(inner_at..inner_at + inner_len, new_inner_at);
        emit_header(frame, self.dst_mac, self.src_mac, ETHERTYPE_IPV4)?;
        let protocol = match self.encap {
            Encap::Ipip => inner_protocol(frame.get(new_inner_at).copied().filter(|_| inner_len > 0).unwrap_or(0x45)),
            Encap::Gue { .. } => PROTO_UDP,
        };
        let ds = inner_ds(frame.get(new_inner_at..total));
        let outer = frame.get_mut(ETH_LEN..total).ok_or(DropReason::NoHeadroom)?;
        Ipv4Repr { src: self.src, dst: self.dst, protocol, payload_len: overhead - IPV4_MIN_LEN + inner_len, ident: 0, dont_fragment: true, ttl: OUTER_TTL }.emit(outer)?;
        set_ds4(outer, ds)?;
        if let Encap::Gue { src_port } = self.encap {
            let udp = outer.get_mut(IPV4_MIN_LEN..).ok_or(DropReason::NoHeadroom)?;
            UdpRepr { src_port, dst_port: GUE_PORT, payload_len: inner_len }.emit(udp)?;
        }
        Ok(total)
    }
}

/// A tunnel with an IPv6 outer header (an IPv6 underlay): IP-in-IPv6 (RFC 2473) or GUE
/// over UDP/IPv6 with a full UDP checksum (RFC 8200 §8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunnel6 {
    /// Encapsulation.
    pub encap: Encap,
    /// Outer source address (our port's IPv6 address, host-order `u128`).
    pub src: u128,
    /// Outer destination address (the backend).
    pub dst: u128,
    /// Ethernet destination (the backend or next hop).
    pub dst_mac: MacAddr,
    /// Ethernet source (our forwarding port).
    pub src_mac: MacAddr,
    /// Outer flow label (RFC 6438: from the flow hash, so ECMP and RSS spread flows).
    pub flow_label: u32,
}

impl Tunnel6 {
    /// As [`Tunnel::encapsulate`] with an IPv6 outer header: `frame` has
    /// `self.encap.overhead6()` new bytes at the front. Layout after: Ethernet | IPv6 (hop
    /// limit [`OUTER_TTL`]) | [UDP] | inner packet. `Err(NoHeadroom)` when `frame` is too
    /// short, `Err(MalformedIpv6)` when the outer payload would exceed 65,535 bytes.
    #[inline]
    pub fn encapsulate(&self, frame: &mut [u8], inner_l3: usize, inner_len: usize) -> Result<usize, DropReason> {
        let overhead = self.encap.overhead6();
        let inner_at = overhead + inner_l3;
        let new_inner_at = ETH_LEN + overhead;
        let total = new_inner_at + inner_len;
        if frame.len() < inner_at + inner_len || frame.len() < total {
            return Err(DropReason::NoHeadroom);
        }
        frame.copy_within(inner_at..inner_at + inner_len, new_inner_at);
        emit_header(frame, self.dst_mac, self.src_mac, ETHERTYPE_IPV6)?;
        let next_header = match self.encap {
            Encap::Ipip => inner_protocol(frame.get(new_inner_at).copied().filter(|_| inner_len > 0).unwrap_or(0x45)),
            Encap::Gue { .. } => PROTO_UDP,
        };
        let ds = inner_ds(frame.get(new_inner_at..total));
        let outer = frame.get_mut(ETH_LEN..total).ok_or(DropReason::NoHeadroom)?;
        let payload_len = overhead - IPV6_LEN + inner_len;
        Ipv6Repr { src: self.src, dst: self.dst, next_header, payload_len, hop_limit: OUTER_TTL, flow_label: self.flow_label }.emit(outer)?;
        set_ds6(outer, ds)?;
        if let Encap::Gue { src_port } = self.encap {
            let udp = outer.get_mut(IPV6_LEN..).ok_or(DropReason::NoHeadroom)?;
            UdpRepr { src_port, dst_port: GUE_PORT, payload_len: inner_len }.emit(udp)?;
            // RFC 8200 §8.1: a UDP checksum over IPv6 is not optional; 0 is sent as 0xffff.
            let c = match upper_checksum(self.src, self.dst, PROTO_UDP, udp) {
                0 => 0xffff,
                c => c,
            };
            udp.get_mut(6..8).ok_or(DropReason::NoHeadroom)?.copy_from_slice(&c.to_be_bytes());
        }
        Ok(total)
    }
}

impl Tunnel {
    /// Bytes to prepend in front of a frame whose inner IPv4 packet starts at `inner_l3`
    /// (14 + 4 per VLAN tag) for [`Tunnel::encapsulate_in_front`]: the overhead minus the
    /// old Ethernet header and tags, which the new headers overwrite. 0 when the tags are
    /// longer than the overhead (never: tags ≤ 8 bytes < 20).
    #[inline]
    pub fn front_room(&self, inner_l3: usize) -> usize {
        (ETH_LEN + self.encap.overhead()).saturating_sub(inner_l3)
    }

    /// Encapsulates without moving the inner packet, for packets whose bytes cannot be
    /// moved cheaply (a multi-segment jumbo frame): the caller prepended
    /// [`Tunnel::front_room`]`(inner_l3)` bytes, so the inner IPv4 packet (of `inner_len`
    /// bytes, possibly continuing in later segments) starts at `ETH_LEN + overhead` of
    /// `head`, and this writes Ethernet | outer IPv4 | [UDP] in front of it, over the new
    /// room and the old Ethernet header and tags. The outer lengths cover the whole inner
    /// packet, not `head`. Same bytes as [`Tunnel::encapsulate`]; returns the frame length
    /// (`ETH_LEN + overhead + inner_len`). `Err(NoHeadroom)` when `head` is shorter than
    /// the new headers; `Err(MalformedIpv4)` when the outer length would exceed 65,535.
    #[inline]
    pub fn encapsulate_in_front(&self, head: &mut [u8], inner_len: usize) -> Result<usize, DropReason> {
        let overhead = self.encap.overhead();
        let inner_first = head.get(ETH_LEN + overhead).copied().filter(|_| inner_len > 0).unwrap_or(0x45);
        let ds = inner_ds(head.get(ETH_LEN + overhead..).filter(|_| inner_len >= 2));
        let hdrs = head.get_mut(..ETH_LEN + overhead).ok_or(DropReason::NoHeadroom)?;
        emit_header(hdrs, self.dst_mac, self.src_mac, ETHERTYPE_IPV4)?;
        let outer = hdrs.get_mut(ETH_LEN..).ok_or(DropReason::NoHeadroom)?;
        let protocol = match self.encap {
            Encap::Ipip => inner_protocol(inner_first),
            Encap::Gue { .. } => PROTO_UDP,
        };
        Ipv4Repr { src: self.src, dst: self.dst, protocol, payload_len: overhead - IPV4_MIN_LEN + inner_len, ident: 0, dont_fragment: true, ttl: OUTER_TTL }.emit(outer)?;
        set_ds4(outer, ds)?;
        if let Encap::Gue { src_port } = self.encap {
            let udp = outer.get_mut(IPV4_MIN_LEN..).ok_or(DropReason::NoHeadroom)?;
            UdpRepr { src_port, dst_port: GUE_PORT, payload_len: inner_len }.emit(udp)?;
        }
        Ok(ETH_LEN + overhead + inner_len)
    }
}

impl Tunnel6 {
    /// Bytes to prepend in front of a frame whose inner packet starts at `inner_l3` (14 + 4
    /// per VLAN tag) for [`Tunnel6::encapsulate_in_front`], as [`Tunnel::front_room`]: the
    /// IPv6 overhead (40 or 48) minus the old tags, which the new headers overwrite.
    #[inline]
    pub fn front_room(&self, inner_l3: usize) -> usize {
        (ETH_LEN + self.encap.overhead6()).saturating_sub(inner_l3)
    }

    /// As [`Tunnel::encapsulate_in_front`] with an IPv6 outer header, for a multi-segment
    /// jumbo frame: the caller prepended [`Tunnel6::front_room`] bytes,
    /// so the inner packet (`inner_len` bytes, continuing in later segments) starts at
    /// `ETH_LEN + overhead6` of `head`; this writes Ethernet | IPv6 | \[UDP\] in front of
    /// it. Same bytes as [`Tunnel6::encapsulate`], lengths covering the whole inner packet.
    ///
    /// `inner_sum` is the one's complement sum ([`super::checksum::sum_words`], carries
    /// deferred) of all `inner_len` inner bytes, over every segment: GUE's UDP checksum over
    /// IPv6 covers them (RFC 8200 §8.1) and they are not all in `head`. Unused for IP-in-IPv6.
    /// Returns the frame length; `Err(NoHeadroom)` when `head` is shorter than the new
    /// headers, `Err(MalformedIpv6)` when the outer payload would exceed 65,535 bytes.
    #[inline]
    pub fn encapsulate_in_front(&self, head: &mut [u8], inner_len: usize, inner_sum: u64) -> Result<usize, DropReason> {
        let overhead = self.encap.overhead6();
        let inner_first = head.get(ETH_LEN + overhead).copied().filter(|_| inner_len > 0).unwrap_or(0x45);
        let ds = inner_ds(head.get(ETH_LEN + overhead..).filter(|_| inner_len >= 2));
        let hdrs = head.get_mut(..ETH_LEN + overhead).ok_or(DropReason::NoHeadroom)?;
        emit_header(hdrs, self.dst_mac, self.src_mac, ETHERTYPE_IPV6)?;
        let outer = hdrs.get_mut(ETH_LEN..).ok_or(DropReason::NoHeadroom)?;
        let next_header = match self.encap {
            Encap::Ipip => inner_protocol(inner_first),
            Encap::Gue { .. } => PROTO_UDP,
        };
        let payload_len = overhead - IPV6_LEN + inner_len;
        Ipv6Repr { src: self.src, dst: self.dst, next_header, payload_len, hop_limit: OUTER_TTL, flow_label: self.flow_label }.emit(outer)?;
        set_ds6(outer, ds)?;
        if let Encap::Gue { src_port } = self.encap {
            let udp = outer.get_mut(IPV6_LEN..).ok_or(DropReason::NoHeadroom)?;
            UdpRepr { src_port, dst_port: GUE_PORT, payload_len: inner_len }.emit(udp)?;
            // The UDP header (checksum field 0 from emit) is in `head`; the inner bytes are
            // `inner_sum`. 0 is sent as 0xffff (RFC 8200 §8.1).
            let acc = sum_words(udp, pseudo_header_sum(self.src, self.dst, payload_len, PROTO_UDP));
            let c = match !fold(acc + inner_sum) {
                0 => 0xffff,
                c => c,
            };
            udp.get_mut(6..8).ok_or(DropReason::NoHeadroom)?.copy_from_slice(&c.to_be_bytes());
        }
        Ok(ETH_LEN + overhead + inner_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::Ipv4Packet;
    use crate::wire::l4::UdpPacket;
    use proptest::prelude::*;

    proptest! {
        /// Any inner packet at any tag depth: the result is Ethernet | outer IPv4 (DF, ID 0,
        /// TTL 64, valid checksum, length = overhead + inner) | [UDP to 6080] | the inner
        /// bytes unchanged; buffers too short are refused, never written past.
        #[test]
        fn encapsulate_layout(inner in prop::collection::vec(any::<u8>(), 0..120), tags in 0usize..3, gue in any::<bool>(), hash in any::<u64>(), short in 0usize..4) {
            let encap = if gue { Encap::gue(hash) } else { Encap::Ipip };
            let t = Tunnel { encap, src: 1, dst: 2, dst_mac: [3; 6], src_mac: [4; 6] };
            let l3 = ETH_LEN + 4 * tags;
            let mut frame = vec![0xee; encap.overhead() + l3];
            frame.extend_from_slice(&inner);
            let n = frame.len() - short;
            match t.encapsulate(&mut frame[..n], l3, inner.len()) {
                Ok(total) => {
                    prop_assert_eq!(short, 0);
                    prop_assert_eq!(total, ETH_LEN + encap.overhead() + inner.len());
                    let outer = Ipv4Packet::new_checked(&frame[ETH_LEN..total]).unwrap();
                    prop_assert!(outer.verify_checksum() && outer.frag().dont_fragment);
                    prop_assert_eq!((outer.ident(), outer.ttl(), outer.total_len()), (0, OUTER_TTL, encap.overhead() + inner.len()));
                    // the inner DS field (IPv4 TOS or IPv6 Traffic Class) copied (RFC 6040 §4.1)
                    let want = match inner.as_slice() { [b0, b1, ..] if b0 >> 4 == 6 => b0 << 4 | b1 >> 4, [_, b1, ..] => *b1, _ => 0 };
                    prop_assert_eq!(frame[ETH_LEN + 1], want);
                    if let Encap::Gue { src_port } = encap {
                        let u = UdpPacket::new_checked(outer.payload()).unwrap();
                        prop_assert_eq!((u.src_port(), u.dst_port(), usize::from(u.len())), (src_port, GUE_PORT, UDP_LEN + inner.len()));
                    }
                    prop_assert_eq!(&frame[ETH_LEN + encap.overhead()..total], &inner[..]);
                }
                Err(r) => {
                    prop_assert!(short > 0);
                    prop_assert_eq!(r, DropReason::NoHeadroom);
                }
            }
        }

        /// IPv6 underlay: Ethernet (0x86dd) | IPv6 (hop limit 64, payload = overhead − 40 +
        /// inner, the flow label) | [UDP to 6080 with a checksum etherparse accepts] | the
        /// inner bytes; Next Header 4 or 41 by the inner version nibble.
        #[test]
        fn encapsulate6_layout(mut inner in prop::collection::vec(any::<u8>(), 1..120), v6_inner in any::<bool>(), gue in any::<bool>(), hash in any::<u64>(), tags in 0usize..3, tc_nibble in 0u8..16) {
            inner[0] = if v6_inner { 0x60 | tc_nibble } else { 0x45 };
            let encap = if gue { Encap::gue(hash) } else { Encap::Ipip };
            let t = Tunnel6 { encap, src: 0xfd00 << 112 | 2, dst: 0xfd00_0021 << 96 | 1, dst_mac: [3; 6], src_mac: [4; 6], flow_label: 0x12345 };
            let l3 = ETH_LEN + 4 * tags;
            let mut frame = vec![0xee; encap.overhead6() + l3];
            frame.extend_from_slice(&inner);
            let total = t.encapsulate(&mut frame, l3, inner.len()).unwrap();
            prop_assert_eq!(total, ETH_LEN + encap.overhead6() + inner.len());
            prop_assert_eq!(&frame[12..14], &[0x86, 0xdd]);
            let ip = etherparse::Ipv6HeaderSlice::from_slice(&frame[ETH_LEN..total]).unwrap();
            prop_assert_eq!((ip.hop_limit(), usize::from(ip.payload_length()), ip.flow_label().value()), (OUTER_TTL, encap.overhead6() - IPV6_LEN + inner.len(), 0x12345));
            // the inner DS field (IPv4 TOS, IPv6 Traffic Class) as the outer Traffic Class
            let want = match inner.as_slice() { [b0, b1, ..] if v6_inner => b0 << 4 | b1 >> 4, [_, b1, ..] => *b1, _ => 0 };
            prop_assert_eq!(ip.traffic_class(), want);
            match encap {
                Encap::Ipip => prop_assert_eq!(ip.next_header().0, if v6_inner { 41 } else { 4 }),
                Encap::Gue { src_port } => {
                    prop_assert_eq!(ip.next_header().0, PROTO_UDP);
                    let u = etherparse::UdpSlice::from_slice(&frame[ETH_LEN + IPV6_LEN..total]).unwrap();
                    prop_assert_eq!((u.source_port(), u.destination_port()), (src_port, GUE_PORT));
                    let want = u.to_header().calc_checksum_ipv6(&ip.to_header(), u.payload()).unwrap();
                    prop_assert_eq!(u.checksum(), want);
                }
            }
            prop_assert_eq!(&frame[ETH_LEN + encap.overhead6()..total], &inner[..]);
        }

        /// The in-front variant gives the same frame as the moving one, for any tags and
        /// inner packet, without touching the inner bytes.
        #[test]
        fn encapsulate_in_front_is_encapsulate(inner in prop::collection::vec(any::<u8>(), 0..120), tags in 0usize..3, gue in any::<bool>(), hash in any::<u64>(), old_l2 in any::<u8>()) {
            let encap = if gue { Encap::gue(hash) } else { Encap::Ipip };
            let t = Tunnel { encap, src: 1, dst: 2, dst_mac: [3; 6], src_mac: [4; 6] };
            let l3 = ETH_LEN + 4 * tags;
            let mut moved = vec![old_l2; encap.overhead() + l3];
            moved.extend_from_slice(&inner);
            let total = t.encapsulate(&mut moved, l3, inner.len()).unwrap();
            let mut front = vec![old_l2; t.front_room(l3) + l3];
            front.extend_from_slice(&inner);
            prop_assert_eq!(front.len(), total);
            prop_assert_eq!(t.encapsulate_in_front(&mut front, inner.len()), Ok(total));
            prop_assert_eq!(&front[..], &moved[..total]);
            // the lengths cover inner_len even when the buffer holds less (a first segment)
            let mut head = vec![0u8; ETH_LEN + encap.overhead()];
            prop_assert_eq!(t.encapsulate_in_front(&mut head, 9000), Ok(ETH_LEN + encap.overhead() + 9000));
            prop_assert_eq!(u16::from_be_bytes([head[ETH_LEN + 2], head[ETH_LEN + 3]]) as usize, encap.overhead() + 9000);
            prop_assert_eq!(t.encapsulate_in_front(&mut head[..ETH_LEN + encap.overhead() - 1], 0), Err(DropReason::NoHeadroom));
        }

        /// IPv6 underlay, in front: the same frame as [`Tunnel6::encapsulate`] (so the GUE
        /// checksum etherparse accepts there is the one written here) for either inner
        /// family, with `inner_sum` standing for the bytes not in the head.
        #[test]
        fn encapsulate6_in_front_is_encapsulate6(mut inner in prop::collection::vec(any::<u8>(), 1..120), v6_inner in any::<bool>(), tags in 0usize..3, gue in any::<bool>(), hash in any::<u64>(), old_l2 in any::<u8>(), in_head in 2usize..120) {
            inner[0] = if v6_inner { 0x60 } else { 0x45 };
            let encap = if gue { Encap::gue(hash) } else { Encap::Ipip };
            let t = Tunnel6 { encap, src: 0xfd00 << 112 | 2, dst: 0xfd00_0021 << 96 | 1, dst_mac: [3; 6], src_mac: [4; 6], flow_label: 0xabcde };
            let l3 = ETH_LEN + 4 * tags;
            let mut moved = vec![old_l2; encap.overhead6() + l3];
            moved.extend_from_slice(&inner);
            let total = t.encapsulate(&mut moved, l3, inner.len()).unwrap();
            let sum = crate::wire::checksum::sum_words(&inner, 0);
            let mut front = vec![old_l2; t.front_room(l3) + l3];
            front.extend_from_slice(&inner);
            prop_assert_eq!(front.len(), total);
            prop_assert_eq!(t.encapsulate_in_front(&mut front, inner.len(), sum), Ok(total));
            prop_assert_eq!(&front[..], &moved[..total]);
            // only part of the inner packet in the head (a first segment, holding at least
            // the inner header's first two octets: version and DS field): same headers
            let keep = ETH_LEN + encap.overhead6() + in_head.min(inner.len());
            let mut head = vec![old_l2; t.front_room(l3) + l3];
            head.extend_from_slice(&inner);
            head.truncate(keep);
            prop_assert_eq!(t.encapsulate_in_front(&mut head, inner.len(), sum), Ok(total));
            prop_assert_eq!(&head[..], &moved[..keep]);
            prop_assert_eq!(t.encapsulate_in_front(&mut head[..ETH_LEN + encap.overhead6() - 1], 0, 0), Err(DropReason::NoHeadroom));
        }
    }
}
