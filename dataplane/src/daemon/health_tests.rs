//! Tests of the daemon's health side: stale events after an edit, a dead checker.
use super::*;
use crate::health::HealthEvent;
use spillway_shared::proto::{Request as R, Response};
use std::time::Duration;

/// A daemon with one service whose two backends are health-checked at addresses of
/// TEST-NET-1 (RFC 5737: unreachable, so probes fail within the 0.1 s timeout), the
/// checker running (as `main` starts it).
fn daemon_with_checker() -> (Daemon, std::sync::mpsc::Receiver<HealthEvent>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let text = format!(
        r#"
[dataplane]
eal_args = ["--no-huge"]
workers = 1
[[ports]]
name = "p0"
device = "net_null0"
[[services]]
name = "web"
vip = "10.0.0.100"
port = {port}
[services.health_check]
type = "tcp"
check_interval_sec = 0.1
timeout_sec = 0.1
healthy_threshold = 1
unhealthy_threshold = 1
[[services.backends]]
name = "b1"
address = "192.0.2.1"
mac = "02:00:00:00:0b:01"
[[services.backends]]
name = "b2"
address = "192.0.2.2"
mac = "02:00:00:00:0b:02"
"#
    );
    let cfg = Config::from_toml(&text).unwrap();
    cfg.validate().unwrap();
    let d = Daemon::new(cfg, 1, vec![0], Box::new(|_| Default::default())).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let targets = crate::health::targets_from_config(&d.control.lock().unwrap().cfg);
    *d.checker.lock().unwrap() = Some(crate::health::HealthChecker::start(targets, tx.clone()).unwrap());
    *d.health_events.lock().unwrap() = Some(tx);
    (d, rx)
}

fn healthy(d: &Daemon, b: &str) -> bool {
    d.control.lock().unwrap().health[&("web".to_string(), b.to_string(), b.to_string())].healthy
}

#[test]
fn events_from_before_an_edit_are_dropped_and_the_view_follows_the_checker() {
    let (d, rx) = daemon_with_checker();
    // b1's "down" event (closed port) is produced, and waits in the channel.
    let stale = loop {
        let ev = rx.recv_timeout(Duration::from_secs(5)).expect("b1 goes down");
        if ev.backend == "b1" {
            break ev;
        }
    };
    assert!(!stale.healthy && stale.generation == 0);
    // An edit that does not touch b1: the daemon reads the trackers back.
    let r = d.edit_request(R::BackendSet { service: "web".into(), name: "b2".into(), fields: vec![("weight".into(), "60".into())], if_generation: None });
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    assert_eq!(d.control.lock().unwrap().health_generation, 1);
    assert!(!healthy(&d, "b1"), "the view took b1's state from the checker at the edit");
    // The stale event (and any of generation 0) is dropped, a current one applies.
    let up_stale = HealthEvent { healthy: true, ..stale.clone() };
    assert!(!d.apply_health_event(&up_stale), "an event of generation 0 after the edit of generation 1");
    assert!(!healthy(&d, "b1"));
    let up_now = HealthEvent { healthy: true, generation: 1, ..stale };
    assert!(d.apply_health_event(&up_now));
    assert!(healthy(&d, "b1"));
}

#[test]
fn a_dead_checker_is_shown_in_status_and_reported_once() {
    let (d, _rx) = daemon_with_checker();
    assert_eq!(d.watch_health_checker(), None);
    let st = d.status().health_checker;
    assert!(st.started && st.dead.is_none() && st.targets == 2, "{st:?}");
    d.checker.lock().unwrap().as_ref().unwrap().crash_for_test();
    let end = Instant::now() + Duration::from_secs(5);
    let reason = loop {
        if let Some(r) = d.watch_health_checker() {
            break r;
        }
        assert!(Instant::now() < end, "a dead checker went unnoticed");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(reason, "panicked: crash requested by a test");
    assert_eq!(d.status().health_checker.dead.as_deref(), Some("panicked: crash requested by a test"));
    assert_eq!(d.control.lock().unwrap().health_checker_dead.as_deref(), Some("panicked: crash requested by a test"));
}

#[test]
fn no_checker_is_not_a_dead_checker() {
    let (d, _rx) = daemon_with_checker();
    *d.checker.lock().unwrap() = None;
    assert_eq!(d.watch_health_checker(), None);
    assert!(!d.status().health_checker.started);
}
