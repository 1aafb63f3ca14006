//! Backend health checks (spec/backend-selection.md "Health checks").
//!
//! Probes go through the host kernel's network stack, not through DPDK, so this module is
//! independent of the packet path. It has two layers:
//!
//! * a sans-IO core, [`HealthTracker`]: a pure per-target state machine fed with probe
//!   results and explicit time (consecutive counters, healthy/unhealthy state, RTT moving
//!   average, last error, last change time);
//! * a driver, [`HealthChecker`]: ONE thread running a non-blocking `epoll` event loop that
//!   schedules every target at its own interval (first probes spread over one interval to
//!   avoid bursts), does non-blocking connect/send/recv, and enforces per-probe timeouts
//!   with a binary heap of deadlines. State changes are reported as [`HealthEvent`]s on a
//!   channel; the full state is readable with [`HealthChecker::snapshot`].
//!
//! Probe kinds ([`HealthCheckKind`]):
//! * `tcp`: the TCP connect completes (the probe socket is then reset with `SO_LINGER 0`,
//!   so probing leaves no `TIME_WAIT` sockets behind);
//! * `http`: `GET <path> HTTP/1.0` with a `Host` header; the status line's code must equal
//!   `expected_status` (default 200);
//! * `udp`: `udp_request` is sent on a connected UDP socket; any datagram received starting
//!   with `udp_expect` succeeds (any datagram at all when `udp_expect` is empty). An ICMP
//!   port unreachable (`ECONNREFUSED`) fails at once.
//!
//! Defaults (from [`HealthCheck`]): interval 5 s, timeout 5 s, healthy threshold 2,
//! unhealthy threshold 2; so with defaults a dead backend is marked unhealthy within about
//! 10 s (two failed probes), 15 s at the worst (up to one interval until the first one).
//!
//! Initial state: by default targets start **healthy** (Spillway serves from the start, and
//! a dead backend is marked unhealthy after `unhealthy_threshold` failures); this is
//! [`CheckerOptions::initially_healthy`].
//!
//! Probe round-trip times (ms) are kept as the last value and an exponentially weighted
//! moving average ([`RTT_EWMA_ALPHA`]); they are the latency that origin routing uses.
//! The RTT is wall-clock time from probe start (socket creation) to the success condition,
//! as seen by the event loop, so it includes the prober's own scheduling delay.
//!
//! Resources: one socket per in-flight probe and at most one probe in flight per target,
//! so the checker needs up to one file descriptor per target (plus 2); size
//! `RLIMIT_NOFILE` for it. Probes that cannot start for a local shortage (see
//! [`is_local_error`]) are skipped rather than counted against the backend. Scale:
//! `examples/health_scale.rs` runs 10,000 targets at a 1 s interval.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use spillway_shared::config::{HealthCheck, HealthCheckKind};
use spillway_shared::config::Config;

/// Weight of the newest sample in the RTT exponentially weighted moving average:
/// `ewma = alpha * sample + (1 - alpha) * ewma` (the first sample initialises it).
pub const RTT_EWMA_ALPHA: f64 = 0.3;

/// Smallest probe interval the driver accepts (seconds); smaller values are raised to it.
pub const MIN_INTERVAL_SEC: f64 = 0.01;

/// Largest HTTP status line read (bytes); a longer one fails the probe.
const MAX_STATUS_LINE: usize = 1024;

// ---------------------------------------------------------------------------------------
// Sans-IO core
// ---------------------------------------------------------------------------------------

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
        }
    }

    /// Feeds one probe result observed at `now`; returns the transition when the state
    /// changed.
    pub fn record(&mut self, now: Instant, result: ProbeResult) -> Option<Transition> {
        self.probes += 1;
        match result {
            ProbeResult::Success { rtt } => {
                let ms = rtt.as_secs_f64() * 1e3;
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

/// Parses an HTTP status line (`HTTP/1.x NNN reason`), returning the status code.
pub fn parse_status_line(line: &[u8]) -> Result<u16, String> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let shown = || String::from_utf8_lossy(&line[..line.len().min(64)]).into_owned();
    let rest = line
        .strip_prefix(b"HTTP/1.")
        .filter(|r| r.len() >= 5 && r[0].is_ascii_digit() && r[1] == b' ')
        .ok_or_else(|| format!("bad HTTP status line {:?}", shown()))?;
    let code = &rest[2..5];
    if !code.iter().all(u8::is_ascii_digit) || rest.get(5).is_some_and(|&c| c != b' ') {
        return Err(format!("bad HTTP status line {:?}", shown()));
    }
    Ok(code.iter().fold(0u16, |a, &d| a * 10 + u16::from(d - b'0')))
}

// ---------------------------------------------------------------------------------------
// Driver API
// ---------------------------------------------------------------------------------------

/// One health-checked endpoint: a backend of a service.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Service name.
    pub service: String,
    /// Backend name (unique within the service).
    pub backend: String,
    /// Backend address and the service port; the probe goes to
    /// `check.port.unwrap_or(addr.port())` on `addr.ip()`.
    pub addr: SocketAddrV4,
    /// What to probe and how often.
    pub check: HealthCheck,
}

impl Target {
    /// The address probed: `addr` with `check.port` when set.
    pub fn probe_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(*self.addr.ip(), self.check.port.unwrap_or(self.addr.port()))
    }
}

/// Builds the targets of every backend of every service that has a `health_check`
/// (services without one have static, always-healthy backends).
pub fn targets_from_config(cfg: &Config) -> Vec<Target> {
    let mut out = Vec::new();
    for s in &cfg.services {
        let Some(check) = &s.health_check else { continue };
        for b in &s.backends {
            out.push(Target {
                service: s.name.clone(),
                backend: b.name.clone(),
                addr: SocketAddrV4::new(b.address, s.port),
                check: check.clone(),
            });
        }
    }
    out
}

