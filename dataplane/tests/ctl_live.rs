//! `spillwayctl` against a running `spillway` daemon (child processes; EAL starts once per
//! process): every command, live edits persisted to the config file, flows through the
//! worker mailboxes, bad frames over the real socket, and concurrent
//! editors with `--if-generation`.
//!
//! `spillwayctl` is taken from the same target directory as `spillway`; build both first
//! (`cargo test -p spillway-ctl -p spillway-dataplane` does). The concurrent-edit run lasts
//! `SPILLWAY_CTL_STRESS_SEC` seconds (default 30).

mod common;
mod ctl_harness;

use ctl_harness::{ctl_bin, example, raw_bytes, raw_request, Daemon, SERIAL};
use spillway_shared::config::Config;
use spillway_shared::proto::{self, Request, Response, MAX_FRAME, PROTOCOL_VERSION};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// A config whose port replays SYNs from a few clients forever (net_pcap infinite_rx) and
/// forwards to a null port: connection entries exist and rx keeps growing.
fn traffic_config(dir_hint: &str) -> String {
    let dir = std::env::temp_dir().join(format!("spw-ctl-pcap-{}-{dir_hint}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rx = dir.join("in.pcap");
    let mut frames = Vec::new();
    for i in 0..16u8 {
        frames.push(common::tcp_frame([10, 1, 0, 10 + i], 40000 + u16::from(i), true));
        frames.push(common::tcp_frame([10, 2, 0, 10 + i], 41000 + u16::from(i), true));
    }
    common::write_pcap(&rx, &frames);
    let base = example();
    let ports_start = base.find("[[ports]]").unwrap();
    let zones_start = base.find("[[zones]]").unwrap();
    let ports = format!(
        "[[ports]]\nname = \"p0\"\ndevice = \"net_pcap0,rx_pcap={},infinite_rx=1\"\nmac = \"02:00:00:00:00:01\"\naddress = \"10.0.0.2\"\nforward_to = \"p1\"\n\n[[ports]]\nname = \"p1\"\ndevice = \"net_null1,no-rx=1\"\nmac = \"02:00:00:00:00:02\"\n\n",
        rx.display()
    );
    let mut s = format!("{}{}{}", &base[..ports_start], ports, &base[zones_start..]);
    s = s.replace("workers = 2", "workers = 1");
    s
}

#[test]
fn no_daemon_says_so() {
    let o = Command::new(ctl_bin()).args(["--socket", "/nonexistent/spillway.sock", "status"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no spillway daemon is listening on /nonexistent/spillway.sock"), "{err}");
    let o = Command::new(ctl_bin()).args(["--socket", "/nonexistent/spillway.sock", "backend", "set", "web", "b1", "weight=3"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn every_command_against_a_running_daemon() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Daemon::start("cmds", &traffic_config("cmds"));
    // status / stats
    assert!(d.ok(&["status"]).contains("snapshot generation"));
    let st = d.json(&["status", "--json"]);
    assert_eq!(st["ports"].as_array().unwrap().len(), 2);
    let stats = d.ok(&["stats"]);
    for section in ["PORTS", "WORKERS", "BACKENDS", "DROPS"] {
        assert!(stats.contains(section), "{stats}");
    }
    let sj = d.json(&["stats", "--json"]);
    assert!(sj["drops"].is_object() && sj["workers"].is_array());

    // config show
    let show = d.ok(&["config", "show"]);
    assert!(show.contains("# config generation 1"), "{show}");
    let cj = d.json(&["config", "show", "--json"]);
    assert_eq!(cj["generation"], 1);
    assert_eq!(cj["config"]["services"][0]["name"], "web");

    // service list / show
    let list = d.ok(&["service", "list"]);
    assert!(list.contains("web") && list.contains("dns"), "{list}");
    assert_eq!(d.json(&["service", "list", "--json"])["services"].as_array().unwrap().len(), 2);
    assert!(d.ok(&["service", "show", "web"]).contains("spillover_ratio = 0.5"));
    assert_eq!(d.json(&["service", "show", "web", "--json"])["service"]["port"], 80);

    // service set: every policy field
    let out = d.ok(&[
        "service", "set", "web",
        "zonal_affinity=ZONAL_AFFINITY_STAY_WITHIN_ZONE", "spillover_ratio=0.25", "failover_ratio=0.5",
        "drop_traffic_if_unhealthy=true", "disable_connection_drain_on_failover=true", "session_affinity=CLIENT_IP",
        "connection_persistence_on_unhealthy_backends=ALWAYS_PERSIST", "idle_timeout_sec=900",
        "load_balancing_algorithm=SPRAY_TO_REGION", "auto_capacity_drain=true", "failover_health_threshold=60",
        "isolation_granularity=REGION", "latency_sensitivity_ms=5.0", "forwarding_mode=IPIP",
    ]);
    assert!(out.contains("applied: config generation 2"), "{out}");
    assert!(out.contains("service web: spillover_ratio: 0.5 -> 0.25"), "{out}");
    let f = d.file_config();
    let w = f.service("web").unwrap();
    assert_eq!(w.spillover_ratio, Some(0.25));
    assert_eq!(w.idle_timeout_sec, Some(900));
    assert!(w.auto_capacity_drain && w.drop_traffic_if_unhealthy);
    assert_eq!(format!("{:?}", w.forwarding_mode), "IPIP");
    // A change of the connection-tracking key is refused live (established connections
    // would miss their entries): PER_SESSION with CLIENT_IP affinity keys on the client.
    let err = d.expect(&["service", "set", "web", "tracking_mode=PER_SESSION"], 1);
    assert!(err.contains("cannot change while the daemon runs: it changes the connection-tracking key"), "{err}");
    assert_eq!(format!("{:?}", d.file_config().service("web").unwrap().tracking_mode), "PER_CONNECTION", "nothing written");
    // reset optional fields with `field=`
    d.ok(&["service", "set", "web", "failover_ratio=", "isolation_granularity=", "latency_sensitivity_ms=", "forwarding_mode=L2_DSR",
        "session_affinity=NONE", "auto_capacity_drain=false", "load_balancing_algorithm=", "failover_health_threshold="]);
    assert_eq!(d.file_config().service("web").unwrap().failover_ratio, None);

    // validation errors come back verbatim, with exit 1, and change nothing
    let gen_before = d.json(&["config", "show", "--json"])["generation"].as_u64().unwrap();
    let err = d.expect(&["service", "set", "web", "spillover_ratio=1.5"], 1);
    assert!(err.contains("services[0].spillover_ratio = 1.5: must be in [0.0, 1.0]"), "{err}");
    let err = d.expect(&["backend", "set", "web", "b1", "weight=0"], 1);
    assert!(err.contains("services[0].backends[0].weight = 0"), "{err}");
    let err = d.expect(&["backend", "set", "web", "b1", "wieght=3"], 1);
    assert!(err.contains("wieght"), "{err}");
    assert_eq!(d.json(&["config", "show", "--json"])["generation"].as_u64().unwrap(), gen_before);
    // stale --if-generation
    let err = d.expect(&["backend", "set", "web", "b1", "weight=7", "--if-generation", "1"], 1);
    assert!(err.contains(&format!("config generation is {gen_before}, not 1: someone else changed it; re-read and retry")), "{err}");

    // backend list / show / add / set / remove
    let bl = d.ok(&["backend", "list", "web"]);
    assert!(bl.contains("b1") && bl.contains("b4"), "{bl}");
    assert_eq!(d.json(&["backend", "list", "web", "--json"])["backends"].as_array().unwrap().len(), 4);
    assert!(d.ok(&["backend", "show", "web", "b2"]).contains("10.0.1.2"));
    d.ok(&["backend", "add", "web", "b5", "address=10.0.1.5", "mac=02:00:00:00:0b:05", "zone=z2", "--if-generation", &gen_before.to_string()]);
    let out = d.ok(&[
        "backend", "set", "web", "b5", "weight=200", "priority=2", "preference=PREFERRED", "capacity_cps=1000.0",
        "capacity_scaler=0.5", "enabled=false", "failover=true", "zone=z1", "address=10.0.1.55", "mac=02:00:00:00:0b:55",
    ]);
    assert!(out.contains("backend b5: weight: 50 -> 200"), "{out}");
    let b5 = d.file_config().service("web").unwrap().backends.iter().find(|b| b.name == "b5").cloned().unwrap();
    assert_eq!((b5.weight, b5.priority, b5.enabled, b5.failover, b5.zone.as_str()), (200, 2, false, true, "z1"));
    // The operator's comments survive `service set` and `backend add/set` (toml_edit
    // write-back), and the file is exactly the running config.
    let text = std::fs::read_to_string(&d.config).unwrap();
    let base = example();
    let comments: Vec<&str> = base[..base.find("[[ports]]").unwrap()].lines().filter(|l| l.starts_with('#')).collect();
    assert!(comments.len() >= 5 && comments.iter().all(|c| text.lines().any(|l| l == *c)), "comments lost:\n{text}");
    assert!(text.starts_with("# Written by spillway (config generation ") && text.lines().next().unwrap().contains("comments and layout are kept"), "{text}");
    let shown: Config = serde_json::from_value(d.json(&["config", "show", "--json"])["config"].clone()).unwrap();
    assert_eq!(shown, d.file_config(), "file == running config");
    assert_eq!(b5.address.to_string(), "10.0.1.55");
    let bj = d.json(&["backend", "show", "web", "b5", "--json"]);
    assert_eq!(bj["backends"][0]["config"]["weight"], 200);
    d.ok(&["backend", "remove", "web", "b5"]);
    assert!(d.file_config().service("web").unwrap().backends.iter().all(|b| b.name != "b5"));

    // service add / remove
    d.ok(&["service", "add", "api", "vip=10.0.0.101", "port=8080", "protocol=tcp"]);
    d.ok(&["backend", "add", "api", "a1", "address=10.0.3.1", "mac=02:00:00:00:0a:01", "zone=z1"]);
    assert!(d.file_config().service("api").is_some());
    d.ok(&["service", "remove", "api"]);
    assert!(d.file_config().service("api").is_none());
    let err = d.expect(&["service", "remove", "nope"], 1);
    assert!(err.contains("no service named nope"), "{err}");

    // health
    assert!(d.ok(&["health", "show"]).contains("static"));
    assert_eq!(d.json(&["health", "show", "--json"]).as_array().unwrap().len(), 6);

    // flows: the replayed SYNs create entries on the worker
    std::thread::sleep(Duration::from_millis(500));
    let c = d.json(&["flows", "count", "--json"]);
    assert!(c["total"].as_u64().unwrap() > 0, "{c}");
    let by_svc = d.json(&["flows", "count", "--service", "web", "--json"]);
    assert_eq!(by_svc["total"], c["total"], "all replayed flows are web's");
    assert_eq!(d.json(&["flows", "count", "--service", "dns", "--json"])["total"], 0);
    let shown = d.json(&["flows", "show", "--service", "web", "--limit", "5", "--json"]);
    let entries = shown["entries"].as_array().unwrap();
    assert!(!entries.is_empty() && entries.len() <= 5, "{shown}");
    assert_eq!(entries[0]["service"], "web");
    let backend = entries[0]["backend"].as_str().unwrap().to_string();
    assert!(d.ok(&["flows", "show", "--limit", "3"]).contains("web"));
    let fb = d.json(&["flows", "count", "--service", "web", "--backend", &backend, "--json"]);
    assert!(fb["total"].as_u64().unwrap() > 0, "{fb}");
    let fl = d.json(&["flows", "flush", "--service", "web", "--backend", &backend, "--json"]);
    assert!(fl["total"].as_u64().unwrap() > 0, "{fl}");
    assert!(d.ok(&["flows", "flush"]).starts_with("flushed: "));
    assert!(d.ok(&["flows", "count"]).starts_with("entries held (expired until swept): "));
    assert!(d.ok(&["flows", "count", "--service", "web"]).starts_with("live flows: "));

    // explain (live) agrees with itself in text and JSON; offline explain still works
    let ex = d.ok(&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp", "--client-port", "40000"]);
    assert!(ex.contains("[live, snapshot generation") && ex.contains("-> backend b"), "{ex}");
    let exj = d.json(&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp", "--client-port", "40000", "--json"]);
    assert!(ex.contains(&format!("-> backend {}", exj["backend"].as_str().unwrap())), "{ex}\n{exj}");
    assert!(exj["decision"]["trace"].as_array().unwrap().len() >= 5);
    let off = Command::new(ctl_bin()).args(["explain", "--config"]).arg(&d.config).args(["--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp"]).output().unwrap();
    assert!(off.status.success(), "{}", String::from_utf8_lossy(&off.stderr));
    let err = d.expect(&["explain", "--client", "10.1.0.10", "--vip", "10.9.9.9:1/tcp"], 1);
    assert!(err.contains("no service 10.9.9.9:1/tcp"), "{err}");

    // snapshot
    let sn = d.ok(&["snapshot", "show"]);
    assert!(sn.contains("service web") && sn.contains("distinct tables"), "{sn}");
    let snj = d.json(&["snapshot", "show", "--json"]);
    assert!(snj["generation"].as_u64().unwrap() > 1);
    assert!(snj["config_generation"].as_u64().unwrap() > 1);

    // config apply: the file round-trips; a weight change comes through as a diff
    let gen = d.json(&["config", "show", "--json"])["generation"].as_u64().unwrap();
    let mut cfg = d.file_config();
    cfg.services[0].backends[2].weight = 77;
    let newfile = d.dir.join("new.toml");
    std::fs::write(&newfile, cfg.to_toml()).unwrap();
    let out = d.ok(&["config", "apply", newfile.to_str().unwrap(), "--if-generation", &gen.to_string()]);
    assert!(out.contains("service web: backend b3: weight: 50 -> 77"), "{out}");
    assert!(d.ok(&["config", "apply", newfile.to_str().unwrap()]).contains("no change"));
    let applied = d.json(&["config", "apply", newfile.to_str().unwrap(), "--json"]);
    assert_eq!(applied["generation"].as_u64().unwrap(), gen + 1);
    // changes needing a restart are refused plainly
    let mut bad = cfg.clone();
    bad.dataplane.workers = 3;
    std::fs::write(&newfile, bad.to_toml()).unwrap();
    assert!(d.expect(&["config", "apply", newfile.to_str().unwrap()], 1).contains("[dataplane] cannot change while the daemon runs"));

    // remove a backend that carries live traffic, then a whole service: still forwarding
    let rx0 = d.status().total.rx;
    d.ok(&["backend", "remove", "web", &backend]);
    d.ok(&["service", "remove", "dns"]);
    std::thread::sleep(Duration::from_millis(500));
    let s1 = d.status();
    assert!(s1.total.rx > rx0 && s1.total.forwarded > 0, "rx {rx0} -> {}", s1.total.rx);
    let flows_after = d.json(&["flows", "show", "--limit", "1000", "--json"]);
    for e in flows_after["entries"].as_array().unwrap() {
        assert_ne!(e["backend"].as_str().unwrap(), backend.as_str(), "no entry may resolve to the removed backend");
    }
    // the persisted file is what the daemon runs
    assert!(d.file_config().service("dns").is_none());
}

#[test]
fn bad_frames_do_not_hurt() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Daemon::start("frames", &traffic_config("frames"));
    let rx0 = d.status().total.rx;
    let bad0 = d.status().control_socket.bad_frames;
    // truncated: length says 100, 10 bytes come, then EOF: a typed answer
    let mut t = 100u32.to_be_bytes().to_vec();
    t.extend_from_slice(&[0u8; 10]);
    let m = raw_bytes(&d.socket, &t).expect("an answer to a truncated frame");
    assert!(m.contains("BadFrame { kind: Truncated") && m.contains("the connection ended inside a frame"), "{m}");
    // truncated length prefix
    let m = raw_bytes(&d.socket, &[0, 0]).expect("an answer to a truncated length prefix");
    assert!(m.contains("BadFrame { kind: Truncated"), "{m}");
    // a malformed frame read whole: answered, and the same connection keeps being served
    {
        use std::io::Write as _;
        let mut s = UnixStream::connect(&d.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&[0, 0, 0, 3, PROTOCOL_VERSION as u8, 0xff, 0xff]).unwrap();
        let r = proto::decode_response(&proto::read_frame(&mut s).unwrap().unwrap()).unwrap();
        assert!(matches!(r, Response::BadFrame { kind: proto::BadFrameKind::Malformed, .. }), "{r:?}");
        proto::write_frame(&mut s, &proto::encode_request(&Request::Status)).unwrap();
        let r = proto::decode_response(&proto::read_frame(&mut s).unwrap().unwrap()).unwrap();
        let Response::Status(st) = r else { panic!("not served after a bad frame: {r:?}") };
        assert_eq!(st.control_socket.bad_frames, bad0 + 3, "every bad frame is counted");
    }
    // oversized
    let m = raw_bytes(&d.socket, &((MAX_FRAME + 1) as u32).to_be_bytes()).expect("reply");
    assert!(m.contains("frame of 1048577 bytes exceeds the limit of 1048576 bytes"), "{m}");
    let m = raw_bytes(&d.socket, &u32::MAX.to_be_bytes()).expect("reply");
    assert!(m.contains("exceeds the limit"), "{m}");
    // garbage after the right version
    let mut g = vec![0, 0, 0, 6, PROTOCOL_VERSION as u8];
    g.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x7f]);
    let m = raw_bytes(&d.socket, &g).expect("reply");
    assert!(m.contains("malformed frame"), "{m}");
    // wrong version
    let body = postcard::to_stdvec(&proto::RequestFrame { version: 1, request: Request::Status }).unwrap();
    let mut w = (body.len() as u32).to_be_bytes().to_vec();
    w.extend_from_slice(&body);
    let m = raw_bytes(&d.socket, &w).expect("reply");
    assert!(m.contains(&format!("protocol version mismatch: peer speaks version 1, this side speaks version {PROTOCOL_VERSION}")), "{m}");
    // random garbage, many times
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..200 {
        let mut buf = Vec::new();
        let n = (x % 40) as usize;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(x as u8);
        }
        let _ = raw_bytes(&d.socket, &buf);
    }
    // half-open connections that never send are not a problem either
    let idle: Vec<UnixStream> = (0..8).filter_map(|_| UnixStream::connect(&d.socket).ok()).collect();
    // still forwarding: rx and forwarded keep growing (polled, not timed: the host may be busy)
    let s1 = d.status();
    let t0 = std::time::Instant::now();
    let s2 = loop {
        let s2 = d.status();
        if s2.total.rx > s1.total.rx && s2.total.forwarded > s1.total.forwarded {
            break s2;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "stopped forwarding: rx {rx0} -> {} -> {}", s1.total.rx, s2.total.rx);
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(s1.total.rx > rx0, "no packet received while bad frames were sent: rx {rx0} -> {}", s1.total.rx);
    assert!(s2.total.forwarded > s1.total.forwarded);
    drop(idle);
    assert!(d.ok(&["status"]).contains("snapshot generation"));
}

#[test]
fn concurrent_editors_lose_no_update() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let secs: f64 = std::env::var("SPILLWAY_CTL_STRESS_SEC").ok().and_then(|s| s.parse().ok()).unwrap_or(30.0);
    let mut cfg = example();
    for i in 3..=4 {
        cfg += &format!("\n[[services.backends]]\nname = \"d{i}\"\naddress = \"10.0.2.{i}\"\nmac = \"02:00:00:00:0d:0{i}\"\nzone = \"z1\"\n");
    }
    let d = Daemon::start("stress", &cfg);
    let targets: Vec<(&str, &str)> = vec![("web", "b1"), ("web", "b2"), ("web", "b3"), ("web", "b4"), ("dns", "d1"), ("dns", "d2"), ("dns", "d3"), ("dns", "d4")];
    let start_gen = match raw_request(&d.socket, &Request::ConfigShow).unwrap() {
        Response::Config { generation, .. } => generation,
        r => panic!("{r:?}"),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let socket = d.socket.clone();
    let results: Vec<(Vec<u64>, u64, (u32, bool))> = std::thread::scope(|s| {
        let hs: Vec<_> = targets
            .iter()
            .enumerate()
            .map(|(t, (svc, b))| {
                let socket = socket.clone();
                s.spawn(move || {
                    let mut acked = Vec::new();
                    let mut retries = 0u64;
                    let mut last = (50u32, true);
                    let mut k = 0u32;
                    while Instant::now() < deadline {
                        k += 1;
                        let weight = 1 + (k * 7 + t as u32) % 1000;
                        let enabled = t % 2 == 1 || k % 3 != 0;
                        loop {
                            let gen = match raw_request(&socket, &Request::ConfigShow) {
                                Ok(Response::Config { generation, .. }) => generation,
                                r => panic!("config show: {r:?}"),
                            };
                            let req = Request::BackendSet {
                                service: svc.to_string(),
                                name: b.to_string(),
                                fields: vec![("weight".into(), weight.to_string()), ("enabled".into(), enabled.to_string())],
                                if_generation: Some(gen),
                            };
                            match raw_request(&socket, &req) {
                                Ok(Response::Applied(a)) => {
                                    assert_eq!(a.generation, gen + 1, "an acknowledged edit moves the generation by one");
                                    if let Some(&p) = acked.last() {
                                        assert!(a.generation > p, "generations strictly increase");
                                    }
                                    acked.push(a.generation);
                                    last = (weight, enabled);
                                    break;
                                }
                                Ok(Response::Error { message }) if message.contains("someone else changed it") => retries += 1,
                                r => panic!("edit of {svc}/{b}: {r:?}"),
                            }
                        }
                    }
                    (acked, retries, last)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("editor thread")).collect()
    });
    let (final_gen, running) = match raw_request(&d.socket, &Request::ConfigShow).unwrap() {
        Response::Config { generation, toml, .. } => (generation, Config::from_toml(&toml).unwrap()),
        r => panic!("{r:?}"),
    };
    let mut all: Vec<u64> = results.iter().flat_map(|r| r.0.iter().copied()).collect();
    let edits = all.len() as u64;
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len() as u64, edits, "every acknowledged edit has its own generation");
    assert_eq!(final_gen - start_gen, edits, "every generation step is an acknowledged edit");
    let file = d.file_config();
    for ((svc, b), r) in targets.iter().zip(&results) {
        let want = r.2;
        for cfg in [&running, &file] {
            let be = cfg.service(svc).unwrap().backends.iter().find(|x| &x.name == b).unwrap();
            assert_eq!((be.weight, be.enabled), want, "{svc}/{b}: the last acknowledged edit is what runs and what is persisted");
        }
    }
    let retries: u64 = results.iter().map(|r| r.1).sum();
    eprintln!(
        "concurrent edits: {edits} acknowledged in {secs:.0} s ({:.1} edits/s), {retries} stale retries ({:.2} per edit), generation {start_gen} -> {final_gen}",
        edits as f64 / secs,
        retries as f64 / edits.max(1) as f64
    );
    assert!(edits > 0);
    assert!(d.ok(&["status"]).contains("snapshot generation"));
}
