//! The daemon side of health results: what the control plane does with [`HealthEvent`]s
//! and [`TargetStatus`] snapshots, so that its health view (what snapshots are compiled
//! from) and the checker's trackers never disagree for good.
//!
//! The rule: every live edit hands the checker a new target-set
//! generation and reads back the trackers' state *after* the change
//! ([`sync_after_edit`]); the view takes that state ([`reconcile`]). An event produced
//! before the edit carries an older generation and is dropped ([`is_current`]): what it
//! said is already in the state read back, or it was about a target that no longer
//! exists. May use: [`crate::control::HealthView`], the rest of this module.

use super::driver::HealthChecker;
use super::targets::{targets_from_config, TargetKey};
use super::{CheckerOptions, HealthEvent, TargetStatus};
use crate::control::HealthView;
use spillway_shared::config::Config;
use spillway_shared::config::Service;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Sender;

/// Copies health state and RTT moving average (as `latency_ms`) from checker statuses
/// into the health view, keeping each entry's other fields (load). Endpoints without a
/// status are left alone.
pub fn apply_snapshot(statuses: &[TargetStatus], view: &mut HealthView) {
    for st in statuses {
        let v = view.entry((st.service.clone(), st.backend.clone(), st.endpoint.clone())).or_default();
        v.healthy = st.healthy;
        if st.rtt_ewma_ms.is_some() {
            v.latency_ms = st.rtt_ewma_ms;
        }
    }
}

/// Whether `ev` belongs to the target set of `generation` or a later one; an older event
/// must be dropped (it was produced before the last edit, whose state the view already
/// took from the checker).
pub fn is_current(ev: &HealthEvent, generation: u64) -> bool {
    ev.generation >= generation
}

/// Takes the trackers' state after an edit into the view: the health view then equals
/// the checker for every checked target, whatever was still waiting in the events
/// channel. Returns the number of entries whose health changed.
pub fn reconcile(statuses: &[TargetStatus], view: &mut HealthView) -> usize {
    let changed = statuses
        .iter()
        .filter(|s| view.get(&(s.service.clone(), s.backend.clone(), s.endpoint.clone())).is_none_or(|v| v.healthy != s.healthy))
        .count();
    apply_snapshot(statuses, view);
    changed
}

/// The health view right after a live edit from `old` to `new`, as the daemon gives it
/// (`ctl::transaction`, then [`sync_after_edit`]), and the starting state of each checked
/// target for the checker (`initial`). The rule (docs/operations.md "Health checker", live edits):
/// - an endpoint that stays (same service, backend, endpoint name and address) keeps its
///   state, also when only the health check or port changed (an endpoint known to be down
///   stays down until a probe says otherwise);
/// - an endpoint that is new or whose address changed starts afresh: with a health check
///   it starts unhealthy until `healthy_threshold` probes pass, without one it is healthy
///   (static); its latency is forgotten;
/// - an endpoint that stays while its service's health check is removed turns static
///   healthy (the state the check left behind must not keep it down for good);
/// - removed endpoints are forgotten.
///
/// Only the services in `changed` (those that differ between `old` and `new`, removed and
/// added ones included: `SlotDelta::names`) are looked at; the others' entries stay as
/// they are, the cost is proportional to what the edit changed. The returned `initial`
/// holds the checked endpoints of those services.
///
/// Pure: the edit applies it to the daemon's view, a dry run to a copy of it, so that the
/// edited snapshot it predicts is compiled from the health the edit really gives.
pub fn after_edit(old: &Config, new: &Config, changed: &HashSet<String>, view: &mut HealthView) -> HashMap<TargetKey, bool> {
    let new_by_name: HashMap<&str, &Service> = new.services.iter().filter(|s| changed.contains(&s.name)).map(|s| (s.name.as_str(), s)).collect();
    let present = |(s, b, e): &TargetKey| {
        !changed.contains(s) || new_by_name.get(s.as_str()).and_then(|ns| ns.backends.iter().find(|x| &x.name == b)).is_some_and(|nb| nb.members().iter().any(|m| &m.name == e))
    };
    view.retain(|k, _| present(k));
    let old_by_name: HashMap<&str, &Service> = old.services.iter().filter(|s| changed.contains(&s.name)).map(|s| (s.name.as_str(), s)).collect();
    let mut initial = HashMap::new();
    for ns in new.services.iter().filter(|s| changed.contains(&s.name)) {
        let os = old_by_name.get(ns.name.as_str()).copied();
        for nb in &ns.backends {
            let old_members = os.and_then(|os| os.backends.iter().find(|x| x.name == nb.name)).map(|ob| ob.members());
            for m in nb.members() {
                let same_endpoint = old_members.as_ref().is_some_and(|om| om.iter().any(|om| om.name == m.name && om.address == m.address));
                let key = (ns.name.clone(), nb.name.clone(), m.name);
                if !same_endpoint {
                    let e = view.entry(key.clone()).or_default();
                    e.healthy = ns.health_check.is_none();
                    e.latency_ms = None;
                } else if ns.health_check.is_none() && os.is_some_and(|os| os.health_check.is_some()) {
                    let e = view.entry(key.clone()).or_default();
                    e.healthy = true;
                    e.latency_ms = None;
                }
                if ns.health_check.is_some() {
                    let healthy = view.get(&key).map(|v| v.healthy).unwrap_or(true);
                    initial.insert(key, healthy);
                }
            }
        }
    }
    initial
}

