//! Dry runs against the same edits applied: the predicted share of new connections that
//! change backend is the share that does change, measured by live `explain` over many
//! client ports; nothing is published or written by the dry run itself.

use crate::daemon::Daemon;
use spillway_shared::config::Config;
use spillway_shared::dryrun::DryRunReport;
use spillway_shared::proto::{Request, Response};

/// Two zones, clients of each and of a not-compatible prefix; web spills cross-zone below
/// 60 % of z1's endpoints healthy and enabled.
const ZONED: &str = r#"
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.2"
[forwarder]
zone = "z1"
region = "r1"
[[zones]]
zone = "z1"
region = "r1"
[[zones]]
zone = "z2"
region = "r1"
[[client_zones]]
prefix = "10.1.0.0/16"
zone = "z1"
[[client_zones]]
prefix = "10.2.0.0/16"
zone = "z2"
[[client_zones]]
prefix = "10.8.0.0/16"
compatible = false
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
zonal_affinity = "ZONAL_AFFINITY_SPILL_CROSS_ZONE"
spillover_ratio = 0.6
maglev_table_size = 4099
[[services.backends]]
name = "a1"
address = "10.0.1.1"
mac = "02:00:00:00:0a:01"
zone = "z1"
[[services.backends]]
name = "a2"
address = "10.0.1.2"
mac = "02:00:00:00:0a:02"
zone = "z1"
[[services.backends]]
name = "a3"
address = "10.0.1.3"
mac = "02:00:00:00:0a:03"
zone = "z1"
[[services.backends]]
name = "c1"
address = "10.0.2.1"
mac = "02:00:00:00:0c:01"
zone = "z2"
[[services.backends]]
name = "c2"
address = "10.0.2.2"
mac = "02:00:00:00:0c:02"
zone = "z2"
"#;

/// Client address of each class (snapshot class names).
const CLIENTS: [(&str, &str); 3] = [("z1", "10.1.0.5"), ("z2", "10.2.0.5"), ("(not zonal)", "10.8.0.5")];
const PORTS: u16 = 20_000;

fn daemon() -> Daemon {
    Daemon::new(Config::from_toml(ZONED).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap()
}

fn fields(f: &[(&str, &str)]) -> Vec<(String, String)> {
    f.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// `backend/endpoint` that live `explain` picks for each client port of `client`.
fn picks(d: &Daemon, client: &str) -> Vec<Option<String>> {
    (1..=PORTS)
        .map(|p| match d.explain(client.parse().unwrap(), p, None, None) {
            Response::Explain(r) => r.backend.zip(r.endpoint).map(|(b, e)| format!("{b}/{e}")),
            r => panic!("{r:?}"),
        })
        .collect()
}

fn dry(d: &Daemon, req: &Request) -> DryRunReport {
    match crate::ctl::server::Handler::handle(d, Request::DryRun(Box::new(req.clone()))) {
        Response::DryRun(r) => r,
        r => panic!("{r:?}"),
    }
}

/// Runs `req` as a dry run and then for real on a fresh daemon, and checks the predicted
/// moved share of every class against explain's picks before and after, within 1
/// percentage point. Returns the report.
fn predicted_matches_applied(req: Request) -> DryRunReport {
    let d = daemon();
    let gens = |d: &Daemon| {
        let st = d.control.lock().unwrap();
        (st.config_generation, st.generation, st.cfg.clone())
    };
    let before_gens = gens(&d);
    let before: Vec<_> = CLIENTS.iter().map(|(_, c)| picks(&d, c)).collect();
    let rep = dry(&d, &req);
    assert_eq!(gens(&d), before_gens, "a dry run publishes nothing and changes no generation");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, req.clone()), Response::Applied(_)));
    for (i, (class, client)) in CLIENTS.iter().enumerate() {
        let after = picks(&d, client);
        let moved = before[i].iter().zip(&after).filter(|(x, y)| x != y).count() as f64 / f64::from(PORTS);
        let predicted = rep.services.iter().flat_map(|s| &s.classes).find(|c| c.class == *class).map_or(0.0, |c| c.moved_share);
        eprintln!("{class}: predicted {predicted:.4}, moved {moved:.4}");
        assert!((moved - predicted).abs() <= 0.01, "{class}: predicted {predicted:.4}, moved {moved:.4}\n{rep:#?}");
    }
    rep
}

