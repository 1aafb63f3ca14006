//! One semantics in two places: for random backend groups and endpoint
//! health, the daemon's compiled snapshot (`control::compile`: endpoint slots and Maglev
//! tables) and the scenario runner (`spillway_shared::scenario`, what `spillwayctl scenario
//! run` executes) pick the same eligible endpoints with the same shares, for every client
//! class. Daemon shares are measured on the Maglev tables (65,537 entries), so they match
//! within 1 % (Maglev NSDI 2016 §3.4).

use proptest::prelude::*;
use serde_json::json;
use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap};
use spillway_shared::config::{Backend, ClientZone, Config, Endpoint, Location, Protocol, Service, ZonalAffinity};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

#[derive(Clone, Debug)]
struct Ep {
    weight: u32,
    enabled: bool,
    healthy: bool,
}

#[derive(Clone, Debug)]
struct Be {
    weight: u32,
    priority: u32,
    failover: bool,
    enabled: bool,
    zone_z2: bool,
    /// `None`: the single-endpoint form (healthy flag only).
    group: Option<Vec<Ep>>,
    single_healthy: bool,
}

#[derive(Clone, Debug)]
struct Case {
    backends: Vec<Be>,
    failover_ratio: Option<f64>,
    threshold: Option<u32>,
    drain: bool,
    zonal: u8,
}

fn ep() -> impl Strategy<Value = Ep> {
    (prop::sample::select(vec![10u32, 25, 50, 100]), prop::bool::weighted(0.9), prop::bool::weighted(0.7)).prop_map(|(weight, enabled, healthy)| Ep { weight, enabled, healthy })
}

fn be() -> impl Strategy<Value = Be> {
    (
        prop::sample::select(vec![10u32, 30, 50, 100]),
        1u32..=2,
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.95),
        any::<bool>(),
        prop::option::weighted(0.8, prop::collection::vec(ep(), 1..=5)),
        prop::bool::weighted(0.8),
    )
        .prop_map(|(weight, priority, failover, enabled, zone_z2, group, single_healthy)| Be { weight, priority, failover, enabled, zone_z2, group, single_healthy })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(be(), 1..=5),
        prop::option::of(prop::sample::select(vec![0.3, 0.6])),
        prop::option::of(prop::sample::select(vec![50u32, 70, 90])),
        any::<bool>(),
        0u8..3,
    )
        .prop_map(|(backends, failover_ratio, threshold, drain, zonal)| Case { backends, failover_ratio, threshold, drain, zonal })
}

const CLIENTS: [&str; 3] = ["10.1.0.5", "10.2.0.5", "10.9.0.5"];

fn zonal(c: &Case) -> (ZonalAffinity, Option<f64>) {
    match c.zonal {
        0 => (ZonalAffinity::ZONAL_AFFINITY_DISABLED, None),
        1 => (ZonalAffinity::ZONAL_AFFINITY_SPILL_CROSS_ZONE, Some(0.5)),
        _ => (ZonalAffinity::ZONAL_AFFINITY_STAY_WITHIN_ZONE, None),
    }
}

fn zones() -> Vec<Location> {
    ["z1", "z2"].iter().map(|z| Location { zone: z.to_string(), region: "r1".into() }).collect()
}

fn client_zones() -> Vec<ClientZone> {
    vec![
        ClientZone { prefix: "10.1.0.0/16".parse().unwrap(), zone: Some("z1".into()), compatible: true },
        ClientZone { prefix: "10.2.0.0/16".parse().unwrap(), zone: Some("z2".into()), compatible: true },
    ]
}

