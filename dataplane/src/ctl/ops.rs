//! The daemon's answers to `spillwayctl`: live configuration edits (validated, applied as a
//! diff, persisted atomically), health, flows, live explain and snapshot views.
//!
//! Generations: the *config generation* ([`ControlState::config_generation`]) starts at 1
//! and increases by one with every applied mutation; `--if-generation` compares against it.
//! The *snapshot generation* ([`ControlState::generation`]) increases with every published
//! snapshot (config edits, health changes, load ticks).

use crate::control::SlotMap;
use crate::daemon::{ControlState, Daemon};
use serde::de::DeserializeOwned;
use serde::Serialize;
use spillway_shared::config::{Backend, Config, Service};
use spillway_shared::flow::FlowKey;
use spillway_shared::pipeline::{evaluate, BackendState, Topology};
use spillway_shared::proto::{
    Applied, ExplainReport, FlowFilter, FlowOp, FlowRow, FlowsReport, HealthRow, Response, SnapService, SnapshotReport,
};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// How long a flows request waits for every worker.
pub const FLOWS_TIMEOUT: Duration = Duration::from_secs(3);

/// Checks the daemon needs beyond [`Config::validate`]: every backend has a MAC, and
/// IPIP/GUE services have a port address as outer source. Errors name the field path.
pub fn daemon_checks(cfg: &Config) -> Result<(), String> {
    for (si, s) in cfg.services.iter().enumerate() {
        for (bi, b) in s.backends.iter().enumerate() {
            if b.mac.is_none() {
                return Err(format!("services[{si}].backends[{bi}].mac is required (L2 DSR / next-hop MAC)"));
            }
            let needs_address = s.health_check.is_some() || s.forwarding_mode != spillway_shared::config::ForwardingMode::L2_DSR;
            let a = b.address;
            if needs_address && (a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback()) {
                return Err(format!(
                    "services[{si}].backends[{bi}].address = {a}: a unicast backend address is required (health checks and IPIP/GUE send to it)"
                ));
            }
        }
        if s.forwarding_mode != spillway_shared::config::ForwardingMode::L2_DSR && !cfg.ports.iter().any(|p| p.address.is_some()) {
            return Err(format!("services[{si}].forwarding_mode = {:?} needs ports[].address as the outer source address", s.forwarding_mode));
        }
    }
    Ok(())
}

/// Writes `text` to `path` atomically: a temporary file in the same directory, written and
/// fsynced, renamed over `path`, then the directory fsynced. Keeps the old file's mode.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "config".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        if let Ok(m) = std::fs::metadata(path) {
            let _ = f.set_permissions(m.permissions());
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Parses one `field=value` value: a TOML value (`0.5`, `true`, `"x"`, `[1, 2]`); a bare
/// word that is not TOML is taken as a string (`SPILL_CROSS_ZONE`). Empty = remove.
pub fn parse_value(v: &str) -> Option<toml::Value> {
    let v = v.trim();
    if v.is_empty() {
        return None;
    }
    match toml::from_str::<toml::Table>(&format!("x = {v}")) {
        Ok(mut t) => t.remove("x"),
        Err(_) => Some(toml::Value::String(v.to_string())),
    }
}

/// Applies `fields` to a serialisable object through its TOML form; errors name `what`.
fn edit<T: Serialize + DeserializeOwned>(obj: &T, fields: &[(String, String)], what: &str, fixed: &[&str]) -> Result<T, String> {
    let mut t = toml::Table::try_from(obj).map_err(|e| format!("{what}: {e}"))?;
    for (k, v) in fields {
        if fixed.contains(&k.as_str()) {
            return Err(format!("{what}: field `{k}` cannot be set here (use the add/remove commands or config apply)"));
        }
        let before = t.clone();
        match parse_value(v) {
            Some(val) => {
                t.insert(k.clone(), val);
            }
            None => {
                t.remove(k);
            }
        }
        // Decode after each field so a type error names the field and the value given.
        if let Err(e) = toml::Value::Table(t.clone()).try_into::<T>() {
            let _ = before;
            return Err(format!("{what}: {k} = {v}: {}", e.message()));
        }
    }
    toml::Value::Table(t).try_into().map_err(|e: toml::de::Error| format!("{what}: {}", e.message()))
}

