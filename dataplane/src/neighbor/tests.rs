//! Next-hop resolution end to end without DPDK: worker hand-over of ARP replies, worker 0
//! sending the control side's frames, and the daemon turning replies into snapshots. Also
//! the set-up the other neighbour tests share (`tests_nd.rs`, `tests_announce.rs`,
//! `driver/tests.rs`): our MAC, port p0's side, a resolver, a worker and a daemon.

use super::*;
use crate::daemon::Daemon;
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, MemPort, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::{PortInfo, Verdict, Worker};
use crate::tests_config::Toml;
use crate::wire::DropReason;
use spillway_shared::config::Config;
use std::sync::atomic::Ordering::Relaxed;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Our MAC, on every port of the tests.
pub(super) const OURS: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// Port p0's side for the resolver: our MAC, address 10.0.0.1, towards the backends.
pub(super) fn p0_side() -> driver::PortSide {
    driver::PortSide { mac: OURS, addr: Ipv4Addr::new(10, 0, 0, 1), forwarding: true }
}

/// A resolver of `c` sending on port p0 ([`p0_side`]).
pub(super) fn resolver(c: &Config) -> driver::Resolver {
    let mut r = driver::Resolver::new(c);
    r.set_ports(vec![p0_side()]);
    r.set_config(c, 0);
    r
}

/// `t` and then port p0 on net_null0 at 10.0.0.1, with `lines`.
pub(super) fn with_p0(t: Toml, lines: &str) -> Toml {
    t.port("p0", "net_null0", format!("address = \"10.0.0.1\"\n{lines}").trim_end())
}

/// A daemon of `cfg` (which must pass the daemon's checks) with one worker, its resolver
/// sending on port p0 ([`p0_side`]).
pub(super) fn daemon_of(cfg: Config) -> Daemon {
    crate::ctl::edits::daemon_checks(&cfg).unwrap();
    let d = Daemon::new(cfg, 1, vec![0x0a00_0001], Box::new(|_| Default::default())).unwrap();
    d.control.lock().unwrap().neighbors.set_ports(vec![p0_side()]);
    d
}

/// An Ethernet ARP reply "`spa` is at `sha`" to us.
fn reply(spa: [u8; 4], sha: [u8; 6]) -> MemBuf {
    let mut f = frames::request(sha, Ipv4Addr::from(spa), Ipv4Addr::new(10, 0, 0, 1));
    f[0..6].copy_from_slice(&OURS);
    f[14 + 7] = 2; // ar$op = reply
    MemBuf::new(&f)
}

/// Worker `id` with port p0 (our MAC, 10.0.0.1) handing ARP replies and Neighbor
/// Advertisements to `queues` (none: no control side).
pub(super) fn worker(id: usize, queues: Option<Arc<NeighborQueues>>) -> Worker {
    let mut w = Worker::new(id, 1024, 1, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac: OURS, forward_to: 0, addr: 0x0a00_0001 }]);
    w.neighbors = queues;
    w
}

#[test]
fn workers_hand_arp_replies_to_their_own_queue_and_count_a_full_one() {
    let q = Arc::new(NeighborQueues::new(2));
    let snap = crate::control::snapshot::Snapshot::default();
    let mut w1 = worker(1, Some(q.clone()));
    let mut b = reply([10, 0, 0, 11], [2, 0, 0, 0, 0, 0x11]);
    assert_eq!(w1.process(&mut b, 0, &snap, 0), Verdict::Consumed);
    assert_eq!(q.seen[1].pop(), Some(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 11), [2, 0, 0, 0, 0, 0x11], Ipv4Addr::new(10, 0, 0, 1), 0)));
    assert!(q.seen[0].is_empty(), "worker 1 uses its own queue");
    assert_eq!(w1.stats.arp_replies_seen.load(Relaxed), 1);
    for _ in 0..SEEN_CAPACITY {
        assert_eq!(w1.process(&mut reply([10, 0, 0, 11], [2; 6]), 0, &snap, 0), Verdict::Consumed);
    }
    assert_eq!(w1.process(&mut reply([10, 0, 0, 11], [2; 6]), 0, &snap, 0), Verdict::Drop(DropReason::NeighborQueueFull));
    // Without a control side, replies are ignored as before.
    let mut w = worker(0, None);
    assert_eq!(w.process(&mut reply([10, 0, 0, 11], [2; 6]), 0, &snap, 0), Verdict::Drop(DropReason::ArpIgnored));
}