/// Copies health state and RTT moving average (as `latency_ms`) from a
/// [`HealthChecker::snapshot`] into the control plane's [`crate::control::HealthView`],
/// keeping each entry's other fields (load). Backends without a status are left alone.
pub fn apply_snapshot(statuses: &[TargetStatus], view: &mut crate::control::HealthView) {
    for st in statuses {
        let v = view.entry((st.service.clone(), st.backend.clone())).or_default();
        v.healthy = st.healthy;
        if st.rtt_ewma_ms.is_some() {
            v.latency_ms = st.rtt_ewma_ms;
        }
    }
}

/// A health state change, sent by the checker thread on every transition.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthEvent {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// New state: `true` = healthy.
    pub healthy: bool,
    /// RTT moving average at the time of the change, milliseconds.
    pub rtt_ms: Option<f64>,
    /// Why the state changed.
    pub reason: String,
}

/// State of one target, from [`HealthChecker::snapshot`].
#[derive(Debug, Clone)]
pub struct TargetStatus {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Address probed.
    pub probe_addr: SocketAddrV4,
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
}

/// Options of a [`HealthChecker`].
#[derive(Debug, Clone, Copy)]
pub struct CheckerOptions {
    /// State of a new target before any probe (default `true`: serve from the start).
    pub initially_healthy: bool,
}

impl Default for CheckerOptions {
    fn default() -> Self {
        CheckerOptions { initially_healthy: true }
    }
}

enum Command {
    Update(Vec<Target>, HashMap<(String, String), bool>),
    Snapshot(Sender<Vec<TargetStatus>>),
    Stop,
}

/// The health checker: one thread probing all targets through the kernel stack.
pub struct HealthChecker {
    cmds: Sender<Command>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    tid: Arc<AtomicI32>,
}

impl HealthChecker {
    /// Starts the checker thread with default [`CheckerOptions`] (targets start healthy).
    /// State changes are sent on `events` (a dropped receiver is ignored).
    pub fn start(targets: Vec<Target>, events: Sender<HealthEvent>) -> io::Result<HealthChecker> {
        Self::start_with(targets, events, CheckerOptions::default())
    }

    /// Starts the checker thread with explicit options.
    pub fn start_with(
        targets: Vec<Target>,
        events: Sender<HealthEvent>,
        opts: CheckerOptions,
    ) -> io::Result<HealthChecker> {
        // SAFETY: plain syscalls; results checked.
        let epfd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: epfd is a fresh fd we own.
        let epfd = unsafe { OwnedFd::from_raw_fd(epfd) };
        // SAFETY: as above.
        let wfd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh fd we own.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(wfd) });
        epoll_add(epfd.as_raw_fd(), wake.as_raw_fd(), libc::EPOLLIN as u32, WAKE_TOKEN)?;
        let (tx, rx) = mpsc::channel();
        let tid = Arc::new(AtomicI32::new(0));
        let mut lp = Loop {
            epfd,
            wake: wake.clone(),
            cmds: rx,
            events,
            opts,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            timers: BinaryHeap::new(),
            next_probe_id: 1,
            next_gen: 1,
        };
        lp.update(targets, &HashMap::new(), Instant::now());
        let tid2 = tid.clone();
        let thread = std::thread::Builder::new().name("spillway-health".into()).spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid2.store(unsafe { libc::syscall(libc::SYS_gettid) } as i32, Ordering::Release);
            lp.run();
        })?;
        Ok(HealthChecker { cmds: tx, wake, thread: Some(thread), tid })
    }

    fn send(&self, c: Command) {
        if self.cmds.send(c).is_ok() {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
            unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Replaces the target set. Targets equal to a current one (same service, backend,
    /// addr and check) keep their state, counters and schedule; changed ones restart from
    /// the initial state (an in-flight probe is abandoned); missing ones are dropped. When
    /// two targets share (service, backend), the first wins.
    pub fn update(&self, targets: Vec<Target>) {
        self.send(Command::Update(targets, HashMap::new()));
    }

    /// Like [`update`](Self::update), but targets that are added or changed start in the
    /// state given in `initial` (keyed by (service, backend)) instead of the checker's
    /// default: a live edit must not put a backend known to be down back into rotation
    /// before a probe says so, nor leave the daemon's view and the tracker disagreeing.
    pub fn update_with_initial(&self, targets: Vec<Target>, initial: HashMap<(String, String), bool>) {
        self.send(Command::Update(targets, initial));
    }

    /// The state of every target, in no particular order (empty if the thread is gone).
    pub fn snapshot(&self) -> Vec<TargetStatus> {
        let (tx, rx) = mpsc::channel();
        self.send(Command::Snapshot(tx));
        rx.recv().unwrap_or_default()
    }

    /// CPU time (user + system) used so far by the checker thread, from
    /// `/proc/self/task/<tid>/stat`; `None` if unavailable.
    pub fn cpu_time(&self) -> Option<Duration> {
        let tid = self.tid.load(Ordering::Acquire);
        if tid == 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After "pid (comm) ", field 3 (state) is index 0; utime is field 14, stime 15.
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| Duration::from_secs_f64(ticks as f64 / hz as f64))
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

// ---------------------------------------------------------------------------------------
// Event loop
// ---------------------------------------------------------------------------------------

const WAKE_TOKEN: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum TimerKind {
    /// Probe deadline (processed before a start due at the same instant).
    Deadline,
    /// Next probe start.
    Start,
}

/// Timer heap entry; `Reverse`-ordered by time. `id` is the probe id for deadlines and the
/// slot generation for starts: stale entries are skipped when popped.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: Instant,
    kind: TimerKind,
    slot: usize,
    id: u64,
}

enum Phase {
    Connecting,
    Sending { off: usize },
    Reading,
    UdpWaiting,
}

struct InFlight {
    id: u64,
    fd: OwnedFd,
    started: Instant,
    phase: Phase,
    buf: Vec<u8>,
}

struct Slot {
    target: Target,
    gen: u64,
    interval: Duration,
    timeout: Duration,
    next_start: Instant,
    tracker: HealthTracker,
    probe: Option<InFlight>,
    request: Vec<u8>,
    skipped: u64,
}

struct Loop {
    epfd: OwnedFd,
    wake: Arc<OwnedFd>,
    cmds: Receiver<Command>,
    events: Sender<HealthEvent>,
    opts: CheckerOptions,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    index: HashMap<(String, String), usize>,
    timers: BinaryHeap<std::cmp::Reverse<Timer>>,
    next_probe_id: u64,
    next_gen: u64,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn epoll_add(epfd: RawFd, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: ev is a valid epoll_event.
    cvt(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(|_| ())
}

fn epoll_mod(epfd: RawFd, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: ev is a valid epoll_event.
    cvt(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, fd, &mut ev) }).map(|_| ())
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// Non-blocking socket + connect; returns the socket and whether the connect is pending.
fn connect_nb(kind: libc::c_int, a: SocketAddrV4) -> io::Result<(OwnedFd, bool)> {
    // SAFETY: plain syscall.
    let fd = cvt(unsafe { libc::socket(libc::AF_INET, kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let sa = sockaddr(a);
    // SAFETY: sa is a valid sockaddr_in of the given length.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r == 0 {
        return Ok((fd, false));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok((fd, true))
    } else {
        Err(e)
    }
}

fn so_error(fd: RawFd) -> io::Result<()> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: err/len are valid out-pointers of the right size.
    cvt(unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, (&mut err as *mut libc::c_int).cast(), &mut len)
    })?;
    if err == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(err))
    }
}

