//! IPv6 next hops resolved with Neighbor Discovery (RFC 4861) end to end without DPDK: the
//! worker handing Neighbor Advertisements over, the resolver's Neighbor Solicitations and
//! its rules for learning (answers to our own solicitations only, §7.2.5 flags), `status`
//! and the daemon forwarding to the learned MAC.

use super::*;
use std::net::IpAddr;
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::{PortInfo, Verdict, Worker};
use crate::wire::icmpv6::{NA_FLAG_OVERRIDE, NA_FLAG_SOLICITED, OPT_TARGET_LL, TYPE_NEIGHBOR_ADVERTISEMENT};
use crate::wire::DropReason;
use driver::{PortSide, Resolver};
use super::tests::{daemon_of, resolver, with_p0, worker, OURS};
use crate::tests_config::Toml;
use etherparse::{Icmpv6Header, Icmpv6Slice, Icmpv6Type, Ipv6HeaderSlice, PacketBuilder};
use spillway_shared::config::Config;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const B1_MAC: [u8; 6] = [2, 0, 0, 0, 0x21, 0x01];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const S_O: u8 = NA_FLAG_SOLICITED | NA_FLAG_OVERRIDE;

fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// Port p0 (fd00::2 unless `port6` says otherwise) and IPv6 service web6 on fd00::100 with
/// backend b1 = fd00::11 without `mac`.
fn config(port6: &str) -> Config {
    with_p0(Toml::new().section("neighbors", "refresh_sec = 1\nexpiry_sec = 3\nretry_ms = 200"), port6).service("web6", "fd00::100", 80, "").backend("b1", "fd00::11", "").config()
}

fn cfg() -> Config {
    config("address6 = \"fd00::2\"")
}

/// A Neighbor Advertisement frame for `target` at `mac` to `dst` with `flags`, a Target
/// Link-Layer Address option and a valid checksum (etherparse).
fn na_frame(target: Ipv6Addr, mac: [u8; 6], dst: Ipv6Addr, hop_limit: u8, flags: u8) -> Vec<u8> {
    let mut body = target.octets().to_vec();
    body.extend_from_slice(&[OPT_TARGET_LL, 1]);
    body.extend_from_slice(&mac);
    let ty = Icmpv6Type::Unknown { type_u8: TYPE_NEIGHBOR_ADVERTISEMENT, code_u8: 0, bytes5to8: [flags, 0, 0, 0] };
    let mut out = Vec::new();
    PacketBuilder::ethernet2(mac, OURS).ipv6(target.octets(), dst.octets(), hop_limit).icmpv6(ty).write(&mut out, &body).unwrap();
    let h = Icmpv6Header::with_checksum(ty, target.octets(), dst.octets(), &body).unwrap();
    assert!(Icmpv6Slice::from_slice(&out[54..]).unwrap().checksum() == h.checksum, "etherparse wrote the checksum");
    out
}

fn snapshot(c: &Config) -> crate::control::snapshot::Snapshot {
    let mut slots = crate::control::SlotMap::default();
    slots.sync(c).unwrap();
    crate::control::compile(c, &slots, crate::control::CompileInput { health: &Default::default(), states: &mut Default::default(), now_sec: 0.0, generation: 1, port_addrs: vec![0x0a00_0001] })
}

