//! The control side of next-hop resolution: which addresses the config needs resolved
//! ([`spillway_shared::neighbors::wanted`]), the [`NeighborTable`] with its timers, the
//! queues to and from the workers, and what snapshots and `status` read. Runs on the
//! control thread ([`crate::daemon::Daemon::neighbor_tick`]); nothing here touches a
//! device: frames go through [`NeighborQueues::outbox`].

use super::table::{Counters, EntryState, Learned, NeighborTable, Params};
use super::{frames, NeighborQueues, NeighborSeen, TxFrame};
use spillway_shared::config::Config;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Next hops as snapshot compilation reads them: address → MAC for resolved ones, and
/// [`PENDING_MAC`] for those pending their first resolution (eligible; the workers drop
/// their packets). An address missing from the view has failed resolution.
pub type NeighborView = HashMap<IpAddr, [u8; 6]>;

/// The MAC of a pending next hop in a [`NeighborView`]: all zero, which workers never
/// send to (`next_hop_unresolved`).
pub const PENDING_MAC: [u8; 6] = [0; 6];

/// One port as the resolver sends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSide {
    /// Source MAC of our frames.
    pub mac: [u8; 6],
    /// Our IPv4 address on the port (ARP sender address; 0.0.0.0 = none). The IPv6 source
    /// of Neighbor Solicitations is the config's ([`port_address6`]).
    pub addr: Ipv4Addr,
    /// Requests go out here: a port some port forwards to (towards backends).
    pub forwarding: bool,
}

/// Counters of the control side besides the table's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Gratuitous ARPs and unsolicited Neighbor Advertisements queued.
    pub gratuitous: u64,
    /// Frames not queued: the outbox to worker 0 was full.
    pub outbox_full: u64,
    /// Replies ignored before the table: they came in on a port we do not send requests
    /// on, or their target address is not that port's address (not an answer to us).
    pub misdirected: u64,
    /// Neighbor Advertisements ignored before the table: Solicited flag clear (not an
    /// answer), or Override clear with a MAC other than the known one (RFC 4861 §7.2.5).
    pub not_solicited: u64,
    /// Replies ignored because the MAC they give is all-zero (the "pending" mark of the
    /// resolved view), multicast or broadcast (group bit set): never a next hop's address
    /// (RFC 1812 §3.3.2 for ARP; the same for Neighbor Discovery).
    pub bad_mac: u64,
}

/// The IPv6 address of port `i` that Neighbor Solicitations are sent from: `address` when
/// IPv6, else `address6` (as the snapshot's `port_addrs6`); `None` when it has neither.
pub fn port_address6(cfg: &Config, i: usize) -> Option<Ipv6Addr> {
    let p = cfg.ports.get(i)?;
    match (p.address, p.address6) {
        (Some(IpAddr::V6(a)), _) | (_, Some(a)) => Some(a).filter(|a| !a.is_unspecified()),
        _ => None,
    }
}

/// The resolver (module docs).
#[derive(Debug)]
pub struct Resolver {
    table: NeighborTable,
    ports: Vec<PortSide>,
    /// Resolved view as last handed to a snapshot.
    view: NeighborView,
    counters: DriverCounters,
    /// VIPs a gratuitous ARP was sent for (new VIPs of live edits get one too).
    announced: Vec<std::net::IpAddr>,
    gratuitous_arp: bool,
    requests: Vec<IpAddr>,
}

impl Resolver {
    /// A resolver with the timers of `cfg.neighbors`; ports are set by [`Resolver::set_ports`]
    /// once the devices are up.
    pub fn new(cfg: &Config) -> Resolver {
        Resolver {
            table: NeighborTable::new(Params::from_config(&cfg.neighbors)),
            ports: Vec::new(),
            view: NeighborView::new(),
            counters: DriverCounters::default(),
            announced: Vec::new(),
            gratuitous_arp: cfg.neighbors.gratuitous_arp,
            requests: Vec::new(),
        }
    }

    /// The ports to send on (index = port index).
    pub fn set_ports(&mut self, ports: Vec<PortSide>) {
        self.ports = ports;
    }

    /// Follows the config's next hops (start and every live edit). Returns whether the
    /// resolved view changed.
    pub fn set_config(&mut self, cfg: &Config, now_ms: u64) -> bool {
        self.table.set_wanted(&spillway_shared::neighbors::wanted(cfg), now_ms);
        self.refresh_view()
    }