#[test]
fn removing_a_backend_moves_what_was_predicted() {
    let rep = predicted_matches_applied(Request::BackendRemove { service: "web".into(), name: "a2".into(), if_generation: None });
    assert_eq!(rep.changes, vec!["service web: backend a2 removed".to_string()]);
    let web = &rep.services[0];
    // z1 clients: 3 of 3 z1 endpoints -> 2 of 2 (ratio still 1): a2's third moves.
    let z1 = web.classes.iter().find(|c| c.class == "z1").unwrap();
    assert!((z1.moved_share - 1.0 / 3.0).abs() < 0.02, "{z1:?}");
    let a2 = z1.shares.iter().find(|s| s.backend == "a2").unwrap();
    assert!((a2.before - 1.0 / 3.0).abs() < 1e-9 && a2.after == 0.0, "{a2:?}");
    // a2's tracked connections are re-picked (the bare daemon has no worker to count them)
    assert_eq!(web.repicked.len(), 1);
    assert_eq!((web.repicked[0].backend.as_str(), web.repicked[0].reason.as_str(), web.repicked[0].connections), ("a2", "removed", None));
}

#[test]
fn a_spillover_ratio_above_the_healthy_share_spills_and_names_the_stage() {
    let d = daemon();
    {
        // a2 unhealthy: z1 has 2/3 healthy endpoints
        let mut st = d.control.lock().unwrap();
        st.health.entry(("web".into(), "a2".into(), "a2".into())).or_default().healthy = false;
        d.republish(&mut st);
    }
    let req = Request::ServiceSet { name: "web".into(), fields: fields(&[("spillover_ratio", "0.9")]), if_generation: None };
    let rep = dry(&d, &req);
    let z1 = rep.services[0].classes.iter().find(|c| c.class == "z1").unwrap();
    let zonal = z1.stages.iter().find(|s| s.stage == "zonal_affinity").unwrap_or_else(|| panic!("{z1:#?}"));
    assert!(zonal.before.contains("2/3") && zonal.before.contains(">= 0.6") && zonal.after.contains("< 0.9"), "{zonal:?}");
    assert!(z1.shares.iter().any(|s| s.backend == "c1" && s.before == 0.0 && s.after > 0.0), "{z1:?}");
    assert!(z1.moved_share > 0.3, "{z1:?}");
    // no tracked connection leaves a backend it may keep
    assert!(rep.services[0].repicked.is_empty(), "{rep:#?}");
}

#[test]
fn a_weight_change_moves_what_was_predicted() {
    let rep = predicted_matches_applied(Request::BackendSet { service: "web".into(), name: "c1".into(), fields: fields(&[("weight", "300")]), if_generation: None });
    let z2 = rep.services[0].classes.iter().find(|c| c.class == "z2").unwrap();
    assert!(z2.moved_share > 0.2, "{z2:?}");
    assert!(rep.services[0].repicked.is_empty());
}

#[test]
fn a_table_size_change_is_estimated_by_sampling() {
    let rep = predicted_matches_applied(Request::ServiceSet { name: "web".into(), fields: fields(&[("maglev_table_size", "65537")]), if_generation: None });
    assert!(rep.services[0].classes.iter().all(|c| c.moved_share > 0.3), "a new table size reshuffles: {rep:#?}");
}

#[test]
fn refusals_and_no_change_are_answered_like_the_edit() {
    let d = daemon();
    let r = crate::ctl::server::Handler::handle(&d, Request::DryRun(Box::new(Request::BackendSet { service: "web".into(), name: "zz".into(), fields: fields(&[("weight", "3")]), if_generation: None })));
    assert!(matches!(&r, Response::Error { message } if message.contains("has no backend zz")), "{r:?}");
    let r = crate::ctl::server::Handler::handle(&d, Request::DryRun(Box::new(Request::BackendSet { service: "web".into(), name: "a1".into(), fields: fields(&[("weight", "3")]), if_generation: Some(7) })));
    assert!(matches!(&r, Response::Error { message } if message.contains("not 7")), "{r:?}");
    let rep = dry(&d, &Request::BackendSet { service: "web".into(), name: "a1".into(), fields: fields(&[("weight", "50")]), if_generation: None });
    assert_eq!(rep.changes, vec!["no change".to_string()]);
    assert!(rep.services.is_empty());
    let r = crate::ctl::server::Handler::handle(&d, Request::DryRun(Box::new(Request::Status)));
    assert!(matches!(&r, Response::Error { message } if message.contains("only editing requests")), "{r:?}");
}

