use super::*;
use crate::config::{Backend, ClientZone, Protocol, ZonalAffinity};
use proptest::prelude::*;

fn topo(forwarder: bool) -> Topology {
    let zones = vec![
        Location { zone: "z1".into(), region: "r1".into() },
        Location { zone: "z2".into(), region: "r1".into() },
        Location { zone: "y1".into(), region: "r2".into() },
    ];
    let cz = |p: &str, z: Option<&str>, c: bool| ClientZone { prefix: p.parse().unwrap(), zone: z.map(String::from), compatible: c };
    let clients = vec![
        cz("10.1.0.0/16", Some("z1"), true),
        cz("10.1.5.0/24", Some("z2"), true),
        cz("10.2.0.0/16", Some("z2"), true),
        cz("10.8.0.0/16", None, false),
        cz("10.9.0.0/16", Some("y1"), true),
        cz("fd01::/48", Some("z1"), true),
        cz("fd01:0:0:5::/64", Some("z2"), true),
        cz("fd08::/16", None, false),
    ];
    let fwd = forwarder.then(|| Location { zone: "z1".into(), region: "r1".into() });
    Topology::from_parts(fwd, &zones, &BTreeMap::new(), &clients)
}

#[test]
fn classify_lpm_and_compatibility() {
    let t = topo(true);
    let c = |s: &str| t.classify(s.parse::<std::net::IpAddr>().unwrap());
    assert_eq!(c("10.1.0.1"), ClientClass::Zone("z1".into()));
    assert_eq!(c("10.1.5.9"), ClientClass::Zone("z2".into()), "longest prefix wins");
    assert_eq!(c("10.8.0.1"), ClientClass::Incompatible, "compatible = false");
    assert_eq!(c("192.0.2.1"), ClientClass::Incompatible, "no match");
    assert_eq!(c("10.9.0.1"), ClientClass::Incompatible, "other region than the forwarder");
    // IPv6 clients: longest prefix over 128 bits, never matching IPv4 prefixes
    assert_eq!(c("fd01::7"), ClientClass::Zone("z1".into()));
    assert_eq!(c("fd01:0:0:5::7"), ClientClass::Zone("z2".into()), "longest IPv6 prefix wins");
    assert_eq!(c("fd08::1"), ClientClass::Incompatible, "compatible = false");
    assert_eq!(c("::ffff:10.1.0.1"), ClientClass::Incompatible, "an IPv4-mapped address is not an IPv4 client");
    assert_eq!(
        t.client_classes(),
        vec![ClientClass::Zone("z1".into()), ClientClass::Zone("z2".into()), ClientClass::Incompatible]
    );
    // without a forwarder location the region is unknown: every zone is compatible
    assert_eq!(topo(false).classify("10.9.0.1".parse::<std::net::IpAddr>().unwrap()), ClientClass::Zone("y1".into()));
}

fn svc(n: usize) -> Service {
    let mut s = Service::new("s", std::net::Ipv4Addr::new(10, 0, 0, 1), 80, Protocol::Tcp);
    for i in 0..n {
        s.backends.push(Backend::new(&format!("b{i}"), if i % 2 == 0 { "z1" } else { "z2" }));
    }
    s
}

#[test]
fn trace_has_every_stage_in_order() {
    let s = svc(4);
    let d = evaluate(&s, &vec![BackendState::healthy(); 4], &topo(true), &ClientClass::Zone("z1".into()), None, &mut ServiceState::default(), 0.0);
    let stages: Vec<&str> = d.trace.iter().map(|e| e.stage.as_str()).collect();
    assert_eq!(stages, ["availability", "tiers", "zonal_affinity", "isolation", "latency", "capacity", "failover_threshold", "weights"]);
    assert_eq!(d.eligible, vec![0, 1, 2, 3]);
    let json = serde_json::to_string(&d.trace).unwrap();
    let back: Vec<TraceEntry> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, d.trace);
}

