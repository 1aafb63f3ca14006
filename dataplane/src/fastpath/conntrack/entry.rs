//! The connection table's entry: its layout (16 bytes for IPv4, 32 for IPv6), its key and
//! its clock (a 24-bit deadline in 8 ms ticks: module docs of [`super`], "Clock"). A child
//! of [`super`].

use super::{sync, FlowAddr, FlowKeyOf, State, Timeouts, RELAYED, REMOTE};

/// Unit of an entry's deadline, ms (module docs, "Clock").
pub const TICK_MS: u32 = 8;

/// Bits of an entry's deadline (in [`TICK_MS`] units, wrapping).
const DEADLINE_BITS: u32 = 24;

/// Mask of a deadline in ticks.
const TICK_MASK: u32 = (1 << DEADLINE_BITS) - 1;

/// How far (ticks of [`TICK_MS`]) a live entry's deadline may be ahead of the current
/// tick: the longest idle timeout (57,600 s, the longest a peer's entry is installed for)
/// plus 2^17 ticks (about 17 minutes) for a caller whose clock steps back a little (the
/// worker's never does). A deadline further ahead (mod 2^24) is one that `now` passed long
/// ago: expired (module docs, "Clock").
pub const LIVE_AHEAD: u32 = sync::MAX_SYNCED_LIFETIME_MS / TICK_MS + (1 << 17);

const _: () = assert!(LIVE_AHEAD < TICK_MASK / 2 && sync::MAX_SYNCED_LIFETIME_MS % TICK_MS == 0);

/// The tick (mod 2^24) of time `now`, ms.
#[inline(always)]
pub(super) fn tick(now: u32) -> u32 {
    (now >> 3) & TICK_MASK
}

/// The deadline (ticks mod 2^24) `timeout` ms after `now`, rounded up to a tick so an
/// entry never expires early. `now + timeout` may wrap the `u32` clock: the tick is still
/// right mod 2^24 (2^29 ticks are a multiple of 2^24).
#[inline(always)]
pub(super) fn deadline(now: u32, timeout: u32) -> u32 {
    ((u64::from(now) + u64::from(timeout) + u64::from(TICK_MS - 1)) >> 3) as u32 & TICK_MASK
}

/// The key of an entry: (client address, client port, service number). The VIP, VIP port
/// and protocol are the service's (module docs, "Key"). Session-affinity entries use the
/// reduced client address and port 0 (`worker::tracking_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct CtKey<A = u32> {
    /// Client address (host order).
    pub src: A,
    /// Client port (0 for a session entry).
    pub sport: u16,
    /// The service's number (`ServiceSnap::id`).
    pub service: u16,
}

impl<A: FlowAddr> CtKey<A> {
    /// An IPv4 key as one word: the address at bits 0..32, the port at 32..48, the service
    /// at 48..64; one to one, and equal to [`Entry::key_word`] of an entry with this key.
    /// IPv4 only: an IPv6 address's low half would overlap the port and service, so two
    /// IPv6 keys could share a word (`Bucket::way_of` calls it for `u32` tables alone).
    #[inline(always)]
    pub(super) fn word(&self) -> u64 {
        debug_assert!(A::BITS == 32, "CtKey::word is for IPv4 keys");
        self.src.halves().1 | u64::from(self.sport) << 32 | u64::from(self.service) << 48
    }

    /// The key of a packet's 5-tuple `k` for the service numbered `service`.
    #[inline(always)]
    pub fn of(k: &FlowKeyOf<A>, service: u16) -> CtKey<A> {
        CtKey { src: k.src, sport: k.sport, service }
    }
}

/// One tracked connection: 16 bytes with IPv4 addresses (`Entry<u32>`), 32 bytes with
/// IPv6 addresses (`Entry<u128>`); a bucket of [`super::WAYS`] is 64 bytes (one cache line) or 128
/// (two). Generic over the address type so IPv6 gets a table of its own.
///
/// Keyed by [`CtKey`]. Time is one deadline (24 bits of [`TICK_MS`] units) beside the
/// state byte; the timeout of a state is the service's (`Timeouts`, given to every lookup),
/// so it is not stored, and the last-packet time is derived from it ([`Entry::idle_ms`]).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Entry<A = u32> {
    /// Client address.
    pub src: A,
    /// Client port.
    pub sport: u16,
    /// The service's number ([`CtKey::service`]).
    pub service: u16,
    /// Endpoint slot in the snapshot.
    pub backend: u16,
    /// Incarnation of that slot (a removed-and-reused slot does not match).
    pub incarnation: u16,
    /// Deadline in ticks mod 2^24 (bits 8..32; module docs "Clock"), set on every packet
    /// to `now` + the idle timeout of the entry's state (a peer's entry: its remaining
    /// lifetime), and the state byte (bits 0..8: [`State`] with the [`REMOTE`] and
    /// [`RELAYED`] flags; 0 = empty slot).
    pub life: u32,
}

const _: () = assert!(std::mem::size_of::<Entry<u32>>() == 16 && std::mem::size_of::<Entry<u128>>() == 32);

