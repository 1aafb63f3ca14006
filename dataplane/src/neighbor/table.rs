//! The neighbour table: which MAC each next-hop address has, sans-IO and driven by
//! explicit time (quinn-proto style), so every rule is tested without DPDK.
//!
//! Keyed by [`IpAddr`]: one table for both families, IPv4 next hops resolved with ARP (RFC
//! 826) and IPv6 ones with Neighbor Discovery (RFC 4861; the request is a Neighbor
//! Solicitation, the reply a solicited Neighbor Advertisement). The rules below hold for
//! both; "request"/"reply" name either.
//!
//! Per address, the life of an entry:
//! - **wanted** ([`NeighborTable::set_wanted`]): a request is due at once;
//! - **request** ([`NeighborTable::poll`] returns the address): one request is
//!   *outstanding* for `retry_ms`; only a reply within that window is learned
//!   ([`NeighborTable::on_reply`]); any other reply (unsolicited, duplicate, late, for an
//!   address we do not want) is ignored and counted, so a stray ARP reply or Neighbor
//!   Advertisement cannot resolve a next hop (RFC 826 would learn it); only an
//!   announcement may change a MAC already resolved ("announced" below);
//! - **timeout**: no reply within `retry_ms`: counted, and the request is sent again at once
//!   (so at most one request per address per `retry_ms`: RFC 1122 §2.3.2.1 with the default
//!   1 s);
//! - **pending** (never resolved, fewer than [`PENDING_TIMEOUTS`] requests timed out): the
//!   first reply may still come; its endpoints stay eligible (the snapshot gives them the
//!   all-zero MAC, which workers drop as `next_hop_unresolved`), so connections that
//!   outlived a restart keep their backend ([`NeighborTable::pending`]); after that many
//!   timeouts, or once an entry expired, it has *failed* and its endpoints are not eligible;
//! - **reachable**: after a reply the next request is due [`NeighborTable::refresh_delay`]
//!   later: `refresh_ms` less a deterministic jitter of up to a quarter from the address's
//!   hash (RFC 4861 §7.3.1 REACHABLE time, randomised like its ReachableTime), so entries
//!   learned in the same tick do not refresh in the same tick forever: a changed MAC (a
//!   replaced VM) is learned within `refresh_ms` plus one round trip;
//! - **per-tick limit**: [`NeighborTable::poll`] sends at most `max` requests per call, the
//!   others stay due for the next call, served round robin, so replies to one tick's
//!   requests fit the workers' queues ([`crate::neighbor::SEEN_CAPACITY`]);
//! - **expired**: `expiry_ms` after the last reply the MAC is forgotten; requests go on every
//!   `retry_ms` until one is answered;
//! - **announced** ([`NeighborTable::on_announcement`]): a gratuitous ARP (RFC 5227 §3) or
//!   an unsolicited Neighbor Advertisement with Override (RFC 4861 §7.2.5-6) for an address
//!   that is *resolved* replaces its MAC at once (a backend recreated with the same IP and a
//!   new MAC announces itself so: QA B46, Meridio PR #334). This is the one unsolicited
//!   message learned, and only for an entry we resolved ourselves (RFC 826's merge rule,
//!   as Linux does with `arp_accept = 0`): it never creates an entry, and an address that
//!   is pending, failed or expired still waits for the answer to a request of ours;
//! - **revalidating** ([`NeighborTable::revalidate`]; an endpoint whose health came back
//!   up): a request is due at once and the MAC is not offered
//!   ([`NeighborTable::usable`]) until it is answered, so the endpoint takes no traffic to
//!   a MAC it may no longer have; when that request times out the known MAC is offered
//!   again (a next hop that does not answer ARP is not shut out for good).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::ops::Bound;

/// Requests of a never-resolved entry that may time out before it counts as failed rather
/// than pending (module docs): with the default `retry_ms` of 1 s, 3 s from when it was
/// first wanted.
pub const PENDING_TIMEOUTS: u32 = 3;