/// A service without backends (added, edited or removed) is one entry with no classes and
/// no re-picks, which `spillwayctl` prints as one line: it routes and tracks nothing.
#[test]
fn an_empty_service_is_one_entry_without_classes() {
    let d = daemon();
    let add = Request::ServiceAdd { name: "api".into(), fields: fields(&[("vip", "10.0.0.101"), ("port", "8080")]), if_generation: None };
    let rep = dry(&d, &add);
    assert_eq!(rep.services.len(), 1, "{rep:#?}");
    let s = &rep.services[0];
    assert_eq!((s.service.as_str(), s.what.as_str(), s.classes.len(), s.repicked.len()), ("api", "added", 0, 0), "{rep:#?}");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, add), Response::Applied(_)));
    let set = Request::ServiceSet { name: "api".into(), fields: fields(&[("zonal_affinity", "STAY_WITHIN_ZONE")]), if_generation: None };
    let rep = dry(&d, &set);
    assert_eq!(rep.services.iter().map(|s| (s.service.as_str(), s.what.as_str(), s.classes.len(), s.repicked.len())).collect::<Vec<_>>(), [("api", "changed", 0, 0)], "{rep:#?}");
    let rep = dry(&d, &Request::ServiceRemove { name: "api".into(), if_generation: None });
    assert_eq!(rep.services.iter().map(|s| (s.service.as_str(), s.what.as_str(), s.classes.len(), s.repicked.len())).collect::<Vec<_>>(), [("api", "removed", 0, 0)], "{rep:#?}");
}

/// Service `web`: failover threshold 70 %, primary group `p` of 4 endpoints with 2 down
/// (the threshold stage sends new connections to the failover backend `f`, no switch),
/// drain 600 s.
fn threshold_daemon() -> Daemon {
    let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nfailover_health_threshold = 70\nconnection_drain_timeout_sec = 600\n[[services.backends]]\nname = \"p\"\n");
    for k in 1..=4 {
        t += &format!("[[services.backends.endpoints]]\nname = \"e{k}\"\naddress = \"10.0.1.{k}\"\nmac = \"02:00:00:00:01:{k:02x}\"\n");
    }
    t += "[[services.backends]]\nname = \"f\"\nfailover = true\naddress = \"10.0.2.1\"\nmac = \"02:00:00:00:02:01\"\n";
    let d = Daemon::new(Config::from_toml(&t).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
    {
        let mut st = d.control.lock().unwrap();
        for k in [1, 2] {
            st.health.entry(("web".into(), "p".into(), format!("e{k}"))).or_default().healthy = false;
        }
        d.republish(&mut st);
        assert!(st.pools["web"].eligible.contains(&st.slots.slot("web", "f", "f").unwrap()), "the threshold stage gives f new connections");
        assert!(!st.pools["web"].failed_over);
    }
    d
}

/// f's drain mark in the published snapshot: (draining_until_ms is set, evicted).
fn f_marks(d: &Daemon) -> (bool, bool) {
    let f = d.control.lock().unwrap().slots.slot("web", "f", "f").unwrap();
    d.shared.with_snapshot(|s| s.backends.get(usize::from(f)).map(|b| (b.draining_until_ms.is_some(), b.evict_connections))).flatten().unwrap()
}