#[test]
fn spill_numbers_in_trace() {
    let mut s = svc(10);
    s.zonal_affinity = ZonalAffinity::ZONAL_AFFINITY_SPILL_CROSS_ZONE;
    s.spillover_ratio = Some(0.8);
    let mut st = vec![BackendState::healthy(); 10];
    st[7] = BackendState::unhealthy();
    st[9] = BackendState::unhealthy();
    let d = evaluate(&s, &st, &topo(true), &ClientClass::Zone("z2".into()), None, &mut ServiceState::default(), 0.0);
    let z = d.trace.iter().find(|e| e.stage == "zonal_affinity").unwrap();
    assert_eq!(z.numbers["ratio"], 0.6);
    assert_eq!(z.numbers["C"], 5.0);
    assert_eq!(d.eligible.len(), 8);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the health: shares sum to 1 over the eligible set, eligible backends are
    /// enabled, and the same inputs give the same decision.
    #[test]
    fn invariants(health in proptest::collection::vec((0u32..=4, any::<bool>(), 1u32..=5, any::<bool>()), 0..12),
                  za in 0usize..3, fo in proptest::option::of(0.0f64..=1.0), client in 0usize..3) {
        let mut s = svc(health.len());
        s.zonal_affinity = [ZonalAffinity::ZONAL_AFFINITY_DISABLED, ZonalAffinity::ZONAL_AFFINITY_STAY_WITHIN_ZONE, ZonalAffinity::ZONAL_AFFINITY_SPILL_CROSS_ZONE][za];
        s.failover_ratio = fo;
        let mut states = Vec::new();
        for (i, (h, enabled, prio, failover)) in health.iter().enumerate() {
            s.backends[i].enabled = *enabled;
            s.backends[i].priority = *prio;
            s.backends[i].failover = *failover;
            states.push(BackendState { endpoints: 4, healthy_endpoints: *h, latency_ms: None, load_cps: 0.0 });
        }
        let t = topo(true);
        let class = t.client_classes()[client].clone();
        let d1 = evaluate(&s, &states, &t, &class, None, &mut ServiceState::default(), 0.0);
        let d2 = evaluate(&s, &states, &t, &class, None, &mut ServiceState::default(), 0.0);
        prop_assert_eq!(&d1, &d2);
        if d1.drop {
            prop_assert!(d1.eligible.is_empty() && d1.weights.is_empty());
            prop_assert!(!s.backends.iter().any(|b| b.enabled) || s.backends.is_empty()
                || d1.tier == TierKind::Drop);
        } else {
            let sum: f64 = d1.weights.iter().map(|w| w.1).sum();
            prop_assert!((sum - 1.0).abs() < 1e-9);
            for &i in &d1.eligible { prop_assert!(s.backends[i].enabled); }
        }
    }
}

/// The failover-threshold stage names the threshold in effect in its rule, in every case
/// (no failover backends, failed over, active), so that a dry run of
/// `failover_health_threshold` alone (which compares stage rules) says what the stage
/// would do instead of printing only the config diff; unset differs from any value too.
#[test]
fn failover_threshold_rule_names_the_threshold() {
    let rule = |pool: bool, primaries_healthy: bool, t: Option<u32>| {
        let mut s = svc(4);
        s.failover_health_threshold = t;
        s.backends[3].failover = pool;
        let mut st = vec![BackendState::healthy(); 4];
        if !primaries_healthy {
            st[..3].fill(BackendState::unhealthy());
        }
        let d = evaluate(&s, &st, &topo(true), &ClientClass::Zone("z1".into()), None, &mut ServiceState::default(), 0.0);
        d.trace.iter().find(|e| e.stage == "failover_threshold").unwrap().rule.clone()
    };
    for (pool, healthy) in [(false, true), (true, true), (true, false)] {
        let (unset, t50, t70) = (rule(pool, healthy, None), rule(pool, healthy, Some(50)), rule(pool, healthy, Some(70)));
        assert!(t50.contains("failover_health_threshold = 50 %") && t70.contains("failover_health_threshold = 70 %"), "{t50} / {t70}");
        assert!(unset != t70 && unset.contains("no service LB policy configured"), "{unset}");
    }
    assert!(rule(false, true, Some(50)).contains("no failover backends to send to: pass"));
    assert!(rule(true, false, Some(50)).contains("not on primaries: pass"));
    assert!(rule(true, true, Some(50)).starts_with("groups below failover_health_threshold = 50 % send to failover backends"));
}