/// Timers of the table, ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// From a reply to the next request (`[neighbors] refresh_sec`).
    pub refresh_ms: u64,
    /// From the last reply until the MAC is forgotten (`expiry_sec`); > `refresh_ms`.
    pub expiry_ms: u64,
    /// How long a request waits for its reply (`retry_ms`); ≤ `refresh_ms`.
    pub retry_ms: u64,
}

impl Params {
    /// The timers of a `[neighbors]` section.
    pub fn from_config(c: &spillway_shared::config::neighbors::NeighborsConfig) -> Params {
        Params { refresh_ms: u64::from(c.refresh_sec) * 1000, expiry_ms: u64::from(c.expiry_sec) * 1000, retry_ms: u64::from(c.retry_ms) }
    }
}

/// Counters of the table since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests sent.
    pub requests: u64,
    /// Replies learned (answers to an outstanding request).
    pub replies: u64,
    /// Replies ignored: no request of ours was outstanding for that address.
    pub ignored: u64,
    /// Requests that got no reply within `retry_ms`.
    pub timeouts: u64,
    /// Entries whose MAC was forgotten after `expiry_ms` without a reply.
    pub expired: u64,
    /// Replies that changed a known MAC.
    pub changed: u64,
    /// Requests held for a later poll by the per-poll limit (each counted once per poll).
    pub deferred: u64,
}

/// What [`NeighborTable::on_reply`] did with a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// First MAC of the entry (or first since it expired).
    New,
    /// The MAC changed.
    Changed,
    /// Same MAC, confirmed.
    Confirmed,
    /// Not an answer to an outstanding request of ours: ignored.
    Ignored,
}

/// One address as `status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Resolved to `mac`, last confirmed `age_ms` ago.
    Resolved {
        /// The MAC.
        mac: [u8; 6],
        /// Since the last reply, ms.
        age_ms: u64,
    },
    /// Not resolved: `unanswered` requests timed out since the last reply (or since it
    /// was wanted); `expired`: it had a MAC that expired.
    Unresolved {
        /// Requests that timed out in a row.
        unanswered: u32,
        /// The entry had a MAC, forgotten after `expiry_ms`.
        expired: bool,
    },
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    mac: Option<[u8; 6]>,
    /// Time of the last learned reply.
    confirmed_ms: Option<u64>,
    /// Time the outstanding request was sent.
    outstanding_since: Option<u64>,
    /// When the next request is due (when none is outstanding).
    next_request_ms: u64,
    unanswered: u32,
    expired: bool,
    /// Revalidating: the MAC is held back until the outstanding request is answered.
    revalidating: bool,
}

impl Entry {
    fn pending(&self) -> bool {
        self.mac.is_none() && !self.expired && self.unanswered < PENDING_TIMEOUTS
    }
}

/// The neighbour table (module docs).
#[derive(Clone, Debug)]
pub struct NeighborTable {
    params: Params,
    entries: BTreeMap<IpAddr, Entry>,
    counters: Counters,
    /// The last address a request went to: the next poll starts after it (round robin
    /// under the per-poll limit).
    cursor: Option<IpAddr>,
}

impl NeighborTable {
    /// An empty table.
    pub fn new(params: Params) -> NeighborTable {
        NeighborTable { params, entries: BTreeMap::new(), counters: Counters::default(), cursor: None }
    }

    /// The timers.
    pub fn params(&self) -> Params {
        self.params
    }

    /// Sets the addresses to resolve: new ones get a request due at `now_ms`, others are
    /// removed. Returns whether a resolved MAC went away.
    pub fn set_wanted(&mut self, addrs: &[IpAddr], now_ms: u64) -> bool {
        let resolved_before = self.entries.values().filter(|e| e.mac.is_some()).count();
        let mut sorted = addrs.to_vec();
        sorted.sort_unstable();
        self.entries.retain(|a, _| sorted.binary_search(a).is_ok());
        let removed_resolved = resolved_before != self.entries.values().filter(|e| e.mac.is_some()).count();
        for a in addrs {
            self.entries.entry(*a).or_insert(Entry { next_request_ms: now_ms, ..Default::default() });
        }
        removed_resolved
    }

