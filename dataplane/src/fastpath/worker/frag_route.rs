//! The backend of a fragment (both families): a first fragment of a tracked flow goes
//! where its flow's packets go, and the later fragments of a datagram follow their first
//! (docs/semantics.md "Fragments"). A child of [`super`].

use super::{class_table, keeps_backend, selection_hash, tracking_key, Family, Worker};
use crate::control::snapshot::{ServiceSnap, Snapshot};
use crate::wire;
use crate::fastpath::stats::bump;
use crate::wire::{tcp_flags, Ipv4Info, Ipv6Info};
use spillway_shared::flow::{FlowKey, FlowKey6, FlowKeyOf};

/// The incarnation of endpoint slot `b` in `snap` (0 for a slot it does not have).
fn incarnation(snap: &Snapshot, b: u16) -> u16 {
    snap.backends.get(usize::from(b)).map_or(0, |s| s.incarnation)
}

/// A fragment, and the backend (slot, incarnation) a fragment of its datagram key already
/// went to ([`crate::fastpath::frag::FragTable::lookup_route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fragment {
    /// The first fragment (offset 0, with the ports), TCP flags `flags` (0 for UDP).
    First { flags: u8, route: Option<(u16, u16)> },
    /// A later fragment.
    Later(Option<(u16, u16)>),
}

impl Worker {
    /// The backend of IPv4 fragment `p` (5-tuple or 3-tuple `key`) of service `svc`
    /// ([`Worker::fragment_backend`]); a first fragment's is recorded for its later ones.
    /// Counted in `fragments`.
    #[inline(never)]
    pub(super) fn fragment_backend4(&mut self, p: &Ipv4Info, key: &FlowKey, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, now: u32) -> Option<u16> {
        bump(&self.stats.fragments, 1);
        let route = self.frags.lookup_route(p.src, p.dst, p.proto, p.ident, now);
        let first = p.frag.offset == 0 && p.has_ports;
        let frag = if first { Fragment::First { flags: p.tcp_flags, route } } else { Fragment::Later(route) };
        let b = self.fragment_backend(key, frag, svc, svc_idx, snap, now)?;
        if !first && route.is_none() {
            // a later fragment before its first (one service): its first must follow it
            self.frags.learn(p.src, p.dst, p.proto, p.ident, svc.port, now);
        }
        let to = (b, incarnation(snap, b));
        if first {
            self.frags.route(p.src, p.dst, p.proto, p.ident, to);
        } else {
            self.frags.route_later(p.src, p.dst, p.proto, p.ident, to);
        }
        Some(b)
    }

    /// [`Worker::fragment_backend4`] for IPv6 fragment `p` (its datagram keyed on the
    /// Fragment header's Next Header and 32-bit identification).
    #[inline(never)]
    pub(super) fn fragment_backend6(&mut self, p: &Ipv6Info, key: &FlowKey6, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, now: u32) -> Option<u16> {
        bump(&self.stats.fragments, 1);
        let route = self.frags6.lookup_route(p.src, p.dst, p.frag_next, p.ident, now);
        let first = p.frag_offset == 0 && p.has_ports;
        let frag = if first { Fragment::First { flags: p.tcp_flags, route } } else { Fragment::Later(route) };
        let b = self.fragment_backend(key, frag, svc, svc_idx, snap, now)?;
        if !first && route.is_none() {
            // a later fragment before its first (one service): its first must follow it
            self.frags6.learn_upper(p.src, p.dst, p.frag_next, p.ident, svc.port, svc.proto, now);
        }
        let to = (b, incarnation(snap, b));
        if first {
            self.frags6.route(p.src, p.dst, p.frag_next, p.ident, to);
        } else {
            self.frags6.route_later(p.src, p.dst, p.frag_next, p.ident, to);
        }
        Some(b)
    }

    /// The backend of a fragment of service `svc` whose 5-tuple (a first fragment) or
    /// 3-tuple (a later one, ports 0) is `key`:
    ///
    /// - a fragment whose datagram key (source, destination, protocol, IP ID) already sent
    ///   a fragment to a backend within the fragment table's lifetime goes there too, while
    ///   that endpoint slot holds the same endpoint of the service (present, same
    ///   incarnation): a later fragment follows its first, and a first fragment follows a
    ///   later one that came before it. So no datagram is split (spec/backend-selection.md:
    ///   "never split a datagram"). A first fragment does not follow an earlier datagram
    ///   that reused the key (its route was dropped when this one was learned,
    ///   [`crate::fastpath::frag::FragTable::learn_upper`]): it follows its own flow;
    /// - else a first fragment whose flow has a connection-table entry it may keep
    ///   (`keeps_backend`, as for any packet) goes to that entry's backend, and refreshes
    ///   the entry as any packet of the flow does; so a TCP connection or UDP flow one of
    ///   whose datagrams is fragmented does not leave its backend;
    /// - anything else by the 3-tuple hash (spec/backend-selection.md: "hash fragments ...
    ///   on the 3-tuple"): a fragment never creates a connection-table entry.
    ///
    /// `None`: no backend to pick.
    fn fragment_backend<A: Family>(&mut self, key: &FlowKeyOf<A>, frag: Fragment, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, now: u32) -> Option<u16> {
        // the same endpoint of this service still in the slot (as `keeps_backend` asks)
        let valid = |route: Option<(u16, u16)>| route.filter(|&(b, inc)| snap.backends.get(usize::from(b)).is_some_and(|s| s.present && s.incarnation == inc && s.service == svc_idx)).map(|(b, _)| b);
        let followed = match frag {
            Fragment::First { flags, route } => valid(route).or_else(|| self.tracked_backend(key, flags, svc, svc_idx, snap, now)),
            Fragment::Later(route) => valid(route),
        };
        followed.or_else(|| class_table(snap, svc, key.src).and_then(|t| t.pick(selection_hash(key, svc.affinity, true))))
    }

    /// The backend of `key`'s live connection-table entry, when the packet may keep it
    /// (the lookup half of `Worker::select`, without a new pick): the entry is refreshed
    /// and its state advanced by `flags`, and a state change is offered to fleet sync.
    fn tracked_backend<A: Family>(&mut self, key: &FlowKeyOf<A>, flags: u8, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, now: u32) -> Option<u16> {
        let (ct_key, session) = tracking_key(svc, key);
        let t = self.timeouts.for_service(svc.proto, svc.idle_timeout_ms);
        // The service's protocol, not the key's (an IPv6 fragment's key names the Fragment
        // header's Next Header, which may be an extension header).
        let tcp = svc.proto == wire::PROTO_TCP;
        let syn = tcp && flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN | tcp_flags::RST) == tcp_flags::SYN;
        if syn && !session {
            // as `select`: under PER_CONNECTION a SYN starts a new connection, found by no lookup
            return None;
        }
        // as `select`: a session entry takes any packet as an ACK; non-TCP passes no flags
        let flags = match (tcp, session) {
            (false, _) => 0,
            (true, true) => tcp_flags::ACK,
            (true, false) => flags,
        };
        let hit = A::ct(self).lookup(&ct_key, flags, now, &t)?;
        if !keeps_backend(snap, svc, svc_idx, hit.backend, hit.incarnation, key.src, now) {
            return None;
        }
        if hit.after != hit.state && self.sync.is_some() {
            self.sync_state_change(snap, &ct_key, &hit, &t, now);
        }
        Some(hit.backend)
    }
}
