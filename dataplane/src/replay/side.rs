//! One side of a replay: a config compiled into a snapshot and a real [`Worker`] on an
//! in-memory port, fed one captured frame per [`Worker::poll`] (the daemon's code: the
//! vector path's `plan_burst`/`decide_planned`, the connection table, fragments, ICMP).
//!
//! Where a frame went is read from what the poll sent and from the worker's drop counters:
//! every endpoint's destination MAC in the snapshot is replaced by a MAC naming its slot
//! ([`slot_mac`]), so a forwarded frame names its endpoint whatever the forwarding mode
//! (L2 DSR rewrites the destination MAC; IPIP/GUE sends to the next hop's MAC). Next hops
//! are therefore taken as resolved (no ARP/ND: the capture has no neighbours to answer).

use crate::control::snapshot::Snapshot;
use crate::control::{compile, CompileInput, HealthView, SlotMap};
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, MemPort, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::{PollBuffers, PortInfo, Worker, DEFAULT_IPV6_CAPACITY};
use crate::wire::DropReason;
use spillway_shared::config::Config;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use strum::IntoEnumIterator;

/// First four octets of the MAC standing for a backend slot (locally administered).
const SLOT_MAC_PREFIX: [u8; 4] = [0x06, 0x5e, 0x9e, 0x1a];

/// The MAC that stands for backend slot `slot` in a replay snapshot.
pub fn slot_mac(slot: u16) -> [u8; 6] {
    let s = slot.to_be_bytes();
    [SLOT_MAC_PREFIX[0], SLOT_MAC_PREFIX[1], SLOT_MAC_PREFIX[2], SLOT_MAC_PREFIX[3], s[0], s[1]]
}

/// The port MAC a replay worker answers to when the config's first port sets none.
pub const DEFAULT_PORT_MAC: [u8; 6] = [0x02, 0x5e, 0x9e, 0x1a, 0x00, 0x01];

/// What the worker did with one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Forwarded to the endpoint of this backend slot.
    Slot(u16),
    /// Sent back out the receiving port (an ARP reply, an ICMP error to the client).
    Reply,
    /// Dropped, with the reason counted.
    Drop(DropReason),
    /// Neither sent nor counted as dropped (a fragment held for its first fragment, an ARP
    /// reply handed to the resolver).
    Quiet,
}

/// One config's worker and snapshot.
pub struct Side {
    /// The config.
    pub cfg: Config,
    /// Its snapshot (endpoint MACs replaced by [`slot_mac`]).
    pub snap: Snapshot,
    /// The worker (an empty table at the start).
    pub worker: Worker,
    port: Vec<MemPort>,
    bufs: PollBuffers<MemBuf>,
    drops: Vec<u64>,
    /// The port's MAC: unicast frames are readdressed to it.
    pub port_mac: [u8; 6],
}

impl Side {
    /// The worker of `cfg` as the daemon builds it (`[conntrack]` capacity and timeouts,
    /// ICMP error rate, IPv6 table sized when the config has IPv6 services), over a snapshot
    /// compiled with `health` (an endpoint missing from it is healthy) at control time 0.
    /// `slots` must have been synced with `cfg` just before.
    pub fn new(cfg: Config, slots: &SlotMap, health: &HealthView) -> Side {
        let port_addrs: Vec<u32> = cfg
            .ports
            .iter()
            .map(|p| match p.address {
                Some(std::net::IpAddr::V4(a)) => u32::from(a),
                _ => 0,
            })
            .collect();
        let mut states = std::collections::HashMap::new();
        let mut snap = compile(&cfg, slots, CompileInput { health, states: &mut states, now_sec: 0.0, generation: 1, port_addrs: port_addrs.clone() });
        for (i, b) in snap.backends.iter_mut().enumerate() {
            b.mac = slot_mac(i as u16);
        }
        snap.seal();
        let port_mac = cfg.ports.first().and_then(|p| p.mac).map_or(DEFAULT_PORT_MAC, |m| m.0);
        let c = &cfg.conntrack;
        let timeouts = Timeouts { syn_ms: c.tcp_syn_timeout_sec * 1000, tcp_ms: c.tcp_idle_timeout_sec * 1000, closing_ms: c.tcp_closing_timeout_sec * 1000, udp_ms: c.udp_idle_timeout_sec * 1000 };
        let cap = c.capacity_per_worker as usize;
        let cap6 = if cfg.services.iter().any(|s| s.vip.is_ipv6()) { cap } else { DEFAULT_IPV6_CAPACITY };
        let info = PortInfo { mac: port_mac, forward_to: 0, addr: port_addrs.first().copied().unwrap_or(0) };
        let worker = Worker::new(0, cap, 42, timeouts, Arc::new(WorkerStats::default()), vec![info])
            .with_ipv6_capacity(cap6, 42u64.rotate_left(17))
            .with_icmp_errors_per_sec(cfg.dataplane.icmp_errors_per_sec);
        Side { cfg, snap, worker, port: vec![MemPort::new(port_mac)], bufs: PollBuffers::new(1), drops: vec![0; DropReason::iter().count()], port_mac }
    }

    /// Runs one frame through the worker at worker time `now_ms` under `snap` (this side's
    /// own snapshot, or another config's to ask where a tracked connection would go).
    pub fn step_with(&mut self, frame: &[u8], now_ms: u32, snap: Option<&Snapshot>) -> Fate {
        let mut buf = MemBuf::new(frame);
        // a unicast frame was addressed to the capturing host's MAC: make it ours
        if frame.len() >= 6 && frame[0] & 1 == 0 {
            buf.data_mut()[..6].copy_from_slice(&self.port_mac);
        }
        self.port[0].rx.push_back(buf);
        let snap = snap.unwrap_or(&self.snap);
        while !self.port[0].rx.is_empty() {
            self.worker.poll(&mut self.port, &mut self.bufs, snap, now_ms);
        }
        let mut reason = None;
        for ((seen, c), r) in self.drops.iter_mut().zip(self.worker.stats.drops.iter()).zip(DropReason::iter()) {
            let v = c.load(Ordering::Relaxed);
            if v != *seen {
                reason.get_or_insert(r);
                *seen = v;
            }
        }
        let mut fate = Fate::Quiet;
        for b in self.port[0].tx.drain(..) {
            let d = b.data();
            if d.len() >= 6 && d[..4] == SLOT_MAC_PREFIX {
                if !matches!(fate, Fate::Slot(_)) {
                    fate = Fate::Slot(u16::from_be_bytes([d[4], d[5]]));
                }
            } else if fate == Fate::Quiet {
                fate = Fate::Reply;
            }
        }
        match (fate, reason) {
            (Fate::Slot(_), _) => fate,
            (_, Some(r)) => Fate::Drop(r),
            _ => fate,
        }
    }

    /// `(service, backend, endpoint)` of backend slot `slot` in this side's snapshot.
    pub fn names(&self, slot: u16) -> Option<(String, String, String)> {
        let b = self.snap.backends.get(usize::from(slot)).filter(|b| b.present)?;
        let svc = self.cfg.services.get(usize::from(b.service))?;
        let (backend, endpoint) = match b.name.split_once('/') {
            Some((bk, ep)) => (bk.to_string(), ep.to_string()),
            None => (b.name.clone(), b.name.clone()),
        };
        Some((svc.name.clone(), backend, endpoint))
    }
}
