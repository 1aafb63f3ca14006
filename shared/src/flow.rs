//! Flow keys and the deterministic flow hash used for Maglev lookups.
//!
//! Every worker and every Spillway instance must pick the same backend for the same key
//! (spec/backend-selection.md "Consistent hashing"), so the hash is a fixed function of the
//! key bytes: no per-process random seed.

use crate::config::SessionAffinity;
use std::net::{Ipv4Addr, Ipv6Addr};

/// An address type a [`FlowKeyOf`] is built of: `u32` (IPv4, host order) or `u128` (IPv6,
/// host order of the 16 network-order bytes, i.e. `u128::from(Ipv6Addr)`).
pub trait FlowAddr: Copy + Eq + Ord + std::hash::Hash + Default + std::fmt::Debug + Send + Sync + 'static {
    /// The (source, destination) pair folded into one 64-bit word, `seed` entering before
    /// any mixing (the connection table passes its random seed; the selection hash 0).
    /// IPv4: `(src << 32 | dst) ^ seed`, exactly the pre-IPv6 word, so IPv4 backend choices
    /// are unchanged. IPv6: the four 64-bit halves chained through the murmur3 finaliser.
    fn pair_word(src: Self, dst: Self, seed: u64) -> u64;
    /// Address width in bits: 32 (IPv4) or 128 (IPv6).
    const BITS: u32;
    /// The address as (high, low) 64-bit halves of its host-order value: IPv4 `(0, a)`.
    fn halves(self) -> (u64, u64);
    /// The address as an [`std::net::IpAddr`] (for printing).
    fn ip(self) -> std::net::IpAddr;
}

impl FlowAddr for u32 {
    #[inline]
    fn pair_word(src: u32, dst: u32, seed: u64) -> u64 {
        ((u64::from(src) << 32) | u64::from(dst)) ^ seed
    }
    const BITS: u32 = 32;
    #[inline(always)]
    fn halves(self) -> (u64, u64) {
        (0, u64::from(self))
    }
    fn ip(self) -> std::net::IpAddr {
        Ipv4Addr::from(self).into()
    }
}

impl FlowAddr for u128 {
    #[inline]
    fn pair_word(src: u128, dst: u128, seed: u64) -> u64 {
        let h = fmix64((src >> 64) as u64 ^ seed);
        let h = fmix64(h ^ src as u64);
        let h = fmix64(h ^ (dst >> 64) as u64);
        h ^ dst as u64
    }
    const BITS: u32 = 128;
    #[inline(always)]
    fn halves(self) -> (u64, u64) {
        ((self >> 64) as u64, self as u64)
    }
    fn ip(self) -> std::net::IpAddr {
        Ipv6Addr::from(self).into()
    }
}

/// 5-tuple of a packet as received (client → VIP), generic over the address family
/// ([`FlowKey`] for IPv4, [`FlowKey6`] for IPv6). Addresses are host-order integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FlowKeyOf<A> {
    /// Source (client) address.
    pub src: A,
    /// Destination (VIP) address.
    pub dst: A,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port (0 for protocols without ports).
    pub dport: u16,
    /// IP protocol number (IPv6: the upper-layer protocol after the extension headers).
    pub proto: u8,
}

/// IPv4 5-tuple (addresses host-order `u32`).
pub type FlowKey = FlowKeyOf<u32>;
/// IPv6 5-tuple (addresses host-order `u128`).
pub type FlowKey6 = FlowKeyOf<u128>;

impl FlowKey {
    /// Builds a key from addresses.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, proto: u8) -> Self {
        FlowKey { src: src.into(), dst: dst.into(), sport, dport, proto }
    }
}

impl FlowKey6 {
    /// Builds an IPv6 key from addresses.
    pub fn new6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, proto: u8) -> Self {
        FlowKey6 { src: src.into(), dst: dst.into(), sport, dport, proto }
    }
}

impl<A: FlowAddr> FlowKeyOf<A> {
    /// The key reduced to what `affinity` hashes (spec/backend-selection.md "Session
    /// affinity"): 5-tuple, 3-tuple (ports zeroed), 2-tuple (ports and protocol zeroed) or
    /// 1-tuple (source only).
    pub fn for_affinity(&self, affinity: SessionAffinity) -> Self {
        match affinity {
            SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO => *self,
            SessionAffinity::CLIENT_IP_PROTO => FlowKeyOf { sport: 0, dport: 0, ..*self },
            SessionAffinity::CLIENT_IP => FlowKeyOf { src: self.src, dst: self.dst, ..Default::default() },
            SessionAffinity::CLIENT_IP_NO_DESTINATION => FlowKeyOf { src: self.src, ..Default::default() },
        }
    }

