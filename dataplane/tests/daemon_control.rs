//! The daemon's control plane without DPDK: health changes republish snapshots, the
//! failover pool switch sets connection draining (spec/backend-selection.md "Connection
//! draining on failover/failback"), and the status report reflects it.

use spillway_dataplane::daemon::Daemon;
use spillway_shared::config::Config;
use spillway_shared::proto::PortStatus;

fn daemon(extra: &str) -> Daemon {
    daemon_with_ratio(0.5, extra)
}

fn daemon_with_ratio(ratio: f64, extra: &str) -> Daemon {
    let toml = format!(
        r#"
[[ports]]
name = "p0"
device = "net_null0"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
failover_ratio = {ratio}
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

/// (name, draining_until_ms, evict_connections, healthy) of every present slot.
fn slots(d: &Daemon) -> Vec<(String, Option<u32>, bool, bool)> {
    d.shared
        .with_snapshot(|s| s.backends.iter().filter(|b| b.present).map(|b| (b.name.clone(), b.draining_until_ms, b.evict_connections, b.healthy)).collect())
        .unwrap()
}

fn failed_over(d: &Daemon) -> bool {
    d.shared.with_snapshot(|s| s.services[0].failed_over).unwrap()
}

#[test]
fn failover_and_failback_drain_the_inactive_pool() {
    let d = daemon("");
    assert!(!failed_over(&d));
    assert!(slots(&d).iter().all(|s| s.1.is_none() && !s.2));
    let g0 = d.shared.generation.load(std::sync::atomic::Ordering::Relaxed);
    assert!(d.set_health("web", "p1", false, None));
    // h = 1/2 is not < 0.5: still on primaries, nothing drains
    assert!(!failed_over(&d));
    assert!(d.set_health("web", "p2", false, None));
    assert!(failed_over(&d), "no primary healthy: failover pool active");
    assert!(d.shared.generation.load(std::sync::atomic::Ordering::Relaxed) >= g0 + 2);
    let now = d.now_ms();
    for (name, until, evict, _) in slots(&d) {
        if name.starts_with('p') {
            let until = until.expect("primaries drain after failover");
            // 600 s default drain, counted from the switch
            assert!(until.wrapping_sub(now) as i32 > 590_000 && until.wrapping_sub(now) as i32 <= 600_000, "{name}: {until} vs now {now}");
            assert!(!evict);
        } else {
            assert!(until.is_none() && !evict, "the active pool does not drain");
        }
    }
    // failback: primaries healthy again, the failover backend drains
    d.set_health("web", "p1", true, None);
    d.set_health("web", "p2", true, None);
    assert!(!failed_over(&d));
    for (name, until, _, _) in slots(&d) {
        assert_eq!(until.is_some(), name == "f1", "{name}");
    }
    // status shows health as the dataplane uses it
    let r = d.status();
    assert_eq!(r.backends.iter().filter(|b| b.healthy).count(), 3);
}

#[test]
fn drain_disabled_cuts_connections_at_once() {
    let d = daemon("disable_connection_drain_on_failover = true");
    d.set_health("web", "p1", false, None);
    d.set_health("web", "p2", false, None);
    assert!(failed_over(&d));
    for (name, until, evict, _) in slots(&d) {
        assert_eq!(evict, name.starts_with('p'), "{name}");
        assert!(until.is_none());
    }
}

#[test]
fn unchanged_health_does_not_republish() {
    let d = daemon("");
    let g = d.shared.generation.load(std::sync::atomic::Ordering::Relaxed);
    assert!(!d.set_health("web", "p1", true, Some(3.0)));
    assert_eq!(d.shared.generation.load(std::sync::atomic::Ordering::Relaxed), g);
}

/// The Maglev table cache must never hand a table built for one backend order to another
/// order of the same set: picks are compared by backend name.
#[test]
fn reordered_backends_pick_the_same_backends() {
    use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap};
    let mk = |order: &[&str]| {
        let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n");
        for (i, n) in order.iter().enumerate() {
            t.push_str(&format!("[[services.backends]]\nname = \"{n}\"\nmac = \"02:00:00:00:0b:{:02x}\"\n", i + 1));
        }
        Config::from_toml(&t).unwrap()
    };
    let pick_names = |cfg: &Config, gen: u64| {
        let mut slots = SlotMap::default();
        slots.sync(cfg).unwrap();
        let snap = compile(cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut Default::default(), now_sec: 0.0, generation: gen, port_addrs: vec![0] });
        let t = snap.services[0].tables[0].clone().unwrap();
        (0..2000u64).map(|h| snap.backends[usize::from(t.pick(h.wrapping_mul(0x9E37_79B9_7F4A_7C15)).unwrap())].name.clone()).collect::<Vec<_>>()
    };
    let a = pick_names(&mk(&["b1", "b2", "b3"]), 1);
    let b = pick_names(&mk(&["b3", "b1", "b2"]), 2);
    let again = pick_names(&mk(&["b1", "b2", "b3"]), 3); // served from the cache
    assert_eq!(a, b);
    assert_eq!(a, again);
}