#[test]
fn worker_sends_control_frames_in_port_buffers() {
    let q = NeighborQueues::new(1);
    let mut w = worker(0, None);
    let mut ports = vec![MemPort::new(OURS)];
    let f = frames::request(OURS, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 11));
    q.outbox.push(TxFrame { port: 0, bytes: f, len: 60 }).unwrap();
    q.outbox.push(TxFrame { port: 7, bytes: f, len: 60 }).unwrap();
    w.send_control_frames(&mut ports, &q.outbox);
    assert_eq!(ports[0].tx.len(), 1);
    assert_eq!(ports[0].tx[0].data(), &f[..60], "only the frame's length is sent");
    assert_eq!((w.stats.control_tx.load(Relaxed), w.stats.control_tx_failed.load(Relaxed), w.stats.tx.load(Relaxed)), (1, 1, 1));
    assert!(q.outbox.is_empty());
}

fn daemon(extra_backend: &str) -> Daemon {
    daemon_with("refresh_sec = 1\nexpiry_sec = 3\nretry_ms = 200", extra_backend)
}

/// Service web on 10.0.0.100 with b1 = 10.0.0.11 (no `mac`; `extra_backend` lines added to
/// it), port p0 10.0.0.1, the `[neighbors]` timers `timers`, no gratuitous ARP.
pub(super) fn daemon_with(timers: &str, extra_backend: &str) -> Daemon {
    let cfg = with_p0(Toml::new().section("neighbors", &format!("{timers}\ngratuitous_arp = false")), "")
        .service("web", "10.0.0.100", 80, "")
        .backend("b1", "10.0.0.11", extra_backend)
        .config();
    daemon_of(cfg)
}

fn slot_of_b1(d: &Daemon) -> (bool, [u8; 6]) {
    d.shared.with_snapshot(|s| s.backends.iter().find(|b| b.name == "b1").map(|b| (b.healthy, b.mac)).unwrap()).unwrap()
}

#[test]
fn a_backend_without_mac_is_pending_until_resolved_then_follows_its_mac() {
    let d = daemon("");
    assert_eq!(slot_of_b1(&d), (true, [0; 6]), "pending its first reply: eligible, all-zero MAC");
    assert!(d.status().backends[0].healthy);
    assert!(!d.neighbor_tick_at(0), "nothing learned yet");
    let req = d.shared.neighbors.outbox.pop().expect("an ARP request for b1");
    let Ok(crate::wire::Parsed::Arp(a)) = crate::wire::parse(&req.bytes) else { panic!() };
    assert_eq!((a.oper, a.tpa), (1, Ipv4Addr::new(10, 0, 0, 11)));
    let reason = d.status().backends[0].members[0].unresolved.clone().unwrap();
    assert_eq!(reason, "ARP request for 10.0.0.11 awaiting its first reply");
    // The reply, through the worker's queue: republished with the MAC.
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 11), [2, 0, 0, 0, 0, 0x11], Ipv4Addr::new(10, 0, 0, 1), 90)).unwrap();
    let gen = d.control.lock().unwrap().generation;
    assert!(d.neighbor_tick_at(100));
    assert_eq!(d.control.lock().unwrap().generation, gen + 1);
    assert_eq!(slot_of_b1(&d), (true, [2, 0, 0, 0, 0, 0x11]));
    let st = d.status();
    assert!(st.backends[0].healthy && st.backends[0].members[0].unresolved.is_none());
    assert_eq!(st.neighbors.replies, 1);
    assert_eq!(st.neighbors.entries, vec![("10.0.0.11".to_string(), "02:00:00:00:00:11".to_string(), 0)]);
    // After refresh_sec (less its jitter) the next request goes out; a new MAC in its reply is followed.
    let p = table::Params { refresh_ms: 1_000, expiry_ms: 3_000, retry_ms: 200 };
    let due = 90 + table::NeighborTable::new(p).refresh_delay(&"10.0.0.11".parse().unwrap());
    assert!(!d.neighbor_tick_at(due - 1));
    assert!(d.shared.neighbors.outbox.is_empty(), "no request before its refresh time");
    assert!(!d.neighbor_tick_at(due));
    let refresh = d.shared.neighbors.outbox.pop().expect("the refresh request");
    assert_eq!(refresh.bytes, req.bytes);
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 11), [2, 0, 0, 0, 0, 0x22], Ipv4Addr::new(10, 0, 0, 1), due as u32 + 40)).unwrap();
    assert!(d.neighbor_tick_at(due + 50));
    assert_eq!(slot_of_b1(&d), (true, [2, 0, 0, 0, 0, 0x22]), "a replaced VM is followed");
    assert_eq!(d.status().neighbors.changed, 1);
    // Silence from then on: requests every retry_ms, the entry expires 3 s after the last
    // reply, and the backend is not eligible any more.
    let mut t = due + 50;
    while t < due + 3_050 {
        t += 50;
        assert!(!d.neighbor_tick_at(t) || t == due + 3_050, "only the expiry republishes ({t})");
    }
    assert!(!slot_of_b1(&d).0, "expired: not eligible");
    let reason = d.status().backends[0].members[0].unresolved.clone().unwrap();
    assert!(reason.starts_with("no ARP reply from 10.0.0.11 (") && reason.contains("its entry expired"), "{reason}");
}