impl<A: FlowAddr> Entry<A> {
    /// The entry's key as [`CtKey::word`]: its first 8 bytes, so one load. IPv4 only, as
    /// [`CtKey::word`].
    #[inline(always)]
    pub(super) fn key_word(&self) -> u64 {
        debug_assert!(A::BITS == 32, "Entry::key_word is for IPv4 entries");
        self.src.halves().1 | u64::from(self.sport) << 32 | u64::from(self.service) << 48
    }
    #[inline(always)]
    pub(super) fn matches(&self, k: &CtKey<A>) -> bool {
        self.raw_state() != State::Empty as u8 && self.src == k.src && self.sport == k.sport && self.service == k.service
    }
    /// The state byte: [`State`] with the [`REMOTE`] and [`RELAYED`] flags.
    #[inline(always)]
    pub fn raw_state(&self) -> u8 {
        self.life as u8
    }
    #[inline(always)]
    pub(super) fn set_raw_state(&mut self, s: u8) {
        self.life = (self.life & !0xFF) | u32::from(s);
    }
    /// The deadline, ticks mod 2^24.
    #[inline(always)]
    fn deadline(&self) -> u32 {
        self.life >> 8
    }
    /// Empty, or `now` is past its deadline: the deadline is not 1 to [`LIVE_AHEAD`]
    /// ticks ahead of `now`'s (mod 2^24). Exact while no entry stays 2^24 − [`LIVE_AHEAD`]
    /// ticks (about 21 h) past its deadline without being looked at, which
    /// [`super::ConnTable::sweep`] guarantees (module docs, "Clock").
    #[inline(always)]
    pub(super) fn expired(&self, now: u32) -> bool {
        self.raw_state() == State::Empty as u8 || self.past_deadline(now)
    }
    /// `now` is past the deadline (the state not looked at): [`Entry::expired`] for an
    /// entry known not to be empty.
    #[inline(always)]
    pub(super) fn past_deadline(&self, now: u32) -> bool {
        self.deadline().wrapping_sub(tick(now)).wrapping_sub(1) & TICK_MASK >= LIVE_AHEAD
    }
    /// The entry's state ([`REMOTE`] and [`RELAYED`] masked off).
    pub fn state(&self) -> State {
        match self.raw_state() & !(REMOTE | RELAYED) {
            1 => State::SynOnly,
            2 => State::Established,
            3 => State::Closing,
            _ => State::Empty,
        }
    }
    /// Whether the entry came from a peer and has seen no packet here ([`REMOTE`]).
    pub fn is_remote(&self) -> bool {
        self.raw_state() & REMOTE != 0
    }
    /// Whether a peer's entry was relayed by a host that was not the connection's own
    /// ([`RELAYED`]).
    pub fn is_relayed(&self) -> bool {
        self.raw_state() & RELAYED != 0
    }
    /// Lifetime left at `now` if no packet arrives, ms (to the tick the deadline was
    /// rounded up to).
    #[inline]
    pub fn remaining_ms(&self, now: u32) -> u32 {
        // Ticks ahead, computed once: `expired` is "empty, or 0 or more than LIVE_AHEAD
        // ticks ahead" ((ahead - 1) mod 2^24 >= LIVE_AHEAD, as [`Self::expired`] reads it).
        let ahead = self.deadline().wrapping_sub(tick(now)) & TICK_MASK;
        if self.raw_state() == State::Empty as u8 || ahead == 0 || ahead > LIVE_AHEAD {
            0
        } else {
            ahead * TICK_MS - (now & (TICK_MS - 1))
        }
    }
    /// Time since the entry's last packet (or its installation from a peer), ms, derived
    /// as the timeout of its state under `t` (its service's timeouts) minus its remaining
    /// lifetime: to 8 ms, never too high (the deadline was rounded up). A peer's entry,
    /// installed with its origin's remaining lifetime, reads as older than it is here.
    pub fn idle_ms(&self, now: u32, t: &Timeouts) -> u32 {
        timeout_of(self.raw_state(), t).saturating_sub(self.remaining_ms(now))
    }
    /// The key of the entry.
    pub fn key(&self) -> CtKey<A> {
        CtKey { src: self.src, sport: self.sport, service: self.service }
    }
}

/// Idle timeout (ms) of an entry in raw state `state` under its service's timeouts `t`
/// ([`Timeouts::for_service`]): SYN-only, established or closing.
#[inline(always)]
pub(super) fn timeout_of(state: u8, t: &Timeouts) -> u32 {
    match state & 3 {
        1 => t.syn_ms,
        3 => t.closing_ms,
        _ => t.tcp_ms,
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// `remaining_ms` computes the ticks ahead once; it is 0 exactly when `expired`
        /// says so, and otherwise the time to the deadline's tick, for any life word
        /// (every state byte, every deadline, wrapped or not) and any clock.
        #[test]
        fn remaining_is_zero_exactly_when_expired(life in proptest::num::u32::ANY, now in proptest::num::u32::ANY) {
            let e = Entry::<u32> { src: 1, sport: 2, service: 3, backend: 4, incarnation: 5, life };
            let left = e.remaining_ms(now);
            proptest::prop_assert_eq!(left == 0, e.expired(now));
            if !e.expired(now) {
                let ahead = (life >> 8).wrapping_sub(tick(now)) & TICK_MASK;
                proptest::prop_assert_eq!(left, ahead * TICK_MS - (now & (TICK_MS - 1)));
            }
        }
    }
}
