//! Configuration model (TOML) and its validation.
//!
//! One model serves the daemon's config file, live edits from `spillwayctl`, and the offline
//! policy scenarios. Field names follow the specs in snake_case (see `docs/config.md`).
//! [`Config::validate`] checks every range of the specs and reports the first problem as a
//! [`ConfigError`] naming the field path, the value and the allowed range. The ranges live in
//! one table, [`crate::limits::LIMITS`], which also generates docs/config.md's range table.
//! Integer fields deserialise through `i64` (module `ranged`), so `weight = -1` or
//! `port = 65536` get the same kind of message as `weight = 0`.
//!
//! Over 600 lines: the model, its serde attributes and its validation are one unit that
//! must change together (a field, its default, its range); the tests are at the end.

use crate::net::{IpPrefix, MacAddr};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A configuration problem: `path` is the TOML path of the field (e.g.
/// `services[0].backends[2].weight`), `value` what was given and `allowed` the rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path} = {value}: {allowed}")]
pub struct ConfigError {
    /// Field path, e.g. `services[0].spillover_ratio`.
    pub path: String,
    /// The offending value as written.
    pub value: String,
    /// What is allowed, e.g. `must be in [0.0, 1.0] (spec/zonal-affinity.md)`.
    pub allowed: String,
}

impl ConfigError {
    /// Builds an error from its three parts.
    pub fn new(path: impl Into<String>, value: impl ToString, allowed: impl Into<String>) -> Self {
        ConfigError { path: path.into(), value: value.to_string(), allowed: allowed.into() }
    }
    /// The last component of the path without indices (`spillover_ratio`).
    pub fn field(&self) -> &str {
        let last = self.path.rsplit('.').next().unwrap_or(&self.path);
        last.split('[').next().unwrap_or(last)
    }
}

/// Errors of loading a config file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// File path.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// TOML syntax or type error (the text names line and column).
    #[error("{path}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// Parser message.
        message: String,
    },
    /// A value out of range.
    #[error("{path}: {source}")]
    Invalid {
        /// File path.
        path: String,
        /// The rule broken.
        source: ConfigError,
    },
}

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Process-level settings (EAL, workers, control socket).
    #[serde(default)]
    pub dataplane: DataplaneConfig,
    /// DPDK ports, by name.
    #[serde(default)]
    pub ports: Vec<PortConfig>,
    /// Where this forwarder instance runs (zone, region); used by capacity and isolation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarder: Option<Location>,
    /// Known zones with their region.
    #[serde(default)]
    pub zones: Vec<Location>,
    /// Round-trip-time hints in ms: `rtt_ms.<from_zone>.<to_zone>`; symmetric.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rtt_ms: std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>>,
    /// Client prefix → zone table (longest prefix match). spec/zonal-affinity.md "Compatible clients".
    #[serde(default)]
    pub client_zones: Vec<ClientZone>,
    /// Connection tracking table size and timeouts.
    #[serde(default)]
    pub conntrack: ConntrackConfig,
    /// Load-balanced services (VIPs).
    #[serde(default)]
    pub services: Vec<Service>,
    /// `[metrics]`: Prometheus endpoint (absent = off). See [`crate::fleet::MetricsConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<crate::fleet::MetricsConfig>,
    /// `[announce]`: VIP announcement through BIRD (absent = off). See
    /// [`crate::fleet::AnnounceConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announce: Option<crate::fleet::AnnounceConfig>,
    /// `[sync]`: flow-state sync with the other hosts of a fleet (absent = off). See
    /// [`crate::sync::SyncConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<crate::sync::SyncConfig>,
    /// `[neighbors]`: ARP / Neighbor Discovery resolution of next hops without a `mac`
    /// (defaults when absent).
    /// See [`crate::neighbors::NeighborsConfig`].
    #[serde(default, skip_serializing_if = "crate::neighbors::NeighborsConfig::is_default")]
    pub neighbors: crate::neighbors::NeighborsConfig,
}

/// `[dataplane]`: process-level settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Extra EAL arguments, e.g. `["--no-huge", "-m", "512", "--no-pci"]`.
    #[serde(default)]
    pub eal_args: Vec<String>,
    /// Number of poll-mode workers (1–64); worker i polls RX queue i of every port.
    #[serde(default = "default_workers", deserialize_with = "ranged::workers")]
    pub workers: u16,
    /// CPU cores to pin workers to, in order; empty = cores 1.. (core 0 left to control).
    #[serde(default, deserialize_with = "ranged::worker_cores")]
    pub worker_cores: Vec<usize>,
    /// mbufs in the pool per port (power of two minus one is best), 1023–1048575.
    #[serde(default = "default_mbufs", deserialize_with = "ranged::mbufs_per_port")]
    pub mbufs_per_port: u32,
    /// RX/TX descriptors per queue, 64–4096.
    #[serde(default = "default_descriptors", deserialize_with = "ranged::descriptors")]
    pub descriptors: u16,
    /// Control socket path.
    #[serde(default = "default_socket")]
    pub socket: String,
    /// Group (name) whose members may use the control socket besides root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    /// Microseconds a worker sleeps after a poll that received nothing (0 = pure busy
    /// polling, the production setting; >0 shares a core on small test hosts). 0–10,000.
    #[serde(default, deserialize_with = "ranged::idle_sleep_us")]
    pub idle_sleep_us: u32,
    /// ICMP errors (fragmentation needed, Packet Too Big) each worker sends per second at
    /// most, in bursts of up to 50; 0 never sends one. 0–1,000,000 (default 1,000, Linux's
    /// `icmp_ratelimit` rate). RFC 1812 §4.3.2.8, RFC 4443 §2.4(f).
    #[serde(default = "default_icmp_rate", deserialize_with = "ranged::icmp_errors_per_sec")]
    pub icmp_errors_per_sec: u32,
    /// Initialise DPDK's packet capture framework at start (`rte_pdump_init`), so that
    /// `dpdk-dumpcap` (a DPDK secondary process) can capture the ports while the daemon
    /// runs. Needs EAL multi-process: `eal_args` without `--no-shconf` or `--in-memory`
    /// (docs/operations.md "Port capture with dpdk-dumpcap"). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub packet_capture: bool,
}

fn default_icmp_rate() -> u32 {
    1000
}

fn default_workers() -> u16 {
    1
}
fn default_mbufs() -> u32 {
    8191
}
fn default_descriptors() -> u16 {
    1024
}
/// Default control socket path.
pub const DEFAULT_SOCKET: &str = "/run/spillway/ctl.sock";
fn default_socket() -> String {
    DEFAULT_SOCKET.to_string()
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            eal_args: Vec::new(),
            workers: default_workers(),
            worker_cores: Vec::new(),
            mbufs_per_port: default_mbufs(),
            descriptors: default_descriptors(),
            socket: default_socket(),
            socket_group: None,
            idle_sleep_us: 0,
            icmp_errors_per_sec: default_icmp_rate(),
            packet_capture: false,
        }
    }
}

/// `[[ports]]`: one DPDK port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Name used in logs, counters and `forward_to`.
    pub name: String,
    /// A PCI address (`0000:3b:00.0`) or a virtual device with arguments
    /// (`net_af_packet0,iface=veth0`, `net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`).
    pub device: String,
    /// Port that packets received here leave on; default: this port (one-armed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_to: Option<String>,
    /// This port's own address, IPv4 (answered in ARP) or IPv6 (answered in Neighbor
    /// Discovery, RFC 4861); optional. Also the outer source of IPIP/GUE of its family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// A second, IPv6 address for a port whose `address` is IPv4 (dual stack); optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address6: Option<Ipv6Addr>,
    /// Override of the port's MAC address used as source MAC on rewritten frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddr>,
    /// Router towards routed backends: IPIP/GUE endpoints without a `mac` are sent to
    /// its ARP-resolved MAC ([`crate::neighbors::next_hop`]); optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Ipv4Addr>,
    /// Largest IP packet the port receives and sends, bytes (the L3 MTU: Ethernet header,
    /// VLAN tags and FCS excluded), 1280–9216, default 1500. Above 1500 (jumbo frames)
    /// the port receives into chained mbufs (RX scatter) or into mbufs
    /// sized for the frame, as the device allows (docs/operations.md "Jumbo frames").
    #[serde(default = "d_port_mtu", deserialize_with = "ranged::port_mtu", skip_serializing_if = "is_default_port_mtu")]
    pub mtu: u16,
}

/// Default [`PortConfig::mtu`]: the Ethernet MTU (RFC 894).
pub const DEFAULT_PORT_MTU: u16 = 1500;
fn d_port_mtu() -> u16 {
    DEFAULT_PORT_MTU
}
fn is_default_port_mtu(m: &u16) -> bool {
    *m == DEFAULT_PORT_MTU
}

/// A zone and its region (also used for `forwarder`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Location {
    /// Zone name, e.g. `z1`.
    pub zone: String,
    /// Region name, e.g. `r1`.
    pub region: String,
}

/// `[[client_zones]]`: clients under `prefix` are in `zone`, or not zonal-compatible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientZone {
    /// Source prefix, IPv4 (`10.1.0.0/16`) or IPv6 (`fd01::/64`).
    pub prefix: IpPrefix,
    /// Zone of these clients (required when `compatible`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `false` marks VPN, interconnect or other-region sources: never a zonal match.
    #[serde(default = "yes")]
    pub compatible: bool,
}

fn yes() -> bool {
    true
}

