//! Dry runs of editing requests (`spillwayctl ... --dry-run`): an edit is planned exactly as
//! [`super::transaction`] would apply it (same validation and refusals), then the routing
//! snapshot of the running config and of the edited one are compiled from the same health,
//! load and pipeline state and compared ([`spillway_shared::dryrun`] defines the answer).
//! Nothing is published, no file is written, no generation moves.
//!
//! Tracked connections that would be re-picked are counted per endpoint by the workers
//! (a `flows count` restricted to that endpoint's slot, through their mailboxes): the
//! connection table keeps no per-backend occupancy counter, so this is one table walk per
//! affected endpoint, on the workers' control poll, never on a packet. The connections of
//! an endpoint that turns unhealthy are listed instead, and followed flow by flow into the
//! edited snapshot ([`flows`]): whether they leave depends on their client's class, and
//! where they go on their hash.

mod flows;

use crate::control::snapshot::{ServiceSnap, Snapshot};
use crate::control::{backend_states, compile_with_neighbors, with_unresolved, CompileInput, SlotMap};
use crate::daemon::{ControlState, Daemon, PoolState};
use spillway_shared::config::{Config, SessionAffinity};
use spillway_shared::dryrun::{DryRunClass, DryRunReport, DryRunService, Repick, ShareChange, StageChange};
use spillway_shared::pipeline::{self, ClientClass, Decision, Topology};
use spillway_shared::proto::{FlowOp, Request, Response};
use std::time::Duration;

/// How long the workers get to count the connections of one endpoint.
const COUNT_TIMEOUT: Duration = Duration::from_millis(500);

/// Hashes sampled when the two tables of a class differ in size (`maglev_table_size`
/// changed): the moved share is then estimated, to ±0.1 percentage point (1σ ≈ 0.05).
const SAMPLES: u64 = 1 << 20;

/// A dry run whose connection counts are still to be asked of the workers (without the
/// control mutex).
pub(super) struct Prepared {
    report: DryRunReport,
    /// (service index in the report, repick index, slot, incarnation, the endpoint's
    /// connections to follow into `after` when it turns unhealthy)
    counts: Vec<(usize, usize, u16, u16, Option<flows::Follow>)>,
    /// The running snapshot, as the dry run compiled it.
    before: Snapshot,
    /// The edited snapshot.
    after: Snapshot,
    /// Services whose entries are sessions on both sides ([`session_note`]) and whose new
    /// connections move.
    sessions: Vec<Sessions>,
}

/// A service of [`Prepared::sessions`].
struct Sessions {
    /// Service name.
    name: String,
    /// The note's words on the edit (`CLIENT_IP_PROTO -> CLIENT_IP`, or the affinity kept).
    edit: String,
    /// Every endpoint slot of the running service with its incarnation: the workers count
    /// the sessions on them.
    slots: Vec<(u16, u16)>,
}

impl Daemon {
    /// [`Request::DryRun`]: the effect of `inner` (a mutation, `config apply`, `vip
    /// drain|undrain`) without making it. Another request is refused with an error naming
    /// the ones that have a dry run.
    pub fn dry_run(&self, inner: Request) -> Response {
        use Request as R;
        match inner {
            R::ConfigApply { toml, if_generation } => self.config_apply_as(&toml, if_generation, true),
            r @ (R::ServiceAdd { .. }
            | R::ServiceRemove { .. }
            | R::ServiceSet { .. }
            | R::BackendAdd { .. }
            | R::BackendRemove { .. }
            | R::BackendSet { .. }
            | R::EndpointAdd { .. }
            | R::EndpointRemove { .. }
            | R::EndpointSet { .. }) => self.edit_request_as(r, true),
            R::VipDrain { vip } => self.vip_dry_run(vip, true),
            R::VipUndrain { vip } => self.vip_dry_run(vip, false),
            _ => Response::Error {
                message: "only editing requests have a dry run (service|backend|endpoint add|remove|set, config apply, vip drain|undrain)".into(),
            },
        }
    }

