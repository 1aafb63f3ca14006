//! Per-worker table of IPv4 (and, as `FragTable<u128, u32>`, IPv6) datagrams seen
//! fragmented: which service their first fragment named, so that every later fragment
//! (which carries no ports) reaches a backend of that service, not merely of some service
//! on the same VIP (IPv6: public case
//! `cases/packets/udp-fragments-two-services.pcap`).
//!
//! Key: (source, destination, protocol, IP identification), the datagram identity of
//! RFC 791 §3.2 (for IPv6: source, destination, the Fragment header's Next Header and its
//! 32-bit Identification, RFC 8200 §4.5). Value: the destination port the first fragment
//! carried, from which the worker finds the service in the current snapshot (so a new
//! snapshot needs no flush).
//!
//! Direct-mapped, [`FRAG_SLOTS`] entries of 24 bytes (IPv4; 64 for IPv6), allocated once;
//! an entry lives [`FRAG_LIFETIME_MS`] after the first fragment. A newer datagram that maps
//! to an occupied slot replaces it. NICs hash fragments on the 2-tuple, so all fragments of
//! a datagram reach the same worker; the table needs no sharing.
//!
//! An entry also keeps the backend its datagram's fragments went to ([`FragTable::route`]),
//! which every later fragment of the key follows (`worker/frag_route.rs`). A first fragment
//! follows it only when a later fragment that came first set it ([`Routed::ByLater`]);
//! a first fragment that reuses a live key of a routed datagram (an IP ID reused within
//! [`FRAG_LIFETIME_MS`], another flow from the same source) starts unrouted and goes where
//! its own flow goes (docs/semantics.md "Fragments").
//!
//! Later fragments that arrive before their first fragment (reordering), or after their
//! entry was replaced or expired: when their (VIP, protocol) has exactly one service they go
//! to it (nothing to choose), and learn the key with their backend for the first fragment
//! to follow. Otherwise a guess could split the datagram across services,
//! so the worker *holds* them in its [`FragHold`] (at most [`HOLD_SLOTS`] fragments of
//! either family together, each at most [`HOLD_LIFETIME_MS`]; a held fragment is known by
//! its [`DatagramId`], IPv4 or IPv6): when the first fragment arrives, the held ones follow
//! it to the same backend; when it does not arrive in time they are dropped as
//! `fragment_unknown`, and when the hold is full a new one is dropped as
//! `fragment_hold_full` (docs/semantics.md, "Fragments"; both families).

use arrayvec::ArrayVec;
use spillway_shared::flow::{fmix64, FlowAddr};

/// Entries per worker (power of two).
pub const FRAG_SLOTS: usize = 1024;
/// How long a first fragment's entry serves its later fragments, ms. Fragments of one
/// datagram normally arrive within microseconds; RFC 791 suggests 15 s as the upper bound of
/// reassembly, but a long lifetime only helps an IP ID that wrapped (65,536 datagrams per
/// source/destination/protocol) to find a stale entry.
pub const FRAG_LIFETIME_MS: u32 = 2_000;

/// Who set an entry's route ([`FragTable::route`]): one byte, so the entry keeps its size.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Routed {
    /// No route yet.
    #[default]
    No,
    /// Set by the datagram's first fragment: later fragments follow it, a new first
    /// fragment of the key does not.
    ByFirst,
    /// Set by a later fragment that came before its first: the first fragment follows it,
    /// so the datagram is not split.
    ByLater,
}

#[derive(Clone, Copy, Default)]
#[repr(C)]
struct FragEntry<A, I> {
    src: A,
    dst: A,
    id: I,
    dport: u16,
    proto: u8,
    /// The first fragment's upper-layer protocol (IPv6: may differ from the key's `proto`,
    /// the Fragment header's Next Header, when extension headers follow it).
    upper: u8,
    used: bool,
    /// Whether, and by which fragment, `route` was set ([`FragTable::route`]).
    routed: Routed,
    /// When the first fragment was seen (worker clock, ms).
    learned: u32,
    /// The backend (endpoint slot, incarnation) the first fragment went to, when
    /// `routed`; later fragments follow it.
    route: (u16, u16),
}

