//! Snapshot compilation: runs the routing pipeline (`spillway_shared::pipeline`) for every
//! service and client zone class over the config, the health view and the measured load,
//! and builds the [`Snapshot`] the workers read (Maglev tables, VIP maps, backend slots).
//! Slots are per endpoint: each class's Maglev table is built over the healthy endpoints
//! of the chosen backends, weighted by backend share × endpoint weight
//! ([`spillway_shared::pipeline::endpoints::endpoint_shares`]), so a connection is pinned
//! to an endpoint and the workers' keep/move rules apply per endpoint.
//! Pure apart from a cache of Maglev tables keyed by their inputs.

use super::slots::SlotMap;
use crate::control::snapshot::{BackendSlot, ClassTable, ServiceSnap, Snapshot};
use spillway_shared::config::{Config, Persistence, Protocol, SessionAffinity, Service, TrackingMode};
use spillway_shared::maglev::{MaglevEntry, MaglevTable};
use spillway_shared::net::PrefixTable;
use spillway_shared::pipeline::{self, BackendState, ClientClass, ServiceState, Topology};
use crate::neighbor::driver::NeighborView;
use spillway_shared::neighbors::{next_hop, NextHop};
use std::sync::Arc;

/// Health and load of one endpoint as the control plane knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointView {
    /// Healthy (an endpoint without a health check is healthy).
    pub healthy: bool,
    /// Probe RTT, ms.
    pub latency_ms: Option<f64>,
    /// Measured new connections per second sent to this endpoint.
    pub load_cps: f64,
}

impl Default for EndpointView {
    fn default() -> Self {
        EndpointView { healthy: true, latency_ms: None, load_cps: 0.0 }
    }
}

pub use super::slots::EndpointKey;

/// Health/load view keyed by (service, backend, endpoint).
pub type HealthView = std::collections::HashMap<EndpointKey, EndpointView>;

/// The view of one endpoint (a missing entry counts as healthy, without latency or load).
pub fn endpoint_view(health: &HealthView, svc: &str, backend: &str, endpoint: &str) -> EndpointView {
    health.get(&(svc.to_string(), backend.to_string(), endpoint.to_string())).cloned().unwrap_or_default()
}

/// The pipeline's view of each backend of `svc`, in config order: its enabled endpoints
/// and how many of them are healthy per `health` (`pipeline::endpoints::group_counts`;
/// an endpoint missing from the view counts as healthy), the configured `latency_ms`
/// before the mean measured latency of its healthy endpoints, load = the sum of its
/// endpoints' new connections per second. The one construction used by snapshot
/// compilation and by live `explain`.
pub fn backend_states(svc: &Service, health: &HealthView) -> Vec<BackendState> {
    svc.backends
        .iter()
        .map(|b| {
            let members = b.members();
            let views: Vec<EndpointView> = members.iter().map(|m| endpoint_view(health, &svc.name, &b.name, &m.name)).collect();
            let (endpoints, healthy_endpoints) = pipeline::endpoints::group_counts(&members, |i| views[i].healthy);
            let lat: Vec<f64> = members.iter().zip(&views).filter(|(m, v)| m.enabled && v.healthy).filter_map(|(_, v)| v.latency_ms).collect();
            let measured = if lat.is_empty() { None } else { Some(lat.iter().sum::<f64>() / lat.len() as f64) };
            BackendState { endpoints, healthy_endpoints, latency_ms: b.latency_ms.or(measured), load_cps: views.iter().map(|v| v.load_cps).sum() }
        })
        .collect()
}

/// Whether a tracked connection persists on an unhealthy backend
/// (spec/backend-selection.md `connection_persistence_on_unhealthy_backends`).
pub fn persists_on_unhealthy(svc: &Service) -> bool {
    match svc.connection_persistence_on_unhealthy_backends {
        Persistence::ALWAYS_PERSIST => true,
        Persistence::NEVER_PERSIST => false,
        Persistence::DEFAULT_FOR_PROTOCOL => {
            svc.protocol == Protocol::Tcp
                && (svc.tracking_mode == TrackingMode::PER_CONNECTION
                    || matches!(svc.session_affinity, SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO))
        }
    }
}

/// Default idle timeout of a service's connections, ms.
fn idle_timeout_ms(cfg: &Config, svc: &Service) -> u32 {
    let sec = svc.idle_timeout_sec.unwrap_or(match svc.protocol {
        Protocol::Tcp => cfg.conntrack.tcp_idle_timeout_sec,
        Protocol::Udp => cfg.conntrack.udp_idle_timeout_sec,
    });
    sec.saturating_mul(1000)
}

