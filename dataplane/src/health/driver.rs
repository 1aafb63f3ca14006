//! The checker thread: ONE thread runs a `mio` event loop over every target's probe
//! socket. Each target is scheduled at its own interval (first probes spread over one
//! interval to avoid bursts), has at most one probe in flight, and its probe times out
//! through a binary heap of deadlines. Commands (new target set, snapshot, stop) arrive
//! on a channel and wake the loop through a `mio::Waker`. State changes leave as
//! [`HealthEvent`]s on the events channel.
//!
//! If the thread dies (its event loop fails, or it panics in a build that unwinds), the
//! reason is kept and [`HealthChecker::dead`] reports it: the daemon shows it in
//! `status`, logs it and exits non-zero (docs/operations.md "Health checker"). In release
//! builds a panic aborts the whole process (`panic = "abort"`), which is as loud.

use super::probe::https::TlsConfigs;
use super::probe::{Plan, Probe, Step};
use super::targets::{Target, TargetKey, TargetSet};
use super::tracker::ProbeResult;
use super::{is_local_error, CheckerOptions, HealthEvent, TargetStatus, MIN_INTERVAL_SEC};
use mio::{Events, Poll, Token, Waker};
use std::cmp::Reverse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Token of the waker; probe tokens are `(probe id low 32 bits) << 32 | slot`.
const WAKER: Token = Token(usize::MAX);
/// Longest poll wait with no timer due.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// Longest wait for the checker thread to answer a request of the control side
/// ([`HealthChecker::snapshot`], [`HealthChecker::update_at`]). The thread answers between
/// two poll wake-ups, normally in well under a millisecond; a thread that does not answer
/// in this time is wedged, and the caller (the control loop, or a live edit) must not
/// hang with it: the systemd watchdog is fed only while the control loop progresses.
pub const REPLY_TIMEOUT: Duration = Duration::from_millis(500);

enum Command {
    Update { generation: Option<u64>, targets: Vec<Target>, initial: HashMap<TargetKey, bool>, reply: Option<Sender<Vec<TargetStatus>>> },
    Snapshot(Sender<Vec<TargetStatus>>),
    Stop,
    #[cfg(test)]
    Crash,
    /// Test only: the thread blocks this long (a wedged checker).
    #[cfg(test)]
    Stall(Duration),
}

/// The checker thread's answer on `rx`, or nothing (logged) when it does not come within
/// [`REPLY_TIMEOUT`] or the thread is gone.
fn wait_reply(rx: &Receiver<Vec<TargetStatus>>, what: &str) -> Vec<TargetStatus> {
    match rx.recv_timeout(REPLY_TIMEOUT) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            tracing::warn!(request = what, timeout_ms = REPLY_TIMEOUT.as_millis() as u64, "the health checker did not answer in time; going on without its answer");
            Vec::new()
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => Vec::new(),
    }
}

/// State shared between the handle and the thread.
#[derive(Default)]
struct Shared {
    /// Why the thread died; `None` while it runs or after a clean stop.
    death: Mutex<Option<String>>,
    /// Probes skipped for a local shortage since start, over all targets.
    skipped_total: AtomicU64,
    /// Kernel thread id, for [`HealthChecker::cpu_time`] (0 until known).
    tid: AtomicI32,
    /// Every target of the first set has had a probe result ([`HealthChecker::first_round_done`]).
    first_round: std::sync::atomic::AtomicBool,
}

