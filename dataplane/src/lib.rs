//! spillway-dataplane: packet path, connection tracking, poll-mode workers, ports (DPDK and
//! in-memory), control thread, health checks and the control-socket server.
#![warn(missing_docs)]

pub mod dpdk;
pub mod port;
pub mod conntrack;
pub mod packet;
pub mod snapshot;
pub mod stats;
pub mod worker;
pub mod control;
pub mod ctl_server;
pub mod daemon;
pub mod health;
pub mod ctl_ops;
