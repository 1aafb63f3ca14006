//! Small network value types shared by the config model, the pipeline and the dataplane:
//! [`MacAddr`], [`Ipv4Prefix`] and [`IpPrefix`] (either family) with a longest-prefix-match
//! table ([`PrefixTable`]).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A 48-bit Ethernet address, written `02:00:00:00:00:01`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}
impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Error for a malformed MAC address or prefix string; the text says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

impl FromStr for MacAddr {
    type Err = ParseError;
    /// Parses six hex octets separated by `:` or `-`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseError(format!("'{s}' is not a MAC address (expected six hex octets like 02:00:00:00:00:01)"));
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.is_empty() || part.len() > 2 {
                return Err(err());
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| err())?;
            n += 1;
        }
        if n != 6 {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An IPv4 prefix `a.b.c.d/len` (0 ≤ len ≤ 32). Host bits must be zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Prefix {
    /// Network address (host bits zero).
    pub addr: Ipv4Addr,
    /// Prefix length in bits, 0–32.
    pub len: u8,
}

impl Ipv4Prefix {
    /// Network mask of this prefix as a host-order `u32`.
    pub fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }
    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.addr)
    }
}

impl fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}
impl fmt::Debug for Ipv4Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Ipv4Prefix {
    type Err = ParseError;
    /// Parses `a.b.c.d/len`; a bare address means `/32`. Host bits set are an error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, l) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| ParseError(format!("'{s}' is not an IPv4 prefix (expected a.b.c.d/len)")))?;
        let len: u8 = l
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| ParseError(format!("'{s}': prefix length must be 0-32")))?;
        let p = Ipv4Prefix { addr, len };
        if u32::from(addr) & !p.mask() != 0 {
            return Err(ParseError(format!("'{s}' has host bits set (did you mean {}/{}?)",
                Ipv4Addr::from(u32::from(addr) & p.mask()), len)));
        }
        Ok(p)
    }
}

impl Serialize for Ipv4Prefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for Ipv4Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An IPv4 or IPv6 prefix: `a.b.c.d/len` (len 0–32) or `fd01::/64` (len 0–128). Host bits
/// must be zero. The `[[client_zones]] prefix` type (spec/zonal-affinity.md "Compatible
/// clients"); the family follows the address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpPrefix {
    /// Network address (host bits zero).
    pub addr: IpAddr,
    /// Prefix length in bits: 0–32 (IPv4) or 0–128 (IPv6).
    pub len: u8,
}

/// Mask of the top `len` bits of a 128-bit value.
#[inline]
fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

impl IpPrefix {
    /// Whether `ip` lies inside this prefix (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => Ipv4Prefix { addr: a, len: self.len }.contains(b),
            (IpAddr::V6(a), IpAddr::V6(b)) => u128::from(b) & mask128(self.len) == u128::from(a),
            _ => false,
        }
    }
}

impl From<Ipv4Prefix> for IpPrefix {
    fn from(p: Ipv4Prefix) -> Self {
        IpPrefix { addr: IpAddr::V4(p.addr), len: p.len }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}
impl fmt::Debug for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for IpPrefix {
    type Err = ParseError;
    /// Parses `a.b.c.d/len` or `v6addr/len`; a bare address is a host prefix (/32, /128).
    /// Host bits set are an error naming the intended prefix.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if !s.contains(':') {
            return s.parse::<Ipv4Prefix>().map(Into::into);
        }
        let (a, l) = s.split_once('/').unwrap_or((s, "128"));
        let addr: Ipv6Addr = a
            .parse()
            .map_err(|_| ParseError(format!("'{s}' is not an IP prefix (expected a.b.c.d/len or an IPv6 prefix like fd01::/64)")))?;
        let len: u8 = l
            .parse()
            .ok()
            .filter(|l| *l <= 128)
            .ok_or_else(|| ParseError(format!("'{s}': IPv6 prefix length must be 0-128")))?;
        let bits = u128::from(addr);
        if bits & !mask128(len) != 0 {
            return Err(ParseError(format!("'{s}' has host bits set (did you mean {}/{}?)", Ipv6Addr::from(bits & mask128(len)), len)));
        }
        Ok(IpPrefix { addr: IpAddr::V6(addr), len })
    }
}

