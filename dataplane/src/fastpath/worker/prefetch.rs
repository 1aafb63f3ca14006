//! The worker's connection-table prefetch: which buckets a packet's lookup will read, and
//! how far ahead [`Worker::poll`] loads them. A child of [`super`].

use super::{svc_slot, CtKey, PacketBuf, PrefetchTarget, Worker};
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
    /// (VIP, port, protocol) map; a packet of no service gets no target.
    #[inline]
    pub fn prefetch_target<B: PacketBuf>(&self, buf: &B, snap: &Snapshot) -> PrefetchTarget {
        let Some((src, dst, sport, dport, proto)) = wire::flow_tuple_hint(buf.data()) else { return PrefetchTarget::NONE };
        let cached = self.svc_cache.get(svc_slot(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i)));
        let svc = match cached {
            Some(s) if s.vip == dst && s.port == dport && s.proto == proto && !s.ipv6 => Some(s),
            _ => snap.by_vip_port.get(&(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i))),
        };
        match svc {
            Some(s) => self.ct.prefetch_target(&CtKey { src, sport, service: s.id }, wire::syn_hint(buf.data())),
            None => PrefetchTarget::NONE,
        }
    }
}
