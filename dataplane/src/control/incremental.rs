//! Incremental compilation: a health change, a load or latency move or a live edit
//! recompiles only the services it touches, and the new snapshot shares every other
//! service (`Arc<ServiceSnap>`) and its lookup maps with the previous one.
//!
//! A compilation runs in three steps, so the expensive middle one can run without the
//! control lock:
//! 1. [`Job::prepare`] (under the lock): copies what the touched services read (their
//!    config, slots, health, next-hop MACs, pipeline state) and the shared [`Frame`];
//!    O(endpoints of the touched services);
//! 2. [`Job::run`] (no lock needed): the routing pipeline and the Maglev tables;
//! 3. [`Built::assemble`] (under the lock again, and only if no other publication came in
//!    between, which the caller checks by the snapshot generation): the previous
//!    snapshot's services with the touched ones replaced.
//!
//! What may be compiled incrementally is decided by [`Dirty`]: a change of anything but a
//! service's backends and policy (a service added, removed, renamed or moved to another
//! VIP, port or protocol, or any setting outside `services`) compiles everything. Either
//! way the result equals a full compilation of the same config, health and state
//! (property test: `dataplane/src/control/incremental/tests.rs`).

use super::compile::{compile_service, index_service, CompileInput, Frame, HealthView, ServiceInput};
use super::snapshot::{BackendSlot, ServiceSnap, Snapshot};
use super::slots::SlotMap;
use super::compile::NeighborView;
use spillway_shared::config::{Config, Service};
use spillway_shared::pipeline::ServiceState;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// What the next publication must recompile: every service, or the services named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dirty {
    /// Everything (the structure changed: see the module doc).
    pub all: bool,
    /// Services whose inputs changed, by name.
    pub services: BTreeSet<String>,
    /// A live edit changed the config: next hops to resolve follow it.
    pub config: bool,
}

impl Dirty {
    /// Nothing to recompile.
    pub fn is_empty(&self) -> bool {
        !self.all && self.services.is_empty()
    }

    /// Marks service `name`.
    pub fn service(&mut self, name: &str) {
        if !self.all && !self.services.contains(name) {
            self.services.insert(name.to_string());
        }
    }

    /// Marks everything.
    pub fn everything(&mut self) {
        self.all = true;
        self.services.clear();
    }

    /// Adds the marks of `other`.
    pub fn merge(&mut self, other: Dirty) {
        self.config |= other.config;
        if other.all {
            self.everything();
        } else {
            for s in other.services {
                self.service(&s);
            }
        }
    }

    /// Marks what a live edit from `old` to `new` changed: the services that differ, or
    /// everything when the structure changed (services added, removed, reordered or
    /// re-addressed, or any setting outside `services`).
    pub fn edit(&mut self, old: &Config, new: &Config) {
        self.config = true;
        if !same_structure(old, new) {
            self.everything();
            return;
        }
        for (o, n) in old.services.iter().zip(&new.services) {
            if o != n {
                self.service(&n.name);
            }
        }
    }

    /// [`Dirty::edit`] when the names of the services that differ between `old` and `new`
    /// are known (`changed`: removed, added or different): no comparison of the services.
    pub fn edit_of(&mut self, old: &Config, new: &Config, changed: &std::collections::HashSet<String>) {
        self.config = true;
        if !same_structure(old, new) {
            self.everything();
            return;
        }
        for n in new.services.iter().filter(|n| changed.contains(&n.name)) {
            self.service(&n.name);
        }
    }

    /// The indices in `cfg` of the services to recompile, sorted (names no longer
    /// configured are skipped).
    pub fn indices(&self, cfg: &Config) -> Vec<usize> {
        if self.all {
            return (0..cfg.services.len()).collect();
        }
        cfg.services.iter().enumerate().filter(|(_, s)| self.services.contains(&s.name)).map(|(i, _)| i).collect()
    }
}