    /// Advances to `now_ms`: counts timeouts (and makes those requests due again),
    /// forgets expired MACs, and appends to `requests` up to `max` addresses whose request
    /// is due now (each is then outstanding); the other due ones wait for the next poll,
    /// which starts after the last address served. Returns whether a resolved MAC went
    /// away or a pending entry failed (module docs).
    pub fn poll(&mut self, now_ms: u64, requests: &mut Vec<IpAddr>, max: usize) -> bool {
        let p = self.params;
        let mut changed = false;
        for e in self.entries.values_mut() {
            if let Some(t) = e.outstanding_since {
                if now_ms >= t.saturating_add(p.retry_ms) {
                    let was_pending = e.pending();
                    e.outstanding_since = None;
                    e.unanswered = e.unanswered.saturating_add(1);
                    e.next_request_ms = now_ms;
                    self.counters.timeouts += 1;
                    changed |= was_pending && !e.pending();
                    // unanswered revalidation: the known MAC is offered again
                    changed |= std::mem::take(&mut e.revalidating) && e.mac.is_some();
                }
            }
            if let (Some(_), Some(c)) = (e.mac, e.confirmed_ms) {
                if now_ms >= c.saturating_add(p.expiry_ms) {
                    e.mac = None;
                    e.expired = true;
                    e.revalidating = false;
                    self.counters.expired += 1;
                    changed = true;
                }
            }
        }
        let cursor = self.cursor;
        let mut sent = 0usize;
        for pass in 0..2 {
            let range = match (pass, cursor) {
                (0, Some(c)) => (Bound::Excluded(c), Bound::Unbounded),
                (0, None) => (Bound::Unbounded, Bound::Unbounded),
                (1, Some(c)) => (Bound::Unbounded, Bound::Included(c)),
                _ => break,
            };
            for (a, e) in self.entries.range_mut(range) {
                if e.outstanding_since.is_none() && now_ms >= e.next_request_ms {
                    if sent >= max {
                        self.counters.deferred += 1;
                        continue;
                    }
                    sent += 1;
                    e.outstanding_since = Some(now_ms);
                    self.counters.requests += 1;
                    requests.push(*a);
                    self.cursor = Some(*a);
                }
            }
        }
        changed
    }