/// The health checker: one thread probing all targets through the kernel stack.
pub struct HealthChecker {
    cmds: Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl HealthChecker {
    /// Starts the checker thread with default [`CheckerOptions`] (targets start healthy,
    /// generation 0). State changes are sent on `events` (a dropped receiver is ignored).
    pub fn start(targets: Vec<Target>, events: Sender<HealthEvent>) -> io::Result<HealthChecker> {
        Self::start_with(targets, events, CheckerOptions::default())
    }

    /// Starts the checker thread with explicit options.
    pub fn start_with(targets: Vec<Target>, events: Sender<HealthEvent>, opts: CheckerOptions) -> io::Result<HealthChecker> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let mut lp = Loop {
            poll,
            cmds: rx,
            events,
            set: TargetSet::new(opts.initially_healthy, opts.generation),
            timers: BinaryHeap::new(),
            tls: TlsConfigs::default(),
            next_probe_id: 1,
            next_incarnation: 1,
            shared: shared.clone(),
        };
        lp.update(opts.generation, targets, &HashMap::new(), Instant::now());
        if opts.first_result_decides {
            lp.set.make_provisional();
            lp.start_first_round(Instant::now());
        }
        let sh = shared.clone();
        let thread = std::thread::Builder::new().name("spillway-health".into()).spawn(move || {
            sh.tid.store(rustix::thread::gettid().as_raw_nonzero().get(), Ordering::Release);
            let death = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lp.run())) {
                Ok(Ok(())) => return,
                Ok(Err(e)) => format!("event loop failed: {e}"),
                Err(p) => {
                    let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
                    format!("panicked: {}", msg.unwrap_or_else(|| "(no message)".into()))
                }
            };
            tracing::error!("health checker thread died: {death}");
            *sh.death.lock().unwrap_or_else(|e| e.into_inner()) = Some(death);
        })?;
        Ok(HealthChecker { cmds: tx, waker, thread: Some(thread), shared })
    }

    /// Whether every target of the first set has had at least one probe result (the
    /// first round of probes is over; targets added later by live edits do not count).
    /// The daemon announces its VIPs only after it (docs/bgp.md "Readiness").
    pub fn first_round_done(&self) -> bool {
        self.shared.first_round.load(Ordering::Acquire)
    }

    fn send(&self, c: Command) -> bool {
        self.cmds.send(c).is_ok() && self.waker.wake().is_ok()
    }

    /// Replaces the target set, keeping its generation. Targets equal to a current one
    /// (same service, backend, addr and check) keep their state, counters and schedule;
    /// changed ones restart from the initial state (an in-flight probe is abandoned);
    /// missing ones are dropped. When two targets share (service, backend), the first wins.
    pub fn update(&self, targets: Vec<Target>) {
        self.send(Command::Update { generation: None, targets, initial: HashMap::new(), reply: None });
    }

    /// Like [`update`](Self::update), but moves to target-set `generation` (every event
    /// produced afterwards carries it), starts added or changed targets in the state
    /// `initial` gives for their key (else the default), and waits for the result: the
    /// state of every target right after the change, from which the daemon reconciles its
    /// view ([`super::view::reconcile`]). Empty if the thread is gone or does not answer
    /// within [`REPLY_TIMEOUT`] (the update still applies when the thread gets to it).
    pub fn update_at(&self, generation: u64, targets: Vec<Target>, initial: HashMap<TargetKey, bool>) -> Vec<TargetStatus> {
        let (tx, rx) = mpsc::channel();
        if !self.send(Command::Update { generation: Some(generation), targets, initial, reply: Some(tx) }) {
            return Vec::new();
        }
        wait_reply(&rx, "update")
    }

    /// The state of every target, in no particular order (empty if the thread is gone or
    /// does not answer within [`REPLY_TIMEOUT`]).
    pub fn snapshot(&self) -> Vec<TargetStatus> {
        let (tx, rx) = mpsc::channel();
        if !self.send(Command::Snapshot(tx)) {
            return Vec::new();
        }
        wait_reply(&rx, "snapshot")
    }

    /// Why the checker thread died, or `None` while it runs.
    pub fn dead(&self) -> Option<String> {
        let d = self.shared.death.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match d {
            Some(d) => Some(d),
            // Finished without recording a reason: only possible after a panic in the
            // recording itself.
            None if self.thread.as_ref().is_some_and(|t| t.is_finished()) => Some("thread ended".into()),
            None => None,
        }
    }

    /// Probes skipped for a local resource shortage since start, over all targets (also
    /// those removed since).
    pub fn skipped_total(&self) -> u64 {
        self.shared.skipped_total.load(Ordering::Relaxed)
    }

    /// CPU time (user + system) used so far by the checker thread, from
    /// `/proc/self/task/<tid>/stat`; `None` if unavailable.
    pub fn cpu_time(&self) -> Option<Duration> {
        let tid = self.shared.tid.load(Ordering::Acquire);
        if tid == 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After "pid (comm) ", field 3 (state) is index 0; utime is field 14, stime 15.
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        let hz = rustix::param::clock_ticks_per_second();
        (hz > 0).then(|| Duration::from_secs_f64(ticks as f64 / hz as f64))
    }

    /// Makes the thread panic, to test what the daemon does with a dead checker.
    #[cfg(test)]
    pub(crate) fn crash_for_test(&self) {
        self.send(Command::Crash);
    }

    /// Makes the thread block for `d`, to test callers of a wedged checker.
    #[cfg(test)]
    pub(crate) fn stall_for_test(&self, d: Duration) {
        self.send(Command::Stall(d));
    }

    /// Stops the thread and waits for it (in-flight probes are abandoned).
    pub fn stop(self) {
        drop(self)
    }
}

impl Drop for HealthChecker {
    fn drop(&mut self) {
        self.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    /// Probe deadline (processed before a start due at the same instant).
    Deadline,
    /// Next probe start.
    Start,
}

/// Timer heap entry, ordered by time. `id` is the probe id for deadlines and the slot's
/// incarnation for starts: stale entries are skipped when popped.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: Instant,
    kind: TimerKind,
    slot: usize,
    id: u64,
}

