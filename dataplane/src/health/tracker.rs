//! The sans-IO health state machine of one target (spec/backend-selection.md "Health
//! checks"): consecutive success/failure counters against the thresholds, the
//! healthy/unhealthy state, the RTT moving average and the last error. Pure: probe results
//! and time are passed in; no sockets, no clock, no threads. May use: std, the config types.

use spillway_shared::config::HealthCheck;
use std::time::{Duration, Instant};

/// Weight of the newest sample in the RTT exponentially weighted moving average:
/// `ewma = alpha * sample + (1 - alpha) * ewma` (the first sample initialises it).
pub const RTT_EWMA_ALPHA: f64 = 0.3;

/// Result of one probe, as fed to [`HealthTracker::record`].
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeResult {
    /// The probe succeeded; round-trip time from probe start (socket creation) to the
    /// success condition (connect done, status line read, UDP answer received).
    Success {
        /// Round-trip time.
        rtt: Duration,
    },
    /// The probe failed (refused, timeout, wrong status, wrong answer, ...).
    Failure {
        /// Human-readable reason.
        reason: String,
    },
}

/// A change of health state reported by [`HealthTracker::record`].
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// New state: `true` = healthy.
    pub healthy: bool,
    /// Why: `"N consecutive successes"` or `"N consecutive failures: <last error>"`.
    pub reason: String,
}

/// Per-target health state machine (sans IO; time is passed in explicitly).
///
/// A target becomes healthy after `healthy_threshold` consecutive successes and unhealthy
/// after `unhealthy_threshold` consecutive failures (spec/backend-selection.md
/// "Health checks"); a result of the other kind resets the count. Flapping results
/// (alternating success and failure) therefore never change the state when both
/// thresholds are ≥ 2.
#[derive(Debug, Clone)]
pub struct HealthTracker {
    healthy_threshold: u32,
    unhealthy_threshold: u32,
    healthy: bool,
    consecutive_successes: u32,
    consecutive_failures: u32,
    rtt_ewma_ms: Option<f64>,
    rtt_last_ms: Option<f64>,
    last_error: Option<String>,
    last_change: Instant,
    probes: u64,
    probes_failed: u64,
    rtt_histogram: RttHistogram,
    /// The state is a guess until the first result, which then decides it outright
    /// ([`HealthTracker::provisional`]): targets of a starting daemon.
    provisional: bool,
}

/// Upper bounds (seconds) of the probe RTT histogram's buckets; a last `+Inf` bucket
/// follows. 0.5 ms (same rack) to 5 s (the longest useful probe timeout).
pub const RTT_BUCKETS_SEC: [f64; 13] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// RTTs of successful probes of one endpoint (exported as the
/// `spillway_endpoint_probe_rtt_seconds` histogram, docs/metrics.md).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RttHistogram {
    /// Probes per bucket (not cumulative): `counts[i]` for RTT ≤ `RTT_BUCKETS_SEC[i]` and
    /// above the previous bound; the last element is the `+Inf` bucket.
    pub counts: [u64; RTT_BUCKETS_SEC.len() + 1],
    /// Sum of the RTTs, seconds.
    pub sum_sec: f64,
}

impl RttHistogram {
    /// Adds one RTT of `sec` seconds.
    pub fn observe(&mut self, sec: f64) {
        let i = RTT_BUCKETS_SEC.iter().position(|b| sec <= *b).unwrap_or(RTT_BUCKETS_SEC.len());
        self.counts[i] += 1;
        self.sum_sec += sec;
    }

    /// Number of RTTs observed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// (upper bound, count) per bucket, `+Inf` last, as Prometheus encoders take them.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        RTT_BUCKETS_SEC.iter().copied().chain([f64::INFINITY]).zip(self.counts).collect()
    }
}

impl HealthTracker {
    /// A tracker for `check`'s thresholds (a threshold of 0 is taken as 1), starting in
    /// state `initially_healthy` at time `now`.
    pub fn new(check: &HealthCheck, initially_healthy: bool, now: Instant) -> HealthTracker {
        HealthTracker {
            healthy_threshold: check.healthy_threshold.max(1),
            unhealthy_threshold: check.unhealthy_threshold.max(1),
            healthy: initially_healthy,
            consecutive_successes: 0,
            consecutive_failures: 0,
            rtt_ewma_ms: None,
            rtt_last_ms: None,
            last_error: None,
            last_change: now,
            probes: 0,
            probes_failed: 0,
            rtt_histogram: RttHistogram::default(),
            provisional: false,
        }
    }