/// at start (empty connection table) a mid-stream packet whose backend's
/// next hop is still pending is dropped, not re-picked to a resolved backend, and not
/// recorded: the connection is recorded on its own backend once that resolves (restart
/// keeps connections), or re-picked if it fails. A SYN dropped so is not a new connection
/// until delivered.
#[test]
fn connections_keep_their_backend_while_its_next_hop_is_pending() {
    let d = daemon("[[services.backends]]\nname = \"b2\"\naddress = \"10.0.0.12\"");
    let (m1, m2) = ([2, 0, 0, 0, 0, 0x11], [2, 0, 0, 0, 0, 0x12]);
    let us = Ipv4Addr::new(10, 0, 0, 1);
    d.neighbor_tick_at(0);
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 12), m2, us, 5)).unwrap();
    assert!(d.neighbor_tick_at(10), "b2 resolved, b1 pending");
    let mut w = worker(0, None);
    let mut to_b1 = Vec::new();
    for port in 40_000..40_064u16 {
        let v = d.shared.with_snapshot(|s| w.process(&mut tcp(port, crate::wire::tcp_flags::ACK), 0, s, 20)).unwrap();
        match v {
            Verdict::Drop(DropReason::NextHopUnresolved) => to_b1.push(port),
            other => assert_eq!(other, Verdict::Forward),
        }
    }
    assert!(!to_b1.is_empty(), "flows of b1 are dropped while pending, not moved to b2");
    // Not recorded either: a restart never pins a connection to a next hop that may never
    // answer (fresh-user finding: TCP keeps connections on unhealthy backends).
    assert_eq!(w.ct.live(20), 64 - to_b1.len(), "only the flows of the resolved b2 are recorded");
    let syn_port = 41_000..;
    let syn_port = syn_port.take(200).find(|p| {
        let mut probe = worker(9, None);
        d.shared.with_snapshot(|s| probe.process(&mut tcp(*p, crate::wire::tcp_flags::SYN), 0, s, 20)).unwrap() == Verdict::Drop(DropReason::NextHopUnresolved)
    }).expect("a SYN towards b1");
    let new_before = w.stats.new_connections.load(Relaxed);
    let v = d.shared.with_snapshot(|s| w.process(&mut tcp(syn_port, crate::wire::tcp_flags::SYN), 0, s, 20)).unwrap();
    assert_eq!(v, Verdict::Drop(DropReason::NextHopUnresolved));
    assert_eq!(w.stats.new_connections.load(Relaxed), new_before, "a SYN dropped as next_hop_unresolved is no new connection");
    // b1's first request timed out at 200 and was sent again at 250; its reply comes.
    d.neighbor_tick_at(250);
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 11), m1, us, 260)).unwrap();
    assert!(d.neighbor_tick_at(300));
    for port in &to_b1 {
        let mut b = tcp(*port, crate::wire::tcp_flags::ACK);
        let v = d.shared.with_snapshot(|s| w.process(&mut b, 0, s, 310)).unwrap();
        assert_eq!((v, &b.data()[0..6]), (Verdict::Forward, &m1[..]), "port {port} reaches b1, its own backend");
    }
    let mut b = tcp(syn_port, crate::wire::tcp_flags::SYN);
    assert_eq!(d.shared.with_snapshot(|s| w.process(&mut b, 0, s, 320)).unwrap(), Verdict::Forward);
    // Each flow is counted once, when the table records it: the mid-stream flows of b1
    // (not recorded while b1 was pending) on their first delivered packet, and the SYN.
    assert_eq!(w.stats.new_connections.load(Relaxed), new_before + to_b1.len() as u64 + 1, "the dropped SYN was not counted, its retransmission is");

}

