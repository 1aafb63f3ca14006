//! The control-socket protocol between `spillwayctl` and the daemon.
//!
//! Transport: a Unix stream socket (`/run/spillway/ctl.sock` by default). Each message is a
//! postcard encoding of [`RequestFrame`] or [`ResponseFrame`], whose first field is the
//! protocol version ([`PROTOCOL_VERSION`]), so a peer of another version is detected before
//! the body is decoded and told so plainly. A message travels as one or more frames: a
//! 4-byte big-endian prefix (bit 31 set: more frames of this message follow; bits 0–30: the
//! frame's length, at most [`MAX_FRAME`] = 1 MiB) and that many bytes. A message is at most
//! [`MAX_MESSAGE`] = 16 MiB, so any answer of a config the daemon accepts (a full `status` or
//! `config show` at thousands of services and tens of thousands of endpoints) and any config
//! file for `config apply` fit, while no single read buffers more than a frame before the
//! length is checked. A bad frame gets a typed reply ([`Response::BadFrame`])
//! and is counted ([`StatusReport::control_socket`]); a frame that was read whole but does
//! not decode leaves the connection usable, one whose framing is lost (truncated, too large)
//! closes that connection only.
//!
//! Every `f64` in these messages (and in `pipeline::Decision`) round-trips through both
//! postcard and JSON, infinities and NaN included: see [`crate::real`] and the property
//! test `shared/tests/proto_roundtrip.rs`.
//!
//! (postcard, not bincode: bincode is unmaintained, RUSTSEC-2025-0141; see
//! docs/decisions.md.)
//!
//! Over 600 lines: every message type of the protocol in one place, so a change to the
//! wire format is one reviewable diff (tests of the encodings are in `shared/tests/`).

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Version of this protocol; bumped on any incompatible change of the message types.
/// Version 3: `HealthRow::probes_skipped`, `StatusReport::health_checker`.
/// Version 4: backends as groups of endpoints: `Request::Endpoint{Add,Remove,Set}`,
/// `HealthRow::endpoint`, `BackendStatus::{endpoints, healthy_endpoints, drained, members}`,
/// `ExplainReport::{endpoint, endpoint_shares}`.
/// Version 5: `Response::BadFrame`, `ExplainReport::drop_reason`,
/// `StatusReport::control_socket`, `Counters::fragments_held`, `StatusReport::neighbors`;
/// IPv6: `Request::Explain::client` and `Request::Vip{Drain,Undrain}::vip` are `IpAddr`.
/// Version 6: `NeighborStatus::deferred` and the drop reason `nd_invalid`.
/// Version 7: `StatusReport::sync` (fleet flow sync).
/// Version 8: messages of several frames ([`MAX_MESSAGE`]); `Request::ServiceShow` and
/// `Response::Service` (one service's config and state, not the whole config);
/// `NeighborStatus::mld_reports`; QUIC-LB: `Request::Explain::quic_dcid`,
/// `ExplainReport::quic`, `Counters::quic_lb`, `EndpointStatus::server_id`; dry runs:
/// `Request::DryRun` / `Response::DryRun`; `PortStatus::{link_up, link_speed_mbps, xstats}`;
/// `Request::Capture{Start,Poll,Stop}`.
pub const PROTOCOL_VERSION: u16 = 8;
/// Largest frame accepted, bytes (a message longer than this is split into frames).
pub const MAX_FRAME: usize = 1 << 20;
/// Largest message (request or response body, all its frames) accepted, bytes: 16 MiB.
/// At 2,000 services × 20,000 endpoints (`dataplane/tests/ctl_scale.rs`) the config's TOML
/// is 2.3 MB and `status --json` prints 6.6 MB (the postcard answer is smaller), so this
/// leaves several times that, while 64 connections cannot pin more than 1 GiB of buffers.
pub const MAX_MESSAGE: usize = 16 << 20;
/// Bit of the frame prefix that says more frames of the same message follow.
const MORE_FRAMES: u32 = 1 << 31;

/// A request with its protocol version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestFrame {
    /// Must equal [`PROTOCOL_VERSION`].
    pub version: u16,
    /// The request.
    pub request: Request,
}

/// A response with its protocol version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFrame {
    /// [`PROTOCOL_VERSION`] of the daemon.
    pub version: u16,
    /// The response.
    pub response: Response,
}

