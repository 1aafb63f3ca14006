//! The poll-mode worker: receive a burst on every port, decide each packet, send bursts.
//!
//! Sans-IO in the quinn-proto sense: [`Worker::process`] is a pure function of the frame,
//! the snapshot, the worker's own connection table and an explicit time, so tests drive it
//! with in-memory ports ([`crate::fastpath::port::MemPort`]) and chosen clocks. [`Worker::poll`] runs
//! one iteration over generic [`Port`]s. Nothing here locks, allocates or makes a syscall
//! per packet, and nothing panics on any input.

use crate::fastpath::conntrack::{ConnTable, CtKey, Timeouts};
use crate::wire::{self, tcp_flags, DropReason, Ipv4Info, Parsed};
use crate::fastpath::port::{Burst, PacketBuf, Port};
use crate::control::snapshot::{ClassTable, ServiceSnap, Snapshot};
use crate::fastpath::{frag::{DatagramId, FragTable}, segments::parse_segmented, stats::{bump, WorkerStats}};
use spillway_shared::config::{SessionAffinity, TrackingMode};
use spillway_shared::flow::{FlowAddr, FlowKey, FlowKeyOf};
use std::sync::Arc;

mod v6;
pub use v6::Family;
mod deliver;
use deliver::Inner;
pub use deliver::{IcmpBudget, DEFAULT_ICMP_ERRORS_PER_SEC, ICMP_BURST};
mod hold;
mod frag_route;
mod icmp;
mod l2;
mod control;
mod prefetch;
mod svc_cache;
use svc_cache::SVC_CACHE;
mod sync;
mod run;
mod vector;
mod redirect;
pub use redirect::{FlowOwner, RedirectRings, Redirected, REDIRECT_DRAIN_PER_POLL, REDIRECT_RING_CAPACITY};
pub mod quic;
pub use run::{on_worker_thread, run_loop, LoopParams};
pub use prefetch::PREFETCH_DISTANCE;
pub use hold::PollBuffers;

/// What to do with one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send on the port's forwarding port (towards backends).
    Forward,
    /// Send back out the receiving port (ARP reply, ICMP reply to the client).
    Reply,
    /// Drop and count.
    Drop(DropReason),
    /// A later IPv4 or IPv6 fragment of an unknown service (first fragment not seen, several
    /// services on its VIP and protocol): held until its first fragment arrives
    /// ([`crate::fastpath::frag`]); the datagram is in [`Worker::held_id`].
    Hold,
    /// Handed to the control side (an ARP reply or Neighbor Advertisement for next-hop
    /// resolution, counted in `arp_replies_seen`): the frame is freed.
    Consumed,
    /// A packet of a flow another worker owns (an ICMP error quoting it, a fragment of it):
    /// handed to that worker's redirect ring (worker/redirect.rs); the owner is in the
    /// worker's redirect state.
    Redirect,
}

/// Per-port data a worker needs.
#[derive(Clone, Copy, Debug)]
pub struct PortInfo {
    /// Our MAC on this port.
    pub mac: [u8; 6],
    /// Index of the port packets received here are forwarded to.
    pub forward_to: usize,
    /// This port's own IPv4 address (host order; 0 = none): answered in ARP; encap source.
    pub addr: u32,
}