    /// `vip drain|undrain --dry-run`: the announcement change and the tracked connections of
    /// the VIP's services, which keep being served either way.
    fn vip_dry_run(&self, vip: std::net::IpAddr, drain: bool) -> Response {
        let (generation, services) = {
            let st = self.control.lock().unwrap_or_else(|e| e.into_inner());
            // the drain's own check and refusal (`announce::drain_target`): an undrain of a
            // remembered drain of a VIP no service has any more is allowed
            match st.cfg.services_of_vip(vip) {
                Ok(of) => (st.config_generation, of.iter().map(|s| s.name.clone()).collect::<Vec<String>>()),
                Err(_) if !drain && self.fleet.drained().contains(&vip) => (st.config_generation, Vec::new()),
                Err(message) => return Response::Error { message },
            }
        };
        let row = self.fleet.vips().into_iter().find(|r| r.vip == vip.to_string());
        let mut notes = Vec::new();
        let was = row.as_ref().map_or("no announcement state (no [announce])".to_string(), |r| {
            format!("drained {}, announced {}", r.drained, r.announced)
        });
        if drain {
            notes.push(format!("vip {vip}: {was} -> drained true: its announcement is withdrawn (BIRD stops exporting it); this host keeps forwarding the flows that still arrive, new connections follow the routers to other hosts"));
        } else {
            notes.push(format!("vip {vip}: {was} -> drained false: announced again once ready"));
        }
        for s in &services {
            let n = match self.flows(FlowOp::Count, &spillway_shared::proto::FlowFilter::Service(s.clone())) {
                Response::Flows(f) => f.total.to_string(),
                _ => "unknown (the workers did not answer)".into(),
            };
            notes.push(format!("service {s}: {n} tracked connections, kept on their backends"));
        }
        Response::DryRun(DryRunReport { config_generation: generation, changes: vec!["no config change (the drain is held in memory)".into()], services: Vec::new(), notes })
    }
}

/// The dry run of a planned edit from the running state `st` (control mutex held):
/// everything but the connection counts.
pub(super) fn prepare(d: &Daemon, st: &ControlState, cand: &Config, changes: Vec<String>) -> Prepared {
    let mut cand_slots: SlotMap = st.slots.clone();
    // `plan` already checked that the slots can take the edit.
    let _ = cand_slots.sync(cand);
    // The next hops as the edit's `set_config` leaves them: new ones start pending
    // (eligible); one whose resolution failed stays failed (its endpoints ineligible: QA,
    // an unresolved backend read as eligible in every dry run).
    let neigh_after = st.neighbors.view_after(cand);
    let now_sec = d.started.elapsed().as_secs_f64();
    // The health the edit leaves (`health::after_edit`, the rule the edit applies): new and
    // readdressed endpoints start as their health check says, a removed check leaves its
    // endpoints static healthy (QA: the edited side read the running health, so such
    // edits read as "routing unchanged").
    let mut health_after = st.health.clone();
    let changed: std::collections::HashSet<String> = crate::control::slots::SlotDelta::new(&st.cfg, cand).names().map(str::to_string).collect();
    crate::health::after_edit(&st.cfg, cand, &changed, &mut health_after);
    let compile = |cfg: &Config, slots: &SlotMap, health: &crate::control::HealthView, neigh: &crate::neighbor::driver::NeighborView| {
        let mut states = st.states.clone();
        compile_with_neighbors(cfg, slots, CompileInput { health, states: &mut states, now_sec, generation: st.generation, port_addrs: d.port_addrs.clone() }, neigh)
    };
    // Both sides get the drain marks the daemon's republication would give them now
    // (`control::pools`, the same rule on copies of the pool states): the running one as
    // published, the edited one as the edit's republication would mark it.
    let now_ms = d.now_ms();
    let mut before = compile(&st.cfg, &st.slots, &st.health, st.neighbors.view());
    crate::control::pools::predict_draining(&st.cfg, &st.slots, &mut before, &mut st.pools.clone(), now_ms);
    let mut after = compile(cand, &cand_slots, &health_after, &neigh_after);
    let mut pools_after = st.pools.clone();
    crate::control::pools::predict_draining(cand, &cand_slots, &mut after, &mut pools_after, now_ms);
    let side = |cfg: &'_ Config, slots: &'_ SlotMap, health: &crate::control::HealthView, snap: &'_ Snapshot, neigh: &crate::neighbor::driver::NeighborView| Side {
        cfg: cfg.clone(),
        slots: slots.clone(),
        health: with_unresolved(cfg, health, neigh).unwrap_or_else(|| health.clone()),
        topo: Topology::from_config(cfg),
        snap_index: snap.services.iter().map(|s| s.name.clone()).collect(),
    };
    let b = side(&st.cfg, &st.slots, &st.health, &before, st.neighbors.view());
    let a = side(cand, &cand_slots, &health_after, &after, &neigh_after);
    let mut report = DryRunReport { config_generation: st.config_generation, changes, services: Vec::new(), notes: Vec::new() };
    let mut counts = Vec::new();
    let mut sessions = Vec::new();
    let mut names: Vec<&str> = cand.services.iter().map(|s| s.name.as_str()).collect();
    names.extend(st.cfg.services.iter().map(|s| s.name.as_str()).filter(|n| cand.service(n).is_none()));
    for name in names {
        let mut svc = DryRunService {
            service: name.to_string(),
            what: match (st.cfg.service(name).is_some(), cand.service(name).is_some()) {
                (true, true) => "changed",
                (false, _) => "added",
                (_, false) => "removed",
            }
            .into(),
            classes: Vec::new(),
            repicked: Vec::new(),
        };
        // A service without backends on both sides (a backend has at least one endpoint)
        // routes nothing and tracks nothing: one entry without classes or re-picks when its
        // config changes (`DryRunService` says so), instead of a stage trace per class.
        let no_backends = |c: &Config| c.service(name).is_none_or(|s| s.backends.is_empty());
        if no_backends(&st.cfg) && no_backends(cand) {
            if st.cfg.service(name) != cand.service(name) {
                report.services.push(svc);
            }
            continue;
        }
        let mut classes: Vec<String> = before.class_names.clone();
        classes.extend(after.class_names.iter().filter(|c| !before.class_names.contains(c)).cloned());
        for class in &classes {
            if let Some(c) = class_change(st, &b, &before, &a, &after, name, class, now_sec) {
                svc.classes.push(c);
            }
        }
        let pools = (st.pools.get(name), pools_after.get(name));
        let mut slots = repicks(pools, &b, &before, &a, &after, name, &mut svc.repicked);
        if svc.classes.is_empty() && svc.repicked.is_empty() {
            continue;
        }
        let si = report.services.len();
        counts.extend(slots.drain(..).map(|(ri, slot, inc, follow)| (si, ri, slot, inc, follow)));
        if let (Some(old), Some(new)) = (st.cfg.service(name), cand.service(name)) {
            // (a change of the key's form is refused before this: `check_tracking_key`)
            let moves = svc.classes.iter().any(|c| c.moved_share > 0.0);
            if moves && session_keyed(old) && session_keyed(new) {
                let slots = old.backends.iter().flat_map(|b| st.slots.backend_slots(name, &b.name)).map(|sl| (sl, st.slots.incarnation(sl))).collect();
                let edit = if old.session_affinity == new.session_affinity { format!("{:?}", new.session_affinity) } else { format!("{:?} -> {:?}", old.session_affinity, new.session_affinity) };
                sessions.push(Sessions { name: name.to_string(), edit, slots });
            }
        }
        report.services.push(svc);
    }
    report.notes.extend(address_notes(&st.cfg, cand));
    report.notes.extend(class_notes(&st.cfg, cand, &before, &after));
    Prepared { report, counts, before, after, sessions }
}

