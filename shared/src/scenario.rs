//! Offline routing conformance scenarios (`../shared/cases/policy/README.md`).
//!
//! A scenario is a small topology, one service with its backends, and a sequence of steps,
//! each with an expectation. [`run_scenario_text`] parses one (unknown fields are errors,
//! reported with their field path), maps the service and backends into the daemon's
//! [`config::Service`](crate::config::Service) / [`config::Backend`](crate::config::Backend)
//! model, validates them with the daemon's own validation ([`Config::validate`]) at every
//! step, runs the routing pipeline ([`crate::pipeline::evaluate`]) and compares.
//!
//! Backend groups: a backend may give `"group": [{"name", "weight", "enabled",
//! "healthy"}]` instead of `endpoints`/`healthy_endpoints`/`healthy` (and a step's `set`
//! may replace it); every outcome of such a scenario then carries `endpoint_shares`
//! (`backend/endpoint` → share), the decision spread over healthy endpoints by
//! [`crate::pipeline::endpoints::endpoint_shares`], as the daemon builds its Maglev tables.

use crate::config::{
    Algorithm, Backend, ClientZone, Endpoint, Config, IsolationGranularity, IsolationMode, Location, Preference, Protocol, Service,
    SessionAffinity, ZonalAffinity,
};
use crate::pipeline::{evaluate, BackendState, Decision, ServiceState, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// Tolerance of `shares` comparisons when the step gives none.
pub const DEFAULT_TOLERANCE: f64 = 0.01;

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique name.
    pub name: String,
    /// Where the case comes from.
    #[serde(default)]
    pub source: Option<String>,
    /// Where this forwarder runs.
    #[serde(default)]
    pub forwarder: Option<Location>,
    /// zone → region.
    #[serde(default)]
    pub zones: Vec<Location>,
    /// RTT hints in ms, `rtt_ms.<from>.<to>`.
    #[serde(default)]
    pub rtt_ms: BTreeMap<String, BTreeMap<String, f64>>,
    /// Client prefix → zone.
    #[serde(default)]
    pub client_zones: Vec<ClientZone>,
    /// Service policy; absent fields = default/off.
    #[serde(default)]
    pub service: ScService,
    /// Backends.
    pub backends: Vec<ScBackend>,
    /// Steps, in order.
    pub steps: Vec<Step>,
}

/// The service fields a scenario may set (the names of [`Service`]).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ScService {
    pub session_affinity: Option<SessionAffinity>,
    pub zonal_affinity: Option<ZonalAffinity>,
    pub spillover_ratio: Option<f64>,
    pub failover_ratio: Option<f64>,
    pub drop_traffic_if_unhealthy: Option<bool>,
    pub latency_sensitivity_ms: Option<f64>,
    pub load_balancing_algorithm: Option<Algorithm>,
    pub auto_capacity_drain: Option<bool>,
    pub failover_health_threshold: Option<i64>,
    pub isolation_granularity: Option<IsolationGranularity>,
    pub isolation_mode: Option<IsolationMode>,
    pub maglev_table_size: Option<i64>,
}

/// A backend of a scenario: config fields plus its live state.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ScBackend {
    pub name: String,
    #[serde(default)]
    pub zone: String,
    pub failover: Option<bool>,
    pub priority: Option<i64>,
    pub weight: Option<i64>,
    pub enabled: Option<bool>,
    /// Single endpoint healthy (default true).
    pub healthy: Option<bool>,
    /// Group size (default 1).
    pub endpoints: Option<u32>,
    /// Healthy endpoints of the group (default all, or none when `healthy = false`).
    pub healthy_endpoints: Option<u32>,
    pub latency_ms: Option<f64>,
    pub preference: Option<Preference>,
    pub capacity_cps: Option<f64>,
    pub capacity_scaler: Option<f64>,
    /// Measured load (cps), used when a step gives no `offered_cps`.
    pub load_cps: Option<f64>,
    /// The group's endpoints with their weights and health (instead of `endpoints` /
    /// `healthy_endpoints` / `healthy`); the outcome then gives `endpoint_shares`.
    pub group: Option<Vec<ScEndpoint>>,
}

