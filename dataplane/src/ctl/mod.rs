//! The control socket: `spillwayctl`'s way into the running daemon.
//!
//! One job: turn control-socket requests into answers. [`server`] accepts connections on
//! the Unix socket ([`socket`] binds it, before DPDK starts), checks peer credentials and
//! speaks the framed protocol of [`spillway_shared::proto`]; [`edits`] turns live
//! configuration edits into config changes and [`transaction`] plans, writes back and
//! applies them; [`persist`] writes the edited config back to the operator's file
//! ([`persist_file`]: the file system side of it, atomic replace and `FILE.bak`); [`views`]
//! answers the read-only requests (status, health, flows, explain, snapshot); [`dryrun`]
//! answers what an edit would change without making it.
//!
//! May use: [`crate::control`] (slots, snapshot compilation and republication after an
//! edit), [`crate::daemon`] state, the health checker's public API, and the workers only
//! through their mailboxes. Runs on its own threads, never on a worker lcore; nothing here
//! is on the packet path.

pub mod capture;
pub mod dryrun;
pub mod edits;
pub mod handler;
pub mod persist;
pub mod persist_file;
pub mod server;
pub mod session;
pub mod socket;
pub mod transaction;
pub mod views;