/// The drains that start when the failover-threshold stage ends (no pool switch) are in
/// the dry run, predicted by the daemon's own rule (`control::pools`): lowering
/// `failover_health_threshold` ends the stage, so `f` drains, and the edit applied marks it
/// so; disabling `f` instead keeps its connections (disabled backends do), in the dry run
/// and when applied.
#[test]
fn the_end_of_the_failover_threshold_stage_drains_in_the_dry_run_as_applied() {
    let d = threshold_daemon();
    let end = Request::ServiceSet { name: "web".into(), fields: fields(&[("failover_health_threshold", "30")]), if_generation: None };
    let rep = dry(&d, &end);
    let repicked: Vec<(&str, &str)> = rep.services.iter().flat_map(|s| &s.repicked).map(|r| (r.backend.as_str(), r.reason.as_str())).collect();
    assert_eq!(repicked, [("f", "drains for 600 s after the failover-threshold stage stops sending it new connections")], "{rep:#?}");
    assert_eq!(f_marks(&d), (false, false), "the dry run marked nothing published");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, end), Response::Applied(_)));
    assert_eq!(f_marks(&d), (true, false), "applied: f drains, as predicted");

    let d = threshold_daemon();
    let disable = Request::BackendSet { service: "web".into(), name: "f".into(), fields: fields(&[("enabled", "false")]), if_generation: None };
    let rep = dry(&d, &disable);
    assert!(rep.services.iter().all(|s| s.repicked.is_empty()), "a disabled backend keeps its connections: {rep:#?}");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, disable), Response::Applied(_)));
    assert_eq!(f_marks(&d), (false, false), "applied: f does not drain, as predicted");

    // with disable_connection_drain_on_failover the end of the stage evicts at once
    let d = threshold_daemon();
    assert!(matches!(crate::ctl::server::Handler::handle(&d, Request::ServiceSet { name: "web".into(), fields: fields(&[("disable_connection_drain_on_failover", "true")]), if_generation: None }), Response::Applied(_)));
    let end = Request::ServiceSet { name: "web".into(), fields: fields(&[("failover_health_threshold", "30")]), if_generation: None };
    let rep = dry(&d, &end);
    let repicked: Vec<&str> = rep.services.iter().flat_map(|s| &s.repicked).map(|r| r.reason.as_str()).collect();
    assert_eq!(repicked, ["evicted after the failover-threshold stage stops sending it new connections (disable_connection_drain_on_failover)"], "{rep:#?}");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, end), Response::Applied(_)));
    assert_eq!(f_marks(&d), (false, true), "applied: f evicted, as predicted");
}

/// A switch of the active pool (the primaries disabled: failover) drains the pool it left,
/// in the dry run as when applied (the rule's switch case, now from `control::pools` too).
#[test]
fn a_failover_switch_drains_the_pool_it_left_in_the_dry_run_as_applied() {
    let d = threshold_daemon();
    let off = Request::BackendSet { service: "web".into(), name: "p".into(), fields: fields(&[("enabled", "false")]), if_generation: None };
    let rep = dry(&d, &off);
    let repicked: Vec<(&str, &str)> = rep.services.iter().flat_map(|s| &s.repicked).map(|r| (r.endpoint.as_str(), r.reason.as_str())).filter(|(e, _)| ["e3", "e4"].contains(e)).collect();
    assert_eq!(repicked, [("e3", "drains for 600 s after the failover"), ("e4", "drains for 600 s after the failover")], "{rep:#?}");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, off), Response::Applied(_)));
    let st = d.control.lock().unwrap();
    assert!(st.pools["web"].failed_over);
    let e3 = st.slots.slot("web", "p", "e3").unwrap();
    assert_eq!(d.shared.with_snapshot(|s| s.backends[usize::from(e3)].draining_until_ms.is_some()), Some(true), "applied: e3 drains, as predicted");
}

/// [`threshold_daemon`] after its primaries recovered: the failover-threshold stage
/// ended, so `f` drains (not evicted).
fn draining_f_daemon() -> Daemon {
    let d = threshold_daemon();
    {
        let mut st = d.control.lock().unwrap();
        for k in [1, 2] {
            st.health.entry(("web".into(), "p".into(), format!("e{k}"))).or_default().healthy = true;
        }
        d.republish(&mut st);
    }
    assert_eq!(f_marks(&d), (true, false), "f drains (the threshold stage ended)");
    d
}

