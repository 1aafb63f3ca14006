//! Delivery of a decided packet to its backend, for both families: L2 DSR,
//! IPIP/GUE over an IPv4 or IPv6 underlay, and the "too big" answers (ICMP fragmentation
//! needed, ICMPv6 Packet Too Big). A child of [`super`]; same packet-path rules.

use super::{PortInfo, Verdict, Worker};
use crate::control::snapshot::{BackendSlot, ServiceSnap, Snapshot};
use crate::fastpath::port::PacketBuf;
use crate::fastpath::stats::bump;
use crate::wire::{self, DropReason, Ipv4Info, Ipv6Info};
use spillway_shared::config::ForwardingMode;
use spillway_shared::flow::{FlowAddr, FlowKeyOf};

/// The packet being delivered, of either family.
#[derive(Clone, Copy)]
pub(in crate::fastpath) enum Inner<'a> {
    V4(&'a Ipv4Info),
    V6(&'a Ipv6Info),
}

impl Inner<'_> {
    #[inline]
    fn l3(&self) -> usize {
        match self {
            Inner::V4(p) => p.l3,
            Inner::V6(p) => p.l3,
        }
    }
    #[inline]
    fn total_len(&self) -> usize {
        match self {
            Inner::V4(p) => p.total_len,
            Inner::V6(p) => p.total_len(),
        }
    }
    #[inline]
    fn is_fragment(&self) -> bool {
        match self {
            Inner::V4(p) => p.frag.is_fragment(),
            Inner::V6(p) => p.is_fragment(),
        }
    }
}

/// Default of `dataplane.icmp_errors_per_sec` (per worker).
pub const DEFAULT_ICMP_ERRORS_PER_SEC: u32 = 1000;
/// Most ICMP errors a worker sends back to back (the token bucket's depth).
pub const ICMP_BURST: u32 = 50;

/// A worker's token bucket for ICMP errors (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)): `rate`
/// per second, up to [`ICMP_BURST`] at once. Integer arithmetic on the worker clock.
#[derive(Clone, Copy, Debug)]
pub struct IcmpBudget {
    rate: u32,
    /// Tokens × 1000 (a token per 1000/rate ms).
    milli_tokens: u64,
    last_ms: u32,
}

impl IcmpBudget {
    /// A full bucket refilled at `rate` per second (0: never a token).
    pub fn new(rate: u32) -> IcmpBudget {
        IcmpBudget { rate, milli_tokens: u64::from(ICMP_BURST.min(rate)) * 1000, last_ms: 0 }
    }

    /// Takes a token at `now` (ms); false when none is left.
    #[inline]
    pub fn take(&mut self, now: u32) -> bool {
        let elapsed = u64::from(now.wrapping_sub(self.last_ms).min(60_000));
        self.last_ms = now;
        let cap = u64::from(ICMP_BURST.min(self.rate)) * 1000;
        self.milli_tokens = (self.milli_tokens + elapsed * u64::from(self.rate)).min(cap);
        if self.milli_tokens >= 1000 {
            self.milli_tokens -= 1000;
            true
        } else {
            false
        }
    }
}

/// Whether an ICMP error may be sent about a packet from `src` to `dst`: IPv4 sources
/// that are broadcast, multicast, unspecified, loopback or reserved (240/4) never get one
/// (RFC 1812 §4.3.2.7), nor IPv6 sources that are not unicast or packets to a multicast
/// IPv6 destination (RFC 4443 §2.4(e)).
fn icmp_error_allowed(p: &Inner<'_>) -> bool {
    match p {
        Inner::V4(p) => {
            let a = std::net::Ipv4Addr::from(p.src);
            !(a.is_broadcast() || a.is_multicast() || a.is_unspecified() || a.is_loopback() || a.octets()[0] >= 240)
        }
        Inner::V6(p) => {
            let (s, d) = (std::net::Ipv6Addr::from(p.src), std::net::Ipv6Addr::from(p.dst));
            !(s.is_multicast() || s.is_unspecified() || s.is_loopback() || d.is_multicast())
        }
    }
}