/// Client prefixes (`client_zones` of either config) whose client class differs between
/// the two snapshots (the longest-prefix match of the prefix's network address): the
/// per-class comparison cannot show them, since their clients change table, not the
/// table they use. One note per prefix, in config order (the edited config's first).
fn class_notes(before_cfg: &Config, after_cfg: &Config, before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let class = |snap: &Snapshot, a: std::net::IpAddr| {
        let id = snap.classes.lookup(a).copied().unwrap_or(snap.incompatible_class);
        snap.class_names.get(usize::from(id)).cloned().unwrap_or_else(|| "(not zonal)".into())
    };
    let mut seen = Vec::new();
    let mut notes = Vec::new();
    for z in after_cfg.client_zones.iter().chain(&before_cfg.client_zones) {
        if seen.contains(&z.prefix) {
            continue;
        }
        seen.push(z.prefix);
        let (x, y) = (class(before, z.prefix.addr), class(after, z.prefix.addr));
        if x != y {
            notes.push(format!("clients of {}: client class {x} -> {y}: their new connections are picked from class {y}'s table", z.prefix));
        }
    }
    notes
}

/// What an edit of a service's session affinity does to new connections (another selection
/// hash: the tables may be identical while flows land elsewhere; [`class_change`] gives
/// the shares), and what an edit of its VIP, port, protocol or forwarding mode does to the
/// connections it tracks, which neither the Maglev tables nor the re-picks show: their
/// packets keep the old address, so after a VIP/port/protocol change they match no
/// service (dropped as `no_service` or `not_for_vip`); after a forwarding-mode change
/// they keep their backends but reach them in the new form. One note per service and
/// kind, in config order (their presence also tells the client not to print "routing
/// unchanged").
fn address_notes(before: &Config, after: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    for s in &after.services {
        let Some(old) = before.service(&s.name) else { continue };
        let was = (old.vip, old.port, old.protocol);
        if was != (s.vip, s.port, s.protocol) {
            let (from, to) = (old.endpoint_label(), s.endpoint_label());
            let then = match after.services.iter().find(|o| (o.vip, o.port, o.protocol) == was) {
                Some(o) => format!("which is service {}'s after the edit: they are re-picked among its backends", o.name),
                None => "which no service has after the edit: they are dropped (no_service or not_for_vip) and those clients must reconnect".into(),
            };
            notes.push(format!("service {}: {from} -> {to}: packets of its tracked connections still go to {from}, {then}", s.name));
        }
        let (was, now) = (hashed_fields(old.session_affinity), hashed_fields(s.session_affinity));
        if was != now {
            notes.push(format!(
                "service {}: session_affinity {:?} -> {:?}: new connections are hashed on {now} instead of {was}, so each lands on an independent slot (the moved shares above)",
                s.name, old.session_affinity, s.session_affinity
            ));
        }
        if old.forwarding_mode != s.forwarding_mode {
            notes.push(format!(
                "service {}: forwarding_mode {:?} -> {:?}: tracked connections keep their backends, and from now on their packets reach them as {:?} (the backends must accept that form)",
                s.name, old.forwarding_mode, s.forwarding_mode, s.forwarding_mode
            ));
        }
    }
    notes
}