/// One worker's state.
pub struct Worker {
    /// Worker index.
    pub id: usize,
    /// Each port's device (PMD) MAC, when it differs from the MAC the port answers with
    /// (`ports[].mac` in the config): frames to either are ours ([`Worker::with_device_macs`]).
    device_macs: Vec<[u8; 6]>,
    /// Whether each port's device sends multi-segment packets (absent: yes; [`Worker::with_tx_multi_seg`]).
    tx_multi_seg: Vec<bool>,
    /// Connection table (owned).
    pub ct: ConnTable,
    /// IPv6 connection table (owned; 32-byte entries). Small unless sized with
    /// [`Worker::with_ipv6_capacity`] (the daemon does when the config has IPv6 services).
    pub ct6: ConnTable<u128>,
    /// Datagrams seen fragmented: the service their first fragment named.
    pub frags: FragTable,
    /// IPv6 datagrams seen fragmented (32-bit identification).
    pub frags6: FragTable<u128, u32>,
    /// Timeouts, ms.
    pub timeouts: Timeouts,
    /// Counters (shared read-only with the control plane).
    pub stats: Arc<WorkerStats>,
    /// Ports.
    pub ports: Vec<PortInfo>,
    /// Direct-mapped cache (VIP, port, proto) → service index in front of the snapshot's
    /// hash map (~10 % of a packet's time in the e2e profile). An entry is only a guess:
    /// it is used when the cached index names a service of the *current* snapshot with
    /// exactly this (VIP, port, proto), which is then the only such service (config
    /// validation refuses duplicates), so a new snapshot never needs a flush.
    svc_cache: [u16; SVC_CACHE],
    svc_cache6: [u16; SVC_CACHE], // the same for IPv6 services (worker/v6.rs)
    quic_cache: quic::CidCache, // encrypted QUIC-LB decodes (worker/quic.rs)
    /// A first fragment was learned since held fragments were last released (they follow
    /// it at once, before another datagram can take its fragment-table slot).
    learned_first: bool,
    /// The datagram of the last [`Verdict::Hold`].
    pub held_id: DatagramId,
    /// Queues to the neighbour resolver ([`crate::neighbor`]); `None`: ARP replies are
    /// dropped as `arp_ignored` (tests without a control side).
    pub neighbors: Option<Arc<super::neighbor_queues::NeighborQueues>>,
    /// Whether an IPv6 packet has been processed: until then the IPv6 tables are empty and
    /// [`Worker::poll`] does not sweep them.
    pub ipv6_seen: bool,
    /// Queues to the fleet-sync thread ([`crate::sync`]); `None`: sync off.
    pub sync: Option<Arc<super::sync_queues::SyncQueues>>,
    pub(crate) capture: Option<crate::fastpath::capture::Tap>, // drop-capture ring (fastpath::capture); None in tests
    /// Refresh-walk state of the IPv4 and IPv6 tables.
    sync_walk: crate::fastpath::conntrack::SyncWalk,
    sync_walk6: crate::fastpath::conntrack::SyncWalk,
    /// Last dump epoch this worker started a pass for.
    sync_epoch: u64,
    /// The dump pass whose end marker is still to be queued.
    sync_pass_end: Option<u64>,
    /// ICMP errors this worker may still send ([`IcmpBudget`]).
    pub icmp_budget: IcmpBudget,
    /// The worker clock of the packet being processed, ms.
    clock_ms: u32,
    /// The vector fast path's per-burst arrays (worker/vector.rs).
    plan: vector::BurstPlan,
    /// Redirection to the flow's owning worker (worker/redirect.rs); `None`: off.
    redirect: Option<Box<redirect::Redirector>>,
}

/// Connection-table buckets [`Worker::poll`] sweeps per iteration at least (10^4 to 10^7
/// iterations per second: a 1 M-entry table every 13 s to 3 min); when polls are rarer
/// the sweep is paced by the clock, a whole table per 60 s (`ConnTable::sweep_paced`).
pub const SWEEP_BUCKETS_PER_POLL: usize = 2;

/// Fragment-table slots [`Worker::poll`] sweeps per iteration (16 B each: 512 contiguous
/// bytes): the 1,024-slot table is swept every 32 iterations.
pub const FRAG_SWEEP_PER_POLL: usize = 32;

/// Entries of the IPv6 connection table of a worker built with [`Worker::new`].
pub const DEFAULT_IPV6_CAPACITY: usize = 1024;

/// Hash of the flow for backend selection: fragments and port-less protocols use the
/// 3-tuple (spec/backend-selection.md: all fragments of a datagram reach one backend).
#[inline]
fn selection_hash<A: FlowAddr>(key: &FlowKeyOf<A>, affinity: SessionAffinity, portless: bool) -> u64 {
    if portless {
        match affinity {
            SessionAffinity::CLIENT_IP | SessionAffinity::CLIENT_IP_NO_DESTINATION => key.affinity_hash(affinity),
            _ => key.three_tuple().hash(),
        }
    } else {
        key.affinity_hash(affinity)
    }
}

