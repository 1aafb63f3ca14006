//! Property test of incremental compilation: after any sequence of health changes (one
//! at a time, or a tick's batch published once without the control lock) and live edits
//! (a backend's weight, an endpoint added, a service added or removed, a `config apply`
//! with one change) and next-hop changes (an ARP reply, an entry expiring), the published snapshot equals a full compilation of the same config,
//! slots, health and next hops, and the slots equal a sync of the whole config.

use crate::control::snapshot::Snapshot;
use crate::control::{compile_with_neighbors, CompileInput};
use crate::daemon::Daemon;
use crate::health::HealthEvent;
use proptest::prelude::*;
use spillway_shared::config::Config;
use spillway_shared::proto::{Request as R, Response};
use std::fmt::Write;

const SERVICES: usize = 5;

/// Five services in two zones, each two backends of three endpoints (one service with
/// a failover backend, one zonal), small Maglev tables.
fn config() -> Config {
    let mut t = String::from(
        "[dataplane]\neal_args = [\"--no-huge\"]\nworkers = 1\n[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n\
         [[zones]]\nzone = \"z1\"\nregion = \"r1\"\n[[zones]]\nzone = \"z2\"\nregion = \"r1\"\n\
         [[client_zones]]\nprefix = \"10.1.0.0/16\"\nzone = \"z1\"\n[[client_zones]]\nprefix = \"10.2.0.0/16\"\nzone = \"z2\"\n",
    );
    for s in 0..SERVICES {
        let _ = write!(t, "[[services]]\nname = \"s{s}\"\nvip = \"10.0.0.{}\"\nport = 80\nmaglev_table_size = 251\n", 100 + s);
        if s == 1 {
            t += "zonal_affinity = \"ZONAL_AFFINITY_SPILL_CROSS_ZONE\"\nspillover_ratio = 0.5\n";
        }
        for b in 0..2 {
            let _ = write!(t, "[[services.backends]]\nname = \"b{b}\"\nzone = \"z{}\"\n", b + 1);
            if s == 2 && b == 1 {
                t += "failover = true\n";
            }
            for e in 0..3 {
                let _ = write!(t, "[[services.backends.endpoints]]\nname = \"e{e}\"\naddress = \"10.{}.{b}.{e}\"\nmac = \"02:00:00:{s:02x}:{b:02x}:{e:02x}\"\n", 20 + s);
            }
        }
    }
    // Two more services whose endpoints have no `mac` (resolved by ARP), at the same
    // addresses: a resolved next hop changes both.
    for r in 0..2 {
        let _ = write!(t, "[[services]]\nname = \"r{r}\"\nvip = \"10.0.2.{r}\"\nport = 80\nmaglev_table_size = 251\n");
        for b in 0..2 {
            let _ = write!(t, "[[services.backends]]\nname = \"b{b}\"\n");
            for e in 0..2 {
                let _ = write!(t, "[[services.backends.endpoints]]\nname = \"e{e}\"\naddress = \"10.30.{b}.{e}\"\n");
            }
        }
    }
    let cfg = Config::from_toml(&t).unwrap();
    cfg.validate().unwrap();
    cfg
}

/// The daemon of [`config`], resolving next hops on its port (10.0.0.2).
fn daemon() -> Daemon {
    let d = Daemon::new(config(), 1, vec![0x0a00_0002], Box::new(|_| Default::default())).unwrap();
    d.control.lock().unwrap().neighbors.set_ports(vec![crate::neighbor::driver::PortSide { mac: [2, 0, 0, 0, 0, 2], addr: std::net::Ipv4Addr::new(10, 0, 0, 2), forwarding: true }]);
    d
}