/// `[conntrack]`: per-worker connection tracking table. spec/backend-selection.md
/// "Connection tracking". All timeouts in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConntrackConfig {
    /// Entries per worker (rounded up to a power of two, 1,024–67,108,864).
    #[serde(default = "d_ct_cap", deserialize_with = "ranged::capacity_per_worker")]
    pub capacity_per_worker: u32,
    /// Idle timeout of established TCP entries (default 600 s, range 600–57,600).
    #[serde(default = "d_tcp", deserialize_with = "ranged::tcp_idle_timeout_sec")]
    pub tcp_idle_timeout_sec: u32,
    /// Idle timeout of TCP entries that saw only a SYN (default 5 s, 1–600).
    #[serde(default = "d_syn", deserialize_with = "ranged::tcp_syn_timeout_sec")]
    pub tcp_syn_timeout_sec: u32,
    /// Life of TCP entries after FIN or RST (default 10 s, 1–600).
    #[serde(default = "d_fin", deserialize_with = "ranged::tcp_closing_timeout_sec")]
    pub tcp_closing_timeout_sec: u32,
    /// Idle timeout of UDP entries (default 30 s, 1–57,600).
    #[serde(default = "d_udp", deserialize_with = "ranged::udp_idle_timeout_sec")]
    pub udp_idle_timeout_sec: u32,
}
fn d_ct_cap() -> u32 {
    1 << 20
}
fn d_tcp() -> u32 {
    600
}
fn d_syn() -> u32 {
    5
}
fn d_fin() -> u32 {
    10
}
fn d_udp() -> u32 {
    30
}
impl Default for ConntrackConfig {
    fn default() -> Self {
        ConntrackConfig {
            capacity_per_worker: d_ct_cap(),
            tcp_idle_timeout_sec: d_tcp(),
            tcp_syn_timeout_sec: d_syn(),
            tcp_closing_timeout_sec: d_fin(),
            udp_idle_timeout_sec: d_udp(),
        }
    }
}

/// L4 protocol of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP (IP protocol 6).
    #[default]
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}
impl Protocol {
    /// IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
        }
    }
}

/// spec/zonal-affinity.md "Options". The short names without the `ZONAL_AFFINITY_` prefix
/// (`SPILL_CROSS_ZONE`) are accepted as aliases in files and live edits; the full names are
/// written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum ZonalAffinity {
    #[default]
    #[serde(alias = "DISABLED")]
    ZONAL_AFFINITY_DISABLED,
    #[serde(alias = "STAY_WITHIN_ZONE")]
    ZONAL_AFFINITY_STAY_WITHIN_ZONE,
    #[serde(alias = "SPILL_CROSS_ZONE")]
    ZONAL_AFFINITY_SPILL_CROSS_ZONE,
}

/// spec/backend-selection.md "Session affinity": what a new connection hashes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum SessionAffinity {
    #[default]
    NONE,
    CLIENT_IP_PORT_PROTO,
    CLIENT_IP_PROTO,
    CLIENT_IP,
    CLIENT_IP_NO_DESTINATION,
}

/// spec/backend-selection.md "Connection tracking".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum TrackingMode {
    #[default]
    PER_CONNECTION,
    PER_SESSION,
}

/// spec/backend-selection.md `connection_persistence_on_unhealthy_backends`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Persistence {
    #[default]
    DEFAULT_FOR_PROTOCOL,
    NEVER_PERSIST,
    ALWAYS_PERSIST,
}

/// spec/service-lb-policy.md "Algorithms".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Algorithm {
    #[default]
    WATERFALL_BY_REGION,
    SPRAY_TO_REGION,
    WATERFALL_BY_ZONE,
}

/// spec/service-lb-policy.md "Traffic isolation".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(non_camel_case_types, missing_docs)]
pub enum IsolationGranularity {
    REGION,
}

/// spec/service-lb-policy.md "Traffic isolation".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum IsolationMode {
    #[default]
    NEAREST,
    STRICT,
}

/// spec/service-lb-policy.md "Preferred backends".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Preference {
    #[default]
    DEFAULT,
    PREFERRED,
}

/// How a chosen backend receives the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types)]
pub enum ForwardingMode {
    /// L2 direct server return: rewrite the destination MAC only; backends hold the VIP.
    #[default]
    L2_DSR,
    /// IPv4-in-IPv4 (RFC 2003) to the backend address.
    IPIP,
    /// GUE (draft-ietf-intarea-gue) over UDP/IPv4 to the backend address.
    GUE,
}

/// Health check kind. spec/backend-selection.md "Health checks".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HealthCheckKind {
    /// TCP connect succeeds.
    #[default]
    Tcp,
    /// HTTP GET `path` answered with `expected_status`.
    Http,
    /// UDP request `udp_request` answered (with `udp_expect` as a prefix, when given).
    Udp,
    /// HTTPS (TLS via rustls) GET `path` answered with `expected_status`; the certificate
    /// is verified only with `verify = true` (spec/backend-selection.md "Health checks").
    Https,
}

/// `[services.health_check]`; times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    /// Probe kind.
    #[serde(default, rename = "type")]
    pub kind: HealthCheckKind,
    /// Port probed; default the service port.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::hc_port")]
    pub port: Option<u16>,
    /// HTTP/HTTPS only: path (absent: `/`, see [`HealthCheck::path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// HTTP/HTTPS only: expected status (absent: 200, see [`HealthCheck::expected_status`]).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::expected_status")]
    pub expected_status: Option<u16>,
    /// UDP only: request payload (absent: empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_request: Option<String>,
    /// UDP only: expected prefix of the response (absent or empty: any response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_expect: Option<String>,
    /// Probe interval (default 5 s; 0.1–300).
    #[serde(default = "d_five", skip_serializing_if = "is_five")]
    pub check_interval_sec: f64,
    /// Probe timeout (default 5 s, or `check_interval_sec` when smaller; must not exceed
    /// the interval).
    #[serde(default = "d_five", skip_serializing_if = "is_five")]
    pub timeout_sec: f64,
    /// Consecutive successes to become healthy (default 2; 1–10).
    #[serde(default = "d_two", skip_serializing_if = "is_two", deserialize_with = "ranged::healthy_threshold")]
    pub healthy_threshold: u32,
    /// Consecutive failures to become unhealthy (default 2; 1–10).
    #[serde(default = "d_two", skip_serializing_if = "is_two", deserialize_with = "ranged::unhealthy_threshold")]
    pub unhealthy_threshold: u32,
    /// HTTPS only: server name sent as TLS SNI and, with `verify`, matched against the
    /// certificate (default none: no SNI, and the probe IP is what `verify` matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// HTTPS only: verify the certificate chain and name against the system's root
    /// certificates (default false: not verified, as cloud load balancers' checks do).
    #[serde(default, skip_serializing_if = "is_false")]
    pub verify: bool,
    /// HTTP/HTTPS: `Host` header (default the probe address, `ip:port`, or `ip` on the
    /// kind's default port 80/443).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// HTTP/HTTPS: a substring the first [`HEALTH_MAX_BODY`] bytes of the body must
    /// contain. TCP: the bytes the backend sends first must start with it (after
    /// `request`, when set). At most [`HEALTH_MAX_PAYLOAD`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// TCP only: payload sent once the connection is up (at most [`HEALTH_MAX_PAYLOAD`]
    /// bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// Largest `request`/`response` of a health check, bytes (the cloud checks' limit).
pub const HEALTH_MAX_PAYLOAD: usize = 1024;
/// Bytes of an HTTP(S) health-check response read at most (headers and body); a
/// `response` substring must appear within them.
pub const HEALTH_MAX_BODY: usize = 64 * 1024;

fn is_false(b: &bool) -> bool {
    !*b
}

impl HealthCheck {
    /// The HTTP(S) path probed (`/` when absent).
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or("/")
    }
    /// The HTTP(S) status expected (200 when absent).
    pub fn expected_status(&self) -> u16 {
        self.expected_status.unwrap_or(200)
    }
    /// The UDP request payload (empty when absent).
    pub fn udp_request(&self) -> &str {
        self.udp_request.as_deref().unwrap_or("")
    }
    /// The UDP response prefix expected (empty, any response, when absent).
    pub fn udp_expect(&self) -> &str {
        self.udp_expect.as_deref().unwrap_or("")
    }
    /// Validates the probe-specific fields (`path`, `expected_status`, `udp_request`,
    /// `udp_expect`, `host`, `sni`, `verify`, `request`, `response`) against the kind: a
    /// field given for a kind that does not use it is refused, naming it. `hp("field")`
    /// gives a field's full path.
    fn validate_probe(&self, hp: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        use HealthCheckKind::{Http, Https, Tcp};
        let kind = match self.kind {
            Tcp => "tcp",
            Http => "http",
            Https => "https",
            HealthCheckKind::Udp => "udp",
        };
        let only = |field: &str, value: &str, kinds: &str| {
            Err(ConfigError::new(hp(field), value, format!("only allowed with type = {kinds} (type is \"{kind}\")")))
        };
        let web = matches!(self.kind, Http | Https);
        // Exactly the defaults (`path = "/"`, `expected_status = 200`, `udp_request = ""`,
        // `udp_expect = ""`) are let through for any kind: daemons before this rule wrote
        // them into every live-edited health check, and such a file must still load after
        // an upgrade. Any other value for a kind that does not use it is refused.
        if let Some(path) = self.path.as_ref().filter(|p| web || p.as_str() != "/") {
            if !web {
                return only("path", path, "\"http\" or \"https\"");
            }
            if !path.starts_with('/') || path.bytes().any(|c| c <= b' ' || c == 0x7f) {
                return Err(ConfigError::new(hp("path"), path, "must start with '/' and contain no spaces or control characters"));
            }
        }
        if let Some(st) = self.expected_status.filter(|s| web || *s != 200) {
            if !web {
                return only("expected_status", &st.to_string(), "\"http\" or \"https\"");
            }
        }
        let udp = self.kind == HealthCheckKind::Udp;
        if let (Some(r), false) = (self.udp_request.as_ref().filter(|r| !r.is_empty()), udp) {
            return only("udp_request", r, "\"udp\" (tcp uses request)");
        }
        if let (Some(r), false) = (self.udp_expect.as_ref().filter(|r| !r.is_empty()), udp) {
            return only("udp_expect", r, "\"udp\" (tcp, http and https use response)");
        }
        if let Some(h) = &self.host {
            if !web {
                return only("host", h, "\"http\" or \"https\"");
            }
            if h.is_empty() || h.len() > 255 || h.bytes().any(|c| c <= b' ' || c == 0x7f) {
                return Err(ConfigError::new(hp("host"), h, "must be 1 to 255 characters without spaces or control characters"));
            }
        }
        if let Some(n) = &self.sni {
            if self.kind != Https {
                return only("sni", n, "\"https\"");
            }
            let label_ok = |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
            if n.len() > 253 || !n.split('.').all(label_ok) {
                return Err(ConfigError::new(hp("sni"), n, "must be a DNS name (letters, digits, '-' and '.', at most 253 characters)"));
            }
        }
        if self.verify && self.kind != Https {
            return only("verify", "true", "\"https\"");
        }
        if let Some(r) = &self.request {
            if self.kind != Tcp {
                return only("request", r, "\"tcp\" (udp uses udp_request)");
            }
            if r.is_empty() || r.len() > HEALTH_MAX_PAYLOAD {
                return Err(ConfigError::new(hp("request"), format!("{r:?} ({} bytes)", r.len()), format!("must be in 1..={HEALTH_MAX_PAYLOAD} (length in bytes)")));
            }
        }
        if let Some(r) = &self.response {
            if self.kind == HealthCheckKind::Udp {
                return only("response", r, "\"tcp\", \"http\" or \"https\" (udp uses udp_expect)");
            }
            if r.is_empty() || r.len() > HEALTH_MAX_PAYLOAD {
                return Err(ConfigError::new(hp("response"), format!("{r:?} ({} bytes)", r.len()), format!("must be in 1..={HEALTH_MAX_PAYLOAD} (length in bytes)")));
            }
        }
        Ok(())
    }
}
fn d_five() -> f64 {
    5.0
}
fn d_two() -> u32 {
    2
}
// The write-back leaves out what equals the default (a timeout of 5 s is only written
// when the interval is 5 s or more, where omitting it gives 5 s again).
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_five(v: &f64) -> bool {
    *v == 5.0
}
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_two(v: &u32) -> bool {
    *v == 2
}
impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            kind: HealthCheckKind::Tcp,
            port: None,
            path: None,
            expected_status: None,
            udp_request: None,
            udp_expect: None,
            check_interval_sec: 5.0,
            timeout_sec: 5.0,
            healthy_threshold: 2,
            unhealthy_threshold: 2,
            sni: None,
            verify: false,
            host: None,
            response: None,
            request: None,
        }
    }
}

