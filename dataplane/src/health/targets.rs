//! The set of health-checked targets, sans IO: which targets exist, which keep their state
//! across a live edit and which restart, the target-set generation that every
//! [`HealthEvent`] carries, and the [`TargetStatus`] view. The driver owns one
//! [`TargetSet`] and attaches its per-target I/O state as `X`; tests use `X = ()`.
//! May use: std, the config types, [`super::tracker`].

use super::tracker::{HealthTracker, ProbeResult};
use super::{HealthEvent, TargetStatus};
use spillway_shared::config::{Config, HealthCheck};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

/// (service, backend, endpoint): the key of a target, of a [`HealthEvent`] and of the
/// daemon's health view. Health is per endpoint (spec/service-lb-policy.md "Vocabulary");
/// a single-endpoint backend's endpoint is named like the backend.
pub type TargetKey = (String, String, String);

/// One health-checked endpoint of a backend of a service.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Service name.
    pub service: String,
    /// Backend name (unique within the service).
    pub backend: String,
    /// Endpoint name (unique within the backend; [`spillway_shared::config::Member::name`]).
    pub endpoint: String,
    /// Endpoint address and the service port; the probe goes to
    /// `check.port.unwrap_or(addr.port())` on `addr.ip()`.
    pub addr: SocketAddr,
    /// What to probe and how often.
    pub check: HealthCheck,
}

impl Target {
    /// The address probed: `addr` with `check.port` when set.
    pub fn probe_addr(&self) -> SocketAddr {
        SocketAddr::from((self.addr.ip(), self.check.port.unwrap_or(self.addr.port())))
    }

    /// The target's key.
    pub fn key(&self) -> TargetKey {
        (self.service.clone(), self.backend.clone(), self.endpoint.clone())
    }
}

/// Builds the targets of every endpoint of every backend of every service that has a
/// `health_check` (services without one have static, always-healthy backends). Disabled
/// endpoints are checked too, so their state is known when they are enabled again.
pub fn targets_from_config(cfg: &Config) -> Vec<Target> {
    let mut out = Vec::new();
    for s in &cfg.services {
        let Some(check) = &s.health_check else { continue };
        for b in &s.backends {
            for m in b.members() {
                out.push(Target {
                    service: s.name.clone(),
                    backend: b.name.clone(),
                    endpoint: m.name,
                    addr: SocketAddr::from((m.address, s.port)),
                    check: check.clone(),
                });
            }
        }
    }
    out
}

/// One tracked target and its driver state `X`.
#[derive(Debug)]
pub struct Entry<X> {
    /// The target as configured.
    pub target: Target,
    /// Its health state machine.
    pub tracker: HealthTracker,
    /// Probes skipped for a local resource shortage (see [`super::is_local_error`]).
    pub skipped: u64,
    /// Driver state (schedule, in-flight probe).
    pub extra: X,
}

/// The targets of one checker, in slots that are reused after removal.
///
/// Generations: every [`update`](Self::update) names the generation of the new target set
/// (the daemon passes a number that grows with every live edit), and every event produced
/// afterwards carries it. An event produced before the update carries an older number, so
/// the daemon can drop it and take the state from [`statuses`](Self::statuses) instead
/// (see [`super::view::reconcile`]): no transition left waiting in the channel can be
/// applied to the target that replaced the one it was produced for.
#[derive(Debug)]
pub struct TargetSet<X> {
    slots: Vec<Option<Entry<X>>>,
    free: Vec<usize>,
    index: HashMap<TargetKey, usize>,
    generation: u64,
    initially_healthy: bool,
}

impl<X> TargetSet<X> {
    /// An empty set at `generation`; targets without an explicit initial state start
    /// healthy when `initially_healthy`.
    pub fn new(initially_healthy: bool, generation: u64) -> TargetSet<X> {
        TargetSet { slots: Vec::new(), free: Vec::new(), index: HashMap::new(), generation, initially_healthy }
    }

