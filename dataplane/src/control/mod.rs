//! Control plane state: backend slots, health view, snapshot compilation and publication.
//!
//! The control thread owns the config and the health/load view; on every change it runs
//! the routing pipeline for every service and client class, compiles a [`Snapshot`] and
//! publishes it through a crossbeam-epoch [`Atomic`]. Workers load it once per burst
//! inside an epoch guard; the old snapshot is destroyed only after every worker has left
//! the epoch in which it could have seen it.


pub mod snapshot;

use crate::control::snapshot::{BackendSlot, ClassTable, ServiceSnap, Snapshot};
use crate::fastpath::stats::{WorkerStats, MAX_BACKEND_SLOTS};
use crossbeam_epoch::{self as epoch, Atomic, Owned};
use spillway_shared::config::{Config, Persistence, Protocol, SessionAffinity, Service, TrackingMode};
use spillway_shared::maglev::{MaglevEntry, MaglevTable};
use spillway_shared::net::PrefixTable;
use spillway_shared::pipeline::{self, BackendState, ClientClass, ServiceState, Topology};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Stable slots for backends, keyed by (service name, backend name).
#[derive(Clone, Debug, Default)]
pub struct SlotMap {
    index: std::collections::HashMap<(String, String), u16>,
    owners: Vec<Option<(String, String)>>,
    incarnations: Vec<u16>,
}

impl SlotMap {
    /// Assigns slots to every backend of `cfg`, keeping the slots of backends that are still
    /// configured and freeing the others. Errors when more than [`MAX_BACKEND_SLOTS`].
    pub fn sync(&mut self, cfg: &Config) -> Result<(), String> {
        let wanted: std::collections::HashSet<(String, String)> = cfg
            .services
            .iter()
            .flat_map(|s| s.backends.iter().map(move |b| (s.name.clone(), b.name.clone())))
            .collect();
        // free removed
        let removed: Vec<(String, String)> = self.index.keys().filter(|k| !wanted.contains(*k)).cloned().collect();
        for k in removed {
            if let Some(slot) = self.index.remove(&k) {
                self.owners[usize::from(slot)] = None;
            }
        }
        for s in &cfg.services {
            for b in &s.backends {
                let k = (s.name.clone(), b.name.clone());
                if self.index.contains_key(&k) {
                    continue;
                }
                let slot = match self.owners.iter().position(Option::is_none) {
                    Some(i) => i,
                    None => {
                        if self.owners.len() >= MAX_BACKEND_SLOTS {
                            return Err(format!("more than {MAX_BACKEND_SLOTS} backends in all services"));
                        }
                        self.owners.push(None);
                        self.incarnations.push(0);
                        self.owners.len() - 1
                    }
                };
                self.owners[slot] = Some(k.clone());
                self.incarnations[slot] = self.incarnations[slot].wrapping_add(1);
                self.index.insert(k, slot as u16);
            }
        }
        Ok(())
    }

    /// Slot of a backend.
    pub fn slot(&self, service: &str, backend: &str) -> Option<u16> {
        self.index.get(&(service.to_string(), backend.to_string())).copied()
    }

    /// (service, backend) holding a slot, if any.
    pub fn owner(&self, slot: u16) -> Option<&(String, String)> {
        self.owners.get(usize::from(slot)).and_then(Option::as_ref)
    }

    /// Number of slots (used or free).
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether no slot exists.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// Incarnation of a slot.
    pub fn incarnation(&self, slot: u16) -> u16 {
        self.incarnations.get(usize::from(slot)).copied().unwrap_or(0)
    }
}

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
static MAGLEV_CACHE: std::sync::Mutex<Option<std::collections::HashMap<MaglevKey, (Arc<MaglevTable>, u64)>>> = std::sync::Mutex::new(None);

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
        let mut built: Vec<(Vec<(usize, u64)>, Arc<ClassTable>)> = Vec::new();
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
        snap.by_vip_proto.entry((vip, proto)).or_insert(si as u16);
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

/// State shared between the control plane and the workers.
pub struct Shared {
    /// The current snapshot.
    pub snapshot: Atomic<Snapshot>,
    /// Set to stop the workers.
    pub stop: AtomicBool,
    /// Per-worker counters.
    pub stats: Vec<Arc<WorkerStats>>,
    /// Generation of the current snapshot.
    pub generation: AtomicU64,
    /// Per-worker control mailboxes (connection-table requests).
    pub mailboxes: Vec<Arc<Mailbox>>,
    /// Serialises control-side use of the mailboxes.
    pub mailbox_lock: std::sync::Mutex<u64>,
}

