//! The control plane's one job: turn config, live edits and health results into the
//! read-only [`Snapshot`] the workers use, and publish it safely.
//!
//! * [`slots`]: stable endpoint slots (with incarnations) across edits;
//! * [`compile`]: the routing pipeline for every service and client class → Maglev tables;
//! * [`incremental`]: recompiles only the services a change touches, the expensive part
//!   without the control lock;
//! * [`publish`]: publication to workers and reclamation of old snapshots by quiescent
//!   states on the control side ([`Shared`]);
//! * [`mailbox`]: per-worker requests on connection tables (count, show, flush);
//! * [`pools`]: connection draining when a service's active pool changes;
//! * [`snapshot`]: the snapshot types the workers read;
//! * [`quic_lb`]: QUIC-LB tables (server ID → endpoint slot) and their key files;
//! * [`counters`]: the workers' counters as `status` and `/metrics` read them (outcomes
//!   before `rx`, so a read never has more outcomes than frames received).
//!
//! May use: `spillway_shared` (config, pipeline, Maglev) and [`crate::fastpath::stats`]
//! (counters it reads). Never runs on a worker core.

pub mod compile;
pub mod counters;
pub mod incremental;
pub mod mailbox;
pub mod pools;
pub mod publish;
pub mod quic_lb;
pub mod slots;
pub mod snapshot;

pub use incremental::{compile, compile_with_neighbors};
pub use compile::{backend_states, endpoint_view, with_not_resolved, with_unresolved, persists_on_unhealthy, CompileInput, EndpointKey, EndpointView, HealthView};
pub use mailbox::{FlowReply, FlowRequest, Mailbox, MAX_SHOW_PER_WORKER};
pub use publish::Shared;
pub use slots::SlotMap;
pub use snapshot::Snapshot;
