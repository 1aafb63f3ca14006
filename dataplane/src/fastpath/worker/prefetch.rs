//! The worker's connection-table prefetch: which buckets a packet's lookup will read, and
//! how far ahead [`Worker::poll`] loads them. A child of [`super`].

use super::{svc_slot, FlowKey, PacketBuf, PrefetchTarget, Worker};
use crate::control::snapshot::Snapshot;
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
    /// 5-tuple key: for PER_SESSION services the prefetch is wasted, not wrong.
    #[inline]
    pub fn prefetch<B: PacketBuf>(&self, buf: &B) {
        self.prefetch_target(buf).issue();
    }

    /// The connection-table buckets [`Worker::prefetch`] would load for `buf`, to issue
    /// later ([`PrefetchTarget::issue`]): [`Worker::poll`] issues them
    /// [`PREFETCH_DISTANCE`] packets ahead, and hands each packet's target to the table
    /// just before processing it (`ConnTable::expect`), so the lookup reuses the bucket
    /// hash computed here instead of hashing the 5-tuple again.
    #[inline]
    pub fn prefetch_target<B: PacketBuf>(&self, buf: &B) -> PrefetchTarget {
        match wire::flow_tuple_hint(buf.data()) {
            Some((src, dst, sport, dport, proto)) => self.ct.prefetch_target(&FlowKey { src, dst, sport, dport, proto }, wire::syn_hint(buf.data())),
            None => PrefetchTarget::NONE,
        }
    }

    /// [`Worker::prefetch_target`] for the packet path ([`Worker::poll`]), under `snap`:
    /// nothing for a QUIC short-header packet to a service with QUIC-LB, which is routed
    /// by its DCID and never reads the connection table (worker/quic.rs), so its bucket
    /// hash and loads would be wasted. The service comes from the worker's service cache
    /// as it stands (not updated here); on a cache miss the packet's bucket is loaded, as
    /// for any flow. A hint either way: a packet whose target is wrong or missing hashes
    /// its key in the lookup, with the same result.
    #[inline]
    pub fn prefetch_target_in<B: PacketBuf>(&self, buf: &B, snap: &Snapshot) -> PrefetchTarget {
        let data = buf.data();
        match wire::flow_tuple_hint(data) {
            Some((_, dst, _, dport, wire::PROTO_UDP)) if self.quic_short_header_hint(data, dst, dport, snap) => PrefetchTarget::NONE,
            Some((src, dst, sport, dport, proto)) => self.ct.prefetch_target(&FlowKey { src, dst, sport, dport, proto }, wire::syn_hint(data)),
            None => PrefetchTarget::NONE,
        }
    }

    /// Whether the UDP datagram in `frame` (an unfragmented IPv4 packet without options,
    /// per [`wire::flow_tuple_hint`]) carries a QUIC short header (first octet's high bit
    /// clear, RFC 8999 §5.2) to `dst`:`dport`, a service with QUIC-LB in the service
    /// cache; if so, the decode cache's bucket for its DCID is prefetched
    /// ([`super::quic::CidCache::prefetch`]) at once.
    #[inline(always)]
    fn quic_short_header_hint(&self, frame: &[u8], dst: u32, dport: u16, snap: &Snapshot) -> bool {
        let Some(&i) = self.svc_cache.get(svc_slot(dst, dport, wire::PROTO_UDP)) else { return false };
        let table = match snap.services.get(usize::from(i)) {
            Some(s) if s.vip == dst && s.port == dport && s.proto == wire::PROTO_UDP => s.quic_lb.as_deref(),
            _ => None,
        };
        // Ethernet (+ the one VLAN tag `flow_tuple_hint` allows) + IPv4 header + UDP header
        let payload = if frame.get(12..14) == Some(&[0x08, 0x00]) { 14 + 28 } else { 18 + 28 };
        match (table, frame.get(payload..).and_then(|p| p.split_first())) {
            (Some(t), Some((&first, dcid))) if first & 0x80 == 0 => {
                self.quic_cache.prefetch(t, dcid);
                true
            }
            _ => false,
        }
    }
}