/// Requests.
///
/// Mutations carry `if_generation`: when set, the daemon refuses the edit unless its
/// *config generation* (see [`Applied::generation`]) still equals it. Config travels as
/// TOML text and traces as JSON text, because those types use serde attributes
/// (`skip_serializing_if`) that a non-self-describing format like postcard cannot carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Ports, workers, counters, drops by reason, per-backend new connections.
    Status,
    /// The running configuration as TOML, with its config generation.
    ConfigShow,
    /// Replace the whole configuration (applied as a diff). `toml`: a complete config file.
    ConfigApply {
        /// The new configuration, TOML.
        toml: String,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Add a service: `fields` are `(field, TOML value)` pairs of a `[[services]]` table
    /// (at least `vip` and `port`).
    ServiceAdd {
        /// Service name.
        name: String,
        /// `(field, value)` pairs; values are TOML values (bare words are taken as strings).
        fields: Vec<(String, String)>,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Remove a service and its backends.
    ServiceRemove {
        /// Service name.
        name: String,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Set fields of a service (an empty value removes an optional field).
    ServiceSet {
        /// Service name.
        name: String,
        /// `(field, value)` pairs.
        fields: Vec<(String, String)>,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Add a backend to a service.
    BackendAdd {
        /// Service name.
        service: String,
        /// Backend name.
        name: String,
        /// `(field, value)` pairs of a `[[services.backends]]` table.
        fields: Vec<(String, String)>,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Remove a backend.
    BackendRemove {
        /// Service name.
        service: String,
        /// Backend name.
        name: String,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Set fields of a backend.
    BackendSet {
        /// Service name.
        service: String,
        /// Backend name.
        name: String,
        /// `(field, value)` pairs.
        fields: Vec<(String, String)>,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Health state of every backend.
    HealthShow,
    /// Connection-table operation on every worker.
    Flows {
        /// What to do.
        op: FlowOp,
        /// Which entries: all, one service's, or one backend's.
        filter: FlowFilter,
    },
    /// The routing decision for a new connection, against the live state.
    Explain {
        /// Client address (IPv4 or IPv6).
        client: std::net::IpAddr,
        /// Client port.
        client_port: u16,
        /// Service as `IP:PORT[/tcp|udp]`; `None` when there is one service.
        vip: Option<String>,
        /// A QUIC short-header packet's DCID (hex, first octet included): explain its
        /// QUIC-LB decode and routing decision too.
        #[serde(default)]
        quic_dcid: Option<String>,
    },
    /// The published snapshot: generation, tables per service and class, age.
    SnapshotShow,
    /// Readiness and announcement state of every VIP (docs/bgp.md).
    VipShow,
    /// Withdraw a VIP's announcement and keep serving its existing flows
    /// (`spillwayctl vip drain VIP`); in memory only, a restart announces again.
    VipDrain {
        /// A configured VIP.
        vip: std::net::IpAddr,
    },
    /// Undo [`Request::VipDrain`] (`spillwayctl vip undrain VIP`).
    VipUndrain {
        /// A configured VIP.
        vip: std::net::IpAddr,
    },
    /// Add an endpoint to a backend (a single-endpoint backend becomes a group: its
    /// `address`/`mac` become its first endpoint, named like the backend).
    EndpointAdd {
        /// Service name.
        service: String,
        /// Backend name.
        backend: String,
        /// Endpoint name.
        name: String,
        /// `(field, value)` pairs of a `[[services.backends.endpoints]]` table.
        fields: Vec<(String, String)>,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Remove an endpoint of a group (not its last one).
    EndpointRemove {
        /// Service name.
        service: String,
        /// Backend name.
        backend: String,
        /// Endpoint name.
        name: String,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// Set fields of an endpoint.
    EndpointSet {
        /// Service name.
        service: String,
        /// Backend name.
        backend: String,
        /// Endpoint name.
        name: String,
        /// `(field, value)` pairs.
        fields: Vec<(String, String)>,
        /// Refuse unless the config generation equals this.
        if_generation: Option<u64>,
    },
    /// One service's config and state (`service show`, `backend list|show`): only that
    /// service travels, whatever the size of the rest of the config.
    ServiceShow {
        /// Service name.
        name: String,
    },
    /// Plan an editing request (a mutation, `config apply` or `vip drain|undrain`) and
    /// answer what it would change ([`crate::dryrun::DryRunReport`]) without publishing or
    /// writing anything. Another request inside is refused. A dry run inside a dry run
    /// does not decode ([`crate::dryrun::one_level`]: no unbounded recursion on input).
    DryRun(#[serde(deserialize_with = "crate::dryrun::one_level")] Box<Request>),
    /// Start capturing dropped frames (`spillwayctl capture drops`); one capture at a time.
    /// Answered with [`Response::CaptureStarted`].
    CaptureStart(crate::capture::CaptureFilter),
    /// The frames captured since the last poll of `session` ([`Response::CaptureBatch`]);
    /// a capture not polled for [`crate::capture::LEASE_MS`] ends.
    CapturePoll {
        /// The session of [`Response::CaptureStarted`].
        session: u64,
    },
    /// End capture `session` (answered with its last [`Response::CaptureBatch`]).
    CaptureStop {
        /// The session of [`Response::CaptureStarted`].
        session: u64,
    },
}

/// A connection-table operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlowOp {
    /// Count live entries.
    Count,
    /// List up to `limit` live entries per worker.
    Show {
        /// Most entries per worker.
        limit: u32,
    },
    /// Remove matching entries (their next packet is balanced anew).
    Flush,
}

/// Which connection-table entries an operation applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlowFilter {
    /// Every entry.
    All,
    /// Entries of one service (by name).
    Service(String),
    /// Entries of one backend: (service, backend).
    Backend(String, String),
}

/// Answer to a successful mutation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// The config generation after the edit: starts at 1 when the daemon starts and
    /// increases by one with every applied mutation (health changes do not move it).
    pub generation: u64,
    /// The snapshot generation published for it.
    pub snapshot_generation: u64,
    /// What changed, one line each (`service web: backend b1 weight 50 -> 80`).
    pub changes: Vec<String>,
}

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

/// Responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// A status report is far larger than the other answers; one is built per request on the
// control side, never on a packet path, so boxing it buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum Response {
    /// Answer to [`Request::Status`].
    Status(StatusReport),
    /// Answer to [`Request::ConfigShow`].
    Config {
        /// Config generation.
        generation: u64,
        /// The running config, TOML.
        toml: String,
        /// Path of the config file the daemon persists to.
        path: String,
    },
    /// Answer to a mutation.
    Applied(Applied),
    /// Answer to [`Request::HealthShow`].
    Health(Vec<HealthRow>),
    /// Answer to [`Request::Flows`].
    Flows(FlowsReport),
    /// Answer to [`Request::Explain`].
    Explain(ExplainReport),
    /// Answer to [`Request::SnapshotShow`].
    Snapshot(SnapshotReport),
    /// The request failed; `message` says why.
    Error {
        /// Human-readable reason.
        message: String,
    },
    /// Answer to [`Request::VipShow`], [`Request::VipDrain`] and [`Request::VipUndrain`]:
    /// one row per configured VIP, sorted by address.
    Vips(Vec<VipRow>),
    /// The daemon could not read the request frame: why (`kind`) and a sentence
    /// (`message`, e.g. "frame of 2000000 bytes exceeds the limit of 1048576 bytes").
    BadFrame {
        /// What was wrong with the frame.
        kind: BadFrameKind,
        /// Human-readable reason.
        message: String,
    },
    /// Answer to [`Request::ServiceShow`].
    Service {
        /// Config generation.
        generation: u64,
        /// The service as a `[[services]]` table of the config file (TOML, backends and
        /// endpoints included).
        toml: String,
        /// Its backends' state and counters, as in [`StatusReport::backends`].
        backends: Vec<BackendStatus>,
    },
    /// Answer to [`Request::DryRun`].
    DryRun(crate::dryrun::DryRunReport),
    /// Answer to [`Request::CaptureStart`].
    CaptureStarted(crate::capture::CaptureStarted),
    /// Answer to [`Request::CapturePoll`] and [`Request::CaptureStop`].
    CaptureBatch(crate::capture::CaptureBatch),
}

/// What was wrong with a request frame, in [`Response::BadFrame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BadFrameKind {
    /// The connection ended, or stalled past the daemon's frame deadline, inside a frame
    /// (length prefix or body). The daemon closes the connection after replying.
    Truncated,
    /// A frame's length is over [`MAX_FRAME`], or the message's over [`MAX_MESSAGE`]. The
    /// daemon closes the connection after replying (the rest of the stream cannot be framed).
    TooLarge,
    /// The frame's protocol version is not [`PROTOCOL_VERSION`]. The connection stays
    /// usable.
    Version,
    /// The body does not decode as a [`RequestFrame`]. The connection stays usable.
    Malformed,
}

impl BadFrameKind {
    /// Whether the connection can carry another frame after this one (the frame was read
    /// whole, only its content was wrong).
    pub fn keeps_connection(self) -> bool {
        matches!(self, BadFrameKind::Version | BadFrameKind::Malformed)
    }
}

/// Readiness and announcement of one VIP (docs/bgp.md "Readiness").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VipRow {
    /// The VIP (dotted quad).
    pub vip: String,
    /// Services on this VIP, config order.
    pub services: Vec<String>,
    /// Workers polling, a snapshot in use by every worker, at least one healthy enabled
    /// backend, and not drained.
    pub ready: bool,
    /// Drained by the operator (`spillwayctl vip drain`).
    pub drained: bool,
    /// Announced now (its address is on the announcement interface; false without
    /// `[announce]`).
    pub announced: bool,
    /// Why it is not ready (empty when ready).
    pub not_ready_because: Vec<String>,
}

/// Counters of one worker, or summed over workers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Frames received.
    pub rx: u64,
    /// Frames sent.
    pub tx: u64,
    /// Frames forwarded to backends.
    pub forwarded: u64,
    /// ARP replies.
    pub arp_replies: u64,
    /// ICMP errors forwarded to the quoted flow's backend.
    pub icmp_forwarded: u64,
    /// ICMP "fragmentation needed" replies generated.
    pub icmp_frag_needed_sent: u64,
    /// IPv4 fragments forwarded.
    pub fragments: u64,
    /// Later IPv4 and IPv6 fragments held until their first fragment arrived (or they expired, then
    /// counted as the drop `fragment_unknown`).
    pub fragments_held: u64,
    /// New connections.
    pub new_connections: u64,
    /// Connections moved to another backend.
    pub rebalanced: u64,
    /// (reason, count) for every drop reason, in a fixed order.
    pub drops: Vec<(String, u64)>,
    /// Connection table hits.
    pub ct_hits: u64,
    /// Connection table misses.
    pub ct_misses: u64,
    /// Evictions of SYN-only entries.
    pub ct_evicted_syn_only: u64,
    /// Evictions of closing entries.
    pub ct_evicted_closing: u64,
    /// First packets of new flows forwarded without a table entry (both buckets full of
    /// established connections; the Maglev choice still applies).
    pub ct_syn_not_tracked: u64,
    /// Snapshot generation in use (minimum over workers when summed).
    pub generation: u64,
    /// Poll iterations.
    pub polls: u64,
    /// Poll iterations that received nothing.
    pub idle_polls: u64,
    /// ARP replies and Neighbor Advertisements handed to the neighbour resolver.
    #[serde(default)]
    pub arp_replies_seen: u64,
    /// Frames sent for the control side (ARP requests, gratuitous ARP).
    #[serde(default)]
    pub control_tx: u64,
    /// Control-side frames that could not be sent (no mbuf, TX full, unknown port).
    #[serde(default)]
    pub control_tx_failed: u64,
    /// Neighbor Advertisements sent in answer to solicitations for our IPv6 addresses.
    #[serde(default)]
    pub nd_advertisements: u64,
    /// Neighbor Solicitations for IPv6 addresses that are not ours (not answered).
    #[serde(default)]
    pub nd_not_ours: u64,
    /// QUIC-LB: (name, count) in a fixed order: `routed` (short-header packets routed by
    /// their DCID's server ID), `long_header`, `fallback_<reason>` (short-header packets
    /// that took the 5-tuple path: unknown codepoint, too short, unknown server ID, not
    /// eligible).
    #[serde(default)]
    pub quic_lb: Vec<(String, u64)>,
}

impl Counters {
    /// Sums several workers' counters (generation: the minimum).
    pub fn sum<'a>(items: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut out = Counters::default();
        let mut gen: Option<u64> = None;
        for c in items {
            out.rx += c.rx;
            out.tx += c.tx;
            out.forwarded += c.forwarded;
            out.arp_replies += c.arp_replies;
            out.icmp_forwarded += c.icmp_forwarded;
            out.icmp_frag_needed_sent += c.icmp_frag_needed_sent;
            out.fragments += c.fragments;
            out.fragments_held += c.fragments_held;
            out.new_connections += c.new_connections;
            out.rebalanced += c.rebalanced;
            if out.quic_lb.is_empty() {
                out.quic_lb = c.quic_lb.clone();
            } else {
                for (o, i) in out.quic_lb.iter_mut().zip(&c.quic_lb) {
                    o.1 += i.1;
                }
            }
            if out.drops.is_empty() {
                out.drops = c.drops.clone();
            } else {
                for (o, i) in out.drops.iter_mut().zip(&c.drops) {
                    o.1 += i.1;
                }
            }
            out.ct_hits += c.ct_hits;
            out.ct_misses += c.ct_misses;
            out.ct_evicted_syn_only += c.ct_evicted_syn_only;
            out.ct_evicted_closing += c.ct_evicted_closing;
            out.ct_syn_not_tracked += c.ct_syn_not_tracked;
            out.nd_advertisements += c.nd_advertisements;
            out.nd_not_ours += c.nd_not_ours;
            gen = Some(gen.map_or(c.generation, |g| g.min(c.generation)));
            out.polls += c.polls;
            out.idle_polls += c.idle_polls;
            out.arp_replies_seen += c.arp_replies_seen;
            out.control_tx += c.control_tx;
            out.control_tx_failed += c.control_tx_failed;
        }
        out.generation = gen.unwrap_or(0);
        out
    }

    /// Total drops over all reasons.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().map(|d| d.1).sum()
    }
}