/// After a live edit of `cfg`: hands the checker its new targets at target-set
/// `generation` (starting a checker on `events` when the first health check appears;
/// `initial` gives the starting state of added or changed targets), then reconciles
/// `view` with the trackers. Call it with the control state locked, after the edit and
/// before republishing; events of older generations must be dropped from then on.
/// Returns the services whose view entries (health or latency) the reconciliation
/// changed: a publication must recompile them.
pub fn sync_after_edit(
    checker: &mut Option<HealthChecker>,
    events: Option<Sender<HealthEvent>>,
    cfg: &Config,
    initial: HashMap<TargetKey, bool>,
    generation: u64,
    view: &mut HealthView,
) -> std::collections::BTreeSet<String> {
    let mut touched = std::collections::BTreeSet::new();
    // No checker and none to start (no health check, or nowhere to send events): nothing
    // to hand over, and no target list to build (O(endpoints)).
    if checker.is_none() && (events.is_none() || cfg.services.iter().all(|s| s.health_check.is_none())) {
        return touched;
    }
    let targets = targets_from_config(cfg);
    if checker.is_none() && !targets.is_empty() {
        let Some(tx) = events else { return touched };
        let opts = CheckerOptions { generation, ..CheckerOptions::default() };
        match HealthChecker::start_with(Vec::new(), tx, opts) {
            Ok(c) => *checker = Some(c),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the health checker");
                return touched;
            }
        }
    }
    let Some(c) = checker.as_ref() else { return touched };
    let statuses = c.update_at(generation, targets, initial);
    for s in &statuses {
        let differs = view
            .get(&(s.service.clone(), s.backend.clone(), s.endpoint.clone()))
            .is_none_or(|v| v.healthy != s.healthy || (s.rtt_ewma_ms.is_some() && v.latency_ms != s.rtt_ewma_ms));
        if differs && !touched.contains(&s.service) {
            touched.insert(s.service.clone());
        }
    }
    let n = reconcile(&statuses, view);
    if n > 0 {
        tracing::info!(generation, changed = n, "health view reconciled with the checker after an edit");
    }
    touched
}

#[cfg(test)]
mod tests {
    use super::super::targets::{Target, TargetSet};
    use super::super::tracker::ProbeResult;
    use super::*;
    use crate::control::EndpointView;
    use spillway_shared::config::{HealthCheck, HealthCheckKind};
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::{Duration, Instant};

    fn key(b: &str) -> TargetKey {
        ("svc".to_string(), b.to_string(), b.to_string())
    }

