//! What a replay reports (`spillwayctl replay`, text and `--json`): the shapes only; the
//! engine ([`super::Replay`]) fills them.

use serde::Serialize;
use std::collections::BTreeMap;

/// The answer of a replay of one capture under a baseline and a new config.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Frames replayed: those of the capture the port received.
    pub frames: u64,
    /// Frames of the capture that the capturing port *sent* (pcapng `epb_flags` direction
    /// outbound, as dpdk-dumpcap marks a port's TX), not replayed: the worker never
    /// receives them (a forwarded frame would count twice). Set by the reader.
    pub frames_outbound: u64,
    /// Capture duration, ms (last frame's timestamp minus the first's).
    pub duration_ms: u64,
    /// Flows seen (a flow is the client's 5-tuple; [`super::flow`]).
    pub flows: u64,
    /// Frames of flows that were not followed because the flow map was full (at its
    /// bound, the larger `[conntrack] capacity_per_worker` of the two configs): counted in
    /// the per-backend packets, not in the flows.
    pub frames_over_capacity: u64,
    /// Per service and backend, flows (by where a flow's first frame went) and packets
    /// before (baseline) and after (new config).
    pub backends: Vec<BackendRow>,
    /// Flows whose first frame goes to another backend.
    pub moved: u64,
    /// Flows whose first frame goes to another endpoint of the same backend (groups).
    pub endpoint_moved: u64,
    /// Flows forwarded before and dropped after, by the new drop reason.
    pub newly_dropped: BTreeMap<String, u64>,
    /// Flows dropped before and forwarded after, by the old drop reason.
    pub no_longer_dropped: BTreeMap<String, u64>,
    /// Frames whose fate (endpoint, reply, drop reason) differs.
    pub frames_changed: u64,
    /// The changed flows, in capture order (the first `limit`).
    pub changed: Vec<ChangedFlow>,
    /// Changed flows beyond `limit`, not listed.
    pub changed_unlisted: u64,
    /// Tracked connections whose next packet would go elsewhere if the new config were
    /// applied when the capture ends (the connections an operator would break).
    pub mid_flow: u64,
    /// Those connections (the first `limit`).
    pub mid_flow_changes: Vec<MidFlow>,
    /// How endpoint health was chosen.
    pub health: String,
}

/// One backend's counts.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct BackendRow {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Flows whose first frame went to it, baseline.
    pub flows_before: u64,
    /// The same under the new config.
    pub flows_after: u64,
    /// Frames forwarded to it, baseline.
    pub packets_before: u64,
    /// The same under the new config.
    pub packets_after: u64,
}

/// A flow whose first frame has another fate under the new config.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ChangedFlow {
    /// The flow (`client:port -> vip:port/proto`).
    pub flow: String,
    /// Its first frame, 1-based index in the capture.
    pub frame: u64,
    /// `moved`, `endpoint_moved`, `newly_dropped` or `no_longer_dropped`.
    pub change: String,
    /// Baseline fate: `service/backend` (`service/backend/endpoint` in a group), `drop:
    /// REASON`, `reply` or `none`.
    pub before: String,
    /// Fate under the new config.
    pub after: String,
    /// For a move: the first pipeline stage (explain's trace, docs/ctl.md `explain`) whose
    /// outcome differs between the configs for this client's class, or `maglev` when every
    /// stage agrees and the Maglev tables differ (a weight, an endpoint, the table size).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
}

/// A tracked connection that would move mid-flow.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MidFlow {
    /// The flow.
    pub flow: String,
    /// Where its packets go under the baseline.
    pub before: String,
    /// Where its next packet would go once the new config is applied.
    pub after: String,
}

impl Report {
    /// The report as text: a summary, the per-backend table, the changes by reason, then
    /// the changed flows and mid-flow changes listed.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(o, "replayed {} frames ({} ms), {} flows; health: {}", self.frames, self.duration_ms, self.flows, self.health);
        if self.frames_outbound > 0 {
            let _ = writeln!(o, "{} frames the capturing port sent (pcapng direction outbound) not replayed", self.frames_outbound);
        }
        if self.frames_over_capacity > 0 {
            let _ = writeln!(o, "{} frames of flows not followed (flow map full at the connection-table size)", self.frames_over_capacity);
        }
        let _ = writeln!(o, "{:<16} {:<16} {:>12} {:>12} {:>14} {:>14}", "service", "backend", "flows before", "flows after", "packets before", "packets after");
        for b in &self.backends {
            let _ = writeln!(o, "{:<16} {:<16} {:>12} {:>12} {:>14} {:>14}", b.service, b.backend, b.flows_before, b.flows_after, b.packets_before, b.packets_after);
        }
        let _ = writeln!(o, "flows moved to another backend: {}", self.moved);
        if self.endpoint_moved > 0 {
            let _ = writeln!(o, "flows moved to another endpoint of their backend: {}", self.endpoint_moved);
        }
        for (r, n) in &self.newly_dropped {
            let _ = writeln!(o, "flows newly dropped ({r}): {n}");
        }
        for (r, n) in &self.no_longer_dropped {
            let _ = writeln!(o, "flows no longer dropped (were {r}): {n}");
        }
        let _ = writeln!(o, "frames whose fate changes: {}", self.frames_changed);
        let _ = writeln!(o, "tracked connections that would move mid-flow: {}", self.mid_flow);
        if !self.changed.is_empty() {
            let _ = writeln!(o, "changed flows:");
            for c in &self.changed {
                let stage = c.stage.as_ref().map(|s| format!("  [stage {s}]")).unwrap_or_default();
                let _ = writeln!(o, "  #{:<8} {:<44} {:<17} {} -> {}{stage}", c.frame, c.flow, c.change, c.before, c.after);
            }
            if self.changed_unlisted > 0 {
                let _ = writeln!(o, "  ... and {} more", self.changed_unlisted);
            }
        }
        if !self.mid_flow_changes.is_empty() {
            let _ = writeln!(o, "mid-flow changes:");
            for m in &self.mid_flow_changes {
                let _ = writeln!(o, "  {:<44} {} -> {}", m.flow, m.before, m.after);
            }
        }
        o
    }
}
