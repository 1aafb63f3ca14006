//! The daemon's control-plane object: config, slots, health view, the shared snapshot and
//! counters; answers control-socket requests.

use crate::control::{compile, CompileInput, HealthView, Shared, SlotMap};
use crate::ctl_server::Handler;
use crate::stats;
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
    /// Last generation published.
    pub generation: u64,
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
}

impl Daemon {
    /// Builds the daemon state and the first snapshot (generation 1). Every backend starts
    /// healthy until its health check says otherwise.
    pub fn new(cfg: Config, workers: usize, port_addrs: Vec<u32>, port_stats: PortStatsFn) -> Result<Daemon, String> {
        let mut slots = SlotMap::default();
        slots.sync(&cfg)?;
        let health = HealthView::new();
        let mut states = HashMap::new();
        let started = Instant::now();
        let snap = compile(&cfg, &slots, CompileInput { health: &health, states: &mut states, now_sec: 0.0, generation: 1, port_addrs: port_addrs.clone() });
        let shared = Arc::new(Shared::new(snap, workers));
        Ok(Daemon {
            control: Mutex::new(ControlState { cfg, slots, health, states, generation: 1 }),
            shared,
            started,
            port_stats,
            port_addrs,
        })
    }

    /// Recompiles and publishes a snapshot from the current control state.
    pub fn republish(&self, st: &mut ControlState) -> u64 {
        st.generation += 1;
        let now_sec = self.started.elapsed().as_secs_f64();
        let snap = compile(&st.cfg, &st.slots, CompileInput {
            health: &st.health,
            states: &mut st.states,
            now_sec,
            generation: st.generation,
            port_addrs: self.port_addrs.clone(),
        });
        self.shared.publish(snap);
        st.generation
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
                let slot = st.slots.slot(&svc.name, &b.name).map(usize::from);
                let sum = |f: &dyn Fn(&crate::stats::WorkerStats) -> u64| self.shared.stats.iter().map(|w| f(w)).sum::<u64>();
                let (new_connections, packets) = match slot {
                    Some(s) => (
                        sum(&|w| w.backend_new.get(s).map_or(0, |c| c.load(Relaxed))),
                        sum(&|w| w.backend_packets.get(s).map_or(0, |c| c.load(Relaxed))),
                    ),
                    None => (0, 0),
                };
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
        }
    }
}
