//! The control plane at scale: 2,000 services × 20,000 endpoints (10 per service, in two
//! backend groups of 5), a running daemon on virtual ports, and every read and `config
//! apply` through the real `spillwayctl`. Answers and requests larger than one frame
//! travel as several frames (`proto::MAX_MESSAGE`), and one-service reads carry only that
//! service.
//!
//! `spillwayctl` is taken from the same target directory as `spillway`; build both first
//! (`cargo test -p spillway-ctl -p spillway-dataplane` does).

mod ctl_harness;

use ctl_harness::{example, raw_request, Daemon, SERIAL};
use spillway_shared::proto::{Request, Response, MAX_FRAME};
use std::fmt::Write;
use std::time::{Duration, Instant};

const SERVICES: u32 = 2_000;
const GROUPS: u32 = 2;
const PER_GROUP: u32 = 5;

/// The example's ports and zones, then [`SERVICES`] services of [`GROUPS`] × [`PER_GROUP`]
/// endpoints each, every address and MAC distinct, no health checks (20,000 probes would
/// test the checker, not the control plane).
fn big_config() -> String {
    let base = example();
    let mut s = base[..base.find("[[services]]").unwrap()].replace("workers = 2", "workers = 1");
    for i in 0..SERVICES {
        let vip = 0x0a64_0000u32 + i + 1; // 10.100.0.1 + i
        let _ = write!(s, "[[services]]\nname = \"svc{i}\"\nvip = \"{}\"\nport = 80\nprotocol = \"tcp\"\nmaglev_table_size = 1021\n\n", std::net::Ipv4Addr::from(vip));
        for g in 0..GROUPS {
            let _ = write!(s, "[[services.backends]]\nname = \"g{g}\"\nzone = \"z{}\"\n\n", g + 1);
            for e in 0..PER_GROUP {
                let n = (i * GROUPS + g) * PER_GROUP + e;
                let a = std::net::Ipv4Addr::from(0xac10_0000u32 + n + 1); // 172.16.0.1 + n
                let _ = write!(s, "[[services.backends.endpoints]]\nname = \"e{e}\"\naddress = \"{a}\"\nmac = \"02:01:{:02x}:{:02x}:{:02x}:{:02x}\"\n\n", n >> 24, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
            }
        }
    }
    s
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    eprintln!("{what}: {:.2} s", t.elapsed().as_secs_f64());
    r
}

#[test]
fn reads_and_applies_at_two_thousand_services_and_twenty_thousand_endpoints() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = big_config();
    let d = timed("start", || Daemon::start_within("scale", &cfg, Duration::from_secs(300)));

    // Whole-config answers are larger than one frame, and arrive whole.
    let show = timed("config show", || d.ok(&["config", "show"]));
    assert!(show.len() > MAX_FRAME, "config show is {} bytes: the test must exceed one frame", show.len());
    assert_eq!(show.matches("[[services]]").count(), SERVICES as usize);
    assert_eq!(show.matches("[[services.backends.endpoints]]").count(), (SERVICES * GROUPS * PER_GROUP) as usize);
    let list = timed("service list", || d.ok(&["service", "list"]));
    assert_eq!(list.lines().filter(|l| l.starts_with("svc")).count(), SERVICES as usize, "{}", &list[..400]);
    let st = timed("status --json", || d.json(&["status", "--json"]));
    assert_eq!(st["backends"].as_array().unwrap().len(), (SERVICES * GROUPS) as usize);
    assert_eq!(st["backends"][0]["members"].as_array().unwrap().len(), PER_GROUP as usize);
    let text = timed("status", || d.ok(&["status"]));
    assert!(text.contains("snapshot generation"), "{}", &text[..400.min(text.len())]);
    let stats = timed("stats", || d.ok(&["stats"]));
    assert!(stats.contains("BACKENDS"));

    // One-service reads carry that service only.
    let last = format!("svc{}", SERVICES - 1);
    let Ok(Response::Service { toml, backends, .. }) = raw_request(&d.socket, &Request::ServiceShow { name: last.clone() }) else { panic!("service show answer") };
    assert_eq!(toml.matches("[[services]]").count(), 1, "{toml}");
    assert!(toml.len() < 8 * 1024, "one service's TOML is {} bytes", toml.len());
    assert_eq!(backends.len(), GROUPS as usize);
    assert!(backends.iter().all(|b| b.service == last && b.members.len() == PER_GROUP as usize));
    let one = d.ok(&["service", "show", &last]);
    assert!(one.contains(&format!("name = \"{last}\"")) && one.matches("[[services.backends.endpoints]]").count() == (GROUPS * PER_GROUP) as usize, "{one}");
    let bl = d.ok(&["backend", "list", "svc7"]);
    assert!(bl.contains("g0") && bl.contains("g1") && bl.contains("5/5 endpoints"), "{bl}");
    assert!(d.expect(&["service", "show", "nope"], 1).contains("no service named nope"));

    // config apply of a file the size the daemon accepted at start: one change applied.
    let path = d.dir.join("edited.toml");
    let edited = cfg.replacen("name = \"svc3\"\nvip = \"10.100.0.4\"\nport = 80", "name = \"svc3\"\nvip = \"10.100.0.4\"\nport = 81", 1);
    assert_ne!(edited, cfg);
    std::fs::write(&path, &edited).unwrap();
    assert!(edited.len() > MAX_FRAME, "the applied file must exceed one frame ({} bytes)", edited.len());
    let applied = timed("config apply", || d.ok(&["config", "apply", path.to_str().unwrap()]));
    assert!(applied.contains("config generation 2") && applied.contains("svc3"), "{applied}");
    let back = d.json(&["service", "show", "svc3", "--json"]);
    assert_eq!(back["service"]["port"], 81);
    // the daemon is still serving the whole config
    assert_eq!(d.status().backends.len(), (SERVICES * GROUPS) as usize);
}
