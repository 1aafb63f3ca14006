//! The control socket: `spillwayctl`'s way into the running daemon.
//!
//! One job: turn control-socket requests into answers. [`server`] accepts connections on
//! the Unix socket ([`socket`] binds it, before DPDK starts), checks peer credentials and
//! speaks the framed protocol of [`spillway_shared::proto`]; [`edits`] applies live
//! configuration edits as a diff;
//! [`persist`] writes the edited config back to the operator's file; [`views`] answers the
//! read-only requests (status, health, flows, explain, snapshot).
//!
//! May use: [`crate::control`] (slots, snapshot compilation and republication after an
//! edit), [`crate::daemon`] state, the health checker's public API, and the workers only
//! through their mailboxes. Runs on its own threads, never on a worker lcore; nothing here
//! is on the packet path.

pub mod edits;
pub mod persist;
pub mod server;
pub mod socket;
pub mod views;
