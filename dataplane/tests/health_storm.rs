//! A health storm at scale, on the real `spillway` binary (DPDK `net_null` port): 400
//! health-checked endpoints (20 services × 2 backends × 10 endpoints, TCP checks against
//! listeners of this test on 198.18.0.0/16, local in a network namespace of the test's
//! own) among 2,000 endpoints, going down at once.
//!
//! - all 400 are marked down within 1 s, and every worker then uses a snapshot in which
//!   they are down (no new connection can go to them after that);
//! - the systemd watchdog (emulated: a `NOTIFY_SOCKET` path and a 400 ms `WatchdogSec`, so
//!   keep-alives every 100 ms while the control loop iterates, none once it has been stuck
//!   for 1 s) never goes more than 1 s without a keep-alive;
//! - a daemon started during the outage does not make its VIPs ready while any of the 400
//!   counts as healthy.
//!
//! Needs root (DPDK, `ip netns`). Timed by design: the figures are the acceptance bounds.

mod ctl_harness;

use ctl_harness::{example, raw_request, SERIAL};
use spillway_shared::proto::{Request, Response, StatusReport, VipRow};
use std::fmt::Write as _;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHECKED: u32 = 20; // services of 2 x 10 health-checked endpoints: 400
const OTHER: u32 = 80; // services of 2 x 10 endpoints without checks: 1,600
const DEAD: usize = (CHECKED * 20) as usize;

