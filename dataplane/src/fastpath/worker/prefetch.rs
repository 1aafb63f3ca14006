//! The worker's connection-table prefetch: which buckets a packet's lookup will read, and
//! how far ahead [`Worker::poll`] loads them. A child of [`super`].

use super::{CtKey, PacketBuf, Worker};
use crate::fastpath::conntrack::PrefetchTarget;
use crate::control::snapshot::{ServiceSnap, Snapshot};
use crate::wire;

/// How many packets ahead of its lookup the pipelined prefetch of the general path
/// ([`Worker::prefetch_target`]) starts loading a packet's connection-table bucket, as the
/// `established_burst32_pipelined` bench runs it (`Worker::poll` now loads a whole burst's
/// buckets in the vector path's stage 2, worker/vector.rs): far enough that the DRAM miss
/// is over when the lookup comes, near enough that the lines in flight fit the core's
/// outstanding-miss slots.
pub const PREFETCH_DISTANCE: usize = 8;

// No prefetch pass below some table size: tried (2026-12-01), and undone. Even 1,000
// flows' buckets (64 KiB of IPv4 table) do not stay cached while the RX device streams
// packets through the same caches: without the pass `ConnTable::find` took 27 % of the
// worker's samples of the e2e IPv4 run instead of 3-7 % (docs/benchmarks.md).

impl Worker {
    /// Prefetches the connection-table bucket of `buf`'s 5-tuple (TCP/UDP, unfragmented).
    /// Issued at once (the criterion benches' all-at-once variant); [`Worker::poll`] issues
    /// [`Worker::prefetch_target`]s [`PREFETCH_DISTANCE`] packets ahead instead. Uses the
    /// per-connection key: for PER_SESSION services the prefetch is wasted, not wrong.
    #[inline]
    pub fn prefetch<B: PacketBuf>(&self, buf: &B, snap: &Snapshot) {
        self.prefetch_target(buf, snap).issue();
    }

    /// The connection-table buckets [`Worker::prefetch`] would load for `buf`, to issue
    /// later ([`PrefetchTarget::issue`]): [`Worker::poll`] issues them
    /// [`PREFETCH_DISTANCE`] packets ahead, and hands each packet's target to the table
    /// just before processing it (`ConnTable::expect`), so the lookup reuses the bucket
    /// hash computed here instead of hashing the key again. The key's service number comes
    /// from the worker's service cache (filled by the packets' lookups), else the snapshot's
    /// (VIP, port, protocol) map; a packet of no service gets no target. Nor does a QUIC
    /// short-header packet to a service with QUIC-LB: it is routed by its DCID and never
    /// reads the connection table (worker/quic.rs), so its (encrypted CID's) decode-cache bucket
    /// is loaded instead, at once ([`super::quic::CidCache::prefetch`]). A hint either
    /// way: a packet whose target is wrong or missing hashes its key in the lookup, with
    /// the same result.
    #[inline]
    pub fn prefetch_target<B: PacketBuf>(&self, buf: &B, snap: &Snapshot) -> PrefetchTarget {
        let Some((src, dst, sport, dport, proto)) = wire::flow_tuple_hint(buf.data()) else { return self.prefetch_target6(buf, snap) };
        match self.peek_service(dst, dport, proto, snap) {
            Some(s) if s.proto == wire::PROTO_UDP && s.quic_lb.is_some() && self.quic_short_header_hint(buf.data(), s, wire::ETHERTYPE_IPV4, 28) => PrefetchTarget::NONE,
            Some(s) => self.ct.prefetch_target(&CtKey { src, sport, service: s.id }, wire::syn_hint(buf.data())),
            None => PrefetchTarget::NONE,
        }
    }

    /// [`Worker::prefetch_target`] for an IPv6 TCP/UDP frame without extension headers
    /// ([`wire::flow_tuple_hint6`]): the IPv6 table's target, the service from the IPv6
    /// service cache or map; `NONE` for anything else.
    #[inline]
    fn prefetch_target6<B: PacketBuf>(&self, buf: &B, snap: &Snapshot) -> PrefetchTarget {
        let Some((src, dst, sport, dport, proto)) = wire::flow_tuple_hint6(buf.data()) else { return PrefetchTarget::NONE };
        match self.peek_service6(dst, dport, proto, snap) {
            Some(s) if s.proto == wire::PROTO_UDP && s.quic_lb.is_some() && self.quic_short_header_hint(buf.data(), s, wire::ETHERTYPE_IPV6, 48) => PrefetchTarget::NONE,
            Some(s) => self.ct6.prefetch_target(&CtKey { src, sport, service: s.id }, wire::syn_hint6(buf.data())),
            None => PrefetchTarget::NONE,
        }
    }

    /// Whether the UDP datagram in `frame` (of ethertype `ethertype`, an unfragmented IPv4
    /// packet without options per [`wire::flow_tuple_hint`] or an IPv6 one without
    /// extension headers per [`wire::flow_tuple_hint6`]; `ip_udp` octets of IP and UDP
    /// headers) to `svc` (a service with QUIC-LB) carries a QUIC short header (first
    /// octet's high bit clear, RFC 8999 §5.2); if so, the decode cache's bucket for its
    /// DCID is prefetched.
    #[inline(always)]
    pub(super) fn quic_short_header_hint(&self, frame: &[u8], svc: &ServiceSnap, ethertype: u16, ip_udp: usize) -> bool {
        // Ethernet (+ the one VLAN tag the hints allow) + IP header + UDP header
        let payload = if frame.get(12..14) == Some(&ethertype.to_be_bytes()) { 14 + ip_udp } else { 18 + ip_udp };
        match (svc.quic_lb.as_deref(), frame.get(payload..).and_then(|p| p.split_first())) {
            (Some(t), Some((&first, dcid))) if first & 0x80 == 0 => {
                self.quic_cache.prefetch(t, dcid);
                true
            }
            _ => false,
        }
    }
}
