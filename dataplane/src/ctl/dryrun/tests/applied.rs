//! Dry runs whose edited side depends on more than the edited config (QA item 3 of the
//! fresh-user run of fb88a17): the health the edit gives (a new or readdressed endpoint
//! starts unhealthy under a health check, a removed check makes its endpoints static
//! healthy) and the selection hash's own input (the session affinity), each checked
//! against the edit applied: live `explain` over sampled flows of every client class
//! before and after, against the predicted moved share, the predicted shares and the
//! "changes / unchanged" verdict. A property test does the same for random edits of a
//! random health state.

use super::fields;
use crate::daemon::Daemon;
use proptest::prelude::*;
use spillway_shared::config::Config;
use spillway_shared::dryrun::DryRunReport;
use spillway_shared::proto::{Request, Response};

/// The tests' config: [`super::ZONED`] (two zones, clients of each and of a not-compatible
/// prefix) with web health checked and spilling cross-zone below 80 % of z1's endpoints
/// healthy (QA's examples/null.toml shape), and a1, a2 made the group g1 (e1, e2): z1 has
/// g1 and a3, z2 has c1 and c2.
fn checked_cfg() -> String {
    let singles = "[[services.backends]]\nname = \"a1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0a:01\"\nzone = \"z1\"\n[[services.backends]]\nname = \"a2\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:0a:02\"\nzone = \"z1\"\n";
    let group = "[[services.backends]]\nname = \"g1\"\nzone = \"z1\"\n[[services.backends.endpoints]]\nname = \"e1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0a:01\"\n[[services.backends.endpoints]]\nname = \"e2\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:0a:02\"\n";
    let ratio = "spillover_ratio = 0.6\nmaglev_table_size = 4099\n";
    let checked = "spillover_ratio = 0.8\nmaglev_table_size = 4099\n[services.health_check]\ntype = \"tcp\"\ncheck_interval_sec = 30\ntimeout_sec = 5\n";
    assert!(super::ZONED.contains(singles) && super::ZONED.contains(ratio), "ZONED changed: adapt checked_cfg");
    super::ZONED.replace(singles, group).replace(ratio, checked)
}

/// Every endpoint of [`checked_cfg`] as (backend, endpoint).
const ENDPOINTS: [(&str, &str); 5] = [("g1", "e1"), ("g1", "e2"), ("a3", "a3"), ("c1", "c1"), ("c2", "c2")];

/// Client classes (snapshot names) and the first two octets of their prefix.
const CLASSES: [(&str, [u8; 2]); 3] = [("z1", [10, 1]), ("z2", [10, 2]), ("(not zonal)", [10, 8])];

/// Flows sampled per class: one client address each (a reduced affinity hashes the
/// address, so flows must not share one), with its own port.
const FLOWS: u32 = 2_000;

/// A daemon on [`checked_cfg`] with the endpoints of `down` unhealthy (as probes would leave
/// them), published.
fn checked(down: &[(&str, &str)]) -> Daemon {
    let d = Daemon::new(Config::from_toml(&checked_cfg()).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
    {
        let mut st = d.control.lock().unwrap();
        for (b, e) in down {
            st.health.entry(("web".into(), b.to_string(), e.to_string())).or_default().healthy = false;
        }
        d.republish(&mut st);
    }
    d
}

/// The sampled flows of one class: (client, client port), from a fixed LCG.
fn flows(prefix: [u8; 2]) -> Vec<(std::net::IpAddr, u16)> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ u64::from(prefix[1]);
    (0..FLOWS)
        .map(|i| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let r = (x >> 33) as u32;
            // distinct addresses: the index picks the address, the LCG the port
            let ip = std::net::Ipv4Addr::new(prefix[0], prefix[1], (i >> 8) as u8, i as u8);
            (ip.into(), 1024 + (r % 60_000) as u16)
        })
        .collect()
}

/// `backend/endpoint` live `explain` picks for each flow.
fn picks(d: &Daemon, flows: &[(std::net::IpAddr, u16)]) -> Vec<Option<String>> {
    flows
        .iter()
        .map(|(c, p)| match d.explain(*c, *p, None, None) {
            Response::Explain(r) => r.backend.zip(r.endpoint).map(|(b, e)| format!("{b}/{e}")),
            r => panic!("{r:?}"),
        })
        .collect()
}