/// An endpoint of a scenario backend group (`ScBackend::group`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScEndpoint {
    /// Name, unique within the backend.
    pub name: String,
    /// Weight 1–1000 among the backend's endpoints (default 50).
    pub weight: Option<i64>,
    /// Admin state (default true).
    pub enabled: Option<bool>,
    /// Passes health checks (default true).
    pub healthy: Option<bool>,
}

/// Changes of one backend in a step's `set` (same fields as [`ScBackend`] but the name).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct BackendPatch {
    pub zone: Option<String>,
    pub failover: Option<bool>,
    pub priority: Option<i64>,
    pub weight: Option<i64>,
    pub enabled: Option<bool>,
    pub healthy: Option<bool>,
    pub endpoints: Option<u32>,
    pub healthy_endpoints: Option<u32>,
    pub latency_ms: Option<f64>,
    pub preference: Option<Preference>,
    pub capacity_cps: Option<f64>,
    pub capacity_scaler: Option<f64>,
    pub load_cps: Option<f64>,
    /// Replaces the group's endpoints (names, weights, health).
    pub group: Option<Vec<ScEndpoint>>,
}

/// One step.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Virtual time in seconds (non-decreasing; absent = the previous step's, or 0).
    pub at_sec: Option<f64>,
    /// Backend changes applied before evaluating; they persist.
    #[serde(default)]
    pub set: BTreeMap<String, BackendPatch>,
    /// Source address of the new connection.
    pub client: std::net::IpAddr,
    /// Offered new-connection rate (cps).
    pub offered_cps: Option<f64>,
    /// What must come out.
    pub expect: Expect,
}

/// A step's expectation; every field given is checked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Final eligible set (order does not matter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible: Option<Vec<String>>,
    /// New connections dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<bool>,
    /// Long-run share per backend (missing backends: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<BTreeMap<String, f64>>,
    /// Absolute tolerance of `shares` (default 0.01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// The configuration is refused, naming this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
}

/// A file that is not a valid scenario: the field path and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ScenarioError {
    /// Field path, e.g. `steps[1].expect.eligible[0]` (`.` for the document).
    pub path: String,
    /// Why.
    pub message: String,
}

impl ScenarioError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ScenarioError { path: path.into(), message: message.into() }
    }
}

/// The result of one step: printed as one JSON line.
#[derive(Clone, Debug, Serialize)]
pub struct StepOutcome {
    /// Scenario name.
    pub scenario: String,
    /// Step index (0-based).
    pub step: usize,
    /// Whether the expectation holds.
    pub pass: bool,
    /// Final eligible backends (config order).
    pub eligible: Vec<String>,
    /// New connections dropped.
    pub drop: bool,
    /// Long-run share per eligible backend (rounded to 6 decimals).
    pub shares: BTreeMap<String, f64>,
    /// With backend groups (`group`): long-run share per `backend/endpoint`, the backend
    /// shares spread over healthy endpoints by endpoint weight
    /// ([`crate::pipeline::endpoints::endpoint_shares`]); rounded to 6 decimals.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub endpoint_shares: BTreeMap<String, f64>,
    /// The configuration error, when the config was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
    /// The expectation, on a mismatch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expect>,
    /// The pipeline's decision (with trace), when evaluated.
    #[serde(skip)]
    pub decision: Option<Decision>,
}

impl StepOutcome {
    /// The output line (compact JSON).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Parses scenario JSON; errors name the field path.
pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let sc: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
        let p = e.path().to_string();
        ScenarioError::new(if p.is_empty() { ".".to_string() } else { p }, e.into_inner().to_string())
    })?;
    check(&sc)?;
    Ok(sc)
}

