//! The vector fast path for established flows (docs/architecture.md "The vector fast
//! path"), in the shape of VPP's graph nodes and DPDK `l3fwd`'s multi-lookup: each stage
//! is one loop over the burst that reads what it needs and writes a small per-burst array
//! ([`BurstPlan`], structure of arrays), and a packet the common case does not cover
//! leaves the vector for the general path ([`Worker::process`]), unchanged.
//!
//! Stages, in order:
//! 1. **classify** ([`Worker::plan_burst`]): the first cache line at fixed offsets, the
//!    link-layer rule (sent to the port's MAC), then (VIP, port, protocol) → service
//!    through the worker's service cache. The frame that finds a service the fast path
//!    covers also teaches the burst its shape ([`Template`]): every later frame that
//!    matches it (a few masked word compares and the per-packet length checks) is
//!    classified, and of that service, without the parse ([`wire::fast::classify`]) or
//!    the service lookup; any other frame takes them. A packet of a service the fast path
//!    covers (L2 DSR, no QUIC-LB, the per-connection key: see [`covered`]) gets a fast
//!    lane, or a keyed lane when its TCP flags may change its entry's state (SYN, FIN or
//!    RST: the general path decides, with its buckets already computed; a SYN's insertion
//!    may read both); everything else gets the general lane.
//! 2. **hash and prefetch**, as stage 1 writes each key (the key still in registers):
//!    its bucket pair, and the bucket loads of the whole burst issued at once (a SYN's
//!    second bucket too), as l3fwd's multi-lookup does, so the lookups of stage 3 find
//!    them loaded or in flight.
//! 3. **look up, update, rewrite** ([`Worker::decide_planned`], in packet order): a fast
//!    lane (a TCP segment without SYN, FIN or RST, or a UDP datagram) takes its entry only
//!    when it is live, established and this host's own, and its backend is kept without
//!    asking the service anything more (present, healthy, not draining or evicting) with
//!    a resolved next hop ([`ConnTable::hit_established`](crate::fastpath::conntrack::ConnTable::hit_established),
//!    [`fast_mac`], read from the snapshot's sealed slots: [`FastSlot`](crate::control::snapshot::FastSlot));
//!    then its deadline is refreshed (the life word computed once per
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