/// One port's device counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    /// Port name from the config.
    pub name: String,
    /// Device string.
    pub device: String,
    /// MAC address.
    pub mac: String,
    /// Device RX packets.
    pub ipackets: u64,
    /// Device TX packets.
    pub opackets: u64,
    /// Packets the device dropped for lack of RX descriptors.
    pub imissed: u64,
    /// RX errors.
    pub ierrors: u64,
    /// TX errors.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
    /// mbufs in use in this port's pool.
    pub mbufs_in_use: u64,
    /// Link up (`rte_eth_link_get_nowait`); `None` when the driver cannot tell.
    #[serde(default)]
    pub link_up: Option<bool>,
    /// Link speed, Mbit/s (0 when unknown).
    #[serde(default)]
    pub link_speed_mbps: u32,
    /// The device's extended statistics that operators watch, as (name, value) in driver
    /// order: per-queue packets (`rx_q0_packets`), missed frames, mbuf allocation failures
    /// and errors (`dataplane::dpdk::xstat_wanted`).
    #[serde(default)]
    pub xstats: Vec<(String, u64)>,
}

/// One backend's state and counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Address.
    pub address: String,
    /// Zone.
    pub zone: String,
    /// Health as used by the dataplane: at least one endpoint is healthy.
    pub healthy: bool,
    /// Admin state.
    pub enabled: bool,
    /// New connections, summed over workers (and endpoints).
    pub new_connections: u64,
    /// Packets forwarded to it, summed over workers (and endpoints).
    pub packets: u64,
    /// Bytes forwarded to it, summed over workers (and endpoints).
    #[serde(default)]
    pub bytes: u64,
    /// Enabled endpoints.
    #[serde(default)]
    pub endpoints: u32,
    /// Enabled endpoints passing health checks.
    #[serde(default)]
    pub healthy_endpoints: u32,
    /// Auto capacity drain holds it (spec/service-lb-policy.md "Auto capacity drain").
    #[serde(default)]
    pub drained: bool,
    /// Its endpoints, config order.
    #[serde(default)]
    pub members: Vec<EndpointStatus>,
}