    /// The 3-tuple (ports zeroed): used for fragments and ICMP, which carry no ports.
    pub fn three_tuple(&self) -> Self {
        FlowKeyOf { sport: 0, dport: 0, ..*self }
    }

    /// 64-bit hash of the key: the address word ([`FlowAddr::pair_word`], seed 0) and the
    /// ports/protocol word mixed with the murmur3 finaliser. Deterministic across
    /// processes and hosts (spec/backend-selection.md "Consistent hashing"): no seed.
    #[inline]
    pub fn hash(&self) -> u64 {
        let a = A::pair_word(self.src, self.dst, 0);
        let b = (u64::from(self.sport) << 32) | (u64::from(self.dport) << 16) | u64::from(self.proto);
        let h = fmix64(a ^ 0x9E37_79B9_7F4A_7C15);
        fmix64(h ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
    }

    /// Hash of the affinity-reduced key: the value looked up in the Maglev table.
    #[inline]
    pub fn affinity_hash(&self, affinity: SessionAffinity) -> u64 {
        self.for_affinity(affinity).hash()
    }
}

/// MurmurHash3's 64-bit finaliser (public domain, Austin Appleby): a bijective mixer.
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k() -> FlowKey {
        FlowKey::new("10.1.0.5".parse().unwrap(), "10.0.0.100".parse().unwrap(), 40000, 80, 6)
    }

    #[test]
    fn affinity_reduces_key() {
        let key = k();
        assert_eq!(key.for_affinity(SessionAffinity::NONE), key);
        let three = key.for_affinity(SessionAffinity::CLIENT_IP_PROTO);
        assert_eq!((three.sport, three.dport, three.proto), (0, 0, 6));
        let two = key.for_affinity(SessionAffinity::CLIENT_IP);
        assert_eq!((two.dst, two.proto), (key.dst, 0));
        let one = key.for_affinity(SessionAffinity::CLIENT_IP_NO_DESTINATION);
        assert_eq!((one.src, one.dst), (key.src, 0));
        // source port changes the 5-tuple hash but not the client-IP hash
        let other = FlowKey { sport: 40001, ..key };
        assert_ne!(key.affinity_hash(SessionAffinity::NONE), other.affinity_hash(SessionAffinity::NONE));
        assert_eq!(key.affinity_hash(SessionAffinity::CLIENT_IP), other.affinity_hash(SessionAffinity::CLIENT_IP));
    }

    #[test]
    fn hash_is_a_fixed_function() {
        // Pinned value: a change here changes every host's backend choice; do it knowingly.
        assert_eq!(k().hash(), k().hash());
        let h = k().hash();
        assert_eq!(h, FlowKey { ..k() }.hash());
        assert_ne!(h, 0);
    }

    #[test]
    fn ipv4_hash_is_pinned() {
        // The IPv4 hash predates IPv6 support; generalising the key must not move any
        // IPv4 flow to another backend.
        let key = k();
        let a = (u64::from(key.src) << 32) | u64::from(key.dst);
        let b = (u64::from(key.sport) << 32) | (u64::from(key.dport) << 16) | u64::from(key.proto);
        let want = fmix64(fmix64(a ^ 0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
        assert_eq!(key.hash(), want);
    }

    #[test]
    fn ipv6_hash_uses_every_address_bit() {
        let k6 = FlowKey6::new6("fd01::5".parse().unwrap(), "fd00::100".parse().unwrap(), 40000, 80, 6);
        // pinned: the same on every host (no seed)
        assert_eq!(k6.hash(), FlowKey6::new6("fd01::5".parse().unwrap(), "fd00::100".parse().unwrap(), 40000, 80, 6).hash());
        for bit in 0..128 {
            let s = FlowKey6 { src: k6.src ^ (1u128 << bit), ..k6 };
            let d = FlowKey6 { dst: k6.dst ^ (1u128 << bit), ..k6 };
            assert_ne!(s.hash(), k6.hash(), "src bit {bit}");
            assert_ne!(d.hash(), k6.hash(), "dst bit {bit}");
        }
        let one = k6.for_affinity(SessionAffinity::CLIENT_IP_NO_DESTINATION);
        assert_eq!((one.src, one.dst, one.sport), (k6.src, 0, 0));
    }

    #[test]
    fn hash_spreads_low_bits() {
        // 64 buckets over 64k sequential ports: no bucket over 2x its fair share.
        let mut buckets = [0u32; 64];
        for p in 0..65535u16 {
            let key = FlowKey { sport: p, ..k() };
            buckets[(key.hash() % 64) as usize] += 1;
        }
        let fair = 65535 / 64;
        assert!(buckets.iter().all(|b| *b < fair * 2 && *b > fair / 2), "{buckets:?}");
    }
}