    /// Marks the state as not yet decided: a starting daemon's targets begin in their
    /// initial state, and the host announces its VIPs only once every target is decided
    /// (docs/bgp.md "Readiness"): by its first success (healthy at once), or by
    /// `unhealthy_threshold` consecutive failures (spec/backend-selection.md "Health
    /// checks"), which the checker probes in quick succession while the target is
    /// undecided.
    pub fn provisional(mut self) -> HealthTracker {
        self.provisional = true;
        self
    }

    /// Whether the target is still undecided ([`provisional`](Self::provisional)).
    pub fn is_provisional(&self) -> bool {
        self.provisional
    }

    /// Feeds one probe result observed at `now`; returns the transition when the state
    /// changed.
    pub fn record(&mut self, now: Instant, result: ProbeResult) -> Option<Transition> {
        if !self.provisional {
            return self.record_counted(now, result);
        }
        let ok = matches!(result, ProbeResult::Success { .. });
        let t = self.record_counted(now, result);
        if ok {
            // A first success decides at once.
            self.provisional = false;
            if !self.healthy {
                self.healthy = true;
                self.last_change = now;
                return Some(Transition { healthy: true, reason: "first probe at start succeeded".to_string() });
            }
        } else if self.consecutive_failures >= self.unhealthy_threshold {
            self.provisional = false;
            if self.healthy {
                self.healthy = false;
                self.last_change = now;
                return Some(Transition {
                    healthy: false,
                    reason: format!("{} consecutive failures at start: {}", self.consecutive_failures, self.last_error.as_deref().unwrap_or("")),
                });
            }
        }
        t
    }

    fn record_counted(&mut self, now: Instant, result: ProbeResult) -> Option<Transition> {
        self.probes += 1;
        match result {
            ProbeResult::Success { rtt } => {
                let ms = rtt.as_secs_f64() * 1e3;
                self.rtt_histogram.observe(rtt.as_secs_f64());
                self.rtt_last_ms = Some(ms);
                self.rtt_ewma_ms = Some(match self.rtt_ewma_ms {
                    None => ms,
                    Some(e) => RTT_EWMA_ALPHA * ms + (1.0 - RTT_EWMA_ALPHA) * e,
                });
                self.consecutive_failures = 0;
                self.consecutive_successes = self.consecutive_successes.saturating_add(1);
                if !self.healthy && self.consecutive_successes >= self.healthy_threshold {
                    self.healthy = true;
                    self.last_change = now;
                    return Some(Transition {
                        healthy: true,
                        reason: format!("{} consecutive successes", self.consecutive_successes),
                    });
                }
            }
            ProbeResult::Failure { reason } => {
                self.probes_failed += 1;
                self.consecutive_successes = 0;
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.last_error = Some(reason);
                if self.healthy && self.consecutive_failures >= self.unhealthy_threshold {
                    self.healthy = false;
                    self.last_change = now;
                    return Some(Transition {
                        healthy: false,
                        reason: format!(
                            "{} consecutive failures: {}",
                            self.consecutive_failures,
                            self.last_error.as_deref().unwrap_or("")
                        ),
                    });
                }
            }
        }
        None
    }

