//! `[[services]]`: a VIP (address, protocol, port), its policy, its backends (one address
//! or a group of endpoints) and their validation; the `[[services.quic_lb]]` part is
//! [`quic_lb`].

pub mod quic_lb;

use super::error::{check_name, ConfigError};
use super::health::{health_check_following_interval, HealthCheck};
use super::limits::get as lim;
use super::policy::*;
use super::ranged;
use super::yes;
use crate::net::MacAddr;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

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
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::optional_float")]
    pub spillover_ratio: Option<f64>,
    /// [0.0, 1.0]; present = a failover policy is configured.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::optional_float")]
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
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::optional_float")]
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
    /// (UDP only; [`quic_lb`]). Empty = no QUIC-LB routing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quic_lb: Vec<quic_lb::QuicLbEntry>,
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
    /// The service's VIP, port and protocol as `spillwayctl` and `flows show` print
    /// them: `10.0.0.100:80/tcp`, `[fd00::100]:53/udp`.
    pub fn endpoint_label(&self) -> String {
        format!("{}/{}", std::net::SocketAddr::new(self.vip, self.port), self.protocol.name())
    }

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
    /// Zone of this backend; empty = no zone (absent from the file). An empty string
    /// (`zone = ""`, also `zone=` in a live edit) means the same and is never written: the
    /// key is left out, since a zone name is 1 to 63 characters (docs/config.md "Names").
    #[serde(default, skip_serializing_if = "String::is_empty")]
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
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::optional_float")]
    pub capacity_cps: Option<f64>,
    /// 0.0, or 0.1–1.0 (default 1.0).
    #[serde(default = "d_scaler", deserialize_with = "ranged::float")]
    pub capacity_scaler: f64,
    /// Configured latency in ms (otherwise measured by health probes).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::optional_float")]
    pub latency_ms: Option<f64>,
    /// `[[services.backends.endpoints]]`: the group's endpoints. Empty = the one endpoint
    /// given by `address`/`mac` (spec/service-lb-policy.md "Vocabulary": a backend is a
    /// group of endpoints in one zone; health is per endpoint, capacity per backend).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    /// QUIC-LB server ID of the one-address form (hex; [`quic_lb`]).
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
    /// [`quic_lb`]).
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

/// A [`Member`] borrowed from the config ([`Backend::member_refs`]): what reads every
/// endpoint of a large config (a scrape's status at 20,000 endpoints) without copying a
/// name per endpoint. The name is borrowed but for an endpoint without one (its address
/// as text, [`Endpoint::label`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MemberRef<'a> {
    /// Endpoint name (for the single-endpoint form: the backend's name).
    pub name: std::borrow::Cow<'a, str>,
    /// Address (IPv4 or IPv6).
    pub address: IpAddr,
    /// MAC, if any.
    pub mac: Option<MacAddr>,
    /// Weight among the backend's endpoints (50 for the single-endpoint form).
    pub weight: u32,
    /// Admin state (the single-endpoint form follows nothing but the backend's `enabled`).
    pub enabled: bool,
    /// QUIC-LB server ID as written (hex), if any.
    pub server_id: Option<&'a str>,
}

impl MemberRef<'_> {
    /// The owned [`Member`].
    pub fn to_member(&self) -> Member {
        Member { name: self.name.to_string(), address: self.address, mac: self.mac, weight: self.weight, enabled: self.enabled, server_id: self.server_id.map(str::to_string) }
    }
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
        self.member_refs().map(|m| m.to_member()).collect()
    }

    /// [`Backend::members`], borrowed: the same endpoints in the same order, nothing copied
    /// but the name of an endpoint that has none (its address as text).
    pub fn member_refs(&self) -> impl Iterator<Item = MemberRef<'_>> + '_ {
        use std::borrow::Cow;
        let one = self.endpoints.is_empty().then(|| MemberRef { name: Cow::Borrowed(self.name.as_str()), address: self.address, mac: self.mac, weight: d_weight(), enabled: true, server_id: self.server_id.as_deref() });
        one.into_iter().chain(self.endpoints.iter().map(|e| MemberRef {
            name: e.name.as_deref().map_or_else(|| Cow::Owned(e.address.to_string()), Cow::Borrowed),
            address: e.address,
            mac: e.mac,
            weight: e.weight,
            enabled: e.enabled,
            server_id: e.server_id.as_deref(),
        }))
    }

    /// The addresses of [`Backend::members`], in the same order, without copying the
    /// members.
    pub fn member_addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let one = self.endpoints.is_empty().then_some(self.address);
        one.into_iter().chain(self.endpoints.iter().map(|e| e.address))
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

/// A VIP must be an address a client can send to and be served from: not unspecified,
/// broadcast, multicast or loopback; not link-local (169.254/16, fe80::/10) or
/// IPv4-mapped IPv6 (::ffff:0:0/96), whose clients' sources the dataplane drops as
/// `martian_source` (RFC 3927 §7, RFC 4291 §2.5.5.2): such a service could never serve.
fn vip_rule(vip: IpAddr) -> Option<&'static str> {
    let bad = vip.is_unspecified() || vip.is_multicast() || vip.is_loopback() || vip == IpAddr::V4(Ipv4Addr::BROADCAST);
    let unserved = match vip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80 || a.to_ipv4_mapped().is_some(),
    };
    (bad || unserved).then_some("must be a unicast IPv4 or IPv6 address a client can reach (not unspecified, broadcast, multicast, loopback, link-local or IPv4-mapped)")
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
        quic_lb::validate(self, path)?;
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