/// Worker side: a valid NA to the port's own IPv6 address with a TLLA is handed over
/// with its flags and arrival time; one to a VIP or without a control side is ignored; an
/// invalid one (hop limit 254) is `nd_invalid`; a full queue is counted.
#[test]
fn workers_hand_advertisements_for_the_port_address_over() {
    let c = cfg();
    let snap = snapshot(&c);
    let q = Arc::new(NeighborQueues::new(1));
    let mut w = worker(0, Some(q.clone()));
    let mut b = MemBuf::new(&na_frame(a6("fd00::11"), B1_MAC, a6("fd00::2"), 255, NA_FLAG_SOLICITED));
    assert_eq!(w.process(&mut b, 0, &snap, 77), Verdict::Consumed);
    let want = NeighborSeen { port: 0, addr: "fd00::11".parse().unwrap(), mac: B1_MAC, to: "fd00::2".parse().unwrap(), at_ms: 77, solicited: true, overrides: false };
    assert_eq!(q.seen[0].pop(), Some(want));
    assert_eq!(w.stats.arp_replies_seen.load(Relaxed), 1);
    let run = |w: &mut Worker, f: Vec<u8>| w.process(&mut MemBuf::new(&f), 0, &snap, 0);
    assert_eq!(run(&mut w, na_frame(a6("fd00::11"), B1_MAC, a6("fd00::100"), 255, S_O)), Verdict::Drop(DropReason::NdIgnored), "to a VIP: not an answer to a solicitation of ours");
    assert_eq!(run(&mut w, na_frame(a6("fd00::11"), B1_MAC, a6("fd00::2"), 254, S_O)), Verdict::Drop(DropReason::NdInvalid));
    assert!(q.seen[0].is_empty());
    for _ in 0..SEEN_CAPACITY {
        assert_eq!(run(&mut w, na_frame(a6("fd00::11"), B1_MAC, a6("fd00::2"), 255, S_O)), Verdict::Consumed);
    }
    assert_eq!(run(&mut w, na_frame(a6("fd00::11"), B1_MAC, a6("fd00::2"), 255, S_O)), Verdict::Drop(DropReason::NeighborQueueFull));
    let mut w = worker(0, None);
    assert_eq!(run(&mut w, na_frame(a6("fd00::11"), B1_MAC, a6("fd00::2"), 255, S_O)), Verdict::Drop(DropReason::NdIgnored), "no resolver");
}

/// Whether a queued frame is not an MLDv2 report (those go to 33:33:00:00:00:16; their
/// tests are in `driver/tests.rs`).
fn not_mld(f: &TxFrame) -> bool {
    f.bytes[..6] != [0x33, 0x33, 0, 0, 0, 0x16]
}

/// The targets of the Neighbor Solicitations in the outbox, each checked with etherparse:
/// from the port's fd00::2 and our MAC to the target's solicited-node group, hop limit
/// 255, valid checksum.
fn solicitations(q: &NeighborQueues) -> Vec<Ipv6Addr> {
    std::iter::from_fn(|| q.outbox.pop())
        .filter(not_mld)
        .map(|f| {
            let b = &f.bytes[..usize::from(f.len)];
            assert_eq!((b.len(), &b[6..12], &b[12..14]), (86, &OURS[..], &[0x86, 0xdd][..]));
            let ip = Ipv6HeaderSlice::from_slice(&b[14..]).unwrap();
            let icmp = Icmpv6Slice::from_slice(&b[54..]).unwrap();
            assert!(icmp.is_checksum_valid(ip.source(), ip.destination()));
            assert_eq!((ip.source_addr(), ip.hop_limit(), icmp.type_u8()), (a6("fd00::2"), 255, 135));
            let target = Ipv6Addr::from(<[u8; 16]>::try_from(&icmp.payload()[..16]).unwrap());
            let snm = u128::from(target) & 0xff_ffff | 0xff02_0000_0000_0000_0000_0001_ff00_0000;
            assert_eq!(u128::from(ip.destination_addr()), snm, "the solicited-node group");
            assert_eq!(&b[0..6], &crate::wire::icmpv6::multicast_mac(snm));
            target
        })
        .collect()
}

fn seen(mac: [u8; 6], at_ms: u32, solicited: bool, overrides: bool) -> NeighborSeen {
    NeighborSeen { port: 0, addr: "fd00::11".parse().unwrap(), mac, to: "fd00::2".parse().unwrap(), at_ms, solicited, overrides }
}

