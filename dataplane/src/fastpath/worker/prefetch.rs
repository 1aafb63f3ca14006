//! The worker's connection-table prefetch: which buckets a packet's lookup will read, and
//! how far ahead [`Worker::poll`] loads them. A child of [`super`].

use super::{svc_slot, CtKey, PacketBuf, PrefetchTarget, Worker};
use crate::control::snapshot::{ServiceSnap, Snapshot};
use crate::wire;

/// How many packets ahead of its lookup [`Worker::poll`] starts loading a packet's
/// connection-table bucket (docs/benchmarks.md "conntrack at 1 M flows"): far enough that
/// the DRAM miss is over when the lookup comes, near enough that the lines in flight fit
/// the core's outstanding-miss slots.
pub const PREFETCH_DISTANCE: usize = 8;

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
    /// reads the connection table (worker/quic.rs), so its four-pass decode-cache bucket
    /// is loaded instead, at once ([`super::quic::CidCache::prefetch`]). A hint either
    /// way: a packet whose target is wrong or missing hashes its key in the lookup, with
    /// the same result.
    #[inline]
    pub fn prefetch_target<B: PacketBuf>(&self, buf: &B, snap: &Snapshot) -> PrefetchTarget {
        let Some((src, dst, sport, dport, proto)) = wire::flow_tuple_hint(buf.data()) else { return PrefetchTarget::NONE };
        let cached = self.svc_cache.get(svc_slot(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i)));
        let svc = match cached {
            Some(s) if s.vip == dst && s.port == dport && s.proto == proto && !s.ipv6 => Some(s),
            _ => snap.by_vip_port.get(&(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i))),
        };
        match svc {
            Some(s) if s.proto == wire::PROTO_UDP && s.quic_lb.is_some() && self.quic_short_header_hint(buf.data(), s) => PrefetchTarget::NONE,
            Some(s) => self.ct.prefetch_target(&CtKey { src, sport, service: s.id }, wire::syn_hint(buf.data())),
            None => PrefetchTarget::NONE,
        }
    }

    /// Whether the UDP datagram in `frame` (an unfragmented IPv4 packet without options,
    /// per [`wire::flow_tuple_hint`]) to `svc` (a service with QUIC-LB) carries a QUIC
    /// short header (first octet's high bit clear, RFC 8999 §5.2); if so, the decode
    /// cache's bucket for its DCID is prefetched.
    #[inline(always)]
    fn quic_short_header_hint(&self, frame: &[u8], svc: &ServiceSnap) -> bool {
        // Ethernet (+ the one VLAN tag `flow_tuple_hint` allows) + IPv4 header + UDP header
        let payload = if frame.get(12..14) == Some(&[0x08, 0x00]) { 14 + 28 } else { 18 + 28 };
        match (svc.quic_lb.as_deref(), frame.get(payload..).and_then(|p| p.split_first())) {
            (Some(t), Some((&first, dcid))) if first & 0x80 == 0 => {
                self.quic_cache.prefetch(t, dcid);
                true
            }
            _ => false,
        }
    }
}
