//! Read-only views for `spillwayctl`: `status`, `config show`, `health show`, `flows`,
//! live `explain` and `snapshot show`. None of them changes the running config; `flows`
//! asks the workers through their mailboxes ([`crate::control`]).

use crate::daemon::Daemon;
use spillway_shared::config::{Config, Service};
use spillway_shared::flow::FlowKey;
use spillway_shared::pipeline::{evaluate, Topology};
use spillway_shared::proto::{BackendStatus, Counters, EndpointStatus, ExplainReport, HealthCheckerStatus, StatusReport, FlowFilter, FlowOp, FlowRow, FlowsReport, HealthRow, Response, SnapService, SnapshotReport};
use std::time::Duration;

/// How long a flows request waits for every worker.
pub const FLOWS_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the next hop of endpoint `m` of `svc` is not resolved (`status`'s UNRESOLVED
/// reason, also while its first request awaits a reply), or `None`: resolved, or a
/// configured `mac`.
fn next_hop_problem(st: &crate::daemon::ControlState, svc: &spillway_shared::config::Service, m: &spillway_shared::config::Member, now_ms: u64) -> Option<String> {
    match spillway_shared::neighbors::next_hop(&st.cfg, svc, m) {
        spillway_shared::neighbors::NextHop::Resolve(a) => st.neighbors.unresolved_reason(&a, now_ms),
        spillway_shared::neighbors::NextHop::Static(_) => None,
    }
}

impl Daemon {
    /// The status report.
    pub fn status(&self) -> StatusReport {
        self.status_with(true)
    }

    /// The status report; without `endpoint_rows`, every [`BackendStatus::members`] is
    /// left empty (its backend's sums, counts and health still cover every endpoint): the
    /// metrics' scrape when per-endpoint series are off, which then builds no row, and
    /// copies no name or address, per endpoint under the control lock.
    pub fn status_with(&self, endpoint_rows: bool) -> StatusReport {
        let workers = self.worker_counters();
        let total = Counters::sum(&workers);
        let health_checker = {
            let ch = self.checker.lock().unwrap_or_else(|e| e.into_inner());
            ch.as_ref().map(|c| HealthCheckerStatus {
                started: true,
                dead: c.dead(),
                targets: 0,
                probes_skipped: c.skipped_total(),
                nofile_limit: 0,
            })
        };
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let mut health_checker = health_checker.unwrap_or_default();
        // as many as `health::targets_from_config` builds, counted without building them
        health_checker.targets = st.cfg.services.iter().filter(|s| s.health_check.is_some()).flat_map(|s| &s.backends).map(|b| b.member_addresses().count() as u64).sum();
        health_checker.nofile_limit = st.nofile_limit;
        if health_checker.dead.is_none() {
            health_checker.dead = st.health_checker_dead.clone();
        }
        let backends = self.backend_rows(&st, None, endpoint_rows);
        let ports = (0..st.cfg.ports.len()).map(|i| (self.port_stats)(i)).collect();
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_sec: self.started.elapsed().as_secs_f64(),
            generation: st.generation,
            ports,
            workers,
            total,
            backends,
            health_checker,
            control_socket: self.ctl_stats.report(),
            neighbors: st.neighbors.status(&st.cfg, self.started.elapsed().as_millis() as u64),
            sync: self.sync.get().map(|s| s.status()).unwrap_or_default(),
        }
    }

    /// Rows of [`StatusReport::backends`]: one per backend (endpoint counts, drain, summed
    /// counters) with its endpoints' rows (with `endpoint_rows`); of every service, or of
    /// `only` (by name).
    fn backend_rows(&self, st: &crate::daemon::ControlState, only: Option<&str>, endpoint_rows: bool) -> Vec<BackendStatus> {
        let mut backends = Vec::new();
        // Health as the dataplane uses it: unresolved next hops count as unhealthy.
        let marked = crate::control::with_unresolved(&st.cfg, &st.health, st.neighbors.view());
        let health = marked.as_ref().unwrap_or(&st.health);
        let now_ms = self.started.elapsed().as_millis() as u64;
        for svc in st.cfg.services.iter().filter(|s| only.is_none_or(|n| s.name == n)) {
            let states = crate::control::backend_states(svc, health);
            let drained = st.states.get(&svc.name).map(|s| &s.drained);
            for (bi, b) in svc.backends.iter().enumerate() {
                let mut members = Vec::new();
                // (endpoints, of them enabled, of them healthy; new connections, packets, bytes)
                let (mut n, mut enabled, mut any_healthy, mut sums) = (0usize, 0usize, false, (0u64, 0u64, 0u64));
                for m in b.member_refs() {
                    let slot = st.slots.slot(&svc.name, &b.name, &m.name);
                    let (new_connections, packets) = slot.map_or((0, 0), |s| self.slot_totals(st, s));
                    let bytes = slot.map_or(0, |s| self.slot_bytes(st, s));
                    let healthy = crate::control::endpoint_view(health, &svc.name, &b.name, &m.name).healthy;
                    (n, enabled, any_healthy) = (n + 1, enabled + usize::from(m.enabled), any_healthy || healthy);
                    sums = (sums.0 + new_connections, sums.1 + packets, sums.2 + bytes);
                    if endpoint_rows {
                        let m = m.to_member();
                        let unresolved = next_hop_problem(st, svc, &m, now_ms);
                        members.push(EndpointStatus { name: m.name, address: m.address.to_string(), weight: m.weight, healthy, enabled: m.enabled, new_connections, packets, bytes, unresolved, server_id: m.server_id });
                    }
                }
                // A group whose endpoints are all disabled is disabled as a whole, as a
                // disabled single backend is; its health is then its endpoints' own (the
                // dataplane's count covers enabled endpoints only, and would say unhealthy
                // for endpoints that pass their checks: fresh-user QA).
                let all_disabled = b.is_group() && n > 0 && enabled == 0;
                let healthy = if all_disabled { any_healthy } else { states[bi].is_healthy() };
                // Drained: auto capacity drain holds it, or the operator set its capacity to
                // zero (`capacity_scaler = 0` or `capacity_cps = 0`): no new connections.
                let drained = drained.is_some_and(|d| d.contains_key(&b.name)) || b.capacity_scaler == 0.0 || b.capacity_cps == Some(0.0);
                backends.push(BackendStatus {
                    service: svc.name.clone(),
                    backend: b.name.clone(),
                    address: if b.is_group() { String::new() } else { b.address.to_string() },
                    zone: b.zone.clone(),
                    healthy,
                    enabled: b.enabled && !all_disabled,
                    new_connections: sums.0,
                    packets: sums.1,
                    bytes: sums.2,
                    endpoints: states[bi].endpoints,
                    healthy_endpoints: states[bi].healthy_endpoints,
                    drained,
                    members,
                });
            }
        }
        backends
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

    /// `service show NAME` (also `backend list|show`): that service's `[[services]]` table
    /// and its backends' state; only it travels. Error: no service of that name.
    pub fn service_show(&self, name: &str) -> Response {
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let Some(svc) = st.cfg.service(name) else {
            // with the names there are, as `service remove` and `flows` answer
            return Response::Error { message: no_service(&st.cfg, name) };
        };
        #[derive(serde::Serialize)]
        struct One<'a> {
            services: [&'a Service; 1],
        }
        let toml = toml::to_string_pretty(&One { services: [svc] }).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"));
        Response::Service { generation: st.config_generation, toml, backends: self.backend_rows(&st, Some(name), true) }
    }

    /// `health show`.
    pub fn health_show(&self) -> Response {
        let statuses = self.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|c| c.snapshot()).unwrap_or_default();
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        // Health as the dataplane uses it, as `status` and `backend list` show it: a next hop
        // whose resolution failed makes its endpoint unhealthy, and says why (QA: `health
        // show` said "healthy static" for an endpoint `status` showed UNRESOLVED).
        let marked = crate::control::with_unresolved(&st.cfg, &st.health, st.neighbors.view());
        let now_ms = self.started.elapsed().as_millis() as u64;
        // the checker's state by endpoint (the first of a key, as a search in order finds it)
        let mut by_key: std::collections::HashMap<(&str, &str, &str), &crate::health::TargetStatus> = std::collections::HashMap::with_capacity(statuses.len());
        for t in &statuses {
            by_key.entry((t.service.as_str(), t.backend.as_str(), t.endpoint.as_str())).or_insert(t);
        }
        let mut rows = Vec::new();
        for s in &st.cfg.services {
            for b in &s.backends {
                for m in b.members() {
                    let v = crate::control::endpoint_view(marked.as_ref().unwrap_or(&st.health), &s.name, &b.name, &m.name);
                    let t = by_key.get(&(s.name.as_str(), b.name.as_str(), m.name.as_str())).copied();
                    // the next hop's reason only when it, not the probes, made it unhealthy
                    let probes_healthy = crate::control::endpoint_view(&st.health, &s.name, &b.name, &m.name).healthy;
                    let unresolved = if !v.healthy && probes_healthy { next_hop_problem(&st, s, &m, now_ms) } else { None };
                    rows.push(HealthRow {
                        service: s.name.clone(),
                        backend: b.name.clone(),
                        endpoint: m.name.clone(),
                        address: m.address.to_string(),
                        healthy: v.healthy,
                        checked: s.health_check.is_some(),
                        latency_ms: b.latency_ms.or(v.latency_ms),
                        load_cps: v.load_cps,
                        consecutive_successes: t.map_or(0, |t| t.consecutive_successes),
                        consecutive_failures: t.map_or(0, |t| t.consecutive_failures),
                        probes: t.map_or(0, |t| t.probes_sent),
                        probes_failed: t.map_or(0, |t| t.probes_failed),
                        probes_skipped: t.map_or(0, |t| t.probes_skipped),
                        last_error: unresolved.or_else(|| t.and_then(|t| t.last_error.clone())),
                        since_change_sec: t.map(|t| t.last_change.elapsed().as_secs_f64()),
                    });
                }
            }
        }
        Response::Health(rows)
    }

    /// `flows count|show|flush`: posts the request to every worker's mailbox.
    pub fn flows(&self, op: FlowOp, filter: &FlowFilter) -> Response {
        if matches!((&op, filter), (FlowOp::Count, FlowFilter::All)) {
            // Every entry held, from the workers' occupancy counters: no mailbox request,
            // no table walk (an expired entry counts until the sweep clears it).
            let per_worker: Vec<u64> = self.shared.stats.iter().map(|w| crate::fastpath::stats::ct_entries(w)).collect();
            return Response::Flows(FlowsReport { total: per_worker.iter().sum(), per_worker, entries: Vec::new() });
        }
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
            // every endpoint slot of the chosen backends
            let slots = pairs.map(|p| {
                p.iter().flat_map(|(s, b)| st.slots.backend_slots(s, b)).map(|sl| (sl, st.slots.incarnation(sl))).collect::<Vec<_>>()
            });
            // flows name `backend/endpoint` for a group's endpoints, the backend otherwise
            let label = |s: &str, b: &str, e: &str| {
                let group = st.cfg.service(s).and_then(|x| x.backends.iter().find(|y| y.name == b)).is_some_and(|y| y.is_group());
                if group { format!("{b}/{e}") } else { b.to_string() }
            };
            let names: Vec<(u16, u16, String, String)> = (0..st.slots.len() as u16)
                .filter_map(|sl| st.slots.owner(sl).map(|(s, b, e)| (sl, st.slots.incarnation(sl), s.clone(), label(s, b, e))))
                .collect();
            (slots, names)
        };
        let replies = match self.shared.ask_workers(op, slots, FLOWS_TIMEOUT) {
            Ok(r) => r,
            Err(e) => return Response::Error { message: format!("flows: {e}") },
        };
        let mut rep = FlowsReport { per_worker: replies.iter().map(|r| r.count).collect(), total: replies.iter().map(|r| r.count).sum(), entries: Vec::new() };
        use crate::fastpath::conntrack::Entry;
        use spillway_shared::flow::FlowAddr;
        // Both tables' entries, IPv4 first; addresses printed by family ([fd01::5]:40000).
        // A peer's entry that has seen no packet here shows as `synced` (fleet sync). An
        // entry names its service by number: the VIP, port and protocol are the service's
        // (a service removed since shows as `?`, protocol 0).
        let vips: hashbrown::HashMap<u16, (String, u8)> = self
            .shared
            .with_snapshot(|s| s.services.iter().map(|svc| (svc.id, (std::net::SocketAddr::new(if svc.ipv6 { std::net::IpAddr::V6(svc.vip6.into()) } else { std::net::IpAddr::V4(svc.vip.into()) }, svc.port).to_string(), svc.proto))).collect())
            .unwrap_or_default();
        let row = |e: &dyn RowOf| -> (std::net::SocketAddr, (String, u8), Option<crate::fastpath::conntrack::State>, u16, u16) {
            let (client, service, state, backend, incarnation) = e.parts();
            (client, vips.get(&service).cloned().unwrap_or_else(|| ("?".into(), 0)), state, backend, incarnation)
        };
        trait RowOf {
            fn parts(&self) -> (std::net::SocketAddr, u16, Option<crate::fastpath::conntrack::State>, u16, u16);
        }
        impl<A: FlowAddr> RowOf for Entry<A> {
            fn parts(&self) -> (std::net::SocketAddr, u16, Option<crate::fastpath::conntrack::State>, u16, u16) {
                let state = if self.is_remote() { None } else { Some(self.state()) };
                (std::net::SocketAddr::new(self.src.ip(), self.sport), self.service, state, self.backend, self.incarnation)
            }
        }
        for (w, r) in replies.iter().enumerate() {
            let rows = r.entries.iter().map(|(e, idle)| (row(e), idle)).chain(r.entries6.iter().map(|(e, idle)| (row(e), idle)));
            for ((client, (vip, proto), state, backend, incarnation), idle) in rows {
                let owner = names.iter().find(|n| n.0 == backend && n.1 == incarnation);
                rep.entries.push(FlowRow {
                    worker: w as u32,
                    client: client.to_string(),
                    vip,
                    proto,
                    service: owner.map_or("?".into(), |o| o.2.clone()),
                    backend: owner.map_or("?".into(), |o| o.3.clone()),
                    state: match state {
                        None => "synced",
                        Some(crate::fastpath::conntrack::State::SynOnly) => "syn_only",
                        Some(crate::fastpath::conntrack::State::Established) => "established",
                        Some(crate::fastpath::conntrack::State::Closing) => "closing",
                        Some(crate::fastpath::conntrack::State::Empty) => "empty",
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
    pub fn explain(&self, client: std::net::IpAddr, client_port: u16, vip: Option<&str>, quic_dcid: Option<&str>) -> Response {
        match self.explain_inner(client, client_port, vip) {
            Ok(mut r) => {
                if let Some(dcid) = quic_dcid {
                    r.quic = self.explain_quic(vip, dcid);
                }
                Response::Explain(r)
            }
            Err(message) => Response::Error { message },
        }
    }

    /// The QUIC-LB part of `explain --quic-dcid` ([`crate::control::quic_lb::explain`]).
    fn explain_quic(&self, vip: Option<&str>, dcid: &str) -> Option<spillway_shared::proto::QuicExplain> {
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let si = st.cfg.services.iter().position(|s| pick_service(&st.cfg, vip).is_ok_and(|p| p.name == s.name)).map(|i| i as u16);
        let owner = |slot: u16| st.slots.owner(slot).map(|o| (o.1.clone(), o.2.clone()));
        // Snapshot service indices follow the config's order (control/compile.rs).
        self.shared.with_snapshot(|s| crate::control::quic_lb::explain(s, si, dcid, owner))
    }

    fn explain_inner(&self, client: std::net::IpAddr, client_port: u16, vip: Option<&str>) -> Result<ExplainReport, String> {
        let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
        let svc = pick_service(&st.cfg, vip)?;
        // Health as the snapshot uses it (failed next hops count as unhealthy), like status.
        let marked = crate::control::with_unresolved(&st.cfg, &st.health, st.neighbors.view());
        let health = marked.as_ref().unwrap_or(&st.health);
        let states = crate::control::backend_states(svc, health);
        let topo = Topology::from_config(&st.cfg);
        let class = topo.classify(client);
        let mut sst = st.states.get(&svc.name).cloned().unwrap_or_default();
        let offered: f64 = states.iter().map(|s| s.load_cps).sum();
        let d = evaluate(svc, &states, &topo, &class, if offered > 0.0 { Some(offered) } else { None }, &mut sst, self.started.elapsed().as_secs_f64());
        let proto = svc.protocol.number();
        use std::net::IpAddr;
        let hash = match (client, svc.vip) {
            (IpAddr::V4(c), IpAddr::V4(v)) => FlowKey::new(c, v, client_port, svc.port, proto).affinity_hash(svc.session_affinity),
            (IpAddr::V6(c), IpAddr::V6(v)) => {
                spillway_shared::flow::FlowKey6::new6(c, v, client_port, svc.port, proto).affinity_hash(svc.session_affinity)
            }
            _ => return Err(format!("--client {client}: not of the family of service {}'s VIP {} (one family per service)", svc.name, svc.vip)),
        };
        // The worker's rule on the same snapshot: a new connection from one of our own
        // addresses is dropped before any backend is chosen.
        let (slot, table_size, snapshot_generation, martian) = self
            .shared
            .with_snapshot(|s| {
                let martian = match client {
                    IpAddr::V4(c) => spillway_shared::martian::is_martian_source(u32::from(c), |a| s.arp_addrs.contains_key(&a)),
                    IpAddr::V6(c) => spillway_shared::martian::is_martian_source(u128::from(c), |a| s.nd_addrs.contains_key(&a)),
                };
                let (si, class) = match (svc.vip, client) {
                    (IpAddr::V4(v), IpAddr::V4(c)) => (s.by_vip_port.get(&(u32::from(v), svc.port, proto)), s.class_of(u32::from(c))),
                    (IpAddr::V6(v), IpAddr::V6(c)) => (s.by_vip6_port.get(&(u128::from(v), svc.port, proto)), s.class_of6(u128::from(c))),
                    _ => (None, 0),
                };
                let pick = si.and_then(|&si| {
                    let ss = s.services.get(usize::from(si))?;
                    let t = ss.tables.get(usize::from(class))?.as_ref()?;
                    Some((t.pick(hash)?, t.maglev.len() as u32))
                });
                let slot = if martian { None } else { pick.map(|p| p.0) };
                (slot, pick.map_or(0, |p| p.1), s.generation, martian)
            })
            .unwrap_or((None, 0, 0, false));
        // The pick is an endpoint slot: name its backend and endpoint.
        let owner = slot.and_then(|sl| st.slots.owner(sl)).filter(|o| o.0 == svc.name);
        let (backend, endpoint) = match owner {
            Some((_, b, e)) => (Some(b.clone()), Some(e.clone())),
            None => (None, None),
        };
        let endpoint_shares = spillway_shared::pipeline::endpoints::endpoint_shares(svc, &d.weights, |b, e| {
            let bk = &svc.backends[b];
            bk.members().get(e).is_some_and(|m| crate::control::endpoint_view(health, &svc.name, &bk.name, &m.name).healthy)
        })
        .into_iter()
        .map(|x| (svc.backends[x.backend].name.clone(), svc.backends[x.backend].members()[x.endpoint].name.clone(), x.share))
        .collect();
        Ok(ExplainReport {
            service: svc.name.clone(),
            vip: svc.endpoint_label(),
            client: std::net::SocketAddr::new(client, client_port).to_string(),
            class: class.to_string(),
            decision_json: serde_json::to_string(&d).map_err(|e| e.to_string())?,
            backends: svc.backends.iter().map(|b| b.name.clone()).collect(),
            backend,
            endpoint,
            endpoint_shares,
            hash,
            table_size,
            snapshot_generation,
            drop_reason: martian.then(|| crate::wire::DropReason::MartianSource.name().to_string()),
            quic: None,
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

/// "no service named X (have: ...)".
pub(crate) fn no_service(c: &Config, name: &str) -> String {
    let names: Vec<&str> = c.services.iter().map(|s| s.name.as_str()).collect();
    format!("no service named {name} (have: {})", names.join(", "))
}

/// Finds a service by `IP:PORT[/proto]` (or the only one when `vip` is `None`).
pub fn pick_service<'a>(cfg: &'a Config, vip: Option<&str>) -> Result<&'a Service, String> {
    let list = || cfg.services.iter().map(|s| s.endpoint_label()).collect::<Vec<_>>().join(", ");
    if cfg.services.is_empty() {
        // as offline explain says it (was "the config has 0 services; choose one with --vip ()")
        return Err("the config has no services: nothing to explain (add one with `spillwayctl service add`, or a [[services]] table; docs/config.md)".into());
    }
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
    let sa: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| format!("--vip {v:?}: expected IP:PORT/PROTO, e.g. 10.0.0.100:80/tcp or [fd00::100]:80/tcp"))?;
    let (ip, port) = (sa.ip(), sa.port());
    cfg.services
        .iter()
        .find(|s| s.vip == ip && s.port == port && proto.as_deref().map(|p| s.protocol.name() == p).unwrap_or(true))
        .ok_or_else(|| format!("no service {v} (have: {})", list()))
}


#[cfg(test)]
mod tests {
    use super::*;

    /// Live `explain` on a daemon with no services says so, with or without `--vip`
    /// (fresh-user QA: "the config has 0 services; choose one with --vip ()").
    #[test]
    fn explain_without_services_says_there_are_none() {
        let cfg = Config::default();
        for vip in [None, Some("10.0.0.100:80/tcp")] {
            let e = pick_service(&cfg, vip).unwrap_err();
            assert!(e.starts_with("the config has no services: nothing to explain"), "{vip:?}: {e}");
        }
    }
}
