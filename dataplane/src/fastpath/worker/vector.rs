//! The vector fast path for established flows (docs/architecture.md "The vector fast
//! path"), in the shape of VPP's graph nodes and DPDK `l3fwd`'s multi-lookup: each stage
//! is one loop over the burst that reads what it needs and writes a small per-burst array
//! ([`BurstPlan`], structure of arrays), and a packet the common case does not cover
//! leaves the vector for the general path ([`Worker::process`]), unchanged.
//!
//! Stages, in order:
//! 1. **classify** ([`Worker::plan_burst`]): the first cache line at fixed offsets
//!    ([`wire::fast::classify`]), the link-layer rule (sent to the port's MAC), then
//!    (VIP, port, protocol) → service through the worker's service cache. A packet of a
//!    service the fast path covers (L2 DSR, no QUIC-LB, the per-connection key: see
//!    [`covered`]) gets a fast lane, or a keyed lane when its TCP flags may change its
//!    entry's state (SYN, FIN or RST: the general path decides, with its buckets already
//!    computed; a SYN's insertion may read both); everything else gets the general lane.
//! 2. **hash and prefetch**: every keyed packet's bucket pair, and the first
//!    [`PREFETCH_DISTANCE`] packets' buckets prefetched (the rest a fixed distance ahead
//!    of their lookups, [`Worker::issue_planned`], as the line fill buffers allow).
//! 3. **look up, update, rewrite** ([`Worker::decide_planned`], in packet order): a fast
//!    lane (a TCP segment without SYN, FIN or RST, or a UDP datagram) takes its entry only
//!    when it is live, established and this host's own, and its backend is kept without
//!    asking the service anything more (present, healthy, not draining or evicting) with
//!    a resolved next hop ([`ConnTable::hit_established`](crate::fastpath::conntrack::ConnTable::hit_established),
//!    [`fast_mac`]); then its deadline is refreshed (the life word computed once per
//!    service and burst) and the frame rewritten for L2 DSR. Any other packet, and a fast
//!    lane whose entry declines, goes to the general path with its buckets handed over:
//!    state changes (a flow's confirming packet, FIN, RST), unhealthy or draining
//!    backends, peers' entries.
//!
//! Decisions happen in packet order, so every packet sees the table as every earlier
//! packet of the burst left it, and TX order is the receive order: a flow whose SYN, FIN
//! or RST takes the general path keeps its later packets behind it. The fast path never
//! decides differently from the general one: `dataplane/tests/vector_differential.rs`
//! compares frames, verdicts, tables and counters of both over random bursts, edits and
//! health changes.
//!
//! Same rules as the parent: no locks, allocation, syscalls or panics on any packet.

use super::{Family, Verdict, Worker, PREFETCH_DISTANCE};
use crate::control::snapshot::{BackendSlot, ServiceSnap, Snapshot};
use crate::fastpath::conntrack::{ConnTable, CtKey};
use crate::fastpath::port::{PacketBuf, BURST};
use crate::fastpath::stats::bump;
use crate::wire::{self, fast::Fast, tcp_flags};
use spillway_shared::config::{ForwardingMode, SessionAffinity, TrackingMode};

/// The lane stage 1 gives a packet: bit flags, so the later stages test bits instead of
/// dispatching on a variant. 0 is the general path with nothing computed
/// ([`Worker::process`]).
type Lane = u8;
/// The general path, nothing computed.
const GENERAL: Lane = 0;
/// Keyed: the key's buckets are computed and handed to the table
/// ([`ConnTable::expect_buckets`](crate::fastpath::conntrack::ConnTable::expect_buckets));
/// alone (a SYN: both buckets prefetched), the general path decides.
const KEYED: Lane = 1;
/// With [`KEYED`]: the key is IPv6 ([`BurstPlan::key6`]; else [`BurstPlan::key4`]).
const SIX: Lane = 2;
/// With [`KEYED`]: the fast path may decide (its first bucket prefetched).
const FAST: Lane = 4;
/// With [`KEYED`]: prefetch the second bucket too (a SYN: its insertion reads it when the
/// first is full).
const SECOND: Lane = 8;