/// One endpoint's state and counters, in [`BackendStatus::members`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointStatus {
    /// Endpoint name.
    pub name: String,
    /// Address.
    pub address: String,
    /// Weight among the backend's endpoints.
    pub weight: u32,
    /// Health as used by the dataplane.
    pub healthy: bool,
    /// Admin state.
    pub enabled: bool,
    /// New connections, summed over workers.
    pub new_connections: u64,
    /// Packets forwarded to it, summed over workers.
    pub packets: u64,
    /// Bytes (whole frames as forwarded) sent to it, summed over workers.
    #[serde(default)]
    pub bytes: u64,
    /// Why its next hop has no MAC (`no ARP reply from 10.0.0.11 (3 requests
    /// unanswered)`); `None` when resolved or configured. An unresolved endpoint is not
    /// eligible (docs/operations.md "Next hops").
    #[serde(default)]
    pub unresolved: Option<String>,
    /// Its QUIC-LB server ID (hex), when its service has QUIC-LB.
    #[serde(default)]
    pub server_id: Option<String>,
}

/// Next-hop resolution in [`StatusReport::neighbors`] (docs/operations.md "Next hops").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighborStatus {
    /// Requests sent (ARP requests, Neighbor Solicitations).
    pub requests: u64,
    /// Replies learned (answers to our outstanding requests).
    pub replies: u64,
    /// Replies ignored (no request of ours outstanding for that address, or not addressed to the port we ask on).
    pub ignored: u64,
    /// Requests unanswered within `retry_ms`.
    pub timeouts: u64,
    /// Entries expired (`expiry_sec` without a reply).
    pub expired: u64,
    /// Replies that changed a known MAC.
    pub changed: u64,
    /// Gratuitous ARPs and unsolicited Neighbor Advertisements sent.
    pub gratuitous: u64,
    /// Requests postponed to a later control tick by the per-tick limit
    /// (`REQUESTS_PER_TICK`), each counted once per tick it waited.
    pub deferred: u64,
    /// MLDv2 report frames sent (joins, leaves, periodic reports of the solicited-node
    /// groups of our IPv6 addresses; RFC 3810).
    pub mld_reports: u64,
    /// Every address being resolved: (address, MAC or "", seconds since the last reply
    /// or -1 when unresolved).
    pub entries: Vec<(String, String, i64)>,
}