fn table_diff(prefix: &str, a: &toml::Table, b: &toml::Table, skip: &str, out: &mut Vec<String>) {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).filter(|k| k.as_str() != skip).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let (x, y) = (a.get(k), b.get(k));
        if x != y {
            let s = |v: Option<&toml::Value>| v.map_or("(unset)".to_string(), |v| v.to_string());
            out.push(format!("{prefix}{k}: {} -> {}", s(x), s(y)));
        }
    }
}

/// What differs between two configs, one line per change.
pub fn describe_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let tab = |v: &dyn erased::Ser| v.table();
    for s in &old.services {
        if new.service(&s.name).is_none() {
            out.push(format!("service {} removed", s.name));
        }
    }
    for s in &new.services {
        let Some(o) = old.service(&s.name) else {
            out.push(format!("service {} added ({} backends)", s.name, s.backends.len()));
            continue;
        };
        table_diff(&format!("service {}: ", s.name), &tab(o), &tab(s), "backends", &mut out);
        for b in &o.backends {
            if !s.backends.iter().any(|x| x.name == b.name) {
                out.push(format!("service {}: backend {} removed", s.name, b.name));
            }
        }
        for b in &s.backends {
            match o.backends.iter().find(|x| x.name == b.name) {
                None => out.push(format!("service {}: backend {} added", s.name, b.name)),
                Some(ob) => table_diff(&format!("service {}: backend {}: ", s.name, b.name), &tab(ob), &tab(b), "", &mut out),
            }
        }
    }
    let rest = |c: &Config| {
        let mut c = c.clone();
        c.services.clear();
        c
    };
    if rest(old) != rest(new) {
        table_diff("", &tab(&rest(old)), &tab(&rest(new)), "services", &mut out);
    }
    out
}

mod erased {
    /// Object-safe "serialise to a TOML table".
    pub trait Ser {
        fn table(&self) -> toml::Table;
    }
    impl<T: serde::Serialize> Ser for T {
        fn table(&self) -> toml::Table {
            toml::Table::try_from(self).unwrap_or_default()
        }
    }
}

fn stale(cur: u64, want: u64) -> String {
    format!("config generation is {cur}, not {want}: someone else changed it; re-read and retry")
}

impl Daemon {
    /// Runs one mutation: checks `if_generation`, edits a copy of the config with `f`,
    /// validates it (the same rules as the file, plus [`daemon_checks`]), refuses changes
    /// that need a restart, writes the config file atomically, applies the diff (slots,
    /// health and connections of unchanged backends kept), republishes and answers with the
    /// new config generation.
    pub fn mutate(&self, if_generation: Option<u64>, f: impl FnOnce(&mut Config) -> Result<(), String>) -> Response {
        let mut st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        match self.mutate_locked(&mut st, if_generation, f) {
            Ok(a) => Response::Applied(a),
            Err(message) => Response::Error { message },
        }
    }