impl Worker {
    /// Rewrites the frame for `backend` per the service's forwarding mode: L2 DSR rewrites
    /// the MACs; IPIP/GUE encapsulate in an outer header of the *endpoint's* family (an
    /// IPv4 VIP may ride an IPv6 underlay and the reverse). When the encapsulated packet
    /// would exceed `encap_mtu`, the client is told the MTU that fits: ICMP "fragmentation
    /// needed" for IPv4 with DF (RFC 1191), ICMPv6 Packet Too Big for IPv6 (RFC 8201, never
    /// below 1280); never about an ICMP error (RFC 1122 §3.2.2, RFC 4443 §2.4(e)).
    /// The flow hash of `key` (the 3-tuple for fragments, like their backend selection)
    /// seeds the GUE source port and the outer flow label; L2 DSR never computes it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn deliver<B: PacketBuf, A: FlowAddr>(&mut self, buf: &mut B, p: Inner<'_>, svc: &ServiceSnap, backend: u16, snap: &Snapshot, pinfo: PortInfo, key: &FlowKeyOf<A>) -> Verdict {
        let Some(b) = snap.backends.get(usize::from(backend)) else {
            return Verdict::Drop(DropReason::NoBackend);
        };
        if b.mac == [0; 6] {
            return Verdict::Drop(DropReason::NextHopUnresolved);
        }
        if let Some(c) = self.stats.backend_packets.get(usize::from(backend)) {
            bump(c, 1);
        }
        // Bytes as received (the frame before rewriting): what the client sent this backend.
        if let Some(c) = self.stats.backend_bytes.get(usize::from(backend)) {
            bump(c, buf.pkt_len() as u64);
        }
        let out_mac = self.ports.get(pinfo.forward_to).map_or(pinfo.mac, |o| o.mac);
        if svc.mode == ForwardingMode::L2_DSR {
            return match wire::EthernetFrame::new_checked(buf.data_mut()) {
                Ok(mut eth) => {
                    eth.rewrite_l2(b.mac, out_mac);
                    Verdict::Forward
                }
                Err(r) => Verdict::Drop(r),
            };
        }
        self.encapsulate(buf, p, svc, b, snap, pinfo, out_mac, key)
    }

    /// IPIP/GUE delivery of [`Worker::deliver`] towards backend slot `b`, sent from
    /// `out_mac`. Out of line, so the L2 DSR path inlined into the caller does not carry
    /// its stack frame (docs/benchmarks.md "Per-stage budget").
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn encapsulate<B: PacketBuf, A: FlowAddr>(&mut self, buf: &mut B, p: Inner<'_>, svc: &ServiceSnap, b: &BackendSlot, snap: &Snapshot, pinfo: PortInfo, out_mac: [u8; 6], key: &FlowKeyOf<A>) -> Verdict {
        // GUE source port from the flow hash (5-tuple; 3-tuple for fragments, like
        // their backend selection) so the backend's RSS spreads a client's flows.
        let flow_hash = if p.is_fragment() { key.three_tuple().hash() } else { key.hash() };
        let encap = if svc.mode == ForwardingMode::GUE { wire::Encap::gue(flow_hash) } else { wire::Encap::Ipip };
        let outer6 = b.addr6 != 0;
        let oh = if outer6 { encap.overhead6() } else { encap.overhead() };
        let total_len = p.total_len();
        if total_len + oh > usize::from(svc.encap_mtu) {
            return self.too_big(buf, p, svc.encap_mtu.saturating_sub(oh as u16), pinfo);
        }
        let (l3, frame_len) = (p.l3(), buf.pkt_len());
        // drop Ethernet padding beyond the IP packet before growing
        buf.truncate((l3 + total_len).min(frame_len));
        let src6 = || snap.port_addrs6.get(pinfo.forward_to).copied().filter(|a| *a != 0).or_else(|| snap.port_addrs6.iter().copied().find(|a| *a != 0)).unwrap_or(0);
        let flow_label = (flow_hash >> 12) as u32 & 0x000f_ffff;
        if buf.segments() > 1 {
            // A chained jumbo frame, either family over either underlay:
            // the headers go in front of the inner packet, which stays where it is (its
            // bytes span segments); the outer lengths cover all of it.
            return if outer6 {
                let tunnel = wire::encap::Tunnel6 { encap, src: src6(), dst: b.addr6, dst_mac: b.mac, src_mac: out_mac, flow_label };
                // GUE's UDP checksum over IPv6 covers the inner bytes of every segment.
                let inner_sum = if matches!(encap, wire::Encap::Gue { .. }) { crate::fastpath::segments::sum_words_from(buf, l3, 0) } else { 0 };
                if !buf.prepend(tunnel.front_room(l3)) {
                    return Verdict::Drop(DropReason::NoHeadroom);
                }
                match tunnel.encapsulate_in_front(buf.data_mut(), total_len, inner_sum) {
                    Ok(_) => Verdict::Forward,
                    Err(r) => Verdict::Drop(r),
                }
            } else {
                let src = snap.port_addrs.get(pinfo.forward_to).copied().filter(|a| *a != 0).unwrap_or(pinfo.addr);
                let tunnel = wire::Tunnel { encap, src, dst: b.addr, dst_mac: b.mac, src_mac: out_mac };
                if !buf.prepend(tunnel.front_room(l3)) {
                    return Verdict::Drop(DropReason::NoHeadroom);
                }
                match tunnel.encapsulate_in_front(buf.data_mut(), total_len) {
                    Ok(_) => Verdict::Forward,
                    Err(r) => Verdict::Drop(r),
                }
            };
        }
        if !buf.prepend(oh) {
            return Verdict::Drop(DropReason::NoHeadroom);
        }
        let r = if outer6 {
            wire::encap::Tunnel6 { encap, src: src6(), dst: b.addr6, dst_mac: b.mac, src_mac: out_mac, flow_label }.encapsulate(buf.data_mut(), l3, total_len)
        } else {
            let src = snap.port_addrs.get(pinfo.forward_to).copied().filter(|a| *a != 0).unwrap_or(pinfo.addr);
            wire::Tunnel { encap, src, dst: b.addr, dst_mac: b.mac, src_mac: out_mac }.encapsulate(buf.data_mut(), l3, total_len)
        };
        match r {
            Ok(n) => {
                buf.truncate(n);
                Verdict::Forward
            }
            Err(r) => Verdict::Drop(r),
        }
    }

    /// A packet too big for the tunnel: the ICMP "fragmentation needed" (IPv4 with DF) or
    /// ICMPv6 Packet Too Big (IPv6, `mtu` raised to 1280) answer back out the receiving
    /// port, or `encap_too_big` (IPv4 without DF, and ICMP errors, which never get an error).
    /// No error goes to a source that may not get one (`icmp_error_forbidden`), nor past
    /// the worker's budget (`icmp_error_rate_limited`).
    #[cold]
    pub(super) fn too_big<B: PacketBuf>(&mut self, buf: &mut B, p: Inner<'_>, mtu: u16, pinfo: PortInfo) -> Verdict {
        let answers = match &p {
            Inner::V4(p) => p.frag.dont_fragment && p.proto != wire::PROTO_ICMP,
            Inner::V6(p) => p.proto != wire::NH_ICMPV6,
        };
        if answers && !icmp_error_allowed(&p) {
            return Verdict::Drop(DropReason::IcmpErrorForbidden);
        }
        if answers && !self.icmp_budget.take(self.clock_ms) {
            return Verdict::Drop(DropReason::IcmpErrorRateLimited);
        }
        match p {
            Inner::V4(p) => {
                if p.frag.dont_fragment && p.proto != wire::PROTO_ICMP {
                    let n = match wire::icmp_frag_needed_in_place(buf.data_mut(), p, mtu, pinfo.mac) {
                        Ok(n) => n,
                        Err(r) => return Verdict::Drop(r),
                    };
                    buf.truncate(n);
                    bump(&self.stats.icmp_frag_needed_sent, 1);
                    return Verdict::Reply;
                }
                Verdict::Drop(DropReason::EncapTooBig)
            }
            Inner::V6(p) => {
                // IPv6 is never fragmented on the path (RFC 8200 §5): always tell the source,
                // unless the packet is itself an ICMPv6 error (RFC 4443 §2.4(e)).
                if p.proto == wire::NH_ICMPV6 {
                    return Verdict::Drop(DropReason::EncapTooBig);
                }
                let need = p.l3 + wire::ipv6::IPV6_LEN + wire::icmpv6::ICMPV6_HEADER_LEN + p.total_len().min(wire::icmpv6::MAX_QUOTE);
                // A chained jumbo frame: the quote (up to 1,232 bytes) into the first segment.
                if buf.segments() > 1 && !buf.pull_up(need) {
                    return Verdict::Drop(DropReason::MultiSegment);
                }
                let have = buf.data().len();
                if have < need && !buf.append(need - have) {
                    return Verdict::Drop(DropReason::NoHeadroom);
                }
                let n = match wire::icmpv6::packet_too_big_in_place(buf.data_mut(), p, mtu, pinfo.mac) {
                    Ok(n) => n,
                    Err(r) => return Verdict::Drop(r),
                };
                buf.truncate(n);
                bump(&self.stats.icmp_frag_needed_sent, 1);
                Verdict::Reply
            }
        }
    }
}
