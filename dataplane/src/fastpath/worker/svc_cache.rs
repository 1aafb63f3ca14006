//! The worker's direct-mapped service caches, one per family: (VIP, port, protocol) →
//! service index in front of the snapshot's hash maps (~10 % of a packet's time in the e2e
//! profile without them). A child of [`super`]; an entry is only a guess, used when the
//! cached index names a service of the *current* snapshot with exactly this VIP, port,
//! protocol and family, which is then the only such service (config validation refuses
//! duplicates), so a new snapshot never needs a flush.

use super::Worker;
use crate::control::snapshot::{ServiceSnap, Snapshot};

/// Entries of [`Worker`]'s service cache (power of two).
pub(super) const SVC_CACHE: usize = 64;

#[inline]
fn svc_slot(dst: u32, dport: u16, proto: u8) -> usize {
    let x = (u64::from(dst) << 24 | u64::from(dport) << 8 | u64::from(proto)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 58) as usize & (SVC_CACHE - 1)
}

impl Worker {
    /// Service index of (VIP, port, protocol), through the worker's direct-mapped cache.
    #[inline(always)]
    pub(super) fn service_of(&mut self, dst: u32, dport: u16, proto: u8, snap: &Snapshot) -> Option<u16> {
        let slot = svc_slot(dst, dport, proto);
        let cached = self.svc_cache.get(slot).copied().unwrap_or(u16::MAX);
        match snap.services.get(usize::from(cached)) {
            // (an IPv6 service has `vip` 0: never an IPv4 packet's to 0.0.0.0)
            Some(s) if s.vip == dst && s.port == dport && s.proto == proto && !s.ipv6 => Some(cached),
            _ => {
                let found = snap.by_vip_port.get(&(dst, dport, proto)).copied();
                if let (Some(i), Some(c)) = (found, self.svc_cache.get_mut(slot)) {
                    *c = i;
                }
                found
            }
        }
    }

    /// The service of (VIP, port, protocol) for the prefetch pass: from the cache when it
    /// holds it, else the snapshot's map (the cache is not filled here).
    #[inline(always)]
    pub(super) fn peek_service<'s>(&self, dst: u32, dport: u16, proto: u8, snap: &'s Snapshot) -> Option<&'s ServiceSnap> {
        let cached = self.svc_cache.get(svc_slot(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i)));
        match cached {
            Some(s) if s.vip == dst && s.port == dport && s.proto == proto && !s.ipv6 => Some(s),
            _ => snap.by_vip_port.get(&(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i)).map(|s| &**s)),
        }
    }

    /// Service index of (IPv6 VIP, port, protocol), through the worker's direct-mapped IPv6
    /// service cache (as [`Worker::service_of`] for IPv4: an entry is used only when the
    /// cached index names a current service with exactly this VIP, port and protocol).
    #[inline(always)]
    pub(super) fn service_of6(&mut self, dst: u128, dport: u16, proto: u8, snap: &Snapshot) -> Option<u16> {
        let slot = svc_slot6(dst, dport, proto);
        let cached = self.svc_cache6.get(slot).copied().unwrap_or(u16::MAX);
        match snap.services.get(usize::from(cached)) {
            Some(s) if s.ipv6 && s.vip6 == dst && s.port == dport && s.proto == proto => Some(cached),
            _ => {
                let found = snap.by_vip6_port.get(&(dst, dport, proto)).copied();
                if let (Some(i), Some(c)) = (found, self.svc_cache6.get_mut(slot)) {
                    *c = i;
                }
                found
            }
        }
    }

    /// The service of (IPv6 VIP, port, protocol) for the prefetch pass: from the cache
    /// when it holds it, else the snapshot's map (the cache is not filled here).
    #[inline(always)]
    pub(super) fn peek_service6<'s>(&self, dst: u128, dport: u16, proto: u8, snap: &'s Snapshot) -> Option<&'s ServiceSnap> {
        let cached = self.svc_cache6.get(svc_slot6(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i)));
        match cached {
            Some(s) if s.ipv6 && s.vip6 == dst && s.port == dport && s.proto == proto => Some(s),
            _ => snap.by_vip6_port.get(&(dst, dport, proto)).and_then(|&i| snap.services.get(usize::from(i)).map(|s| &**s)),
        }
    }
}

/// The IPv6 service cache's slot of (VIP, port, protocol): the VIP's four 32-bit words
/// folded, then the IPv4 slot hash.
#[inline(always)]
fn svc_slot6(dst: u128, dport: u16, proto: u8) -> usize {
    svc_slot((dst ^ dst >> 32 ^ dst >> 64 ^ dst >> 96) as u32, dport, proto)
}