/// `[[services]]`: one VIP (address, protocol, port) and its policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Unique name.
    pub name: String,
    /// Virtual IP address, IPv4 or IPv6. A service has one family: its endpoints are of the
    /// VIP's family unless the service encapsulates (IPIP/GUE may cross families).
    pub vip: IpAddr,
    /// Service port.
    #[serde(deserialize_with = "ranged::port")]
    pub port: u16,
    /// L4 protocol.
    #[serde(default)]
    pub protocol: Protocol,
    /// What a new connection hashes on.
    #[serde(default)]
    pub session_affinity: SessionAffinity,
    /// Connection tracking key.
    #[serde(default)]
    pub tracking_mode: TrackingMode,
    /// Persistence of tracked connections on unhealthy backends.
    #[serde(default)]
    pub connection_persistence_on_unhealthy_backends: Persistence,
    /// Idle timeout override for this service's connections (TCP: 600–57,600 s).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::idle_timeout_sec")]
    pub idle_timeout_sec: Option<u32>,
    /// Zonal affinity option.
    #[serde(default)]
    pub zonal_affinity: ZonalAffinity,
    /// [0.0, 1.0]; with SPILL_CROSS_ZONE, absent means 0.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spillover_ratio: Option<f64>,
    /// [0.0, 1.0]; present = a failover policy is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_ratio: Option<f64>,
    /// With failover: drop new connections when nothing is healthy (default: last resort).
    #[serde(default)]
    pub drop_traffic_if_unhealthy: bool,
    /// Cut connections of the inactive pool at once on failover/failback.
    #[serde(default)]
    pub disable_connection_drain_on_failover: bool,
    /// How long connections of the inactive pool persist (default 600 s; 0–3600).
    #[serde(default = "d_drain", deserialize_with = "ranged::connection_drain_timeout_sec")]
    pub connection_drain_timeout_sec: u32,
    /// Capacity algorithm; absent = WATERFALL_BY_REGION.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancing_algorithm: Option<Algorithm>,
    /// Auto capacity drain (spec/service-lb-policy.md).
    #[serde(default)]
    pub auto_capacity_drain: bool,
    /// Percent 1–99; absent = 70.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::failover_health_threshold")]
    pub failover_health_threshold: Option<u32>,
    /// `REGION` turns isolation on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_granularity: Option<IsolationGranularity>,
    /// NEAREST (default) or STRICT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_mode: Option<IsolationMode>,
    /// Latency band in ms (≥ 0); present = latency stage on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_sensitivity_ms: Option<f64>,
    /// How packets reach the backend.
    #[serde(default)]
    pub forwarding_mode: ForwardingMode,
    /// Path MTU towards backends for IPIP/GUE (576–9216, default 1500).
    #[serde(default = "d_mtu", deserialize_with = "ranged::encap_mtu")]
    pub encap_mtu: u16,
    /// Maglev table size: a prime, 251–1,048,573, ≥ 100 × backends recommended.
    #[serde(default = "d_maglev", deserialize_with = "ranged::maglev_table_size")]
    pub maglev_table_size: u32,
    /// Health check; absent = backends are taken as healthy (static). Without
    /// `timeout_sec`, the timeout is 5 s or `check_interval_sec` when that is smaller.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "health_check_following_interval")]
    pub health_check: Option<HealthCheck>,
    /// `[[services.quic_lb]]`: QUIC-LB configurations, one per config rotation codepoint
    /// (UDP only; [`crate::quic_lb_config`]). Empty = no QUIC-LB routing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quic_lb: Vec<crate::quic_lb_config::QuicLbEntry>,
    /// Backends of this service.
    #[serde(default)]
    pub backends: Vec<Backend>,
}
fn d_drain() -> u32 {
    600
}
fn d_mtu() -> u16 {
    1500
}
/// Default Maglev table size (prime). spec/backend-selection.md "Consistent hashing".
pub const DEFAULT_MAGLEV_SIZE: u32 = 65537;
fn d_maglev() -> u32 {
    DEFAULT_MAGLEV_SIZE
}

impl Service {
    /// A service with every policy field at its default.
    pub fn new(name: &str, vip: impl Into<IpAddr>, port: u16, protocol: Protocol) -> Self {
        Service {
            name: name.into(),
            vip: vip.into(),
            port,
            protocol,
            session_affinity: Default::default(),
            tracking_mode: Default::default(),
            connection_persistence_on_unhealthy_backends: Default::default(),
            idle_timeout_sec: None,
            zonal_affinity: Default::default(),
            spillover_ratio: None,
            failover_ratio: None,
            drop_traffic_if_unhealthy: false,
            disable_connection_drain_on_failover: false,
            connection_drain_timeout_sec: d_drain(),
            load_balancing_algorithm: None,
            auto_capacity_drain: false,
            failover_health_threshold: None,
            isolation_granularity: None,
            isolation_mode: None,
            latency_sensitivity_ms: None,
            forwarding_mode: Default::default(),
            encap_mtu: d_mtu(),
            maglev_table_size: DEFAULT_MAGLEV_SIZE,
            health_check: None,
            quic_lb: Vec::new(),
            backends: Vec::new(),
        }
    }
    /// `failover_health_threshold` with its default (70 %).
    pub fn failover_threshold_percent(&self) -> u32 {
        self.failover_health_threshold.unwrap_or(70)
    }
}

/// `[[services.backends]]`: a backend (one endpoint, or a group of `endpoints`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// Unique name within the service.
    pub name: String,
    /// Endpoint address, IPv4 or IPv6 (health checks; IPIP/GUE outer destination); absent
    /// (`0.0.0.0`) for a group, whose endpoints carry the addresses.
    #[serde(default = "unspecified", skip_serializing_if = "IpAddr::is_unspecified")]
    pub address: IpAddr,
    /// Endpoint MAC (L2 DSR destination); required for L2_DSR services in the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddr>,
    /// Zone of this backend.
    #[serde(default)]
    pub zone: String,
    /// Weight 1–1000 (default 50). spec/origin-routing.md.
    #[serde(default = "d_weight", deserialize_with = "ranged::weight")]
    pub weight: u32,
    /// Priority 1–5 (1 is best, default 1). spec/origin-routing.md.
    #[serde(default = "d_priority", deserialize_with = "ranged::priority")]
    pub priority: u32,
    /// Member of the failover pool. spec/backend-selection.md.
    #[serde(default)]
    pub failover: bool,
    /// Admin state; disabled backends take no new connections.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// PREFERRED backends are filled first. spec/service-lb-policy.md.
    #[serde(default)]
    pub preference: Preference,
    /// Target capacity in new connections per second (absent: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_cps: Option<f64>,
    /// 0.0, or 0.1–1.0 (default 1.0).
    #[serde(default = "d_scaler")]
    pub capacity_scaler: f64,
    /// Configured latency in ms (otherwise measured by health probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// `[[services.backends.endpoints]]`: the group's endpoints. Empty = the one endpoint
    /// given by `address`/`mac` (spec/service-lb-policy.md "Vocabulary": a backend is a
    /// group of endpoints in one zone; health is per endpoint, capacity per backend).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    /// QUIC-LB server ID of the one-address form (hex; [`crate::quic_lb_config`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<String>,
}

