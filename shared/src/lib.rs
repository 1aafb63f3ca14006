//! spillway-shared: the pure core of Spillway — no I/O, no clocks, no unsafe.
//!
//! - [`config`]: the TOML configuration model and its validation, one part per section
//!   (the range table, `[metrics]`/`[announce]`, `[sync]`, `[neighbors]`, QUIC-LB included);
//! - [`device`]: `[[ports]] device` strings checked without DPDK;
//! - [`net`]: MAC addresses, IPv4 prefixes, longest-prefix match;
//! - [`sync`]: the fleet flow-state sync protocol (sans-IO);
//! - [`neighbors`]: every endpoint's next hop;
//! - [`flow`]: flow keys and the deterministic flow hash;
//! - [`martian`]: the `martian_source` rule for new connections (worker and `explain`);
//! - [`maglev`]: weighted Maglev lookup tables (NSDI 2016);
//! - [`pipeline`]: the routing pipeline of the specs, stage by stage, with a trace;
//! - [`scenario`]: the offline conformance scenario format and runner;
//! - [`proto`]: the control-socket protocol (framing, versioned postcard messages);
//! - [`quic_lb`]: routable QUIC connection IDs (QUIC-LB): config, encode, decode;
//! - [`real`]: `f64` fields that survive JSON and postcard (inf and NaN included).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod capture;
pub mod config;
pub mod device;
pub mod dryrun;
pub mod flow;
pub mod maglev;
pub mod martian;
pub mod neighbors;
pub mod net;
pub mod pipeline;
pub mod proto;
pub mod quic_lb;
pub mod real;
pub mod scenario;
pub mod sync;