/// The table (one per worker and family): `FragTable` for IPv4 (16-bit IDs),
/// `FragTable<u128, u32>` for IPv6 (32-bit IDs).
pub struct FragTable<A = u32, I = u16> {
    slots: Box<[FragEntry<A, I>]>,
    cursor: usize,
}

impl<A: FlowAddr, I: Copy + Default + Eq + Into<u64>> Default for FragTable<A, I> {
    fn default() -> Self {
        FragTable { slots: vec![FragEntry::default(); FRAG_SLOTS].into_boxed_slice(), cursor: 0 }
    }
}

#[inline]
fn slot_of<A: FlowAddr, I: Into<u64>>(src: A, dst: A, id: I, proto: u8) -> usize {
    let x = A::pair_word(src, dst, 0) ^ (id.into() << 8 | u64::from(proto)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (fmix64(x) as usize) & (FRAG_SLOTS - 1)
}

impl<A: FlowAddr, I: Copy + Default + Eq + Into<u64>> FragTable<A, I> {
    /// Records the first fragment (offset 0) of datagram (src, dst, proto, id), which named
    /// destination port `dport`, at time `now` (ms).
    #[inline]
    pub fn learn(&mut self, src: A, dst: A, proto: u8, id: I, dport: u16, now: u32) {
        self.learn_upper(src, dst, proto, id, dport, proto, now);
    }

    /// [`FragTable::learn`] when the upper-layer protocol `upper` differs from the key's
    /// `proto` (IPv6: the Fragment header's Next Header, [`crate::wire::ipv6::Frag6::next`]).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    ///
    /// A live entry of the same datagram key keeps its backend ([`FragTable::route`]) only
    /// when a later fragment that came before its first set it ([`Routed::ByLater`]), so
    /// that datagram is not split. A route its first fragment set is dropped: a datagram
    /// that reuses the key within [`FRAG_LIFETIME_MS`] (an IP ID reused by another flow of
    /// the same source, clients behind one NAT address) goes where its own flow goes
    /// (docs/semantics.md "Fragments").
    pub fn learn_upper(&mut self, src: A, dst: A, proto: u8, id: I, dport: u16, upper: u8, now: u32) {
        if let Some(e) = self.slots.get_mut(slot_of(src, dst, id, proto)) {
            let same = e.live(now) && e.src == src && e.dst == dst && e.id == id && e.proto == proto;
            let (routed, route) = if same && e.routed == Routed::ByLater { (e.routed, e.route) } else { (Routed::No, (0, 0)) };
            *e = FragEntry { src, dst, id, dport, proto, upper, used: true, routed, learned: now, route };
        }
    }

    /// Records the backend (endpoint slot, incarnation) that the first fragment of datagram
    /// (src, dst, proto, id), learned just before ([`FragTable::learn`]), was sent to
    /// ([`Routed::ByFirst`]: its later fragments follow it, a new first fragment does not).
    #[inline]
    pub fn route(&mut self, src: A, dst: A, proto: u8, id: I, route: (u16, u16)) {
        self.set_route(src, dst, proto, id, route, |_| Routed::ByFirst);
    }

    /// [`FragTable::route`] for a later fragment: an unrouted entry becomes
    /// [`Routed::ByLater`] (its first fragment, still to come, follows it); a routed one
    /// keeps who set it.
    #[inline]
    pub fn route_later(&mut self, src: A, dst: A, proto: u8, id: I, route: (u16, u16)) {
        self.set_route(src, dst, proto, id, route, |r| if r == Routed::No { Routed::ByLater } else { r });
    }

    #[inline]
    fn set_route(&mut self, src: A, dst: A, proto: u8, id: I, route: (u16, u16), by: impl Fn(Routed) -> Routed) {
        if let Some(e) = self.slots.get_mut(slot_of(src, dst, id, proto)) {
            if e.used && e.src == src && e.dst == dst && e.id == id && e.proto == proto {
                (e.routed, e.route) = (by(e.routed), route);
            }
        }
    }

    /// The backend (endpoint slot, incarnation) the datagram's first fragment went to, if
    /// it was seen less than [`FRAG_LIFETIME_MS`] ago and routed.
    #[inline]
    pub fn lookup_route(&self, src: A, dst: A, proto: u8, id: I, now: u32) -> Option<(u16, u16)> {
        let e = self.slots.get(slot_of(src, dst, id, proto))?;
        (e.routed != Routed::No && e.live(now) && e.src == src && e.dst == dst && e.id == id && e.proto == proto).then_some(e.route)
    }

    /// The destination port and upper-layer protocol of the datagram's first fragment, if
    /// it was seen less than [`FRAG_LIFETIME_MS`] ago.
    #[inline]
    pub fn lookup_upper(&self, src: A, dst: A, proto: u8, id: I, now: u32) -> Option<(u16, u8)> {
        let e = self.slots.get(slot_of(src, dst, id, proto))?;
        (e.live(now) && e.src == src && e.dst == dst && e.id == id && e.proto == proto).then_some((e.dport, e.upper))
    }

    /// The destination port of the datagram's first fragment, if it was seen less than
    /// [`FRAG_LIFETIME_MS`] ago.
    #[inline]
    pub fn lookup(&self, src: A, dst: A, proto: u8, id: I, now: u32) -> Option<u16> {
        self.lookup_upper(src, dst, proto, id, now).map(|(dport, _)| dport)
    }

    /// Clears expired entries in the next `n` slots (a cursor walks the table), so that no
    /// entry lives long enough for its `u32` age to wrap and look fresh again (as
    /// [`crate::fastpath::conntrack::ConnTable::sweep`]). Called every poll iteration.
    #[inline]
    pub fn sweep(&mut self, now: u32, n: usize) {
        for _ in 0..n.min(FRAG_SLOTS) {
            self.cursor = (self.cursor + 1) & (FRAG_SLOTS - 1);
            if let Some(e) = self.slots.get_mut(self.cursor) {
                if e.used && !e.live(now) {
                    e.used = false;
                }
            }
        }
    }
}

impl<A, I> FragEntry<A, I> {
    /// Seen at most [`FRAG_LIFETIME_MS`] ago: the age (mod 2^32) is exact while the sweep
    /// clears entries long before 2^32 ms.
    #[inline]
    fn live(&self, now: u32) -> bool {
        self.used && now.wrapping_sub(self.learned) <= FRAG_LIFETIME_MS
    }
}

/// Fragments one worker holds at most while their first fragment is missing. A held
/// fragment keeps its mbuf out of the pool, so the bound is small next to any pool.
pub const HOLD_SLOTS: usize = 64;

/// How long a fragment is held waiting for its first fragment, ms. Reordering in a network
/// path is a matter of microseconds to a few milliseconds; a fragment still waiting after
/// this will most likely never see its first fragment (lost, or sent to another host). The
/// margin covers a worker that was not scheduled for a while (shared cores); the cost of
/// a long lifetime is at most [`HOLD_SLOTS`] mbufs out of the pool.
pub const HOLD_LIFETIME_MS: u32 = 500;

/// The identity of a fragmented datagram, which a held fragment waits for: the key of
/// its family's [`FragTable`]. IPv4 addresses in host order, IPv6 addresses as their 16
/// bytes in network order: 40 bytes aligned to 4, so that it does not move the hot fields
/// of [`crate::fastpath::worker::Worker`], which keeps the datagram of the last
/// [`Verdict::Hold`] (never the verdict itself: it stays two bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatagramId {
    /// IPv4 (RFC 791 §3.2): source, destination, protocol and 16-bit identification.
    V4 {
        /// Source address.
        src: u32,
        /// Destination address (the VIP).
        dst: u32,
        /// IP protocol number.
        proto: u8,
        /// IP identification.
        ident: u16,
    },
    /// IPv6 (RFC 8200 §4.5): source, destination, the Fragment header's Next Header (the
    /// same in every fragment, [`crate::wire::Ipv6Info::frag_next`]) and the 32-bit
    /// Identification.
    V6 {
        /// Source address (network order: `u128::from_be_bytes` gives the table's key).
        src: [u8; 16],
        /// Destination address (the VIP), network order.
        dst: [u8; 16],
        /// The Fragment header's Next Header.
        next: u8,
        /// Fragment header Identification.
        ident: u32,
    },
}