/// The Maglev table of `svc` for the zone class of client `src`; `None` when the routing
/// pipeline drops this class's new connections.
#[inline]
fn class_table<'s, A: Family>(snap: &'s Snapshot, svc: &'s ServiceSnap, src: A) -> Option<&'s ClassTable> {
    svc.tables.get(usize::from(A::class_of(snap, src))).and_then(|t| t.as_deref())
}

/// The connection-table key of a flow of `svc` ([`CtKey`]: client address, client port,
/// the service's number), and whether it is a *session* entry (spec/backend-selection.md
/// "Connection tracking"):
/// - `PER_CONNECTION`, or `PER_SESSION` with 5-tuple affinity: the client address and port;
/// - `PER_SESSION` with a reduced affinity: the affinity's client address, port 0. The
///   service number stands for the VIP, port and protocol, so two services on one VIP never
///   share a session entry, and a TCP session keeps TCP's timeouts.
#[inline]
pub fn tracking_key<A: Family>(svc: &ServiceSnap, key: &FlowKeyOf<A>) -> (CtKey<A>, bool) {
    let five_tuple = matches!(svc.affinity, SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO);
    if svc.tracking == TrackingMode::PER_CONNECTION || five_tuple {
        return (CtKey::of(key, svc.id), false);
    }
    (CtKey { src: key.for_affinity(svc.affinity).src, sport: 0, service: svc.id }, true)
}

/// Whether a tracked connection on backend slot `backend` (with `incarnation`) stays there
/// (spec/backend-selection.md; docs/semantics.md "Existing connections"):
/// - the slot must still hold the same backend of this service;
/// - it moves at once when its connections are evicted (failover with draining disabled);
/// - on an unhealthy backend it stays only when the service persists on unhealthy
///   backends (`connection_persistence_on_unhealthy_backends`) or every backend of the
///   client's table is unhealthy (last resort);
/// - in the pool that is no longer active (failover/failback) it stays until the drain
///   deadline. Draining protects flows on live backends; it never overrides the
///   persistence rule for a dead one.
///
/// The dry run asks it too, at a time before any drain deadline (`ctl/dryrun/flows.rs`).
#[inline(always)]
pub(crate) fn keeps_backend<A: Family>(snap: &Snapshot, svc: &ServiceSnap, svc_idx: u16, backend: u16, incarnation: u16, src: A, now: u32) -> bool {
    let Some(b) = snap.backends.get(usize::from(backend)) else { return false };
    // The slot (with its incarnation) names one (service, backend) pair; `b.service` is that
    // service's index in *this* snapshot, so removing another service (which shifts
    // indices) keeps the entry, while an entry of another service never matches.
    if !(b.present && b.incarnation == incarnation && b.service == svc_idx) || b.evict_connections {
        return false;
    }
    let last_resort = || class_table(snap, svc, src).is_none_or(|t| t.all_unhealthy);
    if !b.healthy && !svc.persist_on_unhealthy && !last_resort() {
        return false;
    }
    match b.draining_until_ms {
        Some(deadline) => (deadline.wrapping_sub(now) as i32) > 0,
        None => true,
    }
}

/// The backend slot a new connection `key` of `svc` gets in `snap`: the Maglev pick of its
/// client class's table by its selection hash; `None` when the routing pipeline drops the
/// class (no table) or the table is empty. What [`Worker`] records for a new flow (its
/// `select` writes it out), and what the dry run predicts for a flow that must move.
#[inline(always)]
pub(crate) fn new_pick<A: Family>(snap: &Snapshot, svc: &ServiceSnap, key: &FlowKeyOf<A>) -> Option<u16> {
    class_table(snap, svc, key.src).and_then(|t| t.pick(selection_hash(key, svc.affinity, false)))
}

