//! Start-up against the real `spillway` binary: a second daemon on the control socket (or
//! the metrics address) of a running one is refused before it starts EAL or any port (both
//! are taken before DPDK starts), and the running daemon is left alone. Both run on DPDK `net_null`
//! devices with `--no-huge --no-shconf` and their own EAL file prefixes.
//!
//! Needs root (DPDK).

mod ctl_harness;

use ctl_harness::{example, Daemon, SERIAL};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `examples/null.toml` with its own EAL file prefix.
fn config(prefix: &str) -> String {
    let cfg = example();
    let with = cfg.replace("\"--log-level=warning\"]", &format!("\"--log-level=warning\", \"--file-prefix={prefix}\"]"));
    assert_ne!(cfg, with, "examples/null.toml: eal_args not found");
    with
}

/// Runs a second daemon on `cfg` and `socket` until it exits; returns its exit code and
/// output.
fn run_second(dir: &std::path::Path, cfg: &str, socket: &std::path::Path) -> (Option<i32>, String) {
    let second_cfg = dir.join("second.toml");
    std::fs::write(&second_cfg, cfg).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("--config")
        .arg(&second_cfg)
        .arg("--socket")
        .arg(socket)
        .arg("--duration")
        .arg("60")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the second spillway");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("the second daemon did not exit:\n{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

fn assert_refused_before_dpdk(code: Option<i32>, out: &str, why: &str) {
    assert_eq!(code, Some(2), "refused with exit 2:\n{out}");
    assert!(out.contains(why), "says why ({why}):\n{out}");
    for started in ["port started", "EAL:", "jumbo frames", "worker polling", "health checker started"] {
        assert!(!out.contains(started), "the second daemon got as far as {started:?} before it was refused:\n{out}");
    }
}

#[test]
fn a_second_daemon_on_the_same_socket_or_metrics_address_touches_no_port() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = format!("\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n");
    let first = Daemon::start("first", &(config(&format!("spw-first-{}", std::process::id())) + &metrics));
    assert!(first.log().contains("port started"), "the first daemon started its port:\n{}", first.log());
    let second = config(&format!("spw-second-{}", std::process::id()));

    // Same control socket.
    let (code, out) = run_second(&first.dir, &second, &first.socket);
    assert_refused_before_dpdk(code, &out, "is in use by a running daemon");
    // Same metrics address, own socket.
    let (code, out) = run_second(&first.dir, &(second.clone() + &metrics), &first.dir.join("second.sock"));
    assert_refused_before_dpdk(code, &out, &format!("metrics.listen = \"127.0.0.1:{port}\": cannot listen"));
    assert!(!first.dir.join("second.sock").exists(), "the refused start leaves no socket behind");

    // The first daemon still serves its socket.
    assert!(first.try_status().is_some(), "the first daemon answers after the refused starts:\n{}", first.log());
    assert!(first.socket.exists());
}