impl Default for DatagramId {
    /// An all-zero IPv4 datagram (no fragment is held under it before a [`Verdict::Hold`]
    /// sets it).
    ///
    /// [`Verdict::Hold`]: crate::fastpath::worker::Verdict::Hold
    fn default() -> Self {
        DatagramId::V4 { src: 0, dst: 0, proto: 0, ident: 0 }
    }
}

/// One held fragment: the buffer, the port it was received on, and when (worker clock, ms).
pub struct Held<B> {
    /// Its datagram.
    pub id: DatagramId,
    /// Index of the receiving port.
    pub port: usize,
    /// Arrival time, ms.
    pub since: u32,
    /// The frame, untouched.
    pub buf: B,
}

/// Later fragments held until their first fragment names the service (module docs).
/// Fixed capacity, allocated inline; kept by the poll loop beside its TX bursts because it
/// owns packet buffers of the port's type.
pub struct FragHold<B> {
    held: ArrayVec<Held<B>, HOLD_SLOTS>,
}

impl<B> Default for FragHold<B> {
    fn default() -> Self {
        FragHold { held: ArrayVec::new() }
    }
}

/// What [`FragHold::take_ready`] hands back.
pub enum Release<B> {
    /// The first fragment was seen: process this one again.
    Ready(Held<B>),
    /// Held longer than [`HOLD_LIFETIME_MS`]: drop it as `fragment_unknown`.
    Expired(Held<B>),
}

