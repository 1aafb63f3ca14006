//! The next-hop rule of every endpoint (docs/operations.md "Next hops"); the `[neighbors]`
//! section itself (timers, `ports[].gateway`) is [`crate::config::neighbors`].
//!
//! **Next hop of an endpoint** ([`next_hop`]): its configured `mac` when present; else
//! - L2 DSR: the endpoint's own address, resolved with ARP or, for IPv6, Neighbor
//!   Discovery (the backend is on the port's segment);
//! - IPIP/GUE: the `gateway` of the first port that has one (the router towards routed
//!   backends), else the endpoint's own address (an on-link backend).
//!
//! The daemon resolves the addresses of [`wanted`] with ARP (IPv4) or Neighbor Discovery
//! (IPv6, RFC 4861) on its own port; an endpoint
//! whose next hop is pending its first reply stays eligible (its packets are dropped until
//! then), one whose resolution failed is not eligible (like an unhealthy one).

use crate::config::{Config, ForwardingMode, Member, Service};
use std::net::{IpAddr, Ipv4Addr};

/// Where frames to one endpoint go at layer 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NextHop {
    /// The configured `mac`.
    Static([u8; 6]),
    /// The MAC resolved for this address with ARP or Neighbor Discovery (the endpoint's
    /// own, or the gateway's).
    Resolve(IpAddr),
}

/// The gateway of the ports (the first `ports[].gateway`; they are all equal).
pub fn gateway(cfg: &Config) -> Option<Ipv4Addr> {
    cfg.ports.iter().find_map(|p| p.gateway)
}

/// The next hop of endpoint `m` of service `svc` (module docs).
pub fn next_hop(cfg: &Config, svc: &Service, m: &Member) -> NextHop {
    if let Some(mac) = m.mac {
        return NextHop::Static(mac.0);
    }
    match (svc.forwarding_mode, gateway(cfg)) {
        (ForwardingMode::IPIP | ForwardingMode::GUE, Some(g)) => NextHop::Resolve(IpAddr::V4(g)),
        _ => NextHop::Resolve(m.address),
    }
}

/// Every address the daemon must resolve: the next hops of endpoints without a `mac`,
/// sorted and without duplicates.
pub fn wanted(cfg: &Config) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = cfg
        .services
        .iter()
        .flat_map(|s| s.backends.iter().flat_map(move |b| b.members().into_iter().map(move |m| next_hop(cfg, s, &m))))
        .filter_map(|h| match h {
            NextHop::Resolve(a) => Some(a),
            NextHop::Static(_) => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::neighbors::tests::{load, BASE};

    #[test]
    fn next_hops_follow_mode_mac_and_gateway() {
        let c = load(BASE).unwrap();
        let hop = |s: usize, b: usize| next_hop(&c, &c.services[s], &c.services[s].backends[b].members()[0]);
        assert_eq!(hop(0, 0), NextHop::Resolve("10.0.0.11".parse().unwrap()));
        assert_eq!(hop(0, 1), NextHop::Static([2, 0, 0, 0, 0, 0x12]));
        assert_eq!(hop(1, 0), NextHop::Resolve("192.168.7.1".parse().unwrap()), "IPIP without gateway: on-link");
        assert_eq!(wanted(&c), vec!["10.0.0.11".parse::<IpAddr>().unwrap(), "192.168.7.1".parse().unwrap()]);
        let gw = BASE.replacen("address = \"10.0.0.1\"", "address = \"10.0.0.1\"\ngateway = \"10.0.0.254\"", 1);
        let c = load(&gw).unwrap();
        let hop = |s: usize, b: usize| next_hop(&c, &c.services[s], &c.services[s].backends[b].members()[0]);
        assert_eq!(hop(1, 0), NextHop::Resolve("10.0.0.254".parse().unwrap()), "IPIP with gateway: the router");
        assert_eq!(hop(0, 0), NextHop::Resolve("10.0.0.11".parse().unwrap()), "L2 DSR never uses the gateway");
        assert_eq!(wanted(&c), vec!["10.0.0.11".parse::<IpAddr>().unwrap(), "10.0.0.254".parse().unwrap()]);
    }
}
