//! Live `spillwayctl explain` against a running daemon works for every load-balancing
//! algorithm, with and without `capacity_cps` (an unlimited capacity is
//! `inf`, which once broke the JSON step between daemon and tool).

mod common;

use common::{null_example, Daemon};

const ALGORITHMS: [&str; 3] = ["WATERFALL_BY_REGION", "SPRAY_TO_REGION", "WATERFALL_BY_ZONE"];

fn capacity_numbers(j: &serde_json::Value) -> Vec<serde_json::Value> {
    j["decision"]["trace"]
        .as_array()
        .expect("trace is an array")
        .iter()
        .filter(|e| e["stage"] == "capacity")
        .filter_map(|e| e["numbers"].get("capacity_cps").cloned())
        .collect()
}

#[test]
fn live_explain_works_for_every_algorithm_with_and_without_capacity() {
    let d = Daemon::start("explain", &null_example());
    let args = ["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp"];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    for with_capacity in [false, true] {
        if with_capacity {
            for b in ["b1", "b2", "b3", "b4"] {
                d.ok(&["backend", "set", "web", b, "capacity_cps=100"]);
            }
        }
        for algo in ALGORITHMS {
            d.ok(&["service", "set", "web", &format!("load_balancing_algorithm={algo}")]);
            let text = d.ok(&args);
            assert!(text.contains("[live, snapshot generation"), "{algo}, capacity {with_capacity}:\n{text}");
            assert!(text.contains("capacity"), "{algo}: no capacity stage:\n{text}");
            assert!(text.contains("-> backend b"), "{algo}, capacity {with_capacity}: no backend chosen:\n{text}");
            let out = d.ok(&json_args);
            let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{algo}: {e}\n{out}"));
            assert_eq!(j["live"], true);
            assert!(j["backend"].as_str().is_some_and(|b| b.starts_with('b')), "{algo}: {out}");
            let caps = capacity_numbers(&j);
            assert!(!caps.is_empty(), "{algo}: the capacity stage names no capacity_cps: {out}");
            for c in caps {
                if with_capacity {
                    assert!(c.as_f64().is_some_and(|x| x > 0.0 && x.is_finite()), "{algo}: capacity_cps = {c}");
                } else {
                    assert_eq!(c, "inf", "{algo}: an unlimited capacity is written \"inf\"");
                }
            }
        }
    }
}

/// Backend groups: live and offline explain show both levels and pick the same
/// endpoint for the same flow (the offline Maglev table is built over endpoints with the
/// daemon's names and weights).
#[test]
fn explain_shows_endpoints_and_live_and_offline_pick_the_same_endpoint() {
    let d = Daemon::start("explain-groups", &null_example());
    d.ok(&["endpoint", "add", "web", "b1", "e2", "address=10.0.1.11", "mac=02:00:00:00:0b:11", "weight=150"]);
    d.ok(&["endpoint", "add", "web", "b1", "e3", "address=10.0.1.12", "mac=02:00:00:00:0b:12", "enabled=false"]);
    let cfg_path = d.dir.join("live.toml");
    let toml = d.ok(&["config", "show"]);
    let body: String = toml.lines().skip_while(|l| !l.starts_with('[')).map(|l| format!("{l}\n")).collect();
    std::fs::write(&cfg_path, &body).unwrap();
    for port in [40000u16, 40001, 40002, 40003, 40004, 40005] {
        let p = port.to_string();
        let live = d.ok(&["explain", "--client", "10.9.0.10", "--vip", "10.0.0.100:80/tcp", "--client-port", &p, "--json"]);
        let off = d.ok(&["explain", "--config", cfg_path.to_str().unwrap(), "--client", "10.9.0.10", "--vip", "10.0.0.100:80/tcp", "--client-port", &p, "--json"]);
        let (l, o): (serde_json::Value, serde_json::Value) = (serde_json::from_str(&live).unwrap(), serde_json::from_str(&off).unwrap());
        assert_eq!((&l["backend"], &l["endpoint"]), (&o["backend"], &o["endpoint"]), "port {p}:\nlive {live}\noffline {off}");
        assert_eq!(l["endpoint_shares"], o["endpoint_shares"], "port {p}");
    }
    let text = d.ok(&["explain", "--client", "10.9.0.10", "--vip", "10.0.0.100:80/tcp"]);
    let line = text.lines().find(|l| l.starts_with("endpoint shares:")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("b1/b1=") && line.contains("b1/e2=") && !line.contains("b1/e3") && line.contains("b2/b2="), "{line}");
}