/// An edit that cuts a running drain short is in the dry run, as applied: with `f`
/// draining (the threshold stage ended), `connection_drain_timeout_sec = 0` or
/// `disable_connection_drain_on_failover = true` evicts its connections at the edit's
/// republication, and a shorter timeout brings the deadline nearer.
#[test]
fn an_edit_that_cuts_a_running_drain_is_predicted_as_applied() {
    for (field, value, evicted, says) in [
        ("connection_drain_timeout_sec", "0", true, "evicted now (connection_drain_timeout_sec = 0)"),
        ("disable_connection_drain_on_failover", "true", true, "evicted now (disable_connection_drain_on_failover)"),
        ("connection_drain_timeout_sec", "300", false, "ends 300 s sooner (connection_drain_timeout_sec = 300)"),
    ] {
        let d = draining_f_daemon();
        let req = Request::ServiceSet { name: "web".into(), fields: fields(&[(field, value)]), if_generation: None };
        let rep = dry(&d, &req);
        assert!(matches!(crate::ctl::server::Handler::handle(&d, req), Response::Applied(_)));
        assert_eq!(f_marks(&d), (!evicted, evicted), "{field} = {value} applied");
        let f: Vec<&str> = rep.services.iter().flat_map(|s| &s.repicked).filter(|r| r.backend == "f").map(|r| r.reason.as_str()).collect();
        assert!(f.len() == 1 && f[0].contains(says), "{field} = {value}: {rep:#?}");
    }
}

/// A new `maglev_table_size` reshuffles owners across backends with every share
/// unchanged: the dry run's backend figure follows the owners, as `explain` sees it
/// applied (single-address backends: every move is a change of backend).
#[test]
fn a_table_size_change_moves_connections_between_backends_with_equal_shares() {
    let d = daemon();
    let before = picks(&d, "10.1.0.5");
    let req = Request::ServiceSet { name: "web".into(), fields: fields(&[("maglev_table_size", "65537")]), if_generation: None };
    let rep = dry(&d, &req);
    let z1 = rep.services[0].classes.iter().find(|c| c.class == "z1").unwrap();
    assert!(z1.shares.iter().all(|sh| (sh.before - sh.after).abs() <= 1e-9) && z1.moved_share > 0.3, "{z1:#?}");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, req), Response::Applied(_)));
    let after = picks(&d, "10.1.0.5");
    let backend = |p: &Option<String>| p.as_deref().and_then(|s| s.split('/').next()).map(str::to_string);
    let changed = before.iter().zip(&after).filter(|(x, y)| backend(x) != backend(y)).count() as f64 / f64::from(PORTS);
    assert!((z1.backend_moved_share - changed).abs() < 0.02, "predicted {} of new connections change backend, {} did", z1.backend_moved_share, changed);
}

/// A running drain cut by removing the draining backend is in the dry run (its
/// connections are re-picked at once when applied).
#[test]
fn removing_a_draining_backend_is_predicted() {
    let d = draining_f_daemon();
    let req = Request::BackendRemove { service: "web".into(), name: "f".into(), if_generation: None };
    let rep = dry(&d, &req);
    let f: Vec<&str> = rep.services.iter().flat_map(|s| &s.repicked).filter(|r| r.backend == "f").map(|r| r.reason.as_str()).collect();
    assert_eq!(f, ["its running drain is cut: removed"], "{rep:#?}");
}

/// An edit of a service's port, VIP or forwarding mode changes no Maglev table, yet its
/// tracked connections feel it: the dry run says how (a note, which also keeps
/// `spillwayctl` from printing "routing unchanged"); an edit that changes neither routing
/// nor addresses (a drain timeout) gets no note.
#[test]
fn address_and_forwarding_changes_say_what_tracked_connections_get() {
    let d = daemon();
    let set = |f: &[(&str, &str)]| dry(&d, &Request::ServiceSet { name: "web".into(), fields: fields(f), if_generation: None });
    let rep = set(&[("port", "8081")]);
    assert!(rep.services.is_empty(), "{rep:#?}");
    assert_eq!(rep.notes.len(), 1, "{rep:#?}");
    assert!(rep.notes[0].starts_with("service web: 10.0.0.100:80/tcp -> 10.0.0.100:8081/tcp:") && rep.notes[0].contains("dropped (no_service or not_for_vip)"), "{rep:#?}");
    let rep = set(&[("vip", "10.0.0.109")]);
    assert!(rep.notes.iter().any(|n| n.contains("10.0.0.100:80/tcp -> 10.0.0.109:80/tcp")), "{rep:#?}");
    let rep = set(&[("forwarding_mode", "GUE")]);
    assert!(rep.notes.iter().any(|n| n.contains("forwarding_mode L2_DSR -> GUE") && n.contains("keep their backends")), "{rep:#?}");
    let rep = set(&[("connection_drain_timeout_sec", "77")]);
    assert!(rep.notes.is_empty() && rep.services.is_empty() && rep.changes.iter().all(|c| !c.starts_with("no change")), "{rep:#?}");
}

