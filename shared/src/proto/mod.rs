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
//! Split by message family, so a reader finds a command's answer by its name: the version,
//! the envelopes and the [`Request`]/[`Response`] enums (with the small edit types) here;
//! framing and encoding in `frame.rs`; the `status` answer in `status.rs`; the answers of
//! `health`, `flows`, `explain` and `snapshot` in `reports.rs`. A wire change is still one
//! diff under `proto/`, recorded in [`PROTOCOL_VERSION`]'s list.

mod frame;
mod reports;
mod status;

pub use frame::*;
pub use reports::*;
pub use status::*;

use serde::{Deserialize, Deserializer, Serialize};

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
/// Version 9: `PortStatus::{link_changes, rss}` ([`PortRss`]: queues, hash types, key, RETA,
/// sync placement).
pub const PROTOCOL_VERSION: u16 = 9;

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
    /// does not decode ([`one_level`]: no unbounded recursion on input).
    DryRun(#[serde(deserialize_with = "one_level")] Box<Request>),
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

thread_local! {
    static DEPTH: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Decodes the request inside [`Request::DryRun`], refusing one that is
/// itself a dry run: each nesting is one byte of postcard, so a 1 MiB frame of nested dry
/// runs would otherwise recurse a million times and overflow the decoding thread's stack.
/// Errors: "a dry run cannot contain another dry run".
pub fn one_level<'de, D: Deserializer<'de>>(d: D) -> Result<Box<Request>, D::Error> {
    if DEPTH.with(|c| c.get()) > 0 {
        return Err(serde::de::Error::custom("a dry run cannot contain another dry run"));
    }
    DEPTH.with(|c| c.set(1));
    let r = Request::deserialize(d);
    DEPTH.with(|c| c.set(0));
    r.map(Box::new)
}

#[cfg(test)]
mod tests;
