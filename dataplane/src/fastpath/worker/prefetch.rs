//! The worker's connection-table prefetch: which buckets a packet's lookup will read, and
//! how far ahead [`Worker::poll`] loads them. A child of [`super`].

use super::{FlowKey, PacketBuf, PrefetchTarget, Worker};
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
}
