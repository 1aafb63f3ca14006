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
        // (an IPv6 service has `vip` 0: never an IPv4 packet's to 0.0.0.0)
        let is_it = |s: &ServiceSnap| s.vip == dst && s.port == dport && s.proto == proto && !s.ipv6;
        let slot = svc_slot(dst, dport, proto);
        cached(&self.svc_cache, slot, snap, is_it).or_else(|| fill(&mut self.svc_cache, slot, snap.by_vip_port.get(&(dst, dport, proto)).copied()))
    }

    /// The service of (VIP, port, protocol) for the prefetch pass: from the cache when it
    /// holds it, else the snapshot's map (the cache is not filled here).
    #[inline(always)]
    pub(super) fn peek_service<'s>(&self, dst: u32, dport: u16, proto: u8, snap: &'s Snapshot) -> Option<&'s ServiceSnap> {
        let is_it = |s: &ServiceSnap| s.vip == dst && s.port == dport && s.proto == proto && !s.ipv6;
        let i = cached(&self.svc_cache, svc_slot(dst, dport, proto), snap, is_it).or_else(|| snap.by_vip_port.get(&(dst, dport, proto)).copied());
        i.and_then(|i| snap.services.get(usize::from(i)))
    }

    /// Service index of (IPv6 VIP, port, protocol), through the worker's direct-mapped IPv6
    /// service cache (as [`Worker::service_of`] for IPv4).
    #[inline(always)]
    pub(super) fn service_of6(&mut self, dst: u128, dport: u16, proto: u8, snap: &Snapshot) -> Option<u16> {
        let is_it = |s: &ServiceSnap| s.ipv6 && s.vip6 == dst && s.port == dport && s.proto == proto;
        let slot = svc_slot6(dst, dport, proto);
        cached(&self.svc_cache6, slot, snap, is_it).or_else(|| fill(&mut self.svc_cache6, slot, snap.by_vip6_port.get(&(dst, dport, proto)).copied()))
    }

    /// [`Worker::peek_service`] for IPv6.
    #[inline(always)]
    pub(super) fn peek_service6<'s>(&self, dst: u128, dport: u16, proto: u8, snap: &'s Snapshot) -> Option<&'s ServiceSnap> {
        let is_it = |s: &ServiceSnap| s.ipv6 && s.vip6 == dst && s.port == dport && s.proto == proto;
        let i = cached(&self.svc_cache6, svc_slot6(dst, dport, proto), snap, is_it).or_else(|| snap.by_vip6_port.get(&(dst, dport, proto)).copied());
        i.and_then(|i| snap.services.get(usize::from(i)))
    }
}

/// The service index in `cache[slot]` when it names a service of `snap` that `is_it`
/// (exactly the VIP, port, protocol and family looked up).
#[inline(always)]
fn cached(cache: &[u16; SVC_CACHE], slot: usize, snap: &Snapshot, is_it: impl Fn(&ServiceSnap) -> bool) -> Option<u16> {
    let i = cache.get(slot).copied().unwrap_or(u16::MAX);
    snap.services.get(usize::from(i)).is_some_and(is_it).then_some(i)
}

/// `found` (the snapshot map's answer), stored in `cache[slot]` when it is a service.
#[inline(always)]
fn fill(cache: &mut [u16; SVC_CACHE], slot: usize, found: Option<u16>) -> Option<u16> {
    if let (Some(i), Some(c)) = (found, cache.get_mut(slot)) {
        *c = i;
    }
    found
}

/// The IPv6 service cache's slot of (VIP, port, protocol): the VIP's four 32-bit words
/// folded, then the IPv4 slot hash.
#[inline(always)]
fn svc_slot6(dst: u128, dport: u16, proto: u8) -> usize {
    svc_slot((dst ^ dst >> 32 ^ dst >> 64 ^ dst >> 96) as u32, dport, proto)
}
