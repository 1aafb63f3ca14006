//! Driver tests against real sockets on 127.0.0.1 (timing bounds are generous: these
//! run on loaded CI machines).

use super::*;
use crate::health::{HealthCheck, HealthCheckKind};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

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
    let addr = addr.into();
    Target { service: "svc".into(), backend: backend.into(), endpoint: backend.into(), addr, check }
}

fn start(targets: Vec<Target>, initially_healthy: bool) -> (HealthChecker, Receiver<HealthEvent>) {
    let (tx, rx) = mpsc::channel();
    (HealthChecker::start_with(targets, tx, CheckerOptions { initially_healthy, ..CheckerOptions::default() }).unwrap(), rx)
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
    assert_eq!(status(&c, "p").probe_addr, std::net::SocketAddr::from(srv.addr));
}

#[test]
fn health_http_200_500_garbage() {
    let seen = Arc::new(Mutex::new(String::new()));
    let ok_srv = http_server(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", Some(seen.clone()));
    let err_srv = http_server(b"HTTP/1.1 500 Internal Server Error\r\n\r\n", None);
    let junk_srv = http_server(b"SSH-2.0-OpenSSH_9.6\r\n", None);
    let empty_srv = http_server(b"", None);
    let mut http = check(HealthCheckKind::Http, 0.05, 0.05, 1, 1);
    http.path = Some("/healthz".into());
    let mut want204 = http.clone();
    want204.expected_status = Some(204);
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
            "junk" => assert!(err.starts_with("bad HTTP response: "), "{err}"),
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
    assert_eq!(ev.reason, "1 consecutive failures: timeout after 0.15 s (waiting for the response)");
    assert!(el >= Duration::from_millis(150), "failed before the timeout: {el:?}");
    // First probe within one interval, then the timeout; generous slack for load.
    assert!(el < Duration::from_millis(450 + 1000), "{el:?}");
    let s = status(&c, "slow");
    assert_eq!(s.last_error.as_deref(), Some("timeout after 0.15 s (waiting for the response)"));
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
    udp.udp_request = Some("PING spillway".into());
    udp.udp_expect = Some("PING".into());
    let mut any = udp.clone();
    any.udp_expect = None;
    let mut wrong = udp.clone();
    wrong.udp_expect = Some("PONG".into());
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
    assert_eq!(s.last_error.as_deref(), Some("timeout after 0.05 s (waiting for the answer)"));
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
    assert_eq!(sa.probe_addr, std::net::SocketAddr::from(srv.addr));
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
    d2.addr = srv.addr.into();
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

#[test]
fn health_tcp_request_response_payloads() {
    let redis_like = Server::start(|mut c| {
        c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut b = [0u8; 64];
        let n = c.read(&mut b).unwrap_or(0);
        let _ = c.write_all(if &b[..n] == b"PING\r\n" { b"+PONG\r\n" } else { b"-ERR\r\n" });
    });
    let mut chk = check(HealthCheckKind::Tcp, 0.05, 0.05, 1, 1);
    chk.request = Some("PING\r\n".into());
    chk.response = Some("+PONG".into());
    let mut wrong = chk.clone();
    wrong.request = Some("HELLO\r\n".into());
    let mut silent = chk.clone();
    silent.request = None; // the server waits for a request that never comes
    let (c, _rx) = start(
        vec![target("pong", redis_like.addr, chk), target("err", redis_like.addr, wrong), target("silent", redis_like.addr, silent)],
        false,
    );
    wait_until(&c, "pong", GENEROUS, |s| s.healthy);
    let s = wait_until(&c, "err", GENEROUS, |s| s.probes_failed >= 1);
    assert_eq!(s.last_error.as_deref(), Some("TCP answer \"-ERR\\r\" does not start with \"+PONG\""));
    let s = wait_until(&c, "silent", GENEROUS, |s| s.probes_failed >= 1);
    assert!(s.last_error.as_deref().is_some_and(|e| e == "timeout after 0.05 s (waiting for the response)" || e.starts_with("connection closed after 0 bytes")), "{s:?}");
}

#[test]
fn health_http_host_header_and_body_substring() {
    let seen = Arc::new(Mutex::new(String::new()));
    let srv = http_server(b"HTTP/1.0 200 OK\r\n\r\n{\"status\":\"ok\"}", Some(seen.clone()));
    let degraded = http_server(b"HTTP/1.0 200 OK\r\n\r\n{\"status\":\"degraded\"}", None);
    let mut chk = check(HealthCheckKind::Http, 0.05, 0.05, 1, 1);
    chk.host = Some("web.example".into());
    chk.response = Some("\"ok\"".into());
    let (c, _rx) = start(vec![target("ok", srv.addr, chk.clone()), target("degraded", degraded.addr, chk)], false);
    wait_until(&c, "ok", GENEROUS, |s| s.healthy);
    assert!(seen.lock().unwrap().contains("\r\nHost: web.example\r\n"));
    let s = wait_until(&c, "degraded", GENEROUS, |s| s.probes_failed >= 1);
    assert_eq!(s.last_error.as_deref(), Some("HTTP body does not contain \"\\\"ok\\\"\" (first 21 bytes read)"));
}

#[test]
fn health_events_carry_the_generation_of_the_set() {
    let dead = closed_port();
    let chk = check(HealthCheckKind::Tcp, 0.05, 0.05, 1, 1);
    let (tx, rx) = mpsc::channel();
    let c = HealthChecker::start_with(vec![target("d", dead, chk.clone())], tx, CheckerOptions { initially_healthy: true, generation: 7, first_result_decides: false }).unwrap();
    let ev = event_for(&rx, "d", GENEROUS);
    assert_eq!((ev.healthy, ev.generation), (false, 7));
    // Restarted healthy at generation 8: the state read back is the new one, and the next
    // transition carries 8.
    let mut moved = target("d", dead, chk);
    moved.check.port = Some(closed_port().port());
    let st = c.update_at(8, vec![moved], HashMap::from([(("svc".to_string(), "d".to_string(), "d".to_string()), true)]));
    assert_eq!(st.len(), 1);
    assert!(st[0].healthy && st[0].probes_sent == 0 && st[0].generation == 8, "{st:?}");
    let ev = loop {
        let ev = event_for(&rx, "d", GENEROUS);
        if ev.generation == 8 {
            break ev;
        }
        assert_eq!(ev.generation, 7, "only older events before the new ones");
    };
    assert!(!ev.healthy);
}

#[test]
fn health_dead_thread_is_reported() {
    let (c, _rx) = start(vec![target("x", closed_port(), check(HealthCheckKind::Tcp, 300.0, 5.0, 2, 2))], true);
    assert_eq!(c.dead(), None);
    c.crash_for_test();
    let end = Instant::now() + GENEROUS;
    while c.dead().is_none() {
        assert!(Instant::now() < end, "death not reported");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c.dead().as_deref(), Some("panicked: crash requested by a test"));
    assert!(c.snapshot().is_empty(), "a dead checker answers with nothing, without hanging");
    assert!(c.update_at(2, Vec::new(), HashMap::new()).is_empty());
}

/// A wedged checker thread does not wedge its caller: `snapshot` and `update_at` give up
/// after [`REPLY_TIMEOUT`] (the control loop calls them, and the systemd watchdog is fed
/// only while that loop progresses).
#[test]
fn health_requests_to_a_wedged_checker_time_out() {
    let (c, _rx) = start(vec![target("x", closed_port(), check(HealthCheckKind::Tcp, 300.0, 5.0, 2, 2))], true);
    assert_eq!(c.snapshot().len(), 1, "a running checker answers");
    c.stall_for_test(Duration::from_secs(5));
    let t = Instant::now();
    assert!(c.snapshot().is_empty(), "no answer from a wedged checker");
    assert!(c.update_at(2, Vec::new(), HashMap::new()).is_empty());
    let took = t.elapsed();
    assert!(took < REPLY_TIMEOUT * 2 + Duration::from_millis(500), "waited {took:?} for a wedged checker");
    assert!(took >= REPLY_TIMEOUT * 2, "each request waited its timeout: {took:?}");
}

/// Probes that cannot get a socket (EMFILE) are skipped and counted, never failed. Runs
/// the body in a child process (this test binary again), whose descriptor limit it lowers.
#[test]
fn health_probes_skipped_when_out_of_descriptors() {
    const CHILD: &str = "SPILLWAY_HEALTH_EMFILE_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "health::driver::tests::health_probes_skipped_when_out_of_descriptors", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
        return;
    }
    let srv = tcp_server();
    let (c, _rx) = start(vec![target("t", srv.addr, check(HealthCheckKind::Tcp, 0.02, 0.02, 1, 1))], true);
    wait_until(&c, "t", GENEROUS, |s| s.probes_sent >= 1);
    // Use up every descriptor below a tiny limit.
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let old = getrlimit(Resource::Nofile);
    let mut hold = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        hold.push(f);
        if hold.len() > 100_000 {
            break;
        }
    }
    setrlimit(Resource::Nofile, Rlimit { current: Some(3), maximum: old.maximum }).unwrap();
    let s = wait_until(&c, "t", GENEROUS, |s| s.probes_skipped >= 3);
    assert!(s.healthy && s.probes_failed == 0, "{s:?}");
    assert!(c.skipped_total() >= 3);
    drop(hold);
    setrlimit(Resource::Nofile, old).unwrap();
    let before = s.probes_sent;
    wait_until(&c, "t", GENEROUS, |s| s.probes_sent > before);
}