#[derive(Clone, Debug)]
enum Op {
    /// One endpoint's health, published at once (`set_endpoint_health`).
    Flip { s: usize, b: usize, e: usize, healthy: bool },
    /// A tick's batch of events, published once without the lock.
    Batch(Vec<(usize, usize, usize, bool)>),
    /// A backend's weight (an incremental edit).
    Weight { s: usize, b: usize, w: u32 },
    /// An endpoint added to a backend (new slot).
    AddEndpoint { s: usize, b: usize, n: u8 },
    /// A service added then, later, removed (a change of structure).
    AddService(u8),
    RemoveService(u8),
    /// `config apply` of the whole running config with one backend's weight changed
    /// (parsed piece by piece from the last applied text: `config::chunked`).
    Apply { s: usize, b: usize, w: u32 },
    /// An ARP reply for next hop 10.30.b.e (MAC ending in `mac`), then a neighbour tick
    /// `ms` later (a new or changed MAC, or an entry expiring on a long gap).
    Neighbor { b: u8, e: u8, mac: u8, ms: u64 },
    /// One endpoint of a service without `mac` changes health: one coming back up has its
    /// next hop re-resolved, which changes the other service at the same address too.
    FlipResolved { r: u8, b: u8, e: u8, healthy: bool },
}

fn op() -> impl Strategy<Value = Op> {
    let ep = (0..SERVICES, 0..2usize, 0..3usize, any::<bool>());
    prop_oneof![
        4 => ep.clone().prop_map(|(s, b, e, healthy)| Op::Flip { s, b, e, healthy }),
        3 => prop::collection::vec(ep, 1..12).prop_map(Op::Batch),
        2 => (0..SERVICES, 0..2usize, 1..200u32).prop_map(|(s, b, w)| Op::Weight { s, b, w }),
        1 => (0..SERVICES, 0..2usize, 0..4u8).prop_map(|(s, b, n)| Op::AddEndpoint { s, b, n }),
        1 => (0..3u8).prop_map(Op::AddService),
        1 => (0..3u8).prop_map(Op::RemoveService),
        2 => (0..SERVICES, 0..2usize, 1..200u32).prop_map(|(s, b, w)| Op::Apply { s, b, w }),
        2 => (0..2u8, 0..2u8, 1..4u8, prop_oneof![Just(50u64), Just(400_000u64)]).prop_map(|(b, e, mac, ms)| Op::Neighbor { b, e, mac, ms }),
        2 => (0..2u8, 0..2u8, 0..2u8, any::<bool>()).prop_map(|(r, b, e, healthy)| Op::FlipResolved { r, b, e, healthy }),
    ]
}

/// The snapshot in a canonical text form: maps sorted, creation time, generation and
/// draining marks left out (the marks are computed by `pools` over either snapshot).
fn canon(s: &Snapshot) -> String {
    let mut o = String::new();
    for ss in &s.services {
        let _ = writeln!(o, "{ss:?}");
    }
    for b in &s.backends {
        let _ = writeln!(o, "{:?}", crate::control::snapshot::BackendSlot { evict_connections: false, draining_until_ms: None, ..b.clone() });
    }
    let sorted = |v: Vec<String>| -> String {
        let mut v = v;
        v.sort();
        v.join(",")
    };
    let _ = writeln!(o, "{}", sorted(s.by_vip_port.iter().map(|x| format!("{x:?}")).collect()));
    let _ = writeln!(o, "{}", sorted(s.by_vip_proto.iter().map(|x| format!("{x:?}")).collect()));
    let _ = writeln!(o, "{}", sorted(s.by_vip6_port.iter().map(|x| format!("{x:?}")).collect()));
    let _ = writeln!(o, "{}", sorted(s.by_vip6_proto.iter().map(|x| format!("{x:?}")).collect()));
    let _ = writeln!(o, "{}", sorted(s.arp_addrs.keys().map(|x| format!("{x:?}")).collect()));
    let _ = writeln!(o, "{}", sorted(s.nd_addrs.keys().map(|x| format!("{x:?}")).collect()));
    let _ = writeln!(o, "{:?} {:?} {:?} {:?} {:?} {:?}", s.by_number, s.classes, s.incompatible_class, s.class_names, s.port_addrs, s.port_addrs6);
    o
}

