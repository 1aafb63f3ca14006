//! The daemon's control-plane object: config, slots, health view, the shared snapshot and
//! counters; answers control-socket requests.

use crate::control::{compile, CompileInput, HealthView, Shared, SlotMap};
use crate::ctl::server::Handler;
use crate::fastpath::stats;
use spillway_shared::config::Config;
use spillway_shared::pipeline::ServiceState;
use spillway_shared::proto::{BackendStatus, Counters, PortStatus, Request, Response, StatusReport};
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
    /// Backend slots.
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
    /// New-connection counter per (service, backend) at the last load tick.
    pub last_new: HashMap<(String, String), u64>,
    /// Time of the last load tick, seconds since start.
    pub last_load_tick: f64,
    /// Time of the last publication, for propagation measurements.
    pub last_publish: Option<(u64, Instant)>,
    /// Last measured time from publication to every worker using the snapshot, µs.
    pub last_propagation_us: Option<u64>,
    /// Per-slot counter totals (new connections, packets) when the slot was given to its
    /// current backend: that backend's zero (a reused slot's counters keep counting).
    pub slot_base: HashMap<u16, (u64, u64)>,
}

/// Which pool of a service is active, and since when (worker clock, ms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolState {
    /// The failover pool is active.
    pub failed_over: bool,
    /// When the active pool last changed (ms on the worker clock).
    pub switched_at_ms: Option<u32>,
}

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
    /// The health checker, when running (absent in tests without probes).
    pub checker: Mutex<Option<crate::health::HealthChecker>>,
    /// Where health events go (to start a checker when a live edit adds the first check).
    pub health_events: Mutex<Option<std::sync::mpsc::Sender<crate::health::HealthEvent>>>,
    /// Config file that live edits are written back to (`None`: not persisted, tests).
    pub config_path: Option<std::path::PathBuf>,
    /// VIP readiness, operator drains and worker progress (issue 13; [`crate::announce`]).
    pub fleet: crate::announce::FleetState,
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
        let snap = compile(&cfg, &slots, CompileInput { health: &health, states: &mut states, now_sec: 0.0, generation: 1, port_addrs: port_addrs.clone() });
        let shared = Arc::new(Shared::new(snap, workers));
        Ok(Daemon {
            control: Mutex::new(ControlState {
                cfg,
                slots,
                health,
                states,
                generation: 1,
                config_generation: 1,
                pools: HashMap::new(),
                last_new: HashMap::new(),
                last_load_tick: 0.0,
                last_publish: None,
                last_propagation_us: None,
                slot_base: HashMap::new(),
            }),
            shared,
            started,
            port_stats,
            port_addrs,
            checker: Mutex::new(None),
            health_events: Mutex::new(None),
            config_path: None,
            fleet: Default::default(),
        })
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
    /// after the switch, or lose them at once with `disable_connection_drain_on_failover`.
    pub fn republish(&self, st: &mut ControlState) -> u64 {
        // Slots given to new backends since the last publication start from the counters'
        // current totals (workers cannot count for a slot before a snapshot names it).
        for slot in st.slots.take_fresh() {
            let totals = self.slot_raw_totals(slot);
            st.slot_base.insert(slot, totals);
        }
        st.generation += 1;
        let now_sec = self.started.elapsed().as_secs_f64();
        let now_ms = self.now_ms();
        let mut snap = compile(&st.cfg, &st.slots, CompileInput {
            health: &st.health,
            states: &mut st.states,
            now_sec,
            generation: st.generation,
            port_addrs: self.port_addrs.clone(),
        });
        for (si, svc) in st.cfg.services.iter().enumerate() {
            let fo = snap.services.get(si).is_some_and(|s| s.failed_over);
            let ps = st.pools.entry(svc.name.clone()).or_insert(PoolState { failed_over: fo, switched_at_ms: None });
            if ps.failed_over != fo {
                tracing::info!(service = %svc.name, failed_over = fo, "active pool changed ({})", if fo { "failover" } else { "failback" });
                ps.failed_over = fo;
                ps.switched_at_ms = Some(now_ms);
            }
            let Some(t) = ps.switched_at_ms else { continue };
            for b in svc.backends.iter().filter(|b| b.failover != fo) {
                let Some(slot) = st.slots.slot(&svc.name, &b.name) else { continue };
                if let Some(bs) = snap.backends.get_mut(usize::from(slot)) {
                    if svc.disable_connection_drain_on_failover {
                        bs.evict_connections = true;
                    } else {
                        bs.draining_until_ms = Some(t.wrapping_add(svc.connection_drain_timeout_sec.saturating_mul(1000)));
                    }
                }
            }
        }
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

    /// New connections and packets of the backend that holds `slot` now, since it got the
    /// slot (summed over workers).
    pub fn slot_totals(&self, st: &ControlState, slot: u16) -> (u64, u64) {
        let (n, p) = self.slot_raw_totals(slot);
        let (bn, bp) = st.slot_base.get(&slot).copied().unwrap_or((0, 0));
        (n.saturating_sub(bn), p.saturating_sub(bp))
    }

    /// Applies a health result; republishes when the health state changed. Results for a
    /// backend no longer configured are ignored.
    pub fn set_health(&self, service: &str, backend: &str, healthy: bool, latency_ms: Option<f64>) -> bool {
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        // A late event for a backend removed by a live edit must not leave a stale entry
        // (a re-added backend of the same name would inherit it).
        if !st.cfg.service(service).is_some_and(|s| s.backends.iter().any(|b| b.name == backend)) {
            return false;
        }
        let key = (service.to_string(), backend.to_string());
        let e = st.health.entry(key).or_default();
        let changed = e.healthy != healthy;
        e.healthy = healthy;
        if latency_ms.is_some() {
            e.latency_ms = latency_ms;
        }
        if changed {
            tracing::info!(service, backend, healthy, "health changed");
            self.republish(&mut st);
        }
        changed
    }

    /// Copies probe RTTs (the latency origin routing uses) into the health view;
    /// republishes when a service has a latency band and some latency moved by more than
    /// 20 % (and 1 ms).
    pub fn refresh_latencies(&self) {
        let statuses = match self.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(c) => c.snapshot(),
            None => return,
        };
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let mut moved = false;
        for t in &statuses {
            let Some(rtt) = t.rtt_ewma_ms else { continue };
            let e = st.health.entry((t.service.clone(), t.backend.clone())).or_default();
            let old = e.latency_ms.unwrap_or(f64::INFINITY);
            if (old - rtt).abs() > (0.2 * old).max(1.0) {
                moved = true;
            }
            e.latency_ms = Some(rtt);
        }
        if moved && st.cfg.services.iter().any(|s| s.latency_sensitivity_ms.is_some()) {
            self.republish(&mut st);
        }
    }

    /// One control tick: measures per-backend new-connection rates (load feedback for the
    /// capacity stage), re-evaluates time-based rules (capacity drain hysteresis) for the
    /// services that use them, and records snapshot propagation times.
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
        let mut needs_republish = false;
        let services: Vec<(String, Vec<String>, bool)> = st
            .cfg
            .services
            .iter()
            .map(|s| {
                let dynamic = s.auto_capacity_drain
                    || s.backends.iter().any(|b| b.capacity_cps.is_some() || b.preference == spillway_shared::config::Preference::PREFERRED);
                (s.name.clone(), s.backends.iter().map(|b| b.name.clone()).collect(), dynamic)
            })
            .collect();
        for (svc, backends, dynamic) in services {
            for b in backends {
                let Some(slot) = st.slots.slot(&svc, &b) else { continue };
                let total = self.slot_totals(&st, slot).0;
                let key = (svc.clone(), b.clone());
                let prev = st.last_new.insert(key.clone(), total).unwrap_or(total);
                let rate = total.saturating_sub(prev) as f64 / dt;
                let e = st.health.entry(key).or_default();
                if dynamic && (e.load_cps - rate).abs() > 0.05 * e.load_cps.max(1.0) {
                    needs_republish = true;
                }
                e.load_cps = rate;
            }
            if dynamic && st.cfg.service(&svc).is_some_and(|s| s.auto_capacity_drain) {
                needs_republish = true;
            }
        }
        if needs_republish {
            self.republish(&mut st);
        }
    }

    /// Per-worker counters.
    pub fn worker_counters(&self) -> Vec<Counters> {
        self.shared.stats.iter().map(|w| stats::read(w)).collect()
    }

    /// The status report.
    pub fn status(&self) -> StatusReport {
        let workers = self.worker_counters();
        let total = Counters::sum(&workers);
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let mut backends = Vec::new();
        for svc in &st.cfg.services {
            for b in &svc.backends {
                let (new_connections, packets) = st.slots.slot(&svc.name, &b.name).map_or((0, 0), |s| self.slot_totals(&st, s));
                let healthy = st.health.get(&(svc.name.clone(), b.name.clone())).map_or(true, |h| h.healthy);
                backends.push(BackendStatus {
                    service: svc.name.clone(),
                    backend: b.name.clone(),
                    address: b.address.to_string(),
                    zone: b.zone.clone(),
                    healthy,
                    enabled: b.enabled,
                    new_connections,
                    packets,
                });
            }
        }
        let ports = (0..st.cfg.ports.len()).map(|i| (self.port_stats)(i)).collect();
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_sec: self.started.elapsed().as_secs_f64(),
            generation: st.generation,
            ports,
            workers,
            total,
            backends,
        }
    }
}

impl Handler for Daemon {
    fn handle(&self, req: Request) -> Response {
        match req {
            Request::Status => Response::Status(self.status()),
            Request::ConfigShow => self.config_show(),
            Request::ConfigApply { toml, if_generation } => self.config_apply(&toml, if_generation),
            r @ (Request::ServiceAdd { .. }
            | Request::ServiceRemove { .. }
            | Request::ServiceSet { .. }
            | Request::BackendAdd { .. }
            | Request::BackendRemove { .. }
            | Request::BackendSet { .. }) => self.edit_request(r),
            Request::HealthShow => self.health_show(),
            Request::Flows { op, filter } => self.flows(op, &filter),
            Request::Explain { client, client_port, vip } => self.explain(client, client_port, vip.as_deref()),
            Request::SnapshotShow => self.snapshot_show(),
            Request::VipShow => Response::Vips(self.fleet.vips()),
            Request::VipDrain { vip } => crate::announce::drain_request(self, vip, true).map_or_else(|message| Response::Error { message }, Response::Vips),
            Request::VipUndrain { vip } => crate::announce::drain_request(self, vip, false).map_or_else(|message| Response::Error { message }, Response::Vips),
        }
    }
}
