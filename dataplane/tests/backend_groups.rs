//! Backends as groups of endpoints (docs/semantics.md "Backend groups"): one test
//! per rule, against the daemon's own snapshot compiler (`control::compile`) with per-endpoint
//! health, reading the shares straight from the compiled Maglev tables.

use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap, Snapshot};
use spillway_shared::config::Config;
use spillway_shared::pipeline::ServiceState;
use std::collections::{BTreeMap, HashMap};

/// A config with one service `web` and the given backend tables (TOML).
fn config(service_extra: &str, backends: &str) -> Config {
    let text = format!(
        "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nmaglev_table_size = 65537\n{service_extra}\n{backends}"
    );
    let c = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    c.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    c
}

/// A group `name` of `n` endpoints `name-e1..`, addresses 10.0.<octet>.1.., weight 50.
fn group(name: &str, octet: u8, n: u8, extra: &str) -> String {
    let mut t = format!("[[services.backends]]\nname = \"{name}\"\n{extra}\n");
    for k in 1..=n {
        t.push_str(&format!("[[services.backends.endpoints]]\nname = \"e{k}\"\naddress = \"10.0.{octet}.{k}\"\nmac = \"02:00:00:00:{octet:02x}:{k:02x}\"\n"));
    }
    t
}

/// The compiler and its carried state across calls (drain timers).
struct Plant {
    cfg: Config,
    slots: SlotMap,
    health: HealthView,
    states: HashMap<String, ServiceState>,
    gen: u64,
}

impl Plant {
    fn new(cfg: Config) -> Plant {
        let mut slots = SlotMap::default();
        slots.sync(&cfg).unwrap();
        Plant { cfg, slots, health: HealthView::new(), states: HashMap::new(), gen: 0 }
    }
    fn set(&mut self, backend: &str, endpoint: &str, healthy: bool) {
        self.health.entry(("web".into(), backend.into(), endpoint.into())).or_default().healthy = healthy;
    }
    fn snap(&mut self, now_sec: f64) -> Snapshot {
        self.gen += 1;
        compile(&self.cfg, &self.slots, CompileInput { health: &self.health, states: &mut self.states, now_sec, generation: self.gen, port_addrs: vec![0] })
    }
    /// Share of new connections per `backend/endpoint` (class 0), measured on the table.
    fn shares(&mut self, now_sec: f64) -> BTreeMap<String, f64> {
        let snap = self.snap(now_sec);
        let Some(t) = snap.services[0].tables[0].clone() else { return BTreeMap::new() };
        let counts = t.maglev.slot_counts(t.backends.len());
        let mut out = BTreeMap::new();
        for (k, slot) in t.backends.iter().enumerate() {
            let (_, b, e) = self.slots.owner(*slot).unwrap().clone();
            *out.entry(format!("{b}/{e}")).or_insert(0.0) += counts[k] as f64 / t.maglev.len() as f64;
        }
        out
    }
}

fn backend_share(s: &BTreeMap<String, f64>, b: &str) -> f64 {
    s.iter().filter(|(k, _)| k.split('/').next() == Some(b)).map(|(_, v)| v).sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.01
}

#[test]
fn health_checks_run_per_endpoint() {
    let cfg = config("[services.health_check]\ntype = \"tcp\"", &(group("g1", 1, 3, "") + &group("g2", 2, 1, "")));
    let t = spillway_dataplane::health::targets_from_config(&cfg);
    let keys: Vec<(String, String, std::net::IpAddr)> = t.iter().map(|t| (t.backend.clone(), t.endpoint.clone(), t.addr.ip())).collect();
    assert_eq!(keys.len(), 4);
    assert_eq!(keys[1], ("g1".to_string(), "e2".to_string(), "10.0.1.2".parse().unwrap()));
    assert_eq!(keys[3], ("g2".to_string(), "e1".to_string(), "10.0.2.1".parse().unwrap()));
}

#[test]
fn a_backend_with_one_healthy_endpoint_is_available_and_traffic_stays_in_it() {
    let mut p = Plant::new(config("", &(group("g1", 1, 4, "") + &group("g2", 2, 4, ""))));
    let s = p.shares(0.0);
    assert_eq!(s.len(), 8);
    assert!(s.values().all(|v| close(*v, 0.125)), "{s:?}");
    // Traffic first shifts to the remaining healthy endpoints of the same backend.
    p.set("g1", "e1", false);
    let s = p.shares(1.0);
    assert!(!s.contains_key("g1/e1"));
    assert!(close(backend_share(&s, "g1"), 0.5) && close(s["g1/e2"], 0.5 / 3.0), "{s:?}");
    p.set("g1", "e2", false);
    p.set("g1", "e3", false);
    let s = p.shares(2.0);
    assert!(close(s["g1/e4"], 0.5) && close(backend_share(&s, "g2"), 0.5), "one healthy endpoint keeps the backend available: {s:?}");
    // Endpoint slots carry endpoint health: the workers' keep/move rules apply per endpoint.
    let snap = p.snap(3.0);
    let slot = |e: &str| &snap.backends[usize::from(p.slots.slot("web", "g1", e).unwrap())];
    assert!(!slot("e1").healthy && slot("e4").healthy && slot("e4").name == "g1/e4");
}