impl<B> FragHold<B> {
    /// Nothing held (the poll loop skips the release pass).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Fragments held now.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Holds `h`; gives it back when [`HOLD_SLOTS`] fragments are already held.
    #[inline]
    pub fn hold(&mut self, h: Held<B>) -> Result<(), Held<B>> {
        self.held.try_push(h).map_err(|e| e.element())
    }

    /// Removes and returns the oldest held fragment that is ready (`known(id)`: the table
    /// knows its first fragment) or expired at `now`, keeping the others in arrival order.
    pub fn take_ready(&mut self, now: u32, known: impl Fn(&DatagramId) -> bool) -> Option<Release<B>> {
        let i = self.held.iter().position(|h| known(&h.id) || now.wrapping_sub(h.since) > HOLD_LIFETIME_MS)?;
        let h = self.held.remove(i);
        Some(if known(&h.id) { Release::Ready(h) } else { Release::Expired(h) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ident: u16, since: u32) -> Held<u32> {
        Held { id: DatagramId::V4 { src: 1, dst: 2, proto: 17, ident }, port: 0, since, buf: u32::from(ident) }
    }

    fn held6(ident: u32, since: u32) -> Held<u32> {
        Held { id: DatagramId::V6 { src: [1; 16], dst: [2; 16], next: 17, ident }, port: 0, since, buf: ident }
    }

    fn ident(d: &DatagramId) -> u32 {
        match *d {
            DatagramId::V4 { ident, .. } => u32::from(ident),
            DatagramId::V6 { ident, .. } => ident,
        }
    }

    #[test]
    fn hold_releases_known_in_order_expires_late_and_is_bounded() {
        let mut h = FragHold::default();
        for i in 0..HOLD_SLOTS as u16 {
            assert!(h.hold(held(i, 10)).is_ok());
        }
        assert_eq!(h.hold(held(999, 10)).map_err(|e| e.buf), Err(999), "full hold takes more");
        // datagram 5 and 7 become known: released oldest first, the others stay
        let known = |d: &DatagramId| ident(d) == 7 || ident(d) == 5;
        let got: Vec<u32> = std::iter::from_fn(|| h.take_ready(20, known)).map(|r| match r {
            Release::Ready(x) => ident(&x.id),
            Release::Expired(x) => panic!("expired {}", ident(&x.id)),
        }).collect();
        assert_eq!(got, vec![5, 7]);
        assert_eq!(h.len(), HOLD_SLOTS - 2);
        assert!(h.take_ready(10 + HOLD_LIFETIME_MS, |_| false).is_none(), "expired at exactly the lifetime");
        match h.take_ready(11 + HOLD_LIFETIME_MS, |_| false) {
            Some(Release::Expired(x)) => assert_eq!(ident(&x.id), 0),
            _ => panic!("nothing expired"),
        }
        assert_eq!(h.len(), HOLD_SLOTS - 3);
    }

    /// IPv4 and IPv6 datagrams share the hold (one bound) and are told apart by family:
    /// an IPv6 datagram is never released by an IPv4 first fragment with the same numbers,
    /// and the 32-bit identification counts in full.
    #[test]
    fn hold_tells_the_families_apart() {
        let mut h = FragHold::default();
        assert!(h.hold(held(7, 0)).is_ok());
        assert!(h.hold(held6(7, 1)).is_ok());
        assert!(h.hold(held6(0x8000_0007, 2)).is_ok());
        for i in 3..HOLD_SLOTS as u32 {
            assert!(h.hold(held6(1000 + i, 3)).is_ok());
        }
        assert_eq!(h.hold(held6(1, 9)).map_err(|e| e.buf), Err(1), "one bound for both families");
        assert_eq!(h.hold(held(1, 9)).map_err(|e| e.buf), Err(1));
        let v6_known = |d: &DatagramId| *d == DatagramId::V6 { src: [1; 16], dst: [2; 16], next: 17, ident: 0x8000_0007 };
        match h.take_ready(100, v6_known) {
            Some(Release::Ready(x)) => assert_eq!(x.id, DatagramId::V6 { src: [1; 16], dst: [2; 16], next: 17, ident: 0x8000_0007 }),
            _ => panic!("the known IPv6 datagram was not released"),
        }
        assert!(h.take_ready(100, v6_known).is_none(), "IPv6 ident 7 and IPv4 ident 7 stay held");
        let v4_known = |d: &DatagramId| matches!(*d, DatagramId::V4 { ident: 7, .. });
        assert!(matches!(h.take_ready(100, v4_known), Some(Release::Ready(Held { id: DatagramId::V4 { ident: 7, .. }, .. }))));
        assert!(h.take_ready(100, v4_known).is_none());
        assert_eq!(h.len(), HOLD_SLOTS - 2);
        // expiry is the same for IPv6: the one held at 1 goes first, at 1 + lifetime + 1
        assert!(h.take_ready(1 + HOLD_LIFETIME_MS, |_| false).is_none());
        assert!(matches!(h.take_ready(2 + HOLD_LIFETIME_MS, |_| false), Some(Release::Expired(Held { id: DatagramId::V6 { ident: 7, .. }, .. }))));
    }

    #[test]
    fn learns_and_expires() {
        let mut t = FragTable::<u32, u16>::default();
        assert_eq!(t.lookup(1, 2, 17, 7, 0), None);
        t.learn(1, 2, 17, 7, 5353, 100);
        assert_eq!(t.lookup(1, 2, 17, 7, 100 + FRAG_LIFETIME_MS), Some(5353));
        assert_eq!(t.lookup(1, 2, 17, 8, 101), None);
        assert_eq!(t.lookup(1, 2, 6, 7, 101), None);
        assert_eq!(t.lookup(1, 2, 17, 7, 101 + FRAG_LIFETIME_MS), None);
    }

    /// A first fragment's backend is kept for its datagram only, and only once routed; a
    /// new first fragment in the slot starts unrouted.
    #[test]
    fn routes_follow_their_datagram() {
        let mut t = FragTable::<u32, u16>::default();
        t.route(1, 2, 17, 7, (3, 1)); // not learned: nothing to route
        t.learn(1, 2, 17, 7, 53, 100);
        assert_eq!(t.lookup_route(1, 2, 17, 7, 100), None, "learned, not routed yet");
        t.route(1, 2, 17, 7, (3, 1));
        assert_eq!(t.lookup_route(1, 2, 17, 7, 100 + FRAG_LIFETIME_MS), Some((3, 1)));
        assert_eq!(t.lookup_route(1, 2, 17, 8, 101), None);
        assert_eq!(t.lookup_route(1, 2, 17, 7, 101 + FRAG_LIFETIME_MS), None, "expired");
        let later = 101 + FRAG_LIFETIME_MS;
        t.learn(1, 2, 17, 7, 53, later);
        assert_eq!(t.lookup_route(1, 2, 17, 7, later), None, "a first fragment after the entry expired starts unrouted");
        t.route(1, 2, 17, 7, (4, 2));
        assert_eq!(t.lookup_route(1, 2, 17, 7, later + 500), Some((4, 2)));
        t.learn(1, 2, 17, 9, 53, later + 600);
        assert_eq!(t.lookup_route(1, 2, 17, 9, later + 600), None, "another datagram starts unrouted");
    }

    /// Review: two tracked flows from one source reuse an IP ID within the
    /// lifetime. The second datagram's first fragment must not inherit the first
    /// datagram's backend: its entry starts unrouted, so it goes where its own flow goes.
    #[test]
    fn a_first_fragment_does_not_follow_a_reused_keys_first_fragment() {
        let mut t = FragTable::<u32, u16>::default();
        t.learn(1, 2, 6, 7, 80, 100);
        t.route(1, 2, 6, 7, (3, 1)); // flow A's first fragment went to slot 3
        t.learn(1, 2, 6, 7, 80, 600); // flow B's first fragment, same key, 0.5 s later
        assert_eq!(t.lookup_route(1, 2, 6, 7, 600), None, "flow B's first fragment follows its own flow, not A's backend");
        t.route(1, 2, 6, 7, (5, 1));
        assert_eq!(t.lookup_route(1, 2, 6, 7, 601), Some((5, 1)), "B's later fragments follow B's first");
    }

    /// A route a later fragment set before its first arrived (reordering) is the one a
    /// first fragment follows; once the first routed it, a reuse of the key does not.
    #[test]
    fn a_first_fragment_follows_a_route_its_later_fragment_set() {
        let mut t = FragTable::<u32, u16>::default();
        t.learn(1, 2, 17, 7, 53, 100); // the later fragment learns the key
        t.route_later(1, 2, 17, 7, (3, 1));
        t.learn(1, 2, 17, 7, 53, 101); // its first fragment
        assert_eq!(t.lookup_route(1, 2, 17, 7, 101), Some((3, 1)), "the first follows its later fragment");
        t.route(1, 2, 17, 7, (3, 1));
        t.route_later(1, 2, 17, 7, (3, 1)); // another later fragment keeps ByFirst
        t.learn(1, 2, 17, 7, 53, 200); // a new datagram reusing the key
        assert_eq!(t.lookup_route(1, 2, 17, 7, 200), None);
    }

    /// The entry sizes the module docs state, and the datagram identity's (see [`DatagramId`]).
    #[test]
    fn entry_and_datagram_sizes() {
        assert_eq!((std::mem::size_of::<FragEntry<u32, u16>>(), std::mem::size_of::<FragEntry<u128, u32>>()), (24, 64));
        // 16-byte alignment (u128 fields) would move the worker's connection table off
        // offset 0 and cost the established IPv4 path an instruction per packet
        assert_eq!((std::mem::size_of::<DatagramId>(), std::mem::align_of::<DatagramId>()), (40, 4));
    }

    /// IPv6: 128-bit addresses and 32-bit identifications, every bit of both counts.
    #[test]
    fn ipv6_datagrams_are_told_apart_by_every_id_bit() {
        let mut t = FragTable::<u128, u32>::default();
        let (src, dst) = (0xfd01u128 << 112 | 5, 0xfd00u128 << 112 | 0x100);
        t.learn(src, dst, 17, 0x8000_0001, 53, 10);
        assert_eq!(t.lookup(src, dst, 17, 0x8000_0001, 11), Some(53));
        assert_eq!(t.lookup(src, dst, 17, 0x0000_0001, 11), None, "high ID bits matter");
        assert_eq!(t.lookup(src ^ 1 << 100, dst, 17, 0x8000_0001, 11), None, "high address bits matter");
    }

    /// An entry never comes back when the clock wraps (review finding C3): expired at
    /// 24.8 days, and cleared by the sweep long before 49.7 days.
    #[test]
    fn entries_never_come_back_when_the_clock_wraps() {
        let mut t = FragTable::<u32, u16>::default();
        t.learn(1, 2, 17, 7, 5353, 0);
        assert_eq!(t.lookup(1, 2, 17, 7, FRAG_LIFETIME_MS + 1), None);
        assert_eq!(t.lookup(1, 2, 17, 7, (1u32 << 31) + FRAG_LIFETIME_MS + 10), None);
        t.sweep(FRAG_LIFETIME_MS + 1, FRAG_SLOTS);
        assert_eq!(t.lookup(1, 2, 17, 7, 0u32.wrapping_sub(1).wrapping_add(5)), None, "swept entry live after the wrap");
    }
}