fn event(d: &Daemon, (s, b, e, healthy): (usize, usize, usize, bool)) -> HealthEvent {
    let generation = d.control.lock().unwrap().health_generation;
    HealthEvent { service: format!("s{s}"), backend: format!("b{b}"), endpoint: format!("e{e}"), healthy, rtt_ms: None, reason: "test".into(), generation }
}

fn edit(d: &Daemon, r: R) {
    match d.edit_request(r) {
        Response::Applied(_) | Response::Error { .. } => {}
        other => panic!("{other:?}"),
    }
}

/// Runs `op` on `d`; `clock` is the time of the last neighbour tick (ms since start).
fn run(d: &Daemon, op: Op, clock: &mut u64) {
    match op {
        Op::FlipResolved { r, b, e, healthy } => {
            d.set_endpoint_health(&format!("r{r}"), &format!("b{b}"), &format!("e{e}"), healthy, None);
        }
        Op::Neighbor { b, e, mac, ms } => {
            let reply = crate::neighbor::NeighborSeen::arp(0, std::net::Ipv4Addr::new(10, 30, b, e), [2, 0, 0, 0x30, b, mac], std::net::Ipv4Addr::new(10, 0, 0, 2), *clock as u32);
            let _ = d.shared.neighbors.seen[0].push(reply);
            *clock += ms;
            d.neighbor_tick_at(*clock);
        }
        Op::Flip { s, b, e, healthy } => {
            d.set_endpoint_health(&format!("s{s}"), &format!("b{b}"), &format!("e{e}"), healthy, None);
        }
        Op::Batch(evs) => {
            let evs: Vec<HealthEvent> = evs.into_iter().map(|x| event(d, x)).collect();
            crate::control_loop::apply_health_batch(d, &evs);
        }
        Op::Weight { s, b, w } => edit(d, R::BackendSet { service: format!("s{s}"), name: format!("b{b}"), fields: vec![("weight".into(), w.to_string())], if_generation: None }),
        Op::AddEndpoint { s, b, n } => edit(
            d,
            R::EndpointAdd {
                service: format!("s{s}"),
                backend: format!("b{b}"),
                name: format!("x{n}"),
                fields: vec![("address".into(), format!("10.{}.{b}.{}", 20 + s, 100 + n)), ("mac".into(), format!("02:00:01:{s:02x}:{b:02x}:{n:02x}"))],
                if_generation: None,
            },
        ),
        Op::AddService(n) => edit(
            d,
            R::ServiceAdd {
                name: format!("n{n}"),
                fields: vec![("vip".into(), format!("10.0.1.{n}")), ("port".into(), "80".into()), ("maglev_table_size".into(), "251".into())],
                if_generation: None,
            },
        ),
        Op::RemoveService(n) => edit(d, R::ServiceRemove { name: format!("n{n}"), if_generation: None }),
        Op::Apply { s, b, w } => {
            let mut cfg = d.control.lock().unwrap().cfg.clone();
            cfg.services[s].backends[b].weight = w;
            match d.config_apply(&cfg.to_toml(), None) {
                Response::Applied(_) => assert_eq!(d.control.lock().unwrap().cfg, cfg, "the applied file is the running config"),
                other => panic!("{other:?}"),
            }
        }
    }
}