/// The per-burst arrays the stages pass on (structure of arrays, indexed by the packet's
/// place in the burst, [`BURST`] places). Kept in the worker, so a burst allocates and
/// clears nothing: stage 1 writes every field it later reads.
pub(in crate::fastpath) struct BurstPlan {
    lane: [Lane; BURST],
    /// Service index in the snapshot of fast-lane packets.
    svc: [u16; BURST],
    /// The life word a fast-lane packet's established entry gets
    /// ([`ConnTable::established_life`](crate::fastpath::conntrack::ConnTable::established_life)
    /// of its service, computed once per service and burst).
    life: [u32; BURST],
    /// Connection-table key of IPv4 keyed packets.
    key4: [CtKey<u32>; BURST],
    /// Connection-table key of IPv6 keyed packets.
    key6: [CtKey<u128>; BURST],
    /// Bucket pair of keyed packets ([`ConnTable::bucket_pair`](crate::fastpath::conntrack::ConnTable::bucket_pair)).
    buckets: [(u32, u32); BURST],
    /// Frame length of fast-lane packets (one segment: the whole packet), bytes.
    len: [u32; BURST],
    /// The source MAC of the burst's forwarded frames: the forwarding port's.
    out_mac: [u8; 6],
    /// Packets planned.
    n: usize,
    /// The worker clock the burst was planned at, ms: the life words are computed for it,
    /// so [`Worker::decide_planned`] at another time sends the packet to the general path.
    now: u32,
    /// Packets of the burst the fast path decided so far (`WorkerStats::fast_path`).
    pub(super) fast: u64,
    /// Whether the burst's packets are to be decided by the general path only
    /// ([`Worker::with_vector_path`]).
    off: bool,
}

impl Default for BurstPlan {
    fn default() -> Self {
        BurstPlan {
            lane: [GENERAL; BURST],
            svc: [0; BURST],
            life: [0; BURST],
            key4: [CtKey::default(); BURST],
            key6: [CtKey::default(); BURST],
            buckets: [(0, 0); BURST],
            len: [0; BURST],
            out_mac: [0; 6],
            n: 0,
            now: 0,
            fast: 0,
            off: false,
        }
    }
}

/// Whether the fast path covers `svc`'s established packets: L2 DSR (no encapsulation to
/// size), no QUIC-LB (short headers are routed by their DCID), and entries keyed by the
/// client's address and port (`PER_CONNECTION`, or 5-tuple affinity: not a session
/// entry, `worker::tracking_key`).
#[inline(always)]
fn covered(svc: &ServiceSnap) -> bool {
    svc.mode == ForwardingMode::L2_DSR
        && svc.encap_overhead == 0
        && svc.quic_lb.is_none()
        && (svc.tracking == TrackingMode::PER_CONNECTION || matches!(svc.affinity, SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO))
}

impl Worker {
    /// For a TCP/UDP frame of `svc`, a service the fast path does not cover: whether the
    /// general path's lookup gets the key's buckets computed and prefetched in stage 2,
    /// as every TCP/UDP packet's did before the vector path (`Worker::prefetch_target`):
    /// yes when its entries are keyed by the client's address and port (IPIP/GUE, QUIC-LB
    /// long headers); no for session entries (another key), and for a QUIC short header,
    /// which is routed by its DCID and never reads the table: its decode-cache bucket is
    /// prefetched instead. `ethertype` and `ip_udp` (IP and UDP header octets) place the
    /// QUIC payload.
    #[inline]
    fn general_keyed(&self, frame: &[u8], svc: &ServiceSnap, ethertype: u16, ip_udp: usize) -> bool {
        let per_connection = svc.tracking == TrackingMode::PER_CONNECTION || matches!(svc.affinity, SessionAffinity::NONE | SessionAffinity::CLIENT_IP_PORT_PROTO);
        per_connection && !(svc.proto == wire::PROTO_UDP && svc.quic_lb.is_some() && self.quic_short_header_hint(frame, svc, ethertype, ip_udp))
    }
}

/// Whether TCP `flags` open a connection (SYN without ACK, FIN or RST), as `select` reads
/// them.
#[inline(always)]
fn opens(flags: u8, proto: u8) -> bool {
    proto == wire::PROTO_TCP && flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN | tcp_flags::RST) == tcp_flags::SYN
}