/// Whether two configs have the same services at the same indices, with the same name,
/// VIP, port and protocol, and are equal outside `services`: a snapshot of `old` then
/// differs from one of `new` only in the services whose config differs.
pub fn same_structure(old: &Config, new: &Config) -> bool {
    // Destructured without `..`: a field added to `Config` must be placed here.
    let Config { dataplane, ports, forwarder, zones, rtt_ms, client_zones, conntrack, services, metrics, announce, sync, neighbors } = old;
    let _ = (metrics, announce, sync, dataplane); // not read by a compilation
    let ident = |s: &Service| (s.name.clone(), s.vip, s.port, s.protocol);
    *ports == new.ports
        && *forwarder == new.forwarder
        && *zones == new.zones
        && *rtt_ms == new.rtt_ms
        && *client_zones == new.client_zones
        && *conntrack == new.conntrack
        && *neighbors == new.neighbors
        && services.len() == new.services.len()
        && services.iter().zip(&new.services).all(|(a, b)| ident(a) == ident(b))
}

/// A compilation prepared under the control lock ([`Job::prepare`]).
pub struct Job {
    frame: Frame,
    skeleton: Option<Snapshot>,
    inputs: Vec<ServiceInput>,
    services: usize,
    slots: usize,
    full: bool,
    generation: u64,
    now_sec: f64,
}

/// One compiled service: its index, snapshot, backend slots, name and pipeline state.
type Compiled = (usize, ServiceSnap, Vec<(u16, BackendSlot)>, String, ServiceState);

/// A compilation that has run ([`Job::run`]), ready to be assembled into a snapshot.
pub struct Built {
    skeleton: Snapshot,
    compiled: Vec<Compiled>,
    services: usize,
    slots: usize,
    full: bool,
}

impl Job {
    /// Copies what compiling services `dirty` (indices into `cfg.services`, sorted) reads.
    /// With every index, the job is a full compilation; with fewer, [`Built::assemble`]
    /// needs the snapshot of the same structure ([`same_structure`]) they replace.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        cfg: &Config,
        slots: &SlotMap,
        health: &HealthView,
        states: &HashMap<String, ServiceState>,
        neighbors: Option<&NeighborView>,
        port_addrs: &[u32],
        dirty: &[usize],
        generation: u64,
        now_sec: f64,
    ) -> Job {
        let frame = Frame::new(cfg);
        let skeleton = Some(frame.skeleton(cfg, generation, port_addrs));
        let inputs = dirty
            .iter()
            .filter(|&&si| si < cfg.services.len())
            .map(|&si| ServiceInput::gather(cfg, si, slots, health, neighbors, states.get(&cfg.services[si].name).cloned().unwrap_or_default()))
            .collect();
        Job { frame, skeleton, inputs, services: cfg.services.len(), slots: slots.len(), full: dirty.len() >= cfg.services.len(), generation, now_sec }
    }

    /// Whether the job compiles every service.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Compiles the prepared services (the routing pipeline and Maglev tables): the part
    /// that needs no lock.
    pub fn run(&mut self) -> Built {
        let inputs = std::mem::take(&mut self.inputs);
        let compiled = inputs
            .into_iter()
            .map(|mut i| {
                let (ss, owned) = compile_service(&self.frame, &mut i, self.now_sec, self.generation);
                (i.index, ss, owned, i.svc.name, i.state)
            })
            .collect();
        Built { skeleton: self.skeleton.take().expect("a job runs once"), compiled, services: self.services, slots: self.slots, full: self.full }
    }
}

impl Built {
    /// The pipeline state of each compiled service after the compilation, by name: the
    /// caller keeps it once the snapshot is published.
    pub fn states(&self) -> impl Iterator<Item = (&str, &ServiceState)> {
        self.compiled.iter().map(|c| (c.3.as_str(), &c.4))
    }

