//! What an edit would do, before it is made: the answer to
//! [`crate::proto::Request::DryRun`] (`spillwayctl ... --dry-run`).
//!
//! The daemon plans the edit exactly as it would apply it (same validation, same refusals),
//! then compiles the routing snapshot of the running config and of the edited one from the
//! same load (the edited one with the health the edit gives: new or readdressed endpoints
//! start unhealthy under a health check, a removed check makes endpoints static healthy),
//! and compares them. Nothing is published and no file is written.
//!
//! - *Moved share* of a (service, client zone class): the fraction of the Maglev table's
//!   slots whose backend differs between the two tables (a slot that drops on one side
//!   counts as moved). New connections hash uniformly onto slots
//!   ([`crate::maglev::MaglevTable::lookup`]), so this is the share of new connections of
//!   that class that would go to another backend than today. When the edit changes what the
//!   selection hash covers (`session_affinity`, [`crate::flow::FlowKeyOf::for_affinity`]),
//!   a flow's slots before and after are independent: the moved share is then 1 − Σ over
//!   owners of (slot share before × slot share after).
//! - *Shares*: each backend's long-run share of new connections, from the pipeline's final
//!   weights ([`crate::pipeline::Decision::weights`]), before → after.
//! - *Re-picked connections*: tracked connections on an endpoint that would no longer keep
//!   them under the persistence rules of the edited snapshot (removed, a new incarnation,
//!   unhealthy without persistence, evicted or draining in the inactive pool: after a pool
//!   switch, at the end of the failover-threshold stage, after a move to the inactive pool,
//!   by the daemon's own drain rule, `control::pools`); the worker's rule is
//!   `keeps_backend` (docs/semantics.md "Existing connections").
//! - *Stage changes*: pipeline stages whose rule or output set differs (`zonal_affinity:
//!   |I|/|C| = 2/3 ... result I` → `... 1/3 < 0.6: result A`).

use serde::{Deserialize, Serialize};

/// The whole answer of a dry run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunReport {
    /// The config generation the edit was planned against (unchanged by a dry run).
    pub config_generation: u64,
    /// The config diff, one line per change (the lines a real edit answers with);
    /// `no change` when the edit changes nothing.
    pub changes: Vec<String>,
    /// One entry per service of either config whose routing or connections change, config
    /// order (the edited config's, then removed services).
    pub services: Vec<DryRunService>,
    /// Other effects in words (a VIP withdrawn from announcement, ...).
    pub notes: Vec<String>,
}

/// Effect on one service. `classes` and `repicked` are both empty exactly when the
/// service has no backends before and after the edit (added or removed empty, or an empty
/// one edited): it routes nothing (new connections are dropped as `no_backend`) and tracks
/// nothing, so nothing moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunService {
    /// Service name.
    pub service: String,
    /// `added`, `removed` or `changed`.
    pub what: String,
    /// Per client zone class whose table or decision changes.
    pub classes: Vec<DryRunClass>,
    /// Endpoints whose tracked connections would be re-picked, with their counts.
    pub repicked: Vec<Repick>,
}

/// Effect on one client zone class of a service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DryRunClass {
    /// Class name as in `snapshot show` (a zone name, or `(not zonal)`).
    pub class: String,
    /// Fraction (0.0–1.0) of the new-connection hash space whose endpoint changes (a
    /// change of backend included).
    pub moved_share: f64,
    /// Fraction (0.0–1.0) of the new-connection hash space whose *backend* changes (at most
    /// `moved_share`; the rest moves between endpoints of one backend). Absent in answers
    /// of older daemons: read as `moved_share`.
    #[serde(default = "backend_moved_unknown")]
    pub backend_moved_share: f64,
    /// Backends with a share before or after, config order of the edited service.
    pub shares: Vec<ShareChange>,
    /// Pipeline stages whose outcome changes, in pipeline order.
    pub stages: Vec<StageChange>,
}

/// `DryRunClass::backend_moved_share` of an answer without it: unknown, taken as
/// `moved_share` by the reader (a negative value says "absent").
fn backend_moved_unknown() -> f64 {
    -1.0
}

/// One backend's share of new connections (0.0–1.0) before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareChange {
    /// Backend name.
    pub backend: String,
    /// Share before the edit.
    pub before: f64,
    /// Share after the edit.
    pub after: f64,
}

/// A pipeline stage whose rule or output differs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageChange {
    /// Stage name (`availability`, `tiers`, `zonal_affinity`, ...).
    pub stage: String,
    /// Rule and output set before (`(stage absent)` when it did not run).
    pub before: String,
    /// Rule and output set after.
    pub after: String,
}

/// Tracked connections of one endpoint that the edit would move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repick {
    /// Backend name.
    pub backend: String,
    /// Endpoint name (the backend's name for a one-address backend).
    pub endpoint: String,
    /// Why (`removed`, `address changed (a new endpoint)`, `drains for 300 s after the
    /// failover`, `drains for 300 s after the failover-threshold stage stops sending it new
    /// connections`, `evicted after the failback (disable_connection_drain_on_failover)`, ...).
    pub reason: String,
    /// Tracked connections on the endpoint now, summed over workers; `None` when the
    /// workers did not answer in time.
    pub connections: Option<u64>,
}