    /// Current state: `true` = healthy.
    pub fn healthy(&self) -> bool {
        self.healthy
    }
    /// Consecutive successful probes (0 after a failure).
    pub fn consecutive_successes(&self) -> u32 {
        self.consecutive_successes
    }
    /// Consecutive failed probes (0 after a success).
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }
    /// RTT moving average in milliseconds (successful probes only); `None` before the first.
    pub fn rtt_ewma_ms(&self) -> Option<f64> {
        self.rtt_ewma_ms
    }
    /// RTT of the last successful probe, milliseconds.
    pub fn rtt_last_ms(&self) -> Option<f64> {
        self.rtt_last_ms
    }
    /// RTTs of every successful probe so far.
    pub fn rtt_histogram(&self) -> &RttHistogram {
        &self.rtt_histogram
    }
    /// Reason of the last failed probe (kept after later successes).
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
    /// Time of the last state change (creation time if none).
    pub fn last_change(&self) -> Instant {
        self.last_change
    }
    /// Probes recorded.
    pub fn probes(&self) -> u64 {
        self.probes
    }
    /// Failed probes recorded.
    pub fn probes_failed(&self) -> u64 {
        self.probes_failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hc(healthy: u32, unhealthy: u32) -> HealthCheck {
        HealthCheck { healthy_threshold: healthy, unhealthy_threshold: unhealthy, ..HealthCheck::default() }
    }
    fn ok(ms: u64) -> ProbeResult {
        ProbeResult::Success { rtt: Duration::from_millis(ms) }
    }
    fn fail(r: &str) -> ProbeResult {
        ProbeResult::Failure { reason: r.into() }
    }

    /// At start a target is undecided until its first success (healthy at once, even if it
    /// began unhealthy) or `unhealthy_threshold` consecutive failures: one lost probe does
    /// not mark a backend down (spec/backend-selection.md "Health checks").
    #[test]
    fn an_undecided_target_is_decided_by_a_success_or_by_the_threshold() {
        let t0 = Instant::now();
        let mut t = HealthTracker::new(&hc(3, 2), true, t0).provisional();
        assert_eq!(t.record(t0, fail("refused")), None);
        assert!(t.is_provisional() && t.healthy(), "one failure decides nothing");
        let tr = t.record(t0, fail("refused")).unwrap();
        assert!(!tr.healthy && !t.is_provisional() && !t.healthy());
        let mut t = HealthTracker::new(&hc(3, 2), false, t0).provisional();
        assert!(t.record(t0, fail("x")).is_none());
        assert!(t.record(t0, ok(1)).unwrap().healthy, "a first success decides at once, below healthy_threshold");
        assert!(!t.is_provisional());
        let mut t = HealthTracker::new(&hc(3, 2), true, t0).provisional();
        assert!(t.record(t0, ok(1)).is_none() && !t.is_provisional() && t.healthy());
    }

    #[test]
    fn tracker_defaults_match_spec() {
        let d = HealthCheck::default();
        assert_eq!((d.check_interval_sec, d.timeout_sec, d.healthy_threshold, d.unhealthy_threshold), (5.0, 5.0, 2, 2));
        assert_eq!(d.expected_status(), 200);
        let t0 = Instant::now();
        assert!(HealthTracker::new(&d, true, t0).healthy());
        assert!(!HealthTracker::new(&d, false, t0).healthy());
        assert_eq!(HealthTracker::new(&d, true, t0).last_change(), t0);
    }

    #[test]
    fn tracker_unhealthy_after_exactly_threshold_failures() {
        let t0 = Instant::now();
        let mut t = HealthTracker::new(&hc(2, 3), true, t0);
        assert_eq!(t.record(t0, fail("a")), None);
        assert_eq!(t.record(t0, fail("b")), None);
        assert!(t.healthy());
        let t3 = t0 + Duration::from_secs(3);
        let tr = t.record(t3, fail("refused")).expect("transition");
        assert!(!tr.healthy);
        assert_eq!(tr.reason, "3 consecutive failures: refused");
        assert!(!t.healthy());
        assert_eq!(t.last_change(), t3);
        assert_eq!(t.consecutive_failures(), 3);
        // Further failures: no new transition, counter keeps going.
        assert_eq!(t.record(t0, fail("c")), None);
        assert_eq!(t.consecutive_failures(), 4);
        assert_eq!(t.last_change(), t3);
        assert_eq!((t.probes(), t.probes_failed()), (4, 4));
        assert_eq!(t.last_error(), Some("c"));
    }

    #[test]
    fn tracker_healthy_after_exactly_threshold_successes() {
        let t0 = Instant::now();
        let mut t = HealthTracker::new(&hc(3, 2), false, t0);
        assert_eq!(t.record(t0, ok(1)), None);
        assert_eq!(t.record(t0, ok(1)), None);
        let tr = t.record(t0, ok(1)).expect("transition");
        assert!(tr.healthy);
        assert_eq!(tr.reason, "3 consecutive successes");
        assert_eq!(t.record(t0, ok(1)), None);
        assert_eq!(t.consecutive_successes(), 4);
        assert_eq!(t.consecutive_failures(), 0);
    }

    #[test]
    fn tracker_counts_reset_by_opposite_result() {
        let t0 = Instant::now();
        let mut t = HealthTracker::new(&hc(2, 2), true, t0);
        t.record(t0, fail("x"));
        t.record(t0, ok(1)); // resets the failure count
        assert_eq!(t.consecutive_failures(), 0);
        assert_eq!(t.record(t0, fail("y")), None);
        assert!(t.healthy());
        assert!(t.record(t0, fail("z")).is_some());
        // Back up: one success then a failure then two successes.
        t.record(t0, ok(1));
        t.record(t0, fail("w"));
        assert_eq!(t.record(t0, ok(1)), None);
        assert!(t.record(t0, ok(1)).expect("up").healthy);
    }

    #[test]
    fn tracker_flapping_never_transitions_with_thresholds_2() {
        let t0 = Instant::now();
        for initial in [true, false] {
            let mut t = HealthTracker::new(&hc(2, 2), initial, t0);
            for i in 0..100 {
                let r = if i % 2 == 0 { fail("flap") } else { ok(2) };
                assert_eq!(t.record(t0, r), None);
            }
            assert_eq!(t.healthy(), initial);
            assert_eq!((t.probes(), t.probes_failed()), (100, 50));
        }
    }

    #[test]
    fn tracker_flapping_with_threshold_1_transitions_every_time() {
        let t0 = Instant::now();
        let mut t = HealthTracker::new(&hc(1, 1), true, t0);
        let mut changes = 0;
        for i in 0..10 {
            let r = if i % 2 == 0 { fail("flap") } else { ok(2) };
            let tr = t.record(t0 + Duration::from_secs(i), r).expect("transition each time");
            assert_eq!(tr.healthy, i % 2 == 1);
            changes += 1;
        }
        assert_eq!(changes, 10);
        assert_eq!(t.last_change(), t0 + Duration::from_secs(9));
        // Zero thresholds are taken as 1.
        let mut z = HealthTracker::new(&hc(0, 0), true, t0);
        assert!(z.record(t0, fail("x")).is_some());
    }

    #[test]
    fn rtt_histogram_buckets_successful_probes_only() {
        let mut t = HealthTracker::new(&hc(1, 1), true, Instant::now());
        for ms in [0, 1, 3, 3, 7000] {
            t.record(Instant::now(), ok(ms));
        }
        t.record(Instant::now(), fail("refused"));
        let h = t.rtt_histogram();
        assert_eq!(h.count(), 5, "failures have no RTT");
        let b = h.buckets();
        assert_eq!(b.len(), 14);
        assert_eq!(b[0], (0.0005, 1), "0 ms");
        assert_eq!(b[1], (0.001, 1), "1 ms: bounds are inclusive");
        assert_eq!(b[3], (0.005, 2), "3 ms twice");
        assert_eq!(b[13].1, 1, "7 s lands in +Inf");
        assert!(b[13].0.is_infinite());
        assert!((h.sum_sec - 7.007).abs() < 1e-9);
    }

    #[test]
    fn tracker_rtt_ewma_and_last() {
        let t0 = Instant::now();
        let mut t = HealthTracker::new(&hc(2, 2), true, t0);
        assert_eq!(t.rtt_ewma_ms(), None);
        t.record(t0, ok(10));
        assert_eq!(t.rtt_ewma_ms(), Some(10.0));
        assert_eq!(t.rtt_last_ms(), Some(10.0));
        t.record(t0, ok(20));
        let e = t.rtt_ewma_ms().unwrap();
        assert!((e - (RTT_EWMA_ALPHA * 20.0 + (1.0 - RTT_EWMA_ALPHA) * 10.0)).abs() < 1e-9, "{e}");
        assert_eq!(t.rtt_last_ms(), Some(20.0));
        // Failures leave the RTT alone.
        t.record(t0, fail("x"));
        assert_eq!(t.rtt_ewma_ms(), Some(e));
        assert_eq!(t.rtt_last_ms(), Some(20.0));
        assert_eq!(t.last_error(), Some("x"));
        // Converges towards a steady value.
        for _ in 0..100 {
            t.record(t0, ok(5));
        }
        assert!((t.rtt_ewma_ms().unwrap() - 5.0).abs() < 1e-6);
        assert_eq!(t.last_error(), Some("x"), "last error kept after recovery");
    }

    proptest::proptest! {
        /// Against a model: the state flips exactly when a run of the opposite result
        /// reaches its threshold, each flip is one transition, and the counters are the
        /// current run's length.
        #[test]
        fn tracker_matches_the_run_length_model(
            healthy_threshold in 1u32..5,
            unhealthy_threshold in 1u32..5,
            initially_healthy: bool,
            results in proptest::collection::vec(proptest::bool::ANY, 0..200),
        ) {
            let t0 = Instant::now();
            let mut t = HealthTracker::new(&hc(healthy_threshold, unhealthy_threshold), initially_healthy, t0);
            let (mut healthy, mut run, mut last) = (initially_healthy, 0u32, None::<bool>);
            for (i, &r) in results.iter().enumerate() {
                run = if last == Some(r) { run + 1 } else { 1 };
                last = Some(r);
                let flips = r != healthy && run >= if r { healthy_threshold } else { unhealthy_threshold };
                if flips {
                    healthy = r;
                }
                let now = t0 + Duration::from_secs(i as u64);
                let tr = t.record(now, if r { ok(1) } else { fail("x") });
                proptest::prop_assert_eq!(tr.map(|x| x.healthy), flips.then_some(r));
                proptest::prop_assert_eq!(t.healthy(), healthy);
                proptest::prop_assert_eq!((t.consecutive_successes(), t.consecutive_failures()), if r { (run, 0) } else { (0, run) });
                if flips {
                    proptest::prop_assert_eq!(t.last_change(), now);
                }
            }
            proptest::prop_assert_eq!(t.probes(), results.len() as u64);
            proptest::prop_assert_eq!(t.probes_failed(), results.iter().filter(|r| !**r).count() as u64);
        }
    }
}
