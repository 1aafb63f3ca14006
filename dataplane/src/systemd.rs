//! The `fleet` thread: systemd notifications and VIP announcement.
//!
//! One control-side thread, every [`period`] (100 ms, shorter under a short watchdog):
//! 1. observes the workers' poll counters and snapshot generations ([`announce::observe`]);
//! 2. evaluates every VIP's readiness and, with `[announce]`, reconciles the announcement
//!    interface ([`announce::Announcer`]);
//! 3. tells systemd (`sd_notify(3)` datagrams sent by [`notify_to`]: `NOTIFY_SOCKET` may be
//!    a path or an abstract `@name`; a no-op without it): `READY=1` once the ports are up
//!    (the thread starts after them) and every worker polls with the first snapshot in use;
//!    `WATCHDOG=1` at a quarter of `WATCHDOG_USEC`, and only while every worker's poll
//!    counter advances *and* the control loop progresses ([`crate::readiness::Heartbeat`]), so a stuck worker
//!    or a wedged control loop makes systemd restart the daemon (unit:
//!    dist/spillway.service); `STATUS=` with the announced VIPs; `STOPPING=1` on the way out.
//!
//! On return the announcer is dropped: its interface goes, and BIRD withdraws the VIPs
//! before the workers stop.

use crate::announce::{self, Announcer};
use crate::daemon::Daemon;
use spillway_shared::config::fleet::AnnounceConfig;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Period of the fleet thread without a watchdog, and its longest period with one.
pub const PERIOD: Duration = Duration::from_millis(100);

/// Shortest period of the fleet thread, whatever the watchdog interval.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The fleet thread's period for a watchdog interval (`WATCHDOG_USEC`): [`PERIOD`], or a
/// quarter of the interval when that is shorter (at least [`MIN_PERIOD`]). sd_watchdog_enabled(3)
/// asks for a keep-alive at least every half interval; pinging at a quarter leaves half of
/// the margin to scheduling delays, also for `WatchdogSec=` under 200 ms.
pub fn period(watchdog: Option<Duration>) -> Duration {
    watchdog.map_or(PERIOD, |w| (w / 4).clamp(MIN_PERIOD, PERIOD))
}

/// Shortest time without a control-loop iteration after which the watchdog is no longer
/// fed (see [`control_stall_limit`]).
pub const CONTROL_STALL_MIN: Duration = Duration::from_secs(1);

/// How long the control loop may go without an iteration before the watchdog stops being
/// fed: half the watchdog interval, at least [`CONTROL_STALL_MIN`] (one iteration waits up
/// to 50 ms for health events and may recompile snapshots or wait up to
/// [`crate::health::driver::REPLY_TIMEOUT`] for the health checker). systemd then restarts the
/// daemon once the interval passes without a ping: after a stall of about this limit plus
/// `WatchdogSec`.
pub fn control_stall_limit(watchdog: Duration) -> Duration {
    (watchdog / 2).max(CONTROL_STALL_MIN)
}

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
    /// The control loop's last heartbeat count and when it was first seen.
    control: Option<(u64, Instant)>,
    control_stalled_logged: bool,
}

impl Notifier {
    /// `watchdog`: the `WATCHDOG_USEC` interval, if systemd asked for one.
    pub fn new(watchdog: Option<Duration>) -> Notifier {
        Notifier { watchdog, ..Default::default() }
    }

    /// Records the control loop's heartbeat count ([`crate::readiness::Heartbeat::beats`]) seen at `now`. The
    /// watchdog is fed only while it moved within [`control_stall_limit`]; without a call,
    /// the control loop is not watched.
    pub fn control_beat(&mut self, now: Instant, beats: u64) {
        if self.control.is_none_or(|(b, _)| b != beats) {
            self.control = Some((beats, now));
        }
    }

