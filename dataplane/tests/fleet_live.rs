//! Fleet features against the real daemon (child process on a DPDK `net_null` port that receives
//! frames): the Prometheus endpoint (scraped twice: counters move; checked with
//! `promtool check metrics` when Debian's `prometheus` is installed), systemd notifications
//! over a `NOTIFY_SOCKET` this test binds (READY=1, WATCHDOG=1), `--log-format json`, VIP
//! drain/undrain through `spillwayctl`, and the announcement interface vanishing on SIGKILL.
//!
//! Needs root (DPDK, TUN) and `spillwayctl` built beside `spillway`
//! (`cargo test -p spillway-ctl -p spillway-dataplane` builds both).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn ctl_bin() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_spillway")).with_file_name("spillwayctl");
    assert!(p.exists(), "{} not built: run `cargo build -p spillway-ctl`", p.display());
    p
}

const CONFIG: &str = r#"
[dataplane]
eal_args = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--log-level=warning", "--file-prefix=spw-fleet-test"]
workers = 2
idle_sleep_us = 500
mbufs_per_port = 4095
descriptors = 256

[[ports]]
name = "p0"
device = "net_null0"
mac = "02:00:00:00:00:01"
address = "10.0.0.2"
address6 = "fd00::2"

[conntrack]
capacity_per_worker = 4096

[metrics]
listen = "127.0.0.1:0"

[announce]
interface = "spwft0"

[[services]]
name = "web"
vip = "10.0.0.100"
port = 80

[[services.backends]]
name = "b1"
address = "10.0.1.1"
mac = "02:00:00:00:0b:01"

[[services]]
name = "web6"
vip = "fd00::100"
port = 80

[[services.backends]]
name = "b1"
address = "fd00:1::1"
mac = "02:00:00:00:0b:01"

[[services]]
name = "web6b"
vip = "fd00:2::100"
port = 80

[[services.backends]]
name = "b1"
address = "fd00:1::1"
mac = "02:00:00:00:0b:01"

[[services]]
name = "dns"
vip = "10.0.0.53"
port = 53
protocol = "udp"

[[services.backends]]
name = "d1"
address = "10.0.2.1"
mac = "02:00:00:00:0d:01"
enabled = false
"#;

struct Daemon {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }
    fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        let o = Command::new(ctl_bin()).arg("--socket").arg(&self.socket).args(args).output().expect("run spillwayctl");
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
    }
}

/// Polls `f` every 50 ms until it returns `Some`, or panics after `secs` with `what`.
fn wait_for<T>(secs: u64, what: &str, d: &Daemon, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} within {secs} s; daemon log:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn scrape(addr: &str, accept: &str) -> String {
    let mut c = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    c.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n").as_bytes()).unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    let (head, body) = s.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body.to_string()
}

/// Value of the sample `series` (name with labels as printed, e.g. `x{worker="0"}`).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Sum of every sample of `name` whose labels contain `having`.
fn sum(text: &str, name: &str, having: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(having))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn peer_addresses(ifname: &str) -> Option<Vec<String>> {
    peers(ifname, "-4")
}

/// The peers of the interface's point-to-point addresses of family `fam` (`-4`, `-6`).
fn peers(ifname: &str, fam: &str) -> Option<Vec<String>> {
    let o = Command::new("ip").args(["-o", fam, "addr", "show", "dev", ifname]).output().ok()?;
    if !o.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&o.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut v: Vec<String> = words.windows(2).filter(|w| w[0] == "peer").map(|w| w[1].to_string()).collect();
    v.sort();
    Some(v)
}