    /// One control tick at `now_ms`: learns the replies the workers handed over (those
    /// that came in on a port we ask on, addressed to its address, timed by their arrival:
    /// `learn`), runs the table's timers, queues the requests due (at most
    /// [`REQUESTS_PER_TICK`] addresses; on every forwarding port an ARP request for an
    /// IPv4 address, a Neighbor Solicitation from the port's IPv6 address for an IPv6 one,
    /// none from a port without one), and (when enabled) gratuitous ARPs / unsolicited
    /// Neighbor Advertisements for VIPs not announced yet. Returns whether the view
    /// changed (republish).
    ///
    /// [`REQUESTS_PER_TICK`]: super::REQUESTS_PER_TICK
    pub fn tick(&mut self, cfg: &Config, queues: &NeighborQueues, now_ms: u64) -> bool {
        for q in &queues.seen {
            while let Some(s) = q.pop() {
                self.learn(cfg, s, now_ms);
            }
        }
        let mut requests = std::mem::take(&mut self.requests);
        requests.clear();
        let forwarding = self.ports.iter().filter(|p| p.forwarding).count().max(1);
        self.table.poll(now_ms, &mut requests, super::REQUESTS_PER_TICK / forwarding);
        for a in &requests {
            for i in 0..self.ports.len() {
                let p = self.ports[i];
                if !p.forwarding {
                    continue;
                }
                match *a {
                    IpAddr::V4(target) => {
                        self.queue(queues, i, frames::request(p.mac, p.addr, target));
                    }
                    // A port without an IPv6 address sends no solicitation (daemon_checks
                    // refuses a config where no forwarding port has one).
                    IpAddr::V6(target) => {
                        if let Some((bytes, len)) = port_address6(cfg, i).and_then(|src| frames::solicitation(p.mac, src, target)) {
                            self.queue_len(queues, i, bytes, len);
                        }
                    }
                }
            }
        }
        self.requests = requests;
        if self.gratuitous_arp {
            self.announce(cfg, queues);
        }
        self.refresh_view()
    }

    /// One reply a worker handed over: learned when it came in on a port we ask on and was
    /// sent to that port's own address of its family (ARP target protocol address, NA
    /// destination = `ports[].address6`), else counted `misdirected`. An NA must carry the
    /// Solicited flag (RFC 4861 §7.2.5: an unsolicited one answers no request of ours),
    /// and one without the Override flag does not replace a known, different MAC (§7.2.5);
    /// both are counted ignored. A reply naming an all-zero or group MAC is ignored too
    /// (`bad_mac`). The table then learns it only as the answer to our
    /// outstanding request, timed by its arrival on the worker.
    fn learn(&mut self, cfg: &Config, s: NeighborSeen, now_ms: u64) {
        let addr = s.addr;
        let ours = match s.to {
            IpAddr::V4(to) => self.ports.get(usize::from(s.port)).is_some_and(|p| p.forwarding && p.addr == to),
            IpAddr::V6(to) => self.ports.get(usize::from(s.port)).is_some_and(|p| p.forwarding) && port_address6(cfg, usize::from(s.port)) == Some(to),
        };
        if !ours || addr.is_ipv4() != s.to.is_ipv4() {
            self.counters.misdirected += 1;
            tracing::debug!(address = %addr, to = %s.to, port = s.port, "neighbour reply not for a request of ours on that port: ignored");
            return;
        }
        let mac = spillway_shared::net::MacAddr(s.mac);
        if s.mac == [0; 6] || s.mac[0] & 1 == 1 {
            self.counters.bad_mac += 1;
            tracing::warn!(address = %addr, %mac, port = s.port, "neighbour reply names an all-zero or group MAC: ignored");
            return;
        }
        if !s.solicited || (!s.overrides && self.table.mac(&addr).is_some_and(|m| m != s.mac)) {
            self.counters.not_solicited += 1;
            tracing::debug!(address = %addr, %mac, solicited = s.solicited, overrides = s.overrides, "Neighbor Advertisement not solicited, or not overriding a known MAC: ignored");
            return;
        }
        // The worker's u32 clock has the same epoch: the signed distance to now.
        let at = (now_ms as i64 + i64::from(s.at_ms.wrapping_sub(now_ms as u32) as i32)).max(0) as u64;
        match self.table.on_reply(addr, s.mac, at) {
            Learned::New => tracing::info!(address = %addr, %mac, port = s.port, "next hop resolved"),
            Learned::Changed => tracing::warn!(address = %addr, %mac, port = s.port, "next hop MAC changed"),
            Learned::Confirmed => {}
            Learned::Ignored => tracing::debug!(address = %addr, %mac, "reply without a request of ours: ignored"),
        }
    }