#[test]
fn configured_macs_are_never_asked_and_stay_eligible() {
    let d = daemon("mac = \"02:00:00:00:00:0b\"");
    assert_eq!(slot_of_b1(&d), (true, [2, 0, 0, 0, 0, 0x0b]));
    assert!(!d.neighbor_tick_at(0));
    assert!(d.shared.neighbors.outbox.is_empty());
    assert!(d.status().neighbors.entries.is_empty());
}

/// IPIP towards routed backends: with `ports[].gateway` the backends' slots carry the
/// gateway's resolved MAC, and only the gateway is asked; L2 DSR backends are asked
/// themselves.
#[test]
fn encapsulated_traffic_goes_to_the_gateway_mac() {
    let cfg = with_p0(Toml::new().section("neighbors", "gratuitous_arp = false"), "gateway = \"10.0.0.254\"")
        .service("tun", "10.0.0.100", 80, "forwarding_mode = \"IPIP\"")
        .backend("r1", "192.168.7.1", "")
        .backend("r2", "192.168.8.1", "")
        .service("dsr", "10.0.0.101", 80, "")
        .backend("l1", "10.0.0.11", "")
        .config();
    let d = daemon_of(cfg);
    d.neighbor_tick_at(0);
    let asked: Vec<Ipv4Addr> = std::iter::from_fn(|| d.shared.neighbors.outbox.pop())
        .map(|f| match crate::wire::parse(&f.bytes) {
            Ok(crate::wire::Parsed::Arp(a)) => a.tpa,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(asked, vec![Ipv4Addr::new(10, 0, 0, 11), Ipv4Addr::new(10, 0, 0, 254)], "the gateway, not the routed backends");
    let gw = [2, 0, 0, 0, 0, 0xfe];
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 254), gw, Ipv4Addr::new(10, 0, 0, 1), 5)).unwrap();
    assert!(d.neighbor_tick_at(10));
    let slots: Vec<(String, bool, [u8; 6])> = d.shared.with_snapshot(|s| s.backends.iter().filter(|b| b.present).map(|b| (b.name.clone(), b.healthy, b.mac)).collect()).unwrap();
    assert!(slots.contains(&("r1".into(), true, gw)) && slots.contains(&("r2".into(), true, gw)), "{slots:?}");
    assert!(slots.contains(&("l1".into(), true, [0; 6])), "the L2 DSR backend waits for its own reply (pending): {slots:?}");
}

/// A TCP SYN from 10.1.0.5 to 10.0.0.100:80.
fn syn() -> MemBuf {
    tcp(40000, crate::wire::tcp_flags::SYN)
}

/// A TCP segment with `flags` from 10.1.0.5:`sport` to 10.0.0.100:80.
fn tcp(sport: u16, flags: u8) -> MemBuf {
    let mut f = vec![0u8; 54];
    f[0..6].copy_from_slice(&OURS);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&40u16.to_be_bytes());
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 1, 0, 5]);
    f[30..34].copy_from_slice(&[10, 0, 0, 100]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[46] = 0x50;
    f[47] = flags;
    MemBuf::new(&f)
}

