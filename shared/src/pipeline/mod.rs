//! The routing pipeline: which backends a new connection of a service may go to, and with
//! which long-run shares.
//!
//! Pure: no I/O, no clock (time is the `now_sec` argument of [`evaluate`]). The control
//! thread calls [`evaluate`] once per service and client class ([`Topology::client_classes`])
//! whenever health, load or configuration changes, and builds one weighted Maglev table per
//! distinct result from [`Decision::weights`].
//!
//! Stages, in order (each is a pure function over a candidate set that appends one
//! [`TraceEntry`]; a stage whose feature is not configured passes its input through):
//! 1. [`availability`] — enabled, healthy, non-zero capacity; auto capacity drain/undrain
//!    (spec/origin-routing.md step 1, spec/service-lb-policy.md "Auto capacity drain");
//! 2. [`tiers`] — primary/failover pools with `failover_ratio`, healthy draining backends
//!    before the last resort (docs/semantics.md), last resort,
//!    `drop_traffic_if_unhealthy`, priorities 1–5 (spec/backend-selection.md "Original
//!    eligible backends", spec/origin-routing.md step 2);
//! 3. [`zonal`] — zonal affinity, the sets A, B, C, I (spec/zonal-affinity.md);
//! 4. [`isolation`] — traffic isolation by region, NEAREST/STRICT (spec/service-lb-policy.md);
//! 5. [`latency`] — latency band (spec/origin-routing.md step 3);
//! 6. [`capacity`] — preferred backends, then the load-balancing algorithm by target
//!    capacity from offered load; then the failover health threshold
//!    (spec/service-lb-policy.md);
//! 7. [`weights`] — final shares (spec/origin-routing.md step 4).
//!
//! The stages decide over backends; [`endpoints`] turns per-endpoint health into a
//! backend's endpoint counts and spreads a decision's backend shares over endpoints.
//!
//! Where two specs meet and are silent, the rule chosen is written in `docs/semantics.md`.

pub mod availability;
pub mod capacity;
pub mod endpoints;
pub mod isolation;
pub mod latency;
pub mod tiers;
pub mod weights;
pub mod zonal;

use crate::config::{Config, Location, Service};
use crate::net::PrefixTable;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Where this forwarder runs and what it knows about zones, regions, distances and clients.
///
/// Built once per configuration by [`Topology::from_config`]; read-only afterwards.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    /// The forwarder's own zone and region (used by capacity and isolation).
    pub forwarder: Option<Location>,
    /// zone → region.
    zone_region: BTreeMap<String, String>,
    /// Round-trip times in ms, both directions stored.
    rtt: BTreeMap<(String, String), f64>,
    /// Client prefix → `Some(zone)` (compatible) or `None` (not compatible).
    clients: PrefixTable<Option<String>>,
    /// Compatible zones a client can be classified into, sorted.
    client_zone_names: Vec<String>,
}

/// The class of a client for routing: its zone (a compatible client, spec/zonal-affinity.md
/// "Compatible clients") or `Incompatible` (unknown source, VPN/interconnect, other region).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ClientClass {
    /// A compatible client in this zone.
    Zone(String),
    /// Not zonal-compatible: zonal affinity behaves as disabled.
    Incompatible,
}

impl std::fmt::Display for ClientClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientClass::Zone(z) => write!(f, "zone {z}"),
            ClientClass::Incompatible => write!(f, "not zonal-compatible"),
        }
    }
}

impl Topology {
    /// Builds the topology from the config's `forwarder`, `zones`, `rtt_ms` and `client_zones`.
    pub fn from_config(cfg: &Config) -> Topology {
        Topology::from_parts(cfg.forwarder.clone(), &cfg.zones, &cfg.rtt_ms, &cfg.client_zones)
    }