/// A renamed backend is removed and a new one added, even when the new one takes the slot
/// the old one freed (with a new incarnation) in the same edit: its connections read as
/// `removed`, as for `backend remove` (QA: they read "address changed"); the same backend
/// with a new address still reads "address changed".
#[test]
fn a_renamed_backend_reads_as_removed_not_as_a_new_address() {
    let d = daemon();
    let a1 = d.control.lock().unwrap().slots.slot("web", "a1", "a1").unwrap();
    let renamed = Request::ConfigApply { toml: ZONED.replace("name = \"a1\"", "name = \"a1x\""), if_generation: None };
    let rep = dry(&d, &renamed);
    let repicked: Vec<(&str, &str)> = rep.services.iter().flat_map(|s| &s.repicked).map(|r| (r.backend.as_str(), r.reason.as_str())).collect();
    assert_eq!(repicked, [("a1", "removed")], "{rep:#?}");
    let moved = dry(&d, &Request::BackendSet { service: "web".into(), name: "a1".into(), fields: fields(&[("address", "10.0.1.9")]), if_generation: None });
    let repicked: Vec<(&str, &str)> = moved.services.iter().flat_map(|s| &s.repicked).map(|r| (r.backend.as_str(), r.reason.as_str())).collect();
    assert_eq!(repicked, [("a1", "address changed (a new endpoint)")], "{moved:#?}");
    // the case at hand: applied, a1x has a1's slot under a new incarnation
    assert!(matches!(crate::ctl::server::Handler::handle(&d, renamed), Response::Applied(_)));
    assert_eq!(d.control.lock().unwrap().slots.slot("web", "a1x", "a1x"), Some(a1), "the rename reuses the freed slot");
}

/// `STAY_WITHIN_ZONE`: z1 has b1 and b2, z2 only b3; ports, zones and the two zones'
/// client prefixes as in [`ZONED`].
fn stay() -> String {
    let head = &ZONED[..ZONED.find("[[client_zones]]\nprefix = \"10.8.0.0/16\"").expect("ZONED's third client prefix")];
    format!("{head}{}", STAY_SERVICE)
}

const STAY_SERVICE: &str = r#"[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
zonal_affinity = "STAY_WITHIN_ZONE"
[[services.backends]]
name = "b1"
address = "10.0.1.1"
mac = "02:00:00:00:0b:01"
zone = "z1"
[[services.backends]]
name = "b2"
address = "10.0.1.2"
mac = "02:00:00:00:0b:02"
zone = "z1"
[[services.backends]]
name = "b3"
address = "10.0.2.3"
mac = "02:00:00:00:0b:03"
zone = "z2"
"#;

/// Dry runs of `reqs` while a thread answers the workers' mailbox for `worker`.
fn dry_served(d: &Daemon, worker: &std::sync::Arc<std::sync::Mutex<crate::fastpath::worker::Worker>>, reqs: &[&Request]) -> Vec<DryRunReport> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let (sh, w, stop, started) = (d.shared.clone(), worker.clone(), stop.clone(), d.started);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sh.mailboxes[0].serve(|req| {
                    let mut w = w.lock().unwrap();
                    sh.with_snapshot(|s| w.control(req, s, started.elapsed().as_millis() as u32)).unwrap()
                });
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let reports = reqs.iter().map(|r| dry(d, r)).collect();
    stop.store(true, Ordering::Relaxed);
    serving.join().unwrap();
    reports
}

/// Tracked flows: (client address, client port).
pub(super) type Flows = Vec<([u8; 4], u16)>;

