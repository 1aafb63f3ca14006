//! QUIC-LB routing of short-header (1-RTT) packets, for both families: a UDP datagram to
//! a service with QUIC-LB whose payload starts with a short header (first bit 0, RFC 8999
//! §5.2) goes to the endpoint whose server ID its DCID decodes to
//! (draft-ietf-quic-load-balancers-19 §4.2 step 1), while that endpoint is eligible by
//! the service's rules ([`super::keeps_backend`], as for a tracked connection). Anything
//! else takes the 5-tuple path (connection table, else Maglev), counted by reason.
//!
//! The connection table is neither read nor written for a QUIC-routed packet: it never
//! evicts or rewrites another flow's entry, and a migrated connection needs no state.
//! A child of [`super`]; same packet-path rules (no allocation, syscall or panic).

use super::v6::Family;
use super::Worker;
use crate::control::quic_lb::Fallback;
use crate::control::snapshot::{ServiceSnap, Snapshot};
use crate::fastpath::stats::bump;
use crate::wire;
pub use crate::fastpath::stats::QuicCounters;

/// UDP header length (RFC 768).
const UDP_HEADER: usize = 8;

impl Worker {
    /// The endpoint slot for a packet of `svc` by QUIC-LB, or `None` for the 5-tuple path.
    /// `frame[l4..end]` is the UDP datagram (header included) as the IP header bounds it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quic_route<A: Family>(&self, frame: &[u8], l4: usize, end: usize, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, src: A, now: u32) -> Option<u16> {
        let table = svc.quic_lb.as_deref()?;
        if svc.proto != wire::PROTO_UDP {
            return None;
        }
        let q = &self.stats.quic;
        let payload = frame.get(l4 + UDP_HEADER..end.min(frame.len())).unwrap_or(&[]);
        let fallback = |f: Fallback| {
            bump(&q.fallback[f as usize], 1);
            None
        };
        let Some((&first, dcid)) = payload.split_first() else {
            return fallback(Fallback::TooShort);
        };
        if first & 0x80 != 0 {
            bump(&q.long_header, 1);
            return None;
        }
        let slot = match table.lookup(dcid) {
            Ok((_, slot)) => slot,
            Err(f) => return fallback(f),
        };
        let incarnation = snap.backends.get(usize::from(slot)).map_or(0, |b| b.incarnation);
        if !super::keeps_backend(snap, svc, svc_idx, slot, incarnation, src, now) {
            return fallback(Fallback::NotEligible);
        }
        bump(&q.routed, 1);
        Some(slot)
    }
}
