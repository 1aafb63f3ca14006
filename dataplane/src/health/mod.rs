//! Backend health checks (spec/backend-selection.md "Health checks").
//!
//! **One job:** turn probe results into healthy/unhealthy decisions per backend and hand
//! them to the control plane as [`HealthEvent`]s. Probes go through the host kernel's
//! network stack, not through DPDK, so nothing here touches the packet path.
//! **May use:** std, the config types, `mio` (readiness), `socket2` (socket options),
//! `httparse`, `rustls` and `rustls-native-certs` (HTTPS), `rustix` (limits, thread id),
//! `tracing`; and [`crate::control::HealthView`] in [`view`]. No `unsafe`.
//!
//! Layout:
//! * [`tracker`]: the sans-IO per-target state machine ([`HealthTracker`]): consecutive
//!   counters against the thresholds, state, RTT moving average, last error; driven by
//!   explicit time;
//! * [`targets`]: the sans-IO target set ([`TargetSet`]): which targets keep their state
//!   across a live edit, and the target-set generation every event carries;
//! * [`driver`]: the one checker thread ([`HealthChecker`]): a `mio` event loop that
//!   schedules every target at its own interval (first probes spread over one interval),
//!   runs the probes and enforces per-probe timeouts with a heap of deadlines;
//! * [`probe`]: one file per probe kind (`tcp`, `http`, `https`, `udp`);
//! * [`view`]: the daemon side: applying events and snapshots to the health view, and
//!   reconciling after a live edit.
//!
//! Defaults (from [`HealthCheck`]): interval 5 s, timeout 5 s, healthy threshold 2,
//! unhealthy threshold 2; so with defaults a dead backend is marked unhealthy within about
//! 10 s (two failed probes), 15 s at the worst (up to one interval until the first one).
//! Targets start **healthy** by default ([`CheckerOptions::initially_healthy`]).
//!
//! Probe round-trip times (ms) are kept as the last value and an exponentially weighted
//! moving average ([`RTT_EWMA_ALPHA`]); they are the latency that origin routing uses. The
//! RTT is wall-clock time from probe start (socket creation) to the success condition, as
//! seen by the event loop, so it includes the prober's own scheduling delay.
//!
//! Resources: one socket per in-flight probe and at most one probe in flight per target,
//! so the checker needs up to one file descriptor per target (plus a few); the daemon
//! raises `RLIMIT_NOFILE` to its hard limit at start ([`raise_nofile_limit`]). Probes that
//! cannot start for a local shortage ([`is_local_error`]) are *skipped*: counted per target
//! and in total, shown by `spillwayctl health show` and `status`, never counted against the
//! backend. Scale: `examples/health_scale.rs` runs 10,000 targets at a 1 s interval.

#![forbid(unsafe_code)]

pub mod driver;
pub mod probe;
pub mod targets;
pub mod tracker;
pub mod view;

pub use driver::HealthChecker;
pub use spillway_shared::config::{HealthCheck, HealthCheckKind};
pub use targets::{targets_from_config, Target, TargetKey, TargetSet};
pub use tracker::{HealthTracker, ProbeResult, RttHistogram, Transition, RTT_BUCKETS_SEC, RTT_EWMA_ALPHA};
pub use view::{after_edit, apply_snapshot, is_current, reconcile, sync_after_edit};

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

/// Smallest probe interval the driver accepts (seconds); smaller values are raised to it.
pub const MIN_INTERVAL_SEC: f64 = 0.01;

/// A health state change, sent by the checker thread on every transition.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthEvent {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Endpoint name (within the backend).
    pub endpoint: String,
    /// New state: `true` = healthy.
    pub healthy: bool,
    /// RTT moving average at the time of the change, milliseconds.
    pub rtt_ms: Option<f64>,
    /// Why the state changed.
    pub reason: String,
    /// Generation of the target set the event was produced in (see [`TargetSet`]); the
    /// daemon drops events older than the last set it handed over ([`is_current`]).
    pub generation: u64,
}