/// A mac-less IPv6 backend gets a Neighbor Solicitation, is not learned from an
/// unsolicited advertisement, is learned from the solicited one answering us, and (RFC
/// 4861 §7.2.5) a solicited answer without Override does not replace its known MAC while
/// one with Override does; `status` explains it in Neighbor Discovery terms.
#[test]
fn an_ipv6_next_hop_is_solicited_and_learned_from_the_answer_only() {
    let c = cfg();
    let q = NeighborQueues::new(1);
    let mut r = resolver(&c);
    let b1: IpAddr = "fd00::11".parse().unwrap();
    assert!(!r.tick(&c, &q, 0));
    assert_eq!(solicitations(&q), vec![a6("fd00::11")]);
    assert_eq!(r.unresolved_reason(&b1, 0).unwrap(), "Neighbor Solicitation for fd00::11 awaiting its first reply");
    // Unsolicited (Override set, as a host announcing itself): not an answer.
    q.seen[0].push(seen(B1_MAC, 10, false, true)).unwrap();
    assert!(!r.tick(&c, &q, 20));
    assert_eq!(r.view().get(&b1), Some(&driver::PENDING_MAC));
    assert_eq!(r.status(&c, 20).ignored, 1);
    // To another address than the port's (e.g. the VIP): misdirected.
    q.seen[0].push(NeighborSeen { to: "fd00::100".parse().unwrap(), ..seen(B1_MAC, 30, true, true) }).unwrap();
    assert!(!r.tick(&c, &q, 40));
    assert_eq!(r.driver_counters().misdirected, 1);
    // The solicited answer (Override clear is fine for a first resolution).
    q.seen[0].push(seen(B1_MAC, 90, true, false)).unwrap();
    assert!(r.tick(&c, &q, 100));
    assert_eq!(r.view().get(&b1), Some(&B1_MAC));
    assert_eq!(r.unresolved_reason(&b1, 100), None);
    assert_eq!(r.counters().replies, 1);
    // The refresh: an answer without Override and another MAC does not replace it.
    let due = 90 + table::NeighborTable::new(table::Params { refresh_ms: 1_000, expiry_ms: 3_000, retry_ms: 200 }).refresh_delay(&b1);
    assert!(!r.tick(&c, &q, due));
    assert_eq!(solicitations(&q), vec![a6("fd00::11")], "refreshed by a new solicitation");
    let other = [2, 0, 0, 0, 0x21, 0x99];
    q.seen[0].push(seen(other, due as u32 + 10, true, false)).unwrap();
    assert!(!r.tick(&c, &q, due + 20));
    assert_eq!(r.view().get(&b1), Some(&B1_MAC));
    q.seen[0].push(seen(other, due as u32 + 30, true, true)).unwrap();
    assert!(r.tick(&c, &q, due + 40), "Override set: a replaced VM is followed");
    assert_eq!(r.view().get(&b1), Some(&other));
    assert_eq!((r.counters().changed, r.status(&c, due + 40).ignored), (1, 3));
    // Silence: expired after expiry_sec, the reason in ND terms.
    let mut now = due + 40;
    while now < due + 3_100 {
        now += 50;
        r.tick(&c, &q, now);
    }
    assert!(!r.view().contains_key(&b1));
    let reason = r.unresolved_reason(&b1, now).unwrap();
    assert!(reason.starts_with("no Neighbor Advertisement from fd00::11 (") && reason.contains("solicitations unanswered; its entry expired"), "{reason}");
}

/// A port without an IPv6 address cannot solicit (never from `::`): the daemon refuses a
/// mac-less IPv6 next hop then, naming the field; with `address6`, or an IPv6 `address`,
/// on the forwarding port it is accepted.
#[test]
fn a_port_without_an_ipv6_address_cannot_resolve_ipv6_next_hops() {
    let e = crate::ctl::edits::daemon_checks(&config("")).unwrap_err();
    assert!(e.starts_with("services[0].backends[0].mac: required for the IPv6 next hop fd00::11 unless ports[0].address6 is set"), "{e}");
    crate::ctl::edits::daemon_checks(&cfg()).unwrap();
    // Two ports, p1 forwards to p0: only p0 (towards backends) counts.
    let two = |p0: &str, p1: &str| {
        let mut c = config(p0);
        let mut p = c.ports[0].clone();
        p.name = "p1".into();
        p.device = "net_null1".into();
        p.address = None;
        p.address6 = if p1.is_empty() { None } else { Some(a6(p1)) };
        p.forward_to = Some("p0".into());
        c.ports[0].forward_to = Some("p0".into());
        c.ports.push(p);
        c
    };
    let e = crate::ctl::edits::daemon_checks(&two("", "fd00::3")).unwrap_err();
    assert!(e.contains("unless ports[0].address6 is set"), "{e}");
    crate::ctl::edits::daemon_checks(&two("address6 = \"fd00::2\"", "")).unwrap();
    // And the resolver sends nothing from a port without one.
    let c = config("");
    let q = NeighborQueues::new(1);
    let mut r = resolver(&c);
    r.tick(&c, &q, 0);
    assert_eq!(std::iter::from_fn(|| q.outbox.pop()).filter(not_mld).count(), 0, "no solicitation from ::");
}