impl Worker {
    /// A worker with a connection table of `ct_capacity` entries.
    pub fn new(id: usize, ct_capacity: usize, seed: u64, timeouts: Timeouts, stats: Arc<WorkerStats>, ports: Vec<PortInfo>) -> Worker {
        Worker {
            id,
            device_macs: Vec::new(), tx_multi_seg: Vec::new(),
            ct: ConnTable::new(ct_capacity, seed),
            ct6: ConnTable::new(DEFAULT_IPV6_CAPACITY, seed.rotate_left(17)),
            frags: FragTable::default(),
            frags6: FragTable::default(),
            timeouts,
            stats,
            ports,
            svc_cache: [u16::MAX; SVC_CACHE],
            svc_cache6: [u16::MAX; SVC_CACHE],
            quic_cache: Default::default(),
            learned_first: false,
            held_id: DatagramId::default(),
            neighbors: None,
            ipv6_seen: false,
            sync: None,
            capture: None, // taken from the hub when the loop starts
            sync_walk: Default::default(),
            sync_walk6: Default::default(),
            sync_epoch: 0,
            sync_pass_end: None,
            icmp_budget: IcmpBudget::new(DEFAULT_ICMP_ERRORS_PER_SEC),
            clock_ms: 0,
            plan: Default::default(),
            redirect: None,
        }
    }

    /// Sets the ICMP error budget to `per_sec` per second (`dataplane.icmp_errors_per_sec`).
    pub fn with_icmp_errors_per_sec(mut self, per_sec: u32) -> Worker {
        self.icmp_budget = IcmpBudget::new(per_sec);
        self
    }

    /// Replaces the IPv6 connection table with one of `capacity` entries (32 bytes each).
    pub fn with_ipv6_capacity(mut self, capacity: usize, seed: u64) -> Worker {
        self.ct6 = ConnTable::new(capacity, seed);
        self
    }

    /// Decides one frame received on port `port` at `now_ms`, rewriting it in place (`buf`).
    #[inline]
    pub fn process<B: PacketBuf>(&mut self, buf: &mut B, port: usize, snap: &Snapshot, now_ms: u32) -> Verdict {
        self.clock_ms = now_ms;
        // IPv4 first, parsed in place ([`wire::parse_ipv4_frame`] says why).
        let mut p = Ipv4Info::default();
        match wire::parse_ipv4_frame(buf.data(), &mut p) {
            Ok(wire::FrameKind::Ipv4) => match self.ports.get(port).copied() {
                Some(pinfo) => self.decide_v4(buf, &p, port, pinfo, snap, now_ms),
                None => Verdict::Drop(DropReason::NotForVip),
            },
            Ok(wire::FrameKind::Other { l3, ethertype }) => self.process_other(buf, l3, ethertype, port, snap, now_ms),
            Err(_) if buf.segments() > 1 => self.process_segmented(buf, port, snap, now_ms),
            Err(r) => Verdict::Drop(r),
        }
    }

    /// Every frame but a single-segment IPv4 one (its Ethernet header checked: the L3
    /// header at `l3`, of `ethertype`): IPv6 (parsed in place, as IPv4 is), ARP,
    /// chained-mbuf frames.
    #[inline(never)]
    fn process_other<B: PacketBuf>(&mut self, buf: &mut B, l3: usize, ethertype: u16, port: usize, snap: &Snapshot, now_ms: u32) -> Verdict {
        let mut p6 = wire::Ipv6Info::default();
        match wire::parse_ipv6_at(buf.data(), l3, ethertype, &mut p6) {
            Ok(true) => {
                let Some(pinfo) = self.ports.get(port).copied() else { return Verdict::Drop(DropReason::NotForVip) };
                self.ipv6_seen = true;
                return self.process_v6(buf, &p6, port, pinfo, snap, now_ms);
            }
            Ok(false) => {}
            Err(_) if buf.segments() > 1 => return self.process_segmented(buf, port, snap, now_ms),
            Err(r) => return Verdict::Drop(r),
        }
        let parsed = wire::parse(buf.data());
        match &parsed {
            Ok(parsed) => self.decide(buf, parsed, port, snap, now_ms),
            Err(_) if buf.segments() > 1 => self.process_segmented(buf, port, snap, now_ms),
            Err(r) => Verdict::Drop(*r),
        }
    }