/// Inputs of one compilation besides the config.
pub struct CompileInput<'a> {
    /// Health and load.
    pub health: &'a HealthView,
    /// Per-service pipeline state (drain timers), by service name.
    pub states: &'a mut std::collections::HashMap<String, ServiceState>,
    /// Control-plane time, seconds.
    pub now_sec: f64,
    /// Generation number to stamp.
    pub generation: u64,
    /// Per-port own address (host order, 0 = none), by port index.
    pub port_addrs: Vec<u32>,
}

/// Maglev tables built by recent compilations, keyed by (`backend/endpoint` names and
/// weights, table size): a table depends on nothing else (spec/backend-selection.md), so a recompilation
/// after one backend's health change rebuilds only the tables whose sets changed instead
/// of every table of every service (building is ~2 ms per 65,537-slot table; evaluating
/// the pipeline is ~100 times cheaper). Entries unused for two generations are dropped.
type MaglevKey = (Vec<(String, u64)>, u32);
/// A final weighted set as (backend index, endpoint index, share bits), to share
/// identical tables.
type WeightSig = Vec<(usize, usize, u64)>;
/// Cached table and the last generation that used it.
type MaglevCache = std::collections::HashMap<MaglevKey, (Arc<MaglevTable>, u64)>;
static MAGLEV_CACHE: std::sync::Mutex<Option<MaglevCache>> = std::sync::Mutex::new(None);