/// Makes `close` send a RST: no TIME_WAIT left by TCP probes.
fn set_linger_zero(fd: RawFd) {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: l is a valid linger struct of the given size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// Whether a probe error is a local resource shortage (out of file descriptors, buffers,
/// memory or ephemeral ports) rather than a sign of the backend's health. Such probes are
/// skipped, not counted as failures, so an overloaded prober cannot mark backends down.
pub fn is_local_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EADDRNOTAVAIL)
    )
}

/// One non-blocking `recv(2)` into `buf`: `Ok(Some(n))` bytes read (0 = EOF), `Ok(None)`
/// when nothing is ready yet, `Err` with the reason text otherwise.
fn recv_nonblocking(fd: libc::c_int, buf: &mut [u8]) -> Result<Option<usize>, String> {
    // SAFETY: reads at most buf.len() bytes into a valid, exclusively borrowed buffer.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if would_block(&e) {
            return Ok(None);
        }
        return Err(format!("recv: {e}"));
    }
    Ok(Some(r as usize))
}

fn would_block(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR))
}

fn spread_offset(t: &Target, interval: Duration) -> Duration {
    let mut h = DefaultHasher::new();
    (&t.service, &t.backend).hash(&mut h);
    let frac = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    interval.mul_f64(frac)
}

fn secs(s: f64) -> String {
    format!("{s} s")
}

impl Loop {
    fn token(slot: usize, id: u64) -> u64 {
        ((id & 0xffff_ffff) << 32) | slot as u64
    }

    fn run(&mut self) {
        let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
        loop {
            let timeout_ms = match self.timers.peek() {
                None => -1,
                Some(std::cmp::Reverse(t)) => {
                    let d = t.at.saturating_duration_since(Instant::now());
                    // Round up so the loop does not spin before a timer is due.
                    (d.as_micros().div_ceil(1000)).min(60_000) as i32
                }
            };
            // SAFETY: evs is a valid buffer of evs.len() events.
            let n = unsafe {
                libc::epoll_wait(self.epfd.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, timeout_ms)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                tracing::error!("health: epoll_wait: {e}");
                return;
            }
            let now = Instant::now();
            for ev in &evs[..n as usize] {
                let (token, flags) = (ev.u64, ev.events);
                if token == WAKE_TOKEN {
                    let mut v: u64 = 0;
                    // SAFETY: reads 8 bytes into a valid u64.
                    unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                    if !self.commands(now) {
                        return;
                    }
                } else {
                    self.io(now, (token & 0xffff_ffff) as usize, token >> 32, flags);
                }
            }
            let now = Instant::now();
            while let Some(std::cmp::Reverse(t)) = self.timers.peek() {
                if t.at > now {
                    break;
                }
                let std::cmp::Reverse(t) = self.timers.pop().expect("peeked");
                self.timer(now, t);
            }
        }
    }

    /// Handles pending commands; false on Stop.
    fn commands(&mut self, now: Instant) -> bool {
        while let Ok(c) = self.cmds.try_recv() {
            match c {
                Command::Update(t, initial) => self.update(t, &initial, now),
                Command::Snapshot(reply) => {
                    let _ = reply.send(self.snapshot());
                }
                Command::Stop => return false,
            }
        }
        true
    }