/// Driver state of one target.
struct Sched {
    plan: Plan,
    interval: Duration,
    timeout: Duration,
    next_start: Instant,
    incarnation: u64,
    probe: Option<InFlight>,
}

struct InFlight {
    id: u64,
    started: Instant,
    probe: Probe,
}

struct Loop {
    poll: Poll,
    cmds: Receiver<Command>,
    events: Sender<HealthEvent>,
    set: TargetSet<Sched>,
    timers: BinaryHeap<Reverse<Timer>>,
    tls: TlsConfigs,
    next_probe_id: u64,
    next_incarnation: u64,
    shared: Arc<Shared>,
}

fn token(slot: usize, id: u64) -> Token {
    Token((((id & 0xffff_ffff) << 32) | slot as u64) as usize)
}

fn spread_offset(t: &Target, interval: Duration) -> Duration {
    let mut h = DefaultHasher::new();
    (&t.service, &t.backend).hash(&mut h);
    let frac = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    interval.mul_f64(frac)
}

/// How often the loop checks whether the first round of probes is over (a scan of the
/// targets, until it is).
const FIRST_ROUND_CHECK: std::time::Duration = std::time::Duration::from_millis(50);
/// The first probes of a starting daemon's targets are spread over at most this.
const FIRST_ROUND_SPREAD: Duration = Duration::from_secs(1);
/// An undecided target (a failed first probe at start) is probed again this soon, until
/// `unhealthy_threshold` failures or a success decide it.
const FIRST_ROUND_RETRY: Duration = Duration::from_millis(200);