    fn mutate_locked(&self, st: &mut ControlState, if_generation: Option<u64>, f: impl FnOnce(&mut Config) -> Result<(), String>) -> Result<Applied, String> {
        if let Some(want) = if_generation {
            if want != st.config_generation {
                return Err(stale(st.config_generation, want));
            }
        }
        let mut cand = st.cfg.clone();
        f(&mut cand)?;
        cand.validate().map_err(|e| e.to_string())?;
        daemon_checks(&cand)?;
        if cand.dataplane != st.cfg.dataplane {
            return Err("[dataplane] cannot change while the daemon runs (EAL, workers, socket); edit the file and restart".into());
        }
        if cand.ports != st.cfg.ports {
            return Err("[[ports]] cannot change while the daemon runs; edit the file and restart".into());
        }
        if cand.conntrack != st.cfg.conntrack {
            return Err("[conntrack] cannot change while the daemon runs (tables are sized at start); edit the file and restart".into());
        }
        if cand.metrics != st.cfg.metrics || cand.announce != st.cfg.announce {
            return Err("[metrics] and [announce] cannot change while the daemon runs (listener and interface are set up at start); edit the file and restart".into());
        }
        let changes = describe_changes(&st.cfg, &cand);
        if changes.is_empty() {
            return Ok(Applied { generation: st.config_generation, snapshot_generation: st.generation, changes: vec!["no change".into()] });
        }
        let mut slots: SlotMap = st.slots.clone();
        slots.sync(&cand)?;
        let next_gen = st.config_generation + 1;
        if let Some(path) = &self.config_path {
            let text = format!(
                "# Written by spillway (config generation {next_gen}) after a live edit; comments are not kept.\n{}",
                cand.to_toml()
            );
            write_atomic(path, &text).map_err(|e| format!("cannot write {}: {e}; the edit was not applied", path.display()))?;
        }
        // Health entries of backends that stay keep their state, also when only the health
        // check or port changed (a backend known to be down stays down until a probe says
        // otherwise). A backend that is new or whose address changed is a new endpoint: with
        // a health check it starts unhealthy until `healthy_threshold` probes pass; without
        // one it is healthy (static). Removed backends are forgotten.
        let old = std::mem::replace(&mut st.cfg, cand);
        let cfg = &st.cfg;
        st.health.retain(|(s, b), _| cfg.service(s).is_some_and(|ns| ns.backends.iter().any(|x| &x.name == b)));
        let mut initial = std::collections::HashMap::new();
        for ns in &cfg.services {
            let os = old.service(&ns.name);
            for nb in &ns.backends {
                let key = (ns.name.clone(), nb.name.clone());
                let same_endpoint = os.and_then(|os| os.backends.iter().find(|x| x.name == nb.name)).is_some_and(|ob| ob.address == nb.address);
                if !same_endpoint {
                    let e = st.health.entry(key.clone()).or_default();
                    e.healthy = ns.health_check.is_none();
                    e.latency_ms = None;
                }
                if ns.health_check.is_some() {
                    let healthy = st.health.get(&key).map_or(true, |v| v.healthy);
                    initial.insert(key, healthy);
                }
            }
        }
        st.last_new.retain(|(s, b), _| cfg.service(s).is_some_and(|x| x.backends.iter().any(|y| &y.name == b)));
        st.states.retain(|s, _| cfg.service(s).is_some());
        st.pools.retain(|s, _| cfg.service(s).is_some());
        st.slots = slots;
        st.config_generation = next_gen;
        self.update_health_checker(&st.cfg, initial);
        let snapshot_generation = self.republish(st);
        for c in &changes {
            tracing::info!(config_generation = next_gen, "config change: {c}");
        }
        Ok(Applied { generation: next_gen, snapshot_generation, changes })
    }