#[test]
fn metrics_systemd_and_announcement() {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("spw-fleet-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("spillway.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let socket = dir.join("ctl.sock");
    let notify_path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["--config".as_ref(), config.as_os_str(), "--socket".as_ref(), socket.as_os_str(), "--duration".as_ref(), "120".as_ref()])
        .args(["--log-format", "json"])
        .env("RUST_LOG", "info")
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "2000000")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn spillway");
    let mut d = Daemon { child, dir, socket };

    // systemd: READY=1 once, then WATCHDOG=1 at about a quarter of 2 s.
    let mut msgs: Vec<String> = Vec::new();
    let mut buf = [0u8; 4096];
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(30) && msgs.iter().filter(|m| m.contains("WATCHDOG=1")).count() < 3 {
        if let Ok(n) = notify.recv(&mut buf) {
            msgs.push(String::from_utf8_lossy(&buf[..n]).to_string());
        }
    }
    assert_eq!(msgs.iter().filter(|m| m.contains("READY=1")).count(), 1, "one READY=1: {msgs:?}\n{}", d.log());
    assert!(msgs.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 3, "watchdog fed: {msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("STATUS=3 of 4 VIPs ready, 3 announced")), "status: {msgs:?}");

    // JSON logs: every line from tracing is one JSON object.
    let logtext = d.log();
    let addr = logtext
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["fields"]["listen"].as_str().map(String::from))
        .unwrap_or_else(|| panic!("no JSON log line with the metrics address:\n{logtext}"));

    // Metrics: scraped twice, the worker rx counters move (net_null receives frames).
    let a = scrape(&addr, "*/*");
    let b = wait_for(10, "worker rx counter increased", &d, || {
        let b = scrape(&addr, "*/*");
        (sum(&b, "spillway_worker_rx_packets_total", "worker") > sum(&a, "spillway_worker_rx_packets_total", "worker")).then_some(b)
    });
    for (series, want) in [
        ("spillway_vip_ready{vip=\"10.0.0.100\"}", 1.0),
        ("spillway_vip_announced{vip=\"10.0.0.100\"}", 1.0),
        ("spillway_vip_ready{vip=\"10.0.0.53\"}", 0.0),
        ("spillway_announce_enabled", 1.0),
        ("spillway_conntrack_capacity", 4096.0),
    ] {
        assert_eq!(sample(&b, series), Some(want), "{series} in\n{b}");
    }
    for family in [
        "spillway_backend_packets_total{",
        "spillway_backend_new_connections_total{",
        "spillway_backend_healthy{",
        "spillway_drops_total{reason=",
        "spillway_worker_polls_total{",
        "spillway_conntrack_entries{",
        "spillway_conntrack_evictions_total{",
        "spillway_conntrack_syn_not_tracked_total{",
        "spillway_snapshot_generation ",
        "spillway_port_rx_packets_total{",
        "spillway_control_requests_total ",
        "spillway_control_bad_frames_total ",
    ] {
        assert!(b.lines().any(|l| l.starts_with(family)), "no {family} in\n{b}");
    }
    assert!(sum(&b, "spillway_worker_polls_total", "kind=\"busy\"") > 0.0, "net_null receives on every poll");
    let om = scrape(&addr, "application/openmetrics-text;version=1.0.0");
    assert!(om.ends_with("# EOF\n"), "OpenMetrics when asked for");
    assert!(!b.contains("# EOF"), "Prometheus text otherwise");
    match Command::new("promtool").args(["check", "metrics"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
        Ok(mut p) => {
            p.stdin.take().unwrap().write_all(b.as_bytes()).unwrap();
            let o = p.wait_with_output().unwrap();
            assert!(o.status.success(), "promtool check metrics: {}{}\n{b}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        }
        Err(e) => eprintln!("SKIP promtool check metrics: promtool not found ({e}); install Debian's `prometheus` package"),
    }

    // Announcement: the ready VIP only; drain withdraws it, undrain brings it back.
    assert_eq!(peer_addresses("spwft0"), Some(vec!["10.0.0.100/32".to_string()]));
    // IPv6 VIPs are peers too (each with its own local address, so two VIPs
    // with the same interface ID do not collide), never local addresses the host answers.
    assert_eq!(peers("spwft0", "-6"), Some(vec!["fd00:2::100/128".to_string(), "fd00::100/128".to_string()]));
    for vip in ["fd00::100", "fd00:2::100"] {
        let o = Command::new("ip").args(["-6", "route", "get", vip]).output().unwrap();
        let route = String::from_utf8_lossy(&o.stdout);
        assert!(route.contains("dev spwft0") && !route.starts_with("local"), "{vip}: {route}");
    }
    let (code, out, err) = d.ctl(&["vip", "drain", "10.0.0.100"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("10.0.0.100       no     yes      no"), "{out}");
    assert_eq!(peer_addresses("spwft0"), Some(vec![]), "withdrawn when the command returns");
    let (code, out, err) = d.ctl(&["vip", "drain", "fd00::100"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(peers("spwft0", "-6"), Some(vec!["fd00:2::100/128".to_string()]), "one IPv6 VIP withdrawn, the other kept");
    let (code, out, err) = d.ctl(&["vip", "undrain", "fd00::100"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(peers("spwft0", "-6"), Some(vec!["fd00:2::100/128".to_string(), "fd00::100/128".to_string()]));
    let (code, _, err) = d.ctl(&["vip", "drain", "10.9.9.9"]);
    assert_eq!(code, 1);
    assert!(err.contains("vip 10.9.9.9: not a configured VIP (configured: "), "{err}");
    let (code, out, _) = d.ctl(&["vip", "undrain", "10.0.0.100"]);
    assert_eq!(code, 0);
    assert!(out.contains("10.0.0.100       yes    no       yes"), "{out}");
    assert_eq!(peer_addresses("spwft0"), Some(vec!["10.0.0.100/32".to_string()]));
    let (_, json, _) = d.ctl(&["vip", "show", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(rows[0]["vip"], "10.0.0.53");
    assert_eq!(rows[0]["not_ready_because"][0], "would drop new connections (dns: no enabled backend)");
    // `vip show` right after an edit shows it (it waits for the fleet thread's evaluation of
    // the edit's snapshot; fresh-user QA: the rows lagged). This test reads no
    // NOTIFY_SOCKET meanwhile: its queue fills, and a blocking sd_notify stalled the fleet
    // thread (and so the rows) from the fourth round on; the send no longer blocks.
    let listed = |json: &str| serde_json::from_str::<serde_json::Value>(json).unwrap().as_array().unwrap().iter().any(|r| r["vip"] == "10.0.0.77");
    for round in 0..5 {
        let (code, out, err) = d.ctl(&["service", "add", "extra", "vip=10.0.0.77", "port=80", "protocol=tcp"]);
        assert_eq!(code, 0, "{out}{err}");
        let (_, json, _) = d.ctl(&["vip", "show", "--json"]);
        assert!(listed(&json), "round {round}: a VIP just added is missing: {json}\n{}", d.log());
        let (code, out, err) = d.ctl(&["service", "remove", "extra"]);
        assert_eq!(code, 0, "{out}{err}");
        let (_, json, _) = d.ctl(&["vip", "show", "--json"]);
        assert!(!listed(&json), "round {round}: a VIP just removed is still listed: {json}");
    }

    // [metrics]/[announce] are set up at start: a live edit of them is refused.
    let edited = d.dir.join("edited.toml");
    std::fs::write(&edited, CONFIG.replace("interface = \"spwft0\"", "interface = \"spwft1\"")).unwrap();
    let (code, _, err) = d.ctl(&["config", "apply", edited.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("[metrics] and [announce] cannot change while the daemon runs"), "{err}");

    // SIGKILL: the kernel removes the interface, and with it every announced VIP.
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    wait_for(5, "announcement interface gone after SIGKILL", &d, || peer_addresses("spwft0").is_none().then_some(()));
}