/// Answer to [`Request::Status`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Daemon version.
    pub version: String,
    /// Seconds since start.
    #[serde(with = "crate::real::f64")]
    pub uptime_sec: f64,
    /// Current snapshot generation.
    pub generation: u64,
    /// Ports.
    pub ports: Vec<PortStatus>,
    /// Per-worker counters.
    pub workers: Vec<Counters>,
    /// Sum over workers.
    pub total: Counters,
    /// Per backend.
    pub backends: Vec<BackendStatus>,
    /// The health checker thread. Default (no checker) for reports without the field.
    #[serde(default)]
    pub health_checker: HealthCheckerStatus,
    /// Next-hop resolution (ARP).
    #[serde(default)]
    pub neighbors: NeighborStatus,
    /// Counters of the control socket since start.
    #[serde(default)]
    pub control_socket: ControlSocketStatus,
    /// Fleet flow-state sync (`enabled: false` without `[sync]`).
    #[serde(default)]
    pub sync: crate::sync::SyncStatus,
}

/// Counters of the control socket, in [`StatusReport::control_socket`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlSocketStatus {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused by the peer-credential check (not root or `socket_group`).
    pub refused: u64,
    /// Request frames that could not be read or decoded (answered with
    /// [`Response::BadFrame`]).
    pub bad_frames: u64,
    /// Requests answered.
    pub requests: u64,
}

