//! The control side of next-hop resolution: which addresses the config needs resolved
//! ([`spillway_shared::neighbors::wanted`]), the [`NeighborTable`] with its timers, the
//! queues to and from the workers, and what snapshots and `status` read. Runs on the
//! control thread ([`crate::daemon::Daemon::neighbor_tick`]); nothing here touches a
//! device: frames go through [`NeighborQueues::outbox`].

use super::table::{Counters, EntryState, Learned, NeighborTable, Params};
use super::{frames, NeighborQueues, NeighborSeen, TxFrame};
use spillway_shared::config::Config;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What snapshot compilation reads of next hops: defined by [`control::compile`](mod@crate::control::compile),
/// which reads it; the resolver here writes it.
pub use crate::control::compile::{NeighborView, PENDING_MAC};

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
    /// MLDv2 report frames queued (RFC 3810: joins, leaves and the periodic reports).
    pub mld_reports: u64,
}

/// Milliseconds between periodic MLDv2 reports. Spillway does not answer queries (a port
/// without multicast flooding may never even receive them), so it refreshes its groups
/// itself, far inside the Multicast Address Listening Interval (260 s by default, RFC 3810
/// §9.4) and inside the shorter timers switches apply in practice: a Linux bridge with its
/// own querier dropped a group about 20 s after the last report in the e2e topology
/// (`scripts/e2e.sh ipv6_mld_snooping`). Cost: one frame of up to 1,270 bytes per 60
/// groups per port every 10 s.
pub const MLD_REPORT_INTERVAL_MS: u64 = 10_000;
/// Milliseconds between the repetitions of a state change (RFC 3810 §9.11, Unsolicited
/// Report Interval 1 s); it is sent [`MLD_ROBUSTNESS`] times (§9.1, Robustness Variable 2).
pub const MLD_REPEAT_MS: u64 = 1_000;
/// Times a change of our groups is reported (RFC 3810 §9.1).
pub const MLD_ROBUSTNESS: u8 = 2;

