//! Replay of a capture under two configs (`spillwayctl replay`): every frame, in order and
//! with the capture's timestamps (ms since the first frame) as the worker clock, goes
//! through a real [`crate::fastpath::worker::Worker`] per config ([`side`]), both starting
//! from an empty connection table; the report ([`report`]) compares where each flow and
//! frame went. No DPDK: the workers run on in-memory ports.
//!
//! Streaming: frames are given one at a time ([`Replay::frame`]) and not kept; per-flow
//! state is bounded by the larger connection-table size of the two configs (`[conntrack]
//! capacity_per_worker`), closed and idle flows leaving first, and frames of flows that
//! find no room are counted ([`report::Report::frames_over_capacity`]).
//!
//! Health: the snapshot of each config is compiled once, at the start, with every endpoint
//! healthy (as the daemon's health checker has not yet answered otherwise: disabled
//! endpoints and weights are the config's), except those `health` marks down.
//!
//! May use: [`crate::control`] (compilation), [`crate::fastpath`] (the worker, in-memory
//! ports), [`crate::ctl::dryrun`] (the stage comparison of dry runs). Not on the packet path.

pub mod flow;
pub mod report;
pub mod side;

use crate::control::{backend_states, HealthView, SlotMap};
use flow::{Flow, FragMap, Kind};
use report::{BackendRow, ChangedFlow, MidFlow, Report};
use side::{Fate, Side};
use spillway_shared::config::Config;
use spillway_shared::pipeline::{evaluate, ServiceState, Topology};
use std::collections::{BTreeMap, HashMap};

/// Endpoint health given by the operator: `BACKEND`, `BACKEND/ENDPOINT` or
/// `SERVICE/BACKEND/ENDPOINT` → up (true) or down (false); the first two apply to every
/// service that has such a backend, the most specific key winning.
pub type HealthOverrides = BTreeMap<String, bool>;

/// The [`HealthView`] of `cfg` with `overrides` applied; names no backend or endpoint of
/// `cfg` matches are returned in the second value (an error only when neither config
/// knows them: [`Replay::new`]).
fn health_of(cfg: &Config, overrides: &HealthOverrides) -> (HealthView, Vec<String>) {
    let mut view = HealthView::new();
    let mut used = std::collections::BTreeSet::new();
    for s in &cfg.services {
        for b in &s.backends {
            for m in b.members() {
                let keys = [format!("{}/{}/{}", s.name, b.name, m.name), format!("{}/{}", b.name, m.name), b.name.clone()];
                let up = keys.into_iter().find_map(|k| overrides.get(&k).map(|u| (k.clone(), *u)));
                if let Some((k, up)) = up {
                    used.insert(k);
                    view.entry((s.name.clone(), b.name.clone(), m.name.clone())).or_default().healthy = up;
                }
            }
        }
    }
    let unused = overrides.keys().filter(|k| !used.contains(*k)).cloned().collect();
    (view, unused)
}

/// Per-flow state: the fate of its first frame on each side, for the report and for the
/// end-of-capture probe.
struct FlowState {
    first: [Fate; 2],
    last_ms: u32,
    closed: bool,
    client_mac: [u8; 6],
}

/// Most changed flows and mid-flow changes listed in the report (the counts are complete).
pub const DEFAULT_LIST_LIMIT: usize = 1000;

/// A replay in progress.
pub struct Replay {
    sides: [Side; 2],
    frags: FragMap,
    flows: HashMap<Flow, FlowState>,
    flow_cap: usize,
    first_ts_ns: Option<u128>,
    now_ms: u32,
    backends: BTreeMap<(String, String), BackendRow>,
    stages: HashMap<(String, String), String>,
    /// The report so far.
    pub report: Report,
    limit: usize,
    health: [HealthView; 2],
    last_evict_ms: Option<u32>,
}

/// Least capture time between two sweeps of a full flow map, ms.
const EVICT_EVERY_MS: u32 = 100;

/// What happened to one frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameOutcome {
    /// Fate under the baseline, as the report words it.
    pub before: String,
    /// Fate under the new config.
    pub after: String,
    /// Whether the two differ.
    pub changed: bool,
}

impl Replay {
    /// A replay of `baseline` against `new`, with `health` overrides (docs in
    /// [`HealthOverrides`]) and at most `limit` flows listed. Errors: an override naming
    /// no backend or endpoint of either config.
    pub fn new(baseline: Config, new: Config, health: &HealthOverrides, limit: usize) -> Result<Replay, String> {
        let (hb, ub) = health_of(&baseline, health);
        let (ha, ua) = health_of(&new, health);
        if let Some(k) = ub.iter().find(|k| ua.contains(k)) {
            return Err(format!("--health: {k:?} names no backend (BACKEND) or endpoint (BACKEND/ENDPOINT or SERVICE/BACKEND/ENDPOINT) of either config"));
        }
        // one slot map, synced as the daemon syncs it when a config is applied: endpoints
        // in both keep their slot, so the baseline worker can be asked about the new one
        let mut slots = SlotMap::default();
        slots.sync(&baseline)?;
        let before = Side::new(baseline, &slots, &hb);
        slots.sync(&new)?;
        let after = Side::new(new, &slots, &ha);
        let flow_cap = before.worker.ct.capacity().max(after.worker.ct.capacity()).max(1);
        let says = if health.is_empty() { "every endpoint up (the config's disabled endpoints and weights apply)".to_string() } else { format!("every endpoint up except as --health says ({} entries)", health.len()) };
        let report = Report { health: says, ..Default::default() };
        Ok(Replay { sides: [before, after], frags: FragMap::default(), flows: HashMap::new(), flow_cap, first_ts_ns: None, now_ms: 0, backends: BTreeMap::new(), stages: HashMap::new(), report, limit, health: [hb, ha], last_evict_ms: None })
    }