#[test]
fn maglev_shares_follow_backend_weight_then_endpoint_weight() {
    let g1 = "[[services.backends]]\nname = \"g1\"\nweight = 100\n\
        [[services.backends.endpoints]]\nname = \"a\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:01:01\"\nweight = 50\n\
        [[services.backends.endpoints]]\nname = \"b\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:01:02\"\nweight = 150\n\
        [[services.backends.endpoints]]\naddress = \"10.0.1.3\"\nmac = \"02:00:00:00:01:03\"\nweight = 200\nenabled = false\n";
    let b2 = "[[services.backends]]\nname = \"b2\"\nweight = 300\naddress = \"10.0.2.1\"\nmac = \"02:00:00:00:02:01\"\n";
    let mut p = Plant::new(config("", &format!("{g1}{b2}")));
    let s = p.shares(0.0);
    assert!(close(s["g1/a"], 0.25 * 0.25) && close(s["g1/b"], 0.25 * 0.75) && close(s["b2/b2"], 0.75), "{s:?}");
    assert!(!s.contains_key("g1/10.0.1.3"), "a disabled endpoint takes no new connections: {s:?}");
}

#[test]
fn drain_below_25_percent_and_undrain_at_35_percent_held_60_s() {
    // g3 (priority 2) makes the drained fraction 1/3 < 50 %; it takes traffic only when no
    // priority-1 backend is available. g1 has 5 endpoints: 1 of 5 = 20 % < 25 %.
    let cfg = config("auto_capacity_drain = true", &(group("g1", 1, 5, "") + &group("g2", 2, 4, "") + &group("g3", 3, 1, "priority = 2")));
    let mut p = Plant::new(cfg);
    for e in ["e1", "e2", "e3", "e4"] {
        p.set("g1", e, false);
    }
    let s = p.shares(0.0);
    assert_eq!(backend_share(&s, "g1"), 0.0, "1/5 < 25 %: drained, its last healthy endpoint gets nothing: {s:?}");
    assert!(close(backend_share(&s, "g2"), 1.0), "{s:?}");
    assert!(p.states["web"].drained.contains_key("g1"));
    // 2/5 = 40 % >= 35 % from t = 10: undrained at t = 70, not before.
    p.set("g1", "e1", true);
    assert_eq!(backend_share(&p.shares(10.0), "g1"), 0.0);
    assert_eq!(backend_share(&p.shares(69.9), "g1"), 0.0);
    let s = p.shares(70.0);
    assert!(close(backend_share(&s, "g1"), 0.5) && close(s["g1/e1"], 0.25), "undrained after 60 s at >= 35 %: {s:?}");
    // Exactly 25 % (1 of 4) is not "fewer than 25 %": no candidate.
    let mut quarter = Plant::new(config("auto_capacity_drain = true", &(group("g1", 1, 4, "") + &group("g2", 2, 4, "") + &group("g3", 3, 1, "priority = 2"))));
    for e in ["e1", "e2", "e3"] {
        quarter.set("g1", e, false);
    }
    let s = quarter.shares(0.0);
    assert!(close(s["g1/e4"], 0.5), "{s:?}");
    // With two backends, draining one would reach 50 %: not drained, it keeps its share on
    // its last healthy endpoint.
    let mut two = Plant::new(config("auto_capacity_drain = true", &(group("g1", 1, 5, "") + &group("g2", 2, 4, ""))));
    for e in ["e1", "e2", "e3", "e4"] {
        two.set("g1", e, false);
    }
    let s = two.shares(0.0);
    assert!(close(s["g1/e5"], 0.5), "{s:?}");
}

#[test]
fn failover_when_the_healthy_share_of_the_primary_falls_below_the_threshold() {
    let cfg = config("failover_health_threshold = 70", &(group("p", 1, 4, "") + &group("f", 2, 2, "failover = true")));
    let mut p = Plant::new(cfg);
    p.set("p", "e1", false);
    let s = p.shares(0.0);
    assert!(close(backend_share(&s, "p"), 1.0) && close(s["p/e2"], 1.0 / 3.0), "75 % >= 70 %: the primary's 3 healthy endpoints: {s:?}");
    p.set("p", "e2", false);
    let s = p.shares(1.0);
    assert!(close(backend_share(&s, "f"), 1.0), "50 % < 70 %: the failover group: {s:?}");
    p.set("p", "e1", true);
    p.set("p", "e2", true);
    let s = p.shares(2.0);
    assert!(close(backend_share(&s, "p"), 1.0), "restarted: back on the primary: {s:?}");
}

#[test]
fn failover_ratio_and_zonal_affinity_count_endpoints() {
    // h = healthy primary endpoints / primary endpoints: 2 of 8 = 0.25 < 0.3 fails over,
    // though both primary backends are available.
    let cfg = config("failover_ratio = 0.3", &(group("p1", 1, 4, "") + &group("p2", 2, 4, "") + &group("f", 3, 1, "failover = true")));
    let mut p = Plant::new(cfg);
    for (b, e) in [("p1", "e1"), ("p1", "e2"), ("p1", "e3"), ("p2", "e1"), ("p2", "e2"), ("p2", "e3")] {
        p.set(b, e, false);
    }
    assert!(close(backend_share(&p.shares(0.0), "f"), 1.0));
    p.set("p2", "e1", true); // 3 of 8 = 0.375 >= 0.3
    let s = p.shares(1.0);
    assert!(close(backend_share(&s, "p1"), 0.5) && close(backend_share(&s, "p2"), 0.5), "{s:?}");
}