/// `[[services.backends.endpoints]]`: one endpoint (a VM or an address) of a backend group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Name, unique within the backend; absent = the address as text (`10.0.1.1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// IPv4 or IPv6 address: health checks go there; IPIP/GUE outer destination. Unique
    /// within the service.
    pub address: IpAddr,
    /// MAC (L2 DSR destination, or IPIP/GUE next hop); required for L2_DSR in the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddr>,
    /// Weight 1–1000 (default 50) among the backend's endpoints: a backend's share of new
    /// connections is spread over its healthy endpoints in proportion to it.
    #[serde(default = "d_weight", deserialize_with = "ranged::endpoint_weight")]
    pub weight: u32,
    /// Admin state; a disabled endpoint takes no new connections and does not count in
    /// the backend's endpoint totals.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// QUIC-LB server ID (hex, `server_id_length` octets, unique within the service;
    /// [`crate::quic_lb_config`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<String>,
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Endpoint {
    /// An enabled endpoint of weight 50 without a MAC.
    pub fn new(name: Option<&str>, address: impl Into<IpAddr>) -> Self {
        Endpoint { name: name.map(str::to_string), address: address.into(), mac: None, weight: d_weight(), enabled: true, server_id: None }
    }
    /// The endpoint's name: `name`, or the address as text.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.address.to_string())
    }
}

/// An endpoint of a backend with its name resolved: what health checks, backend slots and
/// `status` work with ([`Backend::members`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Endpoint name (for the single-endpoint form: the backend's name).
    pub name: String,
    /// Address (IPv4 or IPv6).
    pub address: IpAddr,
    /// MAC, if any.
    pub mac: Option<MacAddr>,
    /// Weight among the backend's endpoints (50 for the single-endpoint form).
    pub weight: u32,
    /// Admin state (the single-endpoint form follows nothing but the backend's `enabled`).
    pub enabled: bool,
    /// QUIC-LB server ID as written (hex), if any.
    pub server_id: Option<String>,
}
fn unspecified() -> IpAddr {
    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
}
fn d_weight() -> u32 {
    50
}
fn d_priority() -> u32 {
    1
}
fn d_scaler() -> f64 {
    1.0
}

impl Backend {
    /// A backend with defaults (weight 50, priority 1, enabled).
    pub fn new(name: &str, zone: &str) -> Self {
        Backend {
            name: name.into(),
            address: unspecified(),
            mac: None,
            zone: zone.into(),
            weight: d_weight(),
            priority: d_priority(),
            failover: false,
            enabled: true,
            preference: Preference::DEFAULT,
            capacity_cps: None,
            capacity_scaler: 1.0,
            latency_ms: None,
            endpoints: Vec::new(),
            server_id: None,
        }
    }

    /// Whether this backend lists `endpoints` (a group) rather than one `address`.
    pub fn is_group(&self) -> bool {
        !self.endpoints.is_empty()
    }

    /// The endpoints, names resolved, in config order: the `endpoints` entries, or one
    /// endpoint named like the backend with its `address`/`mac`.
    pub fn members(&self) -> Vec<Member> {
        if self.endpoints.is_empty() {
            return vec![Member { name: self.name.clone(), address: self.address, mac: self.mac, weight: d_weight(), enabled: true, server_id: self.server_id.clone() }];
        }
        self.endpoints
            .iter()
            .map(|e| Member { name: e.label(), address: e.address, mac: e.mac, weight: e.weight, enabled: e.enabled, server_id: e.server_id.clone() })
            .collect()
    }

    /// The Maglev identity of endpoint `endpoint` of this backend (docs/maglev.md
    /// "Identity"): the backend's name for its endpoint named like it (the one-address
    /// form, or a group whose one endpoint is named like the backend: the same thing
    /// written two ways), `backend/endpoint` for any other endpoint of a group. It depends
    /// only on what the endpoint is, so equal configs give equal Maglev tables however they
    /// were written or edited, and every key of a one-address backend or of a group
    /// endpoint with a name of its own keeps its place.
    pub fn maglev_name(&self, endpoint: &str) -> String {
        if endpoint == self.name {
            self.name.clone()
        } else {
            format!("{}/{}", self.name, endpoint)
        }
    }

    /// Index in `endpoints` of the endpoint called `name` (by [`Endpoint::label`]).
    pub fn endpoint_index(&self, name: &str) -> Option<usize> {
        self.endpoints.iter().position(|e| e.label() == name)
    }
}

/// Deserialisers of integer fields: read any TOML integer (never a float, not even `1e3`) as `i64`
/// and refuse one that does not fit the field's type with the range of its
/// [`crate::limits`] row, instead of serde's bare "expected u32". The range itself is
/// checked by [`Config::validate`].
pub(crate) mod ranged {
    use serde::de::{Deserializer, Error, Visitor};
    use std::fmt;

    struct Wide(&'static str);
    impl Visitor<'_> for Wide {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&crate::limits::get(self.0).allowed())
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom(crate::limits::get(self.0).allowed()))
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
            // `1e3` or `80.0` is a float in TOML: refused, even when integral, so a file
            // and a live edit accept the same integers.
            Err(E::custom(format!("{} (a plain integer, not the float {v:?})", crate::limits::get(self.0).allowed())))
        }
        fn visit_str<E: Error>(self, _: &str) -> Result<i64, E> {
            Err(E::custom(format!("{} (a number, not a string)", crate::limits::get(self.0).allowed())))
        }
        fn visit_bool<E: Error>(self, _: bool) -> Result<i64, E> {
            Err(E::custom(format!("{} (a number, not a boolean)", crate::limits::get(self.0).allowed())))
        }
    }

    fn int<'de, D: Deserializer<'de>, T: TryFrom<i64>>(d: D, path: &'static str) -> Result<T, D::Error> {
        let v = d.deserialize_any(Wide(path))?;
        T::try_from(v).map_err(|_| D::Error::custom(crate::limits::get(path).allowed()))
    }

    macro_rules! fields {
        ($($name:ident: $t:ty = $path:literal;)*) => {$(
            pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                int(d, $path)
            }
        )*};
    }
    macro_rules! optional {
        ($($name:ident: $t:ty = $path:literal;)*) => {$(
            pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
                int(d, $path).map(Some)
            }
        )*};
    }
    fields! {
        workers: u16 = "dataplane.workers";
        mbufs_per_port: u32 = "dataplane.mbufs_per_port";
        descriptors: u16 = "dataplane.descriptors";
        idle_sleep_us: u32 = "dataplane.idle_sleep_us";
        icmp_errors_per_sec: u32 = "dataplane.icmp_errors_per_sec";
        capacity_per_worker: u32 = "conntrack.capacity_per_worker";
        tcp_idle_timeout_sec: u32 = "conntrack.tcp_idle_timeout_sec";
        tcp_syn_timeout_sec: u32 = "conntrack.tcp_syn_timeout_sec";
        tcp_closing_timeout_sec: u32 = "conntrack.tcp_closing_timeout_sec";
        udp_idle_timeout_sec: u32 = "conntrack.udp_idle_timeout_sec";
        neighbors_refresh_sec: u32 = "neighbors.refresh_sec";
        neighbors_expiry_sec: u32 = "neighbors.expiry_sec";
        neighbors_retry_ms: u32 = "neighbors.retry_ms";
        port: u16 = "services[].port";
        connection_drain_timeout_sec: u32 = "services[].connection_drain_timeout_sec";
        encap_mtu: u16 = "services[].encap_mtu";
        port_mtu: u16 = "ports[].mtu";
        maglev_table_size: u32 = "services[].maglev_table_size";
        healthy_threshold: u32 = "services[].health_check.healthy_threshold";
        unhealthy_threshold: u32 = "services[].health_check.unhealthy_threshold";
        weight: u32 = "services[].backends[].weight";
        endpoint_weight: u32 = "services[].backends[].endpoints[].weight";
        priority: u32 = "services[].backends[].priority";
    }
    optional! {
        idle_timeout_sec: u32 = "services[].idle_timeout_sec";
        failover_health_threshold: u32 = "services[].failover_health_threshold";
        hc_port: u16 = "services[].health_check.port";
        expected_status: u16 = "services[].health_check.expected_status";
    }

    /// `worker_cores`: core ids (non-negative integers).
    pub fn worker_cores<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
        let v: Vec<i64> = serde::Deserialize::deserialize(d)?;
        v.iter()
            .map(|&c| usize::try_from(c).map_err(|_| D::Error::custom(format!("core {c}: core ids are integers >= 0 that {}", crate::limits::get("dataplane.worker_cores[]").allowed().trim_start_matches("must ")))))
            .collect()
    }
}

/// `health_check`: a table whose `timeout_sec`, when absent, follows the interval (5 s, or
/// `check_interval_sec` when smaller), so a short interval alone is valid and no error ever
/// names a timeout the file does not contain. An error inside the table is returned as
/// `.FIELD = VALUE: RULE`, which [`Config::from_toml`] appends to the table's path.
fn health_check_following_interval<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<HealthCheck>, D::Error> {
    use serde::de::Error;
    let t = toml::Table::deserialize(d)?;
    let given = t.contains_key("timeout_sec");
    let value = toml::Value::Table(t.clone());
    let mut h: HealthCheck = serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let msg = e.into_inner().message().to_string();
        match t.get(&field) {
            Some(v) => D::Error::custom(format!(".{field} = {v}: {msg}")),
            None if field.is_empty() || field == "." => D::Error::custom(format!(": {msg}")),
            None => D::Error::custom(format!(".{field}: {msg}")),
        }
    })?;
    if !given {
        h.timeout_sec = h.timeout_sec.min(h.check_interval_sec);
    }
    Ok(Some(h))
}

/// The one rule for service, backend, endpoint and zone names (docs/config.md "Names"):
/// they appear in log lines, metrics labels, CLI arguments and file paths.
pub const NAME_RULE: &str = "must be 1 to 63 characters, each a letter, a digit, '.', '_' or '-' (no spaces, '/' or control characters)";

/// Checks `name` against [`NAME_RULE`]; the error shows the value quoted, so an empty name
/// or a newline is visible.
pub fn check_name(path: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty() && name.len() <= 63 && name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(path, format!("{name:?}"), NAME_RULE))
    }
}