    /// Builds the topology from its parts (the same fields as in [`Config`]).
    pub fn from_parts(
        forwarder: Option<Location>,
        zones: &[Location],
        rtt_ms: &BTreeMap<String, BTreeMap<String, f64>>,
        client_zones: &[crate::config::ClientZone],
    ) -> Topology {
        let mut zone_region: BTreeMap<String, String> =
            zones.iter().map(|l| (l.zone.clone(), l.region.clone())).collect();
        if let Some(f) = &forwarder {
            zone_region.entry(f.zone.clone()).or_insert_with(|| f.region.clone());
        }
        let mut rtt = BTreeMap::new();
        for (a, m) in rtt_ms {
            for (b, v) in m {
                rtt.insert((a.clone(), b.clone()), *v);
                rtt.entry((b.clone(), a.clone())).or_insert(*v);
            }
        }
        let clients = PrefixTable::new(client_zones.iter().map(|cz| {
            let z = if cz.compatible { cz.zone.clone() } else { None };
            (cz.prefix, z)
        }));
        let mut t = Topology { forwarder, zone_region, rtt, clients, client_zone_names: Vec::new() };
        let names: BTreeSet<String> = client_zones
            .iter()
            .filter(|cz| cz.compatible)
            .filter_map(|cz| cz.zone.clone())
            .filter(|z| t.zone_compatible(z))
            .collect();
        t.client_zone_names = names.into_iter().collect();
        t
    }

    /// A zone is compatible when the forwarder's region is unknown or the zone is in it.
    fn zone_compatible(&self, zone: &str) -> bool {
        match (&self.forwarder, self.zone_region.get(zone)) {
            (Some(f), Some(r)) => *r == f.region,
            _ => true,
        }
    }

    /// The class of a client address: longest-prefix match on `client_zones`; a prefix
    /// marked `compatible = false`, no match, or a zone outside the forwarder's region is
    /// [`ClientClass::Incompatible`].
    pub fn classify(&self, client: impl Into<IpAddr>) -> ClientClass {
        match self.clients.lookup(client) {
            Some(Some(z)) if self.zone_compatible(z) => ClientClass::Zone(z.clone()),
            _ => ClientClass::Incompatible,
        }
    }

    /// Every class a client can fall in: each compatible zone of `client_zones` (sorted),
    /// then `Incompatible`. The snapshot has one Maglev table per (service, class).
    pub fn client_classes(&self) -> Vec<ClientClass> {
        let mut v: Vec<ClientClass> = self.client_zone_names.iter().cloned().map(ClientClass::Zone).collect();
        v.push(ClientClass::Incompatible);
        v
    }

    /// Region of a zone, if known.
    pub fn region_of(&self, zone: &str) -> Option<&str> {
        self.zone_region.get(zone).map(String::as_str)
    }

    /// Round-trip time in ms between two zones: 0 for the same zone, else the `rtt_ms` hint
    /// (either direction), else `None`.
    pub fn rtt(&self, a: &str, b: &str) -> Option<f64> {
        if a == b {
            return Some(0.0);
        }
        self.rtt.get(&(a.to_string(), b.to_string())).copied()
    }

    /// RTT from the forwarder's zone to `zone` (`None` when unknown or no forwarder).
    pub fn rtt_from_forwarder(&self, zone: &str) -> Option<f64> {
        self.forwarder.as_ref().and_then(|f| self.rtt(&f.zone, zone))
    }

    /// Distance of a region from the forwarder: 0 for its own region, else the smallest
    /// known RTT to a zone of that region; unknown = `f64::INFINITY`.
    pub fn region_distance(&self, region: &str) -> f64 {
        let Some(f) = &self.forwarder else { return f64::INFINITY };
        if f.region == region {
            return 0.0;
        }
        self.zone_region
            .iter()
            .filter(|(_, r)| r.as_str() == region)
            .filter_map(|(z, _)| self.rtt(&f.zone, z))
            .fold(f64::INFINITY, f64::min)
    }
}

/// Live state of one backend, in the same order as `Service::backends`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendState {
    /// Endpoints in the group (1 for a single VM).
    pub endpoints: u32,
    /// Endpoints passing health checks (≤ `endpoints`).
    pub healthy_endpoints: u32,
    /// Measured latency from this forwarder in ms (health-probe RTT), if any. A configured
    /// `Backend::latency_ms` takes precedence.
    #[serde(default, with = "crate::real::opt")]
    pub latency_ms: Option<f64>,
    /// Measured new connections per second currently sent to this backend.
    #[serde(with = "crate::real::f64")]
    pub load_cps: f64,
}

