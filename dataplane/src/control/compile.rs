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
use std::collections::HashMap;
use std::net::IpAddr;
use spillway_shared::neighbors::{next_hop, NextHop};
use std::sync::Arc;

/// Next hops as snapshot compilation reads them: address → MAC for resolved ones, and
/// [`PENDING_MAC`] for those pending their first resolution (eligible; the workers drop
/// their packets). An address missing from the view has failed resolution.
pub type NeighborView = HashMap<IpAddr, [u8; 6]>;

/// The MAC of a pending next hop in a [`NeighborView`]: all zero, which workers never
/// send to (`next_hop_unresolved`).
pub const PENDING_MAC: [u8; 6] = [0; 6];

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
    health.get(super::slots::key(&(svc, backend, endpoint))).cloned().unwrap_or_default()
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

/// The health view with every endpoint whose next hop *failed* resolution (missing from
/// `neighbors`: its requests timed out past the pending grace, or its entry expired)
/// marked unhealthy (such a backend is not eligible), or `None` when there is
/// none. An endpoint whose next hop is merely pending its first resolution
/// ([`PENDING_MAC`]) stays eligible: connections that outlived a
/// restart keep their backend while the workers drop their packets as
/// `next_hop_unresolved` until the MAC is known. The marks are not kept: health probes
/// still own `healthy`. The view the snapshot, `status` and live `explain` use.
pub fn with_unresolved(cfg: &Config, health: &HealthView, neighbors: &NeighborView) -> Option<HealthView> {
    mark_next_hops(cfg, health, |a| !neighbors.contains_key(a))
}

/// [`with_unresolved`] that also marks endpoints whose next hop is still pending: VIP
/// readiness (a VIP is announced once one of its endpoints can really be reached).
pub fn with_not_resolved(cfg: &Config, health: &HealthView, neighbors: &NeighborView) -> Option<HealthView> {
    mark_next_hops(cfg, health, |a| neighbors.get(a).is_none_or(|m| *m == PENDING_MAC))
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

/// Client classes of a topology and the prefix table that maps a client address to one:
/// the part of a compilation every service shares ([`compile_service`]).
#[derive(Clone, Debug)]
pub struct Frame {
    /// The zonal topology (zones, regions, RTT hints, client prefixes).
    pub topo: Topology,
    /// Client classes, in class-id order.
    pub classes: Vec<ClientClass>,
    /// Class id of clients that are not zonal-compatible.
    pub incompatible_class: u16,
    /// Class names by id.
    pub class_names: Vec<String>,
    /// Client prefix → class id.
    pub prefix_table: PrefixTable<u16>,
    /// `[conntrack]` idle timeouts (TCP, UDP), seconds: a service's default idle timeout.
    pub idle_sec: (u32, u32),
}

impl Frame {
    /// The frame of `cfg` (its zones, client zones and conntrack timeouts; not its services).
    pub fn new(cfg: &Config) -> Frame {
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
            let cls = if cz.compatible { ClientClass::Zone(cz.zone.clone().unwrap_or_default()) } else { ClientClass::Incompatible };
            (cz.prefix, class_id(&cls))
        }));
        Frame { topo, classes, incompatible_class, class_names, prefix_table, idle_sec: (cfg.conntrack.tcp_idle_timeout_sec, cfg.conntrack.udp_idle_timeout_sec) }
    }

    /// A snapshot without services or backends: generation, client classes, port
    /// addresses (answered in ARP / Neighbor Discovery) and encapsulation sources.
    pub fn skeleton(&self, cfg: &Config, generation: u64, port_addrs: &[u32]) -> Snapshot {
        let mut snap = Snapshot {
            generation,
            classes: self.prefix_table.clone(),
            incompatible_class: self.incompatible_class,
            class_names: self.class_names.clone(),
            port_addrs: port_addrs.to_vec(),
            created: Some(std::time::Instant::now()),
            ..Default::default()
        };
        for a in port_addrs.iter().filter(|a| **a != 0) {
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
        snap
    }
}

/// One endpoint as a compilation reads it, gathered from the control state
/// ([`ServiceInput::gather`]).
#[derive(Clone, Debug)]
pub struct EndpointInput {
    /// Its slot (0 when the slot map has none: a caller that compiled without syncing).
    pub slot: u16,
    /// The slot's incarnation.
    pub incarnation: u16,
    /// Health (with a failed next-hop resolution counted unhealthy), latency and load.
    pub view: EndpointView,
    /// Destination or next-hop MAC (all zero while unresolved).
    pub mac: [u8; 6],
}