    /// Generation of the current target set (carried by every event).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of targets.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there is no target.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Replaces the target set and moves to `generation`. Targets equal to a current one
    /// (same service, backend, address and check) keep their state, counters and driver
    /// state; changed ones restart (their `X` is dropped, closing any in-flight probe) in
    /// the state `initial` gives for their key, else the default; missing ones are
    /// dropped. When two targets share a key, the first wins. Returns the slots of the
    /// added or restarted targets, whose `X` was made by `make`.
    pub fn update(
        &mut self,
        generation: u64,
        targets: Vec<Target>,
        initial: &HashMap<TargetKey, bool>,
        now: Instant,
        mut make: impl FnMut(usize, &Target) -> X,
    ) -> Vec<usize> {
        self.generation = generation;
        let mut keep: HashMap<TargetKey, usize> = HashMap::with_capacity(targets.len());
        let mut added: Vec<Target> = Vec::new();
        let mut seen: std::collections::HashSet<TargetKey> = std::collections::HashSet::with_capacity(targets.len());
        for t in targets {
            let key = t.key();
            if !seen.insert(key.clone()) {
                continue; // duplicate key: the first wins
            }
            match self.index.get(&key) {
                Some(&i) if self.slots[i].as_ref().is_some_and(|e| e.target == t) => {
                    keep.insert(key, i);
                }
                _ => added.push(t),
            }
        }
        for (key, i) in std::mem::take(&mut self.index) {
            if keep.get(&key) != Some(&i) {
                self.slots[i] = None;
                self.free.push(i);
            }
        }
        self.index = keep;
        let mut slots = Vec::with_capacity(added.len());
        for t in added {
            let healthy = initial.get(&t.key()).copied().unwrap_or(self.initially_healthy);
            let i = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.slots.push(None);
                    self.slots.len() - 1
                }
            };
            let extra = make(i, &t);
            self.index.insert(t.key(), i);
            self.slots[i] = Some(Entry { tracker: HealthTracker::new(&t.check, healthy, now), target: t, skipped: 0, extra });
            slots.push(i);
        }
        slots
    }

    /// Makes every current target's state a guess that its first probe result replaces
    /// ([`HealthTracker::provisional`]).
    pub fn make_provisional(&mut self) {
        for e in self.slots.iter_mut().flatten() {
            e.tracker = e.tracker.clone().provisional();
        }
    }

    /// Slots (used or free): the bound of [`get`](Self::get)'s index.
    pub fn slots_len(&self) -> usize {
        self.slots.len()
    }

    /// Whether some target is undecided since [`make_provisional`](Self::make_provisional).
    pub fn any_provisional(&self) -> bool {
        self.slots.iter().flatten().any(|e| e.tracker.is_provisional())
    }

    /// The entry in slot `i`, if live.
    pub fn get(&self, i: usize) -> Option<&Entry<X>> {
        self.slots.get(i).and_then(Option::as_ref)
    }

    /// The entry in slot `i`, if live.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut Entry<X>> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    /// The slot of `key`, if tracked.
    pub fn slot(&self, key: &TargetKey) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// Feeds a probe result of slot `i` observed at `now`; returns the event to send
    /// when the state changed (tagged with the current generation).
    pub fn record(&mut self, i: usize, now: Instant, result: ProbeResult) -> Option<HealthEvent> {
        let generation = self.generation;
        let e = self.get_mut(i)?;
        let tr = e.tracker.record(now, result)?;
        Some(HealthEvent {
            service: e.target.service.clone(),
            backend: e.target.backend.clone(),
            endpoint: e.target.endpoint.clone(),
            healthy: tr.healthy,
            rtt_ms: e.tracker.rtt_ewma_ms(),
            reason: tr.reason,
            generation,
        })
    }

    /// Counts a probe of slot `i` skipped for a local resource shortage; returns the
    /// target's count so far.
    pub fn skip(&mut self, i: usize) -> u64 {
        self.get_mut(i).map_or(0, |e| {
            e.skipped += 1;
            e.skipped
        })
    }

    /// The state of every target, in no particular order.
    pub fn statuses(&self) -> Vec<TargetStatus> {
        self.slots
            .iter()
            .flatten()
            .map(|e| {
                let t = &e.tracker;
                TargetStatus {
                    service: e.target.service.clone(),
                    backend: e.target.backend.clone(),
                    endpoint: e.target.endpoint.clone(),
                    probe_addr: e.target.probe_addr(),
                    healthy: t.healthy(),
                    consecutive_successes: t.consecutive_successes(),
                    consecutive_failures: t.consecutive_failures(),
                    rtt_ewma_ms: t.rtt_ewma_ms(),
                    rtt_last_ms: t.rtt_last_ms(),
                    rtt_histogram: t.rtt_histogram().clone(),
                    last_error: t.last_error().map(str::to_owned),
                    last_change: t.last_change(),
                    probes_sent: t.probes(),
                    probes_failed: t.probes_failed(),
                    probes_skipped: e.skipped,
                    generation: self.generation,
                    decided: !t.is_provisional(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn target(backend: &str, port: u16, path: &str) -> Target {
        Target {
            service: "svc".into(),
            backend: backend.into(),
            endpoint: backend.into(),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            check: HealthCheck { path: Some(path.into()), healthy_threshold: 1, unhealthy_threshold: 1, ..HealthCheck::default() },
        }
    }
    fn fail() -> ProbeResult {
        ProbeResult::Failure { reason: "x".into() }
    }

    #[test]
    fn update_keeps_equal_restarts_changed_drops_missing_first_duplicate_wins() {
        let t0 = Instant::now();
        let mut set: TargetSet<u32> = TargetSet::new(true, 1);
        let added = set.update(1, vec![target("a", 1, "/"), target("b", 2, "/"), target("gone", 3, "/")], &HashMap::new(), t0, |_, _| 7);
        assert_eq!(added.len(), 3);
        let a = set.slot(&("svc".into(), "a".into(), "a".into())).unwrap();
        let b = set.slot(&("svc".into(), "b".into(), "b".into())).unwrap();
        assert!(set.slot(&("svc".into(), "gone".into(), "gone".into())).is_some());
        assert!(set.record(a, t0, fail()).is_some_and(|e| !e.healthy && e.generation == 1));
        set.get_mut(a).unwrap().extra = 9;
        set.record(b, t0, fail());
        let initial = HashMap::from([(("svc".to_string(), "b".to_string(), "b".to_string()), false)]);
        let added = set.update(2, vec![target("a", 1, "/"), target("b", 2, "/fixed"), target("a", 9, "/dup")], &initial, t0, |_, _| 1);
        assert_eq!(added, vec![set.slot(&("svc".into(), "b".into(), "b".into())).unwrap()], "only b restarted");
        assert_eq!(set.len(), 2);
        let ea = set.get(set.slot(&("svc".into(), "a".into(), "a".into())).unwrap()).unwrap();
        assert!(!ea.tracker.healthy() && ea.extra == 9 && ea.target.addr.port() == 1, "a kept with its driver state");
        let eb = set.get(set.slot(&("svc".into(), "b".into(), "b".into())).unwrap()).unwrap();
        assert!(!eb.tracker.healthy() && eb.tracker.probes() == 0 && eb.target.check.path() == "/fixed", "b restarted in the given state");
        assert!(set.statuses().iter().all(|s| s.generation == 2));
        assert!(set.slot(&("svc".into(), "gone".into(), "gone".into())).is_none());
    }

    #[test]
    fn events_carry_the_generation_of_the_set_they_were_produced_in() {
        let t0 = Instant::now();
        let mut set: TargetSet<()> = TargetSet::new(true, 4);
        set.update(4, vec![target("a", 1, "/")], &HashMap::new(), t0, |_, _| ());
        let a = set.slot(&("svc".into(), "a".into(), "a".into())).unwrap();
        assert_eq!(set.record(a, t0, fail()).unwrap().generation, 4);
        // An edit that does not touch `a` still moves the generation.
        set.update(5, vec![target("a", 1, "/")], &HashMap::new(), t0, |_, _| ());
        let ev = set.record(a, t0 + Duration::from_secs(1), ProbeResult::Success { rtt: Duration::from_millis(1) }).unwrap();
        assert!(ev.healthy && ev.generation == 5);
        assert_eq!(set.skip(a), 1);
        assert_eq!(set.statuses()[0].probes_skipped, 1);
    }
}