/// Asks the workers for the connection counts of a [`prepare`]d dry run (without the
/// control mutex) and answers. The connections of an endpoint that turns unhealthy are
/// listed and followed ([`flows::breakdown`]): the reason then says how many move and how
/// many stay.
pub(super) fn finish(d: &Daemon, mut p: Prepared) -> Response {
    for (si, ri, slot, inc, follow) in p.counts {
        let op = if follow.is_some() { FlowOp::Show { limit: u32::MAX } } else { FlowOp::Count };
        let replies = d.shared.ask_workers(op, Some(vec![(slot, inc)]), COUNT_TIMEOUT).ok();
        let n: Option<u64> = replies.as_ref().map(|r| r.iter().map(|x| x.count).sum());
        if let Some(r) = p.report.services.get_mut(si).and_then(|s| s.repicked.get_mut(ri)) {
            r.connections = n;
            let who = if r.endpoint == r.backend { r.backend.clone() } else { format!("{}/{}", r.backend, r.endpoint) };
            match (&follow, &replies, n) {
                (Some(f), Some(replies), Some(n)) => match flows::breakdown(&p.before, &p.after, f, &who, replies, n) {
                    // an endpoint already unhealthy whose last-resort connections all stay
                    // (or that has none): the edit changes nothing for it
                    Some((_, 0)) | None if f.is_already() => r.reason.clear(),
                    // removed, readdressed, evicted or drained by the edit: that reason first
                    Some((b, _)) if f.is_already() && r.reason != flows::ALREADY => r.reason = format!("{}, and it was {}: {b}", r.reason, flows::ALREADY),
                    Some((b, _)) => r.reason = format!("{}: {b}", if f.is_already() { flows::ALREADY } else { flows::UNHEALTHY }),
                    None => {}
                },
                // not followed (the workers did not answer): an already unhealthy endpoint
                // says so and that its connections may leave
                (Some(f), ..) if f.is_already() && r.reason == flows::ALREADY && flows::last_resort_kept(&p.before, &p.after, f) => r.reason.clear(),
                (Some(f), ..) if f.is_already() && r.reason == flows::ALREADY => r.reason = format!("{} may leave (not counted)", flows::ALREADY),
                // removed, readdressed, evicted or drained by the edit: that reason stays first
                (Some(f), ..) if f.is_already() => r.reason = format!("{}, and it was {} leave (not counted)", r.reason, flows::ALREADY),
                _ => {}
            }
        }
    }
    for s in &p.sessions {
        let n = d.shared.ask_workers(FlowOp::Count, Some(s.slots.clone()), COUNT_TIMEOUT).ok().map(|r| r.iter().map(|x| x.count).sum::<u64>());
        p.report.notes.push(session_note(&s.name, &s.edit, n));
    }
    // A service listed only for already unhealthy endpoints the edit changes nothing for
    // goes too (left without classes or re-picks, it would read as a service without
    // backends).
    p.report.services.retain_mut(|s| {
        let had = s.repicked.len();
        s.repicked.retain(|r| !r.reason.is_empty());
        !(had > 0 && s.repicked.is_empty() && s.classes.is_empty())
    });
    Response::DryRun(p.report)
}

/// What the moved shares of a service whose connection-table entries are *sessions* leave
/// out (`PER_SESSION` with a reduced session affinity, before and after the edit:
/// `worker::tracking_key`, spec/backend-selection.md "Connection tracking"). Such an entry
/// is keyed on the client address and the service, not on the connection, and a new
/// connection (a SYN) of a client that holds one takes the session's backend
/// (`keeps_backend`'s rules: not removed, evicted, drained or unhealthy without
/// persistence): the edit keeps that key (`session_affinity` among the reduced ones
/// included), so those clients do not move while their sessions last; the moved shares are
/// those of the clients without a tracked session. `n`: the sessions the workers hold on
/// the service's endpoints, `None` when they did not answer.
fn session_note(service: &str, edit: &str, n: Option<u64>) -> String {
    let n = n.map_or_else(|| "? (the workers did not answer)".to_string(), |n| n.to_string());
    format!(
        "service {service}: tracking_mode PER_SESSION with session_affinity {edit}: connections are tracked per client session (client address and service), a key the edit keeps: the clients of the {n} tracked sessions keep their sessions' backends for their new connections too while the sessions last (until idle for the service's timeout; re-picked sessions excepted), so the moved shares above are those of new connections of clients without a tracked session"
    )
}