/// Nothing eligible but an unresolved endpoint (the last-resort table keeps it): the
/// worker never sends to an all-zero MAC, it drops with its own reason; once resolved
/// the same flow goes to the learned MAC.
#[test]
fn packets_for_an_unresolved_next_hop_are_dropped_by_name() {
    let d = daemon("");
    let mut w = worker(0, None);
    let v = d.shared.with_snapshot(|s| w.process(&mut syn(), 0, s, 0)).unwrap();
    assert_eq!(v, Verdict::Drop(DropReason::NextHopUnresolved));
    d.neighbor_tick_at(0);
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, Ipv4Addr::new(10, 0, 0, 11), [2, 0, 0, 0, 0, 0x11], Ipv4Addr::new(10, 0, 0, 1), 5)).unwrap();
    assert!(d.neighbor_tick_at(10));
    let mut b = syn();
    let v = d.shared.with_snapshot(|s| w.process(&mut b, 0, s, 20)).unwrap();
    assert_eq!(v, Verdict::Forward);
    assert_eq!(&b.data()[0..6], &[2, 0, 0, 0, 0, 0x11]);
}

/// A live edit that adds a backend without `mac` starts its resolution at once; removing
/// it stops asking.
#[test]
fn live_edits_start_and_stop_resolution() {
    let d = daemon("mac = \"02:00:00:00:00:0b\"");
    assert!(!d.neighbor_tick_at(0));
    assert!(d.shared.neighbors.outbox.is_empty());
    let add = spillway_shared::proto::Request::BackendAdd {
        service: "web".into(),
        name: "b2".into(),
        fields: vec![("address".into(), "\"10.0.0.12\"".into())],
        if_generation: None,
    };
    let r = d.edit_request(add);
    assert!(matches!(r, spillway_shared::proto::Response::Applied(_)), "{r:?}");
    // The edit starts the entry at the daemon's real clock: tick after it (a fixed 10 ms
    // raced with a loaded machine).
    d.neighbor_tick_at(u64::from(d.now_ms()) + 10);
    let f = d.shared.neighbors.outbox.pop().expect("a request for the new backend");
    let Ok(crate::wire::Parsed::Arp(a)) = crate::wire::parse(&f.bytes) else { panic!() };
    assert_eq!(a.tpa, Ipv4Addr::new(10, 0, 0, 12));
    let st = d.status();
    let b2 = st.backends.iter().find(|b| b.backend == "b2").unwrap();
    assert!(b2.healthy && b2.members[0].unresolved.is_some(), "pending: eligible, shown unresolved: {b2:?}");
    let rm = spillway_shared::proto::Request::BackendRemove { service: "web".into(), name: "b2".into(), if_generation: None };
    assert!(matches!(d.edit_request(rm), spillway_shared::proto::Response::Applied(_)));
    d.neighbor_tick_at(u64::from(d.now_ms()) + 2_000);
    assert!(d.shared.neighbors.outbox.is_empty(), "no request for a removed backend");
    assert!(d.status().neighbors.entries.is_empty());
}

/// Live `explain` decides over the same health as the snapshot and `status`: an endpoint
/// whose next hop failed resolution gets no share, and the pick agrees.
#[test]
fn explain_agrees_with_status_on_a_failed_next_hop() {
    let d = daemon("[[services.backends]]\nname = \"b2\"\naddress = \"10.0.0.12\"\nmac = \"02:00:00:00:00:12\"");
    let mut republished = false;
    for t in (0..=700).step_by(50) {
        republished |= d.neighbor_tick_at(t);
    }
    assert!(republished, "b1 failed after 3 × retry_ms");
    let st = d.status();
    assert!(!st.backends[0].healthy && st.backends[1].healthy, "status: b1 not eligible");
    for port in 40_000..40_020u16 {
        let spillway_shared::proto::Response::Explain(r) = d.explain("10.1.0.5".parse().unwrap(), port, None, None) else { panic!() };
        assert_eq!(r.endpoint_shares.iter().map(|(b, _, _)| b.as_str()).collect::<Vec<_>>(), vec!["b2"], "{r:?}");
        assert_eq!(r.backend.as_deref(), Some("b2"));
    }
}