    /// Whether the control loop progressed recently enough to feed the watchdog `w`.
    fn control_alive(&self, now: Instant, w: Duration) -> bool {
        self.control.is_none_or(|(_, since)| now.saturating_duration_since(since) <= control_stall_limit(w))
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
            let control = self.control_alive(now, w);
            if healthy {
                self.stalled_logged = false;
            } else if !self.stalled_logged {
                self.stalled_logged = true;
                tracing::error!("a worker stopped polling: not feeding the systemd watchdog");
            }
            if control {
                self.control_stalled_logged = false;
            } else if !self.control_stalled_logged {
                self.control_stalled_logged = true;
                tracing::error!(limit_ms = control_stall_limit(w).as_millis() as u64, "the control loop stopped progressing: not feeding the systemd watchdog");
            }
            if healthy && control && self.last_watchdog.is_none_or(|t| now.saturating_duration_since(t) >= w / 4) {
                self.last_watchdog = Some(now);
                out.push("WATCHDOG=1".to_string());
            }
        }
        if status != self.last_status {
            self.last_status = status.to_string();
            out.push(format!("STATUS={status}"));
        }
        out
    }

    /// The messages of the last [`Self::step`] (`msgs`) were not delivered (the send never
    /// blocks, so a full `NOTIFY_SOCKET` queue loses them): `READY=1`, the status and the
    /// keep-alive are due again at the next step, so a lost `READY=1` is sent again, never
    /// lost for good.
    pub fn unsent(&mut self, msgs: &[String]) {
        for m in msgs {
            match m.as_str() {
                "READY=1" => self.ready_sent = false,
                "WATCHDOG=1" => self.last_watchdog = None,
                m if m.starts_with("STATUS=") => self.last_status.clear(),
                _ => {}
            }
        }
    }
}

/// Sends one sd_notify(3) datagram holding `msg` (newline-separated `KEY=VALUE` lines) to
/// the socket named like `NOTIFY_SOCKET`: an absolute path (`/run/systemd/notify`) or, when
/// it starts with `@`, a name in Linux's abstract socket namespace (unix(7); the `@` stands
/// for the leading NUL byte). Both forms are the ones sd_notify(3) accepts for AF_UNIX.
///
/// Errors: `InvalidInput` for any other form (a relative path, `vsock:`, empty), and the
/// socket's own errors (`ENOENT`/`ECONNREFUSED` when nobody listens, `WouldBlock` when the
/// receiver's queue is full: the send never blocks, `WriteZero` for a partial send).
pub fn notify_to(socket: &OsStr, msg: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let name = socket.as_bytes();
    let addr = match name.first() {
        Some(b'@') => SocketAddr::from_abstract_name(&name[1..])?,
        Some(b'/') => SocketAddr::from_pathname(std::path::Path::new(socket))?,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("NOTIFY_SOCKET={}: neither an absolute path nor an abstract socket name (@name)", socket.to_string_lossy()),
            ))
        }
    };
    // Never blocks: a receiver that does not read (its queue full) costs this message
    // (`WouldBlock`), not the fleet thread's readiness evaluation and watchdog loop.
    let sock = UnixDatagram::unbound()?;
    sock.set_nonblocking(true)?;
    let sent = sock.send_to_addr(msg.as_bytes(), &addr)?;
    if sent != msg.len() {
        return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, format!("sent {sent} of {} bytes", msg.len())));
    }
    Ok(())
}

/// Set once a notification failed, so that a missing socket is logged once, not per period.
static SEND_FAILED: AtomicBool = AtomicBool::new(false);

/// Sends `msgs` as one datagram to `NOTIFY_SOCKET` (none set: nothing to do); whether
/// they were delivered (or there was nothing to send). A failure is logged once until a
/// send works again.
fn send(msgs: &[String]) -> bool {
    if msgs.is_empty() {
        return true;
    }
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else { return true };
    let mut text = msgs.join("\n");
    text.push('\n');
    match notify_to(&socket, &text) {
        Ok(()) => {
            if SEND_FAILED.swap(false, Ordering::Relaxed) {
                tracing::info!("sd_notify works again");
            }
            true
        }
        Err(e) => {
            if !SEND_FAILED.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, socket = %socket.to_string_lossy(), "sd_notify failed (logged once until it works again; READY and STATUS are sent again)");
            } else {
                tracing::debug!(error = %e, "sd_notify failed");
            }
            false
        }
    }
}

