//! Tests of the resolver (`driver.rs`): requests, learning rules, announcements, MLD.
use super::*;
use crate::neighbor::tests::{resolver, with_p0, OURS};
use crate::neighbor::NeighborSeen;
use crate::tests_config::Toml;

/// `[neighbors]` with timers 2 s, 6 s and 500 ms, gratuitous ARP on unless `neighbors`
/// (more lines of the section) says otherwise; `first` (ports and services ahead of ours);
/// then port p0 and service web on 10.0.0.100:80 with b1 = 10.0.0.11 (no `mac`) and
/// b2 = 10.0.0.12 (02:00:00:00:00:12).
fn cfg_after(neighbors: &str, first: impl FnOnce(Toml) -> Toml) -> Config {
    let neighbors = if neighbors.contains("gratuitous_arp") { neighbors.to_string() } else { format!("gratuitous_arp = true\n{neighbors}") };
    let t = first(Toml::new().section("neighbors", format!("refresh_sec = 2\nexpiry_sec = 6\nretry_ms = 500\n{neighbors}").trim_end()));
    with_p0(t, "").service("web", "10.0.0.100", 80, "").backend("b1", "10.0.0.11", "").backend("b2", "10.0.0.12", "mac = \"02:00:00:00:00:12\"").config()
}

/// [`cfg_after`] with nothing first.
fn cfg(neighbors: &str) -> Config {
    cfg_after(neighbors, |t| t)
}