/// A daemon of `cfg` (the [`stay`] services) whose b3, z2's only backend, is unhealthy and
/// holds 37 tracked connections in a worker (served by hand): 6 of z1 clients, then 31 of
/// z2 clients. Returns the daemon, the worker and the flows.
pub(super) fn b3_unhealthy_with_37(cfg: &str) -> (Daemon, std::sync::Arc<std::sync::Mutex<crate::fastpath::worker::Worker>>, Flows) {
    use std::sync::{Arc, Mutex};
    let d = Daemon::new(Config::from_toml(cfg).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
    let port = crate::fastpath::worker::PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0 };
    let worker = Arc::new(Mutex::new(crate::fastpath::worker::Worker::new(0, 4096, 3, Default::default(), d.shared.stats[0].clone(), vec![port])));
    let (b3, inc) = {
        let mut st = d.control.lock().unwrap();
        st.health.entry(("web".into(), "b3".into(), "b3".into())).or_default().healthy = false;
        d.republish(&mut st);
        let b3 = st.slots.slot("web", "b3", "b3").unwrap();
        (b3, st.slots.incarnation(b3))
    };
    let service = d.shared.with_snapshot(|s| s.services[0].id).unwrap();
    let flows: Flows = (0..37u8).map(|i| if i < 6 { ([10, 1, 0, 10 + i], 40000 + u16::from(i)) } else { ([10, 2, 0, 10 + i], 41000 + u16::from(i)) }).collect();
    for (src, sport) in &flows {
        let k = crate::fastpath::conntrack::CtKey { src: u32::from(std::net::Ipv4Addr::from(*src)), sport: *sport, service };
        assert!(worker.lock().unwrap().ct.insert(&k, b3, inc, d.now_ms(), &crate::fastpath::conntrack::Timeouts::default()));
    }
    (d, worker, flows)
}

/// A TCP ACK from `src`:`sport` to 10.0.0.100:80, to the worker's port MAC: the fast
/// path tests' SYN frame, readdressed.
fn ack(src: [u8; 4], sport: u16) -> crate::fastpath::port::MemBuf {
    use crate::fastpath::port::PacketBuf;
    let mut b = crate::fastpath::tests::syn(80);
    let f = b.data_mut();
    f[26..30].copy_from_slice(&src);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[47] = crate::wire::tcp_flags::ACK;
    b
}

/// QA: b3, the only backend of z2, is unhealthy with 37 tracked connections, 6 of z1
/// clients and 31 of z2 clients; `NEVER_PERSIST` is said to re-pick all 37, yet applied
/// only the 6 change backend: z2's table has no healthy backend, so its clients keep b3
/// (the worker's last resort is per client class). The dry run follows each listed
/// connection as the worker will, and says so; the connections that do change backend when
/// the edit is applied are the ones it counts. Without the workers' answer it names the
/// class that keeps b3.
#[test]
fn an_unhealthy_backend_says_which_connections_leave_as_applied() {
    use crate::fastpath::port::PacketBuf;
    let (d, worker, flows) = b3_unhealthy_with_37(&stay());
    let never = Request::ServiceSet { name: "web".into(), fields: fields(&[("connection_persistence_on_unhealthy_backends", "NEVER_PERSIST")]), if_generation: None };
    let b3_says = |rep: &DryRunReport| -> (String, Option<u64>) {
        let r: Vec<_> = rep.services.iter().flat_map(|s| &s.repicked).collect();
        assert_eq!(r.len(), 1, "{rep:#?}");
        assert_eq!(r[0].backend, "b3");
        (r[0].reason.clone(), r[0].connections)
    };
    // no worker answers: no count, and the reason names the class that keeps b3
    let (reason, n) = b3_says(&dry(&d, &never));
    assert_eq!(n, None);
    assert_eq!(reason, "unhealthy, and the service does not persist connections on unhealthy backends; clients of class z2 keep it (their class has no healthy backend: the last resort)");
    let (reason, n) = b3_says(&dry_served(&d, &worker, &[&never])[0]);
    assert_eq!(n, Some(37));
    assert_eq!(reason, "unhealthy, and the service does not persist connections on unhealthy backends: 6 move to another backend, 31 stay (their client class has no healthy backend: the last resort)");
    // applied: the next packet of each connection
    assert!(matches!(crate::ctl::server::Handler::handle(&d, never), Response::Applied(_)));
    let send_all = || -> Vec<bool> {
        let on_b3 = |(src, sport): &([u8; 4], u16)| {
            let mut b = ack(*src, *sport);
            let v = d.shared.with_snapshot(|s| worker.lock().unwrap().process(&mut b, 0, s, d.now_ms())).unwrap();
            assert_eq!(v, crate::fastpath::worker::Verdict::Forward);
            b.data()[0..6] == [2, 0, 0, 0, 0x0b, 3]
        };
        flows.iter().map(on_b3).collect()
    };
    assert_eq!(send_all(), (0..37).map(|i| i >= 6).collect::<Vec<_>>(), "the z1 clients' connections move, the z2 clients' stay on b3");
    // b3 is now already unhealthy, its 31 connections z2's last resort (fresh-user QA: a
    // dry run said "all stay" for an edit that then moved them all). An edit that leaves
    // z2 without a healthy backend does not list b3; one that gives z2 a healthy backend
    // says its 31 connections move, and they do.
    let weight = Request::BackendSet { service: "web".into(), name: "b1".into(), fields: fields(&[("weight", "5")]), if_generation: None };
    let b4 = Request::BackendAdd { service: "web".into(), name: "b4".into(), fields: fields(&[("address", "10.0.2.4"), ("mac", "02:00:00:00:0b:04"), ("zone", "z2")]), if_generation: None };
    let reps = dry_served(&d, &worker, &[&weight, &b4]);
    assert!(reps[0].services.iter().all(|s| s.repicked.is_empty()), "nothing leaves b3");
    let (reason, n) = b3_says(&reps[1]);
    assert_eq!(n, Some(31));
    assert_eq!(reason, "already unhealthy without persistence; its last-resort connections: 31 move to another backend");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, b4), Response::Applied(_)));
    assert_eq!(send_all(), vec![false; 37], "applied: the 31 leave b3 too");
}

