//! Packets spread over several buffer segments (jumbo frames received into chained mbufs
//! with RX scatter): how the worker parses them and whether a port can
//! send them. Kept out of [`crate::fastpath::worker`] so its single-segment path is
//! unchanged: the worker parses the first segment as usual and calls [`parse_segmented`]
//! only when that fails on a packet with `segments() > 1` (a first segment that holds the
//! whole IP packet, e.g. before trailing padding segments, parses as it is).
//!
//! Lengths and checksums cover the whole packet: the IPv4 total length and the IPv6
//! payload length are checked against `pkt_len` ([`wire::parse_head`]); encapsulation
//! writes the outer lengths from the inner total length and never moves the inner bytes
//! ([`wire::Tunnel::encapsulate_in_front`], [`wire::encap::Tunnel6::encapsulate_in_front`]);
//! the checksums written over first-segment bytes only are the outer IPv4 header's, the
//! ICMP "fragmentation needed" and ICMPv6 Packet Too Big ones over their quotes (pulled
//! up); GUE's UDP checksum is 0 over IPv4, and over IPv6 it covers every segment.

use crate::fastpath::port::{PacketBuf, Port};
use crate::wire::{self, DropReason};

/// Whether port `i` can send `b`: a single-segment packet always; a multi-segment one
/// when the port was configured for it ([`Port::tx_multi_seg`]).
#[inline]
pub fn sendable<P: Port>(ports: &[P], i: usize, b: &P::Buf) -> bool {
    b.segments() == 1 || ports.get(i).is_none_or(|p| p.tx_multi_seg())
}

/// Bytes of a multi-segment packet made contiguous in its first segment before parsing:
/// Ethernet with two VLAN tags (22), an IPv4 header with options (60), then a TCP header
/// with options (60) or an ICMP error's header and quote (8 + 60 + 8): every header the
/// worker reads or rewrites.
pub const SEGMENTED_HEADERS_MAX: usize = 22 + 60 + 76;

/// Bytes of IPv6 extension headers (between the fixed header and the TCP/UDP header) a
/// multi-segment IPv6 packet may carry in [`SEGMENTED_HEADERS_MAX_V6`]; a longer chain is
/// dropped as `truncated_ipv6` when it does not already sit in the first segment.
///
/// Why 256: the chain is walked at most [`wire::ipv6::MAX_EXT_HEADERS`] deep, but each
/// header may be 2,048 bytes long, so a bound on headers alone would mean pulling up
/// 16 KB. The chains hosts send are far shorter: Hop-by-Hop (8, or 16 with a Router
/// Alert and padding), Fragment (8), Destination Options (8–24), AH (24 with a 96-bit
/// ICV, RFC 4302 §2.6), a Segment Routing Header with 14 segments (8 + 14 × 16 = 232,
/// RFC 8754) — and RFC 7112 already requires the whole chain in a first fragment, which
/// many networks cap at a few hundred bytes (RFC 9098 §4). 256 bytes cover any such chain
/// while the pull-up stays well inside the smallest mbuf data room DPDK uses (2,048).
/// It is a pull-up size, not a parse limit: a chain of any length that is already in the
/// first segment (the usual case: RX scatter fills a 2,048-byte first segment) parses.
pub const SEGMENTED_EXT_MAX: usize = 256;

/// Bytes of a multi-segment IPv6 packet made contiguous in its first segment: Ethernet
/// with two VLAN tags (22), the fixed header (40), [`SEGMENTED_EXT_MAX`] of extension
/// headers, then a TCP header with options (60). An ICMPv6 error's quote (8 + 40 + 8, plus
/// the quoted extension headers) fits as well when the error carries no extension headers
/// of its own.
pub const SEGMENTED_HEADERS_MAX_V6: usize = 22 + 40 + SEGMENTED_EXT_MAX + 60;

/// Parses a packet spread over several segments (a jumbo frame received with RX scatter,
/// jumbo frames): its headers are pulled up into the first segment (a no-op when, as
/// usual, the first segment holds them; [`SEGMENTED_HEADERS_MAX`] bytes, or
/// [`SEGMENTED_HEADERS_MAX_V6`] for IPv6), then parsed with the whole packet's length
/// ([`wire::parse_head`]). `Err(MultiSegment)` when the first segment has no room for them.
#[inline(never)]
pub fn parse_segmented<B: PacketBuf>(buf: &mut B) -> Result<wire::Parsed, DropReason> {
    if !buf.pull_up(SEGMENTED_HEADERS_MAX) {
        return Err(DropReason::MultiSegment);
    }
    // The Ethernet header and its tags are in the first segment now (22 < the pull-up).
    let ipv6 = wire::EthernetFrame::new_checked(buf.data()).is_ok_and(|e| e.ethertype() == wire::ETHERTYPE_IPV6);
    if ipv6 && !buf.pull_up(SEGMENTED_HEADERS_MAX_V6) {
        return Err(DropReason::MultiSegment);
    }
    wire::parse_head(buf.data(), buf.pkt_len())
}

/// The one's complement sum ([`wire::checksum::sum_words`], carries deferred) of the bytes
/// of `buf` from `offset` to its end, over every segment, added to `acc`: what a checksum
/// over a multi-segment packet needs (GUE over IPv6, [`wire::encap::Tunnel6::encapsulate_in_front`]).
/// A segment that starts at an odd byte of the summed range contributes its sum byte-swapped
/// (RFC 1071 §2(B): the sum is independent of byte order, so bytes shifted by one position
/// sum to the swapped value). No allocation; one pass over the bytes.
pub fn sum_words_from<B: PacketBuf>(buf: &B, offset: usize, acc: u64) -> u64 {
    let (mut skip, mut odd, mut acc) = (offset, false, acc);
    buf.for_each_segment(|seg| {
        let s = seg.get(skip..).unwrap_or(&[]);
        skip = skip.saturating_sub(seg.len());
        let sum = u64::from(wire::checksum::fold(wire::checksum::sum_words(s, 0)));
        acc += if odd { u64::from((sum as u16).swap_bytes()) } else { sum };
        odd ^= s.len() % 2 == 1;
    });
    acc
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests6;