/// Whether `spillwayctl` prints "routing unchanged" for `rep` (`ctl::dryrun::render`'s
/// condition for an edit that changes the config).
fn reads_unchanged(rep: &DryRunReport) -> bool {
    rep.services.is_empty() && rep.notes.is_empty()
}

/// Dry-runs `req` on `d`, applies it, and checks the dry run against what `explain` then
/// picks for every class: the moved share within 5 points (2,000 flows: 1σ ≤ 1.1 points),
/// each backend's predicted share after within 5 points of the share of flows it gets,
/// and a class whose flows move is listed (never "routing unchanged"). Returns the report,
/// or `None` when the edit is refused (then the dry run must be refused too).
fn check_against_applied(d: &Daemon, req: &Request) -> Option<DryRunReport> {
    let sampled: Vec<_> = CLASSES.iter().map(|(c, p)| (*c, flows(*p))).collect();
    let before: Vec<_> = sampled.iter().map(|(_, f)| picks(d, f)).collect();
    let dry_answer = crate::ctl::server::Handler::handle(d, Request::DryRun(Box::new(req.clone())));
    let applied = crate::ctl::server::Handler::handle(d, req.clone());
    let rep = match (dry_answer, applied) {
        (Response::DryRun(rep), Response::Applied(_)) => rep,
        (Response::Error { .. }, Response::Error { .. }) => return None,
        (x, y) => panic!("dry run and edit disagree: {x:?} / {y:?}"),
    };
    for (i, (class, f)) in sampled.iter().enumerate() {
        let after = picks(d, f);
        let n = f64::from(FLOWS);
        let moved = before[i].iter().zip(&after).filter(|(x, y)| x != y).count() as f64 / n;
        let listed = rep.services.iter().flat_map(|s| &s.classes).find(|c| c.class == *class);
        let predicted = listed.map_or(0.0, |c| c.moved_share);
        assert!((moved - predicted).abs() <= 0.05, "{req:?}\n{class}: predicted {predicted:.4}, moved {moved:.4}\n{rep:#?}");
        if moved > 0.0 {
            assert!(listed.is_some() && !reads_unchanged(&rep), "{req:?}\n{class}: {moved:.4} of its flows moved, the dry run lists no change\n{rep:#?}");
        }
        if let Some(c) = listed {
            for s in &c.shares {
                let got = after.iter().filter(|p| p.as_deref().is_some_and(|p| p.split('/').next() == Some(s.backend.as_str()))).count() as f64 / n;
                assert!((got - s.after).abs() <= 0.05, "{req:?}\n{class}: {} predicted {:.4} after, got {got:.4}\n{rep:#?}", s.backend, s.after);
            }
        }
    }
    Some(rep)
}

fn service_set(f: &[(&str, &str)]) -> Request {
    Request::ServiceSet { name: "web".into(), fields: fields(f), if_generation: None }
}

/// QA 3a: another session affinity hashes other fields, so new connections land
/// elsewhere although every table and share is the same.
#[test]
fn a_session_affinity_change_moves_new_connections() {
    let d = checked(&[]);
    let rep = check_against_applied(&d, &service_set(&[("session_affinity", "CLIENT_IP")])).unwrap();
    assert!(!reads_unchanged(&rep), "{rep:#?}");
    for c in rep.services.iter().flat_map(|s| &s.classes) {
        assert!(c.moved_share > 0.4, "{c:?}");
    }
    assert!(rep.notes.iter().any(|n| n.contains("session_affinity NONE -> CLIENT_IP") && n.contains("client address and VIP")), "{rep:#?}");
    // NONE and CLIENT_IP_PORT_PROTO hash the same 5-tuple: nothing moves
    let d = checked(&[]);
    let rep = check_against_applied(&d, &service_set(&[("session_affinity", "CLIENT_IP_PORT_PROTO")])).unwrap();
    assert!(rep.services.iter().all(|s| s.classes.is_empty()), "{rep:#?}");
}