impl Serialize for IpPrefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for IpPrefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One family's prefixes: (prefix length, sorted (network, value) pairs), longest first.
#[derive(Clone, Debug)]
struct ByLen<K, V> {
    by_len: Vec<(u8, Vec<(K, V)>)>,
}

impl<K, V> Default for ByLen<K, V> {
    fn default() -> Self {
        ByLen { by_len: Vec::new() }
    }
}

impl<K: Copy + Ord, V: Clone> ByLen<K, V> {
    fn insert(&mut self, net: K, len: u8, v: V) {
        match self.by_len.iter_mut().find(|(l, _)| *l == len) {
            Some((_, list)) => {
                if let Some(e) = list.iter_mut().find(|(n, _)| *n == net) {
                    e.1 = v;
                } else {
                    list.push((net, v));
                }
            }
            None => self.by_len.push((len, vec![(net, v)])),
        }
    }
    fn finish(&mut self) {
        for (_, list) in &mut self.by_len {
            list.sort_by_key(|(n, _)| *n);
        }
        self.by_len.sort_by_key(|e| std::cmp::Reverse(e.0));
    }
    #[inline]
    fn lookup(&self, ip: K, mask: impl Fn(K, u8) -> K) -> Option<&V> {
        for (len, list) in &self.by_len {
            let key = mask(ip, *len);
            if let Ok(i) = list.binary_search_by_key(&key, |(n, _)| *n) {
                return Some(&list[i].1);
            }
        }
        None
    }
}

/// Longest-prefix-match table from IPv4 and IPv6 prefixes to values (one table per family;
/// an address only matches prefixes of its own family).
///
/// Built once (by the control thread), read on the packet path: lookups are allocation-free,
/// at most one binary search per prefix length present (≤ 33 for IPv4, ≤ 129 for IPv6).
#[derive(Clone, Debug)]
pub struct PrefixTable<V> {
    v4: ByLen<u32, V>,
    v6: ByLen<u128, V>,
}

impl<V> Default for PrefixTable<V> {
    fn default() -> Self {
        PrefixTable { v4: ByLen::default(), v6: ByLen::default() }
    }
}

impl<V: Clone> PrefixTable<V> {
    /// Builds the table. A later duplicate of the same prefix replaces the earlier one.
    pub fn new<P: Into<IpPrefix>>(entries: impl IntoIterator<Item = (P, V)>) -> Self {
        let mut t = PrefixTable::default();
        for (p, v) in entries {
            let p: IpPrefix = p.into();
            match p.addr {
                IpAddr::V4(a) => t.v4.insert(u32::from(a), p.len, v),
                IpAddr::V6(a) => t.v6.insert(u128::from(a), p.len, v),
            }
        }
        t.v4.finish();
        t.v6.finish();
        t
    }

    /// The value of the longest prefix (of the same family) containing `ip`, if any.
    pub fn lookup(&self, ip: impl Into<IpAddr>) -> Option<&V> {
        match ip.into() {
            IpAddr::V4(a) => self.lookup_v4(u32::from(a)),
            IpAddr::V6(a) => self.lookup_v6(u128::from(a)),
        }
    }

    /// [`lookup`](Self::lookup) of an IPv4 address in host order.
    #[inline]
    pub fn lookup_v4(&self, ip: u32) -> Option<&V> {
        self.v4.lookup(ip, |ip, len| if len == 0 { 0 } else { ip & (u32::MAX << (32 - u32::from(len))) })
    }

    /// [`lookup`](Self::lookup) of an IPv6 address as a host-order `u128`.
    #[inline]
    pub fn lookup_v6(&self, ip: u128) -> Option<&V> {
        self.v6.lookup(ip, |ip, len| ip & mask128(len))
    }
}

