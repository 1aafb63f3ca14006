//! The daemon's control-plane object: config, slots, health view, the shared snapshot and
//! counters; answers control-socket requests.

use crate::control::{compile_with_neighbors, CompileInput, HealthView, Shared, SlotMap};
use spillway_shared::config::Config;
use spillway_shared::pipeline::ServiceState;
use spillway_shared::proto::{Counters, PortStatus};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Reads a port's device counters (DPDK in production, nothing in tests).
pub type PortStatsFn = Box<dyn Fn(usize) -> PortStatus + Send + Sync>;

/// Control-plane state, guarded by one mutex (never touched by workers).
pub struct ControlState {
    /// Running config.
    pub cfg: Config,
    /// Endpoint slots.
    pub slots: SlotMap,
    /// Health and load.
    pub health: HealthView,
    /// Pipeline state per service.
    pub states: HashMap<String, ServiceState>,
    /// Last snapshot generation published (moves on every republication: config edits,
    /// health changes, load ticks).
    pub generation: u64,
    /// Config generation: 1 at start, +1 per applied `spillwayctl` mutation; what
    /// `--if-generation` compares against.
    pub config_generation: u64,
    /// Failover pool state per service (for connection draining on failover/failback).
    pub pools: HashMap<String, PoolState>,
    /// New-connection counter per (service, backend, endpoint) at the last load tick.
    pub last_new: HashMap<crate::control::EndpointKey, u64>,
    /// Time of the last load tick, seconds since start.
    pub last_load_tick: f64,
    /// Time of the last publication, for propagation measurements.
    pub last_publish: Option<(u64, Instant)>,
    /// Last measured time from publication to every worker using the snapshot, µs.
    pub last_propagation_us: Option<u64>,
    /// Per-slot counter totals (new connections, packets) when the slot was given to its
    /// current backend: that backend's zero (a reused slot's counters keep counting).
    pub slot_base: HashMap<u16, (u64, u64)>,
    /// Per-slot byte totals when the slot was given to its current backend.
    pub slot_base_bytes: HashMap<u16, u64>,
    /// Next-hop resolution ([`crate::neighbor`]).
    pub neighbors: crate::neighbor::driver::Resolver,
    /// Target-set generation last handed to the health checker (+1 per live edit); health
    /// events of older generations are dropped (see [`crate::health::view`]).
    pub health_generation: u64,
    /// Why the health checker thread died, once it has (see [`Daemon::watch_health_checker`]).
    pub health_checker_dead: Option<String>,
    /// `RLIMIT_NOFILE` soft limit in force (set by `main` after raising it; 0 = unknown).
    pub nofile_limit: u64,
    /// Endpoints counted unhealthy because their first probe round was not decided when
    /// the round's time ran out (`control_loop::startup`); each leaves the set with its
    /// first decided result.
    pub undecided: std::collections::HashSet<crate::control::EndpointKey>,
    /// What the next publication must recompile ([`crate::control::incremental::Dirty`]):
    /// marked by health events, load and latency moves and live edits.
    pub dirty: crate::control::incremental::Dirty,
    /// Whether the config the daemon started with had an IPv6 service: `main` then sized
    /// the IPv6 connection tables from `capacity_per_worker` (else 1,024 entries), so IPv6
    /// services may come and go live; otherwise the first one needs a restart.
    pub ipv6_tables_sized: bool,
}

pub use crate::control::pools::PoolState;

/// Marks for recompilation ([`ControlState::dirty`]) every service with an endpoint whose
/// next hop ([`spillway_shared::neighbors::next_hop`]) is an address whose entry differs
/// between the neighbour view `before` and the current one (added, removed or another
/// MAC): what a change of resolved next hops changes in a snapshot.
fn mark_next_hop_users(st: &mut ControlState, before: &crate::neighbor::driver::NeighborView) {
    let now = st.neighbors.view();
    let changed: std::collections::HashSet<std::net::IpAddr> =
        before.iter().filter(|(a, m)| now.get(*a) != Some(*m)).map(|(a, _)| *a).chain(now.keys().filter(|a| !before.contains_key(*a)).copied()).collect();
    if changed.is_empty() {
        return;
    }
    let cfg = &st.cfg;
    for s in &cfg.services {
        let uses = s.backends.iter().any(|b| {
            b.members().iter().any(|m| matches!(spillway_shared::neighbors::next_hop(cfg, s, m), spillway_shared::neighbors::NextHop::Resolve(a) if changed.contains(&a)))
        });
        if uses {
            st.dirty.service(&s.name);
        }
    }
}

