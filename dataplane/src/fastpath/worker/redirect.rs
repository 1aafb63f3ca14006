//! Redirect rings: a packet that RSS gave the wrong worker is handed, mbuf and all, to the
//! worker that owns its flow (as DPVS's per-lcore redirect rings do). A child of [`super`].
//!
//! RSS hashes a packet's own addresses (and ports), so two kinds of packets of a tracked
//! flow land on another queue than the flow's packets:
//!
//! - an ICMP or ICMPv6 error quoting the flow (a router's "fragmentation needed" / Packet
//!   Too Big, unreachable, time exceeded): the *router's* address decides its queue;
//! - the fragments of an IPv4 or IPv6 datagram: NICs hash fragments on the addresses only
//!   (an IPv6 fragment's ports, in its first fragment, sit behind the Fragment header,
//!   RFC 8200 §4.5, which RSS does not parse).
//!
//! The *owning worker* of a flow is the one the fleet-sync placement gives its 5-tuple
//! ([`FlowOwner`], implemented by `sync::Placement`: the software Toeplitz over the port's
//! RSS key and redirection table, the client's direction), which is where the flow's
//! connection-table entry is. When a worker decides such a packet for a flow it does not own, the verdict is
//! [`Verdict::Redirect`] and the poll loop pushes the buffer on the owner's ring
//! ([`RedirectRings`]); the owner drains its ring every poll iteration and decides each
//! packet exactly as if its own port queue had received it (same decision path, its own TX
//! queue), never redirecting it again. A full ring drops the packet as
//! `redirect_ring_full`: a worker never waits on another.
//!
//! Fragments (both families): the first fragment (offset 0, with the ports) names the flow;
//! when it is redirected, the datagram (IPv4: source, destination, protocol, IP ID; IPv6:
//! source, destination, the Fragment header's Next Header, 32-bit Identification) is
//! remembered for [`crate::fastpath::frag::FRAG_LIFETIME_MS`] and every later fragment of it
//! (held before the first arrived, or arriving after) follows it to the same ring, in order.
//! A first fragment whose datagram already sent a later fragment somewhere (a later fragment
//! that came first, forwarded at once on a (VIP, protocol) with one service) is not
//! redirected: it follows that fragment so the datagram is not split (docs/semantics.md
//! "Fragments"; why that later fragment cannot be sent to the owner: docs/architecture.md
//! "Redirect rings").
//!
//! Without an RSS placement (one worker, or a device that reports no key or redirection
//! table: placement `single` or `broadcast`) nothing is redirected: the owner is unknown.

use super::{Verdict, Worker};
use crate::control::snapshot::Snapshot;
use crate::fastpath::frag::{FragHold, FragTable};
use crate::fastpath::port::{Burst, PacketBuf, Port, BURST};
use crate::fastpath::stats::bump;
use crate::wire::{DropReason, Ipv4Info, Ipv6Info};
use crossbeam_queue::ArrayQueue;
use spillway_shared::flow::{FlowKey, FlowKey6};
use std::sync::Arc;

/// Which worker owns a flow: the fleet-sync placement (`sync::Placement`
/// implements it; it lives above the fast path, so the worker sees only this).
pub trait FlowOwner: Send + Sync {
    /// The workers whose entry the flow `src:sport → dst:dport` gets (client's direction;
    /// addresses as `u128`, IPv4 in the low 32 bits): one worker when the placement knows
    /// the flow's RSS queue.
    fn owners(&self, ipv6: bool, src: u128, dst: u128, sport: u16, dport: u16) -> std::ops::Range<usize>;
    /// Whether the placement names one worker per 5-tuple (an RSS placement), so packets
    /// can be redirected to it.
    fn per_flow(&self) -> bool;
}

/// Packets each worker's redirect ring holds (a power of two; 16 bytes each for an mbuf).
/// ICMP errors and fragments are a small part of any traffic; the ring only has to cover
/// the owner's time between two polls.
pub const REDIRECT_RING_CAPACITY: usize = 1024;

/// Most packets a worker takes from its redirect ring per poll iteration (two bursts): the
/// ring cannot starve the worker's own queues.
pub const REDIRECT_DRAIN_PER_POLL: usize = 2 * BURST;

/// Slots of the redirected-datagram table swept per poll iteration (the table's 1,024 every
/// 256 iterations): enough that no entry's age wraps, at a few cache lines per poll.
const DATAGRAM_SWEEP_PER_POLL: usize = 4;

/// A packet handed to another worker: the buffer, untouched, and the index of the port
/// whose queue received it (the owner decides it as received on its own queue of that port).
pub struct Redirected<B> {
    /// The frame.
    pub buf: B,
    /// Index of the receiving port.
    pub port: u16,
}

/// One bounded ring per worker, created before the workers start and shared by them: every
/// worker pushes to any other's ring (multi-producer), only its owner pops (single
/// consumer). Lock-free and allocated once (crossbeam's `ArrayQueue`; docs/decisions.md
/// says why not DPDK's `rte_ring`).
pub struct RedirectRings<B> {
    rings: Box<[ArrayQueue<Redirected<B>>]>,
}