    /// The fate as the report words it, for side `i`.
    fn word(&self, i: usize, f: Fate) -> String {
        match f {
            Fate::Slot(s) => match self.sides[i].names(s) {
                Some((svc, b, e)) if b == e => format!("{svc}/{b}"),
                Some((svc, b, e)) => format!("{svc}/{b}/{e}"),
                None => format!("slot {s}"),
            },
            Fate::Reply => "reply".into(),
            Fate::Drop(r) => format!("drop: {}", r.name()),
            Fate::Quiet => "none".into(),
        }
    }

    /// `(service, backend)` of a forwarded fate.
    fn backend(&self, i: usize, f: Fate) -> Option<(String, String)> {
        match f {
            Fate::Slot(s) => self.sides[i].names(s).map(|(svc, b, _)| (svc, b)),
            _ => None,
        }
    }

    /// Counts a frame (or with `flow`, a new flow) on the backend each side sent it to.
    fn count(&mut self, fates: [Fate; 2], flow: bool) {
        for (i, f) in fates.iter().enumerate() {
            let Some(k) = self.backend(i, *f) else { continue };
            let row = self.backends.entry(k.clone()).or_insert_with(|| BackendRow { service: k.0, backend: k.1, ..Default::default() });
            let n = match (flow, i) {
                (false, 0) => &mut row.packets_before,
                (false, _) => &mut row.packets_after,
                (true, 0) => &mut row.flows_before,
                (true, _) => &mut row.flows_after,
            };
            *n += 1;
        }
    }

    /// Feeds one frame with its capture timestamp (ns since the epoch, any origin);
    /// returns its fate on both sides.
    pub fn frame(&mut self, ts_ns: u128, data: &[u8]) -> FrameOutcome {
        let first = *self.first_ts_ns.get_or_insert(ts_ns);
        let ms = ts_ns.saturating_sub(first) / 1_000_000;
        // out-of-order timestamps never turn the clock back
        self.now_ms = self.now_ms.max(u32::try_from(ms).unwrap_or(u32::MAX));
        self.report.frames += 1;
        self.report.duration_ms = u64::from(self.now_ms);
        let now = self.now_ms;
        let fates = [self.sides[0].step_with(data, now, None), self.sides[1].step_with(data, now, None)];
        self.count(fates, false);
        let (before, after) = (self.word(0, fates[0]), self.word(1, fates[1]));
        let changed = before != after;
        self.report.frames_changed += u64::from(changed);
        if let Some((flow, kind)) = flow::classify(data, &mut self.frags) {
            self.follow(flow, kind, fates, data);
        }
        FrameOutcome { before, after, changed }
    }

    /// Records the frame's flow: a new flow is counted and compared.
    fn follow(&mut self, flow: Flow, kind: Kind, fates: [Fate; 2], data: &[u8]) {
        let now = self.now_ms;
        let closes = matches!(kind, Kind::Transport { closes: true, .. });
        if let Some(st) = self.flows.get_mut(&flow) {
            // a new SYN on a closed connection's 5-tuple is a new flow
            if !(st.closed && matches!(kind, Kind::Transport { syn: true, .. })) {
                st.last_ms = now;
                st.closed |= closes;
                return;
            }
            self.flows.remove(&flow);
        }
        if self.flows.len() >= self.flow_cap {
            // a full map is swept at most every EVICT_EVERY_MS of capture time: a sweep
            // walks the whole map
            if self.last_evict_ms.is_none_or(|t| now.saturating_sub(t) >= EVICT_EVERY_MS) {
                self.last_evict_ms = Some(now);
                self.evict();
            }
            if self.flows.len() >= self.flow_cap {
                self.report.frames_over_capacity += 1;
                return;
            }
        }
        let mut client_mac = [0u8; 6];
        if data.len() >= 12 {
            client_mac.copy_from_slice(&data[6..12]);
        }
        self.flows.insert(flow, FlowState { first: fates, last_ms: now, closed: closes, client_mac });
        self.report.flows += 1;
        self.count(fates, true);
        let (wb, wa) = (self.word(0, fates[0]), self.word(1, fates[1]));
        if wb == wa {
            return;
        }
        let (bb, ba) = (self.backend(0, fates[0]), self.backend(1, fates[1]));
        let change = match (&bb, &ba, fates) {
            (Some(x), Some(y), _) if x != y => "moved",
            (Some(_), Some(_), _) => "endpoint_moved",
            (Some(_), None, [_, Fate::Drop(r)]) => {
                *self.report.newly_dropped.entry(r.name().to_string()).or_default() += 1;
                "newly_dropped"
            }
            (None, Some(_), [Fate::Drop(r), _]) => {
                *self.report.no_longer_dropped.entry(r.name().to_string()).or_default() += 1;
                "no_longer_dropped"
            }
            _ => "changed",
        };
        match change {
            "moved" => self.report.moved += 1,
            "endpoint_moved" => self.report.endpoint_moved += 1,
            _ => {}
        }
        if self.report.changed.len() >= self.limit {
            self.report.changed_unlisted += 1;
            return;
        }
        let stage = match (&bb, &ba) {
            (Some((svc, _)), Some(_)) if change == "moved" => Some(self.stage(svc, flow.src)),
            _ => None,
        };
        self.report.changed.push(ChangedFlow { flow: flow.to_string(), frame: self.report.frames, change: change.into(), before: wb, after: wa, stage });
    }