/// State of the health checker thread, in [`StatusReport::health_checker`]
/// (docs/operations.md "Health checker").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheckerStatus {
    /// A checker thread was started (some service has a `health_check`).
    pub started: bool,
    /// Why the checker thread died (it panicked or its event loop failed); `None` while it
    /// runs. A dead checker freezes every backend's health, so the daemon exits non-zero.
    pub dead: Option<String>,
    /// Targets probed.
    pub targets: u64,
    /// Probes skipped for a local resource shortage since start, over all targets (see
    /// [`HealthRow::probes_skipped`]).
    pub probes_skipped: u64,
    /// `RLIMIT_NOFILE` soft limit in force (the daemon raises it to the hard limit at
    /// start); 0 if unknown.
    pub nofile_limit: u64,
}

/// Framing and decoding errors.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Socket error (including EOF mid-frame).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A frame's length prefix over [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME} bytes")]
    TooLarge(usize),
    /// A message's frames add up to more than [`MAX_MESSAGE`].
    #[error("message of {0} bytes or more exceeds the limit of {MAX_MESSAGE} bytes")]
    MessageTooLarge(usize),
    /// The reader's budget for buffered bytes (shared with other connections) refused the
    /// next frame ([`read_frame_within`]).
    #[error("the control socket is buffering too many large messages of other connections ({0} bytes more refused); try again")]
    Busy(usize),
    /// Peer speaks another protocol version.
    #[error("protocol version mismatch: peer speaks version {peer}, this side speaks version {PROTOCOL_VERSION}; use matching spillway and spillwayctl builds")]
    Version {
        /// The peer's version.
        peer: u16,
    },
    /// Body does not decode.
    #[error("malformed frame: {0}")]
    Decode(String),
}

/// Writes one message: `body` as frames of at most [`MAX_FRAME`] bytes, each but the last
/// with the [`MORE_FRAMES`] bit (an empty body is one empty frame). Errors: `MessageTooLarge`
/// for a body over [`MAX_MESSAGE`] (nothing is written), or the socket's error.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> Result<(), FrameError> {
    if body.len() > MAX_MESSAGE {
        return Err(FrameError::MessageTooLarge(body.len()));
    }
    let mut chunks = body.chunks(MAX_FRAME).peekable();
    if chunks.peek().is_none() {
        w.write_all(&0u32.to_be_bytes())?;
    }
    while let Some(c) = chunks.next() {
        let more = if chunks.peek().is_some() { MORE_FRAMES } else { 0 };
        w.write_all(&(c.len() as u32 | more).to_be_bytes())?;
        w.write_all(c)?;
    }
    w.flush()?;
    Ok(())
}

/// Reads one message (all its frames, see [`write_frame`]) and returns its body.
/// `Ok(None)` on a clean EOF before a message starts. Errors: `TooLarge` when a frame's
/// length exceeds [`MAX_FRAME`], `MessageTooLarge` when the message would exceed
/// [`MAX_MESSAGE`] (both checked before the frame is read), `Io(UnexpectedEof)` for an end
/// inside a message.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, FrameError> {
    read_frame_within(r, |_| true)
}

/// [`read_frame`] with a budget: `reserve(n)` is asked before each frame's `n` bytes are
/// buffered (after its length is checked) and may refuse ([`FrameError::Busy`]); the caller
/// returns what it reserved when it is done with the body. So many connections sending
/// large messages at once cannot make the daemon buffer more than its budget.
pub fn read_frame_within(r: &mut impl Read, mut reserve: impl FnMut(usize) -> bool) -> Result<Option<Vec<u8>>, FrameError> {
    let mut body = Vec::new();
    let mut first = true;
    loop {
        let mut prefix = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            let n = r.read(&mut prefix[got..])?;
            if n == 0 {
                if got == 0 && first {
                    return Ok(None);
                }
                return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            got += n;
        }
        first = false;
        let p = u32::from_be_bytes(prefix);
        let n = (p & !MORE_FRAMES) as usize;
        if n > MAX_FRAME {
            return Err(FrameError::TooLarge(n));
        }
        if body.len() + n > MAX_MESSAGE {
            return Err(FrameError::MessageTooLarge(body.len() + n));
        }
        if !reserve(n) {
            return Err(FrameError::Busy(n));
        }
        let start = body.len();
        body.resize(start + n, 0);
        r.read_exact(&mut body[start..])?;
        if p & MORE_FRAMES == 0 {
            return Ok(Some(body));
        }
    }
}

