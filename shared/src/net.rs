//! Small network value types shared by the config model, the pipeline and the dataplane:
//! [`MacAddr`] and [`Ipv4Prefix`] with a longest-prefix-match table ([`PrefixTable`]).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
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

/// Longest-prefix-match table from IPv4 prefixes to values.
///
/// Built once (by the control thread), read on the packet path: `lookup` is allocation-free,
/// at most 33 probes of a sorted array per address (one binary search per prefix length present).
#[derive(Clone, Debug, Default)]
pub struct PrefixTable<V> {
    /// (prefix length, sorted (network, value) pairs), longest length first.
    by_len: Vec<(u8, Vec<(u32, V)>)>,
}

impl<V: Clone> PrefixTable<V> {
    /// Builds the table. A later duplicate of the same prefix replaces the earlier one.
    pub fn new(entries: impl IntoIterator<Item = (Ipv4Prefix, V)>) -> Self {
        let mut by_len: Vec<(u8, Vec<(u32, V)>)> = Vec::new();
        for (p, v) in entries {
            let net = u32::from(p.addr);
            match by_len.iter_mut().find(|(l, _)| *l == p.len) {
                Some((_, list)) => {
                    if let Some(e) = list.iter_mut().find(|(n, _)| *n == net) {
                        e.1 = v;
                    } else {
                        list.push((net, v));
                    }
                }
                None => by_len.push((p.len, vec![(net, v)])),
            }
        }
        for (_, list) in &mut by_len {
            list.sort_by_key(|(n, _)| *n);
        }
        by_len.sort_by_key(|e| std::cmp::Reverse(e.0));
        PrefixTable { by_len }
    }

    /// The value of the longest prefix containing `ip`, if any.
    pub fn lookup(&self, ip: Ipv4Addr) -> Option<&V> {
        let ip = u32::from(ip);
        for (len, list) in &self.by_len {
            let mask = if *len == 0 { 0 } else { u32::MAX << (32 - u32::from(*len)) };
            let key = ip & mask;
            if let Ok(i) = list.binary_search_by_key(&key, |(n, _)| *n) {
                return Some(&list[i].1);
            }
        }
        None
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
            ("0.0.0.0/0".parse().unwrap(), 0),
            ("10.0.0.0/8".parse().unwrap(), 8),
            ("10.1.0.0/16".parse().unwrap(), 16),
            ("10.1.2.3/32".parse().unwrap(), 32),
        ]);
        assert_eq!(t.lookup("10.1.2.3".parse().unwrap()), Some(&32));
        assert_eq!(t.lookup("10.1.2.4".parse().unwrap()), Some(&16));
        assert_eq!(t.lookup("10.9.2.4".parse().unwrap()), Some(&8));
        assert_eq!(t.lookup("192.0.2.1".parse().unwrap()), Some(&0));
        let empty: PrefixTable<u8> = PrefixTable::new([]);
        assert_eq!(empty.lookup("1.2.3.4".parse().unwrap()), None);
    }

    proptest::proptest! {
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