    fn snapshot(&self) -> Vec<TargetStatus> {
        self.slots
            .iter()
            .flatten()
            .map(|s| {
                let t = &s.tracker;
                TargetStatus {
                    service: s.target.service.clone(),
                    backend: s.target.backend.clone(),
                    probe_addr: s.target.probe_addr(),
                    healthy: t.healthy(),
                    consecutive_successes: t.consecutive_successes(),
                    consecutive_failures: t.consecutive_failures(),
                    rtt_ewma_ms: t.rtt_ewma_ms(),
                    rtt_last_ms: t.rtt_last_ms(),
                    last_error: t.last_error().map(str::to_owned),
                    last_change: t.last_change(),
                    probes_sent: t.probes(),
                    probes_failed: t.probes_failed(),
                    probes_skipped: s.skipped,
                }
            })
            .collect()
    }

    fn update(&mut self, targets: Vec<Target>, initial: &HashMap<(String, String), bool>, now: Instant) {
        let mut keep: HashMap<(String, String), usize> = HashMap::with_capacity(targets.len());
        let mut added = Vec::new();
        for t in targets {
            let key = (t.service.clone(), t.backend.clone());
            if keep.contains_key(&key) || added.iter().any(|a: &Target| a.service == t.service && a.backend == t.backend) {
                continue; // duplicate (service, backend): first wins
            }
            match self.index.get(&key) {
                Some(&i) if self.slots[i].as_ref().is_some_and(|s| s.target == t) => {
                    keep.insert(key, i);
                }
                _ => added.push(t),
            }
        }
        // Drop every slot not kept (removed or changed).
        for (key, i) in std::mem::take(&mut self.index) {
            if keep.get(&key) != Some(&i) {
                self.slots[i] = None; // closes any in-flight socket
                self.free.push(i);
            }
        }
        self.index = keep;
        for t in added {
            let healthy = initial.get(&(t.service.clone(), t.backend.clone())).copied().unwrap_or(self.opts.initially_healthy);
            self.add(t, healthy, now);
        }
    }

    fn add(&mut self, t: Target, initially_healthy: bool, now: Instant) {
        let interval = Duration::from_secs_f64(t.check.check_interval_sec.max(MIN_INTERVAL_SEC));
        let timeout = Duration::from_secs_f64(t.check.timeout_sec.max(0.001)).min(interval);
        let gen = self.next_gen;
        self.next_gen += 1;
        let next_start = now + spread_offset(&t, interval);
        let request = match t.check.kind {
            HealthCheckKind::Tcp => Vec::new(),
            HealthCheckKind::Http => {
                let a = t.probe_addr();
                let host = if a.port() == 80 { a.ip().to_string() } else { a.to_string() };
                let path = if t.check.path.is_empty() { "/" } else { &t.check.path };
                format!(
                    "GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: spillway-health\r\nConnection: close\r\n\r\n"
                )
                .into_bytes()
            }
            HealthCheckKind::Udp => t.check.udp_request.clone().into_bytes(),
        };
        let slot = Slot {
            tracker: HealthTracker::new(&t.check, initially_healthy, now),
            target: t,
            gen,
            interval,
            timeout,
            next_start,
            probe: None,
            request,
            skipped: 0,
        };
        let key = (slot.target.service.clone(), slot.target.backend.clone());
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.index.insert(key, i);
        self.timers.push(std::cmp::Reverse(Timer { at: next_start, kind: TimerKind::Start, slot: i, id: gen }));
    }

    fn timer(&mut self, now: Instant, t: Timer) {
        let Some(s) = self.slots.get_mut(t.slot).and_then(Option::as_mut) else { return };
        match t.kind {
            TimerKind::Deadline => {
                if s.probe.as_ref().is_some_and(|p| p.id == t.id) {
                    let reason = format!("timeout after {}", secs(s.timeout.as_secs_f64()));
                    self.finish(now, t.slot, ProbeResult::Failure { reason });
                }
            }
            TimerKind::Start => {
                if s.gen != t.id {
                    return;
                }
                while s.next_start <= now {
                    s.next_start += s.interval;
                }
                let next = s.next_start;
                self.timers.push(std::cmp::Reverse(Timer { at: next, kind: TimerKind::Start, slot: t.slot, id: t.id }));
                if s.probe.is_none() {
                    self.start_probe(now, t.slot);
                }
            }
        }
    }

    fn start_probe(&mut self, now: Instant, i: usize) {
        let id = self.next_probe_id;
        self.next_probe_id += 1;
        let epfd = self.epfd.as_raw_fd();
        let s = self.slots[i].as_mut().expect("live slot");
        let addr = s.target.probe_addr();
        let token = Self::token(i, id);
        let res: io::Result<InFlight> = (|| match s.target.check.kind {
            HealthCheckKind::Tcp | HealthCheckKind::Http => {
                let (fd, _pending) = connect_nb(libc::SOCK_STREAM, addr)?;
                set_linger_zero(fd.as_raw_fd());
                epoll_add(epfd, fd.as_raw_fd(), libc::EPOLLOUT as u32, token)?;
                Ok(InFlight { id, fd, started: now, phase: Phase::Connecting, buf: Vec::new() })
            }
            HealthCheckKind::Udp => {
                let (fd, _) = connect_nb(libc::SOCK_DGRAM, addr)?;
                // SAFETY: sends from a valid buffer.
                let r = unsafe { libc::send(fd.as_raw_fd(), s.request.as_ptr().cast(), s.request.len(), 0) };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
                epoll_add(epfd, fd.as_raw_fd(), libc::EPOLLIN as u32, token)?;
                Ok(InFlight { id, fd, started: now, phase: Phase::UdpWaiting, buf: Vec::new() })
            }
        })();
        match res {
            Ok(p) => {
                let at = now + s.timeout;
                s.probe = Some(p);
                self.timers.push(std::cmp::Reverse(Timer { at, kind: TimerKind::Deadline, slot: i, id }));
            }
            Err(e) if is_local_error(&e) => {
                // Our problem, not the backend's: do not count it against the target.
                s.skipped += 1;
                if s.skipped.is_power_of_two() {
                    tracing::warn!(service = %s.target.service, backend = %s.target.backend,
                        "health: probe skipped ({} so far): {e}", s.skipped);
                }
            }
            Err(e) => self.finish(now, i, ProbeResult::Failure { reason: format!("probe: {e}") }),
        }
    }