    /// On every port, for VIPs (and port addresses) not announced yet: a gratuitous ARP
    /// (IPv4, RFC 5227 §3) or an unsolicited Neighbor Advertisement to all-nodes (IPv6, RFC
    /// 4861 §7.2.6). An address counts as announced once its frames are queued on every
    /// port; one that did not fit the outbox is tried again on the next tick.
    fn announce(&mut self, cfg: &Config, queues: &NeighborQueues) {
        use std::net::IpAddr;
        if self.ports.is_empty() {
            return;
        }
        let mut addrs: Vec<IpAddr> = cfg
            .services
            .iter()
            .map(|s| s.vip)
            .chain(self.ports.iter().map(|p| IpAddr::V4(p.addr)))
            .chain(cfg.ports.iter().filter_map(|p| p.address6.map(IpAddr::V6)))
            .chain(cfg.ports.iter().filter_map(|p| p.address.filter(IpAddr::is_ipv6)))
            .filter(|a| !a.is_unspecified())
            .collect();
        addrs.sort();
        addrs.dedup();
        for a in addrs {
            if self.announced.contains(&a) {
                continue;
            }
            let mut all = true;
            for i in 0..self.ports.len() {
                let mac = self.ports[i].mac;
                let (bytes, len) = match a {
                    IpAddr::V4(v4) => (frames::gratuitous(mac, v4), super::ARP_FRAME_LEN),
                    IpAddr::V6(v6) => {
                        let mut f = [0u8; super::FRAME_LEN];
                        match crate::wire::icmpv6::unsolicited_na(&mut f, u128::from(v6), mac) {
                            Ok(n) => (f, n),
                            Err(_) => continue,
                        }
                    }
                };
                if self.queue_len(queues, i, bytes, len) {
                    self.counters.gratuitous += 1;
                } else {
                    all = false;
                }
            }
            if all {
                self.announced.push(a);
            }
        }
    }

    fn queue(&mut self, queues: &NeighborQueues, port: usize, bytes: [u8; super::FRAME_LEN]) -> bool {
        self.queue_len(queues, port, bytes, super::ARP_FRAME_LEN)
    }

    fn queue_len(&mut self, queues: &NeighborQueues, port: usize, bytes: [u8; super::FRAME_LEN], len: usize) -> bool {
        let ok = queues.outbox.push(TxFrame { port: port as u16, bytes, len: len.min(super::FRAME_LEN) as u16 }).is_ok();
        if !ok {
            self.counters.outbox_full += 1;
        }
        ok
    }

    fn refresh_view(&mut self) -> bool {
        let view: NeighborView = self.table.resolved().chain(self.table.pending().map(|a| (a, PENDING_MAC))).collect();
        let changed = view != self.view;
        self.view = view;
        changed
    }

    /// The resolved and pending next hops ([`NeighborView`]).
    pub fn view(&self) -> &NeighborView {
        &self.view
    }

    /// Why `addr` is not resolved (`None` when it is, or is not wanted), as `status`
    /// shows it: `no ARP reply from 10.0.0.11 (3 requests unanswered)`, `no Neighbor
    /// Advertisement from fd00::11 (3 solicitations unanswered)`.
    pub fn unresolved_reason(&self, addr: &IpAddr, now_ms: u64) -> Option<String> {
        let (request, reply, requests) = match addr {
            IpAddr::V4(_) => ("ARP request", "ARP reply", "request"),
            IpAddr::V6(_) => ("Neighbor Solicitation", "Neighbor Advertisement", "solicitation"),
        };
        match self.table.state(addr, now_ms)? {
            EntryState::Resolved { .. } => None,
            EntryState::Unresolved { unanswered: 0, expired: false } => Some(format!("{request} for {addr} awaiting its first reply")),
            EntryState::Unresolved { unanswered, expired } => Some(format!(
                "no {reply} from {addr} ({unanswered} {requests}{} unanswered{})",
                if unanswered == 1 { "" } else { "s" },
                if expired { "; its entry expired" } else { "" }
            )),
        }
    }