    /// A chained jumbo frame whose first segment does not hold it all,
    /// out of line: parsed again with its headers pulled up ([`parse_segmented`]).
    #[inline(never)]
    fn process_segmented<B: PacketBuf>(&mut self, buf: &mut B, port: usize, snap: &Snapshot, now_ms: u32) -> Verdict {
        parse_segmented(buf).map_or_else(Verdict::Drop, |parsed| self.decide(buf, &parsed, port, snap, now_ms))
    }

    /// The decision for a parsed frame of any kind (ARP, IPv4, IPv6).
    fn decide<B: PacketBuf>(&mut self, buf: &mut B, parsed: &Parsed, port: usize, snap: &Snapshot, now_ms: u32) -> Verdict {
        let Some(pinfo) = self.ports.get(port).copied() else {
            return Verdict::Drop(DropReason::NotForVip);
        };
        match parsed {
            Parsed::Arp(a) => {
                let (t, refused) = (u32::from(a.tpa), self.arp_sender_refused(buf.data(), a, snap, pinfo));
                if !refused && a.oper == 1 && (snap.arp_addrs.contains_key(&t) || (pinfo.addr != 0 && t == pinfo.addr)) {
                    if let Err(r) = wire::arp_reply_in_place(buf.data_mut(), a, pinfo.mac) {
                        return Verdict::Drop(r);
                    }
                    bump(&self.stats.arp_replies, 1);
                    return Verdict::Reply;
                }
                // replies, and gratuitous ARP in its request form too (RFC 5227 §3: sender
                // and target address equal; Linux's `arp_notify`): a next hop that came back
                // with a new MAC is followed at once (neighbor::table)
                if !refused && (a.oper == wire::arp::OP_REPLY || a.spa == a.tpa) {
                    return self.hand_over_arp_reply(buf.data(), a, port, now_ms);
                }
                Verdict::Drop(DropReason::ArpIgnored)
            }
            Parsed::Ipv4(p) => self.decide_v4(buf, p, port, pinfo, snap, now_ms),
            Parsed::Ipv6(p) => {
                self.ipv6_seen = true;
                self.process_v6(buf, p, port, pinfo, snap, now_ms)
            }
        }
    }

    /// The decision for an IPv4 packet received on port `port`, described by `pinfo`.
    #[inline(always)]
    fn decide_v4<B: PacketBuf>(&mut self, buf: &mut B, p: &Ipv4Info, port: usize, pinfo: PortInfo, snap: &Snapshot, now_ms: u32) -> Verdict {
        if self.not_sent_to_us(buf.data(), port, &pinfo, || snap.arp_addrs.contains_key(&p.dst)) {
            return Verdict::Drop(DropReason::NotOurMac);
        }
        if p.proto == wire::PROTO_ICMP {
            return self.process_icmp(buf, p, snap, pinfo, now_ms);
        }
        let fragment = p.frag.is_fragment();
        let svc_idx = if fragment {
            match self.fragment_service(p, snap, now_ms) {
                Ok(s) => s,
                Err(v) => return v,
            }
        } else if p.has_ports {
            self.service_of(p.dst, p.dport, p.proto, snap)
        } else {
            // protocols without ports: the (VIP, protocol)'s first service
            snap.by_vip_proto.get(&(p.dst, p.proto)).map(|v| v.0)
        };
        let Some(svc_idx) = svc_idx else {
            let is_vip = snap.arp_addrs.contains_key(&p.dst);
            return Verdict::Drop(if is_vip { DropReason::NoService } else { DropReason::NotForVip });
        };
        let Some(svc) = snap.services.get(usize::from(svc_idx)) else {
            return Verdict::Drop(DropReason::NoService);
        };
        let key = FlowKey { src: p.src, dst: p.dst, sport: p.sport, dport: p.dport, proto: p.proto };
        if let Some(v) = if fragment { self.redirect_fragment4(p, &key, now_ms) } else { None } {
            return v; // its datagram's flow is another worker's (worker/redirect.rs)
        }
        if svc.encap_overhead != 0 && p.total_len + usize::from(svc.encap_overhead) > usize::from(svc.encap_mtu) {
            // Too big for the tunnel: answered (or dropped) before it is tracked or counted.
            return self.too_big(buf, Inner::V4(p), svc.encap_mtu.saturating_sub(svc.encap_overhead), pinfo);
        } else if self.unsendable(buf, pinfo) {
            return Verdict::Drop(DropReason::MultiSegment); // neither tracked nor counted
        }
        let backend = if fragment {
            // A first fragment follows its flow's entry, later ones their first (frag_route.rs).
            self.fragment_backend4(p, &key, svc, svc_idx, snap, now_ms).ok_or(DropReason::NoBackend)
        } else if !p.has_ports {
            class_table(snap, svc, p.src).and_then(|t| t.pick(selection_hash(&key, svc.affinity, true))).ok_or(DropReason::NoBackend)
        } else {
            self.quic_route(buf.data(), p.l4(), p.l3 + p.total_len, svc, svc_idx, snap, p.src, now_ms).map_or_else(|| self.select(&key, p.tcp_flags, svc, svc_idx, snap, now_ms), Ok)
        };
        let backend = match backend {
            Ok(b) => b,
            Err(r) => return Verdict::Drop(r),
        };
        self.deliver(buf, Inner::V4(p), svc, backend, snap, pinfo, &key)
    }

