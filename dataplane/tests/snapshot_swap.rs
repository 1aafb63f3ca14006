//! Snapshot publication with crossbeam-epoch under running workers (in-memory ports, no
//! EAL): every worker picks up each new snapshot at its next burst, old snapshots are
//! freed once every worker has moved on, and the time from `publish` to "every worker uses
//! it" is measured (printed; run with `--nocapture` to see it).

use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::control::{compile, CompileInput, HealthView, Shared, SlotMap};
use spillway_dataplane::fastpath::port::{Burst, MemBuf, MemPort};
use spillway_dataplane::fastpath::worker::{PortInfo, Worker};
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
    let mut handles = Vec::new();
    for w in 0..workers {
        let shared = shared.clone();
        handles.push(std::thread::spawn(move || {
            let mut worker = Worker::new(w, 1024, 1, Timeouts::default(), shared.stats[w].clone(), vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0 }]);
            let mut ports = vec![MemPort::new([2, 0, 0, 0, 0, 1])];
            let mut tx: Vec<Burst<MemBuf>> = vec![Burst::new()];
            while !shared.stop.load(Ordering::Relaxed) {
                let guard = crossbeam_epoch::pin();
                let s = shared.snapshot.load(Ordering::Acquire, &guard);
                // SAFETY: never null while running; protected by `guard`.
                if let Some(s) = unsafe { s.as_ref() } {
                    worker.poll(&mut ports, &mut tx, s, 0);
                }
                drop(guard);
                std::thread::yield_now();
            }
        }));
    }
    let mut lat = Vec::new();
    for gen in 2..=500u64 {
        health.entry(("web".into(), "b1".into())).or_default().healthy = gen % 2 == 0;
        let snap = build(gen, &health);
        let t0 = Instant::now();
        shared.publish(snap);
        while shared.stats.iter().any(|w| w.generation.load(Ordering::Relaxed) < gen) {
            assert!(t0.elapsed() < Duration::from_secs(5), "a worker never picked up generation {gen}");
            std::hint::spin_loop();
        }
        lat.push(t0.elapsed());
    }
    // generation-1 tables are dropped by crossbeam's deferred destruction once every
    // worker has unpinned; keep publishing/pinning until collected
    let t0 = Instant::now();
    while Arc::strong_count(&table1) > 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "snapshot of generation 1 never freed");
        let g = crossbeam_epoch::pin();
        g.flush();
        drop(g);
        std::thread::sleep(Duration::from_millis(1));
    }
    shared.stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
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