/// A VIP must be an address a client can send to: not unspecified, broadcast, multicast
/// or loopback.
fn vip_rule(vip: IpAddr) -> Option<&'static str> {
    let bad = vip.is_unspecified() || vip.is_multicast() || vip.is_loopback() || vip == IpAddr::V4(Ipv4Addr::BROADCAST);
    bad.then_some("must be a unicast IPv4 or IPv6 address (not unspecified, broadcast, multicast or loopback)")
}

fn lim(path: &str) -> &'static crate::limits::Limit {
    crate::limits::get(path)
}

/// The range-table row of a concrete field path (`services[0].spillover_ratio` →
/// `services[].spillover_ratio`), if the table has one.
fn limit_of(path: &str) -> Option<&'static crate::limits::Limit> {
    let mut generic = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                generic.push('[');
            }
            ']' => {
                in_index = false;
                generic.push(']');
            }
            _ if in_index => {}
            _ => generic.push(c),
        }
    }
    crate::limits::LIMITS.iter().find(|l| l.path == generic)
}

/// The one range-table row whose field is named `key`, when exactly one is.
fn unique_limit_by_key(key: &str) -> Option<&'static crate::limits::Limit> {
    let mut rows = crate::limits::LIMITS.iter().filter(|l| l.path.rsplit('.').next() == Some(key));
    let first = rows.next()?;
    rows.next().is_none().then_some(first)
}

/// The key of the `key = value` line holding byte offset `at`, if that line is one.
fn span_line_key(text: &str, at: usize) -> Option<String> {
    let start = text.get(..at.min(text.len()))?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(start..)?.lines().next()?;
    let (k, _) = line.split_once('=')?;
    let k = k.trim();
    (!k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then(|| k.to_string())
}

/// Line and column (1-based) of a byte offset.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// Whether `n` is prime (trial division; `n` ≤ 2^20 here).
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while d.saturating_mul(d) <= n {
        if (n / d) * d == n {
            return false;
        }
        d += 1;
    }
    true
}

impl Service {
    /// Validates this service's policy and backends; `path` is its prefix (`services[0]`).
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let p = |f: &str| format!("{path}.{f}");
        check_name(&p("name"), &self.name)?;
        if let Some(rule) = vip_rule(self.vip) {
            return Err(ConfigError::new(p("vip"), self.vip, rule));
        }
        lim("services[].port").check_int(&p("port"), self.port.into())?;
        if let Some(r) = self.spillover_ratio {
            lim("services[].spillover_ratio").check_f(&p("spillover_ratio"), r, 0.0)?;
        }
        if let Some(r) = self.failover_ratio {
            lim("services[].failover_ratio").check_f(&p("failover_ratio"), r, 0.0)?;
        }
        if let Some(t) = self.failover_health_threshold {
            lim("services[].failover_health_threshold").check_int(&p("failover_health_threshold"), t.into())?;
        }
        if let Some(l) = self.latency_sensitivity_ms {
            lim("services[].latency_sensitivity_ms").check_f(&p("latency_sensitivity_ms"), l, 0.0)?;
        }
        if let Some(t) = self.idle_timeout_sec {
            lim("services[].idle_timeout_sec").check_by_protocol(&p("idle_timeout_sec"), t.into(), self.protocol == Protocol::Udp)?;
        }
        if self.isolation_mode.is_some() && self.isolation_granularity.is_none() {
            return Err(ConfigError::new(
                p("isolation_mode"),
                format!("{:?}", self.isolation_mode.unwrap_or_default()),
                "needs isolation_granularity = \"REGION\" (spec/service-lb-policy.md)",
            ));
        }
        lim("services[].connection_drain_timeout_sec").check_int(&p("connection_drain_timeout_sec"), self.connection_drain_timeout_sec.into())?;
        lim("services[].encap_mtu").check_int(&p("encap_mtu"), self.encap_mtu.into())?;
        // An IPv6 client is never told an MTU below 1280 (RFC 8200 §5): the tunnel must carry
        // a 1280-byte packet plus the largest overhead (GUE over IPv6: 40 + 8), or Packet Too
        // Big would repeat for ever.
        const IPV6_TUNNEL_MIN: u16 = 1280 + 48;
        if self.vip.is_ipv6() && self.forwarding_mode != ForwardingMode::L2_DSR && self.encap_mtu < IPV6_TUNNEL_MIN {
            return Err(ConfigError::new(
                p("encap_mtu"),
                self.encap_mtu,
                format!("must be at least {IPV6_TUNNEL_MIN} for an IPv6 VIP with IPIP/GUE (IPv6 minimum MTU 1280, RFC 8200 §5, plus up to 48 bytes of encapsulation)"),
            ));
        }
        lim("services[].maglev_table_size").check_int(&p("maglev_table_size"), self.maglev_table_size.into())?;
        if let Some(h) = &self.health_check {
            let hp = |f: &str| format!("{path}.health_check.{f}");
            let l = |f: &str| lim(&format!("services[].health_check.{f}"));
            if let Some(port) = h.port {
                l("port").check_int(&hp("port"), port.into())?;
            }
            l("check_interval_sec").check_f(&hp("check_interval_sec"), h.check_interval_sec, 0.0)?;
            l("timeout_sec").check_f(&hp("timeout_sec"), h.timeout_sec, h.check_interval_sec)?;
            l("healthy_threshold").check_int(&hp("healthy_threshold"), h.healthy_threshold.into())?;
            l("unhealthy_threshold").check_int(&hp("unhealthy_threshold"), h.unhealthy_threshold.into())?;
            if let Some(st) = h.expected_status {
                l("expected_status").check_int(&hp("expected_status"), st.into())?;
            }
            h.validate_probe(&hp)?;
        }
        let mut names = HashSet::new();
        for (i, b) in self.backends.iter().enumerate() {
            let bp = format!("{path}.backends[{i}]");
            b.validate(&bp)?;
            if !names.insert(b.name.as_str()) {
                return Err(ConfigError::new(format!("{bp}.name"), &b.name, "must be unique within the service"));
            }
        }
        // Endpoint addresses are unique within a service: health is kept per address.
        let mut seen: std::collections::HashMap<IpAddr, String> = std::collections::HashMap::new();
        for (i, b) in self.backends.iter().enumerate() {
            for (k, m) in b.members().iter().enumerate() {
                if m.address.is_unspecified() {
                    continue;
                }
                let here = if b.is_group() { format!("{path}.backends[{i}].endpoints[{k}].address") } else { format!("{path}.backends[{i}].address") };
                if let Some(first) = seen.insert(m.address, here.clone()) {
                    return Err(ConfigError::new(here, m.address, format!("must be unique within the service (also at {first})")));
                }
            }
        }
        // One family per service: with L2 DSR the backend receives the client's
        // packet as it came, so its address must be of the VIP's family. IPIP/GUE carry the
        // packet in an outer header of the endpoint's family, so they may cross families.
        if self.forwarding_mode == ForwardingMode::L2_DSR {
            for (i, b) in self.backends.iter().enumerate() {
                for (k, m) in b.members().iter().enumerate() {
                    if m.address.is_unspecified() || m.address.is_ipv4() == self.vip.is_ipv4() {
                        continue;
                    }
                    let here = if b.is_group() { format!("{path}.backends[{i}].endpoints[{k}].address") } else { format!("{path}.backends[{i}].address") };
                    return Err(ConfigError::new(here, m.address, format!(
                        "must be of the VIP's family ({}, vip = {}): a service has one address family unless forwarding_mode is IPIP or GUE; dual stack means two services",
                        if self.vip.is_ipv4() { "IPv4" } else { "IPv6" }, self.vip)));
                }
            }
        }
        crate::quic_lb_config::validate(self, path)?;
        lim("services[].backends").check_int(&p("backends"), self.backends.len() as i64)
            .map_err(|e| ConfigError { value: format!("{} backends", e.value), ..e })?;
        Ok(())
    }
}

impl Backend {
    /// Validates ranges; `path` is its prefix (`services[0].backends[1]`).
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let p = |f: &str| format!("{path}.{f}");
        check_name(&p("name"), &self.name)?;
        lim("services[].backends[].weight").check_int(&p("weight"), self.weight.into()).map_err(|e| {
            if self.weight == 0 {
                ConfigError { allowed: format!("{}; to stop new connections set enabled = false instead of weight 0", e.allowed), ..e }
            } else {
                e
            }
        })?;
        if let Some(m) = self.mac {
            if m.0[0] & 1 != 0 || m.0 == [0; 6] {
                return Err(ConfigError::new(p("mac"), m, "must be a unicast, non-zero MAC address"));
            }
        }
        lim("services[].backends[].priority").check_int(&p("priority"), self.priority.into())?;
        lim("services[].backends[].capacity_scaler").check_f(&p("capacity_scaler"), self.capacity_scaler, 0.0)?;
        if let Some(c) = self.capacity_cps {
            lim("services[].backends[].capacity_cps").check_f(&p("capacity_cps"), c, 0.0)?;
        }
        if let Some(l) = self.latency_ms {
            lim("services[].backends[].latency_ms").check_f(&p("latency_ms"), l, 0.0)?;
        }
        if self.is_group() {
            if !self.address.is_unspecified() {
                return Err(ConfigError::new(p("address"), self.address, "must be absent when the backend lists endpoints (give each endpoint its address)"));
            }
            if let Some(m) = self.mac {
                return Err(ConfigError::new(p("mac"), m, "must be absent when the backend lists endpoints (give each endpoint its mac)"));
            }
        }
        let mut names = HashSet::new();
        for (i, e) in self.endpoints.iter().enumerate() {
            let ep = |f: &str| format!("{path}.endpoints[{i}].{f}");
            if let Some(n) = &e.name {
                check_name(&ep("name"), n)?;
            }
            if e.address.is_unspecified() {
                return Err(ConfigError::new(ep("address"), e.address, "must be a unicast IPv4 or IPv6 address"));
            }
            lim("services[].backends[].endpoints[].weight").check_int(&ep("weight"), e.weight.into()).map_err(|err| {
                if e.weight == 0 {
                    ConfigError { allowed: format!("{}; to stop new connections set enabled = false instead of weight 0", err.allowed), ..err }
                } else {
                    err
                }
            })?;
            if let Some(m) = e.mac {
                if m.0[0] & 1 != 0 || m.0 == [0; 6] {
                    return Err(ConfigError::new(ep("mac"), m, "must be a unicast, non-zero MAC address"));
                }
            }
            if !names.insert(e.label()) {
                return Err(ConfigError::new(if e.name.is_some() { ep("name") } else { ep("address") }, e.label(), "must be unique within the backend (endpoint names default to the address)"));
            }
        }
        Ok(())
    }
}

