//! The source-address rule of new connections, drop reason `martian_source` (one copy, used
//! by the dataplane's worker and by `explain`, offline and live).
//!
//! A new TCP/UDP connection is dropped before any backend is chosen, and counted under
//! [`MARTIAN_SOURCE`] (docs/architecture.md for the drop reasons), when its client (source)
//! address
//! * can never be a unicast source (RFC 1812 §5.3.7 "Martian Address Filtering", §4.2.2.11;
//!   RFC 4291 §2.5.2, §2.7): IPv4 0.0.0.0/8 ("this network"), 127.0.0.0/8 (loopback),
//!   224.0.0.0/4 (multicast), 240.0.0.0/4 (reserved, with the limited broadcast
//!   255.255.255.255); IPv6 `::` (unspecified), `::1` (loopback), ff00::/8 (multicast).
//!   A backend's answer to such a source would go to a group, the backend itself or
//!   nowhere, so the packet can only be spoofed or misrouted; or
//! * is a unicast address that is never valid as the source of a forwarded packet: IPv4
//!   169.254.0.0/16 and IPv6 fe80::/10 (link-local: RFC 3927 §7 and RFC 4291 §2.5.6, a
//!   router must not forward a packet with a link-local source), and IPv6 ::ffff:0:0/96
//!   (IPv4-mapped, RFC 4291 §2.5.5.2: an internal representation of an IPv4 node, never an
//!   address on the wire; RFC 6890 lists it as not forwardable) — a mapped 127.0.0.1 would
//!   otherwise pass where the IPv4 one is refused; or
//! * is one of the forwarder's own addresses — a VIP, or a port's `address` — so it is
//!   spoofed: the backend would answer the forwarder itself (in L2 DSR, a VIP that the
//!   backend also holds on its loopback).
//!
//! Packets of connections already in the connection table, fragments and port-less
//! protocols are not subject to it.

use crate::config::Config;
use std::net::IpAddr;

/// Counter name of the drop reason (the dataplane's `DropReason::MartianSource`, shown by
/// `spillwayctl stats` and `explain`).
pub const MARTIAN_SOURCE: &str = "martian_source";

pub use crate::net::SourceAddr;

/// Whether a new connection from `src` is dropped as [`MARTIAN_SOURCE`]: `src` can never be
/// a unicast source, or it is one of the forwarder's own addresses, as `is_own` answers
/// (the worker: the snapshot's VIPs and port addresses of that family; offline:
/// [`own_addresses`]).
#[inline]
pub fn is_martian_source<A: SourceAddr>(src: A, is_own: impl FnOnce(A) -> bool) -> bool {
    src.never_a_source() || is_own(src)
}

/// The forwarder's own addresses in a config: every service's VIP and every
/// `ports[].address` and `address6` (sorted, without duplicates). The daemon's snapshot
/// holds the same set (the addresses it answers ARP and Neighbor Solicitations for).
pub fn own_addresses(cfg: &Config) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = cfg
        .services
        .iter()
        .map(|s| s.vip)
        .chain(cfg.ports.iter().filter_map(|p| p.address))
        .chain(cfg.ports.iter().filter_map(|p| p.address6.map(IpAddr::V6)))
        .filter(|a| !a.is_unspecified())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// [`is_martian_source`] against a config's [`own_addresses`] (offline `explain`).
pub fn is_martian_source_in(cfg: &Config, src: impl Into<IpAddr>) -> bool {
    let own = own_addresses(cfg);
    is_martian_source(src.into(), |a| own.contains(&a))
}