/// See [`Daemon::multicast`].
pub type MulticastFn = Box<dyn Fn(&[[u8; 6]]) + Send + Sync>;

/// The daemon.
pub struct Daemon {
    /// Control state.
    pub control: Mutex<ControlState>,
    /// Shared with workers.
    pub shared: Arc<Shared>,
    /// Start time.
    pub started: Instant,
    /// Port stats reader.
    pub port_stats: PortStatsFn,
    /// Per-port own addresses (host order; 0 = none).
    pub port_addrs: Vec<u32>,
    /// Programs the ports' multicast filters when our IPv6 groups change (`with_multicast`).
    pub multicast: Option<MulticastFn>,
    /// The health checker, when running (absent in tests without probes).
    pub checker: Mutex<Option<crate::health::HealthChecker>>,
    /// Where health events go (to start a checker when a live edit adds the first check).
    pub health_events: Mutex<Option<std::sync::mpsc::Sender<crate::health::HealthEvent>>>,
    /// Config file that live edits are written back to (`None`: not persisted, tests).
    pub config_path: Option<std::path::PathBuf>,
    /// VIP readiness, operator drains and worker progress ([`crate::announce`]).
    pub fleet: crate::readiness::FleetState,
    /// Counters of the control socket (its server counts into them; `status` shows them).
    pub ctl_stats: Arc<crate::ctl::server::ServerStats>,
    /// Fleet flow-state sync, when `[sync]` is configured (set once at start).
    pub sync: std::sync::OnceLock<Arc<crate::sync::SyncRuntime>>,
    /// Whether the health checker has finished its first round of probes (every target
    /// started at daemon start has a result); VIPs are announced only after it.
    pub first_probe_round: std::sync::atomic::AtomicBool,
    /// Bumped by every iteration of the control loop; the systemd watchdog is fed only
    /// while it moves ([`crate::readiness::Heartbeat`]).
    pub control_heartbeat: crate::readiness::Heartbeat,
    /// Serialises live edits (`mutate`), which write the config file without holding
    /// `control` (a slow disk must not block the control loop, the fleet thread or
    /// readers); the config generation changes only under it.
    pub edit_lock: Mutex<()>,
    /// The services of the last `config apply` text, by their text: the next apply parses
    /// only the services whose text changed ([`spillway_shared::config::chunked`]).
    pub apply_parse_cache: Mutex<spillway_shared::config::chunked::ParseCache>,
    /// The running `capture drops` session, if any ([`crate::ctl::capture`]).
    pub capture: Mutex<Option<crate::ctl::session::Session>>,
    /// The ports' link state and changes as the control loop's link check last saw them
    /// (readiness, `status`); empty in tests without ports.
    pub links: Arc<crate::readiness::LinkStates>,
}