/// a backend that gets the slot of a removed one starts from zero in
/// `status` (per-slot counters keep counting; the daemon records a baseline).
#[test]
fn a_backend_reusing_a_slot_does_not_inherit_its_counters() {
    use std::sync::atomic::Ordering::Relaxed;
    let d = daemon("");
    let slot = d.control.lock().unwrap().slots.slot("web", "p2", "p2").unwrap();
    d.shared.stats[0].backend_new[usize::from(slot)].store(100, Relaxed);
    d.shared.stats[0].backend_packets[usize::from(slot)].store(700, Relaxed);
    let row = |d: &Daemon, b: &str| d.status().backends.into_iter().find(|r| r.backend == b).map(|r| (r.new_connections, r.packets));
    assert_eq!(row(&d, "p2"), Some((100, 700)));
    // replace p2 by p3 in one edit: p3 takes the freed slot
    let cfg = d.control.lock().unwrap().cfg.clone();
    let mut text = toml::to_string(&cfg).unwrap();
    text = text.replace("name = \"p2\"", "name = \"p3\"");
    match d.config_apply(&text, None) {
        spillway_shared::proto::Response::Applied { .. } => {}
        other => panic!("config apply refused: {other:?}"),
    }
    assert_eq!(d.control.lock().unwrap().slots.slot("web", "p3", "p3"), Some(slot), "p3 reuses p2's slot");
    assert_eq!(row(&d, "p3"), Some((0, 0)), "p3 inherited p2's totals");
    // and counts from there
    d.shared.stats[0].backend_new[usize::from(slot)].store(103, Relaxed);
    assert_eq!(row(&d, "p3"), Some((3, 0)));
}

// The first failover after start drains (or, with draining disabled, evicts) the primaries
// like any later one (review finding; spec/backend-selection.md "Connection draining on
// failover/failback"). Two primaries, one failover backend, failover_ratio 0.75.

fn p2(d: &Daemon) -> (Option<u32>, bool, bool) {
    d.shared.with_snapshot(|s| {
        let b = s.backends.iter().find(|b| b.present && b.name == "p2").unwrap();
        (b.draining_until_ms, b.evict_connections, s.services[0].failed_over)
    }).unwrap()
}

#[test]
fn first_failover_after_start_drains_the_primaries() {
    let d = daemon_with_ratio(0.75, "");
    assert!(d.set_health("web", "p1", false, None));
    let (until, _, fo) = p2(&d);
    assert!(fo, "h = 0.5 < 0.75: failed over");
    assert!(until.is_some(), "healthy primary p2 must drain after the failover (deadline), got none: its flows never move");
}

#[test]
fn first_failover_after_start_evicts_when_drain_disabled() {
    let d = daemon_with_ratio(0.75, "disable_connection_drain_on_failover = true");
    assert!(d.set_health("web", "p1", false, None));
    let (_, evict, fo) = p2(&d);
    assert!(fo);
    assert!(evict, "drain disabled: p2's connections must be cut at once");
}

/// A daemon that started with an IPv6 service sized its IPv6 connection tables for it, so
/// dropping its last IPv6 service and adding one back is a live edit (it was refused as
/// "the first IPv6 service" until a restart); one that started without refuses the first.
#[test]
fn an_ipv6_service_can_come_back_when_the_daemon_started_with_one() {
    use spillway_shared::proto::{Request, Response};
    let start = |v6: bool| {
        let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n");
        if v6 {
            t += "[[services]]\nname = \"web6\"\nvip = \"fd00::100\"\nport = 80\n";
        }
        Daemon::new(Config::from_toml(&t).unwrap(), 1, vec![0], Box::new(|_| PortStatus::default())).unwrap()
    };
    let add = || Request::ServiceAdd { name: "web6b".into(), fields: vec![("vip".into(), "fd00::200".into()), ("port".into(), "80".into())], if_generation: None };
    let d = start(true);
    let r = d.edit_request(Request::ServiceRemove { name: "web6".into(), if_generation: None });
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    let r = d.edit_request(add());
    assert!(matches!(r, Response::Applied(_)), "an IPv6 service back on a daemon started with one: {r:?}");
    let r = start(false).edit_request(add());
    assert!(matches!(&r, Response::Error { message, .. } if message.contains("first IPv6 service")), "{r:?}");
}