    fn io(&mut self, now: Instant, i: usize, id_lo: u64, flags: u32) {
        let epfd = self.epfd.as_raw_fd();
        let Some(s) = self.slots.get_mut(i).and_then(Option::as_mut) else { return };
        let Some(p) = s.probe.as_mut() else { return };
        if p.id & 0xffff_ffff != id_lo {
            return;
        }
        let fd = p.fd.as_raw_fd();
        let rtt = now.saturating_duration_since(p.started);
        let token = Self::token(i, p.id);
        let outcome: Option<ProbeResult> = loop {
            match &mut p.phase {
                Phase::Connecting => {
                    if let Err(e) = so_error(fd) {
                        break Some(ProbeResult::Failure { reason: format!("connect: {e}") });
                    }
                    if flags & (libc::EPOLLOUT as u32) == 0 {
                        break None;
                    }
                    if s.target.check.kind == HealthCheckKind::Tcp {
                        break Some(ProbeResult::Success { rtt });
                    }
                    p.phase = Phase::Sending { off: 0 };
                }
                Phase::Sending { off } => {
                    let rest = &s.request[*off..];
                    // SAFETY: sends from a valid buffer.
                    let r = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
                    if r < 0 {
                        let e = io::Error::last_os_error();
                        if would_block(&e) {
                            break None;
                        }
                        break Some(ProbeResult::Failure { reason: format!("send: {e}") });
                    }
                    *off += r as usize;
                    if *off >= s.request.len() {
                        p.phase = Phase::Reading;
                        if let Err(e) = epoll_mod(epfd, fd, libc::EPOLLIN as u32, token) {
                            break Some(ProbeResult::Failure { reason: format!("epoll: {e}") });
                        }
                        break None; // wait for the answer
                    }
                }
                Phase::Reading => {
                    let mut b = [0u8; 512];
                    let r = match recv_nonblocking(fd, &mut b) {
                        Ok(Some(n)) => n,
                        Ok(None) => break None,
                        Err(reason) => break Some(ProbeResult::Failure { reason }),
                    };
                    let eof = r == 0;
                    p.buf.extend_from_slice(&b[..r]);
                    let line = match p.buf.iter().position(|&c| c == b'\n') {
                        Some(n) => &p.buf[..=n],
                        None if eof && p.buf.is_empty() => {
                            break Some(ProbeResult::Failure { reason: "connection closed without a response".into() })
                        }
                        None if eof => &p.buf[..],
                        None if p.buf.len() >= MAX_STATUS_LINE => {
                            break Some(ProbeResult::Failure { reason: "HTTP status line too long".into() })
                        }
                        None => continue,
                    };
                    let want = s.target.check.expected_status;
                    break Some(match parse_status_line(line) {
                        Ok(code) if code == want => ProbeResult::Success { rtt },
                        Ok(code) => ProbeResult::Failure { reason: format!("HTTP status {code} (expected {want})") },
                        Err(reason) => ProbeResult::Failure { reason },
                    });
                }
                Phase::UdpWaiting => {
                    let mut b = [0u8; 2048];
                    let r = match recv_nonblocking(fd, &mut b) {
                        Ok(Some(n)) => n,
                        Ok(None) => break None,
                        Err(reason) => break Some(ProbeResult::Failure { reason }),
                    };
                    let expect = s.target.check.udp_expect.as_bytes();
                    if b[..r].starts_with(expect) {
                        break Some(ProbeResult::Success { rtt });
                    }
                    let got = String::from_utf8_lossy(&b[..r.min(64)]).into_owned();
                    break Some(ProbeResult::Failure {
                        reason: format!("UDP answer {got:?} does not start with {:?}", s.target.check.udp_expect),
                    });
                }
            }
        };
        if let Some(o) = outcome {
            self.finish(now, i, o);
        }
    }