    /// Hands the new targets to the health checker (state of unchanged targets is kept),
    /// starting one when the first health check appears.
    fn update_health_checker(&self, cfg: &Config, initial: std::collections::HashMap<(String, String), bool>) {
        let targets = crate::health::targets_from_config(cfg);
        let mut ch = self.checker.lock().unwrap_or_else(|e| e.into_inner());
        match ch.as_ref() {
            Some(c) => c.update_with_initial(targets, initial),
            None if !targets.is_empty() => {
                let tx = self.health_events.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(tx) = tx {
                    match crate::health::HealthChecker::start(Vec::new(), tx) {
                        Ok(c) => {
                            c.update_with_initial(targets, initial);
                            *ch = Some(c)
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot start the health checker"),
                    }
                }
            }
            None => {}
        }
    }

    /// `config show`.
    pub fn config_show(&self) -> Response {
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        Response::Config {
            generation: st.config_generation,
            toml: st.cfg.to_toml(),
            path: self.config_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        }
    }

    /// `config apply`: replaces the config by `text` (a complete config file).
    pub fn config_apply(&self, text: &str, if_generation: Option<u64>) -> Response {
        let new = match Config::from_toml(text) {
            Ok(c) => c,
            Err(e) => return Response::Error { message: format!("config: {e}") },
        };
        self.mutate(if_generation, move |c| {
            *c = new;
            Ok(())
        })
    }

    /// `service add|remove|set`, `backend add|remove|set`.
    pub fn edit_request(&self, req: spillway_shared::proto::Request) -> Response {
        use spillway_shared::proto::Request as R;
        match req {
            R::ServiceAdd { name, fields, if_generation } => self.mutate(if_generation, |c| {
                if c.service(&name).is_some() {
                    return Err(format!("service {name} already exists"));
                }
                let mut t = toml::Table::new();
                t.insert("name".into(), toml::Value::String(name.clone()));
                for (k, v) in &fields {
                    if let Some(v) = parse_value(v) {
                        t.insert(k.clone(), v);
                    }
                }
                let s: Service = toml::Value::Table(t).try_into().map_err(|e: toml::de::Error| format!("service {name}: {}", e.message()))?;
                c.services.push(s);
                Ok(())
            }),
            R::ServiceRemove { name, if_generation } => self.mutate(if_generation, |c| {
                let n = c.services.len();
                c.services.retain(|s| s.name != name);
                if c.services.len() == n {
                    return Err(no_service(c, &name));
                }
                Ok(())
            }),
            R::ServiceSet { name, fields, if_generation } => self.mutate(if_generation, |c| {
                let i = c.services.iter().position(|s| s.name == name).ok_or_else(|| no_service(c, &name))?;
                c.services[i] = edit(&c.services[i], &fields, &format!("service {name}"), &["name", "backends"])?;
                Ok(())
            }),
            R::BackendAdd { service, name, fields, if_generation } => self.mutate(if_generation, |c| {
                let si = c.services.iter().position(|s| s.name == service).ok_or_else(|| no_service(c, &service))?;
                if c.services[si].backends.iter().any(|b| b.name == name) {
                    return Err(format!("service {service}: backend {name} already exists"));
                }
                let b = edit(&Backend::new(&name, ""), &fields, &format!("service {service}: backend {name}"), &["name"])?;
                c.services[si].backends.push(b);
                Ok(())
            }),
            R::BackendRemove { service, name, if_generation } => self.mutate(if_generation, |c| {
                let si = c.services.iter().position(|s| s.name == service).ok_or_else(|| no_service(c, &service))?;
                let n = c.services[si].backends.len();
                c.services[si].backends.retain(|b| b.name != name);
                if c.services[si].backends.len() == n {
                    return Err(format!("service {service} has no backend {name}"));
                }
                Ok(())
            }),
            R::BackendSet { service, name, fields, if_generation } => self.mutate(if_generation, |c| {
                let si = c.services.iter().position(|s| s.name == service).ok_or_else(|| no_service(c, &service))?;
                let bi = c.services[si].backends.iter().position(|b| b.name == name).ok_or_else(|| format!("service {service} has no backend {name}"))?;
                let b = &c.services[si].backends[bi];
                c.services[si].backends[bi] = edit(b, &fields, &format!("service {service}: backend {name}"), &["name"])?;
                Ok(())
            }),
            _ => Response::Error { message: "not an edit request".into() },
        }
    }

    /// `health show`.
    pub fn health_show(&self) -> Response {
        let statuses = self.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|c| c.snapshot()).unwrap_or_default();
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let mut rows = Vec::new();
        for s in &st.cfg.services {
            for b in &s.backends {
                let v = st.health.get(&(s.name.clone(), b.name.clone())).cloned().unwrap_or_default();
                let t = statuses.iter().find(|t| t.service == s.name && t.backend == b.name);
                rows.push(HealthRow {
                    service: s.name.clone(),
                    backend: b.name.clone(),
                    address: b.address.to_string(),
                    healthy: v.healthy,
                    checked: s.health_check.is_some(),
                    latency_ms: b.latency_ms.or(v.latency_ms),
                    load_cps: v.load_cps,
                    consecutive_successes: t.map_or(0, |t| t.consecutive_successes),
                    consecutive_failures: t.map_or(0, |t| t.consecutive_failures),
                    probes: t.map_or(0, |t| t.probes_sent),
                    probes_failed: t.map_or(0, |t| t.probes_failed),
                    last_error: t.and_then(|t| t.last_error.clone()),
                    since_change_sec: t.map(|t| t.last_change.elapsed().as_secs_f64()),
                });
            }
        }
        Response::Health(rows)
    }

