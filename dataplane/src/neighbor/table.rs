//! The neighbour table: which MAC each next-hop address has, sans-IO and driven by
//! explicit time (quinn-proto style), so every rule is tested without DPDK.
//!
//! Keyed by [`IpAddr`] so IPv6 Neighbor Discovery (RFC 4861) can use the same table; the
//! daemon resolves IPv4 with ARP (RFC 826) today.
//!
//! Per address, the life of an entry:
//! - **wanted** ([`NeighborTable::set_wanted`]): a request is due at once;
//! - **request** ([`NeighborTable::poll`] returns the address): one request is
//!   *outstanding* for `retry_ms`; only a reply within that window is learned
//!   ([`NeighborTable::on_reply`]); any other reply (unsolicited, duplicate, late, for an
//!   address we do not want) is ignored and counted, so a forged or stray ARP reply cannot
//!   redirect traffic (RFC 826 would learn it; we do not);
//! - **timeout**: no reply within `retry_ms`: counted, and the request is sent again at once
//!   (so at most one request per address per `retry_ms`: RFC 1122 §2.3.2.1 with the default
//!   1 s);
//! - **reachable**: after a reply the next request is due `refresh_ms` later (RFC 4861
//!   §7.3.1 REACHABLE time): a changed MAC (a replaced VM) is learned within `refresh_ms`
//!   plus one round trip;
//! - **expired**: `expiry_ms` after the last reply the MAC is forgotten; requests go on every
//!   `retry_ms` until one is answered.

use std::collections::BTreeMap;
use std::net::IpAddr;

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
    pub fn from_config(c: &spillway_shared::neighbors::NeighborsConfig) -> Params {
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
}

/// The neighbour table (module docs).
#[derive(Clone, Debug)]
pub struct NeighborTable {
    params: Params,
    entries: BTreeMap<IpAddr, Entry>,
    counters: Counters,
}

impl NeighborTable {
    /// An empty table.
    pub fn new(params: Params) -> NeighborTable {
        NeighborTable { params, entries: BTreeMap::new(), counters: Counters::default() }
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
    /// forgets expired MACs, and appends to `requests` every address whose request is due
    /// now (each is then outstanding). Returns whether a resolved MAC went away.
    pub fn poll(&mut self, now_ms: u64, requests: &mut Vec<IpAddr>) -> bool {
        let p = self.params;
        let mut changed = false;
        for (a, e) in self.entries.iter_mut() {
            if let Some(t) = e.outstanding_since {
                if now_ms >= t.saturating_add(p.retry_ms) {
                    e.outstanding_since = None;
                    e.unanswered = e.unanswered.saturating_add(1);
                    e.next_request_ms = now_ms;
                    self.counters.timeouts += 1;
                }
            }
            if let (Some(_), Some(c)) = (e.mac, e.confirmed_ms) {
                if now_ms >= c.saturating_add(p.expiry_ms) {
                    e.mac = None;
                    e.expired = true;
                    self.counters.expired += 1;
                    changed = true;
                }
            }
            if e.outstanding_since.is_none() && now_ms >= e.next_request_ms {
                e.outstanding_since = Some(now_ms);
                self.counters.requests += 1;
                requests.push(*a);
            }
        }
        changed
    }

    /// A reply "`addr` is at `mac`" seen at `now_ms`: learned only when a request of ours
    /// for `addr` is outstanding (sent less than `retry_ms` ago); otherwise ignored and
    /// counted.
    pub fn on_reply(&mut self, addr: IpAddr, mac: [u8; 6], now_ms: u64) -> Learned {
        let retry = self.params.retry_ms;
        let refresh = self.params.refresh_ms;
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
        *e = Entry { mac: Some(mac), confirmed_ms: Some(now_ms), outstanding_since: None, next_request_ms: now_ms.saturating_add(refresh), unanswered: 0, expired: false };
        learned
    }

    /// The resolved MAC of `addr`.
    pub fn mac(&self, addr: &IpAddr) -> Option<[u8; 6]> {
        self.entries.get(addr).and_then(|e| e.mac)
    }

    /// Every resolved (address, MAC).
    pub fn resolved(&self) -> impl Iterator<Item = (IpAddr, [u8; 6])> + '_ {
        self.entries.iter().filter_map(|(a, e)| e.mac.map(|m| (*a, m)))
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
        t.poll(now, &mut v);
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
        assert_eq!(poll(&mut t, 10_599), Vec::<IpAddr>::new());
        assert_eq!(poll(&mut t, 10_600), vec![ip(1)], "refresh after refresh_ms");
        assert_eq!(t.on_reply(ip(1), MAC_B, 10_650), Learned::Changed, "a replaced VM is followed");
        assert_eq!(t.mac(&ip(1)), Some(MAC_B));
        // No more replies: timeouts every retry_ms, then the MAC expires 30 s after the last reply.
        let mut now = 20_650;
        let mut sent = 0;
        while now < 40_650 {
            sent += poll(&mut t, now).len();
            assert_eq!(t.mac(&ip(1)), Some(MAC_B), "kept until expiry ({now})");
            now += 100;
        }
        assert_eq!(sent, 20, "one request per retry_ms while unanswered");
        assert!(t.poll(40_650, &mut Vec::new()), "expiry reports the change");
        assert_eq!(t.mac(&ip(1)), None);
        assert_eq!(t.state(&ip(1), 40_650), Some(EntryState::Unresolved { unanswered: 20, expired: true }));
        let c = t.counters();
        assert_eq!((c.requests, c.replies, c.ignored, c.changed, c.expired), (23, 2, 1, 1, 1));
        assert_eq!(c.timeouts, 20);
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
            t.poll(now, &mut reqs);
            for a in reqs.drain(..) { last_req.insert(a, now); outstanding.insert(a, now); }
            for e in events {
                match e {
                    Ev::Advance(dt) => {
                        now += dt;
                        outstanding.retain(|_, s| now < *s + P.retry_ms);
                        t.poll(now, &mut reqs);
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