impl<B> RedirectRings<B> {
    /// Rings for `workers` workers of `capacity` packets each (at least 1).
    pub fn new(workers: usize, capacity: usize) -> Self {
        RedirectRings { rings: (0..workers).map(|_| ArrayQueue::new(capacity.max(1))).collect() }
    }

    /// Number of rings (workers).
    pub fn workers(&self) -> usize {
        self.rings.len()
    }

    /// Packets waiting in worker `w`'s ring (0 for a worker without one).
    pub fn len(&self, w: usize) -> usize {
        self.rings.get(w).map_or(0, ArrayQueue::len)
    }

    /// Whether worker `w`'s ring is empty.
    pub fn is_empty(&self, w: usize) -> bool {
        self.len(w) == 0
    }

    /// Pushes `r` on worker `to`'s ring; gives it back when the ring is full or `to` has none.
    #[inline]
    pub fn push(&self, to: usize, r: Redirected<B>) -> Result<(), Redirected<B>> {
        match self.rings.get(to) {
            Some(q) => q.push(r),
            None => Err(r),
        }
    }

    /// The oldest packet on worker `w`'s ring.
    #[inline]
    pub fn pop(&self, w: usize) -> Option<Redirected<B>> {
        self.rings.get(w)?.pop()
    }
}

/// A worker's redirect state ([`Worker::with_redirect`]).
pub(super) struct Redirector {
    /// The placement (one that names a worker per 5-tuple: [`FlowOwner::per_flow`]).
    placement: Arc<dyn FlowOwner>,
    /// Workers with a ring: an owner at or past it is not redirected to.
    workers: usize,
    /// The owner of the last [`Verdict::Redirect`].
    pub(super) to: usize,
    /// Set while the worker decides packets from its own ring: never redirected again.
    from_ring: bool,
    /// IPv4 datagrams whose first fragment was redirected: the owner, in the `dport` field
    /// of a fragment-table entry (same key and lifetime as [`Worker::frags`]).
    datagrams: FragTable,
    /// The same for IPv6 datagrams (key and lifetime of [`Worker::frags6`]).
    datagrams6: FragTable<u128, u32>,
}

impl Worker {
    /// Hands packets of flows this worker does not own to their owner ([`Verdict::Redirect`];
    /// module docs), for a placement that names one worker per 5-tuple (an RSS placement,
    /// [`FlowOwner::per_flow`]) with `workers` > 1 (the number of rings). Any other
    /// placement (`single`, `broadcast`) turns redirection off.
    pub fn with_redirect(mut self, placement: Arc<dyn FlowOwner>, workers: usize) -> Worker {
        self.redirect = (placement.per_flow() && workers > 1).then(|| Box::new(Redirector { placement, workers, to: 0, from_ring: false, datagrams: FragTable::default(), datagrams6: FragTable::default() }));
        self
    }

    /// The worker that must decide a packet of the flow `src:sport → dst:dport` (client's
    /// direction; addresses as `u128`, IPv4 in the low 32 bits), when it is another one:
    /// its index is kept for the dispatch. `None`: decide it here (no RSS placement, this
    /// worker owns the flow, or the packet came from this worker's ring).
    #[inline]
    pub(super) fn redirect_owner(&mut self, ipv6: bool, src: u128, dst: u128, sport: u16, dport: u16) -> Option<usize> {
        let id = self.id;
        let r = self.redirect.as_deref_mut().filter(|r| !r.from_ring)?;
        let owners = r.placement.owners(ipv6, src, dst, sport, dport);
        let owner = owners.start;
        if owners.len() != 1 || owner == id || owner >= r.workers {
            return None;
        }
        r.to = owner;
        Some(owner)
    }

    /// [`Verdict::Redirect`] for an ICMP or ICMPv6 error quoting flow `key` (client's
    /// direction) that another worker owns; `None`: decide it here.
    #[inline]
    pub(super) fn redirect_quoted<A: spillway_shared::flow::FlowAddr>(&mut self, key: &spillway_shared::flow::FlowKeyOf<A>) -> Option<Verdict> {
        self.redirect.as_ref()?;
        let (s, ipv6) = super::sync::wide(key.src);
        let (d, _) = super::sync::wide(key.dst);
        self.redirect_owner(ipv6, s, d, key.sport, key.dport).map(|_| Verdict::Redirect)
    }