impl Config {
    /// Parses TOML text (no range validation; see [`validate`](Self::validate)). A syntax
    /// or type error names the field path, the value as written and the allowed values,
    /// then the line: `services[0].backends[1].weight = -1: must be in 1..=1000 (...)
    /// (line 40, column 10)`.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize::<_, Config>(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.message().trim_end();
            let span = inner.span();
            let at = span.as_ref().map(|s| line_col(text, s.start)).map(|(l, c)| format!(" (line {l}, column {c})")).unwrap_or_default();
            let raw = span.and_then(|s| text.get(s)).map(str::trim).filter(|r| !r.is_empty() && r.len() <= 80 && !r.contains('\n'));
            // The allowed range of the field, from the one range table, for errors that
            // serde reports without it (a string where a number goes, a number beyond
            // what the field's type holds).
            let allowed = |p: &str| limit_of(p).map(|l| format!("; {}", l.allowed())).unwrap_or_default();
            if path.is_empty() || path == "." {
                // the TOML parser itself (e.g. an integer beyond 64 bits): name the key of
                // that line and, when it names one field, its range
                let key = span_line_key(text, inner.span().map_or(0, |s| s.start));
                match key {
                    Some(k) => {
                        let l = unique_limit_by_key(&k);
                        let name = l.map_or(k.clone(), |l| l.path.to_string());
                        let range = l.map(|l| format!("; {}", l.allowed())).unwrap_or_default();
                        format!("{name}: {msg}{range}{at}")
                    }
                    None => format!("{msg}{at}"),
                }
            } else if msg.starts_with("invalid type") {
                let extra = allowed(&path);
                match raw {
                    Some(r) => format!("{path} = {r}: {msg}{extra}{at}"),
                    None => format!("{path}: {msg}{extra}{at}"),
                }
            } else if msg.starts_with('.') || msg.starts_with(':') {
                format!("{path}{msg}{at}")
            } else if msg.starts_with("missing field") || msg.starts_with("unknown field") {
                format!("{path}: {msg}{at}")
            } else {
                match raw {
                    Some(r) => format!("{path} = {r}: {msg}{at}"),
                    None => format!("{path}: {msg}{at}"),
                }
            }
        })
    }

    /// Reads, parses and validates a file.
    pub fn load(path: &str) -> Result<Config, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io { path: path.into(), source })?;
        let cfg = Config::from_toml(&text).map_err(|message| LoadError::Parse { path: path.into(), message })?;
        cfg.validate().map_err(|source| LoadError::Invalid { path: path.into(), source })?;
        Ok(cfg)
    }

    /// Serialises to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
    }

    /// A VIP is not a port's own address, and no backend or endpoint address is a VIP
    /// (a packet to it would be balanced again, or answered by the forwarder itself).
    fn validate_vip_addresses(&self) -> Result<(), ConfigError> {
        for (i, s) in self.services.iter().enumerate() {
            for (k, pc) in self.ports.iter().enumerate() {
                for (f, a) in [("address", pc.address), ("address6", pc.address6.map(IpAddr::V6))] {
                    if a == Some(s.vip) {
                        return Err(ConfigError::new(format!("services[{i}].vip"), s.vip,
                            format!("must differ from the port's own address (ports[{k}].{f} = {}): the port answers ARP/ND for it itself", s.vip)));
                    }
                }
            }
        }
        // A port's own address is answered by the port itself (ARP/ND): never a backend's.
        let own: std::collections::HashMap<IpAddr, (usize, &str)> = self.ports.iter().enumerate()
            .flat_map(|(k, pc)| [(pc.address, "address"), (pc.address6.map(IpAddr::V6), "address6")].into_iter().filter_map(move |(a, f)| a.map(|a| (a, (k, f)))))
            .collect();
        for (i, s) in self.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                for (k, m) in b.members().iter().enumerate() {
                    let Some(&(pk, f)) = own.get(&m.address) else { continue };
                    let here = if b.is_group() { format!("services[{i}].backends[{bi}].endpoints[{k}].address") } else { format!("services[{i}].backends[{bi}].address") };
                    return Err(ConfigError::new(here, m.address,
                        format!("must differ from the port's own address (ports[{pk}].{f} = {}): the port answers for it itself", m.address)));
                }
            }
        }
        // VIP -> first service index: one pass, so 20,000 endpoints × 2,000 VIPs cost a
        // lookup each, not a scan.
        let mut vips: std::collections::HashMap<IpAddr, usize> = std::collections::HashMap::with_capacity(self.services.len());
        for (i, s) in self.services.iter().enumerate() {
            vips.entry(s.vip).or_insert(i);
        }
        for (i, s) in self.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                for (k, m) in b.members().iter().enumerate() {
                    let Some(&vi) = vips.get(&m.address) else { continue };
                    let here = if b.is_group() { format!("services[{i}].backends[{bi}].endpoints[{k}].address") } else { format!("services[{i}].backends[{bi}].address") };
                    return Err(ConfigError::new(here, m.address,
                        format!("must not be a VIP (services[{vi}].vip = {}): a backend needs its own address", m.address)));
                }
            }
        }
        Ok(())
    }

    /// Checks every range and cross-reference; the first problem is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let d = &self.dataplane;
        for (f, v) in [("workers", i64::from(d.workers)), ("mbufs_per_port", d.mbufs_per_port.into()), ("idle_sleep_us", d.idle_sleep_us.into()), ("descriptors", d.descriptors.into()), ("icmp_errors_per_sec", d.icmp_errors_per_sec.into())] {
            let path = format!("dataplane.{f}");
            lim(&path).check_int(&path, v)?;
        }
        if let Some(a) = d.eal_args.iter().find(|a| d.packet_capture && matches!(a.as_str(), "--no-shconf" | "--in-memory")) {
            return Err(ConfigError::new("dataplane.packet_capture", "true",
                format!("needs EAL multi-process for dpdk-dumpcap (a secondary process): remove {a} from dataplane.eal_args")));
        }
        if !d.worker_cores.is_empty() && d.worker_cores.len() < usize::from(d.workers) {
            return Err(ConfigError::new("dataplane.worker_cores", format!("{:?}", d.worker_cores),
                format!("must list at least `workers` = {} cores", d.workers)));
        }
        for (i, c) in d.worker_cores.iter().enumerate() {
            if let Some(j) = d.worker_cores[..i].iter().position(|x| x == c) {
                return Err(ConfigError::new(format!("dataplane.worker_cores[{i}]"), c,
                    format!("must differ from the other cores (dataplane.worker_cores[{j}] is also {c}): one worker per core")));
            }
        }
        let c = &self.conntrack;
        for (f, v) in [
            ("capacity_per_worker", c.capacity_per_worker),
            ("tcp_idle_timeout_sec", c.tcp_idle_timeout_sec),
            ("tcp_syn_timeout_sec", c.tcp_syn_timeout_sec),
            ("tcp_closing_timeout_sec", c.tcp_closing_timeout_sec),
            ("udp_idle_timeout_sec", c.udp_idle_timeout_sec),
        ] {
            let path = format!("conntrack.{f}");
            lim(&path).check_int(&path, v.into())?;
        }

        let mut port_names = HashSet::new();
        for (i, pcfg) in self.ports.iter().enumerate() {
            if pcfg.name.is_empty() || !port_names.insert(pcfg.name.as_str()) {
                return Err(ConfigError::new(format!("ports[{i}].name"), &pcfg.name, "must be non-empty and unique"));
            }
            if pcfg.device.is_empty() {
                return Err(ConfigError::new(format!("ports[{i}].device"), "\"\"", "a PCI address or a vdev like net_af_packet0,iface=eth1"));
            }
            crate::device::check(&pcfg.device).map_err(|rule| ConfigError::new(format!("ports[{i}].device"), format!("{:?}", pcfg.device), rule))?;
            if let Some(j) = self.ports[..i].iter().position(|q| crate::device::device_name(&q.device) == crate::device::device_name(&pcfg.device)) {
                return Err(ConfigError::new(format!("ports[{i}].device"), format!("{:?}", pcfg.device), format!("must name another device than ports[{j}] ({}): one DPDK port per device", crate::device::device_name(&pcfg.device))));
            }
            let mtu_path = format!("ports[{i}].mtu");
            lim("ports[].mtu").check_int(&mtu_path, pcfg.mtu.into())?;
        }
        for (i, pcfg) in self.ports.iter().enumerate() {
            if let Some(f) = &pcfg.forward_to {
                if !port_names.contains(f.as_str()) {
                    return Err(ConfigError::new(format!("ports[{i}].forward_to"), f, "must name a port in [[ports]]"));
                }
            }
            // A port address is the source of ARP requests, Neighbor Solicitations and
            // tunnels on the wire: loopback and IPv4-mapped IPv6 (RFC 4291 §2.5.3, §2.5.5.2)
            // never reach a neighbour.
            let unusable6 = |a: Ipv6Addr| a.is_unspecified() || a.is_multicast() || a.is_loopback() || a.to_ipv4_mapped().is_some();
            if let Some(a) = pcfg.address {
                let bad = match a {
                    IpAddr::V4(v4) => v4.is_unspecified() || v4.is_multicast() || v4.is_loopback() || v4 == Ipv4Addr::BROADCAST,
                    IpAddr::V6(v6) => unusable6(v6),
                };
                if bad {
                    return Err(ConfigError::new(format!("ports[{i}].address"), a, "must be a unicast IPv4 or IPv6 address that can be on a wire (not unspecified, multicast, broadcast, loopback or IPv4-mapped)"));
                }
            }
            if let Some(a6) = pcfg.address6 {
                if unusable6(a6) {
                    return Err(ConfigError::new(format!("ports[{i}].address6"), a6, "must be a unicast IPv6 address that can be on a wire (not unspecified, multicast, loopback ::1 or IPv4-mapped ::ffff:a.b.c.d)"));
                }
                if let Some(a @ IpAddr::V6(_)) = pcfg.address {
                    return Err(ConfigError::new(format!("ports[{i}].address6"), a6,
                        format!("only for a port whose address is IPv4 (ports[{i}].address = {a} is already IPv6)")));
                }
            }
        }
        let mut zones = HashSet::new();
        for (i, z) in self.zones.iter().enumerate() {
            check_name(&format!("zones[{i}].zone"), &z.zone)?;
            if !zones.insert(z.zone.as_str()) {
                return Err(ConfigError::new(format!("zones[{i}].zone"), &z.zone, "must be unique"));
            }
        }
        // With [[zones]] listed, every zone named elsewhere must be one of them (a typo in a
        // zone name would silently disable zonal affinity for those clients or backends).
        let known = |z: &str| zones.is_empty() || z.is_empty() || zones.contains(z);
        let listed = || self.zones.iter().map(|z| z.zone.as_str()).collect::<Vec<_>>().join(", ");
        for (i, cz) in self.client_zones.iter().enumerate() {
            if let Some(j) = self.client_zones[..i].iter().position(|o| o.prefix == cz.prefix) {
                return Err(ConfigError::new(format!("client_zones[{i}].prefix"), cz.prefix,
                    format!("must be unique: client_zones[{j}] already has this prefix (a client matches one zone)")));
            }
            if cz.compatible && cz.zone.as_deref().unwrap_or("").is_empty() {
                return Err(ConfigError::new(format!("client_zones[{i}].zone"), "(none)",
                    "a compatible client prefix needs a zone (or set compatible = false)"));
            }
            if let Some(z) = cz.zone.as_ref().filter(|z| !z.is_empty()) {
                check_name(&format!("client_zones[{i}].zone"), z)?;
                if !known(z) {
                    return Err(ConfigError::new(format!("client_zones[{i}].zone"), z, format!("must be one of [[zones]]: {}", listed())));
                }
            }
        }
        if let Some(f) = &self.forwarder {
            if !f.zone.is_empty() {
                check_name("forwarder.zone", &f.zone)?;
            }
            if !known(&f.zone) {
                return Err(ConfigError::new("forwarder.zone", &f.zone, format!("must be one of [[zones]]: {}", listed())));
            }
            if let Some(z) = self.zones.iter().find(|z| z.zone == f.zone) {
                if z.region != f.region {
                    return Err(ConfigError::new("forwarder.region", &f.region,
                        format!("must be {:?}, the region [[zones]] gives zone {:?}", z.region, z.zone)));
                }
            }
        }
        // RTT hints: zones of [[zones]], a distance in [0, 1e6] ms.
        let rtt = lim("rtt_ms.<zone>.<zone>");
        for (from, row) in &self.rtt_ms {
            if !zones.contains(from.as_str()) {
                return Err(ConfigError::new(format!("rtt_ms.{from}"), from,
                    format!("must name a zone of [[zones]] ({})", if zones.is_empty() { "none listed".to_string() } else { listed() })));
            }
            for (to, &ms) in row {
                let path = format!("rtt_ms.{from}.{to}");
                if !zones.contains(to.as_str()) {
                    return Err(ConfigError::new(path, to,
                        format!("must name a zone of [[zones]] ({})", if zones.is_empty() { "none listed".to_string() } else { listed() })));
                }
                rtt.check_f(&path, ms, 0.0)?;
            }
        }
        for (si, s) in self.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                if !b.zone.is_empty() {
                    check_name(&format!("services[{si}].backends[{bi}].zone"), &b.zone)?;
                }
                if !known(&b.zone) {
                    return Err(ConfigError::new(format!("services[{si}].backends[{bi}].zone"), &b.zone,
                        format!("must be one of [[zones]]: {}", listed())));
                }
            }
        }
        let mut names = HashSet::new();
        let mut vips = HashSet::new();
        for (i, s) in self.services.iter().enumerate() {
            let sp = format!("services[{i}]");
            s.validate(&sp)?;
            if !names.insert(s.name.as_str()) {
                return Err(ConfigError::new(format!("{sp}.name"), &s.name, "must be unique"));
            }
            if !vips.insert((s.vip, s.port, s.protocol)) {
                return Err(ConfigError::new(format!("{sp}.vip"), format!("{}:{}/{:?}", s.vip, s.port, s.protocol),
                    "another service already has this VIP, port and protocol"));
            }
        }
        self.validate_vip_addresses()?;
        // [metrics] / [announce] (crate::fleet).
        if let Some(m) = &self.metrics {
            m.addr()?;
        }
        if let Some(a) = &self.announce {
            // VIPs and the ports' own addresses: none may become a local or peer address of
            // the announcement interface
            let taken: Vec<IpAddr> = self.services.iter().map(|s| s.vip).chain(self.ports.iter().flat_map(|p| p.address.into_iter().chain(p.address6.map(IpAddr::V6)))).collect();
            a.validate(&taken)?;
        }
        if let Some(s) = &self.sync {
            s.validate()?;
        }
        // [neighbors] and ports[].gateway (crate::neighbors).
        self.neighbors.validate()?;
        crate::neighbors::validate_gateways(self)?;
        Ok(())
    }

    /// Advice that does not refuse the config (printed by `spillway --check` and logged at
    /// start): `maglev_table_size` under 100 × endpoints (shares may be uneven by more than
    /// 1 %, Maglev NSDI 2016 §3.4).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, s) in self.services.iter().enumerate() {
            // Maglev tables are built over endpoints (a group counts once per endpoint).
            let n: usize = s.backends.iter().map(|b| b.members().len()).sum();
            if (s.maglev_table_size as usize) < 100 * n {
                out.push(format!(
                    "services[{i}].maglev_table_size = {}: under 100 x {n} backends; shares may be uneven by more than 1 % (Maglev, NSDI 2016)",
                    s.maglev_table_size
                ));
            }
        }
        out
    }

    /// Finds a service by name.
    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci"]
