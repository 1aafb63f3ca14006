//! Fleet flow-state sync, the daemon's side (docs/bgp.md "Flow-state sync",
//! docs/decisions.md "Where synced entries live"; the wire protocol is
//! [`spillway_shared::sync`]).
//!
//! ```text
//!  worker i ── SyncOut (confirmations, FIN/RST, refresh walk, flushes) ──► out[i] ─┐
//!                                                                                   │ `sync` thread:
//!  worker i ◄── SyncIn (install / remove) ◄── in[i] ◄── RSS placement ◄─ resolve ◄──┤ batch, HMAC,
//!                                                                                   │ kernel UDP on
//!                                          peers ◄──────── UDP (management) ────────┘ the management
//! ```                                                                                 address
//!
//! Workers and the `sync` thread share only the bounded lock-free queues of
//! [`SyncQueues`], defined on the packet side ([`crate::fastpath::sync_queues`]) and
//! re-exported here.
//!
//! What is sent: every connection entry that is *confirmed* (a packet after the first: a
//! SYN flood or one-datagram UDP flows never reach the peers, which is our
//! `sync_threshold`), when it is confirmed, when it closes (FIN/RST), when it is flushed,
//! and then once per `refresh_interval_sec` while it carries traffic, with the lifetime it
//! has left. Endpoints travel as addresses, never as slot indices.

mod dump;
mod placement;
mod thread;

pub use placement::{sync_placement, Placement, PlacementWhy, PORTS_BOTH_FAMILIES};
pub use thread::{read_key, run, SyncRuntime};

pub use crate::fastpath::sync_queues::*;