/// A spoofed source: a client address that is a VIP or the port's address is
/// dropped by the dataplane as `martian_source`; explain, live and offline, says so with
/// that reason name and picks no backend. An ordinary client still gets a backend.
#[test]
fn explain_says_a_spoofed_source_is_dropped_live_and_offline() {
    let d = Daemon::start("explain-martian", &null_example());
    let cfg = d.config.to_str().unwrap().to_string();
    // 10.0.0.100: the VIP; 10.0.0.2: the port's address
    for client in ["10.0.0.100", "10.0.0.2"] {
        for offline in [false, true] {
            let mut args = vec!["explain", "--client", client, "--vip", "10.0.0.100:80/tcp"];
            if offline {
                args.extend(["--config", cfg.as_str()]);
            }
            let text = d.ok(&args);
            assert!(text.contains("new connection dropped: martian_source") && !text.contains("-> backend"), "{client} offline={offline}:\n{text}");
            args.push("--json");
            let j: serde_json::Value = serde_json::from_str(&d.ok(&args)).unwrap();
            assert_eq!(j["drop_reason"], "martian_source", "{client} offline={offline}: {j}");
            assert!(j["backend"].is_null(), "{client} offline={offline}: {j}");
        }
    }
    let text = d.ok(&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp"]);
    assert!(text.contains("-> backend b") && !text.contains("martian"), "{text}");
    let j: serde_json::Value = serde_json::from_str(&d.ok(&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp", "--json"])).unwrap();
    assert!(j["drop_reason"].is_null(), "{j}");
}

/// an IPv6 service. `explain` (live and offline) takes an IPv6 client and a
/// bracketed `[VIP]:PORT/PROTO`, both pick the same backend, and `status` and `config show`
/// print the IPv6 addresses.
#[test]
fn ipv6_service_is_explained_and_printed() {
    let mut cfg = null_example();
    cfg += "\n[[client_zones]]\nprefix = \"fd01::/64\"\nzone = \"z1\"\n";
    cfg += "\n[[services]]\nname = \"web6\"\nvip = \"fd00::100\"\nport = 80\nprotocol = \"tcp\"\n";
    for i in 1..=3 {
        cfg += &format!("\n[[services.backends]]\nname = \"v{i}\"\naddress = \"fd00:21::{i}\"\nmac = \"02:00:00:00:21:0{i}\"\nzone = \"z1\"\n");
    }
    let d = Daemon::start("explain-ipv6", &cfg);
    let cfg_path = d.dir.join("live.toml");
    let toml = d.ok(&["config", "show"]);
    assert!(toml.contains("vip = \"fd00::100\"") && toml.contains("address = \"fd00:21::2\"") && toml.contains("prefix = \"fd01::/64\""), "{toml}");
    let body: String = toml.lines().skip_while(|l| !l.starts_with('[')).map(|l| format!("{l}\n")).collect();
    std::fs::write(&cfg_path, &body).unwrap();
    let mut picked = std::collections::BTreeSet::new();
    for port in 40000u16..40012 {
        let p = port.to_string();
        let live = d.ok(&["explain", "--client", "fd01::5", "--vip", "[fd00::100]:80/tcp", "--client-port", &p, "--json"]);
        let off = d.ok(&["explain", "--config", cfg_path.to_str().unwrap(), "--client", "fd01::5", "--vip", "[fd00::100]:80/tcp", "--client-port", &p, "--json"]);
        let (l, o): (serde_json::Value, serde_json::Value) = (serde_json::from_str(&live).unwrap(), serde_json::from_str(&off).unwrap());
        assert_eq!(l["backend"], o["backend"], "port {p}:\nlive {live}\noffline {off}");
        assert_eq!(l["vip"], "[fd00::100]:80/tcp");
        assert_eq!(o["client"], format!("[fd01::5]:{p}"));
        picked.insert(l["backend"].as_str().unwrap_or("").to_string());
    }
    assert!(picked.len() >= 2 && picked.iter().all(|b| b.starts_with('v')), "{picked:?}");
    let text = d.ok(&["explain", "--client", "fd01::5", "--vip", "[fd00::100]:80/tcp"]);
    assert!(text.contains("[fd00::100]:80/tcp") && text.contains("client [fd01::5]:40000 -> zone z1"), "{text}");
    // a client of the other family is refused with the rule
    let e = d.expect(&["explain", "--client", "10.1.0.5", "--vip", "[fd00::100]:80/tcp"], 1);
    assert!(e.contains("family"), "{e}");
    let status = d.ok(&["status"]);
    assert!(status.contains("fd00:21::1"), "{status}");
}