/// Whether TCP `flags` (0 for UDP) may change an entry's state (SYN, FIN or RST:
/// `conntrack::advance`): such a packet goes to the general path, which advances the state
/// and, with fleet sync on, sends the change to peers.
#[inline(always)]
fn may_change_state(flags: u8) -> bool {
    flags & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST) != 0
}

/// The destination MAC of a fast-path packet whose entry holds backend slot `b` of
/// incarnation `incarnation`, for a packet of service index `svc_idx`: `Some` only when the
/// general path would keep the backend without asking anything else of the service
/// (`worker::keeps_backend`: present, the same incarnation and service, not evicting;
/// here also healthy and not draining) and its next hop is resolved (the general path
/// drops a packet whose MAC is pending, named). `None` sends the packet to the general
/// path, which decides the unhealthy, draining and unresolved cases.
#[inline(always)]
fn fast_mac(b: &BackendSlot, incarnation: u16, svc_idx: u16) -> Option<[u8; 6]> {
    let ok = b.present && b.incarnation == incarnation && b.service == svc_idx && b.healthy && !b.evict_connections && b.draining_until_ms.is_none();
    (ok && b.mac != [0; 6]).then_some(b.mac)
}

impl Worker {
    /// Turns the vector fast path on (the default) or off: off, every packet takes the
    /// general path ([`Worker::process`]), as before the fast path existed. For the
    /// differential test and side-by-side benchmarks; the decisions are the same either way.
    pub fn with_vector_path(mut self, on: bool) -> Worker {
        self.plan.off = !on;
        self
    }