fn cached_maglev(entries: &[MaglevEntry<'_>], size: u32, generation: u64) -> Arc<MaglevTable> {
    // The table's slots index `entries` in the caller's order, so the key keeps that order
    // (the same set in another order is another key).
    let key = (entries.iter().map(|e| (e.name.to_string(), e.weight.to_bits())).collect::<Vec<_>>(), size);
    let mut guard = MAGLEV_CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = guard.get_or_insert_with(Default::default);
    if let Some((t, used)) = cache.get_mut(&key) {
        *used = (*used).max(generation);
        return t.clone();
    }
    let t = Arc::new(MaglevTable::build(entries, size));
    cache.insert(key, (t.clone(), generation));
    cache.retain(|_, (_, used)| used.saturating_add(2) >= generation);
    t
}

/// Runs the routing pipeline for every service × client class and builds the snapshot,
/// without next-hop resolution: endpoints without a configured `mac` keep their health
/// and get an all-zero MAC (which workers drop as `next_hop_unresolved`). Tests and
/// benchmarks of routing use it; the daemon uses [`compile_with_neighbors`].
pub fn compile(cfg: &Config, slots: &SlotMap, input: CompileInput<'_>) -> Snapshot {
    compile_inner(cfg, slots, input, None)
}

/// The health view with every endpoint whose next hop *failed* resolution (missing from
/// `neighbors`: its requests timed out past the pending grace, or its entry expired)
/// marked unhealthy (such a backend is not eligible), or `None` when there is
/// none. An endpoint whose next hop is merely pending its first resolution
/// ([`crate::neighbor::driver::PENDING_MAC`]) stays eligible: connections that outlived a
/// restart keep their backend while the workers drop their packets as
/// `next_hop_unresolved` until the MAC is known. The marks are not kept: health probes
/// still own `healthy`. The view the snapshot, `status` and live `explain` use.
pub fn with_unresolved(cfg: &Config, health: &HealthView, neighbors: &NeighborView) -> Option<HealthView> {
    mark_next_hops(cfg, health, |a| !neighbors.contains_key(a))
}

/// [`with_unresolved`] that also marks endpoints whose next hop is still pending: VIP
/// readiness (a VIP is announced once one of its endpoints can really be reached).
pub fn with_not_resolved(cfg: &Config, health: &HealthView, neighbors: &NeighborView) -> Option<HealthView> {
    mark_next_hops(cfg, health, |a| neighbors.get(a).is_none_or(|m| *m == crate::neighbor::driver::PENDING_MAC))
}

fn mark_next_hops(cfg: &Config, health: &HealthView, ineligible: impl Fn(&std::net::IpAddr) -> bool) -> Option<HealthView> {
    let mut out: Option<HealthView> = None;
    for s in &cfg.services {
        for b in &s.backends {
            for m in b.members() {
                if let NextHop::Resolve(a) = next_hop(cfg, s, &m) {
                    if ineligible(&a) {
                        let h = out.get_or_insert_with(|| health.clone());
                        h.entry((s.name.clone(), b.name.clone(), m.name.clone())).or_default().healthy = false;
                    }
                }
            }
        }
    }
    out
}

/// [`compile`] with resolved next hops: an endpoint without a configured `mac` takes the
/// MAC of its next hop ([`spillway_shared::neighbors::next_hop`]) from `neighbors` (all
/// zero while pending), and is not eligible (counted unhealthy by the pipeline) once its
/// resolution failed ([`with_unresolved`]).
pub fn compile_with_neighbors(cfg: &Config, slots: &SlotMap, input: CompileInput<'_>, neighbors: &NeighborView) -> Snapshot {
    compile_inner(cfg, slots, input, Some(neighbors))
}

fn compile_inner(cfg: &Config, slots: &SlotMap, input: CompileInput<'_>, neighbors: Option<&NeighborView>) -> Snapshot {
    let marked = neighbors.and_then(|n| with_unresolved(cfg, input.health, n));
    let health: &HealthView = marked.as_ref().unwrap_or(input.health);
    let topo = Topology::from_config(cfg);
    let classes = topo.client_classes();
    let incompatible_class = classes.iter().position(|c| *c == ClientClass::Incompatible).unwrap_or(classes.len()) as u16;
    let class_names: Vec<String> = classes
        .iter()
        .map(|c| match c {
            ClientClass::Zone(z) => z.clone(),
            ClientClass::Incompatible => "(not zonal)".to_string(),
        })
        .collect();
    let class_id = |c: &ClientClass| classes.iter().position(|x| x == c).unwrap_or(usize::from(incompatible_class)) as u16;
    let prefix_table = PrefixTable::new(cfg.client_zones.iter().map(|cz| {
        let cls = if cz.compatible {
            ClientClass::Zone(cz.zone.clone().unwrap_or_default())
        } else {
            ClientClass::Incompatible
        };
        (cz.prefix, class_id(&cls))
    }));

    let mut backends = vec![
        BackendSlot {
            present: false,
            incarnation: 0,
            service: 0,
            name: String::new(),
            mac: [0; 6],
            addr: 0,
            addr6: 0,
            healthy: false,
            evict_connections: false,
            draining_until_ms: None,
        };
        slots.len()
    ];
    let mut snap = Snapshot {
        generation: input.generation,
        classes: prefix_table,
        incompatible_class,
        class_names,
        port_addrs: input.port_addrs.clone(),
        created: Some(std::time::Instant::now()),
        ..Default::default()
    };
    for a in input.port_addrs.iter().filter(|a| **a != 0) {
        snap.arp_addrs.insert(*a, ());
    }
    // IPv6 port addresses come from the config (ports in config order = port index).
    snap.port_addrs6 = cfg
        .ports
        .iter()
        .map(|p| match (p.address, p.address6) {
            (Some(std::net::IpAddr::V6(a)), _) | (_, Some(a)) => u128::from(a),
            _ => 0,
        })
        .collect();
    for a in snap.port_addrs6.iter().filter(|a| **a != 0) {
        snap.nd_addrs.insert(*a, ());
    }
    for (si, svc) in cfg.services.iter().enumerate() {
        let states = backend_states(svc, health);
        // Slots per endpoint: slot_of[backend][endpoint]; health per endpoint.
        let mut slot_of: Vec<Vec<u16>> = Vec::with_capacity(svc.backends.len());
        let mut healthy_of: Vec<Vec<bool>> = Vec::with_capacity(svc.backends.len());
        // Maglev names (`Backend::maglev_name`): the backend's name for its endpoint named
        // like it, `backend/endpoint` for the other endpoints of a group.
        let mut hash_names: Vec<Vec<String>> = Vec::with_capacity(svc.backends.len());
        for b in &svc.backends {
            let mut row = Vec::new();
            let mut hrow = Vec::new();
            hash_names.push(b.members().iter().map(|m| b.maglev_name(&m.name)).collect());
            for m in b.members() {
                let slot = slots.slot(&svc.name, &b.name, &m.name).unwrap_or(0);
                let healthy = endpoint_view(health, &svc.name, &b.name, &m.name).healthy;
                row.push(slot);
                hrow.push(healthy);
                if let Some(s) = backends.get_mut(usize::from(slot)) {
                    *s = BackendSlot {
                        present: true,
                        incarnation: slots.incarnation(slot),
                        service: si as u16,
                        name: b.maglev_name(&m.name),
                        mac: match next_hop(cfg, svc, &m) {
                            NextHop::Static(mac) => mac,
                            NextHop::Resolve(a) => neighbors.and_then(|n| n.get(&a)).copied().unwrap_or([0; 6]),
                        },
                        addr: match m.address {
                            std::net::IpAddr::V4(a) => u32::from(a),
                            std::net::IpAddr::V6(_) => 0,
                        },
                        addr6: match m.address {
                            std::net::IpAddr::V4(_) => 0,
                            std::net::IpAddr::V6(a) => u128::from(a),
                        },
                        healthy,
                        evict_connections: false,
                        draining_until_ms: None,
                    };
                }
            }
            slot_of.push(row);
            healthy_of.push(hrow);
        }
        let st = input.states.entry(svc.name.clone()).or_default();
        let mut tables: Vec<Option<Arc<ClassTable>>> = Vec::with_capacity(classes.len());
        // (backend indices and weight bits of a final set, its table)
        let mut built: Vec<(WeightSig, Arc<ClassTable>)> = Vec::new();
        let mut failed_over = false;
        // Offered load for the capacity stage: the service's measured new-connection rate.
        let offered: f64 = states.iter().map(|s| s.load_cps).sum();
        let offered = if offered > 0.0 { Some(offered) } else { None };
        for class in &classes {
            let d = pipeline::evaluate(svc, &states, &topo, class, offered, st, input.now_sec);
            failed_over |= matches!(d.tier, pipeline::TierKind::HealthyFailover { .. });
            if d.drop || d.weights.is_empty() {
                tables.push(None);
                continue;
            }
            // Maglev over endpoints: backend share x endpoint weight / the weights of the
            // backend's healthy endpoints (docs/semantics.md "Backend groups").
            let eps = pipeline::endpoints::endpoint_shares(svc, &d.weights, |b, e| healthy_of[b][e]);
            if eps.is_empty() {
                tables.push(None);
                continue;
            }
            // identical final sets (same endpoints, same weights) share one table
            let sig: WeightSig = eps.iter().map(|e| (e.backend, e.endpoint, e.share.to_bits())).collect();
            if let Some((_, t)) = built.iter().find(|(s, _)| *s == sig) {
                tables.push(Some(t.clone()));
                continue;
            }
            let entries: Vec<MaglevEntry<'_>> = eps.iter().map(|e| MaglevEntry { name: &hash_names[e.backend][e.endpoint], weight: e.share }).collect();
            let maglev = cached_maglev(&entries, svc.maglev_table_size, input.generation);
            let all_unhealthy = eps.iter().all(|e| !healthy_of[e.backend][e.endpoint]);
            let t = Arc::new(ClassTable { maglev, backends: eps.iter().map(|e| slot_of[e.backend][e.endpoint]).collect(), all_unhealthy });
            built.push((sig, t.clone()));
            tables.push(Some(t));
        }
        let proto = svc.protocol.number();
        let (vip, vip6) = match svc.vip {
            std::net::IpAddr::V4(v) => {
                let vip = u32::from(v);
                snap.by_vip_port.insert((vip, svc.port, proto), si as u16);
                snap.by_vip_proto.entry((vip, proto)).or_insert((si as u16, 0)).1 += 1;
                snap.arp_addrs.insert(vip, ());
                (vip, 0)
            }
            std::net::IpAddr::V6(v) => {
                let vip6 = u128::from(v);
                snap.by_vip6_port.insert((vip6, svc.port, proto), si as u16);
                snap.by_vip6_proto.entry((vip6, proto)).or_insert((si as u16, 0)).1 += 1;
                snap.nd_addrs.insert(vip6, ());
                (0, vip6)
            }
        };
        // A service outside the slot map (a caller that compiled without syncing it) gets a
        // number above every assigned one it does not collide with: its index from the top.
        let id = slots.service_number(&super::slots::identity(svc)).unwrap_or(u16::MAX - si as u16);
        snap.by_number.insert(id, si as u16);
        snap.services.push(ServiceSnap {
            name: svc.name.clone(),
            id,
            vip,
            vip6,
            ipv6: svc.vip.is_ipv6(),
            port: svc.port,
            proto,
            affinity: svc.session_affinity,
            tracking: svc.tracking_mode,
            persist_on_unhealthy: persists_on_unhealthy(svc),
            mode: svc.forwarding_mode,
            encap_mtu: svc.encap_mtu,
            encap_overhead: encap_overhead(svc),
            idle_timeout_ms: idle_timeout_ms(cfg, svc),
            tables,
            failed_over,
            quic_lb: super::quic_lb::QuicLbTable::build(svc, |b, e| slot_of[b][e]).map(|(t, warnings)| {
                for w in warnings {
                    tracing::warn!("{w}");
                }
                Box::new(t)
            }),
        });
    }
    snap.backends = backends;
    snap
}

/// The largest IPIP/GUE overhead over `svc`'s endpoints (0 for L2 DSR), by each endpoint's
/// family ([`crate::wire::Encap::overhead`], [`crate::wire::Encap::overhead6`]).
fn encap_overhead(svc: &spillway_shared::config::Service) -> u16 {
    use spillway_shared::config::ForwardingMode;
    let encap = match svc.forwarding_mode {
        ForwardingMode::L2_DSR => return 0,
        ForwardingMode::GUE => crate::wire::Encap::gue(0),
        _ => crate::wire::Encap::Ipip,
    };
    let v6 = svc.backends.iter().flat_map(|b| b.members()).any(|m| m.address.is_ipv6());
    let v4 = svc.backends.iter().flat_map(|b| b.members()).any(|m| m.address.is_ipv4());
    let o = |v6: bool| if v6 { encap.overhead6() } else { encap.overhead() };
    (if v6 { o(true) } else if v4 { o(false) } else { 0 }) as u16
}