/// The sentence `explain` prints for a new connection from `src` dropped by this rule.
pub fn explanation(src: IpAddr) -> String {
    if src.never_a_source() && !src.never_unicast() {
        return format!("new connection dropped: {MARTIAN_SOURCE}: the client address {src} is link-local or IPv4-mapped, never the source of a forwarded packet (RFC 3927 §7, RFC 4291 §2.5.5.2, §2.5.6), so the dataplane drops a new connection from it before choosing a backend");
    }
    if src.never_a_source() {
        return format!("new connection dropped: {MARTIAN_SOURCE}: the client address {src} can never be a unicast source (unspecified, loopback, multicast, broadcast or reserved; RFC 1812 §5.3.7), so the dataplane drops a new connection from it before choosing a backend");
    }
    format!("new connection dropped: {MARTIAN_SOURCE}: the client address {src} is one of the forwarder's own addresses (a VIP or a port address), so the dataplane drops a new connection from it before choosing a backend (spoofed source)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn vips_and_port_addresses_are_own_and_clients_are_not() {
        let cfg = Config::from_toml(
            "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\n",
        )
        .unwrap();
        assert_eq!(own_addresses(&cfg), vec![IpAddr::from(Ipv4Addr::new(10, 0, 0, 2)), IpAddr::from(Ipv4Addr::new(10, 0, 0, 100))]);
        assert!(is_martian_source_in(&cfg, Ipv4Addr::new(10, 0, 0, 100)));
        assert!(is_martian_source_in(&cfg, Ipv4Addr::new(10, 0, 0, 2)));
        assert!(!is_martian_source_in(&cfg, Ipv4Addr::new(10, 1, 0, 10)));
        assert!(!is_martian_source_in(&cfg, Ipv4Addr::new(10, 0, 1, 1)), "a backend is not one of our addresses");
    }

    #[test]
    fn addresses_that_are_never_a_source() {
        for a in ["0.0.0.0", "0.1.2.3", "127.0.0.1", "224.0.0.5", "239.255.255.255", "240.0.0.1", "255.255.255.255", "::", "::1", "ff02::1", "ff0e::2"] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(ip.never_a_source(), "{a}");
            assert!(explanation(ip).contains("never be a unicast source"), "{a}");
        }
        for a in ["169.254.0.0", "169.254.1.1", "169.254.255.255", "fe80::1", "febf:ffff::1", "::ffff:127.0.0.1", "::ffff:10.1.0.7", "::ffff:0.0.0.0"] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(ip.never_a_source() && !ip.never_unicast(), "{a}");
            assert!(explanation(ip).contains("link-local or IPv4-mapped"), "{a}");
        }
        for a in ["1.0.0.0", "10.1.0.7", "126.255.255.255", "128.0.0.1", "169.253.255.255", "169.255.0.0", "223.255.255.255", "2001:db8::1", "fec0::1", "fe7f::1", "fd00::7", "::2", "::fffe:7f00:1", "::1:ffff:7f00:1"] {
            assert!(!a.parse::<IpAddr>().unwrap().never_a_source(), "{a}");
        }
    }

    proptest::proptest! {
        /// The integer forms agree with the standard library's classification.
        #[test]
        fn integer_forms_agree_with_std(v4: u32, v6: u128) {
            let a = Ipv4Addr::from(v4);
            let never_unicast4 = a.octets()[0] == 0 || a.is_loopback() || a.is_multicast() || a.octets()[0] >= 240;
            proptest::prop_assert_eq!(v4.never_unicast(), never_unicast4);
            proptest::prop_assert_eq!(v4.never_a_source(), never_unicast4 || a.is_link_local());
            let b = std::net::Ipv6Addr::from(v6);
            let never_unicast6 = b.is_unspecified() || b.is_loopback() || b.is_multicast();
            proptest::prop_assert_eq!(v6.never_unicast(), never_unicast6);
            proptest::prop_assert_eq!(v6.never_a_source(), never_unicast6 || b.is_unicast_link_local() || b.to_ipv4_mapped().is_some());
            // Both edges of each range (a random u128 almost never lands in one).
            let link_local = (0xfe80u128 << 112) | (v6 & ((1u128 << 118) - 1));
            proptest::prop_assert!(link_local.never_a_source() && std::net::Ipv6Addr::from(link_local).is_unicast_link_local());
            let mapped = (0xffffu128 << 32) | u128::from(v4);
            proptest::prop_assert!(mapped.never_a_source() && std::net::Ipv6Addr::from(mapped).to_ipv4_mapped().is_some());
        }
    }
}
