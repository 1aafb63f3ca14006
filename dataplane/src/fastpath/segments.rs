//! Packets spread over several buffer segments (jumbo frames received into chained mbufs
//! with RX scatter, issue 12 item 7): how the worker parses them and whether a port can
//! send them. Kept out of [`crate::fastpath::worker`] so its single-segment path is
//! unchanged: the worker parses the first segment as usual and calls [`parse_segmented`]
//! only when that fails on a packet with `segments() > 1` (a first segment that holds the
//! whole IP packet, e.g. before trailing padding segments, parses as it is).
//!
//! Lengths and checksums cover the whole packet: the IPv4 total length is checked against
//! `pkt_len` ([`wire::parse_head`]); encapsulation writes the outer lengths from the inner
//! total length and never moves the inner bytes ([`wire::Tunnel::encapsulate_in_front`]);
//! the only checksums written (outer IPv4 header, ICMP "fragmentation needed" over its
//! quote) cover bytes that are in the first segment, and GUE's UDP checksum is 0.

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

/// Parses a packet spread over several segments (a jumbo frame received with RX scatter,
/// issue 12 item 7): its headers are pulled up into the first segment (a no-op when, as
/// usual, the first segment holds them), then parsed with the whole packet's length.
/// `Err(MultiSegment)` when the first segment has no room for them.
#[inline(never)]
pub fn parse_segmented<B: PacketBuf>(buf: &mut B) -> Result<wire::Parsed, DropReason> {
    if !buf.pull_up(SEGMENTED_HEADERS_MAX) {
        return Err(DropReason::MultiSegment);
    }
    wire::parse_head(buf.data(), buf.pkt_len())
}

#[cfg(test)]
#[path = "segments_tests.rs"]
mod tests;