    /// The service of an IPv4 fragment: the one its first fragment named (learned in the
    /// worker's [`FragTable`]); for a later fragment whose first fragment was not seen, the
    /// only service of its (VIP, protocol), else [`Verdict::Hold`] (module docs of
    /// [`crate::fastpath::frag`]).
    #[inline]
    fn fragment_service(&mut self, p: &Ipv4Info, snap: &Snapshot, now: u32) -> Result<Option<u16>, Verdict> {
        let id = p.ident;
        if p.frag.offset == 0 && p.has_ports {
            self.frags.learn(p.src, p.dst, p.proto, id, p.dport, now);
            self.learned_first = true;
            return Ok(self.service_of(p.dst, p.dport, p.proto, snap));
        }
        if let Some(dport) = self.frags.lookup(p.src, p.dst, p.proto, id, now) {
            return Ok(self.service_of(p.dst, dport, p.proto, snap));
        }
        match snap.by_vip_proto.get(&(p.dst, p.proto)) {
            // one service: forwarded now, and its first fragment will follow it (frag_route.rs)
            Some(&(only, 1)) => Ok(Some(only)),
            Some(_) => Err(self.hold_datagram(DatagramId::V4 { src: p.src, dst: p.dst, proto: p.proto, ident: id })),
            None => Ok(None),
        }
    }