    /// Ends the in-flight probe of slot `i` (closing its socket) and records `r`.
    fn finish(&mut self, now: Instant, i: usize, r: ProbeResult) {
        let Some(s) = self.slots[i].as_mut() else { return };
        s.probe = None;
        if let Some(tr) = s.tracker.record(now, r) {
            let ev = HealthEvent {
                service: s.target.service.clone(),
                backend: s.target.backend.clone(),
                healthy: tr.healthy,
                rtt_ms: s.tracker.rtt_ewma_ms(),
                reason: tr.reason,
            };
            tracing::info!(service = %ev.service, backend = %ev.backend, healthy = ev.healthy, "health: {}", ev.reason);
            let _ = self.events.send(ev);
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    // ----- sans-IO tracker -----

    fn hc(healthy: u32, unhealthy: u32) -> HealthCheck {
        HealthCheck { healthy_threshold: healthy, unhealthy_threshold: unhealthy, ..HealthCheck::default() }
    }
    fn ok(ms: u64) -> ProbeResult {
        ProbeResult::Success { rtt: Duration::from_millis(ms) }
    }
    fn fail(r: &str) -> ProbeResult {
        ProbeResult::Failure { reason: r.into() }
    }

    #[test]
    fn tracker_defaults_match_spec() {
        let d = HealthCheck::default();
        assert_eq!((d.check_interval_sec, d.timeout_sec, d.healthy_threshold, d.unhealthy_threshold), (5.0, 5.0, 2, 2));
        assert_eq!(d.expected_status, 200);
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
    fn status_line_parsing() {
        assert_eq!(parse_status_line(b"HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(parse_status_line(b"HTTP/1.0 500 Internal Server Error\r\n"), Ok(500));
        assert_eq!(parse_status_line(b"HTTP/1.0 204\n"), Ok(204));
        assert_eq!(parse_status_line(b"HTTP/1.1 301"), Ok(301));
        for bad in [&b"garbage\r\n"[..], b"HTTP/1.1 20 OK", b"HTTP/1.1 2000 OK", b"HTTP/2 200 OK", b"", b"HTTP/1.1 abc OK"] {
            assert!(parse_status_line(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn snapshot_applies_to_health_view() {
        let mut view = crate::control::HealthView::new();
        let key = ("svc".to_string(), "a".to_string());
        view.insert(key.clone(), crate::control::BackendView { healthy: true, latency_ms: Some(9.0), load_cps: 42.0 });
        let st = TargetStatus {
            service: "svc".into(),
            backend: "a".into(),
            probe_addr: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 80),
            healthy: false,
            consecutive_successes: 0,
            consecutive_failures: 2,
            rtt_ewma_ms: None,
            rtt_last_ms: None,
            last_error: Some("x".into()),
            last_change: Instant::now(),
            probes_sent: 2,
            probes_failed: 2,
            probes_skipped: 0,
        };
        let mut st2 = st.clone();
        st2.backend = "b".into();
        st2.healthy = true;
        st2.rtt_ewma_ms = Some(1.5);
        apply_snapshot(&[st, st2], &mut view);
        assert_eq!(view[&key], crate::control::BackendView { healthy: false, latency_ms: Some(9.0), load_cps: 42.0 });
        let b = &view[&("svc".to_string(), "b".to_string())];
        assert!(b.healthy && b.latency_ms == Some(1.5) && b.load_cps == 0.0);
    }

    // ----- driver against real sockets on 127.0.0.1 -----

    /// Accepting TCP server on 127.0.0.1; `handler` gets each connection. `stop` closes the
    /// listener before returning.
    struct Server {
        addr: SocketAddrV4,
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }
    impl Server {
        fn start(handler: impl Fn(TcpStream) + Send + 'static) -> Server {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            let addr = match l.local_addr().unwrap() {
                std::net::SocketAddr::V4(a) => a,
                _ => unreachable!(),
            };
            let stop = Arc::new(AtomicBool::new(false));
            let st = stop.clone();
            let thread = std::thread::spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((c, _)) => {
                            c.set_nonblocking(false).unwrap();
                            handler(c)
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            });
            Server { addr, stop, thread: Some(thread) }
        }
        fn stop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                t.join().unwrap();
            }
        }
    }
    impl Drop for Server {
        fn drop(&mut self) {
            self.stop();
        }
    }

    fn tcp_server() -> Server {
        Server::start(drop)
    }

    fn http_server(response: &'static [u8], seen: Option<Arc<Mutex<String>>>) -> Server {
        Server::start(move |mut c| {
            c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut req = Vec::new();
            let mut b = [0u8; 512];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            if let Some(s) = &seen {
                *s.lock().unwrap() = String::from_utf8_lossy(&req).into_owned();
            }
            let _ = c.write_all(response);
        })
    }

    fn closed_port() -> SocketAddrV4 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(a) = l.local_addr().unwrap() else { unreachable!() };
        a
    }

    fn check(kind: HealthCheckKind, interval: f64, timeout: f64, healthy: u32, unhealthy: u32) -> HealthCheck {
        HealthCheck {
            kind,
            check_interval_sec: interval,
            timeout_sec: timeout,
            healthy_threshold: healthy,
            unhealthy_threshold: unhealthy,
            ..HealthCheck::default()
        }
    }

    fn target(backend: &str, addr: SocketAddrV4, check: HealthCheck) -> Target {
        Target { service: "svc".into(), backend: backend.into(), addr, check }
    }

    fn start(targets: Vec<Target>, initially_healthy: bool) -> (HealthChecker, Receiver<HealthEvent>) {
        let (tx, rx) = mpsc::channel();
        (HealthChecker::start_with(targets, tx, CheckerOptions { initially_healthy }).unwrap(), rx)
    }

    /// Next event for `backend` within `within`.
    fn event_for(rx: &Receiver<HealthEvent>, backend: &str, within: Duration) -> HealthEvent {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(e) if e.backend == backend => return e,
                Ok(_) => continue,
                Err(e) => panic!("no event for {backend} within {within:?}: {e}"),
            }
        }
    }

    fn status(c: &HealthChecker, backend: &str) -> TargetStatus {
        c.snapshot().into_iter().find(|s| s.backend == backend).expect("target present")
    }

    fn wait_until(c: &HealthChecker, backend: &str, within: Duration, pred: impl Fn(&TargetStatus) -> bool) -> TargetStatus {
        let end = Instant::now() + within;
        loop {
            let s = status(c, backend);
            if pred(&s) {
                return s;
            }
            assert!(Instant::now() < end, "condition not met within {within:?}: {s:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    const GENEROUS: Duration = Duration::from_secs(4);

    #[test]
    fn health_tcp_listener_becomes_healthy_with_rtt() {
        let srv = tcp_server();
        let (c, rx) = start(vec![target("b", srv.addr, check(HealthCheckKind::Tcp, 0.05, 0.05, 2, 2))], false);
        let ev = event_for(&rx, "b", GENEROUS);
        assert!(ev.healthy);
        assert_eq!(ev.reason, "2 consecutive successes");
        assert!(ev.rtt_ms.is_some_and(|r| (0.0..1000.0).contains(&r)), "{ev:?}");
        let s = status(&c, "b");
        assert!(s.healthy && s.rtt_last_ms.is_some() && s.rtt_ewma_ms.is_some());
        assert_eq!(s.probes_failed, 0);
        assert!(c.cpu_time().is_some());
        c.stop();
    }

    #[test]
    fn health_tcp_closed_port_unhealthy_after_exactly_threshold() {
        let addr = closed_port();
        let (c, rx) = start(vec![target("dead", addr, check(HealthCheckKind::Tcp, 0.05, 0.05, 2, 3))], true);
        let ev = event_for(&rx, "dead", GENEROUS);
        assert!(!ev.healthy);
        assert!(ev.reason.starts_with("3 consecutive failures: connect:"), "{}", ev.reason);
        assert!(ev.reason.contains("refused"), "{}", ev.reason);
        let s = status(&c, "dead");
        assert!(!s.healthy && s.consecutive_failures >= 3 && s.probes_failed == s.probes_sent);
        // Only one event while it stays dead.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    }

    #[test]
    fn health_probe_port_overrides_service_port() {
        let srv = tcp_server();
        let mut chk = check(HealthCheckKind::Tcp, 0.05, 0.05, 1, 1);
        chk.port = Some(srv.addr.port());
        let svc_addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, closed_port().port());
        let (c, rx) = start(vec![target("p", svc_addr, chk)], false);
        assert!(event_for(&rx, "p", GENEROUS).healthy);
        assert_eq!(status(&c, "p").probe_addr, srv.addr);
    }

    #[test]
    fn health_http_200_500_garbage() {
        let seen = Arc::new(Mutex::new(String::new()));
        let ok_srv = http_server(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", Some(seen.clone()));
        let err_srv = http_server(b"HTTP/1.1 500 Internal Server Error\r\n\r\n", None);
        let junk_srv = http_server(b"SSH-2.0-OpenSSH_9.6\r\n", None);
        let empty_srv = http_server(b"", None);
        let mut http = check(HealthCheckKind::Http, 0.05, 0.05, 1, 1);
        http.path = "/healthz".into();
        let mut want204 = http.clone();
        want204.expected_status = 204;
        let (c, rx) = start(
            vec![
                target("ok", ok_srv.addr, http.clone()),
                target("err", err_srv.addr, http.clone()),
                target("junk", junk_srv.addr, http.clone()),
                target("empty", empty_srv.addr, http.clone()),
                target("want204", ok_srv.addr, want204),
            ],
            true,
        );
        for b in ["err", "junk", "empty", "want204"] {
            let s = wait_until(&c, b, GENEROUS, |s| !s.healthy);
            let err = s.last_error.unwrap();
            match b {
                "err" => assert_eq!(err, "HTTP status 500 (expected 200)"),
                "junk" => assert!(err.starts_with("bad HTTP status line"), "{err}"),
                "empty" => assert_eq!(err, "connection closed without a response"),
                _ => assert_eq!(err, "HTTP status 200 (expected 204)"),
            }
        }
        let s = wait_until(&c, "ok", GENEROUS, |s| s.probes_sent >= 3);
        assert!(s.healthy && s.probes_failed == 0 && s.rtt_ewma_ms.is_some(), "{s:?}");
        let req = seen.lock().unwrap().clone();
        assert!(req.starts_with("GET /healthz HTTP/1.0\r\n"), "{req}");
        assert!(req.contains(&format!("\r\nHost: {}\r\n", ok_srv.addr)), "{req}");
        // Events: exactly the four failing targets went down.
        let mut down: Vec<String> = rx.try_iter().filter(|e| !e.healthy).map(|e| e.backend).collect();
        down.sort();
        assert_eq!(down, ["empty", "err", "junk", "want204"]);
    }

    #[test]
    fn health_http_timeout_respected() {
        // Accepts and never answers.
        let held = Arc::new(Mutex::new(Vec::new()));
        let h2 = held.clone();
        let srv = Server::start(move |c| h2.lock().unwrap().push(c));
        let t0 = Instant::now();
        let (c, rx) = start(vec![target("slow", srv.addr, check(HealthCheckKind::Http, 0.3, 0.15, 1, 1))], true);
        let ev = event_for(&rx, "slow", GENEROUS);
        let el = t0.elapsed();
        assert!(!ev.healthy);
        assert_eq!(ev.reason, "1 consecutive failures: timeout after 0.15 s");
        assert!(el >= Duration::from_millis(150), "failed before the timeout: {el:?}");
        // First probe within one interval, then the timeout; generous slack for load.
        assert!(el < Duration::from_millis(450 + 1000), "{el:?}");
        let s = status(&c, "slow");
        assert_eq!(s.last_error.as_deref(), Some("timeout after 0.15 s"));
    }

    #[test]
    fn health_udp_echo_silent_and_mismatch() {
        let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(echo_addr) = echo.local_addr().unwrap() else { unreachable!() };
        std::thread::spawn(move || {
            let mut b = [0u8; 1500];
            while let Ok((n, from)) = echo.recv_from(&mut b) {
                let _ = echo.send_to(&b[..n], from);
            }
        });
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap(); // never reads
        let std::net::SocketAddr::V4(silent_addr) = silent.local_addr().unwrap() else { unreachable!() };
        let mut udp = check(HealthCheckKind::Udp, 0.1, 0.05, 2, 2);
        udp.udp_request = "PING spillway".into();
        udp.udp_expect = "PING".into();
        let mut any = udp.clone();
        any.udp_expect = String::new();
        let mut wrong = udp.clone();
        wrong.udp_expect = "PONG".into();
        let (c, _rx) = start(
            vec![
                target("echo", echo_addr, udp.clone()),
                target("echo-any", echo_addr, any),
                target("echo-wrong", echo_addr, wrong),
                target("silent", silent_addr, udp.clone()),
                target("closed", closed_port(), udp),
            ],
            false,
        );
        for b in ["echo", "echo-any"] {
            let s = wait_until(&c, b, GENEROUS, |s| s.healthy);
            assert!(s.rtt_ewma_ms.is_some());
        }
        let s = wait_until(&c, "silent", GENEROUS, |s| s.probes_failed >= 2);
        assert!(!s.healthy);
        assert_eq!(s.last_error.as_deref(), Some("timeout after 0.05 s"));
        let s = wait_until(&c, "echo-wrong", GENEROUS, |s| s.probes_failed >= 2);
        assert!(s.last_error.unwrap().contains("does not start with \"PONG\""));
        let s = wait_until(&c, "closed", GENEROUS, |s| s.probes_failed >= 2);
        assert!(s.last_error.unwrap().contains("refused"), "ICMP port unreachable seen");
        drop(silent);
    }

    #[test]
    fn health_update_keeps_unchanged_and_resets_changed() {
        let srv = tcp_server();
        let dead = closed_port();
        let fast = check(HealthCheckKind::Tcp, 0.05, 0.05, 2, 2);
        let a = target("a", srv.addr, fast.clone());
        let d = target("d", dead, fast.clone());
        let b = target("b", srv.addr, fast.clone());
        let gone = target("gone", srv.addr, fast.clone());
        let (c, rx) = start(vec![a.clone(), d.clone(), b.clone(), gone], true);
        wait_until(&c, "a", GENEROUS, |s| s.probes_sent >= 3);
        wait_until(&c, "b", GENEROUS, |s| s.probes_sent >= 3);
        assert!(!event_for(&rx, "d", GENEROUS).healthy);
        // Changed: b's interval (slow, so no probe lands before the snapshot); new: n.
        let mut b2 = b.clone();
        b2.check.check_interval_sec = 30.0;
        b2.check.timeout_sec = 1.0;
        let n = target("n", srv.addr, HealthCheck { check_interval_sec: 30.0, ..fast.clone() });
        // Duplicate of a (different address): ignored, the first wins.
        let a_dup = target("a", dead, fast.clone());
        c.update(vec![a.clone(), d.clone(), b2, n, a_dup]);
        let snap = c.snapshot();
        let get = |name: &str| snap.iter().find(|s| s.backend == name).cloned();
        assert!(get("gone").is_none());
        let sa = get("a").unwrap();
        assert!(sa.probes_sent >= 3 && sa.healthy && sa.rtt_ewma_ms.is_some(), "a kept: {sa:?}");
        assert_eq!(sa.probe_addr, srv.addr);
        let sd = get("d").unwrap();
        assert!(!sd.healthy && sd.consecutive_failures >= 2, "d kept its unhealthy state: {sd:?}");
        let sb = get("b").unwrap();
        // Reset: counters start again (at most one probe can land at a 30 s interval).
        assert!(sb.probes_sent <= 1 && sb.probes_failed == 0, "b reset: {sb:?}");
        assert!(sb.healthy, "b back to the initial state");
        let sn = get("n").unwrap();
        assert!(sn.probes_sent <= 1, "{sn:?}");
        assert_eq!(snap.len(), 4);
        // A kept target keeps being probed.
        let before = sa.probes_sent;
        wait_until(&c, "a", GENEROUS, |s| s.probes_sent > before);
        // Changing d's address to the live server resets it to healthy (initial state).
        let mut d2 = d.clone();
        d2.addr = srv.addr;
        c.update(vec![a, d2]);
        let sd = status(&c, "d");
        assert!(sd.healthy && sd.consecutive_failures == 0 && sd.probes_failed == 0, "{sd:?}");
        assert_eq!(c.snapshot().len(), 2);
    }

    #[test]
    fn health_time_to_detect_dead_backend() {
        let mut srv = tcp_server();
        let (interval, threshold) = (0.2, 2u32);
        let (c, rx) = start(vec![target("victim", srv.addr, check(HealthCheckKind::Tcp, interval, interval, 2, threshold))], true);
        wait_until(&c, "victim", GENEROUS, |s| s.probes_sent >= 2 && s.probes_failed == 0);
        srv.stop(); // listener closed: connects are refused from now on
        let t0 = Instant::now();
        let ev = event_for(&rx, "victim", GENEROUS);
        let el = t0.elapsed();
        assert!(!ev.healthy);
        // Spec bound: interval × unhealthy_threshold + one interval (0.6 s), plus 0.25 s of
        // scheduling slack for a loaded CI machine.
        let bound = Duration::from_secs_f64(interval * (threshold as f64 + 1.0) + 0.25);
        assert!(el <= bound, "detected after {el:?} > {bound:?}");
        // And not before two probes could have failed (> one interval minus jitter).
        assert!(el >= Duration::from_millis(150), "{el:?}");
    }

    #[test]
    fn health_stop_is_prompt_and_snapshot_after_targets_dropped() {
        let (c, _rx) = start(vec![target("x", closed_port(), check(HealthCheckKind::Tcp, 300.0, 5.0, 2, 2))], true);
        assert_eq!(c.snapshot().len(), 1);
        c.update(Vec::new());
        assert!(c.snapshot().is_empty());
        let t0 = Instant::now();
        c.stop();
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}