impl BackendState {
    /// A single healthy endpoint, no latency, no load.
    pub fn healthy() -> Self {
        BackendState { endpoints: 1, healthy_endpoints: 1, latency_ms: None, load_cps: 0.0 }
    }
    /// A single unhealthy endpoint.
    pub fn unhealthy() -> Self {
        BackendState { healthy_endpoints: 0, ..BackendState::healthy() }
    }
    /// At least one endpoint passes health checks.
    pub fn is_healthy(&self) -> bool {
        self.healthy_endpoints > 0 && self.endpoints > 0
    }
    /// Healthy fraction of endpoints in [0, 1] (0 for an empty group).
    pub fn healthy_fraction(&self) -> f64 {
        if self.endpoints == 0 {
            0.0
        } else {
            f64::from(self.healthy_endpoints.min(self.endpoints)) / f64::from(self.endpoints)
        }
    }
}

/// Auto-capacity-drain memory of one backend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DrainState {
    /// When it was drained (s).
    #[serde(with = "crate::real::f64")]
    pub drained_at: f64,
    /// Since when ≥ 35 % of its endpoints have been healthy without interruption (s).
    #[serde(default, with = "crate::real::opt")]
    pub recovering_since: Option<f64>,
}

/// State a service's pipeline carries between evaluations (owned by the control thread).
#[derive(Clone, Debug, Default)]
pub struct ServiceState {
    /// Drained backends by name (spec/service-lb-policy.md "Auto capacity drain").
    pub drained: BTreeMap<String, DrainState>,
    /// Pool chosen by the last evaluation (for failover/failback events and traces).
    pub last_tier: Option<TierKind>,
}

/// Which set the tier stage chose: the "original eligible backends" (A) of
/// spec/zonal-affinity.md, generalised to priorities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TierKind {
    /// Healthy primaries of this priority ("failback" state).
    HealthyPrimaries {
        /// Priority 1–5 of the set.
        priority: u32,
    },
    /// Healthy failover backends of this priority.
    HealthyFailover {
        /// Priority 1–5 of the set.
        priority: u32,
    },
    /// Nothing healthy: all (enabled) primaries of the best priority, unhealthy.
    LastResortPrimaries,
    /// No non-draining backend healthy: the healthy draining backends (`capacity_scaler =
    /// 0` or auto-drained; primaries first, best priority), before the last resort
    /// (docs/semantics.md "Choices" 3a; Kubernetes KEP-1669 terminating endpoints).
    HealthyDraining,
    /// Nothing healthy and `drop_traffic_if_unhealthy`, or nothing enabled: drop.
    Drop,
}

/// One stage's record: what came in, what went out, the rule and its numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// Stage name (`availability`, `tiers`, `zonal_affinity`, `isolation`, `latency`,
    /// `capacity`, `failover_threshold`, `weights`).
    pub stage: String,
    /// Rule applied, citing the spec section.
    pub rule: String,
    /// Input candidate set (backend names, config order).
    pub input: Vec<String>,
    /// Output candidate set (backend names, config order).
    pub output: Vec<String>,
    /// Numbers behind the decision (e.g. `ratio`, `spillover_ratio`, `h`, `r`).
    /// Non-finite values (an unlimited capacity is `inf`) travel as in [`crate::real`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", with = "crate::real::map")]
    pub numbers: BTreeMap<String, f64>,
    /// Free-text details (why each excluded backend left, named sets, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The result of [`evaluate`] for one service and client class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// New connections are dropped (and counted).
    pub drop: bool,
    /// Final eligible backends (indices into `service.backends`, ascending); those with a
    /// positive share.
    pub eligible: Vec<usize>,
    /// Final long-run shares of new connections, `(backend index, share)`, ascending index,
    /// shares > 0 summing to 1.0 (empty when dropping). Maglev weights.
    #[serde(with = "crate::real::pairs")]
    pub weights: Vec<(usize, f64)>,
    /// One entry per stage, in order.
    pub trace: Vec<TraceEntry>,
    /// The tier chosen (set A of spec/zonal-affinity.md).
    pub tier: TierKind,
    /// The client class evaluated.
    pub client: ClientClass,
}