/// A full compilation of the daemon's control state now.
fn full(d: &Daemon) -> Snapshot {
    let st = d.control.lock().unwrap();
    let mut states = st.states.clone();
    compile_with_neighbors(&st.cfg, &st.slots, CompileInput { health: &st.health, states: &mut states, now_sec: 0.0, generation: st.generation, port_addrs: d.port_addrs.clone() }, st.neighbors.view())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_published_snapshot_equals_a_full_compilation(ops in prop::collection::vec(op(), 1..24)) {
        let d = daemon();
        let mut clock = 0;
        for (i, o) in ops.into_iter().enumerate() {
            let before = d.shared.generation.load(std::sync::atomic::Ordering::Relaxed);
            let slots_before = d.control.lock().unwrap().slots.clone();
            run(&d, o.clone(), &mut clock);
            // The slots an edit synced for the services it changed are those a sync of the
            // whole config gives (`SlotMap::sync_delta`).
            let (mut got, mut want) = {
                let st = d.control.lock().unwrap();
                let mut want = slots_before;
                want.sync(&st.cfg).unwrap();
                (st.slots.clone(), want)
            };
            got.take_fresh();
            want.take_fresh();
            prop_assert!(got == want, "after op {} ({:?}): slots {:?} != {:?}", i, o, got, want);
            let published = d.shared.current();
            prop_assert!(published.generation >= before);
            let (got, want) = (canon(&published), canon(&full(&d)));
            let first = got.lines().zip(want.lines()).find(|(a, b)| a != b);
            prop_assert!(got == want, "after op {} ({:?}): first difference {:?}", i, o, first);
        }
    }
}

/// Nothing is recompiled for a service a change does not touch: its compiled form is
/// the previous snapshot's (the same allocation).
#[test]
fn untouched_services_are_shared_with_the_previous_snapshot() {
    let d = Daemon::new(config(), 1, vec![0x0a00_0002], Box::new(|_| Default::default())).unwrap();
    let before = d.shared.current();
    assert!(d.set_endpoint_health("s3", "b0", "e1", false, None));
    let after = d.shared.current();
    assert_eq!(after.generation, before.generation + 1);
    for (i, (a, b)) in before.services.iter().zip(&after.services).enumerate() {
        assert_eq!(std::sync::Arc::ptr_eq(a, b), i != 3, "service s{i}");
    }
    // a live edit of one backend recompiles that service only
    edit(&d, R::BackendSet { service: "s1".into(), name: "b1".into(), fields: vec![("weight".into(), "7".into())], if_generation: None });
    let edited = d.shared.current();
    for (i, (a, b)) in after.services.iter().zip(&edited.services).enumerate() {
        assert_eq!(std::sync::Arc::ptr_eq(a, b), i != 1, "service s{i}");
    }
}

/// A tick's batch of health events is published as one generation.
#[test]
fn a_batch_of_health_events_is_published_once() {
    let d = Daemon::new(config(), 1, vec![0x0a00_0002], Box::new(|_| Default::default())).unwrap();
    let g0 = d.shared.current().generation;
    let evs: Vec<HealthEvent> = (0..SERVICES).flat_map(|s| (0..3).map(move |e| (s, 0, e, false))).map(|x| event(&d, x)).collect();
    assert_eq!(evs.len(), 15);
    assert_eq!(crate::control_loop::apply_health_batch(&d, &evs), Some(g0 + 1));
    let snap = d.shared.current();
    assert_eq!(snap.generation, g0 + 1, "15 health changes, one publication");
    assert_eq!(snap.backends.iter().filter(|b| b.present && !b.healthy).count(), 15);
    // nothing changed: nothing published
    assert_eq!(crate::control_loop::apply_health_batch(&d, &evs), None);
    assert_eq!(d.shared.current().generation, g0 + 1);
}

/// Events already queued when a tick starts collecting are all taken by that tick (one
/// batch, one publication); a closed channel is reported.
#[test]
fn queued_events_are_collected_in_one_tick() {
    let d = Daemon::new(config(), 1, vec![0x0a00_0002], Box::new(|_| Default::default())).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for s in 0..SERVICES {
        for e in 0..3 {
            tx.send(event(&d, (s, 1, e, false))).unwrap();
        }
    }
    let (batch, closed) = crate::control_loop::collect_health(&rx, crate::control_loop::IDLE_TICK);
    assert_eq!((batch.len(), closed), (15, false));
    drop(tx);
    let (batch, closed) = crate::control_loop::collect_health(&rx, crate::control_loop::IDLE_TICK);
    assert!(batch.is_empty() && closed);
}
