//! The control plane at scale: how long an event takes until the snapshot that holds it
//! is published (the workers pick a published snapshot up at their next poll iteration,
//! microseconds later), on the daemon's own control object (`Daemon`, no DPDK ports) at
//! 2,000 services × 10 endpoints and 1,000 services × 20 endpoints (two backend groups
//! per service, default Maglev table size 65,537).
//!
//! Each figure goes through the code the daemon runs:
//! - `one health flip`: one event sent on the health channel → the control loop's
//!   collection (`control_loop::collect_health`, which waits the 10 ms coalescing window)
//!   → `apply_health_batch` → published; also without the window (`apply + publish`);
//! - `400 flips at once`: 400 endpoints (of 20 or 40 services) down at once, until the last
//!   is published;
//! - `one backend set`: `spillwayctl backend set SVC B weight=N` as the socket server
//!   calls it (`Daemon::edit_request`), until it answers (the answer names the published
//!   generation);
//! - `config apply, one backend changed`: the whole file, one backend's weight changed;
//! - `scrape`: `GET /metrics` over HTTP from 1 and from 4 concurrent scrapers.
//!
//! Each edit and the rendering of a scrape also print the CPU time of the thread that ran
//! them (`CLOCK_THREAD_CPUTIME_ID`), which a host shared with other work does not inflate.
//!
//! Run: `cargo bench -p spillway-benches --bench control_plane` (figures in
//! docs/benchmarks-control.md). Options after `--`: `--runs N` (flips and edits, default
//! 20), `--only 2000x10|1000x20`.