impl Decision {
    /// The share of backend `i` (0.0 when not eligible).
    pub fn share(&self, i: usize) -> f64 {
        self.weights.iter().find(|(j, _)| *j == i).map_or(0.0, |(_, s)| *s)
    }
}

/// Read-only inputs shared by the stages.
pub struct Ctx<'a> {
    /// The service.
    pub svc: &'a Service,
    /// Backend states, same order as `svc.backends`.
    pub states: &'a [BackendState],
    /// Topology.
    pub topo: &'a Topology,
}

impl Ctx<'_> {
    /// Backend names of a set (config order as given).
    pub fn names(&self, set: &[usize]) -> Vec<String> {
        set.iter().map(|&i| self.svc.backends[i].name.clone()).collect()
    }
    /// State of backend `i` (a missing state counts as unhealthy).
    pub fn state(&self, i: usize) -> BackendState {
        self.states.get(i).cloned().unwrap_or_else(BackendState::unhealthy)
    }
    /// Region of backend `i`'s zone, if known.
    pub fn region(&self, i: usize) -> Option<&str> {
        self.topo.region_of(&self.svc.backends[i].zone)
    }
    /// A trace entry with no numbers or notes.
    pub fn entry(&self, stage: &str, rule: impl Into<String>, input: &[usize], output: &[usize]) -> TraceEntry {
        TraceEntry {
            stage: stage.into(),
            rule: rule.into(),
            input: self.names(input),
            output: self.names(output),
            numbers: BTreeMap::new(),
            notes: Vec::new(),
        }
    }
}

/// Whether the service-LB policy (spec/service-lb-policy.md) is configured for `svc`:
/// any of its fields is set. The failover health threshold (default 70) applies only then.
pub fn lb_policy_configured(svc: &Service) -> bool {
    svc.load_balancing_algorithm.is_some()
        || svc.auto_capacity_drain
        || svc.failover_health_threshold.is_some()
        || svc.isolation_granularity.is_some()
}

/// Runs the pipeline for new connections of `svc` from a client of class `client`.
///
/// - `states`: one per `svc.backends` entry, same order (missing entries = unhealthy);
/// - `offered_cps`: offered new-connection rate for the capacity stage; `None` = the sum of
///   measured `load_cps`;
/// - `st`: the service's carried state (auto-capacity-drain timers, last tier), updated;
/// - `now_sec`: the current time in seconds (monotonic, any origin).
///
/// Deterministic: the same inputs (and state) give the same decision.
pub fn evaluate(
    svc: &Service,
    states: &[BackendState],
    topo: &Topology,
    client: &ClientClass,
    offered_cps: Option<f64>,
    st: &mut ServiceState,
    now_sec: f64,
) -> Decision {
    let ctx = Ctx { svc, states, topo };
    let mut trace = Vec::with_capacity(8);
    let all: Vec<usize> = (0..svc.backends.len()).collect();

    let available = availability::stage(&ctx, &all, st, now_sec, &mut trace);
    let draining = availability::draining(&ctx, st);
    let (tier, a) = tiers::stage(&ctx, &available, &draining, &mut trace);
    st.last_tier = Some(tier);
    let mut drop = tier == TierKind::Drop;
    let z = zonal::stage(&ctx, client, tier, &a, &mut trace);
    let (iso, iso_drop, region) = isolation::stage(&ctx, &z, &mut trace);
    drop |= iso_drop;
    let lat = latency::stage(&ctx, &iso, &mut trace);
    let shares = capacity::stage(&ctx, &lat, offered_cps, &mut trace);
    let shares = capacity::failover_threshold(&ctx, tier, &lat, &available, region.as_deref(), shares, &mut trace);
    let weights = weights::stage(&ctx, &lat, shares, &mut trace);
    if weights.is_empty() {
        drop = true;
    }
    let weights = if drop { Vec::new() } else { weights };
    Decision {
        drop,
        eligible: weights.iter().map(|(i, _)| *i).collect(),
        weights,
        trace,
        tier,
        client: client.clone(),
    }
}

#[cfg(test)]
mod tests;