/// Everything the compilation of one service reads besides the [`Frame`]: a copy, so it
/// can run without the control lock.
#[derive(Clone, Debug)]
pub struct ServiceInput {
    /// Index of the service in the config (= in the snapshot).
    pub index: usize,
    /// The service's config.
    pub svc: Service,
    /// The service's number ([`SlotMap::service_number`]).
    pub id: u16,
    /// Per backend, per member (config order): the endpoint.
    pub endpoints: Vec<Vec<EndpointInput>>,
    /// Pipeline state carried between evaluations (drain timers); updated by the compilation.
    pub state: ServiceState,
}

impl ServiceInput {
    /// Gathers service `si` of `cfg`: slots, health per `health` (an endpoint missing from
    /// it is healthy) marked by `neighbors` as [`with_unresolved`] does, next-hop MACs, and
    /// `state`.
    pub fn gather(cfg: &Config, si: usize, slots: &SlotMap, health: &HealthView, neighbors: Option<&NeighborView>, state: ServiceState) -> ServiceInput {
        let svc = &cfg.services[si];
        let endpoints = svc
            .backends
            .iter()
            .map(|b| {
                b.members()
                    .into_iter()
                    .map(|m| {
                        let slot = slots.slot(&svc.name, &b.name, &m.name).unwrap_or(0);
                        let mut view = endpoint_view(health, &svc.name, &b.name, &m.name);
                        let mac = match next_hop(cfg, svc, &m) {
                            NextHop::Static(mac) => mac,
                            NextHop::Resolve(a) => match neighbors {
                                Some(n) => match n.get(&a) {
                                    Some(mac) => *mac,
                                    None => {
                                        view.healthy = false;
                                        [0; 6]
                                    }
                                },
                                None => [0; 6],
                            },
                        };
                        EndpointInput { slot, incarnation: slots.incarnation(slot), view, mac }
                    })
                    .collect()
            })
            .collect();
        // A service outside the slot map (a caller that compiled without syncing it) gets a
        // number above every assigned one it does not collide with: its index from the top.
        let id = slots.service_number(&super::slots::identity(svc)).unwrap_or(u16::MAX - si as u16);
        ServiceInput { index: si, svc: svc.clone(), id, endpoints, state }
    }
}

/// [`backend_states`] over gathered endpoints.
fn backend_states_of(input: &ServiceInput) -> Vec<BackendState> {
    input
        .svc
        .backends
        .iter()
        .zip(&input.endpoints)
        .map(|(b, eps)| {
            let members = b.members();
            let (endpoints, healthy_endpoints) = pipeline::endpoints::group_counts(&members, |i| eps[i].view.healthy);
            let lat: Vec<f64> = members.iter().zip(eps).filter(|(m, e)| m.enabled && e.view.healthy).filter_map(|(_, e)| e.view.latency_ms).collect();
            let measured = if lat.is_empty() { None } else { Some(lat.iter().sum::<f64>() / lat.len() as f64) };
            BackendState { endpoints, healthy_endpoints, latency_ms: b.latency_ms.or(measured), load_cps: eps.iter().map(|e| e.view.load_cps).sum() }
        })
        .collect()
}