    /// Stages 1 and 2 for the burst `bufs` received on port `port` at `now` (module docs):
    /// classify every packet, find its service, hash its key and prefetch the first
    /// buckets. Then [`Worker::decide_planned`] decides packet `j` of the same burst, in
    /// order, issuing [`Worker::issue_planned`] for `j + PREFETCH_DISTANCE` first.
    #[inline]
    pub fn plan_burst<B: PacketBuf>(&mut self, bufs: &[B], port: usize, snap: &Snapshot, now: u32) {
        self.clock_ms = now;
        let n = bufs.len().min(BURST);
        self.plan.n = n;
        self.plan.now = now;
        self.plan.fast = 0;
        let Some(pinfo) = self.ports.get(port).copied() else {
            self.plan.lane = [GENERAL; BURST];
            return;
        };
        if self.plan.off {
            self.plan.lane = [GENERAL; BURST];
            return;
        }
        self.plan.out_mac = self.ports.get(pinfo.forward_to).map_or(pinfo.mac, |o| o.mac);
        // The link-layer rule as two 48-bit compares: the destination MAC is the port's,
        // or its device's (worker/l2.rs); a group address takes the general path.
        let mac48 = |m: [u8; 6]| u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]);
        let ours = mac48(pinfo.mac);
        let device = self.device_macs.get(port).map_or(ours, |m| mac48(*m));
        // Stage 1: classify and find the service. Consecutive packets of one (VIP, port,
        // protocol), the common case, reuse the previous packet's answer.
        // IPv4: (VIP, port, protocol) packed in 56 bits, so u64::MAX matches no packet;
        // the answer is (index, number, life word)
        let mut memo4_key = u64::MAX;
        let mut memo4 = (0u16, 0u16, 0u32);
        // IPv6: the VIP, and (port, protocol) packed in 24 bits, so u32::MAX matches none
        let (mut memo6_vip, mut memo6_key) = (0u128, u32::MAX);
        let mut memo6 = (0u16, 0u16, 0u32);
        for (j, b) in bufs.iter().enumerate().take(n) {
            let j = j % BURST;
            let d = b.data();
            let dst = d.first_chunk::<8>().map_or(u64::MAX, |h| u64::from_le_bytes(*h) & 0xffff_ffff_ffff);
            let fast = if (dst == ours || dst == device) && b.segments() == 1 { wire::fast::classify(d) } else { Fast::General };
            self.plan.lane[j] = GENERAL;
            match fast {
                Fast::V4(t) => {
                    let vkey = (u64::from(t.dst) << 24) | (u64::from(t.dport) << 8) | u64::from(t.proto);
                    let (s, id, life) = if vkey == memo4_key {
                        memo4
                    } else {
                        match self.service_of(t.dst, t.dport, t.proto, snap).and_then(|s| snap.services.get(usize::from(s)).map(|svc| (s, svc))) {
                            Some((s, svc)) if covered(svc) => {
                                let life = ConnTable::<u32>::established_life(now, &self.timeouts.for_service(svc.proto, svc.idle_timeout_ms));
                                memo4_key = vkey;
                                memo4 = (s, svc.id, life);
                                memo4
                            }
                            Some((_, svc)) => {
                                // the general path decides; its lookup still gets its buckets
                                if self.general_keyed(d, svc, wire::ETHERTYPE_IPV4, 28) {
                                    self.plan.key4[j] = CtKey { src: t.src, sport: t.sport, service: svc.id };
                                    self.plan.lane[j] = KEYED | if opens(t.flags, t.proto) { SECOND } else { 0 };
                                }
                                continue;
                            }
                            None => continue,
                        }
                    };
                    self.plan.key4[j] = CtKey { src: t.src, sport: t.sport, service: id };
                    if may_change_state(t.flags) {
                        // a new connection (the general path inserts it, with these
                        // buckets) or a state change
                        self.plan.lane[j] = KEYED | if opens(t.flags, t.proto) { SECOND } else { 0 };
                        continue;
                    }
                    self.plan.svc[j] = s;
                    self.plan.life[j] = life;
                    self.plan.len[j] = d.len() as u32;
                    self.plan.lane[j] = KEYED | FAST;
                }
                Fast::V6(t) => {
                    self.ipv6_seen = true;
                    let pkey = (u32::from(t.dport) << 8) | u32::from(t.proto);
                    let (s, id, life) = if pkey == memo6_key && t.dst == memo6_vip {
                        memo6
                    } else {
                        match self.service_of6(t.dst, t.dport, t.proto, snap).and_then(|s| snap.services.get(usize::from(s)).map(|svc| (s, svc))) {
                            Some((s, svc)) if covered(svc) => {
                                let life = ConnTable::<u32>::established_life(now, &self.timeouts.for_service(svc.proto, svc.idle_timeout_ms));
                                (memo6_vip, memo6_key) = (t.dst, pkey);
                                memo6 = (s, svc.id, life);
                                memo6
                            }
                            Some((_, svc)) => {
                                if self.general_keyed(d, svc, wire::ETHERTYPE_IPV6, 48) {
                                    self.plan.key6[j] = CtKey { src: t.src, sport: t.sport, service: svc.id };
                                    self.plan.lane[j] = KEYED | SIX | if opens(t.flags, t.proto) { SECOND } else { 0 };
                                }
                                continue;
                            }
                            None => continue,
                        }
                    };
                    self.plan.key6[j] = CtKey { src: t.src, sport: t.sport, service: id };
                    if may_change_state(t.flags) {
                        // a new connection (the general path inserts it, with these
                        // buckets) or a state change
                        self.plan.lane[j] = KEYED | SIX | if opens(t.flags, t.proto) { SECOND } else { 0 };
                        continue;
                    }
                    self.plan.svc[j] = s;
                    self.plan.life[j] = life;
                    self.plan.len[j] = d.len() as u32;
                    self.plan.lane[j] = KEYED | SIX | FAST;
                }
                Fast::General => {}
            }
        }
        // Stage 2: hash every keyed packet, prefetch the first few.
        for j in 0..n {
            let j = j % BURST;
            let lane = self.plan.lane[j];
            if lane & KEYED == 0 {
                continue;
            }
            let pair = if lane & SIX == 0 { self.ct.bucket_pair(&self.plan.key4[j]) } else { self.ct6.bucket_pair(&self.plan.key6[j]) };
            self.plan.buckets[j] = pair;
            if j < PREFETCH_DISTANCE {
                self.issue_planned(j);
            }
        }
    }

    /// Prefetches the buckets of planned packet `j` (the first for a fast lane; both for a
    /// SYN, whose insertion reads the second when the first is full); nothing for a packet
    /// past the burst or in the general lane.
    #[inline(always)]
    pub fn issue_planned(&self, j: usize) {
        if j >= self.plan.n {
            return;
        }
        let (lane, (b1, b2)) = (self.plan.lane[j % BURST], self.plan.buckets[j % BURST]);
        if lane & KEYED == 0 {
            return;
        }
        // a lookup reads the first bucket; a SYN's insertion may read both
        let second = lane & SECOND != 0;
        if lane & SIX == 0 {
            self.ct.prefetch_bucket(b1);
            if second {
                self.ct.prefetch_bucket(b2);
            }
        } else {
            self.ct6.prefetch_bucket(b1);
            if second {
                self.ct6.prefetch_bucket(b2);
            }
        }
    }

    /// Stage 3 for packet `j` of the planned burst (`buf`, received on `port`): the fast
    /// path's verdict when its entry qualifies (module docs), else the general path's
    /// ([`Worker::process`]) with the key's buckets handed to the table. Call in packet
    /// order, once per packet, after [`Worker::plan_burst`] of the same burst and snapshot,
    /// with the same `now` (at another time the packet takes the general path: the plan's
    /// life words are for the planned time).
    #[inline(always)]
    pub fn decide_planned<B: PacketBuf>(&mut self, j: usize, buf: &mut B, port: usize, snap: &Snapshot, now: u32) -> Verdict {
        let lane = if j < self.plan.n && now == self.plan.now { self.plan.lane[j % BURST] } else { GENERAL };
        let j = j % BURST;
        if lane & KEYED != 0 {
            debug_assert!(lane & FAST == 0 || buf.data().len() == self.plan.len[j] as usize, "decide_planned: not the planned frame");
            let pair = self.plan.buckets[j];
            if lane & SIX == 0 {
                let k = self.plan.key4[j];
                if lane & FAST != 0 {
                    if let Some(v) = self.fast_hit(&k, pair, j, buf, snap, now) {
                        return v;
                    }
                }
                self.ct.expect_buckets(&k, pair);
            } else {
                let k = self.plan.key6[j];
                if lane & FAST != 0 {
                    if let Some(v) = self.fast_hit(&k, pair, j, buf, snap, now) {
                        return v;
                    }
                }
                self.ct6.expect_buckets(&k, pair);
            }
        }
        self.process(buf, port, snap, now)
    }

    /// The fast path's hit for key `k` (buckets `pair`) of planned packet `j`: the
    /// established entry refreshed, the counters of its backend bumped and the frame
    /// rewritten for L2 DSR (`Some(Forward)`), exactly as the general path's `select` and
    /// `deliver` would; or `None`, nothing changed, when the general path must decide
    /// ([`ConnTable::hit_established`], [`fast_mac`]).
    #[inline(always)]
    fn fast_hit<A: Family, B: PacketBuf>(&mut self, k: &CtKey<A>, pair: (u32, u32), j: usize, buf: &mut B, snap: &Snapshot, now: u32) -> Option<Verdict> {
        let j = j % BURST;
        let (svc_idx, life, len) = (self.plan.svc[j], self.plan.life[j], self.plan.len[j]);
        let mut mac = [0u8; 6];
        let backend = A::ct(self).hit_established(k, pair, now, life, |backend, incarnation| {
            match snap.backends.get(usize::from(backend)).and_then(|b| fast_mac(b, incarnation, svc_idx)) {
                Some(m) => {
                    mac = m;
                    true
                }
                None => false,
            }
        })?;
        let out_mac = self.plan.out_mac;
        // every u16 indexes the slot counters (`SlotCounters`): no bounds check is left
        if let Some(c) = self.stats.backend_packets.get(usize::from(backend)) {
            bump(c, 1);
        }
        if let Some(c) = self.stats.backend_bytes.get(usize::from(backend)) {
            bump(c, u64::from(len));
        }
        if let Some(h) = buf.data_mut().first_chunk_mut::<12>() {
            let (dst, src) = h.split_at_mut(6);
            dst.copy_from_slice(&mac);
            src.copy_from_slice(&out_mac);
        }
        self.plan.fast += 1;
        Some(Verdict::Forward)
    }
}
