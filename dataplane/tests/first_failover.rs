//! The first failover after start drains (or, with draining disabled, evicts) the
//! primaries like any later one (review finding; spec/backend-selection.md "Connection
//! draining on failover/failback").
use spillway_dataplane::daemon::Daemon;
use spillway_shared::config::Config;
use spillway_shared::proto::PortStatus;

fn daemon(extra: &str) -> Daemon {
    let toml = format!(
        r#"
[[ports]]
name = "p0"
device = "net_null0"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
failover_ratio = 0.75
{extra}
[[services.backends]]
name = "p1"
mac = "02:00:00:00:0b:01"
[[services.backends]]
name = "p2"
mac = "02:00:00:00:0b:02"
[[services.backends]]
name = "f1"
mac = "02:00:00:00:0b:03"
failover = true
"#
    );
    let cfg = Config::from_toml(&toml).unwrap();
    cfg.validate().unwrap();
    Daemon::new(cfg, 1, vec![0], Box::new(|_| PortStatus::default())).unwrap()
}

fn p2(d: &Daemon) -> (Option<u32>, bool, bool) {
    d.shared.with_snapshot(|s| {
        let b = s.backends.iter().find(|b| b.present && b.name == "p2").unwrap();
        (b.draining_until_ms, b.evict_connections, s.services[0].failed_over)
    }).unwrap()
}

#[test]
fn first_failover_after_start_drains_the_primaries() {
    let d = daemon("");
    assert!(d.set_health("web", "p1", false, None));
    let (until, _, fo) = p2(&d);
    assert!(fo, "h = 0.5 < 0.75: failed over");
    assert!(until.is_some(), "healthy primary p2 must drain after the failover (deadline), got none: its flows never move");
}

#[test]
fn first_failover_after_start_evicts_when_drain_disabled() {
    let d = daemon("disable_connection_drain_on_failover = true");
    assert!(d.set_health("web", "p1", false, None));
    let (_, evict, fo) = p2(&d);
    assert!(fo);
    assert!(evict, "drain disabled: p2's connections must be cut at once");
}