/// Requests over the per-tick limit wait and are counted `deferred` in `status`.
#[test]
fn requests_over_the_tick_limit_are_deferred_and_counted() {
    let n = REQUESTS_PER_TICK + 10;
    let c = (0..n).fold(with_p0(Toml::new().section("neighbors", ""), "address6 = \"fd00::2\"").service("web6", "fd00::100", 80, ""), |t, i| t.backend(&format!("b{i}"), &format!("fd00::1:{i:x}"), "")).config();
    let q = NeighborQueues::new(1);
    let mut r = resolver(&c);
    r.tick(&c, &q, 0);
    assert_eq!(solicitations(&q).len(), REQUESTS_PER_TICK);
    assert_eq!(r.status(&c, 0).deferred, 10);
    r.tick(&c, &q, 50);
    assert_eq!(solicitations(&q).len(), 10, "the rest on the next tick");
    assert_eq!((r.status(&c, 50).deferred, r.status(&c, 50).requests), (10, n as u64));
}

/// The daemon: a client's SYN to the IPv6 VIP is dropped as `next_hop_unresolved` until
/// the NA answering our solicitation came in through a worker, then forwarded to the
/// learned MAC.
#[test]
fn the_daemon_forwards_ipv6_traffic_to_the_learned_mac() {
    let d = daemon_of(cfg());
    let q = Arc::new(NeighborQueues::new(1));
    let mut w = worker(0, Some(q.clone()));
    let syn = || {
        let mut out = Vec::new();
        PacketBuilder::ethernet2(CLIENT_MAC, OURS).ipv6(a6("fd01::5").octets(), a6("fd00::100").octets(), 64).tcp(40_000, 80, 1, 1000).syn().write(&mut out, &[]).unwrap();
        MemBuf::new(&out)
    };
    assert_eq!(d.shared.with_snapshot(|s| w.process(&mut syn(), 0, s, 0)).unwrap(), Verdict::Drop(DropReason::NextHopUnresolved));
    d.neighbor_tick_at(0);
    let ns = std::iter::from_fn(|| d.shared.neighbors.outbox.pop()).find(not_mld).expect("a Neighbor Solicitation for b1");
    assert_eq!(&ns.bytes[62..78], &a6("fd00::11").octets(), "its target");
    assert_eq!(d.status().backends[0].members[0].unresolved.as_deref(), Some("Neighbor Solicitation for fd00::11 awaiting its first reply"));
    // The answer, through the worker (its queue is the daemon's here).
    let mut na = MemBuf::new(&na_frame(a6("fd00::11"), B1_MAC, a6("fd00::2"), 255, S_O));
    assert_eq!(d.shared.with_snapshot(|s| w.process(&mut na, 0, s, 5)).unwrap(), Verdict::Consumed);
    d.shared.neighbors.seen[0].push(q.seen[0].pop().unwrap()).unwrap();
    assert!(d.neighbor_tick_at(10), "republished with the MAC");
    let mut b = syn();
    assert_eq!(d.shared.with_snapshot(|s| w.process(&mut b, 0, s, 20)).unwrap(), Verdict::Forward);
    assert_eq!((&b.data()[0..6], &b.data()[6..12]), (&B1_MAC[..], &OURS[..]));
    let st = d.status();
    assert!(st.backends[0].members[0].unresolved.is_none());
    assert_eq!(st.neighbors.entries, vec![("fd00::11".to_string(), "02:00:00:00:21:01".to_string(), 0)]);
}
fn two_port_cfg() -> Config {
    let mut c = cfg();
    c.ports[0].forward_to = Some("p0".into());
    let mut p = c.ports[0].clone();
    p.name = "p1".into();
    p.device = "net_null1".into();
    p.address = None;
    p.address6 = Some(a6("fd00:9::2"));
    p.forward_to = Some("p0".into());
    c.ports.push(p);
    c.validate().unwrap();
    c
}