/// Compiles one service: the routing pipeline for every client class of `frame`, one
/// Maglev table per distinct final set, and the backend slots its endpoints hold
/// (`(slot, BackendSlot)`, draining marks unset). Updates `input.state`.
pub fn compile_service(frame: &Frame, input: &mut ServiceInput, now_sec: f64, generation: u64) -> (ServiceSnap, Vec<(u16, BackendSlot)>) {
    let si = input.index;
    let states = backend_states_of(input);
    let svc = &input.svc;
    let mut owned = Vec::new();
    // Maglev names (`Backend::maglev_name`): the backend's name for its endpoint named
    // like it, `backend/endpoint` for the other endpoints of a group.
    let mut hash_names: Vec<Vec<String>> = Vec::with_capacity(svc.backends.len());
    for (b, eps) in svc.backends.iter().zip(&input.endpoints) {
        let members = b.members();
        hash_names.push(members.iter().map(|m| b.maglev_name(&m.name)).collect());
        for (m, e) in members.iter().zip(eps) {
            owned.push((
                e.slot,
                BackendSlot {
                    present: true,
                    incarnation: e.incarnation,
                    service: si as u16,
                    name: b.maglev_name(&m.name),
                    mac: e.mac,
                    addr: match m.address {
                        std::net::IpAddr::V4(a) => u32::from(a),
                        std::net::IpAddr::V6(_) => 0,
                    },
                    addr6: match m.address {
                        std::net::IpAddr::V4(_) => 0,
                        std::net::IpAddr::V6(a) => u128::from(a),
                    },
                    healthy: e.view.healthy,
                    evict_connections: false,
                    draining_until_ms: None,
                },
            ));
        }
    }
    let healthy_of = |b: usize, e: usize| input.endpoints[b][e].view.healthy;
    let slot_of = |b: usize, e: usize| input.endpoints[b][e].slot;
    let mut tables: Vec<Option<Arc<ClassTable>>> = Vec::with_capacity(frame.classes.len());
    // (backend indices and weight bits of a final set, its table)
    let mut built: Vec<(WeightSig, Arc<ClassTable>)> = Vec::new();
    let mut failed_over = false;
    // Offered load for the capacity stage: the service's measured new-connection rate.
    let offered: f64 = states.iter().map(|s| s.load_cps).sum();
    let offered = if offered > 0.0 { Some(offered) } else { None };
    for class in &frame.classes {
        let d = pipeline::evaluate(svc, &states, &frame.topo, class, offered, &mut input.state, now_sec);
        failed_over |= matches!(d.tier, pipeline::TierKind::HealthyFailover { .. });
        if d.drop || d.weights.is_empty() {
            tables.push(None);
            continue;
        }
        // Maglev over endpoints: backend share x endpoint weight / the weights of the
        // backend's healthy endpoints (docs/semantics.md "Backend groups").
        let eps = pipeline::endpoints::endpoint_shares(svc, &d.weights, healthy_of);
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
        let maglev = cached_maglev(&entries, svc.maglev_table_size, generation);
        let all_unhealthy = eps.iter().all(|e| !healthy_of(e.backend, e.endpoint));
        let t = Arc::new(ClassTable { maglev, backends: eps.iter().map(|e| slot_of(e.backend, e.endpoint)).collect(), all_unhealthy });
        built.push((sig, t.clone()));
        tables.push(Some(t));
    }
    let (vip, vip6) = match svc.vip {
        std::net::IpAddr::V4(v) => (u32::from(v), 0),
        std::net::IpAddr::V6(v) => (0, u128::from(v)),
    };
    let idle_sec = svc.idle_timeout_sec.unwrap_or(match svc.protocol {
        Protocol::Tcp => frame.idle_sec.0,
        Protocol::Udp => frame.idle_sec.1,
    });
    let snap = ServiceSnap {
        name: svc.name.clone(),
        id: input.id,
        vip,
        vip6,
        ipv6: svc.vip.is_ipv6(),
        port: svc.port,
        proto: svc.protocol.number(),
        affinity: svc.session_affinity,
        tracking: svc.tracking_mode,
        persist_on_unhealthy: persists_on_unhealthy(svc),
        mode: svc.forwarding_mode,
        encap_mtu: svc.encap_mtu,
        encap_overhead: encap_overhead(svc),
        idle_timeout_ms: idle_sec.saturating_mul(1000),
        tables,
        failed_over,
        quic_lb: super::quic_lb::QuicLbTable::build(svc, slot_of).map(|(t, warnings)| {
            for w in warnings {
                tracing::warn!("{w}");
            }
            Box::new(t)
        }),
    };
    (snap, owned)
}

/// Enters service `si` (compiled as `ss`) in the snapshot's lookup maps: VIP/port/protocol,
/// VIP/protocol, the addresses answered in ARP / Neighbor Discovery, service numbers.
pub fn index_service(snap: &mut Snapshot, si: usize, ss: &ServiceSnap) {
    let si16 = si as u16;
    if ss.ipv6 {
        snap.by_vip6_port.insert((ss.vip6, ss.port, ss.proto), si16);
        snap.by_vip6_proto.entry((ss.vip6, ss.proto)).or_insert((si16, 0)).1 += 1;
        snap.nd_addrs.insert(ss.vip6, ());
    } else {
        snap.by_vip_port.insert((ss.vip, ss.port, ss.proto), si16);
        snap.by_vip_proto.entry((ss.vip, ss.proto)).or_insert((si16, 0)).1 += 1;
        snap.arp_addrs.insert(ss.vip, ());
    }
    snap.by_number.insert(ss.id, si16);
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