/// Runs the fleet thread until `stop` is set. `announcer` is the started announcement
/// interface (`None` without `[announce]`).
pub fn run_fleet(daemon: &Daemon, announce_cfg: Option<&AnnounceConfig>, mut announcer: Option<Announcer>, stop: &AtomicBool) {
    let stall = announce_cfg.map_or(DEFAULT_STALL, |a| Duration::from_secs_f64(a.worker_stall_sec));
    let watchdog = sd_notify::watchdog_enabled();
    let mut notifier = Notifier::new(watchdog);
    let period = period(watchdog);
    if let Some(w) = watchdog {
        tracing::info!(watchdog_ms = w.as_millis() as u64, period_ms = period.as_secs_f64() * 1e3, "systemd watchdog enabled");
    }
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        notifier.control_beat(now, daemon.control_heartbeat.beats());
        let obs = announce::observe(daemon, stall, now);
        let announced = announcer.as_ref().map(|a| a.announced().clone()).unwrap_or_default();
        let (mut rows, generation) = announce::evaluate_live(daemon, &obs, &announced);
        if let Some(a) = announcer.as_mut() {
            a.reconcile(&rows);
            if a.announced() != &announced {
                // what is announced now (metrics, `vip show`, drain waiting)
                // stored under the generation it reconciled (review: a newer one published
                // meanwhile has not been acted on yet)
                rows = announce::evaluate_live(daemon, &obs, a.announced()).0;
            }
        }
        // stored once the announcer acted on it: a reader waiting for a generation
        // (`vip show` after an edit) sees its VIPs announced, not the moment before
        daemon.fleet.store(rows.clone(), announcer.is_some(), generation);
        let ready = rows.iter().filter(|r| r.ready).count();
        let status = match &announcer {
            Some(a) => format!("{} of {} VIPs ready, {} announced", ready, rows.len(), a.announced().len()),
            None => format!("{} of {} VIPs ready (no [announce])", ready, rows.len()),
        };
        let msgs = notifier.step(now, obs.stalled_workers.is_empty(), obs.snapshot_in_use, &status);
        if !send(&msgs) {
            notifier.unsent(&msgs);
        }
        std::thread::sleep(period);
    }
    // a full queue gets a few tries, 50 ms apart
    for _ in 0..5 {
        if send(&["STOPPING=1".to_string()]) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(a) = announcer.take() {
        let n = a.announced().len();
        drop(a);
        tracing::info!(withdrawn = n, "announcement interface removed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::Heartbeat;

    #[test]
    fn ready_once_when_workers_poll_with_a_snapshot() {
        let mut n = Notifier::new(None);
        let t = Instant::now();
        assert_eq!(n.step(t, true, false, "s"), ["STATUS=s"], "no snapshot in use yet");
        assert!(n.step(t, false, true, "s").is_empty(), "stalled worker");
        assert_eq!(n.step(t, true, true, "s"), ["READY=1"]);
        assert!(n.step(t, true, true, "s").is_empty(), "READY only once");
    }

    /// A send that failed (the non-blocking send found the queue full) is not lost:
    /// `READY=1`, the status and the keep-alive are due again at the next step.
    #[test]
    fn undelivered_ready_status_and_keepalive_are_sent_again() {
        let mut n = Notifier::new(Some(Duration::from_secs(4)));
        let t = Instant::now();
        let first = n.step(t, true, true, "s");
        assert_eq!(first, ["READY=1", "WATCHDOG=1", "STATUS=s"]);
        n.unsent(&first);
        assert_eq!(n.step(t + Duration::from_millis(100), true, true, "s"), ["READY=1", "WATCHDOG=1", "STATUS=s"], "all due again");
        assert!(n.step(t + Duration::from_millis(200), true, true, "s").is_empty(), "delivered: nothing more");
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

    /// sd_watchdog_enabled(3): a keep-alive at least every half interval. The period adapts
    /// to intervals under 400 ms (100 ms would miss the rule under 200 ms).
    #[test]
    fn the_period_keeps_pings_within_half_the_watchdog_interval() {
        assert_eq!(period(None), PERIOD);
        assert_eq!(period(Some(Duration::from_secs(5))), PERIOD);
        assert_eq!(period(Some(Duration::from_millis(150))), Duration::from_micros(37_500));
        assert_eq!(period(Some(Duration::from_micros(100))), MIN_PERIOD);
        for ms in [20u64, 100, 150, 199, 200, 399, 400, 1000, 5000] {
            let w = Duration::from_millis(ms);
            // one step of the thread takes a period plus its work; a quarter is left for that
            assert!(period(Some(w)) <= w / 4, "{ms} ms: period {:?}", period(Some(w)));
            // and the Notifier pings at every step of that period
            let mut n = Notifier::new(Some(w));
            let t0 = Instant::now();
            let mut pings = Vec::new();
            for i in 0..40u32 {
                let t = t0 + period(Some(w)) * i;
                if n.step(t, true, true, "").iter().any(|m| m == "WATCHDOG=1") {
                    pings.push(t);
                }
            }
            assert!(pings.windows(2).all(|p| p[1] - p[0] <= w / 2), "{ms} ms: gaps over half the interval");
        }
    }

    /// A wedged control loop (its heartbeat does not move) stops the watchdog pings even
    /// though the workers still poll; they resume when the loop moves again.
    #[test]
    fn watchdog_only_while_the_control_loop_progresses() {
        let w = Duration::from_secs(4);
        let limit = control_stall_limit(w);
        assert_eq!(limit, Duration::from_secs(2));
        assert_eq!(control_stall_limit(Duration::from_millis(150)), CONTROL_STALL_MIN);
        let mut n = Notifier::new(Some(w));
        let t0 = Instant::now();
        n.control_beat(t0, 1);
        assert_eq!(n.step(t0, true, true, ""), ["READY=1", "WATCHDOG=1"]);
        // the heartbeat stays at 1 from here on
        n.control_beat(t0 + Duration::from_secs(1), 1);
        assert_eq!(n.step(t0 + Duration::from_secs(1), true, true, ""), ["WATCHDOG=1"], "within the limit");
        for s in [3u64, 4, 5, 6, 8] {
            let t = t0 + Duration::from_secs(s);
            n.control_beat(t, 1);
            assert!(n.step(t, true, true, "").is_empty(), "control loop stalled: no watchdog at {s} s");
        }
        let t = t0 + Duration::from_secs(9);
        n.control_beat(t, 2);
        assert_eq!(n.step(t, true, true, ""), ["WATCHDOG=1"], "the control loop moves again");
        let hb = Heartbeat::default();
        hb.beat();
        hb.beat();
        assert_eq!(hb.beats(), 2);
    }

    /// NOTIFY_SOCKET may name an abstract socket (`@name`, sd_notify(3)) or a path.
    #[test]
    fn notify_reaches_abstract_and_path_sockets() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let name = format!("spw-notify-test-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        notify_to(OsStr::new(&format!("@{name}")), "READY=1\nSTATUS=x\n").unwrap();
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=x\n");

        let path = std::env::temp_dir().join(format!("spw-notify-test-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        notify_to(path.as_os_str(), "WATCHDOG=1\n").unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WATCHDOG=1\n");
        let _ = std::fs::remove_file(&path);

        for bad in ["", "relative/notify", "vsock:2:1234"] {
            let e = notify_to(OsStr::new(bad), "READY=1\n").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {e}");
        }
        let e = notify_to(OsStr::new("@spw-nobody-listens-here"), "READY=1\n").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
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