/// QA 3b: with e1 and a3 down z1 spills (1/3 < 0.8); removing the health check makes them
/// static healthy at once, and z1's clients stop spilling.
#[test]
fn removing_the_health_check_while_endpoints_are_down_stops_the_spill() {
    let d = checked(&[("g1", "e1"), ("a3", "a3")]);
    let rep = check_against_applied(&d, &service_set(&[("health_check", "")])).unwrap();
    let z1 = rep.services.iter().flat_map(|s| &s.classes).find(|c| c.class == "z1").unwrap_or_else(|| panic!("{rep:#?}"));
    let zonal = z1.stages.iter().find(|s| s.stage == "zonal_affinity").unwrap_or_else(|| panic!("{z1:#?}"));
    assert!(zonal.before.contains("1/3") && zonal.after.contains("3/3"), "{zonal:?}");
    assert!(z1.shares.iter().any(|s| s.backend == "c1" && s.before > 0.0 && s.after == 0.0), "{z1:?}");
}

/// QA 3c: a backend added under a health check starts unhealthy, so z1 falls to 3/4 < 0.8
/// and its clients spill to z2, instead of spreading onto the new backend.
#[test]
fn an_added_backend_starts_unhealthy_under_a_health_check() {
    let d = checked(&[]);
    let add = Request::BackendAdd { service: "web".into(), name: "a4".into(), fields: fields(&[("address", "10.0.1.4"), ("mac", "02:00:00:00:0a:04"), ("zone", "z1")]), if_generation: None };
    let rep = check_against_applied(&d, &add).unwrap();
    let z1 = rep.services.iter().flat_map(|s| &s.classes).find(|c| c.class == "z1").unwrap_or_else(|| panic!("{rep:#?}"));
    let zonal = z1.stages.iter().find(|s| s.stage == "zonal_affinity").unwrap_or_else(|| panic!("{z1:#?}"));
    assert!(zonal.after.contains("3/4"), "{zonal:?}");
    assert!(z1.shares.iter().any(|s| s.backend == "a4" && s.after == 0.0) || z1.shares.iter().all(|s| s.backend != "a4"), "{z1:?}");
    assert!(z1.shares.iter().any(|s| s.backend == "c1" && s.before == 0.0 && s.after > 0.0), "{z1:?}");
}

/// QA 3d: an endpoint given a new address is a new endpoint and starts unhealthy: z1 falls
/// to 2/3 < 0.8 and spills; its tracked connections are re-picked as before.
#[test]
fn a_readdressed_endpoint_starts_unhealthy_under_a_health_check() {
    let d = checked(&[]);
    let set = Request::EndpointSet { service: "web".into(), backend: "g1".into(), name: "e1".into(), fields: fields(&[("address", "10.0.1.99")]), if_generation: None };
    let rep = check_against_applied(&d, &set).unwrap();
    let web = &rep.services[0];
    let z1 = web.classes.iter().find(|c| c.class == "z1").unwrap_or_else(|| panic!("{rep:#?}"));
    assert!(z1.stages.iter().any(|s| s.stage == "zonal_affinity" && s.after.contains("2/3")), "{z1:#?}");
    assert!(z1.shares.iter().any(|s| s.backend == "c1" && s.before == 0.0 && s.after > 0.0), "{z1:?}");
    assert!(web.repicked.iter().any(|r| r.endpoint == "e1" && r.reason.starts_with("address changed")), "{web:#?}");
}