impl Daemon {
    /// Builds the daemon state and the first snapshot (generation 1). Every backend starts
    /// healthy until its health check says otherwise.
    pub fn new(cfg: Config, workers: usize, port_addrs: Vec<u32>, port_stats: PortStatsFn) -> Result<Daemon, String> {
        let mut slots = SlotMap::default();
        slots.sync(&cfg)?;
        // every counter is zero at start: the initial slots need no baseline
        slots.take_fresh();
        let health = HealthView::new();
        let mut states = HashMap::new();
        let started = Instant::now();
        let mut neighbors = crate::neighbor::driver::Resolver::new(&cfg);
        neighbors.set_config(&cfg, 0);
        let snap = compile_with_neighbors(&cfg, &slots, CompileInput { health: &health, states: &mut states, now_sec: 0.0, generation: 1, port_addrs: port_addrs.clone() }, neighbors.view());
        // The active pool of every service at start: the first republication that fails
        // over (or back) is a switch like any later one and drains the pool it leaves.
        let pools: HashMap<String, PoolState> = cfg
            .services
            .iter()
            .zip(&snap.services)
            .map(|(svc, ss)| (svc.name.clone(), PoolState::at_start(ss)))
            .collect();
        let shared = Arc::new(Shared::new(snap, workers));
        let ipv6_tables_sized = cfg.services.iter().any(|s| s.vip.is_ipv6()); // as main.rs sizes them
        Ok(Daemon {
            control: Mutex::new(ControlState {
                cfg,
                slots,
                health,
                states,
                generation: 1,
                config_generation: 1,
                pools,
                last_new: HashMap::new(),
                last_load_tick: 0.0,
                last_publish: None,
                last_propagation_us: None,
                slot_base: HashMap::new(),
                slot_base_bytes: HashMap::new(),
                neighbors,
                health_generation: 0,
                health_checker_dead: None,
                nofile_limit: 0,
                dirty: Default::default(),
                undecided: Default::default(),
                ipv6_tables_sized,
            }),
            shared,
            started,
            port_stats,
            port_addrs,
            multicast: None,
            checker: Mutex::new(None),
            health_events: Mutex::new(None),
            config_path: None,
            fleet: Default::default(),
            ctl_stats: Arc::default(),
            sync: std::sync::OnceLock::new(),
            first_probe_round: std::sync::atomic::AtomicBool::new(true),
            control_heartbeat: Default::default(),
            edit_lock: Mutex::new(()),
            apply_parse_cache: Mutex::default(),
            capture: Mutex::new(None),
            links: Arc::default(),
        })
    }