/// (Review finding.) an NA that arrives on the client-facing port p1, addressed to p0's
/// address, is handed over as if it came in on p0 and is learned, while the same
/// ARP reply on p1 is refused (arp_ignored). RFC 4861 §7.2.5: the neighbour cache is per
/// interface; docs/operations.md "Only answers count": "came in on a port Spillway sends
/// requests on".
#[test]
fn an_advertisement_received_on_another_port_is_not_learned() {
    let c = two_port_cfg();
    let mut slots = crate::control::SlotMap::default();
    slots.sync(&c).unwrap();
    let snap = crate::control::compile(&c, &slots, crate::control::CompileInput { health: &Default::default(), states: &mut Default::default(), now_sec: 0.0, generation: 1, port_addrs: vec![0x0a00_0001, 0] });
    let q = Arc::new(NeighborQueues::new(1));
    let mut w = Worker::new(0, 1024, 1, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac: OURS, forward_to: 0, addr: 0x0a00_0001 }, PortInfo { mac: OURS, forward_to: 0, addr: 0 }]);
    w.neighbors = Some(q.clone());
    // The resolver asks for b1 on p0 only.
    let mut r = Resolver::new(&c);
    r.set_ports(vec![PortSide { mac: OURS, addr: Ipv4Addr::new(10, 0, 0, 1), forwarding: true }, PortSide { mac: OURS, addr: Ipv4Addr::UNSPECIFIED, forwarding: false }]);
    r.set_config(&c, 0);
    let nq = NeighborQueues::new(1);
    r.tick(&c, &nq, 0);
    // A forged NA arrives on p1 (the client side) to p0's address.
    let evil = [2, 0, 0, 0, 0xee, 0xee];
    let mut b = MemBuf::new(&na_frame(a6("fd00::11"), evil, a6("fd00::2"), 255, S_O));
    let v = w.process(&mut b, 1, &snap, 10);
    let s = q.seen[0].pop();
    if let Some(s) = s {
        nq.seen[0].push(s).unwrap();
    }
    r.tick(&c, &nq, 20);
    let b1: IpAddr = "fd00::11".parse().unwrap();
    assert_eq!(r.view().get(&b1), Some(&driver::PENDING_MAC), "verdict {v:?}, seen {s:?}: an NA received on p1 was learned for a next hop resolved on p0");
}

/// (Review finding.) a solicited NA whose Target Link-Layer Address is all-zero (our
/// PENDING_MAC sentinel) or multicast is learned as the next hop's MAC.
#[test]
fn an_advertisement_naming_a_zero_or_group_mac_is_not_learned() {
    for bad in [[0u8; 6], [0x33, 0x33, 0, 0, 0, 1], [0xff; 6]] {
        let c = cfg();
        let q = NeighborQueues::new(1);
        let mut r = resolver(&c);
        r.tick(&c, &q, 0);
        q.seen[0].push(seen(bad, 10, true, true)).unwrap();
        r.tick(&c, &q, 20);
        let b1: IpAddr = "fd00::11".parse().unwrap();
        assert!(r.unresolved_reason(&b1, 20).is_some(), "learned {bad:02x?}: view {:?}", r.view().get(&b1));
    }
}

/// QA B46 for IPv6: an unsolicited Neighbor Advertisement with Override to all-nodes (RFC
/// 4861 §7.2.6: a host whose link-layer address changed) is handed over by the worker and
/// replaces the MAC of a resolved next hop at once; without Override, or for a next hop
/// still pending, it changes nothing.
#[test]
fn an_unsolicited_advertisement_replaces_a_resolved_mac_at_once() {
    let c = cfg();
    let snap = snapshot(&c);
    let q = Arc::new(NeighborQueues::new(1));
    let mut w = worker(0, Some(q.clone()));
    let all_nodes = a6("ff02::1");
    let new = [2, 0, 0, 0, 0x21, 0x22];
    let mut na = MemBuf::new(&na_frame(a6("fd00::11"), new, all_nodes, 255, NA_FLAG_OVERRIDE));
    assert_eq!(w.process(&mut na, 0, &snap, 5), Verdict::Consumed, "handed over");
    let announced = q.seen[0].pop().unwrap();
    assert!(announced.is_announcement() && !announced.solicited && announced.overrides, "{announced:?}");
    let mut r = resolver(&c);
    let b1: IpAddr = "fd00::11".parse().unwrap();
    assert!(!r.tick(&c, &q, 0));
    q.seen[0].push(announced).unwrap();
    assert!(!r.tick(&c, &q, 10), "pending: an announcement does not resolve it");
    assert_eq!(r.view().get(&b1), Some(&driver::PENDING_MAC));
    q.seen[0].push(seen(B1_MAC, 15, true, true)).unwrap();
    assert!(r.tick(&c, &q, 20));
    assert_eq!(r.view().get(&b1), Some(&B1_MAC));
    q.seen[0].push(NeighborSeen { overrides: false, ..announced }).unwrap();
    assert!(!r.tick(&c, &q, 30), "no Override: the known MAC stays");
    q.seen[0].push(NeighborSeen { at_ms: 35, ..announced }).unwrap();
    assert!(r.tick(&c, &q, 40), "Override: followed at once");
    assert_eq!(r.view().get(&b1), Some(&new));
    assert_eq!(r.counters().changed, 1);
}