/// The healthy-draining rule (docs/semantics.md "Choices" 3a; Kubernetes KEP-1669): b0 and
/// b1 draining (`capacity_scaler = 0`) and alive, b2 and b3 enabled but dead. The old
/// last resort chose the dead b2 and b3 (QA B41: 0 of 6 requests succeeded).
#[test]
fn healthy_draining_backends_serve_before_the_all_unhealthy_last_resort() {
    let run = |s: &Service, st: &[BackendState]| {
        evaluate(s, st, &topo(true), &ClientClass::Zone("z1".into()), None, &mut ServiceState::default(), 0.0)
    };
    let mut s = svc(4);
    s.backends[0].capacity_scaler = 0.0;
    s.backends[1].capacity_scaler = 0.0;
    let st = [BackendState::healthy(), BackendState::healthy(), BackendState::unhealthy(), BackendState::unhealthy()];
    let d = run(&s, &st);
    assert_eq!((d.tier, d.eligible.clone()), (TierKind::HealthyDraining, vec![0, 1]), "{:?}", d.trace[1]);
    assert!((d.share(0) - 0.5).abs() < 1e-12, "{:?}", d.weights);
    let tiers = &d.trace[1];
    assert!(tiers.rule.contains("healthy draining backends, before the all-unhealthy last resort"), "{}", tiers.rule);
    // the same with drop_traffic_if_unhealthy: those backends are healthy
    s.drop_traffic_if_unhealthy = true;
    assert_eq!(run(&s, &st).eligible, vec![0, 1]);
    s.drop_traffic_if_unhealthy = false;
    // a dead draining backend is no candidate; one live non-draining backend wins over them
    let st2 = [BackendState::unhealthy(), BackendState::healthy(), BackendState::unhealthy(), BackendState::unhealthy()];
    assert_eq!(run(&s, &st2).eligible, vec![1]);
    let st3 = [BackendState::healthy(), BackendState::healthy(), BackendState::healthy(), BackendState::unhealthy()];
    assert_eq!(run(&s, &st3).eligible, vec![2]);
    // draining primaries come before draining failover backends
    s.backends[0].failover = true;
    assert_eq!(run(&s, &st).eligible, vec![1]);
}

/// "Drop and withdraw" stays: when every enabled backend is draining (all `capacity_scaler
/// = 0`) or the others are disabled, nothing is sent to the draining ones.
#[test]
fn all_draining_or_disabled_still_drops() {
    let mut s = svc(4);
    let st = [BackendState::healthy(), BackendState::healthy(), BackendState::unhealthy(), BackendState::unhealthy()];
    for b in &mut s.backends {
        b.capacity_scaler = 0.0;
    }
    let d = evaluate(&s, &st, &topo(true), &ClientClass::Incompatible, None, &mut ServiceState::default(), 0.0);
    assert!(d.drop && d.tier == TierKind::Drop, "{d:?}");
    s.backends[2].capacity_scaler = 1.0;
    s.backends[3].capacity_scaler = 1.0;
    s.backends[2].enabled = false;
    s.backends[3].enabled = false;
    let d = evaluate(&s, &st, &topo(true), &ClientClass::Incompatible, None, &mut ServiceState::default(), 0.0);
    assert!(d.drop && d.tier == TierKind::Drop, "{d:?}");
}

/// An auto-drained backend (spec/service-lb-policy.md) is draining too: once the others
/// die it takes new connections on its healthy endpoints, not the dead backends.
#[test]
fn an_auto_drained_live_backend_serves_before_the_last_resort() {
    let mut s = svc(3);
    s.auto_capacity_drain = true;
    let group = |h: u32| BackendState { endpoints: 10, healthy_endpoints: h, latency_ms: None, load_cps: 0.0 };
    let mut ss = ServiceState::default();
    let d = evaluate(&s, &[group(2), group(10), group(10)], &topo(true), &ClientClass::Incompatible, None, &mut ss, 0.0);
    assert_eq!(d.eligible, vec![1, 2], "b0 is auto-drained");
    let d = evaluate(&s, &[group(2), group(0), group(0)], &topo(true), &ClientClass::Incompatible, None, &mut ss, 1.0);
    assert_eq!((d.tier, d.eligible), (TierKind::HealthyDraining, vec![0]));
}