    /// `flows count|show|flush`: posts the request to every worker's mailbox.
    pub fn flows(&self, op: FlowOp, filter: &FlowFilter) -> Response {
        let (slots, names) = {
            let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
            let pairs: Option<Vec<(String, String)>> = match filter {
                FlowFilter::All => None,
                FlowFilter::Service(s) => match st.cfg.service(s) {
                    Some(svc) => Some(svc.backends.iter().map(|b| (s.clone(), b.name.clone())).collect()),
                    None => return Response::Error { message: no_service(&st.cfg, s) },
                },
                FlowFilter::Backend(s, b) => match st.cfg.service(s) {
                    Some(svc) if svc.backends.iter().any(|x| &x.name == b) => Some(vec![(s.clone(), b.clone())]),
                    Some(_) => return Response::Error { message: format!("service {s} has no backend {b}") },
                    None => return Response::Error { message: no_service(&st.cfg, s) },
                },
            };
            let slots = pairs.map(|p| {
                p.iter().filter_map(|(s, b)| st.slots.slot(s, b)).map(|sl| (sl, st.slots.incarnation(sl))).collect::<Vec<_>>()
            });
            let names: Vec<(u16, u16, String, String)> = (0..st.slots.len() as u16)
                .filter_map(|sl| st.slots.owner(sl).map(|(s, b)| (sl, st.slots.incarnation(sl), s.clone(), b.clone())))
                .collect();
            (slots, names)
        };
        let replies = match self.shared.ask_workers(op, slots, FLOWS_TIMEOUT) {
            Ok(r) => r,
            Err(e) => return Response::Error { message: format!("flows: {e}") },
        };
        let mut rep = FlowsReport { per_worker: replies.iter().map(|r| r.count).collect(), total: replies.iter().map(|r| r.count).sum(), entries: Vec::new() };
        for (w, r) in replies.iter().enumerate() {
            for (e, idle) in &r.entries {
                let owner = names.iter().find(|n| n.0 == e.backend && n.1 == e.incarnation);
                let k = e.key();
                rep.entries.push(FlowRow {
                    worker: w as u32,
                    client: format!("{}:{}", std::net::Ipv4Addr::from(k.src), k.sport),
                    vip: format!("{}:{}", std::net::Ipv4Addr::from(k.dst), k.dport),
                    proto: k.proto,
                    service: owner.map_or("?".into(), |o| o.2.clone()),
                    backend: owner.map_or("?".into(), |o| o.3.clone()),
                    state: match e.state() {
                        crate::fastpath::conntrack::State::SynOnly => "syn_only",
                        crate::fastpath::conntrack::State::Established => "established",
                        crate::fastpath::conntrack::State::Closing => "closing",
                        crate::fastpath::conntrack::State::Empty => "empty",
                    }
                    .into(),
                    idle_ms: *idle,
                });
            }
        }
        Response::Flows(rep)
    }

    /// `explain` against the live state: the pipeline with the current health and load, and
    /// the backend the published snapshot's Maglev table picks.
    pub fn explain(&self, client: std::net::Ipv4Addr, client_port: u16, vip: Option<&str>) -> Response {
        match self.explain_inner(client, client_port, vip) {
            Ok(r) => Response::Explain(r),
            Err(message) => Response::Error { message },
        }
    }