    /// From a reply for `addr` to its next request: `refresh_ms` less up to a quarter, by
    /// a hash of the address (FNV-1a: the same on every run and host), never under
    /// `retry_ms` (at most one request per `retry_ms`).
    pub fn refresh_delay(&self, addr: &IpAddr) -> u64 {
        let octets: Vec<u8> = match addr {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let h = octets.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
        let r = self.params.refresh_ms;
        let jitter = (r / 4).saturating_mul(h % 1024) / 1024;
        r.saturating_sub(jitter).max(self.params.retry_ms)
    }

    /// A reply "`addr` is at `mac`" that arrived at `now_ms` (the worker's timestamp, not
    /// the time the control side drains it): learned only when a request of ours for
    /// `addr` is outstanding and was sent less than `retry_ms` before the reply arrived;
    /// otherwise ignored and counted.
    pub fn on_reply(&mut self, addr: IpAddr, mac: [u8; 6], now_ms: u64) -> Learned {
        let retry = self.params.retry_ms;
        let refresh = self.refresh_delay(&addr);
        let Some(e) = self.entries.get_mut(&addr) else {
            self.counters.ignored += 1;
            return Learned::Ignored;
        };
        match e.outstanding_since {
            Some(t) if now_ms >= t && now_ms < t.saturating_add(retry) => {}
            _ => {
                self.counters.ignored += 1;
                return Learned::Ignored;
            }
        }
        self.counters.replies += 1;
        let learned = match e.mac {
            None => Learned::New,
            Some(m) if m != mac => {
                self.counters.changed += 1;
                Learned::Changed
            }
            Some(_) => Learned::Confirmed,
        };
        *e = Entry { mac: Some(mac), confirmed_ms: Some(now_ms), outstanding_since: None, next_request_ms: now_ms.saturating_add(refresh), unanswered: 0, expired: false, revalidating: false };
        learned
    }

    /// A gratuitous ARP or unsolicited Neighbor Advertisement (with Override) "`addr` is
    /// at `mac`" that arrived at `now_ms` (module docs, "announced"): for a resolved
    /// address a new MAC replaces the known one at once ([`Learned::Changed`], counted in
    /// `changed`; the entry counts as confirmed now and a revalidation ends) and the same
    /// MAC is [`Learned::Confirmed`] (timers untouched); for any other address it is
    /// [`Learned::Ignored`] and counted in `ignored`.
    pub fn on_announcement(&mut self, addr: IpAddr, mac: [u8; 6], now_ms: u64) -> Learned {
        let refresh = self.refresh_delay(&addr);
        let Some(e) = self.entries.get_mut(&addr).filter(|e| e.mac.is_some()) else {
            self.counters.ignored += 1;
            return Learned::Ignored;
        };
        if e.mac == Some(mac) {
            return Learned::Confirmed;
        }
        self.counters.changed += 1;
        let outstanding_since = e.outstanding_since;
        *e = Entry { mac: Some(mac), confirmed_ms: Some(now_ms), outstanding_since, next_request_ms: now_ms.saturating_add(refresh), unanswered: 0, expired: false, revalidating: false };
        Learned::Changed
    }

    /// Revalidates resolved `addr` at `now_ms` (module docs, "revalidating"): a request is
    /// due at once (unless one is outstanding) and [`NeighborTable::usable`] leaves the
    /// address out until a reply or that request's timeout. Returns whether the usable set
    /// changed (false for an address that is not resolved, or already revalidating).
    pub fn revalidate(&mut self, addr: &IpAddr, now_ms: u64) -> bool {
        let Some(e) = self.entries.get_mut(addr).filter(|e| e.mac.is_some() && !e.revalidating) else {
            return false;
        };
        e.revalidating = true;
        if e.outstanding_since.is_none() {
            e.next_request_ms = now_ms;
        }
        true
    }

    /// Every resolved (address, MAC) that may take traffic: resolved and not revalidating.
    pub fn usable(&self) -> impl Iterator<Item = (IpAddr, [u8; 6])> + '_ {
        self.entries.iter().filter(|(_, e)| !e.revalidating).filter_map(|(a, e)| e.mac.map(|m| (*a, m)))
    }

    /// The resolved MAC of `addr`.
    pub fn mac(&self, addr: &IpAddr) -> Option<[u8; 6]> {
        self.entries.get(addr).and_then(|e| e.mac)
    }