/// Whether `s`'s connection-table entries are sessions: `PER_SESSION` with a reduced
/// session affinity (the worker's `tracking_key`; spec/backend-selection.md "Connection
/// tracking").
fn session_keyed(s: &spillway_shared::config::Service) -> bool {
    s.tracking_mode == spillway_shared::config::TrackingMode::PER_SESSION && !matches!(s.session_affinity, SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO)
}

/// One side (before or after) of the comparison.
struct Side {
    cfg: Config,
    slots: SlotMap,
    /// Health as the snapshot uses it (failed next hops unhealthy).
    health: crate::control::HealthView,
    topo: Topology,
    /// Service names by snapshot index.
    snap_index: Vec<String>,
}

impl Side {
    fn service_snap<'s>(&self, snap: &'s Snapshot, name: &str) -> Option<(u16, &'s ServiceSnap)> {
        let i = self.snap_index.iter().position(|n| n == name)?;
        snap.services.get(i).map(|s| (i as u16, &**s))
    }

    /// The pipeline's decision for `class` (by snapshot class name) of service `name`.
    fn decision(&self, st: &ControlState, name: &str, class: &str, now_sec: f64) -> Option<Decision> {
        let svc = self.cfg.service(name)?;
        let cls = self.topo.client_classes().into_iter().find(|c| class_name(c) == class)?;
        let states = backend_states(svc, &self.health);
        let offered: f64 = states.iter().map(|s| s.load_cps).sum();
        let mut sst = st.states.get(name).cloned().unwrap_or_default();
        Some(pipeline::evaluate(svc, &states, &self.topo, &cls, (offered > 0.0).then_some(offered), &mut sst, now_sec))
    }

    /// `backend/endpoint` of every Maglev slot of the service's table for `class`, or
    /// `None` when new connections of the class are dropped (or the class or service does
    /// not exist on this side).
    fn owners(&self, snap: &Snapshot, name: &str, class: &str) -> Option<(Vec<u32>, Vec<String>, std::sync::Arc<crate::control::snapshot::ClassTable>)> {
        let (_, ss) = self.service_snap(snap, name)?;
        let ci = snap.class_names.iter().position(|c| c == class)?;
        let t = ss.tables.get(ci)?.clone()?;
        let labels: Vec<String> =
            t.backends.iter().map(|&sl| self.slots.owner(sl).map_or_else(|| format!("slot {sl}"), |(_, b, e)| format!("{b}/{e}"))).collect();
        let slots = t.maglev.slots().iter().map(|&e| u32::from(e)).collect();
        Some((slots, labels, t))
    }
}

/// The class name `snapshot show` and the snapshot use.
fn class_name(c: &ClientClass) -> String {
    match c {
        ClientClass::Zone(z) => z.clone(),
        ClientClass::Incompatible => "(not zonal)".into(),
    }
}

/// What a service's selection hash covers under `affinity` (`FlowKeyOf::for_affinity`,
/// spec/backend-selection.md "Session affinity"): two affinities with the same words hash
/// every flow alike (`NONE` and `CLIENT_IP_PORT_PROTO` both hash the 5-tuple).
fn hashed_fields(affinity: SessionAffinity) -> &'static str {
    match affinity {
        SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO => "the 5-tuple",
        SessionAffinity::CLIENT_IP_PROTO => "client address, VIP and protocol",
        SessionAffinity::CLIENT_IP => "client address and VIP",
        SessionAffinity::CLIENT_IP_NO_DESTINATION => "the client address alone",
    }
}