/// An address that may be checked as a source: `u32` (IPv4, host byte order), `u128` (IPv6)
/// or [`IpAddr`].
pub trait SourceAddr: Copy {
    /// The address can never be a unicast address ([`crate::martian`] module doc's first
    /// rule: unspecified, "this network", loopback, multicast, reserved, broadcast; RFC 1812
    /// §5.3.7, RFC 4291 §2.5.2, §2.7). Also the ARP sender rule
    /// (RFC 826 / RFC 5227: such a sender is never answered nor learned).
    fn never_unicast(self) -> bool;
    /// The address is never valid as the source of a packet the forwarder forwards:
    /// [`SourceAddr::never_unicast`], or link-local or (IPv6) IPv4-mapped ([`crate::martian`]
    /// module doc's second rule).
    fn never_a_source(self) -> bool;
    /// The address is IPv6 and IPv4-mapped, `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2: an
    /// internal representation of an IPv4 node, never an address on the wire); never for
    /// IPv4.
    fn ipv4_mapped(self) -> bool;
}

impl SourceAddr for u32 {
    #[inline]
    fn never_unicast(self) -> bool {
        let first = self >> 24;
        first == 0 || first == 127 || first >= 224
    }
    #[inline]
    fn never_a_source(self) -> bool {
        // 169.254.0.0/16: link-local (RFC 3927 §7).
        self.never_unicast() || self >> 16 == 0xa9fe
    }
    #[inline]
    fn ipv4_mapped(self) -> bool {
        false
    }
}

impl SourceAddr for u128 {
    #[inline]
    fn never_unicast(self) -> bool {
        self == 0 || self == 1 || self >> 120 == 0xff
    }
    #[inline]
    fn never_a_source(self) -> bool {
        // fe80::/10 link-local (RFC 4291 §2.5.6); ::ffff:0:0/96 IPv4-mapped (§2.5.5.2).
        self.never_unicast() || self >> 118 == 0x3fa || self.ipv4_mapped()
    }
    #[inline]
    fn ipv4_mapped(self) -> bool {
        self >> 32 == 0xffff
    }
}

