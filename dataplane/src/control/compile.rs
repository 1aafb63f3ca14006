//! Snapshot compilation: runs the routing pipeline (`spillway_shared::pipeline`) for every
//! service and client zone class over the config, the health view and the measured load,
//! and builds the [`Snapshot`] the workers read (Maglev tables, VIP maps, backend slots).
//! Pure apart from a cache of Maglev tables keyed by their inputs.

use super::slots::SlotMap;
use crate::control::snapshot::{BackendSlot, ClassTable, ServiceSnap, Snapshot};
use spillway_shared::config::{Config, Persistence, Protocol, SessionAffinity, Service, TrackingMode};
use spillway_shared::maglev::{MaglevEntry, MaglevTable};
use spillway_shared::net::PrefixTable;
use spillway_shared::pipeline::{self, BackendState, ClientClass, ServiceState, Topology};
use std::sync::Arc;

/// Health and load of one backend as the control plane knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendView {
    /// Healthy (a backend without a health check is healthy).
    pub healthy: bool,
    /// Probe RTT, ms.
    pub latency_ms: Option<f64>,
    /// Measured new connections per second.
    pub load_cps: f64,
}

impl Default for BackendView {
    fn default() -> Self {
        BackendView { healthy: true, latency_ms: None, load_cps: 0.0 }
    }
}

/// Health/load view keyed by (service, backend).
pub type HealthView = std::collections::HashMap<(String, String), BackendView>;

/// The pipeline's view of each backend of `svc`, in config order: one endpoint, healthy
/// per `health` (a backend missing from it counts as healthy), the configured
/// `latency_ms` before the measured one, load in new connections per second. The one
/// construction used by snapshot compilation and by live `explain`.
pub fn backend_states(svc: &Service, health: &HealthView) -> Vec<BackendState> {
    svc.backends
        .iter()
        .map(|b| {
            let v = health.get(&(svc.name.clone(), b.name.clone())).cloned().unwrap_or_default();
            BackendState { endpoints: 1, healthy_endpoints: u32::from(v.healthy), latency_ms: b.latency_ms.or(v.latency_ms), load_cps: v.load_cps }
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

/// Maglev tables built by recent compilations, keyed by (backend names and weights, table
/// size): a table depends on nothing else (spec/backend-selection.md), so a recompilation
/// after one backend's health change rebuilds only the tables whose sets changed instead
/// of every table of every service (building is ~2 ms per 65,537-slot table; evaluating
/// the pipeline is ~100 times cheaper). Entries unused for two generations are dropped.
type MaglevKey = (Vec<(String, u64)>, u32);
/// A final weighted set as (backend index, weight bits), to share identical tables.
type WeightSig = Vec<(usize, u64)>;
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

/// Runs the routing pipeline for every service × client class and builds the snapshot.
pub fn compile(cfg: &Config, slots: &SlotMap, input: CompileInput<'_>) -> Snapshot {
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
    for (si, svc) in cfg.services.iter().enumerate() {
        let states = backend_states(svc, input.health);
        let mut slot_of = Vec::with_capacity(svc.backends.len());
        for (bi, b) in svc.backends.iter().enumerate() {
            let slot = slots.slot(&svc.name, &b.name).unwrap_or(0);
            slot_of.push(slot);
            if let Some(s) = backends.get_mut(usize::from(slot)) {
                *s = BackendSlot {
                    present: true,
                    incarnation: slots.incarnation(slot),
                    service: si as u16,
                    name: b.name.clone(),
                    mac: b.mac.map(|m| m.0).unwrap_or([0; 6]),
                    addr: u32::from(b.address),
                    healthy: states[bi].healthy_endpoints > 0,
                    evict_connections: false,
                    draining_until_ms: None,
                };
            }
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
            // identical final sets (same backends, same weights) share one table
            let sig: Vec<(usize, u64)> = d.weights.iter().map(|(i, w)| (*i, w.to_bits())).collect();
            if let Some((_, t)) = built.iter().find(|(s, _)| *s == sig) {
                tables.push(Some(t.clone()));
                continue;
            }
            let entries: Vec<MaglevEntry<'_>> =
                d.weights.iter().map(|(i, w)| MaglevEntry { name: &svc.backends[*i].name, weight: *w }).collect();
            let maglev = cached_maglev(&entries, svc.maglev_table_size, input.generation);
            let all_unhealthy = d.weights.iter().all(|(i, _)| states[*i].healthy_endpoints == 0);
            let t = Arc::new(ClassTable { maglev, backends: d.weights.iter().map(|(i, _)| slot_of[*i]).collect(), all_unhealthy });
            built.push((sig, t.clone()));
            tables.push(Some(t));
        }
        let vip = u32::from(svc.vip);
        let proto = svc.protocol.number();
        snap.by_vip_port.insert((vip, svc.port, proto), si as u16);
        snap.by_vip_proto.entry((vip, proto)).or_insert((si as u16, 0)).1 += 1;
        snap.arp_addrs.insert(vip, ());
        snap.services.push(ServiceSnap {
            name: svc.name.clone(),
            vip,
            port: svc.port,
            proto,
            affinity: svc.session_affinity,
            tracking: svc.tracking_mode,
            persist_on_unhealthy: persists_on_unhealthy(svc),
            mode: svc.forwarding_mode,
            encap_mtu: svc.encap_mtu,
            idle_timeout_ms: idle_timeout_ms(cfg, svc),
            tables,
            failed_over,
        });
    }
    snap.backends = backends;
    snap
}