/// The change of one (service, class), or `None` when nothing about it changes.
#[allow(clippy::too_many_arguments)]
fn class_change(st: &ControlState, b: &Side, before: &Snapshot, a: &Side, after: &Snapshot, name: &str, class: &str, now_sec: f64) -> Option<DryRunClass> {
    let ob = b.owners(before, name, class);
    let oa = a.owners(after, name, class);
    // (endpoint moved, backend moved) shares: owner labels are `backend/endpoint`
    let backend_of = |l: &String| l.split('/').next().map(str::to_string);
    let fields = |side: &Side| side.cfg.service(name).map(|s| hashed_fields(s.session_affinity));
    let rehashed = fields(b) != fields(a);
    let (moved_share, backend_moved_share) = match (&ob, &oa) {
        (None, None) => (0.0, 0.0),
        (None, Some(_)) | (Some(_), None) => (1.0, 1.0),
        // Another session affinity hashes other fields of the flow (the selection hash's
        // input): a flow's slot before and after are independent, so it keeps its owner
        // with probability Σ p_before(owner) · p_after(owner) over the slot shares.
        (Some((sb, lb, _)), Some((sa, la, _))) if rehashed => {
            let dist = |slots: &[u32], labels: &[String], key: &dyn Fn(&String) -> String| {
                let mut m: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
                let n = slots.len().max(1) as f64;
                for &e in slots {
                    *m.entry(key(&labels[e as usize])).or_default() += 1.0 / n;
                }
                m
            };
            let stay = |key: &dyn Fn(&String) -> String| {
                let (x, y) = (dist(sb, lb, key), dist(sa, la, key));
                x.iter().map(|(k, p)| p * y.get(k).copied().unwrap_or(0.0)).sum::<f64>()
            };
            let endpoint = |l: &String| l.clone();
            let backend = |l: &String| backend_of(l).unwrap_or_default();
            ((1.0 - stay(&endpoint)).max(0.0), (1.0 - stay(&backend)).max(0.0))
        }
        (Some((sb, lb, _)), Some((sa, la, _))) if sb.len() == sa.len() => {
            let pairs = || sb.iter().zip(sa).map(|(x, y)| (&lb[*x as usize], &la[*y as usize]));
            let n = sb.len().max(1) as f64;
            (pairs().filter(|(x, y)| x != y).count() as f64 / n, pairs().filter(|(x, y)| backend_of(x) != backend_of(y)).count() as f64 / n)
        }
        (Some((_, lb, tb)), Some((_, la, ta))) => {
            let pick = |i: u64| {
                let h = spillway_shared::flow::fmix64(i);
                (tb.maglev.lookup(h).map(|e| &lb[usize::from(e)]), ta.maglev.lookup(h).map(|e| &la[usize::from(e)]))
            };
            let (mut moved, mut backend_moved) = (0usize, 0usize);
            for i in 0..SAMPLES {
                let (x, y) = pick(i);
                moved += usize::from(x != y);
                backend_moved += usize::from(x.and_then(backend_of) != y.and_then(backend_of));
            }
            (moved as f64 / SAMPLES as f64, backend_moved as f64 / SAMPLES as f64)
        }
    };
    let db = b.decision(st, name, class, now_sec);
    let da = a.decision(st, name, class, now_sec);
    let share_of = |side: &Side, d: &Option<Decision>, backend: &str| -> f64 {
        let (Some(d), Some(svc)) = (d, side.cfg.service(name)) else { return 0.0 };
        svc.backends.iter().position(|x| x.name == backend).map_or(0.0, |i| d.share(i))
    };
    let mut backends: Vec<String> = a.cfg.service(name).map(|s| s.backends.iter().map(|x| x.name.clone()).collect()).unwrap_or_default();
    if let Some(s) = b.cfg.service(name) {
        backends.extend(s.backends.iter().map(|x| x.name.clone()).filter(|n| !backends.contains(n)).collect::<Vec<_>>());
    }
    let shares: Vec<ShareChange> = backends
        .iter()
        .map(|n| ShareChange { backend: n.clone(), before: share_of(b, &db, n), after: share_of(a, &da, n) })
        .filter(|s| s.before > 0.0 || s.after > 0.0)
        .collect();
    let stages = stage_changes(db.as_ref(), da.as_ref());
    let shares_moved = shares.iter().any(|s| (s.before - s.after).abs() > 1e-9);
    if moved_share == 0.0 && !shares_moved && stages.is_empty() {
        return None;
    }
    Some(DryRunClass { class: class.to_string(), moved_share, backend_moved_share, shares, stages })
}