    /// Every wanted address with its state at `now_ms` (metrics, `status`).
    pub fn entries(&self, addrs: &[IpAddr], now_ms: u64) -> Vec<(IpAddr, EntryState)> {
        addrs.iter().filter_map(|a| self.table.state(a, now_ms).map(|s| (*a, s))).collect()
    }

    /// Counters and entries for `status` ([`spillway_shared::proto::NeighborStatus`]).
    pub fn status(&self, cfg: &Config, now_ms: u64) -> spillway_shared::proto::NeighborStatus {
        let c = self.table.counters();
        let entries = self
            .entries(&spillway_shared::neighbors::wanted(cfg), now_ms)
            .into_iter()
            .map(|(a, s)| match s {
                EntryState::Resolved { mac, age_ms } => (a.to_string(), spillway_shared::net::MacAddr(mac).to_string(), (age_ms / 1000) as i64),
                EntryState::Unresolved { .. } => (a.to_string(), String::new(), -1),
            })
            .collect();
        spillway_shared::proto::NeighborStatus {
            requests: c.requests,
            replies: c.replies,
            ignored: c.ignored + self.counters.misdirected + self.counters.not_solicited + self.counters.bad_mac,
            timeouts: c.timeouts,
            expired: c.expired,
            changed: c.changed,
            gratuitous: self.counters.gratuitous,
            deferred: c.deferred,
            entries,
        }
    }

    /// The table's counters.
    pub fn counters(&self) -> Counters {
        self.table.counters()
    }

    /// This driver's counters.
    pub fn driver_counters(&self) -> DriverCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neighbor::NeighborSeen;

    fn cfg(extra: &str) -> Config {
        let extra = if extra.contains("gratuitous_arp") { extra.to_string() } else { format!("gratuitous_arp = true\n{extra}") };
        let c = Config::from_toml(&format!(
            r#"
[neighbors]
refresh_sec = 2
expiry_sec = 6
retry_ms = 500
{extra}
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.1"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
[[services.backends]]
name = "b1"
address = "10.0.0.11"
[[services.backends]]
name = "b2"
address = "10.0.0.12"
mac = "02:00:00:00:00:12"
"#
        ))
        .unwrap();
        c.validate().unwrap();
        c
    }

    const OURS: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn resolver(c: &Config) -> Resolver {
        let mut r = Resolver::new(c);
        r.set_ports(vec![PortSide { mac: OURS, addr: Ipv4Addr::new(10, 0, 0, 1), forwarding: true }]);
        r.set_config(c, 0);
        r
    }