use spillway_dataplane::control_loop::{apply_health_batch, collect_health, IDLE_TICK};
use spillway_dataplane::daemon::Daemon;
use spillway_dataplane::health::HealthEvent;
use spillway_shared::config::Config;
use spillway_shared::proto::{Request as R, Response};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// `services` services of two backends (zones z1, z2) with `per_backend` endpoints each,
/// every address and MAC distinct, with TCP health checks (the events are fed directly).
fn config(services: u32, per_backend: u32) -> String {
    let mut s = String::from(
        "[dataplane]\neal_args = [\"--no-huge\"]\nworkers = 1\n[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n\
         [[zones]]\nzone = \"z1\"\nregion = \"r1\"\n[[zones]]\nzone = \"z2\"\nregion = \"r1\"\n\
         [[client_zones]]\nprefix = \"10.1.0.0/16\"\nzone = \"z1\"\n[[client_zones]]\nprefix = \"10.2.0.0/16\"\nzone = \"z2\"\n\
",
    );
    for i in 0..services {
        let vip = std::net::Ipv4Addr::from(0x0a64_0000u32 + i + 1);
        let _ = write!(s, "[[services]]\nname = \"svc{i}\"\nvip = \"{vip}\"\nport = 80\n[services.health_check]\ntype = \"tcp\"\n");
        for g in 0..2 {
            let _ = write!(s, "[[services.backends]]\nname = \"g{g}\"\nzone = \"z{}\"\n", g + 1);
            for e in 0..per_backend {
                let n = (i * 2 + g) * per_backend + e;
                let a = std::net::Ipv4Addr::from(0xac10_0000u32 + n + 1);
                let _ = write!(s, "[[services.backends.endpoints]]\nname = \"e{e}\"\naddress = \"{a}\"\nmac = \"02:01:{:02x}:{:02x}:{:02x}:{:02x}\"\n", n >> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
            }
        }
    }
    s
}

fn event(d: &Daemon, svc: u32, g: u32, e: u32, healthy: bool) -> HealthEvent {
    let generation = d.control.lock().unwrap().health_generation;
    HealthEvent { service: format!("svc{svc}"), backend: format!("g{g}"), endpoint: format!("e{e}"), healthy, rtt_ms: None, reason: "bench".into(), generation }
}

struct Stats(Vec<f64>);

impl Stats {
    fn line(&self, what: &str, target_ms: f64) -> String {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        let med = v[v.len() / 2];
        let max = v[v.len() - 1];
        let verdict = if max <= target_ms { "ok" } else { "OVER" };
        format!("  {what:<44} median {med:>8.2} ms  max {max:>8.2} ms  (target <= {target_ms} ms: {verdict}, n={})", v.len())
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// CPU time the calling thread has used, ms (`CLOCK_THREAD_CPUTIME_ID`): what an event
/// costs whatever else the host runs (the wall-clock figures above include the time the
/// thread waited for a core on a shared host).
fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

fn cpu_line(what: &str, v: Vec<f64>) -> String {
    let mut v = v;
    v.sort_by(f64::total_cmp);
    format!("    {what:<42} CPU median {:>8.2} ms  max {:>8.2} ms", v[v.len() / 2], v[v.len() - 1])
}

/// Sends `events` on a channel and runs control ticks until they are all applied and
/// published; returns the time until the last publication.
fn through_the_loop(d: &Daemon, events: Vec<HealthEvent>) -> f64 {
    let (tx, rx) = std::sync::mpsc::channel();
    let n = events.len();
    let t = Instant::now();
    for ev in events {
        tx.send(ev).unwrap();
    }
    let mut seen = 0;
    while seen < n {
        let (batch, _) = collect_health(&rx, IDLE_TICK);
        seen += batch.len();
        apply_health_batch(d, &batch);
    }
    ms(t)
}

/// An `Accept` header as Prometheus sends it by default (`scrape_protocols`: OpenMetrics
/// preferred, the text format 0.0.4 as a fallback): the exposition an operator's
/// Prometheus gets, without the conversion a client asking for text costs.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

fn scrape(addr: std::net::SocketAddr) -> usize {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.write_all(format!("GET /metrics HTTP/1.1\r\nHost: bench\r\nAccept: {PROMETHEUS_ACCEPT}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut body = Vec::new();
    c.read_to_end(&mut body).unwrap();
    body.len()
}

fn bench(services: u32, per_backend: u32, runs: usize) {
    let text = config(services, per_backend);
    let cfg = Config::from_toml(&text).unwrap();
    cfg.validate().unwrap();
    let t = Instant::now();
    let mut d = Daemon::new(cfg, 1, vec![0x0a00_0002], Box::new(|_| Default::default())).unwrap();
    println!("{services} services x {} endpoints ({} endpoints): first compilation {:.0} ms", per_backend * 2, services * per_backend * 2, ms(t));
    let mut flips = Vec::new();
    let mut direct = Vec::new();
    for r in 0..runs as u32 {
        let svc = (r * 97) % services;
        flips.push(through_the_loop(&d, vec![event(&d, svc, 0, 0, false)]));
        let t = Instant::now();
        apply_health_batch(&d, &[event(&d, svc, 0, 0, true)]);
        direct.push(ms(t));
    }
    println!("{}", Stats(flips).line("one health flip (through the control loop)", 20.0));
    println!("{}", Stats(direct).line("one health flip (apply + publish)", 20.0));
    let mut storms = Vec::new();
    for r in 0..3u32 {
        // 400 endpoints of 400 / (2 x per_backend) services, all down at once, then back up
        let n_svc = 400 / (2 * per_backend);
        let evs = |healthy| (0..n_svc).flat_map(|i| (0..2).flat_map(move |g| (0..per_backend).map(move |e| (r * 50 + i, g, e)))).map(|(s, g, e)| event(&d, s, g, e, healthy)).collect::<Vec<_>>();
        let down = evs(false);
        assert_eq!(down.len(), 400);
        let g0 = d.shared.generation.load(std::sync::atomic::Ordering::Relaxed);
        storms.push(through_the_loop(&d, down));
        let published = d.shared.generation.load(std::sync::atomic::Ordering::Relaxed) - g0;
        let dead = d.shared.current().backends.iter().filter(|b| b.present && !b.healthy).count();
        assert_eq!(dead, 400, "all 400 marked down in the published snapshot");
        println!("    storm {r}: 400 down in {published} publication(s)");
        through_the_loop(&d, evs(true));
    }
    println!("{}", Stats(storms).line("400 flips at once (all published)", 500.0));
    edits(&d, services, runs, "", 0);
    // The same edits by a daemon started with `--config FILE` (the running config as the
    // file): each edit is also written back to the file (merged into its text, checked,
    // written, fsynced) before it is answered.
    let file = std::env::temp_dir().join(format!("spillway-bench-control-{}.toml", std::process::id()));
    std::fs::write(&file, d.control.lock().unwrap().cfg.to_toml()).unwrap(); // the running config, as the daemon writes it
    d.config_path = Some(file.clone());
    edits(&d, services, runs, ", with a config file", 100);
    d.config_path = None;
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(spillway_dataplane::ctl::persist::backup_path(&file));
    // Scrapes over HTTP, the metrics server as the daemon runs it: with every
    // per-endpoint series (`metrics.per_endpoint = true`), then with the default.
    for per_endpoint in [Some(true), None] {
        d.control.lock().unwrap().cfg.metrics = Some(spillway_shared::config::fleet::MetricsConfig { listen: "127.0.0.1:0".into(), per_endpoint });
        scrapes(&d, if per_endpoint.is_some() { "per_endpoint = true" } else { "per_endpoint default" });
    }
}

/// `backend set` and `config apply` of the whole file with one backend's weight changed,
/// as the control socket calls them; `file` names the set-up in the figures' labels, and
/// `weights` offsets the weights set (each edit changes something).
fn edits(d: &Daemon, services: u32, runs: usize, file: &str, weights: u32) {
    let mut sets = Vec::new();
    let mut sets_cpu = Vec::new();
    for r in 0..(runs as u32).min(5) {
        let (t, c) = (Instant::now(), thread_cpu_ms());
        let a = d.edit_request(R::BackendSet { service: format!("svc{}", (r * 31) % services), name: "g1".into(), fields: vec![("weight".into(), (60 + weights + r).to_string())], if_generation: None });
        sets.push(ms(t));
        sets_cpu.push(thread_cpu_ms() - c);
        assert!(matches!(&a, Response::Applied(x) if x.changes != ["no change"]), "{a:?}");
    }
    println!("{}", Stats(sets).line(&format!("one `backend set` (answered, published){file}"), 50.0));
    println!("{}", cpu_line("one `backend set`", sets_cpu));
    let mut applies = Vec::new();
    let mut applies_cpu = Vec::new();
    for r in 0..(runs as u32).min(5) {
        let cur = d.control.lock().unwrap().cfg.to_toml();
        let svc = format!("name = \"svc{}\"", (r * 13) % services);
        let at = cur.find(&svc).unwrap();
        let w = cur[at..].find("name = \"g1\"").unwrap() + at;
        // g1's table: its `weight` line replaced, or one added after its name
        let end = cur[w..].find("[[").map_or(cur.len(), |e| w + e);
        let table = &cur[w..end];
        let edited = match table.find("\nweight = ") {
            Some(k) => {
                let eol = table[k + 1..].find('\n').map_or(table.len(), |e| k + 1 + e);
                format!("{}\nweight = {}{}", &table[..k], 7 + weights + r, &table[eol..])
            }
            None => table.replacen("name = \"g1\"", &format!("name = \"g1\"\nweight = {}", 7 + weights + r), 1),
        };
        let changed = format!("{}{edited}{}", &cur[..w], &cur[end..]);
        let (t, c) = (Instant::now(), thread_cpu_ms());
        let a = d.config_apply(&changed, None);
        applies.push(ms(t));
        applies_cpu.push(thread_cpu_ms() - c);
        assert!(matches!(&a, Response::Applied(x) if x.changes != ["no change"]), "{a:?}");
    }
    println!("{}", Stats(applies).line(&format!("`config apply`, one backend changed{file}"), 200.0));
    println!("{}", cpu_line("`config apply`", applies_cpu));
}

fn scrapes(d: &Daemon, what: &str) {
    // The rendering alone, on this thread: its CPU time is what a scrape costs the host.
    let cpu: Vec<f64> = (0..3)
        .map(|_| {
            let c = thread_cpu_ms();
            std::hint::black_box(spillway_dataplane::metrics::render(d));
            thread_cpu_ms() - c
        })
        .collect();
    println!("{}", cpu_line(&format!("rendering, {what}"), cpu));
    let listener = spillway_dataplane::metrics::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| spillway_dataplane::metrics::serve(listener, &stop, || spillway_dataplane::metrics::render(d)));
        let mut one = Vec::new();
        let mut size = 0;
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(1100)); // past the body's cache
            let t = Instant::now();
            size = scrape(addr);
            one.push(ms(t));
        }
        println!("{}   ({:.1} MB)", Stats(one).line(&format!("scrape, one scraper, {what}"), 200.0), size as f64 / 1e6);
        let mut four = Vec::new();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(1100));
            let times: Vec<f64> = std::thread::scope(|s2| {
                let hs: Vec<_> = (0..4)
                    .map(|_| {
                        s2.spawn(|| {
                            let t = Instant::now();
                            scrape(addr);
                            ms(t)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            four.extend(times);
        }
        println!("{}", Stats(four).line(&format!("scrape, 4 concurrent scrapers, {what}"), 200.0));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opt = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let runs = opt("--runs").and_then(|v| v.parse().ok()).unwrap_or(20);
    let only = opt("--only");
    println!("control-plane bench: {} cores, runs {runs}", std::thread::available_parallelism().map_or(0, |n| n.get()));
    for (s, p) in [(2000, 5), (1000, 10)] {
        if only.as_deref().is_none_or(|o| o == format!("{s}x{}", p * 2)) {
            bench(s, p, runs);
        }
    }
}