    /// [`Verdict::Redirect`] for IPv4 fragment `p` (a first fragment's 5-tuple `key`) whose
    /// datagram another worker owns (module docs); `None`: decide it here. A redirected first
    /// fragment's datagram is remembered for its later fragments.
    #[inline]
    pub(super) fn redirect_fragment4(&mut self, p: &Ipv4Info, key: &FlowKey, now: u32) -> Option<Verdict> {
        let r = self.redirect.as_deref().filter(|r| !r.from_ring)?;
        if !(p.frag.offset == 0 && p.has_ports) {
            let to = r.datagrams.lookup(p.src, p.dst, p.proto, p.ident, now)?;
            self.redirect.as_deref_mut()?.to = usize::from(to);
            return Some(Verdict::Redirect);
        }
        if self.frags.lookup_route(p.src, p.dst, p.proto, p.ident, now).is_some() {
            return None; // a later fragment came first and went somewhere: follow it here
        }
        let to = self.redirect_owner(false, u128::from(key.src), u128::from(key.dst), key.sport, key.dport)?;
        let r = self.redirect.as_deref_mut()?;
        r.datagrams.learn(p.src, p.dst, p.proto, p.ident, to as u16, now);
        Some(Verdict::Redirect)
    }

    /// [`Worker::redirect_fragment4`] for IPv6 fragment `p` (a first fragment's 5-tuple
    /// `key`): its datagram keyed on the Fragment header's Next Header and 32-bit
    /// Identification (RFC 8200 §4.5), as in [`Worker::frags6`].
    #[inline]
    pub(super) fn redirect_fragment6(&mut self, p: &Ipv6Info, key: &FlowKey6, now: u32) -> Option<Verdict> {
        let r = self.redirect.as_deref().filter(|r| !r.from_ring)?;
        if !(p.frag_offset == 0 && p.has_ports) {
            let to = r.datagrams6.lookup(p.src, p.dst, p.frag_next, p.ident, now)?;
            self.redirect.as_deref_mut()?.to = usize::from(to);
            return Some(Verdict::Redirect);
        }
        if self.frags6.lookup_route(p.src, p.dst, p.frag_next, p.ident, now).is_some() {
            return None; // a later fragment came first and went somewhere: follow it here
        }
        let to = self.redirect_owner(true, key.src, key.dst, key.sport, key.dport)?;
        let r = self.redirect.as_deref_mut()?;
        r.datagrams6.learn(p.src, p.dst, p.frag_next, p.ident, to as u16, now);
        Some(Verdict::Redirect)
    }

    /// Carries out [`Verdict::Redirect`]: `b`, received on port `port`, goes on the owner's
    /// ring (counted in `redirected`), or is dropped as `redirect_ring_full` (and offered to
    /// the drop capture at `now`) when that ring is full (or the loop has no rings). Never
    /// waits.
    #[cold]
    #[inline(never)]
    pub(super) fn redirect_out<B: PacketBuf>(&self, rings: Option<&RedirectRings<B>>, b: B, port: usize, now: u32) {
        let to = self.redirect.as_ref().map_or(usize::MAX, |r| r.to);
        let refused = match rings {
            Some(rings) => rings.push(to, Redirected { buf: b, port: port as u16 }).err().map(|r| r.buf),
            None => Some(b),
        };
        let Some(b) = refused else {
            bump(&self.stats.redirected, 1);
            return;
        };
        let r = DropReason::RedirectRingFull;
        bump(&self.stats.drops[r as usize], 1);
        if let Some(t) = self.capture.as_ref().filter(|t| t.on) {
            t.offer(r, b.data(), b.pkt_len(), now);
        }
    }

    /// Decides up to [`REDIRECT_DRAIN_PER_POLL`] packets from this worker's ring as if its
    /// own queue of their port had received them (never redirected again), and sweeps
    /// the redirected-datagram tables (IPv6's once the worker saw IPv6). Returns how many it
    /// took.
    pub(super) fn drain_redirected<P: Port>(&mut self, ports: &mut [P], tx: &mut [Burst<P::Buf>], held: &mut FragHold<P::Buf>, rings: &RedirectRings<P::Buf>, snap: &Snapshot, now: u32) -> usize {
        let ipv6_seen = self.ipv6_seen;
        let Some(r) = self.redirect.as_deref_mut() else { return 0 };
        r.datagrams.sweep(now, DATAGRAM_SWEEP_PER_POLL);
        if ipv6_seen {
            r.datagrams6.sweep(now, DATAGRAM_SWEEP_PER_POLL);
        }
        if rings.is_empty(self.id) {
            return 0;
        }
        r.from_ring = true;
        let (mut n, mut forwarded) = (0usize, 0u64);
        while n < REDIRECT_DRAIN_PER_POLL {
            let Some(Redirected { mut buf, port }) = rings.pop(self.id) else { break };
            n += 1;
            let i = usize::from(port);
            let fwd = self.ports.get(i).map_or(i, |p| p.forward_to).min(ports.len().saturating_sub(1));
            let v = self.process(&mut buf, i, snap, now);
            forwarded += u64::from(self.dispatch(ports, tx, held, None, v, buf, i, fwd, now));
        }
        if let Some(r) = self.redirect.as_deref_mut() {
            r.from_ring = false;
        }
        bump(&self.stats.forwarded, forwarded);
        n
    }
}