/// An ARP request for our port address is answered only from a valid sender (RFC 826,
/// RFC 5227): `ar$sha` individual, non-zero and equal to the Ethernet source; `ar$spa`
/// unicast (or 0.0.0.0, an ARP Probe, which is answered) and not one of our addresses.
/// Replies from such senders are not handed to the neighbour table either.
#[test]
fn arp_from_bogus_or_conflicting_senders_is_neither_answered_nor_learned() {
    let q = Arc::new(NeighborQueues::new(1));
    let mut snap = crate::control::snapshot::Snapshot::default();
    snap.arp_addrs.insert(u32::from(Ipv4Addr::new(10, 0, 0, 100)), ());
    let mut w = worker(0, Some(q.clone()));
    let station = [2, 0, 0, 0, 0, 0x11];
    // A request from `src` (Ethernet) with sender `sha`/`spa`, for our port address.
    let request = |src: [u8; 6], sha: [u8; 6], spa: [u8; 4]| {
        let mut f = frames::request(sha, Ipv4Addr::from(spa), Ipv4Addr::new(10, 0, 0, 1));
        f[6..12].copy_from_slice(&src);
        MemBuf::new(&f)
    };
    let mut ok = request(station, station, [10, 0, 0, 11]);
    assert_eq!(w.process(&mut ok, 0, &snap, 0), Verdict::Reply);
    assert_eq!(&ok.data()[0..6], &station, "the reply goes to the requester");
    let mut probe = request(station, station, [0, 0, 0, 0]);
    assert_eq!(w.process(&mut probe, 0, &snap, 0), Verdict::Reply, "an ARP Probe (RFC 5227 §2.1.1) is answered");
    let bogus = [
        ("broadcast sender hw", request(station, [0xff; 6], [10, 0, 0, 11])),
        ("multicast sender hw", request(station, [0x01, 0, 0x5e, 0, 0, 1], [10, 0, 0, 11])),
        ("zero sender hw", request(station, [0; 6], [10, 0, 0, 11])),
        ("sender hw is another station", request(station, [2, 0, 0, 0, 0x99, 0x99], [10, 0, 0, 11])),
        ("broadcast sender", request(station, station, [255, 255, 255, 255])),
        ("multicast sender", request(station, station, [224, 0, 0, 1])),
        ("loopback sender", request(station, station, [127, 0, 0, 1])),
        ("this-network sender", request(station, station, [0, 1, 2, 3])),
        ("reserved sender", request(station, station, [240, 0, 0, 1])),
        ("sender claims our port address", request(station, station, [10, 0, 0, 1])),
        ("sender claims a VIP", request(station, station, [10, 0, 0, 100])),
    ];
    for (what, mut f) in bogus {
        assert_eq!(w.process(&mut f, 0, &snap, 0), Verdict::Drop(DropReason::ArpIgnored), "{what}");
    }
    assert_eq!(w.stats.arp_replies.load(Relaxed), 2);
    // Replies: a valid one is handed over; the bogus ones are not.
    assert_eq!(w.process(&mut reply([10, 0, 0, 11], station), 0, &snap, 0), Verdict::Consumed);
    assert!(q.seen[0].pop().is_some());
    let mut other_hw = reply([10, 0, 0, 11], station);
    other_hw.data_mut()[6..12].copy_from_slice(&[2, 0, 0, 0, 0x99, 0x99]);
    for (what, mut f) in [("sender hw is another station", other_hw), ("broadcast sender", reply([255; 4], station)), ("zero sender", reply([0; 4], station)), ("sender claims a VIP", reply([10, 0, 0, 100], station))] {
        assert_eq!(w.process(&mut f, 0, &snap, 0), Verdict::Drop(DropReason::ArpIgnored), "reply: {what}");
    }
    assert!(q.seen[0].is_empty(), "nothing learned from bogus replies");
    assert_eq!(w.stats.arp_replies_seen.load(Relaxed), 1);
}
