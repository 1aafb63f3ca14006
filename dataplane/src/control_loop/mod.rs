//! The control loop (the daemon's main thread once the workers run): health events,
//! load ticks, next-hop resolution, link state, snapshot publication and reclamation.
//!
//! **Ticks.** One iteration of the loop is a *control tick*. It waits up to [`IDLE_TICK`]
//! (50 ms) for a health event; once one arrives it keeps collecting the events that
//! arrive within [`COALESCE`] (10 ms) of it, or until none came for [`QUIET`] (2 ms: a
//! lone event does not wait the whole window), applies them all under one hold of the
//! control lock and publishes once: one snapshot generation for a whole health storm
//! window, whatever its size ([`apply_health_batch`]). The services the events changed
//! are recompiled without the control lock ([`Daemon::publish_dirty`]), so live edits and
//! readers are never held up behind a compilation of the health change. The heartbeat the
//! systemd watchdog is fed by moves at the top of every tick, so at least every
//! `IDLE_TICK` + one tick's work (docs/operations.md "Watchdog").
//!
//! **Each tick, in order** ([`run`]):
//! 1. beat the control heartbeat (the systemd watchdog is fed only while it moves);
//! 2. note whether the health checker's first probe round is over;
//! 3. collect the tick's health events ([`collect_health`]: up to [`IDLE_TICK`], coalesced);
//! 4. apply them together and publish once ([`apply_health_batch`]);
//! 5. once the first round is over and all of it is published, mark it so (VIPs may be announced);
//! 6. count endpoints still undecided past the first round's limit as unhealthy, and every
//!    [`SETTLE_EVERY`] compare them with the checker's decisions ([`startup`]);
//! 7. the load tick: per-backend new-connection rates for the capacity stage, drain
//!    hysteresis and deadlines, propagation times ([`Daemon::tick`]);
//! 8. next-hop resolution: ARP/ND requests and answers, MACs into the snapshot ([`Daemon::neighbor_tick`]);
//! 9. exit with an error if the health checker thread died;
//! 10. read the ports' link state and store changes for `status` and readiness;
//! 11. end drop captures past their time limit;
//! 12. every 2 s, copy probe round-trip times into the health view and republish the
//!     services with a latency band whose latencies moved ([`Daemon::refresh_latencies`]).

pub mod startup;

use crate::daemon::Daemon;
use crate::health::HealthEvent;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The longest a control tick waits for a health event before it does its periodic work.
pub const IDLE_TICK: Duration = Duration::from_millis(50);

/// How long after the first health event of a tick the tick keeps collecting events
/// before it applies them together and publishes once.
pub const COALESCE: Duration = Duration::from_millis(10);

/// A tick stops collecting once no event came for this long (before [`COALESCE`] ends).
pub const QUIET: Duration = Duration::from_millis(2);

/// At most this many events are applied per tick; the rest wait for the next tick (a
/// bound on the time the control lock is held, so the heartbeat keeps moving).
pub const MAX_BATCH: usize = 65_536;

/// How often endpoints counted unhealthy while undecided at start are compared with
/// the checker's decisions ([`startup::settle_undecided`]).
pub const SETTLE_EVERY: Duration = Duration::from_millis(250);

/// Waits up to `idle` for a health event, then collects those that arrive within
/// [`COALESCE`] of the first, stopping earlier once none came for [`QUIET`] (at most
/// [`MAX_BATCH`]). Returns them (empty after an idle
/// wait) and whether the channel is closed (no checker sends any more).
pub fn collect_health(rx: &Receiver<HealthEvent>, idle: Duration) -> (Vec<HealthEvent>, bool) {
    let first = match rx.recv_timeout(idle) {
        Ok(ev) => ev,
        Err(RecvTimeoutError::Timeout) => return (Vec::new(), false),
        Err(RecvTimeoutError::Disconnected) => return (Vec::new(), true),
    };
    let until = Instant::now() + COALESCE;
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        let now = Instant::now();
        if now >= until {
            // what is already queued belongs to this tick too
            match rx.try_recv() {
                Ok(ev) => batch.push(ev),
                Err(_) => break,
            }
            continue;
        }
        match rx.recv_timeout((until - now).min(QUIET)) {
            Ok(ev) => batch.push(ev),
            Err(RecvTimeoutError::Timeout) => break,
            Err(RecvTimeoutError::Disconnected) => return (batch, true),
        }
    }
    (batch, false)
}