/// TCP, HTTP and UDP probes over IPv6 (loopback ::1): healthy when the endpoint
/// answers, unhealthy when nothing listens; the HTTP Host header brackets the address.
#[test]
fn health_probes_over_ipv6() {
    let l = TcpListener::bind("[::1]:0").expect("IPv6 loopback");
    let tcp_addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let mut c = c;
            c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let mut b = [0u8; 512];
            // the TCP probe connects and closes; only the HTTP probe sends a request
            match c.read(&mut b) {
                Ok(n) if b[..n].starts_with(b"GET ") => *seen2.lock().unwrap() = String::from_utf8_lossy(&b[..n]).into_owned(),
                _ => continue,
            }
            let _ = c.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
        }
    });
    let echo = UdpSocket::bind("[::1]:0").unwrap();
    let udp_addr = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut b = [0u8; 256];
        while let Ok((n, from)) = echo.recv_from(&mut b) {
            let _ = echo.send_to(&b[..n], from);
        }
    });
    let closed = {
        let l = TcpListener::bind("[::1]:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut udp = check(HealthCheckKind::Udp, 0.05, 0.2, 1, 1);
    udp.udp_request = Some("PING".into());
    udp.udp_expect = Some("PING".into());
    let t6 = |name: &str, addr: std::net::SocketAddr, chk: HealthCheck| Target { service: "svc".into(), backend: name.into(), endpoint: name.into(), addr, check: chk };
    let (c, rx) = start(
        vec![
            t6("tcp6", tcp_addr, check(HealthCheckKind::Tcp, 0.05, 0.2, 1, 1)),
            t6("http6", tcp_addr, check(HealthCheckKind::Http, 0.05, 0.2, 1, 1)),
            t6("udp6", udp_addr, udp),
            t6("closed6", closed, check(HealthCheckKind::Tcp, 0.05, 0.2, 1, 1)),
        ],
        false,
    );
    for b in ["tcp6", "http6", "udp6"] {
        assert!(wait_until(&c, b, GENEROUS, |s| s.healthy).healthy, "{b}");
    }
    let _ = event_for(&rx, "tcp6", GENEROUS);
    let s = wait_until(&c, "closed6", GENEROUS, |s| s.probes_failed >= 2);
    assert!(!s.healthy, "nothing listens: {s:?}");
    let req = seen.lock().unwrap().clone();
    assert!(req.contains(&format!("Host: [::1]:{}", tcp_addr.port())), "{req}");
}