/// Most entries one worker lists for a `Show` request (the answer must fit a 1 MiB frame).
pub const MAX_SHOW_PER_WORKER: usize = 5000;

/// A connection-table request to one worker.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowRequest {
    /// Sequence number, echoed in the reply.
    pub seq: u64,
    /// What to do.
    pub op: spillway_shared::proto::FlowOp,
    /// Entries whose (backend slot, incarnation) is listed match; `None` = every entry.
    pub slots: Option<Vec<(u16, u16)>>,
}

/// A worker's answer to a [`FlowRequest`].
#[derive(Clone, Debug, Default)]
pub struct FlowReply {
    /// Sequence number of the request.
    pub seq: u64,
    /// Matching live entries (for `Flush`: entries removed).
    pub count: u64,
    /// Up to `limit` entries (for `Show`), with their idle time in ms.
    pub entries: Vec<(crate::fastpath::conntrack::Entry, u32)>,
}

/// A worker's control mailbox. The worker checks `pending` once per poll iteration (one
/// relaxed-cost atomic load); only when it is set does it take the mutexes, run the
/// request on its own connection table, store the reply and clear `pending`. With no
/// request pending the packet path takes no lock.
#[derive(Debug, Default)]
pub struct Mailbox {
    /// A request is waiting.
    pub pending: AtomicBool,
    /// The request.
    pub request: std::sync::Mutex<Option<FlowRequest>>,
    /// The reply.
    pub reply: std::sync::Mutex<Option<FlowReply>>,
}

impl Mailbox {
    /// Worker side: if a request is pending, runs `f` on it and posts the reply.
    #[inline]
    pub fn serve(&self, f: impl FnOnce(&FlowRequest) -> FlowReply) {
        if !self.pending.load(Ordering::Acquire) {
            return;
        }
        self.serve_slow(f);
    }

    #[cold]
    fn serve_slow(&self, f: impl FnOnce(&FlowRequest) -> FlowReply) {
        let req = self.request.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(req) = req {
            let reply = f(&req);
            *self.reply.lock().unwrap_or_else(|e| e.into_inner()) = Some(reply);
        }
        self.pending.store(false, Ordering::Release);
    }
}

impl Shared {
    /// Shared state with an initial snapshot and `workers` counter sets.
    pub fn new(initial: Snapshot, workers: usize) -> Shared {
        let generation = AtomicU64::new(initial.generation);
        Shared {
            snapshot: Atomic::new(initial),
            stop: AtomicBool::new(false),
            stats: (0..workers).map(|_| Arc::new(WorkerStats::default())).collect(),
            generation,
            mailboxes: (0..workers).map(|_| Arc::new(Mailbox::default())).collect(),
            mailbox_lock: std::sync::Mutex::new(0),
        }
    }

