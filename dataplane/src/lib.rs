//! spillway-dataplane: the `spillway` daemon, one module per part of the data flow.
//!
//! Packet flow (per worker lcore, docs/architecture.md):
//! `dpdk` port → [`fastpath::worker`] → [`wire`] parse → [`fastpath::conntrack`] →
//! [`control::snapshot`] (Maglev pick) → [`wire`] rewrite → `dpdk` port.
//!
//! Control flow (control thread): config file / `spillwayctl` ([`ctl`]) / health results
//! ([`health`]) → [`control`] compiles a snapshot → workers read it.
//!
//! Start-up and shutdown, in the order the `spillway` binary runs them: [`start`].
#![warn(missing_docs)]

pub mod wire;
pub mod fastpath;
pub mod dpdk;
pub mod control;
pub mod health;
pub mod ctl;
pub mod daemon;
pub mod control_loop;
pub mod announce;
pub mod metrics;
pub mod neighbor;
pub mod systemd;
pub mod readiness;
pub mod sync;
pub mod secret_file;
pub mod signals;
pub mod start;
pub mod threads;
pub mod replay;
#[cfg(test)]
mod tests_config;