    /// Connection-table lookup, then (on a miss, or when the entry must move) a new
    /// selection recorded in the table. Returns the backend slot.
    #[inline(always)]
    fn select<A: Family>(&mut self, key: &FlowKeyOf<A>, flags: u8, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, now: u32) -> Result<u16, DropReason> {
        let (ct_key, session) = tracking_key(svc, key);
        // A connection's opening SYN: SYN without ACK, and without FIN or RST (SYN+FIN,
        // SYN+RST are no handshake: scans, and they start nothing below).
        let syn = flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN | tcp_flags::RST) == tcp_flags::SYN && key.proto == wire::PROTO_TCP;
        // The flow's entry named a backend it may no longer use: counted as `rebalanced`
        // once, when the new pick is recorded (not per packet while it cannot be).
        let mut moved = false;
        // This service's idle timeout applies to its established entries.
        let t = self.timeouts.for_service(svc.proto, svc.idle_timeout_ms);
        let flags = if key.proto == wire::PROTO_TCP { flags } else { 0 };
        // spec/backend-selection.md: under PER_CONNECTION a SYN always starts a new
        // connection; under PER_SESSION only with 5-tuple affinity (not a session entry).
        if !syn || session {
            // A session entry outlives the connections in it: their SYN, FIN and RST flags
            // neither restart nor close it; any packet confirms and refreshes it.
            let ct_flags = if session { tcp_flags::ACK } else { flags };
            if let Some(hit) = A::ct(self).lookup(&ct_key, ct_flags, now, &t) {
                if keeps_backend(snap, svc, svc_idx, hit.backend, hit.incarnation, key.src, now) {
                    if hit.after != hit.state && self.sync.is_some() {
                        // confirmed or closing: peers learn it (fleet sync)
                        self.sync_state_change(snap, &ct_key, &hit, &t, now);
                    }
                    return Ok(hit.backend);
                }
                moved = true;
            }
        }
        // A new connection from one of our own addresses is spoofed (the backend would
        // answer itself): refuse it (the rule `explain` applies too).
        if spillway_shared::martian::is_martian_source(key.src, |a| A::is_ours(snap, a)) {
            return Err(DropReason::MartianSource);
        }
        // [`new_pick`], written out: called, it changed this function's code layout and
        // cost 5 instructions per *established* packet (`packet_ir`, 905.1 → 910.1).
        let b = class_table(snap, svc, key.src)
            .and_then(|t| t.pick(selection_hash(key, svc.affinity, false)))
            .ok_or(DropReason::NoBackend)?;
        let (inc, pending) = snap.backends.get(usize::from(b)).map_or((0, false), |s| (s.incarnation, s.mac == [0; 6]));
        if pending {
            // An endpoint pending its first ARP reply / Neighbor Advertisement (eligible,
            // docs/operations.md "Next hops"): the packet is dropped (`next_hop_unresolved`)
            // and the choice is not recorded, so it is made again for the next packet once
            // the next hop is resolved, or failed and no longer eligible. Recorded, a
            // mid-stream packet after a restart would pin its connection to an endpoint
            // that may never answer (TCP keeps connections on unhealthy backends). A SYN is
            // counted as a new connection when its retransmission is delivered.
            return Ok(b);
        }
        if key.proto == wire::PROTO_TCP && !syn && (flags & tcp_flags::RST != 0 || flags & tcp_flags::ACK == 0) {
            // A TCP packet no connection this host should start tracking can carry: an RST
            // (the connection ends with it), or neither SYN nor ACK (a lone FIN, a null
            // scan). Forwarded by the Maglev choice, as its connection's packets would be,
            // but neither recorded nor a new connection (docs/architecture.md "States and
            // timeouts"; fresh-user QA: stray RSTs counted as new connections).
            return Ok(b);
        }
        let base = self.timeouts;
        let tracked = A::ct(self).insert(&ct_key, b, inc, now, &snap.timeouts(base));
        if moved && tracked {
            bump(&self.stats.rebalanced, 1);
        }
        // A new connection is one the table recorded, or a SYN. A flow the full table could
        // not record is forwarded by the same Maglev choice; its later packets are not new
        // connections (they would inflate the load the capacity stage reads).
        if tracked || syn {
            bump(&self.stats.new_connections, 1);
            if let Some(c) = self.stats.backend_new.get(usize::from(b)) {
                bump(c, 1);
            }
        }
        Ok(b)
    }

    /// One poll iteration: receive a burst from every port, process, send, then release
    /// held fragments whose first fragment arrived (or drop those held too long). `bufs`
    /// holds the TX bursts (one per port) and the held fragments, kept by the caller so
    /// nothing is allocated here.
    pub fn poll<P: Port>(&mut self, ports: &mut [P], bufs: &mut PollBuffers<P::Buf>, snap: &Snapshot, now_ms: u32) -> usize {
        let mut rx: Burst<P::Buf> = Burst::new();
        let PollBuffers { tx, held, redirect } = bufs;
        let rings = redirect.as_deref();
        let tx = tx.as_mut_slice();
        let mut total = 0usize;
        bump(&self.stats.polls, 1);
        for i in 0..ports.len() {
            let n = ports[i].rx_burst(&mut rx);
            if n == 0 {
                continue;
            }
            total += n;
            bump(&self.stats.rx, n as u64);
            let fwd = self.ports.get(i).map_or(i, |p| p.forward_to).min(ports.len() - 1);
            // The vector fast path's stages over the burst (worker/vector.rs: classify,
            // hash and load every bucket), then each packet decided in order.
            self.plan_burst(&rx, i, snap, now_ms);
            let mut forwarded = 0u64;
            for (j, mut b) in rx.drain(..).enumerate() {
                let v = self.decide_planned(j, &mut b, i, snap);
                forwarded += u64::from(self.dispatch(ports, tx, held, rings, v, b, i, fwd, now_ms));
                if self.learned_first && !held.is_empty() {
                    self.release_held(ports, tx, held, rings, snap, now_ms);
                }
            }
            bump(&self.stats.forwarded, forwarded);
            bump(&self.stats.fast_path, self.plan.fast);
        }
        if let Some(r) = rings {
            total += self.drain_redirected(ports, tx, held, r, snap, now_ms);
        }
        // expiry (and anything still ready)
        if !held.is_empty() {
            self.release_held(ports, tx, held, rings, snap, now_ms);
        }
        for (i, burst) in tx.iter_mut().enumerate() {
            if !burst.is_empty() {
                flush(ports, burst, i, &self.stats);
            }
        }
        if total == 0 {
            bump(&self.stats.idle_polls, 1);
        }
        // Quiescent state (control::publish): this worker holds nothing of snapshots older
        // than this one any more. Release: our reads of them happen before their reclamation.
        self.stats.generation.store(snap.generation, std::sync::atomic::Ordering::Release);
        // Clear expired entries, paced by the clock, so no idle entry's 24-bit deadline can
        // wrap (conntrack docs "Clock").
        self.ct.sweep_paced(now_ms, SWEEP_BUCKETS_PER_POLL);
        self.frags.sweep(now_ms, FRAG_SWEEP_PER_POLL);
        if self.ipv6_seen {
            // Not before the first IPv6 packet: the sweep of empty tables costs an IPv4-only
            // worker cache lines on every poll.
            self.ct6.sweep_paced(now_ms, SWEEP_BUCKETS_PER_POLL);
            self.frags6.sweep(now_ms, FRAG_SWEEP_PER_POLL);
        }
        if self.sync.is_some() {
            self.sync_poll(snap, now_ms);
        }
        // Both families' tables count in the same counters.
        let (c, c6) = (&self.ct.counters, &self.ct6.counters);
        let s = &self.stats;
        use std::sync::atomic::Ordering::Relaxed;
        s.ct_hits.store(c.hits + c6.hits, Relaxed);
        s.ct_misses.store(c.misses + c6.misses, Relaxed);
        s.ct_evicted_syn_only.store(c.evicted_syn_only + c6.evicted_syn_only, Relaxed);
        s.ct_evicted_closing.store(c.evicted_closing + c6.evicted_closing, Relaxed);
        s.ct_syn_not_tracked.store(c.syn_not_tracked + c6.syn_not_tracked, Relaxed);
        self.publish_occupancy();
        total
    }
}

#[inline]
pub(super) fn push_or_flush<P: Port>(ports: &mut [P], tx: &mut [Burst<P::Buf>], i: usize, b: P::Buf, stats: &WorkerStats) {
    let Some(burst) = tx.get_mut(i) else { return };
    if burst.is_full() {
        flush(ports, burst, i, stats);
    }
    // cannot fail after a flush emptied the burst
    let _ = burst.try_push(b);
}

#[inline]
fn flush<P: Port>(ports: &mut [P], burst: &mut Burst<P::Buf>, i: usize, stats: &WorkerStats) {
    let n = burst.len();
    let sent = match ports.get_mut(i) {
        Some(p) => p.tx_burst(burst),
        None => {
            burst.clear();
            0
        }
    };
    bump(&stats.tx, sent as u64);
    if sent < n {
        bump(&stats.drops[DropReason::TxFull as usize], (n - sent) as u64);
    }
}