    fn drain(q: &NeighborQueues) -> Vec<crate::wire::ArpInfo> {
        std::iter::from_fn(|| q.outbox.pop())
            .map(|f| match crate::wire::parse(&f.bytes[..usize::from(f.len)]) {
                Ok(crate::wire::Parsed::Arp(a)) => a,
                other => panic!("not ARP: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn requests_only_mac_less_next_hops_and_learns_their_replies() {
        let c = cfg("");
        let q = NeighborQueues::new(2);
        let mut r = resolver(&c);
        assert!(!r.tick(&c, &q, 0));
        let sent = drain(&q);
        let reqs: Vec<_> = sent.iter().filter(|a| a.spa != a.tpa).map(|a| (a.spa, a.tpa)).collect();
        assert_eq!(reqs, vec![(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 11))], "b2 has a mac: not asked");
        let garp: Vec<_> = sent.iter().filter(|a| a.spa == a.tpa).map(|a| a.tpa).collect();
        assert_eq!(garp, vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 100)], "gratuitous ARP for the port address and the VIP");
        assert_eq!(r.unresolved_reason(&"10.0.0.11".parse().unwrap(), 0).unwrap(), "ARP request for 10.0.0.11 awaiting its first reply");
        // A reply arrives through worker 1's queue.
        q.seen[1].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 11), [2, 0, 0, 0, 0, 0x11], Ipv4Addr::new(10, 0, 0, 1), 90)).unwrap();
        assert!(r.tick(&c, &q, 100), "resolution changes the view");
        assert_eq!(r.view().get(&"10.0.0.11".parse().unwrap()), Some(&[2, 0, 0, 0, 0, 0x11]));
        assert_eq!(r.unresolved_reason(&"10.0.0.11".parse().unwrap(), 100), None);
        assert!(drain(&q).is_empty(), "no gratuitous ARP twice, no request before the refresh");
        // An unsolicited reply for b1 with another MAC changes nothing.
        q.seen[0].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 11), [2, 0, 0, 0, 0, 0x99], Ipv4Addr::new(10, 0, 0, 1), 190)).unwrap();
        assert!(!r.tick(&c, &q, 200));
        assert_eq!(r.counters().ignored, 1);
        // Refresh at 2.1 s; nobody answers: expired at 6.1 s, with the reason shown.
        let mut now = 200;
        let mut changed_at = None;
        while now <= 7_000 {
            if r.tick(&c, &q, now) && changed_at.is_none() {
                changed_at = Some(now);
            }
            now += 50;
        }
        assert_eq!(changed_at, Some(6_100));
        assert!(r.view().is_empty());
        let reason = r.unresolved_reason(&"10.0.0.11".parse().unwrap(), now).unwrap();
        assert!(reason.starts_with("no ARP reply from 10.0.0.11 (") && reason.ends_with("requests unanswered; its entry expired)"), "{reason}");
    }

    /// A reply is learned only from a port we ask on and addressed to its address; the
    /// request window is measured to the reply's arrival on the worker, not to the tick
    /// that drains it.
    #[test]
    fn replies_count_on_the_asking_port_for_its_address_at_their_arrival() {
        let c = cfg("gratuitous_arp = false");
        let q = NeighborQueues::new(1);
        let mut r = resolver(&c);
        r.set_ports(vec![
            PortSide { mac: OURS, addr: Ipv4Addr::new(10, 0, 0, 1), forwarding: true },
            PortSide { mac: OURS, addr: Ipv4Addr::new(192, 0, 2, 1), forwarding: false },
        ]);
        r.tick(&c, &q, 0);
        assert_eq!(drain(&q).len(), 1, "asked on the forwarding port only");
        let b1 = Ipv4Addr::new(10, 0, 0, 11);
        let mac = [2, 0, 0, 0, 0, 0x11];
        q.seen[0].push(NeighborSeen::arp(1, b1, mac, Ipv4Addr::new(192, 0, 2, 1), 10)).unwrap();
        q.seen[0].push(NeighborSeen::arp(0, b1, mac, Ipv4Addr::new(10, 0, 0, 99), 10)).unwrap();
        q.seen[0].push(NeighborSeen::arp(7, b1, mac, Ipv4Addr::new(10, 0, 0, 1), 10)).unwrap();
        r.tick(&c, &q, 50);
        assert_eq!(r.view().get(&IpAddr::V4(b1)), Some(&PENDING_MAC), "none of them is an answer to us");
        assert_eq!(r.driver_counters().misdirected, 3);
        assert_eq!(r.status(&c, 50).ignored, 3, "status counts them ignored");
        // Arrived at 490 (inside the 500 ms window), drained by the tick at 520: learned.
        q.seen[0].push(NeighborSeen::arp(0, b1, mac, Ipv4Addr::new(10, 0, 0, 1), 490)).unwrap();
        assert!(r.tick(&c, &q, 520));
        assert_eq!(r.view().get(&IpAddr::V4(b1)), Some(&mac));
        assert_eq!(r.counters().ignored, 0);
    }

    /// A next hop is pending (in the view with the all-zero MAC: eligible) until three
    /// requests timed out, then failed (out of the view: the change republishes).
    #[test]
    fn a_next_hop_fails_after_three_unanswered_requests() {
        let c = cfg("gratuitous_arp = false");
        let q = NeighborQueues::new(1);
        let mut r = resolver(&c);
        let b1: IpAddr = "10.0.0.11".parse().unwrap();
        assert_eq!(r.view().get(&b1), Some(&PENDING_MAC), "pending from the moment it is wanted");
        assert!(crate::control::with_unresolved(&c, &Default::default(), r.view()).is_none(), "pending: eligible");
        assert!(crate::control::with_not_resolved(&c, &Default::default(), r.view()).is_some(), "not ready for announcing");
        let mut failed_at = None;
        for now in (0..=2_000).step_by(50) {
            if r.tick(&c, &q, now) {
                failed_at.get_or_insert(now);
            }
        }
        assert_eq!(failed_at, Some(1_500), "3 × retry_ms");
        assert_eq!(r.view().get(&b1), None);
        let marked = crate::control::with_unresolved(&c, &Default::default(), r.view()).unwrap();
        assert!(!marked[&("web".to_string(), "b1".to_string(), "b1".to_string())].healthy, "failed: not eligible");
    }

    #[test]
    fn gratuitous_arp_can_be_turned_off_and_a_full_outbox_is_counted() {
        let c = cfg("gratuitous_arp = false");
        let q = NeighborQueues::new(1);
        let mut r = resolver(&c);
        r.tick(&c, &q, 0);
        assert_eq!(drain(&q).len(), 1, "only the request");
        for _ in 0..crate::neighbor::OUTBOX_CAPACITY {
            q.outbox.push(TxFrame { port: 0, bytes: [0; crate::neighbor::FRAME_LEN], len: 60 }).unwrap();
        }
        r.tick(&c, &q, 500);
        assert_eq!(r.driver_counters().outbox_full, 1, "the retry did not fit");
    }

    /// Issue 12 item 3: an IPv6 VIP and a port's IPv6 address are announced at start with
    /// an unsolicited Neighbor Advertisement (RFC 4861 §7.2.6) to all-nodes, 86 bytes,
    /// Solicited clear, Override set, our MAC in the Target Link-Layer Address option, a
    /// valid checksum (checked with etherparse); once each, like the gratuitous ARPs.
    #[test]
    fn ipv6_addresses_are_announced_with_unsolicited_neighbor_advertisements() {
        let c = cfg("gratuitous_arp = true\n[[ports]]\nname = \"p1\"\ndevice = \"net_null1\"\naddress6 = \"fd00::2\"\n[[services]]\nname = \"web6\"\nvip = \"fd00::100\"\nport = 80\n[[services.backends]]\nname = \"v1\"\naddress = \"fd00:21::1\"\nmac = \"02:00:00:00:21:01\"\n");
        let q = NeighborQueues::new(1);
        let mut r = resolver(&c);
        r.tick(&c, &q, 0);
        let frames: Vec<TxFrame> = std::iter::from_fn(|| q.outbox.pop()).collect();
        let mut targets = Vec::new();
        for f in frames.iter().filter(|f| f.bytes[12..14] == [0x86, 0xdd]) {
            assert_eq!(usize::from(f.len), crate::wire::icmpv6::UNSOLICITED_NA_FRAME_LEN);
            let b = &f.bytes[..usize::from(f.len)];
            assert_eq!(&b[0..6], &[0x33, 0x33, 0, 0, 0, 1], "to all-nodes");
            let ip = etherparse::Ipv6HeaderSlice::from_slice(&b[14..]).unwrap();
            assert_eq!((ip.hop_limit(), ip.next_header().0), (255, 58));
            let icmp = etherparse::Icmpv6Slice::from_slice(&b[54..]).unwrap();
            assert_eq!(icmp.header().icmp_type.calc_checksum(ip.source(), ip.destination(), icmp.payload()).unwrap(), icmp.checksum());
            let na = &b[54..];
            assert_eq!(na[0], 136, "Neighbor Advertisement");
            assert_eq!(na[4] & 0xe0, 0x20, "Override set, Solicited and Router clear");
            assert_eq!((na[24], na[25], &na[26..32]), (2, 1, &OURS[..]), "Target Link-Layer Address option");
            targets.push(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&na[8..24]).unwrap()));
        }
        targets.sort();
        targets.dedup();
        assert_eq!(targets, vec!["fd00::2".parse::<std::net::Ipv6Addr>().unwrap(), "fd00::100".parse().unwrap()]);
        r.tick(&c, &q, 100);
        assert!(std::iter::from_fn(|| q.outbox.pop()).all(|f| f.bytes[12..14] != [0x86, 0xdd]), "announced once");
    }
}