/// Logs an endpoint's failed health check: service, backend and endpoint (a one-address
/// backend's endpoint is named like it), and why. One endpoint of a group failing does not
/// make its backend unhealthy (fresh-user QA: the log named only the backend).
fn log_unhealthy(ev: &HealthEvent) {
    tracing::warn!(service = %ev.service, backend = %ev.backend, endpoint = %ev.endpoint, reason = %ev.reason, "endpoint unhealthy");
}

/// Applies one tick's health events together and publishes the services they changed
/// once (compiled without the control lock). Returns the snapshot generation published,
/// `None` when no event changed anything.
pub fn apply_health_batch(daemon: &Daemon, batch: &[HealthEvent]) -> Option<u64> {
    if batch.is_empty() {
        return None;
    }
    for ev in batch.iter().filter(|e| !e.healthy) {
        log_unhealthy(ev);
    }
    let changed = daemon.apply_health_events(batch);
    if changed > 1 {
        tracing::info!(events = batch.len(), changed, "health events of one control tick applied together");
    }
    daemon.publish_dirty()
}

/// Runs the control loop until `stop` is set or `deadline` passes. Returns an error when
/// the health checker thread died (frozen health is worse than a restart: the caller
/// exits non-zero so the service manager restarts the daemon, docs/operations.md
/// "Health checker").
pub fn run(daemon: &Daemon, health_rx: &Receiver<HealthEvent>, links: &mut crate::dpdk::LinkWatch, stop: &AtomicBool, deadline: Option<Instant>) -> Result<(), String> {
    let mut last_latency = Instant::now();
    let mut last_settle = Instant::now();
    while !stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        daemon.control_heartbeat.beat(); // the watchdog is fed only while this moves
        // Read before collecting: once the checker's first round is over, every event of
        // it is in the channel, so after this tick's batch the published snapshot holds
        // the first round's health and the VIPs may be announced (docs/bgp.md).
        let first_round_over = daemon.first_round_pending_and_over();
        let (batch, closed) = collect_health(health_rx, IDLE_TICK);
        apply_health_batch(daemon, &batch);
        if closed {
            std::thread::sleep(IDLE_TICK);
        }
        if first_round_over && drained(health_rx, daemon) {
            daemon.first_probe_round.store(true, Ordering::Release);
            tracing::info!("first round of health probes complete and published");
        }
        // Past the first round's longest time: the undecided count as unhealthy.
        startup::settle_first_round(daemon, Instant::now());
        if last_settle.elapsed() >= SETTLE_EVERY {
            last_settle = Instant::now();
            startup::settle_undecided(daemon);
        }
        daemon.tick();
        daemon.neighbor_tick();
        if let Some(reason) = daemon.watch_health_checker() {
            return Err(format!("the health checker thread died ({reason}); exiting so that the service manager restarts spillway"));
        }
        if links.tick() {
            daemon.links.store(links.states(), links.changes());
        }
        daemon.capture_expire();
        if last_latency.elapsed() >= Duration::from_secs(2) {
            last_latency = Instant::now();
            daemon.refresh_latencies();
        }
    }
    tracing::info!("stopping");
    Ok(())
}

/// Applies (and publishes) every event still queued, in batches; true once the channel
/// is empty. Used when the first probe round is over, so that all of it is published
/// before the VIPs may be announced.
fn drained(rx: &Receiver<HealthEvent>, daemon: &Daemon) -> bool {
    loop {
        let batch: Vec<HealthEvent> = rx.try_iter().take(MAX_BATCH).collect();
        if batch.is_empty() {
            return true;
        }
        daemon.control_heartbeat.beat();
        apply_health_batch(daemon, &batch);
    }
}

#[cfg(test)]
mod tests;
