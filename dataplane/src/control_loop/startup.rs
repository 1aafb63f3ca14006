//! Start-up at scale: what a starting daemon does when its first round of health probes
//! is not over in the round's longest time ([`crate::announce::first_round_limit`]).
//!
//! It does not announce its VIPs with undecided endpoints counted healthy (the checker's
//! targets begin healthy): every endpoint still undecided then is counted **unhealthy**
//! in the health view, the services concerned are published, and only then is the first
//! round latched over, so the VIPs may be announced (docs/bgp.md "Readiness"). An
//! undecided endpoint leaves that state with its first decided result: a health event
//! (down after `unhealthy_threshold` failures), or a first success, which the checker does
//! not report as an event (its state was healthy already) and [`settle_undecided`] reads
//! from the checker instead.

use crate::daemon::Daemon;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// At `now`, when the daemon has not latched its first probe round and the round's
/// longest time since start has passed: counts every undecided target unhealthy,
/// publishes, and latches the round. Returns how many endpoints were counted unhealthy,
/// `None` when it did nothing (latched already, no checker, or still in time).
pub fn settle_first_round(daemon: &Daemon, now: Instant) -> Option<usize> {
    if daemon.first_probe_round.load(Ordering::Acquire) {
        return None;
    }
    let limit = crate::announce::first_round_limit(&daemon.control.lock().unwrap_or_else(|e| e.into_inner()).cfg);
    if now.saturating_duration_since(daemon.started) <= limit {
        return None;
    }
    let statuses = daemon.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.snapshot();
    let mut st = daemon.control.lock().unwrap_or_else(|e| e.into_inner());
    let mut counted = 0;
    for s in statuses.iter().filter(|s| !s.decided) {
        let key = (s.service.clone(), s.backend.clone(), s.endpoint.clone());
        st.health.entry(key.clone()).or_default().healthy = false;
        st.dirty.service(&s.service);
        st.undecided.insert(key);
        counted += 1;
    }
    drop(st);
    daemon.publish_dirty();
    daemon.first_probe_round.store(true, Ordering::Release);
    tracing::warn!(after_sec = limit.as_secs_f64(), undecided = counted,
        "first round of health probes not complete: announcing with the undecided endpoints counted unhealthy");
    Some(counted)
}

/// Gives every endpoint counted unhealthy while undecided ([`settle_first_round`]) the
/// state the checker decided for it since, and publishes the services that changed.
/// Returns how many endpoints were settled.
pub fn settle_undecided(daemon: &Daemon) -> usize {
    if daemon.control.lock().unwrap_or_else(|e| e.into_inner()).undecided.is_empty() {
        return 0;
    }
    let statuses = match daemon.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(c) => c.snapshot(),
        None => return 0,
    };
    let mut st = daemon.control.lock().unwrap_or_else(|e| e.into_inner());
    let mut settled = 0;
    for s in statuses.iter().filter(|s| s.decided) {
        let key = (s.service.clone(), s.backend.clone(), s.endpoint.clone());
        if st.undecided.remove(&key) {
            settled += 1;
            let e = st.health.entry(key).or_default();
            if e.healthy != s.healthy {
                e.healthy = s.healthy;
                st.dirty.service(&s.service);
            }
        }
    }
    drop(st);
    if settled > 0 {
        daemon.publish_dirty();
        tracing::info!(settled, "endpoints undecided at start decided by their probes");
    }
    settled
}
