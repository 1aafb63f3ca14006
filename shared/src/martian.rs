//! The source-address rule of new connections, drop reason `martian_source` (one copy, used
//! by the dataplane's worker and by `explain`, offline and live).
//!
//! A new TCP/UDP connection whose client (source) address is one of the forwarder's own
//! addresses — a VIP, or a port's `address` — is spoofed: the backend would answer the
//! forwarder itself (in L2 DSR, a VIP that the backend also holds on its loopback). The
//! worker drops it before any backend is chosen and counts it under
//! [`MARTIAN_SOURCE`] (RFC 1812 section 5.3.7, "Martian Address Filtering", for the idea;
//! docs/architecture.md for the drop reasons). Packets of connections already in the
//! connection table, fragments and port-less protocols are not subject to it.

use crate::config::Config;
use std::net::IpAddr;

/// Counter name of the drop reason (the dataplane's `DropReason::MartianSource`, shown by
/// `spillwayctl stats` and `explain`).
pub const MARTIAN_SOURCE: &str = "martian_source";

/// Whether a new connection from `src` (an address in host byte order: `u32` for IPv4,
/// `u128` for IPv6) is dropped as [`MARTIAN_SOURCE`]: `src` is one of the forwarder's own
/// addresses, as `is_own` answers (the worker: the snapshot's VIPs and port addresses of
/// that family; offline: [`own_addresses`]).
#[inline]
pub fn is_martian_source<A>(src: A, is_own: impl FnOnce(A) -> bool) -> bool {
    is_own(src)
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
}