impl FrameError {
    /// The [`BadFrameKind`] to answer this error with; `None` for a socket error other than
    /// an end or stall inside a frame (nobody is left to answer).
    pub fn kind(&self) -> Option<BadFrameKind> {
        use std::io::ErrorKind as K;
        match self {
            FrameError::Io(e) if matches!(e.kind(), K::UnexpectedEof | K::TimedOut | K::WouldBlock) => Some(BadFrameKind::Truncated),
            FrameError::Io(_) => None,
            FrameError::TooLarge(_) | FrameError::MessageTooLarge(_) | FrameError::Busy(_) => Some(BadFrameKind::TooLarge),
            FrameError::Version { .. } => Some(BadFrameKind::Version),
            FrameError::Decode(_) => Some(BadFrameKind::Malformed),
        }
    }
}

/// Decodes the version prefix of a body, then the rest as `T` when the version matches.
fn decode_versioned<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, FrameError> {
    let (peer, _) = postcard::take_from_bytes::<u16>(body).map_err(|e| FrameError::Decode(e.to_string()))?;
    if peer != PROTOCOL_VERSION {
        return Err(FrameError::Version { peer });
    }
    postcard::from_bytes(body).map_err(|e| FrameError::Decode(e.to_string()))
}

/// Encodes a request frame body.
pub fn encode_request(request: &Request) -> Vec<u8> {
    postcard::to_stdvec(&RequestFrame { version: PROTOCOL_VERSION, request: request.clone() }).unwrap_or_default()
}

/// Decodes a request frame body (version checked first).
pub fn decode_request(body: &[u8]) -> Result<Request, FrameError> {
    decode_versioned::<RequestFrame>(body).map(|f| f.request)
}

/// Encodes a response frame body.
pub fn encode_response(response: &Response) -> Vec<u8> {
    postcard::to_stdvec(&ResponseFrame { version: PROTOCOL_VERSION, response: response.clone() }).unwrap_or_default()
}