    /// Control side: posts `op` to every worker's mailbox and waits up to `timeout` for all
    /// replies. Errors name the workers that did not answer in time (stopped or stuck).
    pub fn ask_workers(
        &self,
        op: spillway_shared::proto::FlowOp,
        slots: Option<Vec<(u16, u16)>>,
        timeout: std::time::Duration,
    ) -> Result<Vec<FlowReply>, String> {
        let mut seq = self.mailbox_lock.lock().unwrap_or_else(|e| e.into_inner());
        *seq += 1;
        let seq = *seq;
        for mb in &self.mailboxes {
            *mb.reply.lock().unwrap_or_else(|e| e.into_inner()) = None;
            *mb.request.lock().unwrap_or_else(|e| e.into_inner()) = Some(FlowRequest { seq, op, slots: slots.clone() });
            mb.pending.store(true, Ordering::Release);
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut out: Vec<Option<FlowReply>> = vec![None; self.mailboxes.len()];
        loop {
            for (i, mb) in self.mailboxes.iter().enumerate() {
                if out[i].is_none() && !mb.pending.load(Ordering::Acquire) {
                    let r = mb.reply.lock().unwrap_or_else(|e| e.into_inner()).take();
                    if let Some(r) = r.filter(|r| r.seq == seq) {
                        out[i] = Some(r);
                    }
                }
            }
            if out.iter().all(Option::is_some) {
                return Ok(out.into_iter().flatten().collect());
            }
            if std::time::Instant::now() >= deadline || self.stop.load(Ordering::Relaxed) {
                let missing: Vec<String> = out.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i.to_string()).collect();
                return Err(format!("worker(s) {} did not answer within {} ms", missing.join(", "), timeout.as_millis()));
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Publishes `snap`; the previous snapshot is freed after every worker has moved on.
    pub fn publish(&self, snap: Snapshot) {
        let g = snap.generation;
        let guard = epoch::pin();
        let old = self.snapshot.swap(Owned::new(snap), Ordering::AcqRel, &guard);
        self.generation.store(g, Ordering::Release);
        if !old.is_null() {
            // SAFETY: `old` was unlinked by the swap above, so no new reader can reach it;
            // readers that loaded it hold an epoch guard, and crossbeam-epoch runs the
            // destructor only after all of them have unpinned.
            unsafe { guard.defer_destroy(old) };
        }
        guard.flush();
    }

    /// Runs `f` with the current snapshot inside an epoch guard.
    pub fn with_snapshot<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> Option<R> {
        let guard = epoch::pin();
        let s = self.snapshot.load(Ordering::Acquire, &guard);
        // SAFETY: the pointer is either null or a live snapshot protected by `guard`.
        unsafe { s.as_ref() }.map(f)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: we have `&mut self`: no worker can hold a guard into this Atomic any more.
        unsafe {
            let g = epoch::unprotected();
            let s = self.snapshot.swap(epoch::Shared::null(), Ordering::AcqRel, g);
            if !s.is_null() {
                drop(s.into_owned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastpath::conntrack::Timeouts;
    use crate::fastpath::worker::Worker;
    use spillway_shared::flow::FlowKey;
    use spillway_shared::proto::FlowOp;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    /// Two workers with their own tables serve mailbox requests from their poll loops.
    #[test]
    fn mailbox_requests_reach_every_worker() {
        let shared = Arc::new(Shared::new(Snapshot::default(), 2));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for w in 0..2usize {
            let (sh, stop) = (shared.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut worker = Worker::new(w, 1024, 7 + w as u64, Timeouts::default(), sh.stats[w].clone(), Vec::new());
                for i in 0..10u16 {
                    let k = FlowKey::new(Ipv4Addr::new(10, 1, w as u8, i as u8), Ipv4Addr::new(10, 0, 0, 100), 1000 + i, 80, 6);
                    // slots 0 (incarnation 1) and 1 (incarnation 1); slot 1 with a stale incarnation 0 for i == 9
                    let (slot, inc) = if i == 9 { (1, 0) } else { (i % 2, 1) };
                    worker.ct.insert(&k, slot, inc, 0, crate::wire::tcp_flags::SYN, 5, &Timeouts::default());
                }
                while !stop.load(Ordering::Relaxed) {
                    sh.mailboxes[w].serve(|req| worker.control(req, 10));
                    std::thread::sleep(Duration::from_micros(100));
                }
            }));
        }
        let t = Duration::from_secs(5);
        let all = shared.ask_workers(FlowOp::Count, None, t).unwrap();
        assert_eq!(all.iter().map(|r| r.count).collect::<Vec<_>>(), vec![10, 10]);
        let s1 = shared.ask_workers(FlowOp::Count, Some(vec![(1, 1)]), t).unwrap();
        assert_eq!(s1.iter().map(|r| r.count).sum::<u64>(), 8, "the stale incarnation does not match");
        let shown = shared.ask_workers(FlowOp::Show { limit: 3 }, Some(vec![(0, 1)]), t).unwrap();
        assert!(shown.iter().all(|r| r.entries.len() == 3 && r.count == 5));
        let fl = shared.ask_workers(FlowOp::Flush, Some(vec![(0, 1)]), t).unwrap();
        assert_eq!(fl.iter().map(|r| r.count).sum::<u64>(), 10);
        let left = shared.ask_workers(FlowOp::Count, None, t).unwrap();
        assert_eq!(left.iter().map(|r| r.count).sum::<u64>(), 10);
        stop.store(true, Ordering::Relaxed);
        for th in threads {
            th.join().unwrap();
        }
        // nobody serving: a timeout naming the workers, not a hang
        let e = shared.ask_workers(FlowOp::Count, None, Duration::from_millis(50)).unwrap_err();
        assert!(e.contains("worker(s) 0, 1 did not answer"), "{e}");
    }
}