use super::{Family, Verdict, Worker};
use crate::control::snapshot::{BackendSlot, ServiceSnap, Snapshot};
use crate::fastpath::conntrack::{ConnTable, CtKey};
use crate::fastpath::port::{PacketBuf, BURST};
use crate::fastpath::stats::bump;
use crate::wire::{self, fast::{Fast, Template}, tcp_flags};
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
    /// Of fast-lane packets: the service index (high 32 bits) and the life word its
    /// established entry gets (low 32: [`ConnTable::established_life`](crate::fastpath::conntrack::ConnTable::established_life)
    /// of its service, computed once per service and burst), one word so that stage 1
    /// writes and stage 3 reads it once.
    svc_life: [u64; BURST],
    /// Connection-table key of IPv4 keyed packets.
    key4: [CtKey<u32>; BURST],
    /// Connection-table key of IPv6 keyed packets.
    key6: [CtKey<u128>; BURST],
    /// Bucket pair of keyed packets ([`ConnTable::bucket_pair`](crate::fastpath::conntrack::ConnTable::bucket_pair)).
    buckets: [(u32, u32); BURST],
    /// The source MAC of the burst's forwarded frames (the forwarding port's) as the fast
    /// path writes it after the destination MAC: its first two octets in the high 16 bits
    /// of a little-endian word (`out_mac_lo`), the other four (`out_mac_hi`).
    out_mac_lo: u64,
    out_mac_hi: [u8; 4],
    /// Packets planned.
    n: usize,
    /// The last IPv6 key's address high half and its mix, for the next key's hash
    /// ([`ConnTable::bucket_pair6_memo`](crate::fastpath::conntrack::ConnTable::bucket_pair6_memo)),
    /// reset every burst.
    mix6: (u64, u64),
    /// The worker clock the burst was planned at, ms: stage 3 decides every packet of the
    /// burst at this time (the life words are computed for it).
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
            svc_life: [0; BURST],
            key4: [CtKey::default(); BURST],
            key6: [CtKey::default(); BURST],
            buckets: [(0, 0); BURST],
            out_mac_lo: 0,
            out_mac_hi: [0; 4],
            n: 0,
            mix6: (0, 0),
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
    /// classify every packet, find its service, hash its key and prefetch its buckets.
    /// Then [`Worker::decide_planned`] decides packet `j` of the same burst, in order.
    #[inline]
    pub fn plan_burst<B: PacketBuf>(&mut self, bufs: &[B], port: usize, snap: &Snapshot, now: u32) {
        self.clock_ms = now;
        let n = bufs.len().min(BURST);
        self.plan.n = n;
        self.plan.now = now;
        self.plan.mix6 = (0, 0);
        self.plan.fast = 0;
        let Some(pinfo) = self.ports.get(port).copied() else {
            self.plan.lane = [GENERAL; BURST];
            return;
        };
        if self.plan.off {
            self.plan.lane = [GENERAL; BURST];
            return;
        }
        let out = self.ports.get(pinfo.forward_to).map_or(pinfo.mac, |o| o.mac);
        self.plan.out_mac_lo = u64::from(u16::from_le_bytes([out[0], out[1]])) << 48;
        self.plan.out_mac_hi = [out[2], out[3], out[4], out[5]];
        // The link-layer rule as two 48-bit compares: the destination MAC is the port's,
        // or its device's (worker/l2.rs); a group address takes the general path.
        let mac48 = |m: [u8; 6]| u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]);
        let ours = mac48(pinfo.mac);
        let device = self.device_macs.get(port).map_or(ours, |m| mac48(*m));
        // Stage 1: classify and find the service. Consecutive packets of one (VIP, port,
        // protocol), the common case, reuse the previous packet's answer.
        // IPv4: (VIP, port, protocol) packed in 56 bits, so u64::MAX matches no packet;
        // the answer is (index << 32 | life word, as `BurstPlan::svc_life`; number)
        let mut memo4_key = u64::MAX;
        let mut memo4 = (0u64, 0u16);
        // IPv6: the VIP, and (port, protocol) packed in 24 bits, so u32::MAX matches none
        let (mut memo6_vip, mut memo6_key) = (0u128, u32::MAX);
        let mut memo6 = (0u64, 0u16);
        // The frame shape of the memo's service, learned from the frame that set the memo
        // (`Template`): a frame matching it is classified by masked word compares, and is
        // of the memo's service.
        let (mut tpl4, mut tpl6) = (Template::NONE, Template::NONE);
        for (j, b) in bufs.iter().enumerate().take(n) {
            let j = j % BURST;
            let d = b.data();
            let one = b.segments() == 1;
            if one {
                if let Some((src, sport, flags)) = tpl4.match4(d) {
                    debug_assert!(matches!(wire::fast::classify(d), Fast::V4(t) if (t.src, t.sport, t.flags, t.proto) == (src, sport, flags, tpl4.proto()) && (u64::from(t.dst) << 24 | u64::from(t.dport) << 8 | u64::from(t.proto)) == memo4_key), "the template matched a frame classify reads otherwise");
                    let (sl, id) = memo4;
                    let key = CtKey { src, sport, service: id };
                    if may_change_state(flags) {
                        self.keyed4(j, key, KEYED | if opens(flags, tpl4.proto()) { SECOND } else { 0 });
                        continue;
                    }
                    self.plan.svc_life[j] = sl;
                    self.keyed4(j, key, KEYED | FAST);
                    continue;
                }
                if let Some((src, sport, flags)) = tpl6.match6(d) {
                    debug_assert!(matches!(wire::fast::classify(d), Fast::V6(t) if (t.src, t.sport, t.flags, t.proto, t.dst) == (src, sport, flags, tpl6.proto(), memo6_vip) && (u32::from(t.dport) << 8 | u32::from(t.proto)) == memo6_key), "the template matched a frame classify reads otherwise");
                    let (sl, id) = memo6;
                    let key = CtKey { src, sport, service: id };
                    if may_change_state(flags) {
                        self.keyed6(j, key, KEYED | SIX | if opens(flags, tpl6.proto()) { SECOND } else { 0 });
                        continue;
                    }
                    self.plan.svc_life[j] = sl;
                    self.keyed6(j, key, KEYED | SIX | FAST);
                    continue;
                }
            }
            self.plan.lane[j] = GENERAL;
            let dst = d.first_chunk::<8>().map_or(u64::MAX, |h| u64::from_le_bytes(*h) & 0xffff_ffff_ffff);
            let fast = if (dst == ours || dst == device) && one { wire::fast::classify(d) } else { Fast::General };
            match fast {
                Fast::V4(t) => {
                    let vkey = (u64::from(t.dst) << 24) | (u64::from(t.dport) << 8) | u64::from(t.proto);
                    let (sl, id) = if vkey == memo4_key {
                        memo4
                    } else {
                        match self.service_of(t.dst, t.dport, t.proto, snap).and_then(|s| snap.services.get(usize::from(s)).map(|svc| (s, svc))) {
                            Some((s, svc)) if covered(svc) => {
                                let life = ConnTable::<u32>::established_life(now, &self.timeouts.for_service(svc.proto, svc.idle_timeout_ms));
                                memo4_key = vkey;
                                memo4 = (u64::from(s) << 32 | u64::from(life), svc.id);
                                tpl4 = Template::learn(d, &fast);
                                memo4
                            }
                            Some((_, svc)) => {
                                // the general path decides; its lookup still gets its buckets
                                if self.general_keyed(d, svc, wire::ETHERTYPE_IPV4, 28) {
                                    self.keyed4(j, CtKey { src: t.src, sport: t.sport, service: svc.id }, KEYED | if opens(t.flags, t.proto) { SECOND } else { 0 });
                                }
                                continue;
                            }
                            None => continue,
                        }
                    };
                    let key = CtKey { src: t.src, sport: t.sport, service: id };
                    if may_change_state(t.flags) {
                        // a new connection (the general path inserts it, with these
                        // buckets) or a state change
                        self.keyed4(j, key, KEYED | if opens(t.flags, t.proto) { SECOND } else { 0 });
                        continue;
                    }
                    self.plan.svc_life[j] = sl;
                    self.keyed4(j, key, KEYED | FAST);
                }
                Fast::V6(t) => {
                    self.ipv6_seen = true;
                    let pkey = (u32::from(t.dport) << 8) | u32::from(t.proto);
                    let (sl, id) = if pkey == memo6_key && t.dst == memo6_vip {
                        memo6
                    } else {
                        match self.service_of6(t.dst, t.dport, t.proto, snap).and_then(|s| snap.services.get(usize::from(s)).map(|svc| (s, svc))) {
                            Some((s, svc)) if covered(svc) => {
                                let life = ConnTable::<u32>::established_life(now, &self.timeouts.for_service(svc.proto, svc.idle_timeout_ms));
                                (memo6_vip, memo6_key) = (t.dst, pkey);
                                memo6 = (u64::from(s) << 32 | u64::from(life), svc.id);
                                tpl6 = Template::learn(d, &fast);
                                memo6
                            }
                            Some((_, svc)) => {
                                if self.general_keyed(d, svc, wire::ETHERTYPE_IPV6, 48) {
                                    self.keyed6(j, CtKey { src: t.src, sport: t.sport, service: svc.id }, KEYED | SIX | if opens(t.flags, t.proto) { SECOND } else { 0 });
                                }
                                continue;
                            }
                            None => continue,
                        }
                    };
                    let key = CtKey { src: t.src, sport: t.sport, service: id };
                    if may_change_state(t.flags) {
                        // a new connection (the general path inserts it, with these
                        // buckets) or a state change
                        self.keyed6(j, key, KEYED | SIX | if opens(t.flags, t.proto) { SECOND } else { 0 });
                        continue;
                    }
                    self.plan.svc_life[j] = sl;
                    self.keyed6(j, key, KEYED | SIX | FAST);
                }
                Fast::General => {}
            }
        }
        for lane in self.plan.lane.iter_mut().skip(n) {
            *lane = GENERAL;
        }
    }

    /// Stage 2 for keyed packet `j` (IPv4 key `key`, lane `lane`), as stage 1 writes its
    /// key: the key's bucket pair, hashed while the key is in registers.
    #[inline(always)]
    fn keyed4(&mut self, j: usize, key: CtKey<u32>, lane: Lane) {
        let j = j % BURST;
        let (b1, b2) = self.ct.bucket_pair(&key);
        // a lookup reads the first bucket; a SYN's insertion may read both
        self.ct.prefetch_bucket(b1);
        if lane & SECOND != 0 {
            self.ct.prefetch_bucket(b2);
        }
        self.plan.buckets[j] = (b1, b2);
        self.plan.key4[j] = key;
        self.plan.lane[j] = lane;
    }

    /// [`Worker::keyed4`] for an IPv6 key.
    #[inline(always)]
    fn keyed6(&mut self, j: usize, key: CtKey<u128>, lane: Lane) {
        let j = j % BURST;
        // one /64's packets share the mix of the address's high half
        let (b1, b2) = self.ct6.bucket_pair6_memo(&key, &mut self.plan.mix6);
        self.ct6.prefetch_bucket(b1);
        if lane & SECOND != 0 {
            self.ct6.prefetch_bucket(b2);
        }
        self.plan.buckets[j] = (b1, b2);
        self.plan.key6[j] = key;
        self.plan.lane[j] = lane;
    }

    /// Stage 3 for packet `j` of the planned burst (`buf`, received on `port`): the fast
    /// path's verdict when its entry qualifies (module docs), else the general path's
    /// ([`Worker::process`]) with the key's buckets handed to the table, at the time the
    /// burst was planned at. Call in packet order, once per packet, after
    /// [`Worker::plan_burst`] of the same burst and snapshot; a place past the burst takes
    /// the general path.
    #[inline(always)]
    pub fn decide_planned<B: PacketBuf>(&mut self, j: usize, buf: &mut B, port: usize, snap: &Snapshot) -> Verdict {
        let now = self.plan.now;
        // every place past the planned packets is GENERAL (`plan_burst`)
        let lane = self.plan.lane.get(j).copied().unwrap_or(GENERAL);
        let j = j % BURST;
        // the common lanes first, each one compare
        if lane == KEYED | FAST {
            let (k, pair) = (self.plan.key4[j], self.plan.buckets[j]);
            if let Some(v) = self.fast_hit(&k, pair, j, buf, snap, now) {
                return v;
            }
            self.ct.expect_buckets(&k, pair);
        } else if lane == KEYED | SIX | FAST {
            let (k, pair) = (self.plan.key6[j], self.plan.buckets[j]);
            if let Some(v) = self.fast_hit(&k, pair, j, buf, snap, now) {
                return v;
            }
            self.ct6.expect_buckets(&k, pair);
        } else if lane & KEYED != 0 {
            // a keyed lane the general path decides (a SYN, FIN or RST; a service the
            // fast path does not cover): its buckets are handed over
            let pair = self.plan.buckets[j];
            if lane & SIX == 0 {
                self.ct.expect_buckets(&self.plan.key4[j], pair);
            } else {
                self.ct6.expect_buckets(&self.plan.key6[j], pair);
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
        let sl = self.plan.svc_life[j];
        let (svc_idx, life) = ((sl >> 32) as u16, sl as u32);
        let mut word = 0u64;
        let backend = A::ct(self).hit_established(k, pair, now, life, |backend, incarnation| {
            // the sealed slot (`FastSlot`): the service index only when `fast_mac` holds
            let ok = snap.fast_slots.get(usize::from(backend)).is_some_and(|f| {
                word = f.word;
                f.service == u32::from(svc_idx) && (f.word >> 48) as u16 == incarnation
            });
            debug_assert_eq!(ok, snap.backends.get(usize::from(backend)).and_then(|b| fast_mac(b, incarnation, svc_idx)).is_some() && !snap.fast_slots.is_empty(), "a stale seal (Snapshot::seal) of slot {backend}");
            ok
        })?;
        // the destination MAC (the word's low 48 bits) and the port's source MAC: 12 octets
        // in two stores
        let (lo, hi) = (word & 0xffff_ffff_ffff | self.plan.out_mac_lo, self.plan.out_mac_hi);
        let frame = buf.data_mut();
        let len = frame.len() as u64;
        if let Some(h) = frame.first_chunk_mut::<12>() {
            let (a, b) = h.split_at_mut(8);
            a.copy_from_slice(&lo.to_le_bytes());
            b.copy_from_slice(&hi);
        }
        // every u16 indexes the slot counters (`SlotCounters`): no bounds check is left;
        // both counters found before either is written, so neither is looked up twice
        let st = &*self.stats;
        let (packets, bytes) = (st.backend_packets.get(usize::from(backend)), st.backend_bytes.get(usize::from(backend)));
        if let Some(c) = packets {
            bump(c, 1);
        }
        if let Some(c) = bytes {
            bump(c, len);
        }
        self.plan.fast += 1;
        Some(Verdict::Forward)
    }
}