    /// Frees room in the flow map: flows closed or idle longer than their timeout leave.
    fn evict(&mut self) {
        let now = self.now_ms;
        let t = &self.sides[1].cfg.conntrack;
        let (tcp, udp, closing) = (t.tcp_idle_timeout_sec * 1000, t.udp_idle_timeout_sec * 1000, t.tcp_closing_timeout_sec * 1000);
        self.flows.retain(|f, st| {
            let idle = now.saturating_sub(st.last_ms);
            let limit = if st.closed { closing } else if f.proto == 6 { tcp } else { udp };
            idle < limit
        });
    }

    /// The first pipeline stage whose outcome differs for service `svc` and `client`'s
    /// class between the two configs (`ctl::dryrun::stage_changes`, as `--dry-run` lists
    /// them), or `maglev` when none does; cached per (service, class).
    fn stage(&mut self, svc: &str, client: std::net::IpAddr) -> String {
        let topo = Topology::from_config(&self.sides[1].cfg);
        let class = topo.classify(client);
        let key = (svc.to_string(), class.to_string());
        if let Some(s) = self.stages.get(&key) {
            return s.clone();
        }
        let decide = |i: usize| {
            let cfg = &self.sides[i].cfg;
            let s = cfg.services.iter().find(|s| s.name == svc)?;
            let topo = Topology::from_config(cfg);
            let class = topo.classify(client);
            Some(evaluate(s, &backend_states(s, &self.health[i]), &topo, &class, None, &mut ServiceState::default(), 0.0))
        };
        let (db, da) = (decide(0), decide(1));
        let changes = crate::ctl::dryrun::stage_changes(db.as_ref(), da.as_ref());
        let s = changes.first().map_or_else(|| "maglev".to_string(), |c| c.stage.clone());
        self.stages.insert(key, s.clone());
        s
    }

    /// Ends the replay: tracked connections of the baseline (flows forwarded, not closed
    /// nor idle past their timeout) are each asked, with a probe frame continuing the flow
    /// ([`flow::probe`]), where the baseline worker sends their next packet, then where it
    /// would send it under the new config's snapshot (as if the new config were applied
    /// when the capture ends); those that would go to another endpoint, or be dropped, are
    /// the mid-flow changes. Returns the report.
    pub fn finish(mut self) -> Report {
        self.evict();
        let mut open: Vec<(Flow, [u8; 6])> = self.flows.iter().filter(|(_, s)| !s.closed && matches!(s.first[0], Fate::Slot(_))).map(|(f, s)| (*f, s.client_mac)).collect();
        open.sort_by_key(|a| a.0);
        let [before, after] = &mut self.sides;
        for (f, mac) in open {
            let Some(frame) = flow::probe(&f, mac, before.port_mac) else { continue };
            let now = self.now_ms;
            // where the next packet goes now (a flow hashed without ports, as fragmented
            // datagrams are, may go elsewhere as an unfragmented packet), then where it
            // would go once the new config's snapshot is published to this worker
            let was = before.step_with(&frame, now, None);
            let Fate::Slot(s0) = was else { continue };
            let fate = before.step_with(&frame, now, Some(&after.snap));
            let then = before.names(s0);
            let next = match fate {
                Fate::Slot(s) => after.names(s),
                _ => None,
            };
            if then.is_some() && then == next {
                continue;
            }
            self.report.mid_flow += 1;
            if self.report.mid_flow_changes.len() < self.limit {
                let w = |n: Option<(String, String, String)>, f: Fate| match (n, f) {
                    (Some((svc, b, e)), _) if b == e => format!("{svc}/{b}"),
                    (Some((svc, b, e)), _) => format!("{svc}/{b}/{e}"),
                    (None, Fate::Drop(r)) => format!("drop: {}", r.name()),
                    (None, Fate::Reply) => "reply".into(),
                    (None, _) => "none".into(),
                };
                self.report.mid_flow_changes.push(MidFlow { flow: f.to_string(), before: w(then, was), after: w(next, fate) });
            }
        }
        self.report.backends = std::mem::take(&mut self.backends).into_values().collect();
        self.report
    }
}


#[cfg(test)]
mod tests;