/// The IPv6 multicast groups Spillway listens to: the solicited-node group (RFC 4291
/// §2.7.1) of every IPv6 VIP and port address, sorted, without duplicates. Neighbor
/// Solicitations for those addresses go to these groups (RFC 4861 §7.2.2).
pub fn listened_groups(cfg: &Config) -> Vec<u128> {
    let mut g: Vec<u128> = cfg
        .services
        .iter()
        .map(|s| s.vip)
        .chain(cfg.ports.iter().filter_map(|p| p.address6.map(IpAddr::V6)))
        .chain(cfg.ports.iter().filter_map(|p| p.address.filter(IpAddr::is_ipv6)))
        .filter_map(|a| match a {
            IpAddr::V6(v) if !v.is_unspecified() => Some(crate::wire::icmpv6::solicited_node(u128::from(v))),
            _ => None,
        })
        .collect();
    g.sort_unstable();
    g.dedup();
    g
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

/// What the resolver reports over MLD and when (RFC 3810 §6.1).
#[derive(Debug, Default)]
struct MldState {
    /// The groups listened to now (sorted).
    groups: Vec<u128>,
    /// State-change records still to repeat: groups joined and left.
    join: Vec<u128>,
    leave: Vec<u128>,
    /// Sends of the state change left, and when the next is due.
    change_sends_left: u8,
    change_next_ms: u64,
    /// When the next current-state report of all groups is due (0: none yet).
    periodic_next_ms: u64,
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
    /// MLD reporting state ([`Resolver::mld`]); reports are sent only with
    /// `neighbors.mld_reports`.
    mld: MldState,
    /// The groups' Ethernet addresses once they changed, for the NIC's multicast filter
    /// (taken by [`Resolver::take_multicast_change`]).
    multicast_change: Option<Vec<[u8; 6]>>,
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
            mld: MldState::default(),
            multicast_change: None,
        }
    }

    /// The ports to send on (index = port index).
    pub fn set_ports(&mut self, ports: Vec<PortSide>) {
        self.ports = ports;
    }

    /// The view [`Resolver::set_config`] with `cfg` would leave, changing nothing (a dry
    /// run's edited side): a next hop the table already tracks keeps its state (resolved:
    /// its MAC; pending: [`PENDING_MAC`]; failed: absent, so its endpoints stay
    /// ineligible), one it does not track is new and starts pending.
    pub fn view_after(&self, cfg: &Config) -> NeighborView {
        let pending: std::collections::HashSet<IpAddr> = self.table.pending().collect();
        spillway_shared::neighbors::wanted(cfg)
            .into_iter()
            .filter_map(|a| match self.table.mac(&a) {
                Some(mac) => Some((a, mac)),
                None if pending.contains(&a) || self.table.state(&a, 0).is_none() => Some((a, PENDING_MAC)),
                None => None,
            })
            .collect()
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
        self.mld(cfg, queues, now_ms);
        self.refresh_view()
    }

    /// MLDv2 reports on every port (RFC 3810 §6.1): when the listened groups change, a
    /// join (CHANGE_TO_EXCLUDE {}) for the new ones and a leave (CHANGE_TO_INCLUDE {}) for
    /// the gone ones, both sent [`MLD_ROBUSTNESS`] times [`MLD_REPEAT_MS`] apart (a change
    /// during the repetitions merges into them); independently, every
    /// [`MLD_REPORT_INTERVAL_MS`] a current-state report (MODE_IS_EXCLUDE {}) of all of them,
    /// whose deadline no change moves. A report that did not fit the outbox is sent again on
    /// the next tick. Nothing is sent without IPv6 addresses, or without
    /// `neighbors.mld_reports` (the NIC filter is followed either way). A change also marks the NIC's
    /// multicast filter for reprogramming ([`Resolver::take_multicast_change`]).
    fn mld(&mut self, cfg: &Config, queues: &NeighborQueues, now_ms: u64) {
        use crate::wire::mld::{CHANGE_TO_EXCLUDE_MODE, CHANGE_TO_INCLUDE_MODE, MODE_IS_EXCLUDE};
        if self.ports.is_empty() {
            return; // not yet told where to send (set_ports): nothing is reported as sent
        }
        let want = listened_groups(cfg);
        if want != self.mld.groups {
            let m = &mut self.mld;
            let left: Vec<u128> = m.groups.iter().filter(|g| want.binary_search(g).is_err()).copied().collect();
            let joined: Vec<u128> = want.iter().filter(|g| m.groups.binary_search(g).is_err()).copied().collect();
            m.join.retain(|g| !left.contains(g));
            m.leave.retain(|g| !joined.contains(g));
            m.join.extend(joined);
            m.leave.extend(left);
            m.change_sends_left = MLD_ROBUSTNESS;
            m.change_next_ms = now_ms;
            if m.periodic_next_ms == 0 {
                m.periodic_next_ms = now_ms + MLD_REPORT_INTERVAL_MS;
            }
            let mut macs: Vec<[u8; 6]> = want.iter().map(|g| crate::wire::icmpv6::multicast_mac(*g)).collect();
            macs.push(crate::wire::icmpv6::multicast_mac(crate::wire::icmpv6::ALL_NODES));
            macs.sort_unstable();
            macs.dedup();
            self.multicast_change = Some(macs);
            m.groups = want;
        }
        if !cfg.neighbors.mld_reports {
            return;
        }
        if self.mld.change_sends_left > 0 && now_ms >= self.mld.change_next_ms {
            let (leave, join) = (std::mem::take(&mut self.mld.leave), std::mem::take(&mut self.mld.join));
            let sent = self.report(queues, &leave, CHANGE_TO_INCLUDE_MODE) & self.report(queues, &join, CHANGE_TO_EXCLUDE_MODE);
            let m = &mut self.mld;
            if sent {
                m.change_sends_left -= 1;
                m.change_next_ms = now_ms + MLD_REPEAT_MS;
            }
            if m.change_sends_left > 0 {
                (m.leave, m.join) = (leave, join);
            }
        }
        if !self.mld.groups.is_empty() && now_ms >= self.mld.periodic_next_ms {
            let groups = std::mem::take(&mut self.mld.groups);
            if self.report(queues, &groups, MODE_IS_EXCLUDE) {
                self.mld.periodic_next_ms = now_ms + MLD_REPORT_INTERVAL_MS;
            }
            self.mld.groups = groups;
        }
    }

    /// Queues reports of `groups` ([`crate::wire::mld::MAX_RECORDS`] records per frame) with
    /// `record_type` on every port; whether every frame fit the outbox (nothing to send is
    /// success).
    fn report(&mut self, queues: &NeighborQueues, groups: &[u128], record_type: u8) -> bool {
        let mut all = true;
        for chunk in groups.chunks(crate::wire::mld::MAX_RECORDS) {
            for i in 0..self.ports.len() {
                let mut f = [0u8; super::FRAME_LEN];
                match crate::wire::mld::report(&mut f, self.ports[i].mac, chunk, record_type) {
                    Ok(n) if self.queue_len(queues, i, f, n) => self.counters.mld_reports += 1,
                    _ => all = false,
                }
            }
        }
        all
    }

    /// The Ethernet addresses the NIC should receive (our solicited-node groups and
    /// all-nodes) if they changed since the last call.
    pub fn take_multicast_change(&mut self) -> Option<Vec<[u8; 6]>> {
        self.multicast_change.take()
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
        if s.is_announcement() {
            return self.learn_announcement(s, now_ms);
        }
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
        let at = arrival_ms(&s, now_ms);
        match self.table.on_reply(addr, s.mac, at) {
            Learned::New => tracing::info!(address = %addr, %mac, port = s.port, "next hop resolved"),
            Learned::Changed => tracing::warn!(address = %addr, %mac, port = s.port, "next hop MAC changed"),
            Learned::Confirmed => {}
            Learned::Ignored => tracing::debug!(address = %addr, %mac, "reply without a request of ours: ignored"),
        }
    }

    /// A gratuitous ARP or unsolicited Neighbor Advertisement a worker handed over
    /// ([`NeighborSeen::is_announcement`]): on a port we ask on, with a unicast MAC, and
    /// (NA) the Override flag, it replaces the MAC of a *resolved* next hop at once
    /// ([`NeighborTable::on_announcement`]; a backend recreated with a new MAC, QA B46);
    /// anything else is ignored and counted (`misdirected`, `bad_mac`, `not_solicited`, or
    /// the table's `ignored`).
    fn learn_announcement(&mut self, s: NeighborSeen, now_ms: u64) {
        let (addr, mac) = (s.addr, spillway_shared::net::MacAddr(s.mac));
        if !self.ports.get(usize::from(s.port)).is_some_and(|p| p.forwarding) {
            self.counters.misdirected += 1;
            return;
        }
        if s.mac == [0; 6] || s.mac[0] & 1 == 1 {
            self.counters.bad_mac += 1;
            tracing::warn!(address = %addr, %mac, port = s.port, "neighbour announcement names an all-zero or group MAC: ignored");
            return;
        }
        if !s.overrides {
            self.counters.not_solicited += 1;
            return;
        }
        match self.table.on_announcement(addr, s.mac, arrival_ms(&s, now_ms)) {
            Learned::Changed => tracing::warn!(address = %addr, %mac, port = s.port, "next hop MAC changed (gratuitous ARP or unsolicited Neighbor Advertisement)"),
            Learned::Ignored => tracing::debug!(address = %addr, %mac, "announcement for a next hop not resolved: ignored"),
            Learned::New | Learned::Confirmed => {}
        }
    }

    /// Re-resolves next hop `addr` at `now_ms` before it takes traffic again (an endpoint
    /// whose health went down and came back up: it may be a new machine with a new MAC):
    /// a request is due at once and the address leaves the view until it is answered, or
    /// until that request timed out ([`NeighborTable::revalidate`]). Returns whether the
    /// view changed (republish).
    pub fn revalidate(&mut self, addr: &IpAddr, now_ms: u64) -> bool {
        self.table.revalidate(addr, now_ms);
        self.refresh_view()
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
        let view: NeighborView = self.table.usable().chain(self.table.pending().map(|a| (a, PENDING_MAC))).collect();
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
            mld_reports: self.counters.mld_reports,
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
mod tests;

/// When the worker received `s`, on the control side's clock: the worker's u32 clock has
/// the same epoch, so the signed distance to `now_ms`.
fn arrival_ms(s: &NeighborSeen, now_ms: u64) -> u64 {
    (now_ms as i64 + i64::from(s.at_ms.wrapping_sub(now_ms as u32) as i32)).max(0) as u64
}
