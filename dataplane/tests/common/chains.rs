//! Fixtures shared by the chained-mbuf tests on real DPDK (`dpdk_segments.rs` for IPv4,
//! `dpdk_segments6.rs` for IPv6): the port MAC, a one-port worker, a snapshot compiled
//! from a TOML text, and the segment sizes a frame is split into.

use spillway_dataplane::control::snapshot::Snapshot;
use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap};
use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PortInfo, Worker};
use std::sync::Arc;

/// The load balancer's port MAC.
pub const LB: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// The snapshot of config `toml` (validated), health all up, port address 10.0.0.2.
pub fn snapshot(toml: &str) -> Snapshot {
    let cfg = spillway_shared::config::Config::from_toml(toml).unwrap();
    cfg.validate().unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let mut states = std::collections::HashMap::new();
    compile(&cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut states, now_sec: 0.0, generation: 1, port_addrs: vec![0x0a00_0002] })
}

/// A worker with one port ([`LB`], 10.0.0.2) forwarding to itself.
pub fn worker() -> Worker {
    Worker::new(0, 1024, 7, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac: LB, forward_to: 0, addr: 0x0a00_0002 }])
}

/// Segment sizes for a `len`-byte frame: `first` bytes, then `chunk`-byte segments until
/// `len` is covered (the last may overshoot; the builders cut it).
pub fn split(len: usize, first: usize, chunk: usize) -> Vec<usize> {
    let mut v = vec![first];
    let mut at = first;
    while at < len {
        v.push(chunk);
        at += chunk;
    }
    v
}