fn addr(s: u32, g: u32, e: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(198, 18, s as u8, (g * 10 + e + 1) as u8)
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A network namespace of the test's own, where 198.18.0.0/16 is local (a `local` route
/// on `lo`: every address of it can be bound); deleted when dropped.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let n = Netns(format!("spw-storm-{}", std::process::id()));
        let _ = Command::new("ip").args(["netns", "del", &n.0]).output();
        ip(&["netns", "add", &n.0]);
        ip(&["-n", &n.0, "link", "set", "lo", "up"]);
        ip(&["-n", &n.0, "route", "add", "local", "198.18.0.0/16", "dev", "lo"]);
        n
    }

    /// Listeners for every checked endpoint, all on one port, bound in the namespace (by
    /// a thread that enters it: a socket stays in the namespace it was made in).
    fn listeners(&self) -> (u16, Vec<TcpListener>) {
        let path = format!("/var/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            // SAFETY: setns(2) on this thread with a namespace file descriptor it holds.
            assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns: {}", std::io::Error::last_os_error());
            listeners()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Listeners for every checked endpoint, all on one port.
fn listeners() -> (u16, Vec<TcpListener>) {
    let first = TcpListener::bind((addr(0, 0, 0), 0)).unwrap();
    let port = first.local_addr().unwrap().port();
    let mut v = vec![first];
    for s in 0..CHECKED {
        for g in 0..2 {
            for e in 0..10 {
                if (s, g, e) != (0, 0, 0) {
                    v.push(TcpListener::bind((addr(s, g, e), port)).unwrap_or_else(|err| panic!("bind {}:{port}: {err}", addr(s, g, e))));
                }
            }
        }
    }
    (port, v)
}

fn config(port: u16, prefix: &str) -> String {
    let base = example();
    let mut s = base[..base.find("[[services]]").unwrap()].replace("workers = 2", "workers = 1").replace("\"--log-level=warning\"]", &format!("\"--log-level=warning\", \"--file-prefix={prefix}\"]"));
    for i in 0..CHECKED + OTHER {
        let vip = std::net::Ipv4Addr::from(0x0a64_0000u32 + i + 1);
        let _ = write!(s, "[[services]]\nname = \"svc{i}\"\nvip = \"{vip}\"\nport = {port}\nmaglev_table_size = 1021\n");
        if i < CHECKED {
            s += "[services.health_check]\ntype = \"tcp\"\ncheck_interval_sec = 0.2\ntimeout_sec = 0.2\nhealthy_threshold = 1\nunhealthy_threshold = 1\n";
        }
        for g in 0..2u32 {
            let _ = write!(s, "[[services.backends]]\nname = \"g{g}\"\n");
            for e in 0..10u32 {
                let n = (i * 2 + g) * 10 + e;
                let a = if i < CHECKED { addr(i, g, e) } else { std::net::Ipv4Addr::from(0xac10_0000u32 + n + 1) };
                let _ = write!(s, "[[services.backends.endpoints]]\nname = \"e{e}\"\naddress = \"{a}\"\nmac = \"02:01:00:{:02x}:{:02x}:{:02x}\"\n", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
            }
        }
    }
    s
}

/// The daemon as systemd runs it: a notify socket and a 400 ms watchdog.
struct Run {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    /// (whether READY=1 came, the longest gap between WATCHDOG=1 after it)
    watch: Option<std::thread::JoinHandle<(bool, Duration)>>,
}

impl Run {
    fn start(ns: &Netns, name: &str, cfg: &str) -> Run {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("spw-storm-{}-{name}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("spillway.toml"), cfg).unwrap();
        let notify_path = dir.join("notify.sock");
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        notify.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let socket = dir.join("ctl.sock");
        let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_spillway")])
            .arg("--config")
            .arg(dir.join("spillway.toml"))
            .arg("--socket")
            .arg(&socket)
            .args(["--duration", "300"])
            .env("RUST_LOG", "info")
            .env("NOTIFY_SOCKET", &notify_path)
            .env("WATCHDOG_USEC", "400000")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn spillway");
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let watch = std::thread::spawn(move || {
            let (mut ready, mut last, mut gap) = (false, None::<Instant>, Duration::ZERO);
            let mut buf = [0u8; 4096];
            while !st.load(Ordering::SeqCst) {
                let Ok(n) = notify.recv(&mut buf) else { continue };
                let now = Instant::now();
                for l in String::from_utf8_lossy(&buf[..n]).lines() {
                    ready |= l == "READY=1";
                    if l == "WATCHDOG=1" && ready {
                        if let Some(t) = last {
                            gap = gap.max(now - t);
                        }
                        last = Some(now);
                    }
                }
            }
            (ready, gap)
        });
        Run { child, dir, socket, stop, watch: Some(watch) }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn status(&self) -> Option<StatusReport> {
        match raw_request(&self.socket, &Request::Status) {
            Ok(Response::Status(s)) => Some(s),
            _ => None,
        }
    }

    fn vips(&self) -> Vec<VipRow> {
        match raw_request(&self.socket, &Request::VipShow) {
            Ok(Response::Vips(v)) => v,
            _ => Vec::new(),
        }
    }

    /// Stops the daemon; returns whether READY=1 came and the longest keep-alive gap.
    fn finish(mut self) -> (bool, Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stop.store(true, Ordering::SeqCst);
        let r = self.watch.take().unwrap().join().unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
        r
    }
}

/// (checked endpoints healthy, checked endpoints unhealthy) in `status`.
fn checked(s: &StatusReport) -> (usize, usize) {
    let eps = s.backends.iter().filter(|b| b.service[3..].parse::<u32>().is_ok_and(|i| i < CHECKED)).flat_map(|b| b.members.iter());
    eps.fold((0, 0), |(h, u), m| if m.healthy { (h + 1, u) } else { (h, u + 1) })
}

fn wait_for<T>(what: &str, run: &Run, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "{what} not within {within:?}; log:\n{}", run.log());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn four_hundred_endpoints_down_at_once_and_a_start_during_the_outage() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Netns::new();
    let (port, ls) = ns.listeners();
    let run = Run::start(&ns, "storm", &config(port, &format!("spw-storm-{}", std::process::id())));
    wait_for("all 400 checked endpoints healthy", &run, Duration::from_secs(120), || run.status().filter(|s| checked(s) == (DEAD, 0)));

    // The outage: every listener closed at once (connections are refused from now on).
    drop(ls);
    let t0 = Instant::now();
    let down = wait_for("all 400 marked down", &run, Duration::from_secs(10), || run.status().filter(|s| checked(s).1 == DEAD));
    let took = t0.elapsed();
    // Every worker then uses a snapshot in which they are down: a tick publishes the
    // events it applied before the next status read can see a later generation.
    let g = wait_for("a later status", &run, Duration::from_secs(5), || run.status().filter(|s| s.generation >= down.generation).map(|s| s.generation));
    wait_for("every worker on the published snapshot", &run, Duration::from_secs(1), || run.status().filter(|s| s.total.generation >= g));
    let log = run.log();
    let (ready, gap) = run.finish();
    assert!(took <= Duration::from_secs(1), "400 endpoints marked down in {took:?}; log:\n{log}");
    assert!(ready, "READY=1 never came; log:\n{log}");
    assert!(gap <= Duration::from_secs(1), "a watchdog keep-alive gap of {gap:?} during the storm; log:\n{log}");

    // A start during the outage: the VIPs are never ready while a dead endpoint counts
    // as healthy, and they do get ready (the endpoints decided down).
    let run = Run::start(&ns, "outage", &config(port, &format!("spw-outage-{}", std::process::id())));
    let end = Instant::now() + Duration::from_secs(120);
    let mut became_ready = false;
    while Instant::now() < end {
        let vips = run.vips();
        if vips.iter().any(|v| v.ready) {
            let s = run.status().expect("status");
            let (healthy, _) = checked(&s);
            assert_eq!(healthy, 0, "VIPs ready with {healthy} dead endpoints counted healthy; log:\n{}", run.log());
            became_ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = run.log();
    let (_, gap) = run.finish();
    assert!(became_ready, "the VIPs never became ready during the outage; log:\n{log}");
    assert!(gap <= Duration::from_secs(1), "a watchdog keep-alive gap of {gap:?} at start during the outage; log:\n{log}");
}