/// Decodes a response frame body (version checked first).
pub fn decode_response(body: &[u8]) -> Result<Response, FrameError> {
    decode_versioned::<ResponseFrame>(body).map(|f| f.response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_through_frames() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &encode_request(&Request::Status)).unwrap();
        let body = read_frame(&mut wire.as_slice()).unwrap().unwrap();
        assert_eq!(decode_request(&body).unwrap(), Request::Status);
        let resp = Response::Status(StatusReport { generation: 7, ..Default::default() });
        assert_eq!(decode_response(&encode_response(&resp)).unwrap(), resp);
    }

    #[test]
    fn version_mismatch_is_named() {
        let body = postcard::to_stdvec(&RequestFrame { version: 99, request: Request::Status }).unwrap();
        let e = decode_request(&body).unwrap_err();
        assert!(matches!(e, FrameError::Version { peer: 99 }));
        assert!(e.to_string().contains("version 99"));
    }

    #[test]
    fn oversized_and_truncated_frames() {
        let wire = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(read_frame(&mut &wire[..]), Err(FrameError::TooLarge(_))));
        let wire = [0u8, 0, 0, 10, 1, 2];
        assert!(matches!(read_frame(&mut &wire[..]), Err(FrameError::Io(_))));
        assert!(read_frame(&mut &[][..]).unwrap().is_none());
        assert!(matches!(decode_request(&[PROTOCOL_VERSION as u8, 0xff, 0xff]), Err(FrameError::Decode(_))));
        assert!(matches!(decode_request(&[1, 0]), Err(FrameError::Version { peer: 1 })));
    }

    /// Messages of 0, 1, MAX_FRAME - 1 .. MAX_FRAME + 1 and several frames' bytes: each
    /// travels whole, frame boundaries where the rule puts them; two messages back to back
    /// stay apart; a stream ending between frames of one message is truncated.
    #[test]
    fn messages_span_frames() {
        for len in [0, 1, MAX_FRAME - 1, MAX_FRAME, MAX_FRAME + 1, 3 * MAX_FRAME + 17] {
            let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut wire = Vec::new();
            write_frame(&mut wire, &body).unwrap();
            write_frame(&mut wire, b"next").unwrap();
            let frames = len.div_ceil(MAX_FRAME).max(1);
            assert_eq!(wire.len(), body.len() + 4 * frames + 8, "len {len}");
            let first = u32::from_be_bytes(wire[..4].try_into().unwrap());
            assert_eq!(first & MORE_FRAMES != 0, frames > 1, "len {len}");
            let mut r = wire.as_slice();
            assert_eq!(read_frame(&mut r).unwrap().unwrap(), body, "len {len}");
            assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"next");
            assert!(read_frame(&mut r).unwrap().is_none());
            if frames > 1 {
                let cut = &wire[..4 + MAX_FRAME];
                assert!(matches!(read_frame(&mut &cut[..]), Err(FrameError::Io(_))), "len {len}");
            }
        }
        assert!(matches!(write_frame(&mut Vec::new(), &vec![0; MAX_MESSAGE + 1]), Err(FrameError::MessageTooLarge(_))));
    }

    #[test]
    fn every_request_roundtrips() {
        let reqs = vec![
            Request::ConfigShow,
            Request::ConfigApply { toml: "x".into(), if_generation: Some(3) },
            Request::ServiceSet { name: "web".into(), fields: vec![("spillover_ratio".into(), "0.5".into())], if_generation: None },
            Request::BackendRemove { service: "a".into(), name: "b".into(), if_generation: Some(1) },
            Request::Flows { op: FlowOp::Show { limit: 5 }, filter: FlowFilter::Backend("a".into(), "b".into()) },
            Request::Explain { client: std::net::Ipv4Addr::new(1, 2, 3, 4).into(), client_port: 9, vip: None, quic_dcid: Some("07c4605e4504cc4f".into()) },
            Request::SnapshotShow,
            Request::EndpointAdd { service: "a".into(), backend: "g".into(), name: "e3".into(), fields: vec![("address".into(), "10.0.0.3".into())], if_generation: None },
            Request::EndpointRemove { service: "a".into(), backend: "g".into(), name: "e3".into(), if_generation: Some(2) },
            Request::EndpointSet { service: "a".into(), backend: "g".into(), name: "e3".into(), fields: vec![("weight".into(), "80".into())], if_generation: None },
        ];
        for r in reqs {
            assert_eq!(decode_request(&encode_request(&r)).unwrap(), r);
        }
        let resp = Response::Health(vec![HealthRow {
            service: "s".into(), backend: "b".into(), endpoint: "e1".into(), address: "1.2.3.4".into(), healthy: true, checked: false,
            latency_ms: None, load_cps: 1.5, consecutive_successes: 0, consecutive_failures: 2, probes: 3,
            probes_failed: 1, last_error: Some("x".into()), since_change_sec: Some(1.0), probes_skipped: 4,
        }]);
        assert_eq!(decode_response(&encode_response(&resp)).unwrap(), resp);
        let resp = Response::Status(StatusReport {
            backends: vec![BackendStatus {
                service: "s".into(), backend: "g".into(), endpoints: 4, healthy_endpoints: 1, drained: true,
                members: vec![EndpointStatus { name: "e1".into(), address: "10.0.0.1".into(), weight: 50, healthy: true, enabled: true, new_connections: 3, packets: 9, ..Default::default() }],
                ..Default::default()
            }],
            health_checker: HealthCheckerStatus { started: true, dead: Some("panicked: x".into()), targets: 2, probes_skipped: 5, nofile_limit: 1024 },
            ..Default::default()
        });
        assert_eq!(decode_response(&encode_response(&resp)).unwrap(), resp);
    }

    #[test]
    fn health_fields_default_when_absent_from_json() {
        // JSON written before these fields existed (e.g. saved `--json` output) still decodes.
        let mut row = serde_json::to_value(HealthRow {
            service: "s".into(), backend: "b".into(), endpoint: "b".into(), address: "a".into(), healthy: true, checked: true, latency_ms: None,
            load_cps: 0.0, consecutive_successes: 0, consecutive_failures: 0, probes: 1, probes_failed: 0, last_error: None,
            since_change_sec: None, probes_skipped: 9,
        })
        .unwrap();
        assert!(row.as_object_mut().unwrap().remove("probes_skipped").is_some());
        assert_eq!(serde_json::from_value::<HealthRow>(row).unwrap().probes_skipped, 0);
        let mut st = serde_json::to_value(StatusReport {
            health_checker: HealthCheckerStatus { started: true, ..Default::default() },
            ..Default::default()
        })
        .unwrap();
        assert!(st.as_object_mut().unwrap().remove("health_checker").is_some());
        assert_eq!(serde_json::from_value::<StatusReport>(st).unwrap().health_checker, HealthCheckerStatus::default());
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_after_a_valid_version(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let mut body = postcard::to_stdvec(&PROTOCOL_VERSION).unwrap();
            body.extend_from_slice(&bytes);
            let _ = decode_request(&body);
            let _ = decode_response(&body);
        }


        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = read_frame(&mut bytes.as_slice());
        }
    }
}