/// A backend without a MAC whose next hop failed resolution is not eligible, in the
/// running snapshot and in a dry run's edited one alike: an edit that changes no routing
/// reads "routing unchanged", and removing a1 moves z1's share to a2 and a3, not to the
/// unresolved one (QA: the dry run made its next hop pending again, so every dry run moved
/// a third of z1 onto it, which the applied edit never did).
#[test]
fn an_unresolved_backend_stays_ineligible_in_the_dry_run() {
    let text = ZONED.to_string() + "[[services.backends]]\nname = \"a4\"\naddress = \"10.0.1.4\"\nzone = \"z1\"\n";
    let d = Daemon::new(Config::from_toml(&text).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
    {
        let mut st = d.control.lock().unwrap();
        let (cfg, q) = (st.cfg.clone(), crate::neighbor::NeighborQueues::new(1));
        for now in (0..=5_000).step_by(50) {
            st.neighbors.tick(&cfg, &q, now);
        }
        assert_eq!(st.neighbors.view().get(&"10.0.1.4".parse().unwrap()), None, "a4's next hop failed");
        d.republish(&mut st);
    }
    let z1 = picks(&d, "10.1.0.5");
    assert!(z1.iter().all(|p| p.as_deref() != Some("a4/a4")), "a4 is not eligible");
    // `health show` says so too, and why (QA: it said "healthy static")
    let Response::Health(rows) = d.health_show() else { panic!() };
    let row = |b: &str| rows.iter().find(|r| r.backend == b).unwrap();
    assert!(!row("a4").healthy && row("a4").last_error.as_deref().is_some_and(|e| e.contains("10.0.1.4")), "{:?}", row("a4"));
    assert!(row("a1").healthy && row("a1").last_error.is_none(), "{:?}", row("a1"));
    let other = Request::ServiceSet { name: "web".into(), fields: fields(&[("connection_drain_timeout_sec", "300")]), if_generation: None };
    let rep = dry(&d, &other);
    assert!(rep.services.is_empty(), "web's routing is unchanged: {rep:#?}");
    let remove = Request::BackendRemove { service: "web".into(), name: "a1".into(), if_generation: None };
    let rep = dry(&d, &remove);
    let web = rep.services.iter().find(|s| s.service == "web").expect("web changes");
    let a4: Vec<_> = web.classes.iter().flat_map(|c| &c.shares).filter(|s| s.backend == "a4").collect();
    assert!(a4.iter().all(|s| s.after == 0.0), "a4 gets no share: {web:#?}");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, remove), Response::Applied(_)));
    assert!(picks(&d, "10.1.0.5").iter().all(|p| p.as_deref() != Some("a4/a4")), "applied: a4 still gets nothing");
}

mod already;
mod applied;
mod sessions;