impl SourceAddr for IpAddr {
    fn never_unicast(self) -> bool {
        match self {
            IpAddr::V4(a) => u32::from(a).never_unicast(),
            IpAddr::V6(a) => u128::from(a).never_unicast(),
        }
    }
    fn never_a_source(self) -> bool {
        match self {
            IpAddr::V4(a) => u32::from(a).never_a_source(),
            IpAddr::V6(a) => u128::from(a).never_a_source(),
        }
    }
    fn ipv4_mapped(self) -> bool {
        matches!(self, IpAddr::V6(a) if u128::from(a).ipv4_mapped())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_roundtrip_and_errors() {
        let m: MacAddr = "02:00:00:00:00:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0, 0, 0, 1]);
        assert_eq!(m.to_string(), "02:00:00:00:00:01");
        assert!("02:00:00:00:00".parse::<MacAddr>().is_err());
        assert!("02:00:00:00:00:01:02".parse::<MacAddr>().is_err());
        assert!("zz:00:00:00:00:01".parse::<MacAddr>().is_err());
    }

    #[test]
    fn prefix_parse_rejects_host_bits() {
        assert!("10.1.0.0/16".parse::<Ipv4Prefix>().is_ok());
        let e = "10.1.0.1/16".parse::<Ipv4Prefix>().unwrap_err();
        assert!(e.0.contains("host bits"), "{e}");
        assert!("10.1.0.0/33".parse::<Ipv4Prefix>().is_err());
    }

    #[test]
    fn longest_prefix_wins() {
        let t = PrefixTable::new([
            ("0.0.0.0/0".parse::<Ipv4Prefix>().unwrap(), 0),
            ("10.0.0.0/8".parse().unwrap(), 8),
            ("10.1.0.0/16".parse().unwrap(), 16),
            ("10.1.2.3/32".parse().unwrap(), 32),
        ]);
        assert_eq!(t.lookup("10.1.2.3".parse::<Ipv4Addr>().unwrap()), Some(&32));
        assert_eq!(t.lookup("10.1.2.4".parse::<Ipv4Addr>().unwrap()), Some(&16));
        assert_eq!(t.lookup("10.9.2.4".parse::<Ipv4Addr>().unwrap()), Some(&8));
        assert_eq!(t.lookup("192.0.2.1".parse::<Ipv4Addr>().unwrap()), Some(&0));
        let empty: PrefixTable<u8> = PrefixTable::new::<IpPrefix>([]);
        assert_eq!(empty.lookup("1.2.3.4".parse::<Ipv4Addr>().unwrap()), None);
    }

    #[test]
    fn ipv6_prefixes_parse_and_match_by_family() {
        let p: IpPrefix = "fd01::/64".parse().unwrap();
        assert_eq!(p.to_string(), "fd01::/64");
        let e = "fd01::1/64".parse::<IpPrefix>().unwrap_err();
        assert!(e.0.contains("host bits") && e.0.contains("fd01::/64"), "{e}");
        assert!("fd01::/129".parse::<IpPrefix>().is_err());
        assert!("10.0.0.0/8".parse::<IpPrefix>().is_ok());
        let t = PrefixTable::new([
            ("::/0".parse::<IpPrefix>().unwrap(), 0),
            ("fd01::/64".parse().unwrap(), 64),
            ("fd01::5/128".parse().unwrap(), 128),
            ("0.0.0.0/0".parse().unwrap(), 4),
        ]);
        assert_eq!(t.lookup("fd01::5".parse::<IpAddr>().unwrap()), Some(&128));
        assert_eq!(t.lookup("fd01::6".parse::<IpAddr>().unwrap()), Some(&64));
        assert_eq!(t.lookup("fd02::6".parse::<IpAddr>().unwrap()), Some(&0));
        // IPv4 addresses never match IPv6 prefixes (not even ::/0), and the reverse
        assert_eq!(t.lookup("10.1.2.3".parse::<Ipv4Addr>().unwrap()), Some(&4));
        let only6 = PrefixTable::new([("::/0".parse::<IpPrefix>().unwrap(), 1)]);
        assert_eq!(only6.lookup("10.1.2.3".parse::<Ipv4Addr>().unwrap()), None);
    }

    proptest::proptest! {
        #[test]
        fn lpm6_matches_linear_scan(entries in proptest::collection::vec((proptest::num::u128::ANY, 0u8..=128, 0u16..100), 0..40), ip in proptest::num::u128::ANY, near in proptest::option::of(0usize..40)) {
            let prefixes: Vec<(IpPrefix, u16)> = entries.iter().map(|(a, l, v)| {
                (IpPrefix { addr: IpAddr::V6(Ipv6Addr::from(a & mask128(*l))), len: *l }, *v)
            }).collect();
            let t = PrefixTable::new(prefixes.clone());
            // half the time, probe an address inside one of the prefixes
            let ip = match near.and_then(|i| entries.get(i)) { Some((a, l, _)) => (a & mask128(*l)) | (ip & !mask128(*l)), None => ip };
            let ip = IpAddr::V6(Ipv6Addr::from(ip));
            let mut best: Option<(u8, u16)> = None;
            for (p, v) in &prefixes {
                if p.contains(ip) && best.is_none_or(|(l, _)| p.len >= l) { best = Some((p.len, *v)); }
            }
            proptest::prop_assert_eq!(t.lookup(ip).copied(), best.map(|b| b.1));
        }


        #[test]
        fn lpm_matches_linear_scan(entries in proptest::collection::vec((proptest::num::u32::ANY, 0u8..=32, 0u16..100), 0..40), ip in proptest::num::u32::ANY) {
            let prefixes: Vec<(Ipv4Prefix, u16)> = entries.iter().map(|(a, l, v)| {
                let mask = if *l == 0 { 0 } else { u32::MAX << (32 - u32::from(*l)) };
                (Ipv4Prefix { addr: Ipv4Addr::from(a & mask), len: *l }, *v)
            }).collect();
            let t = PrefixTable::new(prefixes.clone());
            let ip = Ipv4Addr::from(ip);
            // reference: longest containing prefix, last duplicate wins
            let mut best: Option<(u8, u16)> = None;
            for (p, v) in &prefixes {
                if p.contains(ip) && best.is_none_or(|(l, _)| p.len >= l) { best = Some((p.len, *v)); }
            }
            proptest::prop_assert_eq!(t.lookup(ip).copied(), best.map(|b| b.1));
        }
    }
}
