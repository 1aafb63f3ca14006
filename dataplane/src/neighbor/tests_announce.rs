//! A backend that comes back with a new MAC is followed at once (QA B46):
//! a gratuitous ARP for a resolved next hop replaces its MAC, and an endpoint whose health
//! went down and came back up is re-resolved before it takes traffic.

use super::*;
use crate::daemon::Daemon;
use crate::fastpath::port::MemBuf;
use crate::fastpath::worker::Verdict;
use crate::wire::DropReason;
use std::net::Ipv4Addr;

use super::tests::OURS;
const OLD: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
const NEW: [u8; 6] = [2, 0, 0, 0, 0, 0x22];
const B1: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 11);
/// Virtual start of each test, far past the daemon's real age, so a request made due "now"
/// (real clock) is due at every tick below.
const T0: u64 = 10_000;

/// Web on 10.0.0.100 with mac-less b1 = 10.0.0.11 (`tests.rs`'s daemon, 60 s refresh so
/// no refresh interferes), b1 resolved to `OLD` at `T0`.
fn daemon() -> Daemon {
    let d = super::tests::daemon_with("refresh_sec = 60\nexpiry_sec = 120\nretry_ms = 200", "");
    d.neighbor_tick_at(T0);
    assert!(requested(&d), "the first ARP request");
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, B1, OLD, Ipv4Addr::new(10, 0, 0, 1), T0 as u32 + 5)).unwrap();
    assert!(d.neighbor_tick_at(T0 + 10));
    assert_eq!(b1(&d), (true, OLD));
    d
}

/// (eligible, MAC) of b1's slot in the published snapshot.
fn b1(d: &Daemon) -> (bool, [u8; 6]) {
    d.shared.with_snapshot(|s| s.backends.iter().find(|b| b.name == "b1").map(|b| (b.healthy, b.mac)).unwrap()).unwrap()
}

/// Whether the outbox holds an ARP request for b1 (emptied).
fn requested(d: &Daemon) -> bool {
    std::iter::from_fn(|| d.shared.neighbors.outbox.pop())
        .any(|f| matches!(crate::wire::parse(&f.bytes), Ok(crate::wire::Parsed::Arp(a)) if a.oper == 1 && a.tpa == B1))
}

/// A gratuitous ARP (RFC 5227 §3) "`spa` is at `sha`", broadcast, with operation `oper`.
fn gratuitous(spa: Ipv4Addr, sha: [u8; 6], oper: u8) -> MemBuf {
    let mut f = frames::gratuitous(sha, spa);
    f[14 + 7] = oper;
    MemBuf::new(&f)
}

/// QA B46: b1 recreated with the same IP and a new MAC announces itself with a gratuitous
/// ARP reply; the next tick republishes b1 with the new MAC (the old code ignored it and
/// sent to the old MAC until the next refresh, 16-19 s in QA). An announcement for an
/// address that is not a resolved next hop changes nothing.
#[test]
fn a_gratuitous_arp_for_a_resolved_next_hop_replaces_its_mac_at_once() {
    let d = daemon();
    let mut w = super::tests::worker(0, Some(d.shared.neighbors.clone()));
    let snap = crate::control::snapshot::Snapshot::default();
    assert_eq!(w.process(&mut gratuitous(B1, NEW, 2), 0, &snap, T0 as u32 + 20), Verdict::Consumed);
    assert!(d.neighbor_tick_at(T0 + 30), "republished at once");
    assert_eq!(b1(&d), (true, NEW));
    assert_eq!(d.status().neighbors.changed, 1);
    // the same MAC again, or an address we do not resolve: nothing changes
    assert_eq!(w.process(&mut gratuitous(B1, NEW, 2), 0, &snap, T0 as u32 + 40), Verdict::Consumed);
    assert_eq!(w.process(&mut gratuitous(Ipv4Addr::new(10, 0, 0, 99), OLD, 2), 0, &snap, T0 as u32 + 40), Verdict::Consumed);
    assert!(!d.neighbor_tick_at(T0 + 50));
    assert_eq!(b1(&d), (true, NEW));
    // the request form (RFC 5227's announcement, Linux's `arp_notify`) is handed over the
    // same way by the worker (fastpath/worker.rs routes gratuitous requests to it)
    assert_eq!(w.process(&mut gratuitous(B1, OLD, 1), 0, &snap, T0 as u32 + 60), Verdict::Consumed);
    assert!(d.neighbor_tick_at(T0 + 70));
    assert_eq!(b1(&d), (true, OLD));
    // a request that is not gratuitous is not handed over
    let mut r = frames::request(OLD, B1, Ipv4Addr::new(10, 0, 0, 1));
    r[0..6].copy_from_slice(&OURS);
    let Ok(crate::wire::Parsed::Arp(a)) = crate::wire::parse(&r) else { panic!() };
    assert_eq!(w.hand_over_arp_reply(&r, &a, 0, 0), Verdict::Drop(DropReason::ArpIgnored));
}

/// An endpoint whose health goes down and comes back up takes no traffic until its next
/// hop answered a fresh ARP request: the answer's new MAC is the one published with it
/// eligible (the old code published it eligible with the old MAC at once). When that
/// request goes unanswered the known MAC is used again after `retry_ms`.
#[test]
fn an_endpoint_back_up_is_re_resolved_before_it_takes_traffic() {
    let d = daemon();
    d.set_health("web", "b1", false, None);
    assert!(!b1(&d).0);
    d.set_health("web", "b1", true, None);
    assert!(!b1(&d).0, "health up: held back until re-resolved");
    assert!(!d.neighbor_tick_at(T0 + 100));
    assert!(requested(&d), "an ARP request at once, not at the next refresh");
    d.shared.neighbors.seen[0].push(NeighborSeen::arp(0, B1, NEW, Ipv4Addr::new(10, 0, 0, 1), T0 as u32 + 105)).unwrap();
    assert!(d.neighbor_tick_at(T0 + 110));
    assert_eq!(b1(&d), (true, NEW), "eligible with the MAC that answered");
    // no answer this time: the known MAC comes back after retry_ms
    d.set_health("web", "b1", false, None);
    d.set_health("web", "b1", true, None);
    assert!(!d.neighbor_tick_at(T0 + 200));
    assert!(requested(&d));
    assert!(!d.neighbor_tick_at(T0 + 399));
    assert!(d.neighbor_tick_at(T0 + 400));
    assert_eq!(b1(&d), (true, NEW));
}