    /// Whether the health checker's first round of probes is over while the daemon has not
    /// latched it yet ([`Daemon::first_probe_round`]); the control loop latches it after
    /// applying the events already sent.
    pub fn first_round_pending_and_over(&self) -> bool {
        !self.first_probe_round.load(std::sync::atomic::Ordering::Acquire)
            && self.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|c| c.first_round_done())
    }

    /// Shares the ports' link states ([`Daemon::links`]) with their other readers.
    pub fn with_links(mut self, links: Arc<crate::readiness::LinkStates>) -> Daemon {
        self.links = links;
        self
    }

    /// Sets how the ports' multicast filters are programmed ([`Daemon::multicast`]).
    pub fn with_multicast(mut self, f: MulticastFn) -> Daemon {
        self.multicast = Some(f);
        self
    }

    /// Sets the config file live edits are persisted to.
    pub fn with_config_path(mut self, path: std::path::PathBuf) -> Daemon {
        self.config_path = Some(path);
        self
    }

    /// Milliseconds on the worker clock (`started` is the workers' epoch too).
    pub fn now_ms(&self) -> u32 {
        self.started.elapsed().as_millis() as u32
    }

    /// Recompiles and publishes a snapshot from the current control state.
    ///
    /// Connection draining (spec/backend-selection.md "Connection draining on
    /// failover/failback"): when a service's active pool changes, backends of the pool that
    /// is no longer active keep their existing connections until `connection_drain_timeout_sec`
    /// after the switch, or lose them at once with `disable_connection_drain_on_failover`
    /// ([`crate::control::pools`] has the whole rule).
    pub fn republish(&self, st: &mut ControlState) -> u64 {
        st.dirty.everything();
        st.dirty.config = true;
        self.republish_dirty(st)
    }

    /// Recompiles what `st.dirty` marks ([`crate::control::incremental`]) and publishes,
    /// all under the control lock the caller holds (live edits, whose answer names the
    /// snapshot generation). Returns the generation published.
    pub fn republish_dirty(&self, st: &mut ControlState) -> u64 {
        let dirty = std::mem::take(&mut st.dirty);
        let mut job = self.prepare_publication(st, &dirty);
        let built = job.run();
        self.finish_publication(st, built)
    }

    /// Publishes what `st.dirty` marks, compiling without the control lock: the marks and
    /// inputs are taken under it, the routing pipeline and Maglev tables run outside it,
    /// and the result is published under it only if no other publication came in between
    /// (the snapshot generation it was built from is still current). Otherwise the marks
    /// go back and it is rebuilt, at most `3` times, then compiled under the lock.
    /// Returns the generation published, `None` when nothing was marked.
    pub fn publish_dirty(&self) -> Option<u64> {
        for _ in 0..3 {
            let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
            if st.dirty.is_empty() {
                return None;
            }
            let dirty = std::mem::take(&mut st.dirty);
            let base = st.generation;
            let mut job = self.prepare_publication(&mut st, &dirty);
            drop(st);
            let built = job.run();
            let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
            if st.generation == base {
                return Some(self.finish_publication(&mut st, built));
            }
            // Another publication (a live edit) came in between: it did not include these
            // marks, and this result does not include its change.
            st.dirty.merge(dirty);
        }
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        Some(self.republish_dirty(&mut st))
    }

    fn prepare_publication(&self, st: &mut ControlState, dirty: &crate::control::incremental::Dirty) -> crate::control::incremental::Job {
        // Slots given to new backends since the last publication start from the counters'
        // current totals (workers cannot count for a slot before a snapshot names it).
        for slot in st.slots.take_fresh() {
            let totals = self.slot_raw_totals(slot);
            st.slot_base.insert(slot, totals);
            let bytes = self.slot_raw_bytes(slot);
            st.slot_base_bytes.insert(slot, bytes);
        }
        if dirty.config || dirty.all {
            // Next hops follow the config (live edits add and remove addresses).
            st.neighbors.set_config(&st.cfg, self.started.elapsed().as_millis() as u64);
        }
        let now_sec = self.started.elapsed().as_secs_f64();
        crate::control::incremental::Job::prepare(
            &st.cfg,
            &st.slots,
            &st.health,
            &st.states,
            Some(st.neighbors.view()),
            &self.port_addrs,
            &dirty.indices(&st.cfg),
            st.generation + 1,
            now_sec,
        )
    }

    fn finish_publication(&self, st: &mut ControlState, built: crate::control::incremental::Built) -> u64 {
        for (name, s) in built.states() {
            st.states.insert(name.to_string(), s.clone());
        }
        let prev = self.shared.current();
        let mut snap = built.assemble(Some(&prev));
        drop(prev);
        st.generation += 1;
        snap.generation = st.generation;
        let now_ms = self.now_ms();
        crate::control::pools::mark_draining(&st.cfg, &st.slots, &mut snap, &mut st.pools, now_ms);
        self.shared.publish(snap);
        st.last_publish = Some((st.generation, Instant::now()));
        st.generation
    }

    /// Raw per-slot counter sums over workers: (new connections, packets).
    fn slot_raw_totals(&self, slot: u16) -> (u64, u64) {
        let s = usize::from(slot);
        self.shared.stats.iter().fold((0, 0), |(n, p), w| {
            (n + w.backend_new.get(s).map_or(0, |c| c.load(Relaxed)), p + w.backend_packets.get(s).map_or(0, |c| c.load(Relaxed)))
        })
    }

    /// Raw per-slot byte sum over workers.
    fn slot_raw_bytes(&self, slot: u16) -> u64 {
        let s = usize::from(slot);
        self.shared.stats.iter().map(|w| w.backend_bytes.get(s).map_or(0, |c| c.load(Relaxed))).sum()
    }

    /// Bytes forwarded to the backend that holds `slot` now, since it got the slot.
    pub fn slot_bytes(&self, st: &ControlState, slot: u16) -> u64 {
        self.slot_raw_bytes(slot).saturating_sub(st.slot_base_bytes.get(&slot).copied().unwrap_or(0))
    }

    /// One tick of next-hop resolution (control loop, every 50 ms): hands the workers'
    /// ARP replies to the neighbour table, queues due requests for worker 0, and
    /// republishes when a resolved MAC appeared, changed or expired: only the services
    /// with an endpoint whose next hop is one of the addresses that changed are recompiled,
    /// without the control lock ([`Daemon::publish_dirty`]). Returns whether the resolved
    /// next hops changed.
    pub fn neighbor_tick(&self) -> bool {
        self.neighbor_tick_at(self.started.elapsed().as_millis() as u64)
    }

    /// [`Daemon::neighbor_tick`] at an explicit time (ms since start; tests).
    pub fn neighbor_tick_at(&self, now: u64) -> bool {
        let mut guard = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *guard;
        let before = st.neighbors.view().clone();
        let changed = st.neighbors.tick(&st.cfg, &self.shared.neighbors, now);
        let macs = st.neighbors.take_multicast_change();
        if changed {
            mark_next_hop_users(st, &before);
        }
        drop(guard); // some drivers restart traffic or wait on an admin queue to change the filter
        if changed {
            self.publish_dirty();
        }
        if let (Some(macs), Some(program)) = (macs, &self.multicast) {
            program(&macs);
        }
        changed
    }

    /// New connections and packets of the backend that holds `slot` now, since it got the
    /// slot (summed over workers).
    pub fn slot_totals(&self, st: &ControlState, slot: u16) -> (u64, u64) {
        let (n, p) = self.slot_raw_totals(slot);
        let (bn, bp) = st.slot_base.get(&slot).copied().unwrap_or((0, 0));
        (n.saturating_sub(bn), p.saturating_sub(bp))
    }

    /// Applies a health event from the checker, unless it was produced for an older target
    /// set than the last one handed over (a live edit since: the view already took the
    /// checker's state then). Returns whether the health state changed.
    pub fn apply_health_event(&self, ev: &crate::health::HealthEvent) -> bool {
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        if !crate::health::is_current(ev, st.health_generation) {
            tracing::debug!(service = %ev.service, backend = %ev.backend, endpoint = %ev.endpoint, generation = ev.generation,
                current = st.health_generation, "stale health event dropped");
            return false;
        }
        let changed = self.set_health_locked(&mut st, &ev.service, &ev.backend, &ev.endpoint, ev.healthy, ev.rtt_ms);
        if changed {
            self.republish_dirty(&mut st);
        }
        changed
    }

    /// Applies a batch of health events (those of one control tick) under one hold of the
    /// control lock, without publishing: the services they change are marked, and the
    /// caller publishes them once ([`Daemon::publish_dirty`]). Events of an older target
    /// set are dropped as in [`Daemon::apply_health_event`]. Returns how many changed an
    /// endpoint's health.
    pub fn apply_health_events(&self, events: &[crate::health::HealthEvent]) -> usize {
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed = 0;
        for ev in events {
            if !crate::health::is_current(ev, st.health_generation) {
                tracing::debug!(service = %ev.service, backend = %ev.backend, endpoint = %ev.endpoint, generation = ev.generation,
                    current = st.health_generation, "stale health event dropped");
                continue;
            }
            changed += usize::from(self.set_health_locked(&mut st, &ev.service, &ev.backend, &ev.endpoint, ev.healthy, ev.rtt_ms));
        }
        changed
    }

    /// Checks that the health checker thread, if one was started, still runs. When it has
    /// died: records why (shown by `status`), logs an error and returns the reason; the
    /// caller then exits non-zero (docs/operations.md "Health checker"), since frozen
    /// health is worse than a restart.
    pub fn watch_health_checker(&self) -> Option<String> {
        let reason = self.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.dead()?;
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        if st.health_checker_dead.is_none() {
            tracing::error!(reason = %reason, "the health checker thread died: backend health is frozen");
            st.health_checker_dead = Some(reason.clone());
        }
        Some(reason)
    }

    /// Applies a health result to every endpoint of a backend (for a single-endpoint
    /// backend: its endpoint); republishes when the health state changed. Results for a
    /// backend no longer configured are ignored.
    pub fn set_health(&self, service: &str, backend: &str, healthy: bool, latency_ms: Option<f64>) -> bool {
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let members: Vec<String> = st
            .cfg
            .service(service)
            .and_then(|s| s.backends.iter().find(|b| b.name == backend))
            .map(|b| b.members().into_iter().map(|m| m.name).collect())
            .unwrap_or_default();
        let mut changed = false;
        for ep in members {
            changed |= self.set_health_locked(&mut st, service, backend, &ep, healthy, latency_ms);
        }
        if changed {
            self.republish_dirty(&mut st);
        }
        changed
    }

    /// Applies a health result of one endpoint; republishes when the health state changed.
    /// Results for an endpoint no longer configured are ignored.
    pub fn set_endpoint_health(&self, service: &str, backend: &str, endpoint: &str, healthy: bool, latency_ms: Option<f64>) -> bool {
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let changed = self.set_health_locked(&mut st, service, backend, endpoint, healthy, latency_ms);
        if changed {
            self.republish_dirty(&mut st);
        }
        changed
    }

    fn set_health_locked(&self, st: &mut ControlState, service: &str, backend: &str, endpoint: &str, healthy: bool, latency_ms: Option<f64>) -> bool {
        // A late event for an endpoint removed by a live edit must not leave a stale entry
        // (a re-added endpoint of the same name would inherit it).
        let known = st.cfg.service(service).and_then(|s| s.backends.iter().find(|b| b.name == backend)).is_some_and(|b| b.members().iter().any(|m| m.name == endpoint));
        if !known {
            return false;
        }
        let key = (service.to_string(), backend.to_string(), endpoint.to_string());
        if !st.undecided.is_empty() {
            st.undecided.remove(&key); // an event is a decided result
        }
        let e = st.health.entry(key).or_default();
        let changed = e.healthy != healthy;
        e.healthy = healthy;
        if latency_ms.is_some() {
            e.latency_ms = latency_ms;
        }
        if changed && healthy {
            self.revalidate_next_hop(st, service, backend, endpoint);
        }
        if changed {
            tracing::info!(service, backend, endpoint, healthy, "health changed");
            st.dirty.service(service);
        }
        changed
    }

    /// An endpoint whose health came back up is re-resolved before it takes traffic: when
    /// its next hop is its own address resolved by ARP or Neighbor Discovery (no `mac`),
    /// that address leaves the resolved view until a fresh request is answered (or times
    /// out: the known MAC is used again), so a backend recreated with the same IP and a
    /// new MAC gets no connection sent to its old MAC (QA B46;
    /// [`crate::neighbor::table::NeighborTable::revalidate`]). The caller republishes.
    fn revalidate_next_hop(&self, st: &mut ControlState, service: &str, backend: &str, endpoint: &str) {
        let Some(svc) = st.cfg.service(service) else { return };
        let Some(m) = svc.backends.iter().find(|b| b.name == backend).and_then(|b| b.members().into_iter().find(|m| m.name == endpoint)) else { return };
        if let spillway_shared::neighbors::NextHop::Resolve(a) = spillway_shared::neighbors::next_hop(&st.cfg, svc, &m) {
            if a == m.address {
                let now = self.started.elapsed().as_millis() as u64;
                let before = st.neighbors.view().clone();
                if st.neighbors.revalidate(&a, now) {
                    // other services may reach an endpoint at the same address
                    mark_next_hop_users(st, &before);
                }
            }
        }
    }

    /// Copies probe RTTs (the latency origin routing uses) into the health view;
    /// republishes the services with a latency band where some latency moved by more
    /// than 20 % (and 1 ms).
    pub fn refresh_latencies(&self) {
        let statuses = match self.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(c) => c.snapshot(),
            None => return,
        };
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let mut moved: std::collections::BTreeSet<String> = Default::default();
        for t in &statuses {
            let Some(rtt) = t.rtt_ewma_ms else { continue };
            let e = st.health.entry((t.service.clone(), t.backend.clone(), t.endpoint.clone())).or_default();
            let old = e.latency_ms.unwrap_or(f64::INFINITY);
            if (old - rtt).abs() > (0.2 * old).max(1.0) && !moved.contains(&t.service) {
                moved.insert(t.service.clone());
            }
            e.latency_ms = Some(rtt);
        }
        for name in moved {
            if st.cfg.service(&name).is_some_and(|s| s.latency_sensitivity_ms.is_some()) {
                st.dirty.service(&name);
            }
        }
        drop(st);
        self.publish_dirty();
    }

    /// One control tick: measures per-backend new-connection rates (load feedback for the
    /// capacity stage), re-evaluates time-based rules (capacity drain hysteresis) for the
    /// services that use them, and records snapshot propagation times. Publishes the
    /// services whose load moved or whose drain deadline passed ([`Daemon::publish_dirty`]).
    pub fn tick(&self) {
        // Old snapshots every worker has moved past are freed here, on the control thread.
        self.shared.reclaim();
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((gen, at)) = st.last_publish {
            if self.shared.stats.iter().all(|w| w.generation.load(Relaxed) >= gen) {
                st.last_propagation_us = Some(at.elapsed().as_micros() as u64);
                st.last_publish = None;
            }
        }
        let now = self.started.elapsed().as_secs_f64();
        let dt = now - st.last_load_tick;
        if dt < 1.0 {
            return;
        }
        st.last_load_tick = now;
        // A drain deadline that passed is written into the snapshot as an eviction (so the
        // wrapping worker clock never revives it; control::pools).
        let now_ms = self.now_ms();
        let due: Vec<String> = st
            .pools
            .iter()
            .filter(|(name, p)| p.draining.iter().any(|d| !d.passed) && st.cfg.service(name).is_some_and(|s| p.deadline_due(s.connection_drain_timeout_sec, now_ms)))
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            st.dirty.service(&name);
        }
        // Load is measured per endpoint slot; a backend's load is the sum of its endpoints'.
        // (service, its (backend, endpoint) pairs, whether load moves its routing)
        type Endpoints = Vec<(String, String)>;
        let services: Vec<(String, Endpoints, bool)> = st
            .cfg
            .services
            .iter()
            .map(|s| {
                let dynamic = s.auto_capacity_drain
                    || s.backends.iter().any(|b| b.capacity_cps.is_some() || b.preference == spillway_shared::config::Preference::PREFERRED);
                (s.name.clone(), s.backends.iter().flat_map(|b| b.members().into_iter().map(|m| (b.name.clone(), m.name))).collect(), dynamic)
            })
            .collect();
        for (svc, endpoints, dynamic) in services {
            for (b, ep) in endpoints {
                let Some(slot) = st.slots.slot(&svc, &b, &ep) else { continue };
                let total = self.slot_totals(&st, slot).0;
                let key = (svc.clone(), b.clone(), ep.clone());
                let prev = st.last_new.insert(key.clone(), total).unwrap_or(total);
                let rate = total.saturating_sub(prev) as f64 / dt;
                let e = st.health.entry(key).or_default();
                let moved = dynamic && (e.load_cps - rate).abs() > 0.05 * e.load_cps.max(1.0);
                e.load_cps = rate;
                if moved {
                    st.dirty.service(&svc);
                }
            }
            if dynamic && st.cfg.service(&svc).is_some_and(|s| s.auto_capacity_drain) {
                st.dirty.service(&svc);
            }
        }
        drop(st);
        self.publish_dirty();
    }

    /// Per-worker counters, each read outcomes first and `rx` last
    /// ([`crate::control::counters`]): a read never has more outcomes than frames received.
    pub fn worker_counters(&self) -> Vec<Counters> {
        self.shared.stats.iter().map(|w| crate::control::counters::read(w)).collect()
    }
}

#[cfg(test)]
mod health_tests;