workers = 1

[[ports]]
name = "p0"
device = "net_null0"

[[zones]]
zone = "z1"
region = "r1"

[[client_zones]]
prefix = "10.1.0.0/16"
zone = "z1"

[[client_zones]]
prefix = "10.8.0.0/16"
compatible = false

[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
zonal_affinity = "ZONAL_AFFINITY_SPILL_CROSS_ZONE"
spillover_ratio = 0.8

[[services.backends]]
name = "b1"
address = "10.0.1.1"
mac = "02:00:00:00:01:01"
zone = "z1"
"#;

    #[test]
    fn example_parses_and_validates() {
        let c = Config::from_toml(EXAMPLE).unwrap();
        c.validate().unwrap();
        assert_eq!(c.services[0].backends[0].weight, 50);
        assert_eq!(c.services[0].maglev_table_size, 65537);
        assert!(!c.client_zones[1].compatible);
        // serialise and read back: same model
        let again = Config::from_toml(&c.to_toml()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn unknown_field_is_an_error() {
        let e = Config::from_toml(&EXAMPLE.replace("spillover_ratio", "spilover_ratio")).unwrap_err();
        assert!(e.contains("spilover_ratio"), "{e}");
    }

    /// EXAMPLE plus an IPv6 service, an IPv6 client zone and a dual-stack port.
    fn example6() -> String {
        EXAMPLE.replace("device = \"net_null0\"\n", "device = \"net_null0\"\naddress = \"10.0.0.2\"\naddress6 = \"fd00::2\"\n")
            + r#"
[[client_zones]]
prefix = "fd01::/64"
zone = "z1"

[[services]]
name = "web6"
vip = "fd00::100"
port = 80

[[services.backends]]
name = "b1"
address = "fd00:21::1"
mac = "02:00:00:00:21:01"
zone = "z1"
"#
    }

    #[test]
    fn ipv6_literals_parse_validate_and_round_trip() {
        let c = Config::from_toml(&example6()).unwrap();
        c.validate().unwrap();
        assert_eq!(c.services[1].vip, "fd00::100".parse::<IpAddr>().unwrap());
        assert_eq!(c.services[1].backends[0].address, "fd00:21::1".parse::<IpAddr>().unwrap());
        assert_eq!(c.client_zones[2].prefix.to_string(), "fd01::/64");
        assert_eq!(c.ports[0].address6, Some("fd00::2".parse().unwrap()));
        let again = Config::from_toml(&c.to_toml()).unwrap();
        assert_eq!(again, c);
        // the IPv4 shape is unchanged: an IPv4-only config serialises without new fields
        let v4 = Config::from_toml(EXAMPLE).unwrap().to_toml();
        assert!(!v4.contains("address6"), "{v4}");
    }

    #[test]
    fn mixed_family_service_is_refused_unless_it_encapsulates() {
        let mut c = Config::from_toml(&example6()).unwrap();
        c.services[1].backends[0].address = "10.0.1.9".parse().unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e.path, "services[1].backends[0].address");
        assert_eq!(e.value, "10.0.1.9");
        assert!(e.allowed.contains("VIP's family") && e.allowed.contains("fd00::100") && e.allowed.contains("IPIP or GUE"), "{e}");
        // an IPv4 VIP with an IPv6 endpoint, the other way round
        let mut c = Config::from_toml(&example6()).unwrap();
        c.services[0].backends[0].address = "fd00:9::1".parse().unwrap();
        assert_eq!(c.validate().unwrap_err().path, "services[0].backends[0].address");
        // encapsulation may cross families (IPv4 VIP over an IPv6 underlay and the reverse)
        for mode in [ForwardingMode::IPIP, ForwardingMode::GUE] {
            c.services[0].forwarding_mode = mode;
            c.validate().unwrap();
        }
    }

    #[test]
    fn ipv6_port_and_prefix_errors_name_the_field() {
        let mut c = Config::from_toml(&example6()).unwrap();
        c.ports[0].address = Some("fd00::3".parse().unwrap());
        let e = c.validate().unwrap_err();
        assert_eq!(e.path, "ports[0].address6");
        let mut c = Config::from_toml(&example6()).unwrap();
        c.ports[0].address6 = Some("ff02::1".parse().unwrap());
        assert_eq!(c.validate().unwrap_err().path, "ports[0].address6");
        for bad in ["::1", "::ffff:10.30.0.2"] {
            c.ports[0].address6 = Some(bad.parse().unwrap());
            assert_eq!(c.validate().unwrap_err().path, "ports[0].address6", "{bad}");
        }
        let e = Config::from_toml(&example6().replace("fd01::/64", "fd01::1/64")).unwrap_err();
        assert!(e.contains("host bits") && e.contains("fd01::/64"), "{e}");
        let e = Config::from_toml(&example6().replace("\"fd00::100\"", "\"fd00::zz\"")).unwrap_err();
        assert!(e.contains("vip"), "{e}");
        let mut c = Config::from_toml(&example6()).unwrap();
        c.services[1].vip = "ff02::1".parse().unwrap();
        assert_eq!(c.validate().unwrap_err().path, "services[1].vip");
    }

    fn with<F: FnOnce(&mut Config)>(f: F) -> ConfigError {
        let mut c = Config::from_toml(EXAMPLE).unwrap();
        f(&mut c);
        c.validate().unwrap_err()
    }

    #[test]
    fn ranges_name_field_value_and_rule() {
        let e = with(|c| c.services[0].spillover_ratio = Some(1.5));
        assert_eq!(e.path, "services[0].spillover_ratio");
        assert_eq!(e.field(), "spillover_ratio");
        assert!(e.to_string().contains("1.5") && e.to_string().contains("[0.0, 1.0]"), "{e}");
        assert_eq!(with(|c| c.services[0].failover_ratio = Some(-0.1)).field(), "failover_ratio");
        assert_eq!(with(|c| c.services[0].failover_health_threshold = Some(100)).field(), "failover_health_threshold");
        assert_eq!(with(|c| c.services[0].failover_health_threshold = Some(0)).field(), "failover_health_threshold");
        assert_eq!(with(|c| c.services[0].backends[0].weight = 0).field(), "weight");
        assert_eq!(with(|c| c.services[0].backends[0].weight = 1001).field(), "weight");
        assert_eq!(with(|c| c.services[0].backends[0].priority = 6).field(), "priority");
        assert_eq!(with(|c| c.services[0].backends[0].priority = 0).field(), "priority");
        assert_eq!(with(|c| c.services[0].backends[0].capacity_scaler = 0.05).field(), "capacity_scaler");
        assert_eq!(with(|c| c.services[0].backends[0].capacity_scaler = 1.01).field(), "capacity_scaler");
        assert_eq!(with(|c| c.services[0].maglev_table_size = 65536).field(), "maglev_table_size");
        let e = with(|c| {
            c.services[0].health_check = Some(HealthCheck { timeout_sec: 6.0, ..Default::default() })
        });
        assert_eq!(e.path, "services[0].health_check.timeout_sec");
        assert_eq!(with(|c| c.services[0].idle_timeout_sec = Some(599)).field(), "idle_timeout_sec");
    }

    #[test]
    fn boundaries_are_inclusive() {
        let mut c = Config::from_toml(EXAMPLE).unwrap();
        for (r, t, w, p, s) in [(0.0, 1, 1, 1, 0.0), (1.0, 99, 1000, 5, 0.1), (0.5, 70, 50, 3, 1.0)] {
            c.services[0].spillover_ratio = Some(r);
            c.services[0].failover_ratio = Some(r);
            c.services[0].failover_health_threshold = Some(t);
            c.services[0].backends[0].weight = w;
            c.services[0].backends[0].priority = p;
            c.services[0].backends[0].capacity_scaler = s;
            c.validate().unwrap();
        }
        c.services[0].health_check = Some(HealthCheck { timeout_sec: 5.0, check_interval_sec: 5.0, ..Default::default() });
        c.validate().unwrap();
    }

    #[test]
    fn duplicates_and_references() {
        let e = with(|c| {
            let b = c.services[0].backends[0].clone();
            c.services[0].backends.push(b)
        });
        assert_eq!(e.path, "services[0].backends[1].name");
        let e = with(|c| c.ports[0].forward_to = Some("nope".into()));
        assert_eq!(e.path, "ports[0].forward_to");
        let e = with(|c| {
            let mut s = c.services[0].clone();
            s.name = "web2".into();
            c.services.push(s)
        });
        assert_eq!(e.path, "services[1].vip");
    }

    #[test]
    fn zones_port_and_mac_are_checked() {
        let e = with(|c| c.services[0].backends[0].zone = "z9".into());
        assert_eq!(e.path, "services[0].backends[0].zone");
        assert!(e.allowed.contains("z1"), "{e}");
        let e = with(|c| c.client_zones[0].zone = Some("zz".into()));
        assert_eq!(e.path, "client_zones[0].zone");
        assert_eq!(with(|c| c.services[0].port = 0).field(), "port");
        assert_eq!(with(|c| c.services[0].backends[0].mac = Some(crate::net::MacAddr::BROADCAST)).field(), "mac");
        assert!(with(|c| c.services[0].backends[0].weight = 0).allowed.contains("enabled = false"));
        assert!(!with(|c| c.services[0].backends[0].weight = 1001).allowed.contains("enabled = false"));
    }

    const GROUP: &str = r#"
[[services.backends]]
name = "g1"
zone = "z1"
weight = 100

[[services.backends.endpoints]]
name = "e1"
address = "10.0.2.1"
mac = "02:00:00:00:02:01"

[[services.backends.endpoints]]
address = "10.0.2.2"
weight = 150
enabled = false
"#;

    #[test]
    fn groups_parse_round_trip_and_resolve_members() {
        let c = Config::from_toml(&format!("{EXAMPLE}{GROUP}")).unwrap();
        c.validate().unwrap();
        let g = &c.services[0].backends[1];
        assert!(g.is_group() && !c.services[0].backends[0].is_group());
        let m = g.members();
        assert_eq!(m.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["e1", "10.0.2.2"]);
        assert_eq!((m[0].weight, m[1].weight, m[0].enabled, m[1].enabled), (50, 150, true, false));
        assert_eq!(g.endpoint_index("10.0.2.2"), Some(1));
        // the single-endpoint form is one endpoint named like the backend
        let one = c.services[0].backends[0].members();
        assert_eq!((one.len(), one[0].name.as_str(), one[0].address), (1, "b1", "10.0.1.1".parse().unwrap()));
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn group_errors_name_the_endpoint_field() {
        let grouped = || {
            let mut c = Config::from_toml(&format!("{EXAMPLE}{GROUP}")).unwrap();
            c.services[0].backends.remove(0);
            c
        };
        let err = |f: &dyn Fn(&mut Config)| {
            let mut c = grouped();
            f(&mut c);
            c.validate().unwrap_err()
        };
        let e = err(&|c| c.services[0].backends[0].endpoints[1].address = "10.0.2.1".parse().unwrap());
        assert_eq!(e.path, "services[0].backends[0].endpoints[1].address");
        assert!(e.allowed.contains("unique within the service") && e.allowed.contains("endpoints[0]"), "{e}");
        let e = err(&|c| c.services[0].backends[0].endpoints[1].name = Some("e1".into()));
        assert_eq!(e.path, "services[0].backends[0].endpoints[1].name");
        let e = err(&|c| c.services[0].backends[0].endpoints[0].weight = 0);
        assert_eq!(e.path, "services[0].backends[0].endpoints[0].weight");
        assert!(e.allowed.contains("1..=1000") && e.allowed.contains("enabled = false"), "{e}");
        assert_eq!(err(&|c| c.services[0].backends[0].endpoints[0].weight = 1001).field(), "weight");
        let e = err(&|c| c.services[0].backends[0].address = "10.0.9.9".parse().unwrap());
        assert_eq!(e.path, "services[0].backends[0].address");
        let e = err(&|c| c.services[0].backends[0].endpoints[0].mac = Some(crate::net::MacAddr::BROADCAST));
        assert_eq!(e.path, "services[0].backends[0].endpoints[0].mac");
        let e = err(&|c| c.services[0].backends[0].endpoints[0].address = Ipv4Addr::UNSPECIFIED.into());
        assert_eq!(e.path, "services[0].backends[0].endpoints[0].address");
        // a single-endpoint backend's address clashes with a group's endpoint too
        let e = with(|c| {
            let mut g = Backend::new("g2", "z1");
            g.endpoints.push(Endpoint::new(Some("x"), "10.0.1.1".parse::<IpAddr>().unwrap()));
            c.services[0].backends.push(g);
        });
        assert_eq!(e.path, "services[0].backends[1].endpoints[0].address");
        // parse-time range error names the path
        let bad = format!("{EXAMPLE}{}", GROUP.replace("weight = 150", "weight = -3"));
        let e = Config::from_toml(&bad).unwrap_err();
        assert!(e.contains("endpoints[1].weight = -3") && e.contains("1..=1000"), "{e}");
    }

    #[test]
    fn primes() {
        assert!(is_prime(65537) && is_prime(251) && !is_prime(65536) && !is_prime(1) && is_prime(2));
    }
}
