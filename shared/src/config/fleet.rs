//! Fleet settings of the config file: `[metrics]` (Prometheus endpoint) and `[announce]`
//! (VIP announcement through BIRD). Both sections are optional; absent = feature off.
//!
//! The rules are documented in docs/config.md ("[metrics]", "[announce]") and docs/decisions.md
//! ("VIP announcement").

use super::error::ConfigError;
use crate::net::SourceAddr;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `[metrics]`: the Prometheus text endpoint, served by a control-side thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:PORT` to listen on for `GET /metrics`, e.g. `"127.0.0.1:9101"` (IPv6 as
    /// `"[::1]:9101"`). Port 0 picks a free port (tests; the daemon logs the one chosen).
    pub listen: String,
    /// Per-endpoint series (`spillway_endpoint_*`, `spillway_health_*`): `true` always,
    /// `false` never, absent = while the config has at most
    /// [`PER_ENDPOINT_SERIES_AUTO_LIMIT`] endpoints (Prometheus's advice: keep the
    /// cardinality of a target bounded; per-backend and per-service series stay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_endpoint: Option<bool>,
}

/// Endpoints up to which `metrics.per_endpoint` absent means on: about 30 series per
/// endpoint (counters, gauges, the probe RTT histogram), so at most ~30,000 of them.
pub const PER_ENDPOINT_SERIES_AUTO_LIMIT: usize = 1_000;

impl MetricsConfig {
    /// Whether per-endpoint series are exported for a config of `endpoints` endpoints
    /// ([`MetricsConfig::per_endpoint`]).
    pub fn per_endpoint_series(&self, endpoints: usize) -> bool {
        self.per_endpoint.unwrap_or(endpoints <= PER_ENDPOINT_SERIES_AUTO_LIMIT)
    }

    /// The listen address, parsed. Errors: not `IP:PORT`, or an address a TCP listener
    /// cannot be bound to: multicast, broadcast, 240.0.0.0/4 or 0.0.0.0/8 other than the
    /// unspecified address (RFC 1812 §5.3.7; `0.0.0.0` and `::` listen on every address),
    /// or IPv4-mapped IPv6 (RFC 4291 §2.5.5.2: write the IPv4 address).
    pub fn addr(&self) -> Result<SocketAddr, ConfigError> {
        let a: SocketAddr = self
            .listen
            .parse()
            .map_err(|_| ConfigError::new("metrics.listen", format!("{:?}", self.listen), "must be IP:PORT, e.g. \"127.0.0.1:9101\" or \"[::1]:9101\""))?;
        let ip = a.ip();
        if (ip.never_unicast() && !ip.is_loopback() && !ip.is_unspecified()) || ip.ipv4_mapped() {
            return Err(ConfigError::new("metrics.listen", format!("{:?}", self.listen), "must be a unicast, loopback or unspecified address (not multicast, broadcast, 0.0.0.0/8, 240.0.0.0/4 or IPv4-mapped ::ffff:a.b.c.d)"));
        }
        Ok(a)
    }
}

/// Default name of the announcement interface.
pub const DEFAULT_ANNOUNCE_INTERFACE: &str = "spw-vip0";
/// Default local address of the announcement interface's point-to-point addresses.
pub const DEFAULT_ANNOUNCE_LOCAL: Ipv4Addr = Ipv4Addr::new(169, 254, 77, 1);
/// Default first local address of the IPv6 point-to-point addresses: a unique local
/// address (RFC 4193, global ID 53:7069:6c6c). Not link-local: BIRD's `direct` protocol
/// ignores link-scope addresses, so their peers would never be exported.
pub const DEFAULT_ANNOUNCE_LOCAL6: Ipv6Addr = Ipv6Addr::new(0xfd53, 0x7069, 0x6c6c, 0x7761, 0, 0, 0, 0);

/// `[announce]`: VIP announcement (docs/decisions.md "VIP announcement through BIRD").
///
/// The daemon creates a non-persistent TUN interface named `interface` and, for every
/// *ready* VIP, gives it the point-to-point address `local peer VIP/32`. BIRD's `direct`
/// protocol turns each such address into a `VIP/32` route that BGP exports. The kernel
/// deletes the interface, and with it every address, when the daemon's process ends in
/// any way (SIGKILL included), so BIRD withdraws without the daemon's help.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnounceConfig {
    /// Name of the TUN interface: 1–15 characters of `[A-Za-z0-9_.-]` (Linux IFNAMSIZ).
    #[serde(default = "default_interface")]
    pub interface: String,
    /// Local side of the point-to-point addresses (never announced); a link-local
    /// address by default. Must not be a VIP, unspecified, broadcast or multicast.
    #[serde(default = "default_local")]
    pub local_address: Ipv4Addr,
    /// First local address of the IPv6 VIPs' point-to-point addresses: IPv6 allows one
    /// peer per local address, so IPv6 VIP number `n` (the smallest free) is announced as
    /// `local_address6 + n peer VIP/128`. Default `fd53:7069:6c6c:7761::` (a unique local
    /// address). Must be global-scope unicast (not link-local: BIRD ignores those), and no
    /// VIP within the 65,536 addresses from it.
    #[serde(default = "default_local6")]
    pub local_address6: Ipv6Addr,
    /// Seconds a worker's poll counter may stand still before the VIPs are withdrawn
    /// (and the systemd watchdog stops being fed): 0.1–60.
    #[serde(default = "default_stall")]
    pub worker_stall_sec: f64,
}

fn default_interface() -> String {
    DEFAULT_ANNOUNCE_INTERFACE.to_string()
}
fn default_local() -> Ipv4Addr {
    DEFAULT_ANNOUNCE_LOCAL
}
fn default_local6() -> Ipv6Addr {
    DEFAULT_ANNOUNCE_LOCAL6
}
fn default_stall() -> f64 {
    1.0
}

impl Default for AnnounceConfig {
    fn default() -> Self {
        AnnounceConfig { interface: default_interface(), local_address: default_local(), local_address6: default_local6(), worker_stall_sec: default_stall() }
    }
}

/// Whether `name` is a valid Linux interface name (1–15 bytes of `[A-Za-z0-9_.-]`, not
/// `.` or `..`).
pub fn valid_ifname(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

impl AnnounceConfig {
    /// Checks the section; `vips` are the configured services' VIPs and the ports' own
    /// addresses (none may be a local address of the announcement interface).
    pub fn validate(&self, vips: &[IpAddr]) -> Result<(), ConfigError> {
        if !valid_ifname(&self.interface) {
            return Err(ConfigError::new("announce.interface", format!("{:?}", self.interface),
                "must be 1-15 characters of A-Z a-z 0-9 _ . - (a Linux interface name)"));
        }
        let l = self.local_address;
        if l.is_unspecified() || l.is_broadcast() || l.is_multicast() || vips.contains(&IpAddr::V4(l)) {
            return Err(ConfigError::new("announce.local_address", l,
                "must be a unicast address that is not a VIP (default 169.254.77.1)"));
        }
        let l6 = self.local_address6;
        let base = u128::from(l6);
        let link_local = l6.segments()[0] & 0xffc0 == 0xfe80;
        if l6.is_unspecified() || l6.is_loopback() || l6.is_multicast() || link_local || l6.to_ipv4_mapped().is_some() {
            return Err(ConfigError::new("announce.local_address6", l6,
                "must be a global-scope unicast IPv6 address: not unspecified, loopback, multicast, IPv4-mapped or link-local (BIRD does not export peers of link-local addresses); default fd53:7069:6c6c:7761::"));
        }
        if base > u128::MAX - 0xffff {
            return Err(ConfigError::new("announce.local_address6", l6, "must leave room for 65,536 addresses after it (one per IPv6 VIP) below ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
        }
        if let Some(v) = vips.iter().find(|v| matches!(v, IpAddr::V6(v) if (base..=base + 0xffff).contains(&u128::from(*v)))) {
            return Err(ConfigError::new("announce.local_address6", l6,
                format!("must not cover {v} (a VIP or port address): the 65,536 addresses from it are the announcement interface's own, one per IPv6 VIP; pick another prefix or move the address")));
        }
        if !(self.worker_stall_sec.is_finite() && (0.1..=60.0).contains(&self.worker_stall_sec)) {
            return Err(ConfigError::new("announce.worker_stall_sec", self.worker_stall_sec, "must be in 0.1..=60 seconds"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn load(text: &str) -> Result<Config, String> {
        let c = Config::from_toml(text)?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn sections_are_optional() {
        let c = load("").unwrap();
        assert_eq!(c.metrics, None);
        assert_eq!(c.announce, None);
    }

    #[test]
    fn metrics_listen_parsed() {
        let c = load("[metrics]\nlisten = \"127.0.0.1:9101\"\n").unwrap();
        assert_eq!(c.metrics.unwrap().addr().unwrap(), "127.0.0.1:9101".parse().unwrap());
        let c = load("[metrics]\nlisten = \"[::1]:0\"\n").unwrap();
        assert_eq!(c.metrics.unwrap().addr().unwrap().port(), 0);
    }

    #[test]
    fn metrics_listen_errors_name_field_value_and_form() {
        for bad in ["9101", "localhost:9101", "127.0.0.1", "127.0.0.1:70000", ""] {
            let e = load(&format!("[metrics]\nlisten = \"{bad}\"\n")).unwrap_err();
            assert!(e.starts_with("metrics.listen = "), "{e}");
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("IP:PORT"), "{e}");
        }
        assert!(Config::from_toml("[metrics]\nlisten = \"127.0.0.1:1\"\nport = 3\n").is_err(), "unknown field refused");
    }

    #[test]
    fn announce_defaults_and_round_trip() {
        let c = load("[announce]\n").unwrap();
        let a = c.announce.clone().unwrap();
        assert_eq!(a, AnnounceConfig::default());
        assert_eq!(a.interface, "spw-vip0");
        let again = load(&c.to_toml()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn announce_errors() {
        let e = load("[announce]\ninterface = \"a-very-long-interface\"\n").unwrap_err();
        assert!(e.starts_with("announce.interface = \"a-very-long-interface\""), "{e}");
        let e = load("[announce]\ninterface = \"bad name\"\n").unwrap_err();
        assert!(e.starts_with("announce.interface"), "{e}");
        for bad in ["fe80::1", "::", "ff02::1", "::1", "::ffff:10.0.0.1", "fd00::1"] {
            let e = load(&format!("[announce]\nlocal_address6 = \"{bad}\"\n[[services]]\nname = \"web\"\nvip = \"fd00::100\"\nport = 80\n")).unwrap_err();
            assert!(e.starts_with(&format!("announce.local_address6 = {bad}")), "{e}");
        }
        assert!(load("[announce]\nlocal_address6 = \"fd00::1:0\"\n[[services]]\nname = \"web\"\nvip = \"fd00::100\"\nport = 80\n").is_ok());
        let e = load("[announce]\nlocal_address = \"0.0.0.0\"\n").unwrap_err();
        assert!(e.starts_with("announce.local_address = 0.0.0.0"), "{e}");
        let e = load("[announce]\nworker_stall_sec = 0.0\n").unwrap_err();
        assert!(e.starts_with("announce.worker_stall_sec = 0"), "{e}");
        let e = load("[announce]\nlocal_address = \"10.0.0.100\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n").unwrap_err();
        assert!(e.starts_with("announce.local_address = 10.0.0.100"), "{e}");
    }

    #[test]
    fn ifname_rule() {
        assert!(valid_ifname("spw-vip0"));
        assert!(valid_ifname("a234567890abcde"));
        assert!(!valid_ifname("a234567890abcdef"));
        assert!(!valid_ifname(""));
        assert!(!valid_ifname(".."));
        assert!(!valid_ifname("a/b"));
    }
}