/// The daemon side: config + per-endpoint health view -> compile -> shares per class,
/// measured on the tables, keyed `backend/endpoint`; `None` = new connections dropped.
fn daemon_side(c: &Case) -> Vec<Option<BTreeMap<String, f64>>> {
    let mut svc = Service::new("web", Ipv4Addr::new(10, 0, 0, 100), 80, Protocol::Tcp);
    svc.failover_ratio = c.failover_ratio;
    svc.failover_health_threshold = c.threshold;
    svc.auto_capacity_drain = c.drain;
    (svc.zonal_affinity, svc.spillover_ratio) = zonal(c);
    let mut health = HealthView::new();
    for (i, b) in c.backends.iter().enumerate() {
        let name = format!("b{i}");
        let mut cb = Backend::new(&name, if b.zone_z2 { "z2" } else { "z1" });
        (cb.weight, cb.priority, cb.failover, cb.enabled) = (b.weight, b.priority, b.failover, b.enabled);
        match &b.group {
            None => {
                cb.address = Ipv4Addr::new(10, 250, i as u8, 1).into();
                health.insert(("web".into(), name.clone(), name.clone()), spillway_dataplane::control::EndpointView { healthy: b.single_healthy, ..Default::default() });
            }
            Some(g) => {
                for (k, e) in g.iter().enumerate() {
                    let mut x = Endpoint::new(Some(&format!("e{k}")), Ipv4Addr::new(10, 250, i as u8, (k + 1) as u8));
                    (x.weight, x.enabled) = (e.weight, e.enabled);
                    cb.endpoints.push(x);
                    health.insert(("web".into(), name.clone(), format!("e{k}")), spillway_dataplane::control::EndpointView { healthy: e.healthy, ..Default::default() });
                }
            }
        }
        svc.backends.push(cb);
    }
    let cfg = Config { zones: zones(), client_zones: client_zones(), services: vec![svc], ..Default::default() };
    cfg.validate().unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let snap = compile(&cfg, &slots, CompileInput { health: &health, states: &mut Default::default(), now_sec: 0.0, generation: 1, port_addrs: vec![0] });
    CLIENTS
        .iter()
        .map(|cl| {
            let class = snap.class_of(u32::from(cl.parse::<Ipv4Addr>().unwrap()));
            let t = snap.services[0].tables[usize::from(class)].clone()?;
            let counts = t.maglev.slot_counts(t.backends.len());
            let mut m = BTreeMap::new();
            for (k, slot) in t.backends.iter().enumerate() {
                let (_, b, e) = slots.owner(*slot).unwrap().clone();
                *m.entry(format!("{b}/{e}")).or_insert(0.0) += counts[k] as f64 / t.maglev.len() as f64;
            }
            Some(m)
        })
        .collect()
}

/// The scenario side: the same inputs as a scenario file, one step per client.
fn scenario_side(c: &Case) -> Vec<Option<BTreeMap<String, f64>>> {
    let (za, spill) = zonal(c);
    let backends: Vec<serde_json::Value> = c
        .backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut v = json!({
                "name": format!("b{i}"), "zone": if b.zone_z2 { "z2" } else { "z1" }, "weight": b.weight,
                "priority": b.priority, "failover": b.failover, "enabled": b.enabled,
            });
            match &b.group {
                None => v["healthy"] = json!(b.single_healthy),
                Some(g) => {
                    v["group"] = g.iter().enumerate().map(|(k, e)| json!({ "name": format!("e{k}"), "weight": e.weight, "enabled": e.enabled, "healthy": e.healthy })).collect();
                }
            }
            v
        })
        .collect();
    let mut service = json!({ "zonal_affinity": za, "auto_capacity_drain": c.drain });
    if let Some(s) = spill {
        service["spillover_ratio"] = json!(s);
    }
    if let Some(r) = c.failover_ratio {
        service["failover_ratio"] = json!(r);
    }
    if let Some(t) = c.threshold {
        service["failover_health_threshold"] = json!(t);
    }
    let sc = json!({
        "name": "differential", "zones": zones(), "client_zones": client_zones(), "service": service, "backends": backends,
        "steps": CLIENTS.iter().map(|cl| json!({ "at_sec": 0.0, "client": cl, "expect": { "drop": false } })).collect::<Vec<_>>(),
    });
    let out = spillway_shared::scenario::run_scenario_text(&sc.to_string()).unwrap_or_else(|e| panic!("{e}\n{sc}"));
    out.into_iter()
        .map(|o| {
            assert!(o.config_error.is_none(), "{:?}", o.config_error);
            if o.drop {
                return None;
            }
            // single-endpoint backends without a group are named like their backend
            let mut m = o.endpoint_shares.clone();
            if c.backends.iter().all(|b| b.group.is_none()) {
                m = o.shares.iter().map(|(b, s)| (format!("{b}/{b}"), *s)).collect();
            }
            Some(m)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn compiled_snapshot_and_scenario_runner_agree(c in case()) {
        let d = daemon_side(&c);
        let s = scenario_side(&c);
        for (k, (d, s)) in d.iter().zip(&s).enumerate() {
            let (Some(d), Some(s)) = (d, s) else {
                prop_assert_eq!(d.is_none(), s.is_none(), "client {}: drop differs: daemon {:?} scenario {:?}", CLIENTS[k], d, s);
                continue;
            };
            let dk: Vec<&String> = d.keys().collect();
            let sk: Vec<&String> = s.keys().collect();
            prop_assert_eq!(&dk, &sk, "client {}: eligible endpoints differ: daemon {:?} scenario {:?}", CLIENTS[k], d, s);
            for (e, x) in d {
                prop_assert!((x - s[e]).abs() <= 0.01, "client {}: {} daemon {} scenario {}", CLIENTS[k], e, x, s[e]);
            }
        }
    }
}