    fn http_target(path: &str) -> Target {
        Target {
            service: "svc".into(),
            backend: "a".into(),
            endpoint: "a".into(),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 80)),
            check: HealthCheck { kind: HealthCheckKind::Http, path: Some(path.into()), healthy_threshold: 2, unhealthy_threshold: 2, ..HealthCheck::default() },
        }
    }

    /// The daemon's side of the protocol, as `Daemon::apply_health_event` does it.
    fn apply(view: &mut HealthView, generation: u64, ev: &HealthEvent) {
        if is_current(ev, generation) {
            view.entry((ev.service.clone(), ev.backend.clone(), ev.endpoint.clone())).or_default().healthy = ev.healthy;
        }
    }

    #[test]
    fn stale_event_after_an_edit_never_sticks() {
        // A backend checked on a wrong path goes down; its event waits in the channel.
        // The operator fixes the path. The edit reads the view (still up), so the new
        // tracker starts up, and the fixed path keeps it up: it never emits an event again.
        // Applied late, the old "down" event would leave the backend down for good.
        let t0 = Instant::now();
        let fail = || ProbeResult::Failure { reason: "HTTP status 404 (expected 200)".into() };
        let ok = || ProbeResult::Success { rtt: Duration::from_millis(1) };
        let mut set: TargetSet<()> = TargetSet::new(true, 1);
        let mut view = HealthView::new();
        view.insert(key("a"), EndpointView { healthy: true, latency_ms: None, load_cps: 0.0 });
        let mut daemon_gen = 1;
        set.update(1, vec![http_target("/wrong")], &HashMap::new(), t0, |_, _| ());
        let a = set.slot(&key("a")).unwrap();
        assert!(set.record(a, t0, fail()).is_none());
        let in_channel = set.record(a, t0, fail()).expect("down after 2 failures");
        assert!(!in_channel.healthy);
        // The edit: initial state from the view, new generation, reconcile.
        let initial = HashMap::from([(key("a"), view[&key("a")].healthy)]);
        daemon_gen += 1;
        set.update(daemon_gen, vec![http_target("/healthz")], &initial, t0, |_, _| ());
        reconcile(&set.statuses(), &mut view);
        // The stale event arrives now.
        apply(&mut view, daemon_gen, &in_channel);
        // The fixed path answers; any transition would be applied.
        for i in 1..=5 {
            if let Some(ev) = set.record(a, t0 + Duration::from_secs(i), ok()) {
                apply(&mut view, daemon_gen, &ev);
            }
        }
        let tracker_healthy = set.statuses()[0].healthy;
        assert!(tracker_healthy);
        assert_eq!(view[&key("a")].healthy, tracker_healthy, "view and tracker disagree for good");
    }

    #[test]
    fn reconcile_takes_the_trackers_state_and_counts_changes() {
        let t0 = Instant::now();
        let mut set: TargetSet<()> = TargetSet::new(true, 3);
        let mut t = http_target("/");
        t.check.unhealthy_threshold = 1;
        set.update(3, vec![t], &HashMap::new(), t0, |_, _| ());
        let a = set.slot(&key("a")).unwrap();
        set.record(a, t0, ProbeResult::Failure { reason: "x".into() });
        let mut view = HealthView::new();
        view.insert(key("a"), EndpointView { healthy: true, latency_ms: Some(2.0), load_cps: 7.0 });
        assert_eq!(reconcile(&set.statuses(), &mut view), 1);
        assert_eq!(view[&key("a")], EndpointView { healthy: false, latency_ms: Some(2.0), load_cps: 7.0 });
        assert_eq!(reconcile(&set.statuses(), &mut view), 0);
        // Generations: older dropped, same and newer applied.
        let ev = |g| HealthEvent { service: "svc".into(), backend: "a".into(), endpoint: "a".into(), healthy: true, rtt_ms: None, reason: String::new(), generation: g };
        assert!(!is_current(&ev(2), 3) && is_current(&ev(3), 3) && is_current(&ev(4), 3));
    }

    #[test]
    fn snapshot_applies_to_health_view() {
        let mut view = HealthView::new();
        view.insert(key("a"), EndpointView { healthy: true, latency_ms: Some(9.0), load_cps: 42.0 });
        let st = TargetStatus {
            service: "svc".into(),
            backend: "a".into(),
            endpoint: "a".into(),
            probe_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 80)),
            healthy: false,
            consecutive_successes: 0,
            consecutive_failures: 2,
            rtt_ewma_ms: None,
            rtt_last_ms: None,
            rtt_histogram: Default::default(),
            last_error: Some("x".into()),
            last_change: Instant::now(),
            probes_sent: 2,
            probes_failed: 2,
            probes_skipped: 0,
            generation: 0,
            decided: true,
        };
        let mut st2 = st.clone();
        st2.backend = "b".into();
        st2.endpoint = "b".into();
        st2.healthy = true;
        st2.rtt_ewma_ms = Some(1.5);
        apply_snapshot(&[st, st2], &mut view);
        assert_eq!(view[&key("a")], EndpointView { healthy: false, latency_ms: Some(9.0), load_cps: 42.0 });
        let b = &view[&key("b")];
        assert!(b.healthy && b.latency_ms == Some(1.5) && b.load_cps == 0.0);
    }
}