/// Stages whose outcome changes, in pipeline order: their rule differs, or they exclude
/// other backends than before (of those in both configs). A stage that passes on what an
/// earlier stage changed, or only no longer sees a removed backend, is not listed.
pub fn stage_changes(before: Option<&Decision>, after: Option<&Decision>) -> Vec<StageChange> {
    let empty = Vec::new();
    let tb = before.map_or(&empty, |d| &d.trace);
    let ta = after.map_or(&empty, |d| &d.trace);
    let text = |e: Option<&pipeline::TraceEntry>| e.map_or_else(|| "(stage absent)".to_string(), |e| format!("{} -> [{}]", e.rule, e.output.join(", ")));
    // backends both sides know (a stage's input names every backend it sees)
    let known = |t: &Vec<pipeline::TraceEntry>| t.first().map(|e| e.input.clone()).unwrap_or_default();
    let (kb, ka) = (known(tb), known(ta));
    let excluded = |e: &pipeline::TraceEntry| -> Vec<String> { e.input.iter().filter(|n| !e.output.contains(n) && kb.contains(n) && ka.contains(n)).cloned().collect() };
    let mut stages: Vec<&str> = ta.iter().map(|e| e.stage.as_str()).collect();
    stages.extend(tb.iter().map(|e| e.stage.as_str()).filter(|s| !ta.iter().any(|e| e.stage == *s)));
    stages
        .into_iter()
        .filter_map(|s| {
            let (x, y) = (tb.iter().find(|e| e.stage == s), ta.iter().find(|e| e.stage == s));
            let same = match (x, y) {
                (Some(x), Some(y)) => x.rule == y.rule && excluded(x) == excluded(y),
                _ => false,
            };
            (!same).then(|| StageChange { stage: s.to_string(), before: text(x), after: text(y) })
        })
        .collect()
}

/// Why a tracked connection on `slot` (with `incarnation`) of endpoint `endpoint` of
/// backend `backend` of service `name` would not stay on it in `snap` — the worker's
/// `keeps_backend` rule, a drain deadline counting as leaving (its connections go when it
/// passes) — or `None` when it stays. Unhealthy without persistence is said when the
/// connections of some client class leave: those of a class whose table has no healthy
/// endpoint stay (the last resort; [`flows`] tells them apart).
fn leaves(side: &Side, snap: &Snapshot, (name, backend, endpoint): (&str, &str, &str), slot: u16, incarnation: u16) -> Option<String> {
    let Some((si, ss)) = side.service_snap(snap, name) else { return Some("service removed".into()) };
    let b = snap.backends.get(usize::from(slot))?;
    if !b.present || b.service != si {
        return Some("removed".into());
    }
    if b.incarnation != incarnation {
        // A new incarnation: the same endpoint with another address, or another endpoint
        // given the slot this one freed in the same edit (a renamed backend: the old one is
        // removed, the new one is new).
        let same = side.slots.owner(slot).is_some_and(|(s, bk, e)| s == name && bk == backend && e == endpoint);
        return Some(if same { "address changed (a new endpoint)" } else { "removed" }.into());
    }
    if b.evict_connections {
        return Some("evicted".into());
    }
    // the worker's order (`keeps_backend`): health before the drain deadline
    let last_resort = ss.tables.iter().all(|t| t.as_ref().is_none_or(|t| t.all_unhealthy));
    if !b.healthy && !ss.persist_on_unhealthy && !last_resort {
        return Some(flows::UNHEALTHY.into());
    }
    if b.draining_until_ms.is_some() {
        return Some("drains".into());
    }
    None
}

/// The words for a slot the edited snapshot marks draining or evicted by the pool rule
/// (`control::pools`): after a switch of the active pool (`switched`, to the failover pool
/// when `failed_over`), or without one when the slot's backend moved to the inactive pool
/// (`moved`) or the pipeline stopped giving it new connections (the failover-threshold
/// stage ended).
fn drain_reason(svc: &spillway_shared::config::Service, evicted: bool, switched: bool, failed_over: bool, moved: bool) -> String {
    let when = match (switched, moved) {
        (true, _) => format!("after the {}", if failed_over { "failover" } else { "failback" }),
        (false, true) => "after its move to the inactive pool".to_string(),
        (false, false) => "after the failover-threshold stage stops sending it new connections".to_string(),
    };
    if !evicted {
        return format!("drains for {} s {when}", svc.connection_drain_timeout_sec);
    }
    let why = if svc.disable_connection_drain_on_failover { "disable_connection_drain_on_failover" } else { "connection_drain_timeout_sec = 0" };
    format!("evicted {when} ({why})")
}

/// A re-picked endpoint's connections to ask the workers for: (index in the service's
/// `repicked`, slot, incarnation, what follows them into the edited snapshot when the
/// endpoint turns unhealthy).
type RepickCount = (usize, u16, u16, Option<flows::Follow>);

