//! The control side of next-hop resolution: which addresses the config needs resolved
//! ([`spillway_shared::neighbors::wanted`]), the [`NeighborTable`] with its timers, the
//! queues to and from the workers, and what snapshots and `status` read. Runs on the
//! control thread ([`crate::daemon::Daemon::neighbor_tick`]); nothing here touches a
//! device: frames go through [`NeighborQueues::outbox`].

use super::table::{Counters, EntryState, Learned, NeighborTable, Params};
use super::{frames, NeighborQueues, TxFrame};
use spillway_shared::config::Config;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// Resolved next hops: address → MAC (what snapshot compilation reads).
pub type NeighborView = HashMap<IpAddr, [u8; 6]>;

/// One port as the resolver sends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSide {
    /// Source MAC of our frames.
    pub mac: [u8; 6],
    /// Our address on the port (ARP sender address; 0.0.0.0 = none).
    pub addr: Ipv4Addr,
    /// Requests go out here: a port some port forwards to (towards backends).
    pub forwarding: bool,
}

/// Counters of the control side besides the table's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Gratuitous ARPs queued.
    pub gratuitous: u64,
    /// Frames not queued: the outbox to worker 0 was full.
    pub outbox_full: u64,
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
    announced: Vec<Ipv4Addr>,
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

    /// One control tick at `now_ms`: learns the replies the workers handed over, runs the
    /// table's timers, queues the requests due, and (when enabled) gratuitous ARPs for
    /// VIPs not announced yet. Returns whether the resolved view changed (republish).
    pub fn tick(&mut self, cfg: &Config, queues: &NeighborQueues, now_ms: u64) -> bool {
        for q in &queues.seen {
            while let Some(s) = q.pop() {
                let addr = IpAddr::V4(s.spa);
                match self.table.on_reply(addr, s.sha, now_ms) {
                    Learned::New => tracing::info!(address = %addr, mac = %spillway_shared::net::MacAddr(s.sha), port = s.port, "next hop resolved"),
                    Learned::Changed => tracing::warn!(address = %addr, mac = %spillway_shared::net::MacAddr(s.sha), port = s.port, "next hop MAC changed"),
                    Learned::Confirmed => {}
                    Learned::Ignored => tracing::debug!(address = %addr, mac = %spillway_shared::net::MacAddr(s.sha), "ARP reply without a request of ours: ignored"),
                }
            }
        }
        let mut requests = std::mem::take(&mut self.requests);
        requests.clear();
        self.table.poll(now_ms, &mut requests);
        for a in &requests {
            let IpAddr::V4(target) = *a else { continue };
            for i in 0..self.ports.len() {
                let p = self.ports[i];
                if !p.forwarding {
                    continue;
                }
                self.queue(queues, i, frames::request(p.mac, p.addr, target));
            }
        }
        self.requests = requests;
        if self.gratuitous_arp {
            self.announce(cfg, queues);
        }
        self.refresh_view()
    }

    /// Gratuitous ARP on every port for VIPs (and port addresses) not announced yet.
    fn announce(&mut self, cfg: &Config, queues: &NeighborQueues) {
        if self.ports.is_empty() {
            return;
        }
        // IPv4 only: IPv6 addresses are announced by unsolicited Neighbor Advertisements (not
        // sent yet, docs/operations.md "IPv6").
        let mut addrs: Vec<Ipv4Addr> = cfg.services.iter().filter_map(|s| match s.vip {
            std::net::IpAddr::V4(v) => Some(v),
            std::net::IpAddr::V6(_) => None,
        }).chain(self.ports.iter().map(|p| p.addr).filter(|a| !a.is_unspecified())).collect();
        addrs.sort();
        addrs.dedup();
        for a in addrs {
            if self.announced.contains(&a) {
                continue;
            }
            self.announced.push(a);
            for i in 0..self.ports.len() {
                let mac = self.ports[i].mac;
                if self.queue(queues, i, frames::gratuitous(mac, a)) {
                    self.counters.gratuitous += 1;
                }
            }
        }
    }

    fn queue(&mut self, queues: &NeighborQueues, port: usize, bytes: [u8; super::FRAME_LEN]) -> bool {
        let ok = queues.outbox.push(TxFrame { port: port as u16, bytes }).is_ok();
        if !ok {
            self.counters.outbox_full += 1;
        }
        ok
    }

    fn refresh_view(&mut self) -> bool {
        let view: NeighborView = self.table.resolved().collect();
        let changed = view != self.view;
        self.view = view;
        changed
    }

    /// The resolved next hops.
    pub fn view(&self) -> &NeighborView {
        &self.view
    }

    /// Why `addr` is not resolved (`None` when it is, or is not wanted), as `status`
    /// shows it: `no ARP reply from 10.0.0.11 (3 requests unanswered)`.
    pub fn unresolved_reason(&self, addr: &IpAddr, now_ms: u64) -> Option<String> {
        match self.table.state(addr, now_ms)? {
            EntryState::Resolved { .. } => None,
            EntryState::Unresolved { unanswered: 0, expired: false } => Some(format!("ARP request for {addr} awaiting its first reply")),
            EntryState::Unresolved { unanswered, expired } => Some(format!(
                "no ARP reply from {addr} ({unanswered} request{} unanswered{})",
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
            ignored: c.ignored,
            timeouts: c.timeouts,
            expired: c.expired,
            changed: c.changed,
            gratuitous: self.counters.gratuitous,
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
    use crate::neighbor::ArpSeen;

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
            .map(|f| match crate::wire::parse(&f.bytes) {
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
        q.seen[1].push(ArpSeen { port: 0, spa: Ipv4Addr::new(10, 0, 0, 11), sha: [2, 0, 0, 0, 0, 0x11] }).unwrap();
        assert!(r.tick(&c, &q, 100), "resolution changes the view");
        assert_eq!(r.view().get(&"10.0.0.11".parse().unwrap()), Some(&[2, 0, 0, 0, 0, 0x11]));
        assert_eq!(r.unresolved_reason(&"10.0.0.11".parse().unwrap(), 100), None);
        assert!(drain(&q).is_empty(), "no gratuitous ARP twice, no request before the refresh");
        // An unsolicited reply for b1 with another MAC changes nothing.
        q.seen[0].push(ArpSeen { port: 0, spa: Ipv4Addr::new(10, 0, 0, 11), sha: [2, 0, 0, 0, 0, 0x99] }).unwrap();
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

    #[test]
    fn gratuitous_arp_can_be_turned_off_and_a_full_outbox_is_counted() {
        let c = cfg("gratuitous_arp = false");
        let q = NeighborQueues::new(1);
        let mut r = resolver(&c);
        r.tick(&c, &q, 0);
        assert_eq!(drain(&q).len(), 1, "only the request");
        for _ in 0..crate::neighbor::OUTBOX_CAPACITY {
            q.outbox.push(TxFrame { port: 0, bytes: [0; crate::neighbor::FRAME_LEN] }).unwrap();
        }
        r.tick(&c, &q, 500);
        assert_eq!(r.driver_counters().outbox_full, 1, "the retry did not fit");
    }
}