    fn explain_inner(&self, client: std::net::Ipv4Addr, client_port: u16, vip: Option<&str>) -> Result<ExplainReport, String> {
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let svc = pick_service(&st.cfg, vip)?;
        let states: Vec<BackendState> = svc
            .backends
            .iter()
            .map(|b| {
                let v = st.health.get(&(svc.name.clone(), b.name.clone())).cloned().unwrap_or_default();
                BackendState { endpoints: 1, healthy_endpoints: u32::from(v.healthy), latency_ms: b.latency_ms.or(v.latency_ms), load_cps: v.load_cps }
            })
            .collect();
        let topo = Topology::from_config(&st.cfg);
        let class = topo.classify(client);
        let mut sst = st.states.get(&svc.name).cloned().unwrap_or_default();
        let offered: f64 = states.iter().map(|s| s.load_cps).sum();
        let d = evaluate(svc, &states, &topo, &class, if offered > 0.0 { Some(offered) } else { None }, &mut sst, self.started.elapsed().as_secs_f64());
        let key = FlowKey::new(client, svc.vip, client_port, svc.port, svc.protocol.number());
        let hash = key.affinity_hash(svc.session_affinity);
        let proto = svc.protocol.number();
        let (backend, table_size, snapshot_generation) = self
            .shared
            .with_snapshot(|s| {
                let pick = s.by_vip_port.get(&(u32::from(svc.vip), svc.port, proto)).and_then(|&si| {
                    let ss = s.services.get(usize::from(si))?;
                    let t = ss.tables.get(usize::from(s.class_of(u32::from(client))))?.as_ref()?;
                    let slot = t.pick(hash)?;
                    Some((s.backends.get(usize::from(slot))?.name.clone(), t.maglev.len() as u32))
                });
                (pick.as_ref().map(|p| p.0.clone()), pick.map_or(0, |p| p.1), s.generation)
            })
            .unwrap_or((None, 0, 0));
        Ok(ExplainReport {
            service: svc.name.clone(),
            vip: format!("{}:{}/{}", svc.vip, svc.port, format!("{:?}", svc.protocol).to_lowercase()),
            client: format!("{client}:{client_port}"),
            class: class.to_string(),
            decision_json: serde_json::to_string(&d).map_err(|e| e.to_string())?,
            backends: svc.backends.iter().map(|b| b.name.clone()).collect(),
            backend,
            hash,
            table_size,
            snapshot_generation,
        })
    }

    /// `snapshot show`.
    pub fn snapshot_show(&self) -> Response {
        let (config_generation, last_propagation_us) = {
            let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
            (st.config_generation, st.last_propagation_us)
        };
        let workers_min_generation = self.shared.stats.iter().map(|w| w.generation.load(std::sync::atomic::Ordering::Relaxed)).min().unwrap_or(0);
        let rep = self.shared.with_snapshot(|s| {
            let mut all: Vec<*const crate::control::snapshot::ClassTable> = Vec::new();
            let mut services = Vec::new();
            for ss in &s.services {
                let mut mine: Vec<*const crate::control::snapshot::ClassTable> = Vec::new();
                let mut classes = Vec::new();
                for (ci, t) in ss.tables.iter().enumerate() {
                    let cname = s.class_names.get(ci).cloned().unwrap_or_else(|| format!("class {ci}"));
                    match t {
                        None => classes.push((cname, None, Vec::new())),
                        Some(t) => {
                            let p = std::sync::Arc::as_ptr(t);
                            let idx = match mine.iter().position(|x| *x == p) {
                                Some(i) => i,
                                None => {
                                    mine.push(p);
                                    mine.len() - 1
                                }
                            };
                            if !all.contains(&p) {
                                all.push(p);
                            }
                            let names = t.backends.iter().map(|b| s.backends.get(usize::from(*b)).map_or("?".into(), |x| x.name.clone())).collect();
                            classes.push((cname, Some(idx as u32), names));
                        }
                    }
                }
                services.push(SnapService { name: ss.name.clone(), classes, distinct_tables: mine.len() as u32, failed_over: ss.failed_over });
            }
            SnapshotReport {
                generation: s.generation,
                config_generation,
                age_ms: s.created.map_or(0, |c| c.elapsed().as_millis() as u64),
                last_propagation_us,
                workers_min_generation,
                services,
                distinct_tables: all.len() as u32,
            }
        });
        match rep {
            Some(r) => Response::Snapshot(r),
            None => Response::Error { message: "no snapshot published".into() },
        }
    }
}

fn no_service(c: &Config, name: &str) -> String {
    let names: Vec<&str> = c.services.iter().map(|s| s.name.as_str()).collect();
    format!("no service named {name} (have: {})", names.join(", "))
}