/// A `client_zones` change moves clients between classes, which the per-class tables do
/// not show (each class's table may be unchanged): a note names the prefix and both
/// classes, so the answer never reads "routing unchanged", and applied, those clients
/// really take the other class's table.
#[test]
fn a_client_zone_change_names_the_clients_that_change_class() {
    let d = checked(&[]);
    let moved = checked_cfg().replace("prefix = \"10.2.0.0/16\"\nzone = \"z2\"", "prefix = \"10.2.0.0/16\"\nzone = \"z1\"");
    assert_ne!(moved, checked_cfg());
    let apply = Request::ConfigApply { toml: moved, if_generation: None };
    let rep = match crate::ctl::server::Handler::handle(&d, Request::DryRun(Box::new(apply.clone()))) {
        Response::DryRun(r) => r,
        r => panic!("{r:?}"),
    };
    assert!(!reads_unchanged(&rep), "{rep:#?}");
    assert!(rep.notes.iter().any(|n| n == "clients of 10.2.0.0/16: client class z2 -> z1: their new connections are picked from class z1's table"), "{rep:#?}");
    let z2_clients = flows([10, 2]);
    let before = picks(&d, &z2_clients);
    assert!(before.iter().all(|p| p.as_deref().is_some_and(|p| p.starts_with('c'))), "z2 clients stay in z2");
    assert!(matches!(crate::ctl::server::Handler::handle(&d, apply), Response::Applied(_)));
    let after = picks(&d, &z2_clients);
    assert!(after.iter().all(|p| p.as_deref().is_some_and(|p| !p.starts_with('c'))), "applied: 10.2 clients are z1's now");
}

/// One edit of the property test.
fn edit() -> impl Strategy<Value = Request> {
    let affinity = prop::sample::select(vec!["NONE", "CLIENT_IP_PORT_PROTO", "CLIENT_IP_PROTO", "CLIENT_IP", "CLIENT_IP_NO_DESTINATION"])
        .prop_map(|a| service_set(&[("session_affinity", a)]));
    let check = prop::sample::select(vec!["", "{ type = \"tcp\", check_interval_sec = 30, timeout_sec = 5 }"]).prop_map(|c| service_set(&[("health_check", c)]));
    let ratio = prop::sample::select(vec!["0.3", "0.6", "0.8", "1.0"]).prop_map(|r| service_set(&[("spillover_ratio", r)]));
    let single = prop::sample::select(vec!["a3", "c1", "c2"]);
    let weight = (single.clone(), 1u32..300).prop_map(|(b, w)| Request::BackendSet { service: "web".into(), name: b.into(), fields: fields(&[("weight", &w.to_string())]), if_generation: None });
    let readdress = single.clone().prop_map(|b| Request::BackendSet { service: "web".into(), name: b.into(), fields: fields(&[("address", "10.0.3.9")]), if_generation: None });
    let remove = single.prop_map(|b| Request::BackendRemove { service: "web".into(), name: b.into(), if_generation: None });
    let add = prop::sample::select(vec!["z1", "z2"]).prop_map(|z| Request::BackendAdd {
        service: "web".into(),
        name: "n1".into(),
        fields: fields(&[("address", "10.0.3.1"), ("mac", "02:00:00:00:0d:01"), ("zone", z)]),
        if_generation: None,
    });
    let endpoint = (prop::sample::select(vec!["e1", "e2"]), prop::sample::select(vec!["address", "enabled", "weight"])).prop_map(|(e, f)| {
        let v = match f {
            "address" => "10.0.3.7",
            "enabled" => "false",
            _ => "250",
        };
        Request::EndpointSet { service: "web".into(), backend: "g1".into(), name: e.into(), fields: fields(&[(f, v)]), if_generation: None }
    });
    let endpoint_add = Just(Request::EndpointAdd { service: "web".into(), backend: "g1".into(), name: "e3".into(), fields: fields(&[("address", "10.0.3.3"), ("mac", "02:00:00:00:0d:03")]), if_generation: None });
    prop_oneof![affinity, check, ratio, weight, readdress, remove, add, endpoint, endpoint_add]
}

proptest! {
    // A fixed seed: the 5-point tolerance is about 4.5σ of 2,000 flows, and a run must not
    // fail by chance (the cases differ by seed; 24 of them take ~40 s unoptimised).
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5EED_0003), ..ProptestConfig::default() })]

    /// For a random health state and a random edit, the dry run's moved shares, shares
    /// after and "changes / unchanged" verdict match the edit applied.
    #[test]
    fn random_edits_are_predicted_as_applied(down in prop::collection::vec(any::<bool>(), ENDPOINTS.len()), req in edit()) {
        let down: Vec<(&str, &str)> = ENDPOINTS.iter().zip(&down).filter(|(_, d)| **d).map(|(e, _)| *e).collect();
        let d = checked(&down);
        check_against_applied(&d, &req);
    }
}
