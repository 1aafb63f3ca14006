//! The control socket: the Unix-socket server ([`server`]) and the operations behind it
//! ([`ops`]: live edits, persistence of the config file, read-only views).
//!
//! May use: [`crate::control`] (to republish after an edit) and the daemon's state; runs on
//! its own threads, never on a worker lcore.

pub mod ops;
pub mod server;