fn check(sc: &Scenario) -> Result<(), ScenarioError> {
    if sc.steps.is_empty() {
        return Err(ScenarioError::new("steps", "at least one step is needed"));
    }
    let names: Vec<&str> = sc.backends.iter().map(|b| b.name.as_str()).collect();
    for (i, b) in sc.backends.iter().enumerate() {
        if b.group.is_some() && (b.endpoints.is_some() || b.healthy_endpoints.is_some() || b.healthy.is_some()) {
            return Err(ScenarioError::new(format!("backends[{i}].group"), "give either group or endpoints/healthy_endpoints/healthy"));
        }
        if let (Some(n), Some(h)) = (b.endpoints, b.healthy_endpoints) {
            if h > n {
                return Err(ScenarioError::new(format!("backends[{i}].healthy_endpoints"), format!("{h} exceeds endpoints = {n}")));
            }
        }
    }
    let mut last = f64::NEG_INFINITY;
    for (s, step) in sc.steps.iter().enumerate() {
        if let Some(t) = step.at_sec {
            if !t.is_finite() || t < last {
                return Err(ScenarioError::new(format!("steps[{s}].at_sec"), format!("{t} goes back in time (previous {last})")));
            }
            last = t;
        }
        for name in step.set.keys() {
            if !names.contains(&name.as_str()) {
                return Err(ScenarioError::new(format!("steps[{s}].set.{name}"), "no backend of this name"));
            }
        }
        let e = &step.expect;
        if e.eligible.is_none() && e.drop.is_none() && e.shares.is_none() && e.config_error.is_none() {
            return Err(ScenarioError::new(format!("steps[{s}].expect"), "needs one of eligible, drop, shares, config_error"));
        }
        for (k, n) in e.eligible.iter().flatten().enumerate() {
            if !names.contains(&n.as_str()) {
                return Err(ScenarioError::new(format!("steps[{s}].expect.eligible[{k}]"), format!("no backend named {n:?}")));
            }
        }
        for n in e.shares.iter().flat_map(|m| m.keys()) {
            if !names.contains(&n.as_str()) {
                return Err(ScenarioError::new(format!("steps[{s}].expect.shares.{n}"), "no backend of this name"));
            }
        }
        if let Some(t) = e.tolerance {
            if !(t.is_finite() && t >= 0.0) {
                return Err(ScenarioError::new(format!("steps[{s}].expect.tolerance"), "must be a number >= 0"));
            }
        }
    }
    Ok(())
}

fn to_u32(v: i64) -> u32 {
    v.clamp(0, i64::from(u32::MAX)) as u32
}

fn build_service(sc: &Scenario) -> Service {
    let s = &sc.service;
    let mut svc = Service::new(&sc.name, Ipv4Addr::new(10, 0, 0, 100), 80, Protocol::Tcp);
    svc.session_affinity = s.session_affinity.unwrap_or_default();
    svc.zonal_affinity = s.zonal_affinity.unwrap_or_default();
    svc.spillover_ratio = s.spillover_ratio;
    svc.failover_ratio = s.failover_ratio;
    svc.drop_traffic_if_unhealthy = s.drop_traffic_if_unhealthy.unwrap_or(false);
    svc.latency_sensitivity_ms = s.latency_sensitivity_ms;
    svc.load_balancing_algorithm = s.load_balancing_algorithm;
    svc.auto_capacity_drain = s.auto_capacity_drain.unwrap_or(false);
    svc.failover_health_threshold = s.failover_health_threshold.map(to_u32);
    svc.isolation_granularity = s.isolation_granularity;
    svc.isolation_mode = s.isolation_mode;
    if let Some(m) = s.maglev_table_size {
        svc.maglev_table_size = to_u32(m);
    }
    svc
}