/// The endpoints of service `name` whose tracked connections stay before the edit and
/// would leave after it, into `out`; returns (index in `out`, slot, incarnation, what
/// follows the connections of an endpoint that turns unhealthy) for the counts. `pools`:
/// the service's pool state now and as the edit's republication would leave it
/// (`control::pools::predict_draining`, which marked `after`).
fn repicks(pools: (Option<&PoolState>, Option<&PoolState>), b: &Side, before: &Snapshot, a: &Side, after: &Snapshot, name: &str, out: &mut Vec<Repick>) -> Vec<RepickCount> {
    let mut counts = Vec::new();
    let Some(svc_b) = b.cfg.service(name) else { return counts };
    let switched = pools.0.zip(pools.1).is_some_and(|(x, y)| x.failed_over != y.failed_over);
    for bk in &svc_b.backends {
        for m in bk.members() {
            let Some(slot) = b.slots.slot(name, &bk.name, &m.name) else { continue };
            let inc = b.slots.incarnation(slot);
            let id = (name, bk.name.as_str(), m.name.as_str());
            let mut reason = leaves(a, after, id, slot, inc);
            match leaves(b, before, id, slot, inc).as_deref() {
                None => {}
                // draining today: the edit matters when it cuts the drain short (evicted at
                // once, or a nearer deadline: `control::pools` recomputes it on every
                // republication from the edited connection_drain_timeout_sec)
                Some("drains") => {
                    let deadline = |s: &Snapshot| s.backends.get(usize::from(slot)).and_then(|x| x.draining_until_ms);
                    let why = |svc: Option<&spillway_shared::config::Service>| match svc {
                        Some(s) if s.disable_connection_drain_on_failover => "disable_connection_drain_on_failover".to_string(),
                        Some(s) => format!("connection_drain_timeout_sec = {}", s.connection_drain_timeout_sec),
                        None => "the edit".to_string(),
                    };
                    let cut = match (reason.as_deref(), deadline(before), deadline(after)) {
                        (Some("evicted"), ..) => Some(format!("its running drain is cut: evicted now ({})", why(a.cfg.service(name)))),
                        (Some("drains"), Some(x), Some(y)) if (x.wrapping_sub(y) as i32) > 0 => {
                            Some(format!("its running drain ends {:.0} s sooner ({})", f64::from(x.wrapping_sub(y)) / 1000.0, why(a.cfg.service(name))))
                        }
                        (Some("drains"), ..) | (None, ..) => None,
                        // removed, address changed, service removed, unhealthy: at once
                        (Some(r), ..) => Some(format!("its running drain is cut: {r}")),
                    };
                    if let Some(r) = cut {
                        counts.push((out.len(), slot, inc, None));
                        out.push(Repick { backend: bk.name.clone(), endpoint: m.name.clone(), reason: r, connections: None });
                    }
                    continue;
                }
                // Already unhealthy without persistence: the connections still on it are
                // those of classes that keep it as their last resort; the edit may give
                // such a class a healthy backend. Followed (`finish`), listed only when
                // some of them leave.
                Some(r) if r == flows::UNHEALTHY && reason.as_deref() == Some(flows::UNHEALTHY) => {
                    if let Some(f) = flows::follow(b, before, a, after, name, &bk.name, slot, inc) {
                        counts.push((out.len(), slot, inc, Some(f.already())));
                        out.push(Repick { backend: bk.name.clone(), endpoint: m.name.clone(), reason: flows::ALREADY.into(), connections: None });
                    }
                    continue;
                }
                // Already unhealthy, and the edit removes it, gives it a new address,
                // evicts or drains it: its last-resort connections (the only ones still
                // on it) lose it. Followed, listed when there are some.
                Some(r) if r == flows::UNHEALTHY => {
                    if let Some(f) = reason.as_ref().and_then(|_| flows::follow_gone(b, before, a, after, name, &bk.name, slot, inc)) {
                        counts.push((out.len(), slot, inc, Some(f)));
                        out.push(Repick { backend: bk.name.clone(), endpoint: m.name.clone(), reason: reason.unwrap_or_default(), connections: None });
                    }
                    continue;
                }
                Some(_) => continue, // already leaving today: the edit changes nothing for them
            }
            let pool_drain = pools.1.filter(|p| p.draining.iter().any(|d| d.slot == slot));
            if let (Some(r), Some(p), Some(sa)) = (reason.as_mut(), pool_drain, a.cfg.service(name)) {
                if r == "evicted" || r == "drains" {
                    let moved = sa.backends.iter().find(|x| x.name == bk.name).is_some_and(|x| x.failover != bk.failover);
                    *r = drain_reason(sa, r == "evicted", switched, p.failed_over, moved);
                }
            }
            // Unhealthy: whether its connections leave depends on their client's class, so
            // they are followed (`finish`); until then the reason names the classes that
            // keep it.
            let follow = reason.as_deref().filter(|r| *r == flows::UNHEALTHY).and_then(|_| flows::follow(b, before, a, after, name, &bk.name, slot, inc));
            if let (Some(r), Some(f)) = (reason.as_mut(), &follow) {
                r.push_str(&flows::kept_classes(after, f));
            }
            if let Some(reason) = reason {
                counts.push((out.len(), slot, inc, follow));
                out.push(Repick { backend: bk.name.clone(), endpoint: m.name.clone(), reason, connections: None });
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests;