    /// Every resolved (address, MAC).
    pub fn resolved(&self) -> impl Iterator<Item = (IpAddr, [u8; 6])> + '_ {
        self.entries.iter().filter_map(|(a, e)| e.mac.map(|m| (*a, m)))
    }

    /// Every address pending its first resolution: never resolved since it was wanted,
    /// not expired, fewer than [`PENDING_TIMEOUTS`] requests timed out.
    pub fn pending(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.entries.iter().filter(|(_, e)| e.pending()).map(|(a, _)| *a)
    }

    /// The state of `addr` at `now_ms` (`None`: not wanted).
    pub fn state(&self, addr: &IpAddr, now_ms: u64) -> Option<EntryState> {
        let e = self.entries.get(addr)?;
        Some(match (e.mac, e.confirmed_ms) {
            (Some(mac), Some(c)) => EntryState::Resolved { mac, age_ms: now_ms.saturating_sub(c) },
            _ => EntryState::Unresolved { unanswered: e.unanswered, expired: e.expired },
        })
    }

    /// The earliest time [`poll`](Self::poll) has something to do.
    pub fn next_timeout(&self) -> Option<u64> {
        let p = self.params;
        self.entries
            .values()
            .flat_map(|e| {
                let req = match e.outstanding_since {
                    Some(t) => t.saturating_add(p.retry_ms),
                    None => e.next_request_ms,
                };
                let exp = e.mac.and(e.confirmed_ms).map(|c| c.saturating_add(p.expiry_ms));
                [Some(req), exp]
            })
            .flatten()
            .min()
    }

    /// Requests outstanding now.
    pub fn outstanding(&self) -> usize {
        self.entries.values().filter(|e| e.outstanding_since.is_some()).count()
    }

    /// Counters since start.
    pub fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: Params = Params { refresh_ms: 10_000, expiry_ms: 30_000, retry_ms: 1_000 };
    const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n))
    }

    fn poll(t: &mut NeighborTable, now: u64) -> Vec<IpAddr> {
        let mut v = Vec::new();
        t.poll(now, &mut v, usize::MAX);
        v
    }

    #[test]
    fn resolves_refreshes_follows_a_new_mac_and_expires() {
        let mut t = NeighborTable::new(P);
        t.set_wanted(&[ip(1)], 0);
        assert_eq!(poll(&mut t, 0), vec![ip(1)]);
        assert_eq!(poll(&mut t, 500), Vec::<IpAddr>::new(), "one request outstanding at a time");
        assert_eq!(t.on_reply(ip(1), MAC_A, 600), Learned::New);
        assert_eq!(t.mac(&ip(1)), Some(MAC_A));
        assert_eq!(t.on_reply(ip(1), MAC_B, 700), Learned::Ignored, "a second reply answers nothing");
        assert_eq!(t.mac(&ip(1)), Some(MAC_A));
        let r = 600 + t.refresh_delay(&ip(1));
        assert!((7_500 + 600..=10_600).contains(&r), "{r}");
        assert_eq!(poll(&mut t, r - 1), Vec::<IpAddr>::new());
        assert_eq!(poll(&mut t, r), vec![ip(1)], "refresh after refresh_ms less its jitter");
        assert_eq!(t.on_reply(ip(1), MAC_B, r + 50), Learned::Changed, "a replaced VM is followed");
        assert_eq!(t.mac(&ip(1)), Some(MAC_B));
        // No more replies: the refresh, then timeouts every retry_ms, then the MAC expires 30 s
        // after the last reply.
        let r2 = r + 50 + t.refresh_delay(&ip(1));
        assert_eq!(poll(&mut t, r2), vec![ip(1)]);
        let mut now = r2 + 1_000;
        let mut sent = 1;
        while now < r + 50 + 30_000 {
            sent += poll(&mut t, now).len();
            assert_eq!(t.mac(&ip(1)), Some(MAC_B), "kept until expiry ({now})");
            now += 100;
        }
        let expiry = r + 50 + 30_000;
        assert_eq!(sent as u64, (expiry - r2).div_ceil(1_000), "one request per retry_ms while unanswered");
        assert!(t.poll(expiry, &mut Vec::new(), usize::MAX), "expiry reports the change");
        let unanswered = t.counters().timeouts;
        assert_eq!(t.mac(&ip(1)), None);
        assert_eq!(t.state(&ip(1), expiry), Some(EntryState::Unresolved { unanswered: unanswered as u32, expired: true }));
        let c = t.counters();
        assert_eq!((c.requests, c.replies, c.ignored, c.changed, c.expired), (3 + unanswered, 2, 1, 1, 1));
        assert_eq!(c.timeouts, unanswered);
    }

    #[test]
    fn unsolicited_late_and_unknown_replies_are_ignored() {
        let mut t = NeighborTable::new(P);
        t.set_wanted(&[ip(1)], 0);
        assert_eq!(t.on_reply(ip(1), MAC_A, 0), Learned::Ignored, "before any request");
        assert_eq!(t.on_reply(ip(9), MAC_A, 0), Learned::Ignored, "address not wanted");
        assert_eq!(poll(&mut t, 0), vec![ip(1)]);
        assert_eq!(t.on_reply(ip(1), MAC_A, 1_000), Learned::Ignored, "after the request's window");
        assert_eq!(t.mac(&ip(1)), None);
        assert_eq!(t.counters().ignored, 3);
        assert_eq!(t.state(&ip(9), 0), None);
    }

    #[test]
    fn unwanted_addresses_are_dropped_and_report_the_change() {
        let mut t = NeighborTable::new(P);
        t.set_wanted(&[ip(1), ip(2)], 0);
        assert_eq!(poll(&mut t, 0), vec![ip(1), ip(2)]);
        t.on_reply(ip(1), MAC_A, 1);
        assert!(!t.set_wanted(&[ip(1)], 2), "ip(2) was not resolved");
        assert!(t.set_wanted(&[ip(3)], 3), "ip(1) was resolved");
        assert_eq!(t.mac(&ip(1)), None);
        assert_eq!(poll(&mut t, 3), vec![ip(3)]);
        assert_eq!(t.next_timeout(), Some(1_003));
    }

    #[test]
    fn pending_until_a_few_timeouts_or_an_expiry_then_failed() {
        let mut t = NeighborTable::new(P);
        t.set_wanted(&[ip(1), ip(2)], 0);
        assert_eq!(t.pending().collect::<Vec<_>>(), vec![ip(1), ip(2)], "wanted: pending at once");
        assert_eq!(poll(&mut t, 0).len(), 2);
        t.on_reply(ip(2), MAC_B, 10);
        assert_eq!(t.pending().collect::<Vec<_>>(), vec![ip(1)], "resolved: not pending");
        assert!(!t.poll(1_000, &mut Vec::new(), usize::MAX));
        assert!(!t.poll(2_000, &mut Vec::new(), usize::MAX));
        assert_eq!(t.pending().count(), 1, "two timeouts: still pending");
        assert!(t.poll(3_000, &mut Vec::new(), usize::MAX), "the third timeout fails it: reported");
        assert_eq!(t.pending().count(), 0);
        // An expired entry is failed at once, not pending again.
        t.poll(30_010, &mut Vec::new(), usize::MAX);
        assert_eq!(t.mac(&ip(2)), None);
        assert_eq!(t.pending().count(), 0);
    }

    #[test]
    fn refreshes_are_spread_and_requests_per_poll_are_limited_round_robin() {
        let mut t = NeighborTable::new(P);
        let addrs: Vec<IpAddr> = (1..=200).map(ip).collect();
        t.set_wanted(&addrs, 0);
        let mut first = Vec::new();
        t.poll(0, &mut first, 64);
        assert_eq!(first, addrs[..64].to_vec(), "at most 64 per poll");
        assert_eq!(t.counters().deferred, 136);
        let mut second = Vec::new();
        t.poll(50, &mut second, 64);
        assert_eq!(second, addrs[64..128].to_vec(), "the next poll goes on where the last stopped");
        let mut rest = Vec::new();
        t.poll(100, &mut rest, 1000);
        assert_eq!(rest.len(), 72);
        // All answered in the same tick: their refreshes are spread over the last quarter of refresh_ms.
        for a in &addrs {
            assert_ne!(t.on_reply(*a, MAC_A, 150), Learned::Ignored);
        }
        let due: std::collections::BTreeSet<u64> = addrs.iter().map(|a| 150 + t.refresh_delay(a)).collect();
        assert!(due.len() > 150, "{} distinct refresh times for 200 entries", due.len());
        assert!(due.iter().all(|d| (150 + 7_500..=150 + 10_000).contains(d)));
        let mut per_tick = std::collections::BTreeMap::new();
        for d in &due {
            *per_tick.entry(d / 50).or_insert(0) += 1;
        }
        assert!(per_tick.values().all(|n| *n <= 10), "no tick refreshes many: {per_tick:?}");
        assert_eq!(t.refresh_delay(&ip(7)), NeighborTable::new(P).refresh_delay(&ip(7)), "deterministic");
        let tight = NeighborTable::new(Params { refresh_ms: 1_000, expiry_ms: 3_000, retry_ms: 1_000 });
        assert_eq!(tight.refresh_delay(&ip(7)), 1_000, "never under retry_ms");
    }

    /// Events of the property test.
    #[derive(Clone, Debug)]
    enum Ev {
        Advance(u64),
        Reply(u8, u8),
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![(0u64..3_000).prop_map(Ev::Advance), (0u8..4, 0u8..3).prop_map(|(a, m)| Ev::Reply(a, m))]
    }

    proptest! {
        /// Against a model: a MAC is known only from a reply that answered an outstanding
        /// request less than `expiry_ms` ago, and it is the latest such reply's MAC; every
        /// other reply changes nothing and is counted ignored; requests for one address are
        /// at least `retry_ms` apart; a resolved entry is asked again by `refresh_ms` after
        /// its reply (polled every ≤ 3 s); every request ends as exactly one of learned
        /// reply, timeout or still outstanding.
        #[test]
        fn learns_only_answers_and_keeps_its_timers(events in proptest::collection::vec(ev(), 1..200)) {
            let addrs = [ip(0), ip(1), ip(2)];
            let mut t = NeighborTable::new(P);
            t.set_wanted(&addrs, 0);
            let mut now = 0u64;
            let mut last_req: BTreeMap<IpAddr, u64> = BTreeMap::new();
            let mut outstanding: BTreeMap<IpAddr, u64> = BTreeMap::new();
            let mut learned: BTreeMap<IpAddr, ([u8; 6], u64)> = BTreeMap::new();
            let mut ignored = 0u64;
            let mut reqs = Vec::new();
            t.poll(now, &mut reqs, usize::MAX);
            for a in reqs.drain(..) { last_req.insert(a, now); outstanding.insert(a, now); }
            for e in events {
                match e {
                    Ev::Advance(dt) => {
                        now += dt;
                        outstanding.retain(|_, s| now < *s + P.retry_ms);
                        t.poll(now, &mut reqs, usize::MAX);
                        for a in reqs.drain(..) {
                            if let Some(prev) = last_req.get(&a) {
                                prop_assert!(now - prev >= P.retry_ms, "{a}: requests {prev} and {now}");
                            }
                            // A resolved entry is refreshed in time: before refresh + the poll gap.
                            last_req.insert(a, now);
                            outstanding.insert(a, now);
                        }
                        for (a, (_, at)) in &learned {
                            if now >= at + P.refresh_ms + 3_000 {
                                prop_assert!(last_req[a] > *at, "{a} not refreshed after its reply at {at} (now {now})");
                            }
                        }
                    }
                    Ev::Reply(a, m) => {
                        let a = ip(a);
                        let mac = [2, 0, 0, 0, 1, m];
                        let before = t.mac(&a);
                        let r = t.on_reply(a, mac, now);
                        if outstanding.remove(&a).is_some() {
                            prop_assert_ne!(r, Learned::Ignored);
                            learned.insert(a, (mac, now));
                        } else {
                            prop_assert_eq!(r, Learned::Ignored);
                            prop_assert_eq!(t.mac(&a), before);
                            ignored += 1;
                        }
                    }
                }
                for a in addrs.iter().chain([ip(3)].iter()) {
                    let want = learned.get(a).filter(|(_, at)| now < at + P.expiry_ms).map(|(m, _)| *m);
                    prop_assert_eq!(t.mac(a), want, "{} at {}", a, now);
                }
                let c = t.counters();
                prop_assert_eq!(c.ignored, ignored);
                prop_assert_eq!(c.requests, c.replies + c.timeouts + t.outstanding() as u64);
            }
        }
    }
}