fn patch_of(b: &ScBackend) -> BackendPatch {
    BackendPatch {
        zone: Some(b.zone.clone()),
        failover: b.failover,
        priority: b.priority,
        weight: b.weight,
        enabled: b.enabled,
        healthy: b.healthy,
        endpoints: b.endpoints,
        healthy_endpoints: b.healthy_endpoints,
        latency_ms: b.latency_ms,
        preference: b.preference,
        capacity_cps: b.capacity_cps,
        capacity_scaler: b.capacity_scaler,
        load_cps: b.load_cps,
        group: b.group.clone(),
    }
}

/// Sets a backend's endpoints from a scenario group: addresses 10.250.<backend>.<k> (unique
/// within the service), health into `health`.
fn set_group(b: &mut Backend, bi: usize, s: &mut BackendState, group: &[ScEndpoint], health: &mut Vec<bool>) {
    b.endpoints = group
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let mut x = Endpoint::new(Some(&e.name), Ipv4Addr::new(10, 250, bi as u8, (k + 1) as u8));
            x.weight = e.weight.map_or(50, to_u32);
            x.enabled = e.enabled.unwrap_or(true);
            x
        })
        .collect();
    *health = group.iter().map(|e| e.healthy.unwrap_or(true)).collect();
    let (n, h) = crate::pipeline::endpoints::group_counts(&b.members(), |k| health[k]);
    s.endpoints = n;
    s.healthy_endpoints = h;
}