/// State of one target, from [`HealthChecker::snapshot`].
#[derive(Debug, Clone)]
pub struct TargetStatus {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Endpoint name (within the backend).
    pub endpoint: String,
    /// Address probed.
    pub probe_addr: SocketAddr,
    /// Current state: `true` = healthy.
    pub healthy: bool,
    /// Consecutive successful probes.
    pub consecutive_successes: u32,
    /// Consecutive failed probes.
    pub consecutive_failures: u32,
    /// RTT moving average, milliseconds ([`RTT_EWMA_ALPHA`]).
    pub rtt_ewma_ms: Option<f64>,
    /// RTT of the last successful probe, milliseconds.
    pub rtt_last_ms: Option<f64>,
    /// RTTs of the successful probes since the target was created (metrics).
    pub rtt_histogram: RttHistogram,
    /// Reason of the last failed probe.
    pub last_error: Option<String>,
    /// Time of the last state change (or of the target's creation).
    pub last_change: Instant,
    /// Probes completed (successes + failures).
    pub probes_sent: u64,
    /// Probes failed.
    pub probes_failed: u64,
    /// Probes not run because of a local resource error (see [`is_local_error`]); they
    /// count neither as successes nor as failures.
    pub probes_skipped: u64,
    /// Generation of the target set this state belongs to.
    pub generation: u64,
    /// Whether the state is decided: false while a starting daemon's target waits for its
    /// first success or its `unhealthy_threshold` failures (docs/bgp.md "Readiness").
    pub decided: bool,
}

/// Options of a [`HealthChecker`].
#[derive(Debug, Clone, Copy)]
pub struct CheckerOptions {
    /// State of a new target before any probe (default `true`: serve from the start).
    pub initially_healthy: bool,
    /// Generation of the first target set (default 0); see [`HealthEvent::generation`].
    pub generation: u64,
    /// The first probe result of each target of the first set decides its state outright
    /// ([`tracker::HealthTracker::provisional`]); the daemon sets it at start (default
    /// `false`).
    pub first_result_decides: bool,
}

impl Default for CheckerOptions {
    fn default() -> Self {
        CheckerOptions { initially_healthy: true, generation: 0, first_result_decides: false }
    }
}

/// Whether a probe error is a local resource shortage (out of file descriptors, buffers,
/// memory or ephemeral ports) rather than a sign of the backend's health. Such probes are
/// skipped and counted as skipped, not as failures, so an overloaded prober cannot mark
/// backends down.
pub fn is_local_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL)
    )
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (the checker needs one descriptor per
/// target in flight); returns the soft limit now in force.
pub fn raise_nofile_limit() -> io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let r = getrlimit(Resource::Nofile);
    match (r.current, r.maximum) {
        (Some(cur), Some(max)) if cur < max => {
            setrlimit(Resource::Nofile, Rlimit { current: Some(max), maximum: Some(max) })?;
            Ok(max)
        }
        (Some(cur), _) => Ok(cur),
        (None, _) => Ok(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_errors_are_not_backend_failures() {
        for e in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM, libc::EADDRNOTAVAIL] {
            assert!(is_local_error(&io::Error::from_raw_os_error(e)));
        }
        for e in [libc::ECONNREFUSED, libc::ENETUNREACH, libc::EHOSTUNREACH, libc::ETIMEDOUT] {
            assert!(!is_local_error(&io::Error::from_raw_os_error(e)));
        }
    }

    #[test]
    fn nofile_limit_is_raised_to_the_hard_limit() {
        use rustix::process::{getrlimit, Resource};
        let n = raise_nofile_limit().unwrap();
        let r = getrlimit(Resource::Nofile);
        assert_eq!(r.current, Some(n));
        assert_eq!(r.current, r.maximum);
    }
}
