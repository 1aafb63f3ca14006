//! Snapshot compile cost: the routing pipeline for every client class of a service plus
//! one weighted Maglev table per distinct result (identical sets share a table).
//!
//! - `1svc_1000be_10zones`: 1 service × 1,000 backends in 10 zones, SPILL_CROSS_ZONE 0.8;
//! - `100svc_100be_10zones`: 100 services × 100 backends, same topology;
//! - `*_daemon_recompile_one_health_change`: the daemon's `control::compile` after one
//!   backend's health flipped (Maglev tables of unchanged sets are reused).
//!
//! Run: `cargo bench -p spillway-benches --bench snapshot_compile -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use spillway_shared::config::{Backend, ClientZone, Config, Location, Protocol, Service, ZonalAffinity};
use spillway_shared::maglev::{MaglevEntry, MaglevTable};
use spillway_shared::pipeline::{evaluate, BackendState, ServiceState, Topology};
use std::collections::HashMap;
use std::net::Ipv4Addr;

const ZONES: usize = 10;

fn config(services: usize, backends: usize) -> Config {
    let mut cfg = Config::default();
    for z in 0..ZONES {
        cfg.zones.push(Location { zone: format!("z{z}"), region: "r1".into() });
        cfg.client_zones.push(ClientZone {
            prefix: format!("10.{z}.0.0/16").parse().unwrap(),
            zone: Some(format!("z{z}")),
            compatible: true,
        });
    }
    cfg.forwarder = Some(Location { zone: "z0".into(), region: "r1".into() });
    for s in 0..services {
        let mut svc = Service::new(&format!("svc{s}"), Ipv4Addr::new(10, 200, (s / 250) as u8, (s % 250) as u8), 80, Protocol::Tcp);
        svc.zonal_affinity = ZonalAffinity::ZONAL_AFFINITY_SPILL_CROSS_ZONE;
        svc.spillover_ratio = Some(0.8);
        for b in 0..backends {
            let mut be = Backend::new(&format!("s{s}-b{b}"), &format!("z{}", b % ZONES));
            be.weight = 1 + (b as u32 % 100);
            svc.backends.push(be);
        }
        cfg.services.push(svc);
    }
    cfg.validate().unwrap();
    cfg
}

fn states(n: usize) -> Vec<BackendState> {
    (0..n).map(|i| if i % 7 == 3 { BackendState::unhealthy() } else { BackendState::healthy() }).collect()
}

/// Compiles the tables of every service: returns the number of tables built.
fn compile(cfg: &Config, topo: &Topology, st: &[Vec<BackendState>]) -> usize {
    let classes = topo.client_classes();
    let mut built = 0;
    for (svc, states) in cfg.services.iter().zip(st) {
        let mut ss = ServiceState::default();
        let mut tables: HashMap<Vec<(usize, u64)>, MaglevTable> = HashMap::new();
        for c in &classes {
            let d = evaluate(svc, states, topo, c, None, &mut ss, 0.0);
            let key: Vec<(usize, u64)> = d.weights.iter().map(|(i, w)| (*i, w.to_bits())).collect();
            tables.entry(key).or_insert_with(|| {
                built += 1;
                let e: Vec<MaglevEntry<'_>> = d.weights.iter().map(|&(i, w)| MaglevEntry { name: &svc.backends[i].name, weight: w }).collect();
                MaglevTable::build(&e, svc.maglev_table_size)
            });
        }
        black_box(&tables);
    }
    built
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_compile");
    g.sample_size(10);
    for (name, services, backends) in [("1svc_1000be_10zones", 1, 1000), ("100svc_100be_10zones", 100, 100)] {
        let cfg = config(services, backends);
        let topo = Topology::from_config(&cfg);
        let st: Vec<Vec<BackendState>> = cfg.services.iter().map(|s| states(s.backends.len())).collect();
        eprintln!("{name}: {} client classes, {} tables per compile", topo.client_classes().len(), compile(&cfg, &topo, &st));
        g.bench_function(name, |b| b.iter(|| compile(black_box(&cfg), &topo, &st)));
        // evaluate alone (all classes), without Maglev
        g.bench_function(format!("{name}_evaluate_only"), |b| {
            b.iter(|| {
                let mut n = 0;
                for (svc, s) in cfg.services.iter().zip(&st) {
                    let mut ss = ServiceState::default();
                    for cl in topo.client_classes() {
                        n += evaluate(svc, s, &topo, &cl, None, &mut ss, 0.0).eligible.len();
                    }
                }
                n
            })
        });
        // The daemon's recompilation after ONE backend's health changed (control::compile,
        // which reuses the Maglev tables of unchanged sets): the cost of a health flap.
        let ports = cfg.ports.len().max(1);
        let mut slots = spillway_dataplane::control::SlotMap::default();
        slots.sync(&cfg).unwrap();
        let mut health = spillway_dataplane::control::HealthView::new();
        for svc in &cfg.services {
            for (i, b) in svc.backends.iter().enumerate() {
                health.entry((svc.name.clone(), b.name.clone(), b.name.clone())).or_default().healthy = i % 7 != 3;
            }
        }
        let mut states = HashMap::new();
        let mut gen = 1u64;
        let victim = (cfg.services[0].name.clone(), cfg.services[0].backends[0].name.clone(), cfg.services[0].backends[0].name.clone());
        g.bench_function(format!("{name}_daemon_recompile_one_health_change"), |b| {
            b.iter(|| {
                gen += 1;
                let h = health.entry(victim.clone()).or_default();
                h.healthy = !h.healthy;
                let snap = spillway_dataplane::control::compile(
                    &cfg,
                    &slots,
                    spillway_dataplane::control::CompileInput { health: &health, states: &mut states, now_sec: 0.0, generation: gen, port_addrs: vec![0; ports] },
                );
                black_box(snap.services.len())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
