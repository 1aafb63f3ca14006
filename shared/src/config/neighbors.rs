//! `[neighbors]`: the timers of next-hop resolution (ARP, Neighbor Discovery) and the
//! rule of `ports[].gateway` (docs/config.md "[neighbors]"). The next hop of each
//! endpoint is [`crate::neighbors`].

use super::error::ConfigError;
use super::Config;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr};

/// `[neighbors]`: resolution of next hops whose `mac` is not configured (ARP for IPv4,
/// Neighbor Discovery for IPv6; the same timers for both).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighborsConfig {
    /// Seconds after a reply before a resolved entry is asked again (1–3,600; default 30).
    /// A backend whose MAC changes (a replaced VM) is followed within this time.
    #[serde(default = "d_refresh", deserialize_with = "super::ranged::neighbors_refresh_sec")]
    pub refresh_sec: u32,
    /// Seconds after the last reply before an entry expires and its endpoints stop being
    /// eligible (2–86,400, more than `refresh_sec`; default 120).
    #[serde(default = "d_expiry", deserialize_with = "super::ranged::neighbors_expiry_sec")]
    pub expiry_sec: u32,
    /// Milliseconds a request (ARP request, Neighbor Solicitation) waits for its reply
    /// before it counts as a timeout and is sent again (100–60,000; default 1,000).
    #[serde(default = "d_retry", deserialize_with = "super::ranged::neighbors_retry_ms")]
    pub retry_ms: u32,
    /// Send a gratuitous ARP (RFC 5227 §3 announcement) for every VIP and port address on
    /// every port at start, and for VIPs added later (default false: a port then sends
    /// nothing it was not asked for, which replay tests and captures rely on; turn it on
    /// where switches and routers must learn a new or moved host at once).
    #[serde(default)]
    pub gratuitous_arp: bool,
    /// Send MLDv2 reports (RFC 3810) for the solicited-node groups of the IPv6 VIPs and
    /// port addresses, so that MLD-snooping switches forward the Neighbor Solicitations for
    /// them (docs/operations.md "Multicast and MLD"). Default false for the same reason as
    /// `gratuitous_arp`: a port sends nothing it was not asked for (replayed captures count
    /// every output frame); turn it on behind a switch that snoops MLD. The NIC's multicast
    /// filter is programmed either way.
    #[serde(default)]
    pub mld_reports: bool,
}

fn d_refresh() -> u32 {
    30
}
fn d_expiry() -> u32 {
    120
}
fn d_retry() -> u32 {
    1000
}

impl Default for NeighborsConfig {
    fn default() -> Self {
        NeighborsConfig { refresh_sec: d_refresh(), expiry_sec: d_expiry(), retry_ms: d_retry(), gratuitous_arp: false, mld_reports: false }
    }
}

impl NeighborsConfig {
    /// Whether every field has its default (the section is then not written back).
    pub fn is_default(&self) -> bool {
        *self == NeighborsConfig::default()
    }

    /// Checks the ranges of the limits table, and `expiry_sec > refresh_sec`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (f, v) in [("refresh_sec", self.refresh_sec), ("expiry_sec", self.expiry_sec), ("retry_ms", self.retry_ms)] {
            let path = format!("neighbors.{f}");
            super::limits::get(&path).check_int(&path, v.into())?;
        }
        if self.expiry_sec <= self.refresh_sec {
            return Err(ConfigError::new("neighbors.expiry_sec", self.expiry_sec,
                format!("must be more than neighbors.refresh_sec = {} (an entry is refreshed before it expires)", self.refresh_sec)));
        }
        if u64::from(self.retry_ms) > u64::from(self.refresh_sec) * 1000 {
            return Err(ConfigError::new("neighbors.retry_ms", self.retry_ms,
                format!("must be at most neighbors.refresh_sec = {} s in ms", self.refresh_sec)));
        }
        Ok(())
    }
}

