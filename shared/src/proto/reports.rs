//! The answers of `health` ([`HealthRow`]), `flows` ([`FlowsReport`]), `explain`
//! ([`ExplainReport`]) and `snapshot` ([`SnapshotReport`]).

use serde::{Deserialize, Serialize};

/// One endpoint's health (health is per endpoint; a single-endpoint backend has one row
/// whose endpoint is named like the backend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthRow {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Endpoint name (within the backend). Empty in reports without the field.
    #[serde(default)]
    pub endpoint: String,
    /// Endpoint address.
    pub address: String,
    /// Health used by the dataplane.
    pub healthy: bool,
    /// Whether a health check probes it (otherwise static: healthy).
    pub checked: bool,
    /// Latency used by routing, ms (configured or probe RTT moving average).
    #[serde(default, with = "crate::real::opt")]
    pub latency_ms: Option<f64>,
    /// Measured new connections per second.
    #[serde(with = "crate::real::f64")]
    pub load_cps: f64,
    /// Consecutive successful probes.
    pub consecutive_successes: u32,
    /// Consecutive failed probes.
    pub consecutive_failures: u32,
    /// Probes completed.
    pub probes: u64,
    /// Probes failed.
    pub probes_failed: u64,
    /// Reason of the last failed probe.
    pub last_error: Option<String>,
    /// Seconds since the last state change (checked backends).
    #[serde(default, with = "crate::real::opt")]
    pub since_change_sec: Option<f64>,
    /// Probes not run because the prober itself ran short of file descriptors, memory or
    /// ephemeral ports (EMFILE, ENFILE, ENOMEM, ENOBUFS, EADDRNOTAVAIL); they count neither
    /// as successes nor as failures. Default 0 for reports without the field.
    #[serde(default)]
    pub probes_skipped: u64,
}

/// One connection-table entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowRow {
    /// Worker holding it.
    pub worker: u32,
    /// Client `IP:port`.
    pub client: String,
    /// VIP `IP:port`.
    pub vip: String,
    /// IP protocol number.
    pub proto: u8,
    /// Service name (`?` when no longer configured).
    pub service: String,
    /// Backend name (`?` when removed).
    pub backend: String,
    /// `syn_only`, `established` or `closing`; `synced` for a peer's entry that has seen no
    /// packet here yet (fleet flow sync, docs/bgp.md).
    pub state: String,
    /// Milliseconds since its last packet.
    pub idle_ms: u32,
}

/// Answer to [`Request::Flows`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowsReport {
    /// Matching live entries per worker (for `Flush`: entries removed).
    pub per_worker: Vec<u64>,
    /// Sum over workers.
    pub total: u64,
    /// Entries (for `Show`).
    pub entries: Vec<FlowRow>,
}

/// Answer to [`Request::Explain`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainReport {
    /// Service name.
    pub service: String,
    /// `VIP:port/proto`.
    pub vip: String,
    /// Client `IP:port`.
    pub client: String,
    /// The client's class (zone, or "not zonal").
    pub class: String,
    /// `pipeline::Decision` as JSON (backend indices refer to `backends`); non-finite numbers
    /// (an unlimited capacity) are the strings `"inf"`/`"-inf"`/`"nan"` ([`crate::real`]).
    pub decision_json: String,
    /// The service's backend names, config order.
    pub backends: Vec<String>,
    /// Backend the live snapshot's Maglev table picks for this flow (`None`: dropped).
    pub backend: Option<String>,
    /// Endpoint of that backend the table picks.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Shares of new connections per endpoint: `(backend, endpoint, share)`, the
    /// decision's backend shares spread over healthy endpoints by endpoint weight.
    #[serde(default)]
    pub endpoint_shares: Vec<(String, String, f64)>,
    /// Flow hash used for the pick.
    pub hash: u64,
    /// Maglev table size.
    pub table_size: u32,
    /// Snapshot generation the pick came from.
    pub snapshot_generation: u64,
    /// The dataplane drops this new connection before any backend is chosen: the drop
    /// reason's counter name (`martian_source`); `None`: it goes to `backend`.
    #[serde(default)]
    pub drop_reason: Option<String>,
    /// The QUIC-LB decode of `Request::Explain::quic_dcid`, when one was given.
    #[serde(default)]
    pub quic: Option<QuicExplain>,
}

/// How a short-header packet with a given DCID is routed (QUIC-LB,
/// draft-ietf-quic-load-balancers-19).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuicExplain {
    /// The DCID, hex.
    pub dcid: String,
    /// Its config rotation codepoint (first 3 bits).
    pub codepoint: Option<u8>,
    /// The configuration at that codepoint (`server_id_length 2, nonce_length 6, AES-128-ECB
    /// four-pass`), if the service has one.
    pub config: Option<String>,
    /// The decoded server ID, hex.
    pub server_id: Option<String>,
    /// The backend and endpoint with that server ID.
    pub backend: Option<String>,
    /// See `backend`.
    pub endpoint: Option<String>,
    /// Why the packet takes the 5-tuple path instead (`unknown_codepoint`, `too_short`,
    /// `unknown_server_id`, `not_eligible`, `no_quic_lb`); `None`: routed to `endpoint`.
    pub fallback: Option<String>,
    /// Notes (eligibility, draining).
    pub notes: Vec<String>,
}

/// One service's tables in the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapService {
    /// Service name.
    pub name: String,
    /// Per client class: (class name, table number among the service's distinct tables
    /// or `None` = drop, backends of the table).
    pub classes: Vec<(String, Option<u32>, Vec<String>)>,
    /// Distinct tables of this service (classes with identical sets share one).
    pub distinct_tables: u32,
    /// The failover pool is active.
    pub failed_over: bool,
}

/// Answer to [`Request::SnapshotShow`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotReport {
    /// Snapshot generation.
    pub generation: u64,
    /// Config generation.
    pub config_generation: u64,
    /// Age of the snapshot, ms.
    pub age_ms: u64,
    /// Last measured time from publication until every worker used it, µs.
    pub last_propagation_us: Option<u64>,
    /// Lowest snapshot generation any worker is using.
    pub workers_min_generation: u64,
    /// Per service.
    pub services: Vec<SnapService>,
    /// Distinct tables over all services.
    pub distinct_tables: u32,
}
