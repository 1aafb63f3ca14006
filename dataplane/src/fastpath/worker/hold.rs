//! The poll loop's side of the fragment hold (both families, docs/semantics.md
//! "Fragments"): carrying out a verdict on a buffer (forward, reply,
//! drop, consume, or hold a later IPv4 or IPv6 fragment whose first fragment is missing),
//! releasing held fragments when their first fragment arrives, and the buffers a poll loop
//! keeps across iterations. Same rules as the parent: no locks, allocation, syscalls or
//! panics per packet.

use super::{push_or_flush, RedirectRings, Verdict, Worker};
use crate::control::snapshot::Snapshot;
use crate::fastpath::frag::{DatagramId, FragHold, Held, Release};
use crate::fastpath::port::{Burst, PacketBuf, Port};
use crate::fastpath::segments::sendable;
use crate::fastpath::stats::bump;
use crate::wire::DropReason;

impl Worker {
    /// The ports' ability to send multi-segment packets, by port index
    /// ([`crate::fastpath::port::Port::tx_multi_seg`]; a port not given: yes), for [`Self::unsendable`].
    pub fn with_tx_multi_seg(mut self, ports: Vec<bool>) -> Self {
        self.tx_multi_seg = ports;
        self
    }

    /// Whether `buf`, received on a port that forwards to `pinfo.forward_to`, is a
    /// multi-segment packet that port cannot send: dropped as `multi_segment` before its
    /// flow is tracked or counted for a backend (fresh-user QA: a jumbo frame the forwarding
    /// port then dropped counted as a new connection of the backend picked, which the
    /// capacity stage reads). Asked after the "fragmentation needed" check, whose answer
    /// goes out the receiving port, pulled up into one segment.
    #[inline(always)]
    pub(crate) fn unsendable<B: PacketBuf>(&self, buf: &B, pinfo: super::PortInfo) -> bool {
        buf.segments() > 1 && !self.tx_multi_seg.get(pinfo.forward_to).copied().unwrap_or(true)
    }
}

impl Worker {
    /// Carries out verdict `v` on buffer `b` received on port `i` (forwarding port `fwd`);
    /// returns whether it was forwarded.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn dispatch<P: Port>(&self, ports: &mut [P], tx: &mut [Burst<P::Buf>], held: &mut FragHold<P::Buf>, rings: Option<&RedirectRings<P::Buf>>, v: Verdict, b: P::Buf, i: usize, fwd: usize, now: u32) -> bool {
        match v {
            Verdict::Forward if sendable(ports, fwd, &b) => {
                push_or_flush(ports, tx, fwd, b, &self.stats);
                return true;
            }
            Verdict::Reply if sendable(ports, i, &b) => push_or_flush(ports, tx, i, b, &self.stats),
            Verdict::Forward | Verdict::Reply => {
                // a chained jumbo frame for a port that cannot send one
                bump(&self.stats.drops[DropReason::MultiSegment as usize], 1);
                drop(b);
            }
            Verdict::Consumed => drop(b),
            Verdict::Drop(r) => {
                bump(&self.stats.drops[r as usize], 1);
                if let Some(t) = self.capture.as_ref().filter(|t| t.on) {
                    t.offer(r, b.data(), b.pkt_len(), now);
                }
                drop(b);
            }
            Verdict::Hold => self.hold(held, b, i, now),
            Verdict::Redirect => self.redirect_out(rings, b, i, now),
        }
        false
    }

    /// [`Verdict::Hold`] for datagram `id`, IPv4 or IPv6 (kept on the worker so the verdict
    /// stays two bytes). Out of the hot path.
    #[cold]
    #[inline(never)]
    pub(super) fn hold_datagram(&mut self, id: DatagramId) -> Verdict {
        self.held_id = id;
        Verdict::Hold
    }

    /// Holds a later fragment ([`Verdict::Hold`], datagram in [`Worker::held_id`]), or drops
    /// it as `fragment_hold_full`. Out of the hot path.
    #[cold]
    #[inline(never)]
    fn hold<B>(&self, held: &mut FragHold<B>, b: B, i: usize, now: u32) {
        match held.hold(Held { id: self.held_id, port: i, since: now, buf: b }) {
            Ok(()) => bump(&self.stats.fragments_held, 1),
            Err(h) => {
                bump(&self.stats.drops[DropReason::FragmentHoldFull as usize], 1);
                drop(h);
            }
        }
    }

    /// Whether the fragment table of `d`'s family (`frags` for IPv4, `frags6` for IPv6)
    /// knows the datagram's first fragment at `now`.
    fn knows_first(&self, d: &DatagramId, now: u32) -> bool {
        match *d {
            DatagramId::V4 { src, dst, proto, ident } => self.frags.lookup(src, dst, proto, ident, now).is_some(),
            DatagramId::V6 { src, dst, next, ident } => self.frags6.lookup(u128::from_be_bytes(src), u128::from_be_bytes(dst), next, ident, now).is_some(),
        }
    }

    /// Processes again, in arrival order, every held fragment (either family) whose first
    /// fragment is now in its family's fragment table; drops those held longer than
    /// [`crate::fastpath::frag::HOLD_LIFETIME_MS`] as `fragment_unknown`. Runs only while
    /// something is held.
    #[cold]
    pub(super) fn release_held<P: Port>(&mut self, ports: &mut [P], tx: &mut [Burst<P::Buf>], held: &mut FragHold<P::Buf>, rings: Option<&RedirectRings<P::Buf>>, snap: &Snapshot, now: u32) {
        self.learned_first = false;
        let mut forwarded = 0u64;
        while let Some(r) = held.take_ready(now, |d| self.knows_first(d, now)) {
            match r {
                Release::Ready(mut h) => {
                    let fwd = self.ports.get(h.port).map_or(h.port, |p| p.forward_to).min(ports.len().saturating_sub(1));
                    let v = match self.process(&mut h.buf, h.port, snap, now) {
                        // cannot happen (the table knows the datagram); never hold twice
                        Verdict::Hold => Verdict::Drop(DropReason::FragmentUnknown),
                        v => v,
                    };
                    forwarded += u64::from(self.dispatch(ports, tx, held, rings, v, h.buf, h.port, fwd, now));
                }
                Release::Expired(h) => {
                    bump(&self.stats.drops[DropReason::FragmentUnknown as usize], 1);
                    drop(h);
                }
            }
        }
        bump(&self.stats.forwarded, forwarded);
    }
}

/// The buffers a poll loop keeps across iterations: one TX burst per port, the later
/// fragments held until their first fragment arrives, and the workers' redirect rings.
/// Allocated once, before the loop.
pub struct PollBuffers<B> {
    /// TX bursts, one per port (index = port).
    pub tx: Vec<Burst<B>>,
    /// Held fragments.
    pub held: FragHold<B>,
    /// Every worker's redirect ring (worker/redirect.rs): this worker pushes packets of
    /// other workers' flows to theirs and drains its own; `None`: no redirection.
    pub redirect: Option<std::sync::Arc<RedirectRings<B>>>,
}

impl<B> PollBuffers<B> {
    /// Empty buffers for `ports` ports, without redirect rings.
    pub fn new(ports: usize) -> Self {
        PollBuffers { tx: (0..ports).map(|_| Burst::new()).collect(), held: FragHold::default(), redirect: None }
    }

    /// The same, with the workers' redirect rings.
    pub fn with_redirect(mut self, rings: Option<std::sync::Arc<RedirectRings<B>>>) -> Self {
        self.redirect = rings;
        self
    }
}