/// Checks `ports[].gateway`: a unicast address that is not a VIP, and one gateway for
/// all ports (encapsulated traffic has one next hop per endpoint).
pub fn validate_gateways(cfg: &Config) -> Result<(), ConfigError> {
    let mut first: Option<Ipv4Addr> = None;
    for (i, p) in cfg.ports.iter().enumerate() {
        let Some(g) = p.gateway else { continue };
        let path = format!("ports[{i}].gateway");
        if g.is_unspecified() || g.is_broadcast() || g.is_multicast() || g.is_loopback() {
            return Err(ConfigError::new(path, g, "must be a unicast IPv4 address (the router towards routed backends)"));
        }
        if cfg.services.iter().any(|s| s.vip == IpAddr::V4(g)) {
            return Err(ConfigError::new(path, g, "must not be a VIP"));
        }
        match first {
            Some(f) if f != g => {
                return Err(ConfigError::new(path, g, format!("must equal the gateway of the other ports ({f}): one gateway per host")));
            }
            _ => first = Some(g),
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Parses and validates `text` (the error as text); also used by the next-hop tests
    /// of [`crate::neighbors`].
    pub(crate) fn load(text: &str) -> Result<Config, String> {
        let c = Config::from_toml(text)?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// One port without a gateway and two services: `dsr` (L2 DSR, b1 without and b2 with a MAC) and
    /// `tun` (IPIP, r1); also used by the next-hop tests of [`crate::neighbors`].
    pub(crate) const BASE: &str = r#"
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.1"
[[services]]
name = "dsr"
vip = "10.0.0.100"
port = 80
[[services.backends]]
name = "b1"
address = "10.0.0.11"
[[services.backends]]
name = "b2"
address = "10.0.0.12"
mac = "02:00:00:00:00:12"
[[services]]
name = "tun"
vip = "10.0.0.101"
port = 80
forwarding_mode = "IPIP"
[[services.backends]]
name = "r1"
address = "192.168.7.1"
"#;

    #[test]
    fn section_defaults_and_round_trip() {
        let c = load(BASE).unwrap();
        assert!(c.neighbors.is_default());
        assert!(!c.to_toml().contains("[neighbors]"), "defaults are not written back");
        let c = load(&format!("[neighbors]\nrefresh_sec = 2\nexpiry_sec = 10\nretry_ms = 200\ngratuitous_arp = false\n{BASE}")).unwrap();
        assert_eq!(c.neighbors, NeighborsConfig { refresh_sec: 2, expiry_sec: 10, retry_ms: 200, gratuitous_arp: false, mld_reports: false });
        assert_eq!(load(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn errors_name_field_value_and_range() {
        let e = load("[neighbors]\nrefresh_sec = 0\n").unwrap_err();
        assert!(e.starts_with("neighbors.refresh_sec = 0: must be in 1..=3600"), "{e}");
        let e = load("[neighbors]\nexpiry_sec = 100000\n").unwrap_err();
        assert!(e.starts_with("neighbors.expiry_sec = 100000: must be in 2..=86400"), "{e}");
        let e = load("[neighbors]\nretry_ms = 50\n").unwrap_err();
        assert!(e.starts_with("neighbors.retry_ms = 50: must be in 100..=60000"), "{e}");
        let e = load("[neighbors]\nrefresh_sec = 60\nexpiry_sec = 60\n").unwrap_err();
        assert!(e.starts_with("neighbors.expiry_sec = 60: must be more than neighbors.refresh_sec = 60"), "{e}");
        let e = load("[neighbors]\nrefresh_sec = 1\nexpiry_sec = 5\nretry_ms = 2000\n").unwrap_err();
        assert!(e.starts_with("neighbors.retry_ms = 2000"), "{e}");
        assert!(load("[neighbors]\nrefresh = 3\n").is_err(), "unknown field refused");
    }

    #[test]
    fn gateway_rules() {
        let with_gw = |g: &str| BASE.replacen("address = \"10.0.0.1\"", &format!("address = \"10.0.0.1\"\ngateway = \"{g}\""), 1);
        assert!(load(&with_gw("10.0.0.254")).is_ok());
        let e = load(&with_gw("0.0.0.0")).unwrap_err();
        assert!(e.starts_with("ports[0].gateway = 0.0.0.0: must be a unicast"), "{e}");
        let e = load(&with_gw("10.0.0.100")).unwrap_err();
        assert!(e.starts_with("ports[0].gateway = 10.0.0.100: must not be a VIP"), "{e}");
        let two = format!("{}\n[[ports]]\nname = \"p1\"\ndevice = \"net_null1\"\ngateway = \"10.0.0.253\"\n", with_gw("10.0.0.254"));
        let e = load(&two).unwrap_err();
        assert!(e.starts_with("ports[1].gateway = 10.0.0.253: must equal the gateway of the other ports (10.0.0.254)"), "{e}");
    }

}