/// [`cfg_after`] with port p1 (IPv6 fd00::2 only) and service web6 on fd00::100:80 with
/// v1 = fd00:21::1 (02:00:00:00:21:01) first.
fn cfg_v6_first(neighbors: &str) -> Config {
    cfg_after(neighbors, |t| t.port("p1", "net_null1", "address6 = \"fd00::2\"").service("web6", "fd00::100", 80, "").backend("v1", "fd00:21::1", "mac = \"02:00:00:00:21:01\""))
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

/// an IPv6 VIP and a port's IPv6 address are announced at start with
/// an unsolicited Neighbor Advertisement (RFC 4861 §7.2.6) to all-nodes, 86 bytes,
/// Solicited clear, Override set, our MAC in the Target Link-Layer Address option, a
/// valid checksum (checked with etherparse); once each, like the gratuitous ARPs.
#[test]
fn ipv6_addresses_are_announced_with_unsolicited_neighbor_advertisements() {
    let c = cfg_v6_first("gratuitous_arp = true");
    let q = NeighborQueues::new(1);
    let mut r = resolver(&c);
    r.tick(&c, &q, 0);
    let frames: Vec<TxFrame> = std::iter::from_fn(|| q.outbox.pop()).collect();
    let mut targets = Vec::new();
    for f in frames.iter().filter(|f| f.bytes[12..14] == [0x86, 0xdd] && f.bytes[..6] != [0x33, 0x33, 0, 0, 0, 0x16]) {
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


/// The MLDv2 frames of the outbox: (record type, groups) of each, checked as reports.
fn mld_reports(q: &NeighborQueues) -> Vec<(u8, Vec<u128>)> {
    std::iter::from_fn(|| q.outbox.pop())
        .filter(|f| f.bytes[..6] == [0x33, 0x33, 0, 0, 0, 0x16])
        .map(|f| {
            let b = &f.bytes[..usize::from(f.len)];
            let ip = etherparse::Ipv6HeaderSlice::from_slice(&b[14..]).unwrap();
            assert_eq!((ip.hop_limit(), ip.next_header().0), (1, 0), "hop limit 1, Hop-by-Hop (Router Alert) first");
            assert_eq!(u128::from(ip.source_addr()), crate::wire::mld::link_local(OURS), "from our link-local address");
            let m = &b[14 + 48..];
            assert_eq!(m[0], 143);
            let n = usize::from(u16::from_be_bytes([m[6], m[7]]));
            let t = m[8];
            let groups = (0..n).map(|i| u128::from_be_bytes(m[8 + 20 * i + 4..8 + 20 * i + 20].try_into().unwrap())).collect();
            (t, groups)
        })
        .collect()
}

#[test]
fn mld_joins_repeats_refreshes_and_leaves_the_solicited_node_groups() {
    use crate::wire::icmpv6::solicited_node;
    use crate::wire::mld::{CHANGE_TO_EXCLUDE_MODE, CHANGE_TO_INCLUDE_MODE, MODE_IS_EXCLUDE};
    let v6 = |s: &str| u128::from(s.parse::<std::net::Ipv6Addr>().unwrap());
    let c4 = cfg("");
    let q = NeighborQueues::new(1);
    let mut r = resolver(&c4);
    r.tick(&c4, &q, 0);
    assert!(mld_reports(&q).is_empty(), "no IPv6 address: no MLD");
    assert!(r.take_multicast_change().is_none());
    let c = cfg_v6_first("gratuitous_arp = true\nmld_reports = true");
    let groups = vec![solicited_node(v6("fd00::2")), solicited_node(v6("fd00::100"))];
    r.tick(&c, &q, 10);
    assert_eq!(mld_reports(&q), vec![(CHANGE_TO_EXCLUDE_MODE, groups.clone())], "joined at once");
    let macs = r.take_multicast_change().expect("NIC filter to program");
    assert!(macs.contains(&[0x33, 0x33, 0xff, 0, 0, 2]) && macs.contains(&[0x33, 0x33, 0xff, 0, 1, 0]) && macs.contains(&[0x33, 0x33, 0, 0, 0, 1]), "{macs:?}");
    r.tick(&c, &q, 500);
    assert!(mld_reports(&q).is_empty());
    r.tick(&c, &q, 1010);
    assert_eq!(mld_reports(&q), vec![(CHANGE_TO_EXCLUDE_MODE, groups.clone())], "the change sent again 1 s later (robustness 2)");
    r.tick(&c, &q, 6_000);
    assert!(mld_reports(&q).is_empty());
    r.tick(&c, &q, 10_010);
    assert_eq!(mld_reports(&q), vec![(MODE_IS_EXCLUDE, groups.clone())], "current state every 10 s");
    assert!(r.take_multicast_change().is_none(), "unchanged groups: the NIC is not reprogrammed");
    // a live edit moves the VIP: the new group is joined, the old one left, both twice, and
    // the periodic deadline does not move
    let moved = Config::from_toml(&c.to_toml().replace("fd00::100", "fd00::1:200")).unwrap();
    let change = vec![(CHANGE_TO_INCLUDE_MODE, vec![solicited_node(v6("fd00::100"))]), (CHANGE_TO_EXCLUDE_MODE, vec![solicited_node(v6("fd00::1:200"))])];
    for t in [12_000, 13_000] {
        r.tick(&moved, &q, t);
        let mut got = mld_reports(&q);
        got.sort();
        assert_eq!(got, change, "at {t}");
    }
    assert!(r.take_multicast_change().is_some_and(|m| m.contains(&[0x33, 0x33, 0xff, 1, 2, 0]) && !m.contains(&[0x33, 0x33, 0xff, 0, 1, 0])));
    r.tick(&moved, &q, 14_000);
    assert!(mld_reports(&q).is_empty(), "a change is sent twice only");
    // a full outbox: the periodic report waits for room and goes out on the next tick
    while q.outbox.push(TxFrame { port: 0, bytes: [0; crate::neighbor::FRAME_LEN], len: 60 }).is_ok() {}
    r.tick(&moved, &q, 20_010);
    assert!(mld_reports(&q).is_empty());
    r.tick(&moved, &q, 20_060);
    let moved_groups = vec![solicited_node(v6("fd00::2")), solicited_node(v6("fd00::1:200"))];
    assert_eq!(mld_reports(&q), vec![(MODE_IS_EXCLUDE, moved_groups)], "retried once there is room");
    assert_eq!(r.status(&moved, 20_060).mld_reports, 8, "join twice, one refresh, leave + join twice, one refresh");
}

/// `view_after` (a dry run's next hops) is the view `set_config` then leaves: a failed
/// next hop stays failed (QA: the dry run made it pending again, so an unresolved backend
/// read as eligible in every dry run), a resolved one keeps its MAC, a new one is pending,
/// one no longer wanted goes.
#[test]
fn view_after_predicts_set_config() {
    let c = cfg("gratuitous_arp = false");
    let q = NeighborQueues::new(1);
    let mut r = resolver(&c);
    for now in (0..=2_000).step_by(50) {
        r.tick(&c, &q, now);
    }
    let b1: IpAddr = "10.0.0.11".parse().unwrap();
    assert_eq!(r.view().get(&b1), None, "b1 failed");
    // b3 new without a MAC; b2 loses its MAC (its next hop is now resolved)
    let mut edited = c.clone();
    let mut b3 = edited.services[0].backends[0].clone();
    b3.name = "b3".into();
    b3.address = "10.0.0.13".parse().unwrap();
    edited.services[0].backends.push(b3);
    edited.services[0].backends[1].mac = None;
    edited.validate().unwrap();
    let b3: IpAddr = "10.0.0.13".parse().unwrap();
    assert!(edited.services[0].backends.iter().any(|b| b.name == "b3"), "the edit adds b3");
    for (cfg, now) in [(&edited, 2_050), (&c, 2_100), (&edited, 2_150)] {
        let predicted = r.view_after(cfg);
        r.set_config(cfg, now);
        assert_eq!(r.view(), &predicted, "after set_config at {now}");
        assert_eq!(predicted.get(&b1), None, "b1 stays failed");
    }
    assert_eq!(r.view().get(&b3), Some(&PENDING_MAC), "b3 is new: pending");
}