/// Finds a service by `IP:PORT[/proto]` (or the only one when `vip` is `None`).
pub fn pick_service<'a>(cfg: &'a Config, vip: Option<&str>) -> Result<&'a Service, String> {
    let list = || cfg.services.iter().map(|s| format!("{}:{}/{:?}", s.vip, s.port, s.protocol).to_lowercase()).collect::<Vec<_>>().join(", ");
    let Some(v) = vip else {
        return match cfg.services.len() {
            1 => Ok(&cfg.services[0]),
            n => Err(format!("the config has {n} services; choose one with --vip ({})", list())),
        };
    };
    let (addr, proto) = match v.split_once('/') {
        Some((a, p)) => (a, Some(p.to_ascii_lowercase())),
        None => (v, None),
    };
    let (ip, port) = addr.split_once(':').ok_or_else(|| format!("--vip {v:?}: expected IP:PORT/PROTO, e.g. 10.0.0.100:80/tcp"))?;
    let ip: std::net::Ipv4Addr = ip.parse().map_err(|_| format!("--vip {v:?}: {ip:?} is not an IPv4 address"))?;
    let port: u16 = port.parse().map_err(|_| format!("--vip {v:?}: {port:?} is not a port"))?;
    cfg.services
        .iter()
        .find(|s| s.vip == ip && s.port == port && proto.as_deref().map_or(true, |p| format!("{:?}", s.protocol).to_lowercase() == p))
        .ok_or_else(|| format!("no service {v} (have: {})", list()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_toml_or_bare_strings() {
        assert_eq!(parse_value("0.5"), Some(toml::Value::Float(0.5)));
        assert_eq!(parse_value("true"), Some(toml::Value::Boolean(true)));
        assert_eq!(parse_value("SPILL_CROSS_ZONE"), Some(toml::Value::String("SPILL_CROSS_ZONE".into())));
        assert_eq!(parse_value("\"a b\""), Some(toml::Value::String("a b".into())));
        assert_eq!(parse_value(""), None);
    }

    #[test]
    fn edit_reports_unknown_fields_and_types() {
        let b = Backend::new("b1", "z1");
        let e = edit(&b, &[("wieght".into(), "3".into())], "backend b1", &["name"]).unwrap_err();
        assert!(e.contains("wieght"), "{e}");
        let e = edit(&b, &[("weight".into(), "\"x\"".into())], "backend b1", &["name"]).unwrap_err();
        assert!(e.contains("backend b1"), "{e}");
        let b2 = edit(&b, &[("weight".into(), "80".into()), ("enabled".into(), "false".into())], "b", &[]).unwrap();
        assert_eq!((b2.weight, b2.enabled), (80, false));
        let d = describe_changes(&Config::default(), &Config::default());
        assert!(d.is_empty());
    }

    #[test]
    fn atomic_write_replaces_the_file() {
        let dir = std::env::temp_dir().join(format!("spw-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.toml");
        std::fs::write(&p, "old").unwrap();
        write_atomic(&p, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn daemon() -> Daemon {
        let text = r#"
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.2"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
[[services.backends]]
name = "b1"
address = "10.0.1.1"
mac = "02:00:00:00:0b:01"
[[services.backends]]
name = "b2"
address = "10.0.1.2"
mac = "02:00:00:00:0b:02"
"#;
        let cfg = Config::from_toml(text).unwrap();
        Daemon::new(cfg, 1, vec![0], Box::new(|_| Default::default())).unwrap()
    }

    fn set(service: &str, name: &str, f: &[(&str, &str)], g: Option<u64>) -> spillway_shared::proto::Request {
        spillway_shared::proto::Request::BackendSet {
            service: service.into(),
            name: name.into(),
            fields: f.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            if_generation: g,
        }
    }

    #[test]
    fn health_check_edits_keep_a_down_backend_down_and_new_endpoints_start_down() {
        let d = daemon();
        let r = d.edit_request(spillway_shared::proto::Request::ServiceSet {
            name: "web".into(),
            fields: vec![("health_check".into(), "{ type = \"tcp\", check_interval_sec = 1.0, timeout_sec = 0.5 }".into())],
            if_generation: None,
        });
        assert!(matches!(r, Response::Applied(_)), "{r:?}");
        d.set_health("web", "b2", false, None);
        // change the check: b2 stays down in the view the dataplane uses
        let r = d.edit_request(spillway_shared::proto::Request::ServiceSet {
            name: "web".into(),
            fields: vec![("health_check".into(), "{ type = \"tcp\", check_interval_sec = 1.0, timeout_sec = 0.4 }".into())],
            if_generation: None,
        });
        assert!(matches!(r, Response::Applied(_)), "{r:?}");
        let healthy = |b: &str| d.control.lock().unwrap().health[&("web".to_string(), b.to_string())].healthy;
        assert!(!healthy("b2"), "a health-check edit revived a down backend");
        // a new address is a new endpoint: unhealthy until probes pass
        assert!(matches!(d.edit_request(set("web", "b1", &[("address", "10.0.1.99")], None)), Response::Applied(_)));
        assert!(!healthy("b1"));
        assert!(d.shared.with_snapshot(|s| s.backends.iter().filter(|b| b.present && (b.name == "b1" || b.name == "b2")).all(|b| !b.healthy)).unwrap());
    }

    #[test]
    fn edits_keep_state_of_unchanged_backends() {
        let d = daemon();
        d.set_health("web", "b2", false, Some(3.0));
        let slot_b2 = d.control.lock().unwrap().slots.slot("web", "b2");
        let r = d.edit_request(set("web", "b1", &[("weight", "80")], Some(1)));
        let Response::Applied(a) = r else { panic!("{r:?}") };
        assert_eq!(a.generation, 2);
        assert_eq!(a.changes, vec!["service web: backend b1: weight: 50 -> 80".to_string()]);
        {
            let st = d.control.lock().unwrap();
            assert!(!st.health[&("web".to_string(), "b2".to_string())].healthy, "b2's health survives an edit of b1");
            assert_eq!(st.slots.slot("web", "b2"), slot_b2);
            assert_eq!(st.cfg.services[0].backends[0].weight, 80);
        }
        // stale generation
        let r = d.edit_request(set("web", "b1", &[("weight", "81")], Some(1)));
        assert_eq!(r, Response::Error { message: "config generation is 2, not 1: someone else changed it; re-read and retry".into() });
        // changing b2's address makes it a new endpoint: without a health check it is
        // static (healthy); removing and re-adding b1 gets a new incarnation
        let inc_b1 = { let st = d.control.lock().unwrap(); st.slots.incarnation(st.slots.slot("web", "b1").unwrap()) };
        assert!(matches!(d.edit_request(set("web", "b2", &[("address", "10.0.1.22")], None)), Response::Applied(_)));
        assert!(d.control.lock().unwrap().health[&("web".to_string(), "b2".to_string())].healthy);
        let rm = spillway_shared::proto::Request::BackendRemove { service: "web".into(), name: "b1".into(), if_generation: None };
        assert!(matches!(d.edit_request(rm), Response::Applied(_)));
        let add = spillway_shared::proto::Request::BackendAdd {
            service: "web".into(),
            name: "b1".into(),
            fields: vec![("address".into(), "10.0.1.1".into()), ("mac".into(), "02:00:00:00:0b:01".into())],
            if_generation: None,
        };
        assert!(matches!(d.edit_request(add), Response::Applied(_)));
        let st = d.control.lock().unwrap();
        let slot = st.slots.slot("web", "b1").unwrap();
        assert_ne!(st.slots.incarnation(slot), inc_b1, "a re-added backend never matches old connection entries");
        assert_eq!(st.config_generation, 5);
        assert!(d.shared.with_snapshot(|s| s.generation).unwrap() >= 5);
    }

    #[test]
    fn invalid_edits_change_nothing() {
        let d = daemon();
        let r = d.edit_request(set("web", "b1", &[("weight", "0")], None));
        let Response::Error { message } = r else { panic!("{r:?}") };
        assert!(message.starts_with("services[0].backends[0].weight = 0: must be in 1..=1000"), "{message}");
        let r = d.edit_request(set("web", "b1", &[("mac", "")], None));
        let Response::Error { message } = r else { panic!("{r:?}") };
        assert!(message.contains("services[0].backends[0].mac is required"), "{message}");
        let r = d.edit_request(spillway_shared::proto::Request::ServiceSet { name: "web".into(), fields: vec![("backends".into(), "[]".into())], if_generation: None });
        assert!(matches!(r, Response::Error { .. }));
        assert_eq!(d.control.lock().unwrap().config_generation, 1);
        assert_eq!(d.control.lock().unwrap().generation, 1);
    }
}