    /// The snapshot: the compiled services, and for the others `prev`'s (shared, with
    /// their backend slots and lookup entries); draining marks unset (the caller marks
    /// them, [`crate::control::pools`]). `prev` is used only by an incremental job and
    /// must then be the snapshot of the same structure its services replace.
    pub fn assemble(self, prev: Option<&Snapshot>) -> Snapshot {
        let mut snap = self.skeleton;
        let empty = BackendSlot { present: false, incarnation: 0, service: 0, name: String::new(), mac: [0; 6], addr: 0, addr6: 0, healthy: false, evict_connections: false, draining_until_ms: None };
        match prev {
            Some(prev) if !self.full => {
                let mut touched = vec![false; self.services];
                for c in &self.compiled {
                    touched[c.0] = true;
                }
                snap.services = prev.services.clone();
                snap.by_vip_port = prev.by_vip_port.clone();
                snap.by_vip_proto = prev.by_vip_proto.clone();
                snap.by_vip6_port = prev.by_vip6_port.clone();
                snap.by_vip6_proto = prev.by_vip6_proto.clone();
                snap.arp_addrs = prev.arp_addrs.clone();
                snap.nd_addrs = prev.nd_addrs.clone();
                snap.by_number = prev.by_number.clone();
                snap.backends = prev
                    .backends
                    .iter()
                    .map(|b| if b.present && touched.get(usize::from(b.service)).copied().unwrap_or(false) { empty.clone() } else { BackendSlot { evict_connections: false, draining_until_ms: None, ..b.clone() } })
                    .collect();
                snap.backends.resize(self.slots, empty);
                for (si, ss, owned, _, _) in self.compiled {
                    place(&mut snap.backends, owned);
                    snap.services[si] = Arc::new(ss);
                }
            }
            _ => {
                snap.backends = vec![empty; self.slots];
                let mut services: Vec<Option<Arc<ServiceSnap>>> = vec![None; self.services];
                for (si, ss, owned, _, _) in self.compiled {
                    place(&mut snap.backends, owned);
                    services[si] = Some(Arc::new(ss));
                }
                for (si, ss) in services.into_iter().enumerate() {
                    let ss = ss.expect("a full compilation compiles every service");
                    index_service(&mut snap, si, &ss);
                    snap.services.push(ss);
                }
            }
        }
        snap
    }
}

/// Runs the routing pipeline for every service × client class and builds the snapshot,
/// without next-hop resolution: endpoints without a configured `mac` keep their health
/// and get an all-zero MAC (which workers drop as `next_hop_unresolved`). Tests and
/// benchmarks of routing use it; the daemon uses [`compile_with_neighbors`].
pub fn compile(cfg: &Config, slots: &SlotMap, input: CompileInput<'_>) -> Snapshot {
    compile_inner(cfg, slots, input, None)
}

/// [`compile`] with resolved next hops: an endpoint without a configured `mac` takes the
/// MAC of its next hop ([`spillway_shared::neighbors::next_hop`]) from `neighbors` (all
/// zero while pending), and is not eligible (counted unhealthy by the pipeline) once its
/// resolution failed ([`with_unresolved`]).
pub fn compile_with_neighbors(cfg: &Config, slots: &SlotMap, input: CompileInput<'_>, neighbors: &NeighborView) -> Snapshot {
    compile_inner(cfg, slots, input, Some(neighbors))
}

fn compile_inner(cfg: &Config, slots: &SlotMap, input: CompileInput<'_>, neighbors: Option<&NeighborView>) -> Snapshot {
    let all: Vec<usize> = (0..cfg.services.len()).collect();
    let mut job = Job::prepare(cfg, slots, input.health, input.states, neighbors, &input.port_addrs, &all, input.generation, input.now_sec);
    let built = job.run();
    for (name, st) in built.states() {
        input.states.insert(name.to_string(), st.clone());
    }
    let mut snap = built.assemble(None);
    snap.seal();
    snap
}

fn place(backends: &mut [BackendSlot], owned: Vec<(u16, BackendSlot)>) {
    for (slot, b) in owned {
        if let Some(s) = backends.get_mut(usize::from(slot)) {
            *s = b;
        }
    }
}

#[cfg(test)]
mod tests;
