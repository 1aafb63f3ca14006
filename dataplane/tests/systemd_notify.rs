//! systemd notifications from the real `spillway` binary (child process on a DPDK
//! `net_null` port): `NOTIFY_SOCKET` naming an abstract socket (`@name`, which sd_notify(3)
//! allows and systemd may hand out) gets `READY=1`, and under a `WatchdogSec=` shorter than
//! 200 ms the keep-alives still come at least every half interval (sd_watchdog_enabled(3)).
//!
//! Needs root (DPDK).

mod ctl_harness;

use ctl_harness::{example, SERIAL};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn ready_and_a_short_watchdog_over_an_abstract_notify_socket() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("spw-notify-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = example().replace("\"--log-level=warning\"]", &format!("\"--log-level=warning\", \"--file-prefix=spw-notify-{}\"]", std::process::id()));
    std::fs::write(dir.join("spillway.toml"), cfg).unwrap();
    let name = format!("spw-notify-test-{}-{nanos}", std::process::id());
    let notify = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    notify.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let watchdog = Duration::from_millis(150);
    let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("--config")
        .arg(dir.join("spillway.toml"))
        .arg("--socket")
        .arg(dir.join("ctl.sock"))
        .args(["--duration", "60"])
        .env("RUST_LOG", "info")
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .env("WATCHDOG_USEC", watchdog.as_micros().to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn spillway");
    let logtext = || std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();

    // READY=1 arrives.
    let mut buf = [0u8; 4096];
    let t0 = Instant::now();
    let mut ready = false;
    while !ready && t0.elapsed() < Duration::from_secs(30) {
        if let Ok(n) = notify.recv(&mut buf) {
            ready = String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "READY=1");
        }
    }
    if !ready {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no READY=1 on the abstract NOTIFY_SOCKET within 30 s; log:\n{}", logtext());
    }

    // Then WATCHDOG=1 at least every half interval: over 2 s, at least 2 s / 75 ms = 26
    // keep-alives (a quarter-interval period gives about 50; a fixed 100 ms period, 20).
    let window = Duration::from_secs(2);
    let t1 = Instant::now();
    let mut pings = 0usize;
    while t1.elapsed() < window {
        if let Ok(n) = notify.recv(&mut buf) {
            pings += String::from_utf8_lossy(&buf[..n]).lines().filter(|l| *l == "WATCHDOG=1").count();
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let need = (window.as_millis() / (watchdog / 2).as_millis()) as usize;
    assert!(pings >= need, "{pings} WATCHDOG=1 in {window:?} under a {watchdog:?} watchdog, need >= {need}; log:\n{}", logtext());
    let _ = std::fs::remove_dir_all(&dir);
}
