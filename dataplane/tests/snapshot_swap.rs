//! Snapshot publication under running workers (the real worker loop over in-memory ports,
//! no EAL): every worker picks up each new snapshot at its next burst, old snapshots are
//! freed on the control side once every worker has moved on (none on a worker thread), and the time from `publish` to "every worker uses
//! it" is measured (printed; run with `--nocapture` to see it).

use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::control::{compile, CompileInput, HealthView, Shared, SlotMap};
use spillway_dataplane::control::snapshot::{DROPPED, DROPPED_ON_WORKER};
use spillway_dataplane::fastpath::port::MemPort;
use spillway_dataplane::fastpath::worker::{run_loop, LoopParams, PortInfo, Worker};
use spillway_shared::config::Config;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CFG: &str = r#"
[[ports]]
name = "p0"
device = "net_null0"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
[[services.backends]]
name = "b1"
mac = "02:00:00:00:0b:01"
[[services.backends]]
name = "b2"
mac = "02:00:00:00:0b:02"
"#;

#[test]
fn workers_follow_every_publication_and_old_snapshots_are_freed() {
    let cfg = Config::from_toml(CFG).unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let mut health = HealthView::new();
    let mut states = HashMap::new();
    let mut build = |gen: u64, health: &HealthView| {
        compile(&cfg, &slots, CompileInput { health, states: &mut states, now_sec: 0.0, generation: gen, port_addrs: vec![0] })
    };
    let first = build(1, &health);
    // hold a reference to a table of generation 1: it must be released once freed
    let table1 = first.services[0].tables[0].clone().unwrap();
    let workers = 2;
    let shared = Arc::new(Shared::new(first, workers));
    let dropped_on_workers = DROPPED_ON_WORKER.load(Ordering::Relaxed);
    let dropped = DROPPED.load(Ordering::Relaxed);
    let mut handles = Vec::new();
    for w in 0..workers {
        let shared = shared.clone();
        handles.push(std::thread::spawn(move || {
            let mut worker = Worker::new(w, 1024, 1, Timeouts::default(), shared.stats[w].clone(), vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0 }]);
            let mut ports = vec![MemPort::new([2, 0, 0, 0, 0, 1])];
            let params = LoopParams { index: w, epoch: Instant::now(), idle_sleep: Duration::ZERO };
            run_loop(&mut worker, &mut ports, &shared, params, None);
        }));
    }
    let mut lat = Vec::new();
    for gen in 2..=500u64 {
        health.entry(("web".into(), "b1".into(), "b1".into())).or_default().healthy = gen % 2 == 0;
        let snap = build(gen, &health);
        let t0 = Instant::now();
        shared.publish(snap);
        while shared.stats.iter().any(|w| w.generation.load(Ordering::Acquire) < gen) {
            assert!(t0.elapsed() < Duration::from_secs(5), "a worker never picked up generation {gen}");
            std::hint::spin_loop();
        }
        lat.push(t0.elapsed());
    }
    // Every worker has reported generation 500: everything older is reclaimable, here on
    // the control side.
    shared.reclaim();
    assert_eq!(shared.retired(), 0, "retired snapshots left after every worker moved on");
    assert_eq!(Arc::strong_count(&table1), 1, "snapshot of generation 1 never freed");
    shared.stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    assert!(DROPPED.load(Ordering::Relaxed) - dropped >= 499, "the 499 replaced snapshots were dropped");
    assert_eq!(DROPPED_ON_WORKER.load(Ordering::Relaxed) - dropped_on_workers, 0, "a snapshot was dropped on a worker thread");
    lat.sort();
    let p = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
    println!(
        "publish -> all {workers} workers on the new snapshot: p50 {:?}, p99 {:?}, max {:?} ({} publications)",
        p(0.5),
        p(0.99),
        lat[lat.len() - 1],
        lat.len()
    );
}
