//! The `fleet` thread: systemd notifications and VIP announcement (issue 13).
//!
//! One control-side thread, every [`PERIOD`]:
//! 1. observes the workers' poll counters and snapshot generations ([`announce::observe`]);
//! 2. evaluates every VIP's readiness and, with `[announce]`, reconciles the announcement
//!    interface ([`announce::Announcer`]);
//! 3. tells systemd (`sd_notify(3)`, through the `sd-notify` crate; a no-op without
//!    `NOTIFY_SOCKET`): `READY=1` once the ports are up (the thread starts after them) and
//!    every worker polls with the first snapshot in use; `WATCHDOG=1` at a quarter of
//!    `WATCHDOG_USEC`, and only while every worker's poll counter advances, so a stuck worker
//!    makes systemd restart the daemon (unit: dist/spillway.service); `STATUS=` with the
//!    announced VIPs; `STOPPING=1` on the way out.
//!
//! On return the announcer is dropped: its interface goes, and BIRD withdraws the VIPs
//! before the workers stop.

use crate::announce::{self, Announcer};
use crate::daemon::Daemon;
use sd_notify::NotifyState;
use spillway_shared::fleet::AnnounceConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Period of the fleet thread.
pub const PERIOD: Duration = Duration::from_millis(100);

/// Stall limit when `[announce]` is absent (same default as `announce.worker_stall_sec`).
pub const DEFAULT_STALL: Duration = Duration::from_secs(1);

/// What to tell systemd after one observation.
#[derive(Debug, Default)]
pub struct Notifier {
    ready_sent: bool,
    watchdog: Option<Duration>,
    last_watchdog: Option<Instant>,
    last_status: String,
    stalled_logged: bool,
}

impl Notifier {
    /// `watchdog`: the `WATCHDOG_USEC` interval, if systemd asked for one.
    pub fn new(watchdog: Option<Duration>) -> Notifier {
        Notifier { watchdog, ..Default::default() }
    }

    /// The messages due now, given whether every worker progresses (`healthy`), whether
    /// the first snapshot is in use, and a one-line status.
    pub fn step(&mut self, now: Instant, healthy: bool, snapshot_in_use: bool, status: &str) -> Vec<String> {
        let mut out = Vec::new();
        if !self.ready_sent && healthy && snapshot_in_use {
            self.ready_sent = true;
            out.push("READY=1".to_string());
        }
        if let Some(w) = self.watchdog {
            if healthy {
                self.stalled_logged = false;
                if self.last_watchdog.is_none_or(|t| now.saturating_duration_since(t) >= w / 4) {
                    self.last_watchdog = Some(now);
                    out.push("WATCHDOG=1".to_string());
                }
            } else if !self.stalled_logged {
                self.stalled_logged = true;
                tracing::error!("a worker stopped polling: not feeding the systemd watchdog");
            }
        }
        if status != self.last_status {
            self.last_status = status.to_string();
            out.push(format!("STATUS={status}"));
        }
        out
    }
}

fn send(msgs: &[String]) {
    if msgs.is_empty() {
        return;
    }
    let states: Vec<NotifyState<'_>> = msgs
        .iter()
        .map(|m| match m.as_str() {
            "READY=1" => NotifyState::Ready,
            "WATCHDOG=1" => NotifyState::Watchdog,
            "STOPPING=1" => NotifyState::Stopping,
            s => NotifyState::Status(s.strip_prefix("STATUS=").unwrap_or(s)),
        })
        .collect();
    if let Err(e) = sd_notify::notify(&states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

/// Runs the fleet thread until `stop` is set. `announcer` is the started announcement
/// interface (`None` without `[announce]`).
pub fn run_fleet(daemon: &Daemon, announce_cfg: Option<&AnnounceConfig>, mut announcer: Option<Announcer>, stop: &AtomicBool) {
    let stall = announce_cfg.map_or(DEFAULT_STALL, |a| Duration::from_secs_f64(a.worker_stall_sec));
    let mut notifier = Notifier::new(sd_notify::watchdog_enabled());
    if let Some(w) = sd_notify::watchdog_enabled() {
        tracing::info!(watchdog_ms = w.as_millis() as u64, "systemd watchdog enabled");
    }
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let obs = announce::observe(daemon, stall, now);
        let announced = announcer.as_ref().map(|a| a.announced().clone()).unwrap_or_default();
        let rows = announce::refresh(daemon, &obs, &announced, announcer.is_some());
        if let Some(a) = announcer.as_mut() {
            a.reconcile(&rows);
            if a.announced() != &announced {
                // Store what is announced now (metrics, `vip show`, drain waiting).
                announce::refresh(daemon, &obs, a.announced(), true);
            }
        }
        let ready = rows.iter().filter(|r| r.ready).count();
        let status = match &announcer {
            Some(a) => format!("{} of {} VIPs ready, {} announced", ready, rows.len(), a.announced().len()),
            None => format!("{} of {} VIPs ready (no [announce])", ready, rows.len()),
        };
        send(&notifier.step(now, obs.stalled_workers.is_empty(), obs.snapshot_in_use, &status));
        std::thread::sleep(PERIOD);
    }
    send(&["STOPPING=1".to_string()]);
    if let Some(a) = announcer.take() {
        let n = a.announced().len();
        drop(a);
        tracing::info!(withdrawn = n, "announcement interface removed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_when_workers_poll_with_a_snapshot() {
        let mut n = Notifier::new(None);
        let t = Instant::now();
        assert_eq!(n.step(t, true, false, "s"), ["STATUS=s"], "no snapshot in use yet");
        assert!(n.step(t, false, true, "s").is_empty(), "stalled worker");
        assert_eq!(n.step(t, true, true, "s"), ["READY=1"]);
        assert!(n.step(t, true, true, "s").is_empty(), "READY only once");
    }

    #[test]
    fn watchdog_only_while_workers_progress() {
        let w = Duration::from_secs(4);
        let mut n = Notifier::new(Some(w));
        let t0 = Instant::now();
        assert_eq!(n.step(t0, true, true, ""), ["READY=1", "WATCHDOG=1"]);
        assert!(n.step(t0 + Duration::from_millis(500), true, true, "").is_empty(), "before a quarter of the interval");
        assert_eq!(n.step(t0 + Duration::from_secs(1), true, true, ""), ["WATCHDOG=1"]);
        for s in 2..10 {
            assert!(n.step(t0 + Duration::from_secs(s), false, true, "").is_empty(), "stalled: no watchdog at {s} s");
        }
        assert_eq!(n.step(t0 + Duration::from_secs(10), true, true, ""), ["WATCHDOG=1"], "progress again");
    }

    #[test]
    fn status_sent_on_change() {
        let mut n = Notifier::new(None);
        let t = Instant::now();
        assert_eq!(n.step(t, false, false, "a"), ["STATUS=a"]);
        assert!(n.step(t, false, false, "a").is_empty());
        assert_eq!(n.step(t, false, false, "b"), ["STATUS=b"]);
    }
}