impl Loop {
    /// Runs until Stop (`Ok`) or a poll failure (`Err`).
    fn run(&mut self) -> Result<(), String> {
        let mut events = Events::with_capacity(1024);
        let mut last_round_check = Instant::now() - FIRST_ROUND_CHECK;
        loop {
            let mut wait = self.timers.peek().map_or(MAX_WAIT, |Reverse(t)| t.at.saturating_duration_since(Instant::now()).min(MAX_WAIT));
            if !self.shared.first_round.load(Ordering::Relaxed) {
                wait = wait.min(FIRST_ROUND_CHECK); // the round's end is noticed at once
            }
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("poll: {e}"));
            }
            let now = Instant::now();
            let mut woken = false;
            for ev in events.iter() {
                if ev.token() == WAKER {
                    woken = true;
                } else {
                    let t = ev.token().0 as u64;
                    self.io(now, (t & 0xffff_ffff) as usize, t >> 32);
                }
            }
            if woken && !self.commands(now) {
                return Ok(());
            }
            let now = Instant::now();
            while self.timers.peek().is_some_and(|Reverse(t)| t.at <= now) {
                let Some(Reverse(t)) = self.timers.pop() else { break };
                self.timer(now, t);
            }
            if !self.shared.first_round.load(Ordering::Relaxed) && last_round_check.elapsed() >= FIRST_ROUND_CHECK {
                last_round_check = now;
                if !self.set.any_provisional() {
                    self.shared.first_round.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Handles pending commands; false on Stop (or when the handle is gone).
    fn commands(&mut self, now: Instant) -> bool {
        loop {
            match self.cmds.try_recv() {
                Ok(Command::Update { generation, targets, initial, reply }) => {
                    let generation = generation.unwrap_or(self.set.generation());
                    self.update(generation, targets, &initial, now);
                    if let Some(r) = reply {
                        let _ = r.send(self.set.statuses());
                    }
                }
                Ok(Command::Snapshot(reply)) => {
                    let _ = reply.send(self.set.statuses());
                }
                Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return false,
                #[cfg(test)]
                Ok(Command::Crash) => panic!("crash requested by a test"),
                #[cfg(test)]
                Ok(Command::Stall(d)) => std::thread::sleep(d),
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    fn update(&mut self, generation: u64, targets: Vec<Target>, initial: &HashMap<TargetKey, bool>, now: Instant) {
        let (tls, timers, inc) = (&mut self.tls, &mut self.timers, &mut self.next_incarnation);
        self.set.update(generation, targets, initial, now, |slot, t| {
            let interval = Duration::from_secs_f64(t.check.check_interval_sec.max(MIN_INTERVAL_SEC));
            let timeout = Duration::from_secs_f64(t.check.timeout_sec.max(0.001)).min(interval);
            let incarnation = *inc;
            *inc += 1;
            let next_start = now + spread_offset(t, interval);
            timers.push(Reverse(Timer { at: next_start, kind: TimerKind::Start, slot, id: incarnation }));
            Sched { plan: Plan::new(t, tls), interval, timeout, next_start, incarnation, probe: None }
        });
    }

    fn timer(&mut self, now: Instant, t: Timer) {
        let Some(e) = self.set.get_mut(t.slot) else { return };
        let s = &mut e.extra;
        match t.kind {
            TimerKind::Deadline => {
                if let Some(p) = s.probe.as_ref().filter(|p| p.id == t.id) {
                    let reason = format!("timeout after {} s ({})", s.timeout.as_secs_f64(), p.probe.stage());
                    self.finish(now, t.slot, ProbeResult::Failure { reason });
                }
            }
            TimerKind::Start => {
                if s.incarnation != t.id {
                    return;
                }
                while s.next_start <= now {
                    s.next_start += s.interval;
                }
                self.timers.push(Reverse(Timer { at: s.next_start, kind: TimerKind::Start, slot: t.slot, id: t.id }));
                if s.probe.is_none() {
                    self.start_probe(now, t.slot);
                }
            }
        }
    }

    fn start_probe(&mut self, now: Instant, i: usize) {
        let id = self.next_probe_id;
        self.next_probe_id += 1;
        let Some(e) = self.set.get_mut(i) else { return };
        match Probe::start(&e.extra.plan, e.target.probe_addr(), self.poll.registry(), token(i, id)) {
            Ok(probe) => {
                e.extra.probe = Some(InFlight { id, started: now, probe });
                let at = now + e.extra.timeout;
                self.timers.push(Reverse(Timer { at, kind: TimerKind::Deadline, slot: i, id }));
            }
            Err(err) if is_local_error(&err) => {
                // Our shortage, not the backend's: counted as skipped, never as a failure.
                let (service, backend) = (e.target.service.clone(), e.target.backend.clone());
                let n = self.set.skip(i);
                let total = self.shared.skipped_total.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(%service, %backend, skipped = n, skipped_total = total, "health: probe skipped: {err}");
                }
            }
            Err(err) => self.finish(now, i, ProbeResult::Failure { reason: format!("probe: {err}") }),
        }
    }

    fn io(&mut self, now: Instant, i: usize, id_lo: u64) {
        let Some(e) = self.set.get_mut(i) else { return };
        let s = &mut e.extra;
        let Some(p) = s.probe.as_mut() else { return };
        if p.id & 0xffff_ffff != id_lo {
            return;
        }
        let rtt = now.saturating_duration_since(p.started);
        match p.probe.ready(&s.plan) {
            Step::Pending => {}
            Step::Done(Ok(())) => self.finish(now, i, ProbeResult::Success { rtt }),
            Step::Done(Err(reason)) => self.finish(now, i, ProbeResult::Failure { reason }),
        }
    }

    /// Ends the in-flight probe of slot `i` (closing its socket) and records `r`. A target
    /// still undecided at start is probed again soon ([`FIRST_ROUND_RETRY`]).
    fn finish(&mut self, now: Instant, i: usize, r: ProbeResult) {
        let Some(e) = self.set.get_mut(i) else { return };
        e.extra.probe = None;
        if let Some(ev) = self.set.record(i, now, r) {
            tracing::info!(service = %ev.service, backend = %ev.backend, healthy = ev.healthy, generation = ev.generation, "health: {}", ev.reason);
            let _ = self.events.send(ev);
        }
        if self.set.get(i).is_some_and(|e| e.tracker.is_provisional()) {
            self.reschedule(i, now + FIRST_ROUND_RETRY);
        }
    }

    /// The first probes of a starting daemon's targets: spread over at most
    /// [`FIRST_ROUND_SPREAD`] instead of a whole interval, so a host restarted in a fleet
    /// announces its VIPs within about a second, whatever the check interval.
    fn start_first_round(&mut self, now: Instant) {
        let slots: Vec<(usize, Duration)> = (0..self.set.slots_len())
            .filter_map(|i| self.set.get(i).map(|e| (i, spread_offset(&e.target, e.extra.interval.min(FIRST_ROUND_SPREAD)))))
            .collect();
        for (i, offset) in slots {
            self.reschedule(i, now + offset);
        }
    }

    /// Moves slot `i`'s next probe to `at`: a new schedule incarnation, so the timer of
    /// the old schedule is ignored when it fires.
    fn reschedule(&mut self, i: usize, at: Instant) {
        let id = self.next_incarnation;
        self.next_incarnation += 1;
        let Some(e) = self.set.get_mut(i) else { return };
        let at = at.min(e.extra.next_start);
        e.extra.incarnation = id;
        e.extra.next_start = at;
        self.timers.push(Reverse(Timer { at, kind: TimerKind::Start, slot: i, id }));
    }
}

#[cfg(test)]
mod tests;