fn apply(b: &mut Backend, s: &mut BackendState, p: &BackendPatch, path: &str) -> Result<(), ScenarioError> {
    if let Some(z) = &p.zone {
        b.zone = z.clone();
    }
    if let Some(v) = p.failover {
        b.failover = v;
    }
    if let Some(v) = p.priority {
        b.priority = to_u32(v);
    }
    if let Some(v) = p.weight {
        b.weight = to_u32(v);
    }
    if let Some(v) = p.enabled {
        b.enabled = v;
    }
    if let Some(v) = p.preference {
        b.preference = v;
    }
    if let Some(v) = p.capacity_cps {
        b.capacity_cps = Some(v);
    }
    if let Some(v) = p.capacity_scaler {
        b.capacity_scaler = v;
    }
    if let Some(v) = p.latency_ms {
        b.latency_ms = Some(v);
        s.latency_ms = Some(v);
    }
    if let Some(v) = p.load_cps {
        s.load_cps = v;
    }
    if let Some(n) = p.endpoints {
        s.endpoints = n;
        s.healthy_endpoints = s.healthy_endpoints.min(n);
    }
    if let Some(h) = p.healthy {
        s.healthy_endpoints = if h { s.endpoints } else { 0 };
    }
    if let Some(h) = p.healthy_endpoints {
        if h > s.endpoints {
            return Err(ScenarioError::new(format!("{path}.healthy_endpoints"), format!("{h} exceeds endpoints = {}", s.endpoints)));
        }
        s.healthy_endpoints = h;
    }
    Ok(())
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Runs a parsed scenario.
pub fn run(sc: &Scenario) -> Result<Vec<StepOutcome>, ScenarioError> {
    let mut svc = build_service(sc);
    let mut states = Vec::with_capacity(sc.backends.len());
    // per-endpoint health of backends given as a `group`
    let mut health: Vec<Vec<bool>> = vec![Vec::new(); sc.backends.len()];
    for (i, b) in sc.backends.iter().enumerate() {
        let mut cb = Backend::new(&b.name, &b.zone);
        // a group starts fully healthy unless told otherwise
        let mut s = BackendState { endpoints: 1, healthy_endpoints: 1, latency_ms: None, load_cps: 0.0 };
        if let Some(n) = b.endpoints {
            s.endpoints = n;
            s.healthy_endpoints = n;
        }
        apply(&mut cb, &mut s, &patch_of(b), &format!("backends[{i}]"))?;
        if let Some(g) = &b.group {
            set_group(&mut cb, i, &mut s, g, &mut health[i]);
        }
        svc.backends.push(cb);
        states.push(s);
    }
    let grouped = sc.backends.iter().any(|b| b.group.is_some());
    let mut cfg = Config {
        forwarder: sc.forwarder.clone(),
        zones: sc.zones.clone(),
        rtt_ms: sc.rtt_ms.clone(),
        client_zones: sc.client_zones.clone(),
        services: vec![svc],
        ..Default::default()
    };
    let topo = Topology::from_config(&cfg);
    let mut st = ServiceState::default();
    let mut now = 0.0;
    let mut out = Vec::with_capacity(sc.steps.len());
    for (k, step) in sc.steps.iter().enumerate() {
        now = step.at_sec.unwrap_or(now);
        for (name, p) in &step.set {
            if let Some(i) = cfg.services[0].backends.iter().position(|b| &b.name == name) {
                apply(&mut cfg.services[0].backends[i], &mut states[i], p, &format!("steps[{k}].set.{name}"))?;
                if let Some(g) = &p.group {
                    set_group(&mut cfg.services[0].backends[i], i, &mut states[i], g, &mut health[i]);
                }
            }
        }
        let exp = &step.expect;
        let mut o = StepOutcome {
            scenario: sc.name.clone(),
            step: k,
            pass: false,
            eligible: Vec::new(),
            drop: false,
            shares: BTreeMap::new(),
            endpoint_shares: BTreeMap::new(),
            config_error: None,
            expected: None,
            decision: None,
        };
        match cfg.validate() {
            Err(e) => {
                o.pass = exp.config_error.as_deref().is_some_and(|f| e.field() == f || e.path == f || e.path.ends_with(&format!(".{f}")));
                o.config_error = Some(e.to_string());
            }
            Ok(()) => {
                let svc = &cfg.services[0];
                let class = topo.classify(step.client);
                let d = evaluate(svc, &states, &topo, &class, step.offered_cps, &mut st, now);
                o.eligible = d.eligible.iter().map(|&i| svc.backends[i].name.clone()).collect();
                o.drop = d.drop;
                o.shares = d.weights.iter().map(|&(i, s)| (svc.backends[i].name.clone(), round6(s))).collect();
                if grouped {
                    let eps = crate::pipeline::endpoints::endpoint_shares(svc, &d.weights, |b, e| health[b].get(e).copied().unwrap_or(states[b].healthy_endpoints > 0));
                    o.endpoint_shares = eps
                        .iter()
                        .map(|x| (format!("{}/{}", svc.backends[x.backend].name, svc.backends[x.backend].members()[x.endpoint].name), round6(x.share)))
                        .collect();
                    // no endpoint to send to: the daemon builds no table and drops
                    o.drop |= o.endpoint_shares.is_empty();
                }
                o.pass = check_expect(exp, &o);
                o.decision = Some(d);
            }
        }
        if !o.pass {
            o.expected = Some(exp.clone());
        }
        out.push(o);
    }
    Ok(out)
}

fn check_expect(exp: &Expect, o: &StepOutcome) -> bool {
    if exp.config_error.is_some() {
        return false;
    }
    if let Some(el) = &exp.eligible {
        let mut a = o.eligible.clone();
        let mut b = el.clone();
        a.sort();
        b.sort();
        if a != b {
            return false;
        }
    }
    if let Some(d) = exp.drop {
        if d != o.drop {
            return false;
        }
    }
    if let Some(sh) = &exp.shares {
        let tol = exp.tolerance.unwrap_or(DEFAULT_TOLERANCE);
        let keys: std::collections::BTreeSet<&String> = sh.keys().chain(o.shares.keys()).collect();
        for k in keys {
            let a = o.shares.get(k).copied().unwrap_or(0.0);
            let e = sh.get(k).copied().unwrap_or(0.0);
            if (a - e).abs() > tol + 1e-12 {
                return false;
            }
        }
    }
    true
}

/// Parses and runs one scenario text: one outcome per step.
pub fn run_scenario_text(text: &str) -> Result<Vec<StepOutcome>, ScenarioError> {
    run(&parse(text)?)
}
