//! Over 600 lines: one integration test per public capture (IPv4, IPv6, jumbo) with its independent checks, kept together so every case reads the same way.
//! The captures of `tests/packets/` replayed through the real `spillway` binary on a
//! `net_pcap` port; what it sent is read back with an independent parser (etherparse and
//! the pcap reader of `common`), and checked against the behaviour of the README table and
//! the daemon's final counters.

mod common;

use common::*;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Frames sent towards backends: (backend index, frame).
fn backend_of(frame: &[u8]) -> usize {
    assert_eq!(&frame[6..12], &LB_MAC, "source MAC of a forwarded frame must be ours");
    backend_of_mac(&frame[0..6]).unwrap_or_else(|| panic!("destination MAC {:02x?} is no backend", &frame[0..6]))
}

fn ipv4_of<'a>(s: &'a SlicedPacket<'a>) -> &'a etherparse::Ipv4Slice<'a> {
    match &s.net {
        Some(NetSlice::Ipv4(v)) => v,
        other => panic!("not IPv4: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------

#[test]
fn icmp_frag_needed_min_quote_goes_to_the_flow_backend() {
    let input = read_pcap(&case_path("icmp-frag-needed-min-quote.pcap"));
    assert_eq!(input.len(), 3);
    let run = run_capture("icmp-min-quote", &Setup::default(), &case_path("icmp-frag-needed-min-quote.pcap"), 1.0);
    assert!(run.success);
    assert_eq!(run.status.total.rx, 3);
    assert_eq!(run.out.len(), 3, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.total_drops(), 0);
    assert_eq!(run.status.total.icmp_forwarded, 1);
    assert_eq!(run.status.total.forwarded, 3);

    // The flow's two segments: one backend.
    let flow_backend = backend_of(&run.out[0]);
    assert_eq!(backend_of(&run.out[1]), flow_backend);
    for (o, i) in run.out.iter().zip(&input) {
        assert_eq!(&o[12..], &i[12..], "L2 DSR leaves everything after the MACs alone");
    }
    // The ICMP error: same backend, still a valid "fragmentation needed" quoting the flow.
    let icmp = &run.out[2];
    assert_eq!(backend_of(icmp), flow_backend, "ICMP error must follow the flow it quotes");
    let s = SlicedPacket::from_ethernet(icmp).expect("parse ICMP");
    assert_eq!(ipv4_of(&s).header().destination(), VIP);
    let Some(TransportSlice::Icmpv4(ic)) = &s.transport else { panic!("not ICMP: {:?}", s.transport) };
    match ic.icmp_type() {
        etherparse::Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu }) => {
            assert_eq!(next_hop_mtu, 1400)
        }
        t => panic!("unexpected ICMP type {t:?}"),
    }
    // The quote holds only the IPv4 header + 8 bytes of TCP.
    assert_eq!(ic.payload().len(), 28);
}

// ---------------------------------------------------------------------------------------

#[test]
fn udp_fragments_stay_together() {
    udp_fragments_case("udp-fragments", Setup { udp53: true, ..Setup::default() });
}

/// Reordered: the same capture (half of its datagrams send their later
/// fragments first) with a second UDP service on the VIP, as `pcapcases.py` runs it. The
/// later fragments cannot be placed until their first fragment names the service: they are
/// held, then follow it; none is lost.
#[test]
fn reordered_udp_fragments_with_two_services_are_held_and_follow_their_first() {
    let run = udp_fragments_case("udp-fragments-2svc", Setup { udp53: true, udp5353: true, ..Setup::default() });
    assert_eq!(run.status.total.fragments_held, 8, "two later fragments of each of the four reordered datagrams");
}

fn udp_fragments_case(name: &str, setup: Setup) -> Run {
    let input = read_pcap(&case_path("udp-fragments.pcap"));
    assert_eq!(input.len(), 24);
    let run = run_capture(name, &setup, &case_path("udp-fragments.pcap"), 1.0);
    assert!(run.success);
    assert_eq!(run.status.total.rx, 24);
    // Nothing silently lost: everything is either sent or counted as a drop.
    assert_eq!(run.out.len() as u64 + run.total_drops(), 24, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.out.len(), 24, "no reason to drop a well-formed fragment: {:?}", run.nonzero_drops());
    assert_eq!(run.status.total.forwarded, 24);

    // datagram (src, IP id) → backends and fragment offsets seen
    #[derive(Default)]
    struct Seen {
        backends: BTreeSet<usize>,
        offsets: BTreeSet<u16>,
    }
    let mut by_datagram: BTreeMap<([u8; 4], u16), Seen> = BTreeMap::new();
    for f in &run.out {
        let s = SlicedPacket::from_ethernet(f).expect("parse fragment");
        let h = ipv4_of(&s).header();
        assert_eq!(h.destination(), VIP);
        let e = by_datagram.entry((h.source(), h.identification())).or_default();
        e.backends.insert(backend_of(f));
        e.offsets.insert(h.fragments_offset().value());
    }
    assert_eq!(by_datagram.len(), 8);
    for (k, Seen { backends, offsets }) in &by_datagram {
        assert_eq!(backends.len(), 1, "datagram {k:?} split over backends {backends:?}");
        assert_eq!(offsets.iter().copied().collect::<Vec<_>>(), vec![0, 150, 300], "datagram {k:?}: fragments {offsets:?}");
    }
    // Each frame left unchanged past the MACs (same order: one worker, one queue).
    let mut sent: Vec<&[u8]> = run.out.iter().map(|f| &f[12..]).collect();
    let mut got: Vec<&[u8]> = input.iter().map(|f| &f[12..]).collect();
    sent.sort();
    got.sort();
    assert_eq!(sent, got);
    run
}

// ---------------------------------------------------------------------------------------

/// Two services on one VIP (public case `udp-fragments-two-services.pcap`): two services on one VIP
/// (UDP/53 on backends 0–3, UDP/5353 on backends 4–7). Every fragment of a datagram reaches
/// one backend of the service its first fragment names; none is lost.
#[test]
fn udp_fragments_reach_the_service_of_their_first_fragment() {
    let input = read_pcap(&case_path("udp-fragments-two-services.pcap"));
    assert_eq!(input.len(), 12);
    // datagram (source, IP id) → destination port of its first fragment, read here
    let mut port_of: HashMap<([u8; 4], u16), u16> = HashMap::new();
    for f in &input {
        let s = SlicedPacket::from_ethernet(f).expect("parse input");
        let h = ipv4_of(&s).header();
        if h.fragments_offset().value() == 0 {
            // etherparse leaves fragments unparsed past IPv4: the UDP header starts the payload
            let udp = ipv4_of(&s).payload().payload;
            port_of.insert((h.source(), h.identification()), u16::from_be_bytes([udp[2], udp[3]]));
        }
    }
    assert_eq!(port_of.values().copied().collect::<BTreeSet<_>>(), BTreeSet::from([53, 5353]));
    let setup = Setup { udp53: true, udp5353: true, ..Setup::default() };
    let run = run_capture("udp-fragments-two-services", &setup, &case_path("udp-fragments-two-services.pcap"), 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 12, "drops: {:?}", run.nonzero_drops());
    let mut backends: BTreeMap<([u8; 4], u16), BTreeSet<usize>> = BTreeMap::new();
    for f in &run.out {
        let s = SlicedPacket::from_ethernet(f).expect("parse output");
        let h = ipv4_of(&s).header();
        backends.entry((h.source(), h.identification())).or_default().insert(backend_of(f));
    }
    assert_eq!(backends.len(), 4);
    for (k, b) in &backends {
        assert_eq!(b.len(), 1, "datagram {k:?} split over backends {b:?}");
        let backend = *b.iter().next().unwrap();
        let want = if port_of[k] == 53 { 0..4 } else { 4..8 };
        assert!(want.contains(&backend), "datagram {k:?} to port {} went to backend {backend}, not a backend of its service", port_of[k]);
    }
}

// ---------------------------------------------------------------------------------------

#[test]
fn vlan_and_qinq_syns_are_balanced_with_tags_kept() {
    let input = read_pcap(&case_path("vlan-qinq-syn.pcap"));
    assert_eq!(input.len(), 8);
    let run = run_capture("vlan-qinq", &Setup::default(), &case_path("vlan-qinq-syn.pcap"), 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 8, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.status.total.new_connections, 8);
    assert_eq!(run.status.total.forwarded, 8);
    let mut tagged = (0, 0);
    for (o, i) in run.out.iter().zip(&input) {
        backend_of(o);
        assert_eq!(o.len(), i.len());
        assert_eq!(&o[12..], &i[12..], "tags and packet must stay as they came");
        let s = SlicedPacket::from_ethernet(o).expect("parse");
        match &s.vlan {
            Some(etherparse::VlanSlice::SingleVlan(v)) => {
                assert_eq!(v.vlan_identifier().value(), 100);
                tagged.0 += 1;
            }
            Some(etherparse::VlanSlice::DoubleVlan(v)) => {
                assert_eq!(v.outer().vlan_identifier().value(), 200);
                assert_eq!(v.inner().vlan_identifier().value(), 100);
                tagged.1 += 1;
            }
            None => panic!("tags lost"),
        }
        let Some(TransportSlice::Tcp(t)) = &s.transport else { panic!("no TCP") };
        assert!(t.syn());
        assert_eq!(t.destination_port(), 80);
    }
    assert_eq!(tagged, (4, 4));
    let per_backend: u64 = run.status.backends.iter().map(|b| b.new_connections).sum();
    assert_eq!(per_backend, 8);
}

// ---------------------------------------------------------------------------------------

fn encap_case(mode: &'static str, mtu: u16) {
    let input = read_pcap(&case_path("encap-mtu.pcap"));
    assert_eq!(input.len(), 2);
    let gue = mode == "GUE";
    let setup = Setup { mode, encap_mtu: 1500, ..Setup::default() };
    let run = run_capture(&format!("encap-{mode}"), &setup, &case_path("encap-mtu.pcap"), 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 2, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.status.total.icmp_frag_needed_sent, 1);
    assert_eq!(run.status.total.forwarded, 1);

    let big = &input[0];
    let small = &input[1];
    assert_eq!(big.len(), 14 + 1500);
    assert_eq!(small.len(), 14 + 1040);
    let (icmp, encap) = if run.out[0].len() < 200 { (&run.out[0], &run.out[1]) } else { (&run.out[1], &run.out[0]) };

    // ICMP fragmentation needed back to the client.
    assert_eq!(&icmp[0..6], &big[6..12], "towards the client's MAC");
    assert_eq!(&icmp[6..12], &LB_MAC);
    assert_eq!(&icmp[12..14], &[0x08, 0x00]);
    let s = SlicedPacket::from_ethernet(icmp).expect("parse ICMP reply");
    let h = ipv4_of(&s).header();
    assert_eq!(h.source(), VIP);
    assert_eq!(h.destination(), [10, 1, 0, 30]);
    assert_eq!(h.protocol(), etherparse::IpNumber::ICMP);
    assert_eq!(h.fragments_offset().value(), 0);
    assert!(!h.dont_fragment() && !h.more_fragments(), "flags must be 0");
    assert_eq!(inet_checksum(h.slice()), 0, "IPv4 header checksum");
    assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
    assert_eq!(usize::from(h.total_len()), icmp.len() - 14);
    let icmp_msg = &icmp[14 + 20..];
    assert_eq!((icmp_msg[0], icmp_msg[1]), (3, 4));
    assert_eq!(u16::from_be_bytes([icmp_msg[6], icmp_msg[7]]), mtu);
    assert_eq!(inet_checksum(icmp_msg), 0, "ICMP checksum");
    let Some(TransportSlice::Icmpv4(ic)) = &s.transport else { panic!("not ICMP") };
    match ic.icmp_type() {
        etherparse::Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu }) => {
            assert_eq!(next_hop_mtu, mtu)
        }
        t => panic!("unexpected ICMP type {t:?}"),
    }
    // The quote: the offending IPv4 header and at least 8 bytes of it.
    assert!(icmp_msg.len() >= 8 + 28);
    assert_eq!(&icmp_msg[8..8 + 28], &big[14..14 + 28]);

    // The small one, encapsulated.
    let b = backend_of(encap);
    let oh = if gue { 28 } else { 20 };
    assert_eq!(encap.len(), 14 + oh + 1040);
    let s = SlicedPacket::from_ethernet(encap).expect("parse encapsulated");
    let h = ipv4_of(&s).header();
    assert_eq!(h.source(), PORT_ADDR, "outer source = port address");
    assert_eq!(h.destination(), backend_addr(b), "outer destination = the backend of the MAC");
    assert_eq!(inet_checksum(h.slice()), 0, "outer IPv4 checksum");
    assert_eq!(usize::from(h.total_len()), oh + 1040);
    if gue {
        assert_eq!(h.protocol(), etherparse::IpNumber::UDP);
        let Some(TransportSlice::Udp(u)) = &s.transport else { panic!("GUE without UDP") };
        assert_eq!(u.destination_port(), 6080);
        assert_eq!(usize::from(u.length()), 8 + 1040);
    } else {
        assert_eq!(h.protocol(), etherparse::IpNumber::IPV4);
    }
    assert_eq!(&encap[14 + oh..], &small[14..], "inner packet byte-identical");
}

#[test]
fn encap_mtu_ipip() {
    encap_case("IPIP", 1480);
}

#[test]
fn encap_mtu_gue() {
    encap_case("GUE", 1472);
}

// ---------------------------------------------------------------------------------------

#[test]
fn syn_flood_evicts_only_syn_only_entries() {
    let input = read_pcap(&case_path("syn-flood-with-established.pcap"));
    let setup = Setup { ct_capacity: Some(1024), ..Setup::default() };
    let run = run_capture("syn-flood", &setup, &case_path("syn-flood-with-established.pcap"), 2.0);
    assert!(run.success);
    assert_eq!(run.status.total.rx, input.len() as u64, "whole capture replayed within the run");
    assert_eq!(run.out.len(), input.len(), "drops: {:?}", run.nonzero_drops());
    let t = &run.status.total;
    assert!(t.ct_evicted_syn_only > 0, "the flood must evict SYN-only entries: {t:?}");

    // The 64 completed flows (10.1.0.0/16): one backend each, throughout.
    let mut flows: HashMap<([u8; 4], u16), (BTreeSet<usize>, usize)> = HashMap::new();
    for f in &run.out {
        let b = backend_of(f);
        let s = SlicedPacket::from_ethernet(f).expect("parse");
        let h = ipv4_of(&s).header();
        if h.source()[0..2] != [10, 1] {
            continue;
        }
        let Some(TransportSlice::Tcp(tcp)) = &s.transport else { panic!("no TCP") };
        let e = flows.entry((h.source(), tcp.source_port())).or_default();
        e.0.insert(b);
        e.1 += 1;
    }
    assert_eq!(flows.len(), 64);
    for (k, (bs, n)) in &flows {
        assert_eq!(bs.len(), 1, "flow {k:?} moved between backends {bs:?}");
        assert_eq!(*n, 51, "flow {k:?}: SYN + 50 data segments");
    }
}

// ---------------------------------------------------------------------------------------

#[test]
fn miss_and_malformed_are_dropped_with_their_own_reasons() {
    let mut frames = read_pcap(&case_path("miss-and-malformed.pcap"));
    assert_eq!(frames.len(), 5);
    // After them, a valid SYN: the worker did not stall.
    frames.push(tcp_frame([10, 1, 0, 99], 45000, true));
    let run = run_frames("miss-malformed", &Setup::default(), &frames, 1.0);
    assert!(run.success, "daemon exits cleanly\n{}", run.stderr);
    assert_eq!(run.status.total.rx, 6);
    assert_eq!(run.out.len(), 1);
    assert_eq!(&run.out[0][12..], &frames[5][12..]);
    backend_of(&run.out[0]);
    for reason in ["no_service", "not_for_vip", "malformed_ipv4", "truncated_ipv4", "unsupported_ethertype"] {
        assert_eq!(run.drops(reason), 1, "{reason}: {:?}", run.nonzero_drops());
    }
    assert_eq!(run.total_drops(), 5, "{:?}", run.nonzero_drops());
}

// ---------------------------------------------------------------------------------------

#[test]
fn arp_for_vip_and_port_address_is_answered() {
    let req_mac = [2, 0, 0, 0, 0x20, 0x01];
    let req_ip = [10, 0, 0, 9];
    let frames = vec![
        arp_frame(1, req_mac, req_ip, VIP),
        arp_frame(1, req_mac, req_ip, PORT_ADDR),
        arp_frame(1, req_mac, req_ip, [10, 0, 0, 77]),
        arp_frame(2, req_mac, req_ip, VIP),
    ];
    let run = run_frames("arp", &Setup::default(), &frames, 1.0);
    assert!(run.success);
    assert_eq!(run.status.total.arp_replies, 2);
    // The request for an address we do not have is ignored; so is the reply, which is not
    // addressed to the port's own address (only replies to our own requests, which ask
    // from the port address, reach the next-hop resolver).
    assert_eq!(run.drops("arp_ignored"), 2);
    assert_eq!(run.status.total.arp_replies_seen, 0);
    assert_eq!(run.total_drops(), 2);
    assert_eq!(run.out.len(), 2);
    for (reply, asked) in run.out.iter().zip([VIP, PORT_ADDR]) {
        assert_eq!(&reply[0..6], &req_mac, "to the requester");
        assert_eq!(&reply[6..12], &LB_MAC);
        assert_eq!(&reply[12..14], &[0x08, 0x06]);
        let a = &reply[14..];
        assert_eq!(&a[0..6], &[0, 1, 8, 0, 6, 4]);
        assert_eq!(u16::from_be_bytes([a[6], a[7]]), 2, "reply");
        assert_eq!(&a[8..14], &LB_MAC, "sender hardware address = ours");
        assert_eq!(&a[14..18], &asked, "sender protocol address = the address asked for");
        assert_eq!(&a[18..24], &req_mac);
        assert_eq!(&a[24..28], &req_ip);
    }
}

// ---------------------------------------------------------------------------------------

#[test]
fn many_flows_spread_evenly_and_stick() {
    const FLOWS: usize = 2000;
    let src = |i: usize| [10, 2, (i >> 8) as u8, (i & 0xff) as u8];
    let mut frames: Vec<Vec<u8>> = (0..FLOWS).map(|i| tcp_frame(src(i), 20000 + i as u16, true)).collect();
    frames.extend((0..FLOWS).map(|i| tcp_frame(src(i), 20000 + i as u16, false)));
    let run = run_frames("spread", &Setup::default(), &frames, 2.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 2 * FLOWS, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.status.total.new_connections, FLOWS as u64);
    let mut flow_backend: HashMap<([u8; 4], u16), usize> = HashMap::new();
    let mut per_backend = [0usize; 4];
    for f in &run.out {
        let b = backend_of(f);
        assert!(b < 4);
        let s = SlicedPacket::from_ethernet(f).expect("parse");
        let h = ipv4_of(&s).header();
        let Some(TransportSlice::Tcp(t)) = &s.transport else { panic!("no TCP") };
        let k = (h.source(), t.source_port());
        match flow_backend.get(&k) {
            Some(prev) => assert_eq!(*prev, b, "flow {k:?} moved"),
            None => {
                flow_backend.insert(k, b);
                per_backend[b] += 1;
            }
        }
    }
    assert_eq!(flow_backend.len(), FLOWS);
    for (i, n) in per_backend.iter().enumerate() {
        let share = *n as f64 / FLOWS as f64;
        assert!((0.15..=0.35).contains(&share), "backend {i}: {share:.3} of flows ({per_backend:?})");
    }
    // The daemon's per-backend counters agree with what we saw on the wire.
    for (i, n) in per_backend.iter().enumerate() {
        let bs = run.status.backends.iter().find(|b| b.backend == format!("b{}", i + 1)).expect("backend status");
        assert_eq!(bs.new_connections, *n as u64, "b{}", i + 1);
        assert_eq!(bs.packets, 2 * *n as u64, "b{}", i + 1);
    }
}

// ---------------------------------------------------------------------------------------

/// The encap-mtu case from a client behind 802.1Q / QinQ: the "fragmentation needed" reply
/// goes back out the receiving port, so it must carry the client's VLAN tags.
#[test]
fn encap_frag_needed_reply_keeps_client_vlan_tags() {
    let big = read_pcap(&case_path("encap-mtu.pcap")).remove(0);
    assert_eq!(big.len(), 14 + 1500);
    let mut single = big[..12].to_vec();
    single.extend_from_slice(&[0x81, 0x00, 0x00, 100]);
    single.extend_from_slice(&big[12..]);
    let mut double = big[..12].to_vec();
    double.extend_from_slice(&[0x88, 0xa8, 0x00, 200, 0x81, 0x00, 0x00, 100]);
    double.extend_from_slice(&big[12..]);
    let frames = vec![single.clone(), double.clone()];
    let setup = Setup { mode: "IPIP", encap_mtu: 1500, ..Setup::default() };
    let run = run_frames("encap-vlan", &setup, &frames, 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 2, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.status.total.icmp_frag_needed_sent, 2);
    for (reply, input) in run.out.iter().zip(&frames) {
        let tags = input.len() - big.len();
        assert_eq!(&reply[0..6], &input[6..12], "towards the client's MAC");
        assert_eq!(&reply[6..12], &LB_MAC);
        assert_eq!(&reply[12..12 + tags], &input[12..12 + tags], "client's VLAN tags kept");
        assert_eq!(&reply[12 + tags..14 + tags], &[0x08, 0x00]);
        let s = SlicedPacket::from_ethernet(reply).expect("parse reply");
        let h = ipv4_of(&s).header();
        assert_eq!((h.source(), h.destination()), (VIP, [10, 1, 0, 30]));
        assert_eq!(inet_checksum(h.slice()), 0);
        assert_eq!(reply.len(), 14 + tags + usize::from(h.total_len()), "no trailing bytes");
        let icmp = &reply[14 + tags + 20..];
        assert_eq!((icmp[0], icmp[1]), (3, 4));
        assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), 1480);
        assert_eq!(inet_checksum(icmp), 0);
        assert_eq!(&icmp[8..8 + 28], &big[14..14 + 28]);
    }
}

// ---------------------------------------------------------------------------------------

/// Next to the min-quote case: a quote shorter than IPv4 header + 8 bytes, and an ICMP echo
/// request to the VIP, are each dropped under their own reason; the flow still goes through.
#[test]
fn icmp_short_quote_and_echo_are_counted() {
    let input = read_pcap(&case_path("icmp-frag-needed-min-quote.pcap"));
    let icmp = &input[2];
    // Outer IPv4 at 14, ICMP at 34, quoted IPv4 at 42, quoted TCP at 62: keep 4 bytes of TCP.
    let mut short = icmp[..62 + 4].to_vec();
    let total = (short.len() - 14) as u16;
    short[16..18].copy_from_slice(&total.to_be_bytes());
    short[24..26].copy_from_slice(&[0, 0]);
    let c = inet_checksum(&short[14..34]);
    short[24..26].copy_from_slice(&c.to_be_bytes());
    short[36..38].copy_from_slice(&[0, 0]);
    let c = inet_checksum(&short[34..]);
    short[36..38].copy_from_slice(&c.to_be_bytes());
    let mut echo = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4([10, 1, 0, 5], VIP, 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut echo, b"ping")
        .expect("build echo");
    let frames = vec![input[0].clone(), input[1].clone(), short, echo];
    let run = run_frames("icmp-short", &Setup::default(), &frames, 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 2, "{:?}", run.nonzero_drops());
    assert_eq!(run.drops("icmp_quote_too_short"), 1, "{:?}", run.nonzero_drops());
    assert_eq!(run.drops("icmp_ignored"), 1, "{:?}", run.nonzero_drops());
    assert_eq!(run.total_drops(), 2);
    assert_eq!(run.status.total.icmp_forwarded, 0);
}

// ---------------------------------------------------------------------------------------
// IPv6: the public cases of cases/packets/README.md on fd00::100.

fn v6() -> Setup {
    Setup { ipv6: true, udp53: true, ..Setup::default() }
}

/// (source, destination, next header, payload after the fixed header) of an IPv6 frame,
/// read with etherparse's header slice.
fn ipv6_hdr(f: &[u8]) -> ([u8; 16], [u8; 16], u8, &[u8]) {
    let h = etherparse::Ipv6HeaderSlice::from_slice(&f[14..]).expect("IPv6 header");
    (h.source(), h.destination(), h.next_header().0, &f[54..54 + usize::from(h.payload_length())])
}

#[test]
fn ipv6_flows_are_balanced_like_ipv4() {
    let input = read_pcap(&case_path("ipv6-flows.pcap"));
    let run = run_capture("ipv6-flows", &v6(), &case_path("ipv6-flows.pcap"), 2.0);
    assert!(run.success);
    assert_eq!(run.out.len(), input.len(), "drops: {:?}", run.nonzero_drops());
    let mut by_flow: BTreeMap<([u8; 16], u16), BTreeSet<usize>> = BTreeMap::new();
    for (o, i) in run.out.iter().zip(&input) {
        assert_eq!(&o[12..], &i[12..], "L2 DSR leaves the IPv6 header as it came");
        let s = SlicedPacket::from_ethernet(o).expect("parse");
        let Some(NetSlice::Ipv6(ip)) = &s.net else { panic!("not IPv6") };
        let sport = match &s.transport {
            Some(TransportSlice::Tcp(t)) => t.source_port(),
            Some(TransportSlice::Udp(u)) => u.source_port(),
            t => panic!("not TCP/UDP: {t:?}"),
        };
        let b = backend_of(o);
        assert!((8..14).contains(&b), "an IPv6 service's backend: {b}");
        by_flow.entry((ip.header().source(), sport)).or_default().insert(b);
    }
    assert_eq!(by_flow.len(), 7, "4 TCP + 3 UDP flows");
    assert!(by_flow.values().all(|b| b.len() == 1), "a flow split over backends: {by_flow:?}");
    let used: BTreeSet<usize> = by_flow.values().flatten().copied().collect();
    assert!(used.len() >= 2, "all flows on one backend");
}

#[test]
fn ipv6_fragments_of_a_datagram_reach_one_backend() {
    let input = read_pcap(&case_path("ipv6-fragments.pcap"));
    let run = run_capture("ipv6-fragments", &v6(), &case_path("ipv6-fragments.pcap"), 2.0);
    assert!(run.success);
    assert_eq!(run.out.len(), input.len(), "drops: {:?}", run.nonzero_drops());
    let mut by_datagram: BTreeMap<([u8; 16], u32), BTreeSet<usize>> = BTreeMap::new();
    for f in &run.out {
        let (src, _, nh, payload) = ipv6_hdr(f);
        assert_eq!(nh, 44, "a Fragment header follows the IPv6 header");
        let id = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        let b = backend_of(f);
        assert!((12..14).contains(&b), "a dns6 backend: {b}");
        by_datagram.entry((src, id)).or_default().insert(b);
    }
    assert_eq!(by_datagram.len(), 6);
    assert!(by_datagram.values().all(|b| b.len() == 1), "a datagram split: {by_datagram:?}");
}

#[test]
fn icmpv6_packet_too_big_goes_to_the_flow_backend() {
    let run = run_capture("icmpv6-too-big", &v6(), &case_path("icmpv6-too-big.pcap"), 2.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 3, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.status.total.icmp_forwarded, 1);
    let flow = backend_of(&run.out[0]);
    assert_eq!(backend_of(&run.out[1]), flow);
    let s = SlicedPacket::from_ethernet(&run.out[2]).expect("parse");
    let Some(TransportSlice::Icmpv6(ic)) = &s.transport else { panic!("not ICMPv6: {:?}", s.transport) };
    assert!(matches!(ic.icmp_type(), etherparse::Icmpv6Type::PacketTooBig { mtu: 1280 }));
    assert_eq!(backend_of(&run.out[2]), flow, "Packet Too Big must follow the flow it quotes");
}

#[test]
fn ipv6_neighbor_solicitation_answered_for_the_vip_only() {
    let run = run_capture("ipv6-nd", &v6(), &case_path("ipv6-nd.pcap"), 2.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 1, "one advertisement, for the VIP only");
    let na = &run.out[0];
    assert_eq!(&na[6..12], &LB_MAC);
    let (src, dst, nh, msg) = ipv6_hdr(na);
    assert_eq!((nh, na[14 + 7]), (58, 255), "ICMPv6 with hop limit 255");
    let ic = etherparse::Icmpv6Slice::from_slice(msg).expect("ICMPv6");
    assert!(ic.is_checksum_valid(src, dst), "valid checksum");
    assert_eq!(ic.type_u8(), 136);
    assert!(ic.bytes5to8()[0] & 0x40 != 0, "Solicited flag");
    let vip6: [u8; 16] = "fd00::100".parse::<std::net::Ipv6Addr>().unwrap().octets();
    assert_eq!((src, &ic.payload()[..16]), (vip6, &vip6[..]));
    assert_eq!(&ic.payload()[16..24], &[2, 1, 2, 0, 0, 0, 0, 1], "Target Link-Layer Address option with our MAC");
    assert_eq!((run.status.total.nd_advertisements, run.status.total.nd_not_ours), (1, 1));
    assert_eq!(run.drops("nd_ignored"), 1, "the solicitation for fd00::999 is counted");
}

#[test]
fn ipv6_single_extension_headers_are_walked() {
    let input = read_pcap(&case_path("ipv6-ext-single.pcap"));
    let run = run_capture("ipv6-ext-single", &v6(), &case_path("ipv6-ext-single.pcap"), 2.0);
    assert!(run.success);
    assert_eq!(run.out.len(), input.len(), "drops: {:?}", run.nonzero_drops());
    for (o, i) in run.out.iter().zip(&input) {
        assert_eq!(&o[12..], &i[12..]);
        assert!((8..12).contains(&backend_of(o)), "a web6 backend");
    }
    assert_eq!(run.status.total.new_connections, 2);
}

// ---------------------------------------------------------------------------------------

// Jumbo frames: `jumbo-9000.pcap` is a SYN and a 9,000-byte IPv4 segment of the same flow.
// net_pcap reports no RX scatter, so the daemon gives its pool 9,152-byte mbufs (start log:
// `rx_scatter=false mbuf_data_room=9152`): the big frame arrives in one mbuf and leaves as
// one frame. Chained mbufs are tested on net_ring (dpdk_segments*.rs).

fn jumbo_input() -> Vec<Vec<u8>> {
    let input = read_pcap(&case_path("jumbo-9000.pcap"));
    assert_eq!(input.len(), 2);
    assert_eq!(input[1].len(), 14 + 9000);
    input
}

#[test]
fn jumbo_9000_reaches_the_flow_backend_whole() {
    let input = jumbo_input();
    let setup = Setup { mtu: Some(9000), ..Setup::default() };
    let run = run_capture("jumbo-9000", &setup, &case_path("jumbo-9000.pcap"), 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 2, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.total_drops(), 0);
    assert_eq!(run.status.total.forwarded, 2);
    assert_eq!(backend_of(&run.out[1]), backend_of(&run.out[0]), "the big segment follows its flow");
    for (o, i) in run.out.iter().zip(&input) {
        assert_eq!(o.len(), i.len());
        assert_eq!(&o[12..], &i[12..], "L2 DSR leaves everything after the MACs alone");
    }
    let s = SlicedPacket::from_ethernet(&run.out[1]).expect("parse jumbo");
    assert_eq!(usize::from(ipv4_of(&s).header().total_len()), 9000);
    let Some(TransportSlice::Tcp(t)) = &s.transport else { panic!("no TCP") };
    assert_eq!((t.destination_port(), t.payload().len()), (80, 9000 - 40));
}

/// At the default MTU the port is not set up for chained mbufs: the big frame is dropped
/// and counted as `multi_segment`, the SYN still goes through.
#[test]
fn jumbo_at_default_mtu_is_a_counted_multi_segment_drop() {
    let run = run_capture("jumbo-1500", &Setup::default(), &case_path("jumbo-9000.pcap"), 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 1, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.drops("multi_segment"), 1, "{:?}", run.nonzero_drops());
    assert_eq!(run.total_drops(), 1);
}

/// IPIP and GUE: the outer lengths cover the whole 9,000-byte inner packet (all segments),
/// the outer checksum is valid and the inner packet arrives unchanged.
#[test]
fn jumbo_is_encapsulated_whole() {
    let input = jumbo_input();
    for mode in ["IPIP", "GUE"] {
        let setup = Setup { mode, encap_mtu: 9216, mtu: Some(9000), ..Setup::default() };
        let run = run_capture(&format!("jumbo-{mode}"), &setup, &case_path("jumbo-9000.pcap"), 1.0);
        assert!(run.success);
        assert_eq!(run.out.len(), 2, "{mode} drops: {:?}", run.nonzero_drops());
        let oh = if mode == "GUE" { 28 } else { 20 };
        let big = &run.out[1];
        assert_eq!(big.len(), 14 + oh + 9000, "{mode}");
        let s = SlicedPacket::from_ethernet(big).expect("parse encapsulated jumbo");
        let h = ipv4_of(&s).header();
        assert_eq!(usize::from(h.total_len()), oh + 9000, "{mode}: outer total length");
        assert_eq!(inet_checksum(h.slice()), 0, "{mode}: outer IPv4 checksum");
        assert_eq!(h.destination(), backend_addr(backend_of(big)), "{mode}");
        if mode == "GUE" {
            let Some(TransportSlice::Udp(u)) = &s.transport else { panic!("GUE: no UDP") };
            assert_eq!((u.destination_port(), usize::from(u.length())), (6080, 8 + 9000));
        }
        assert_eq!(&big[14 + oh..], &input[1][14..], "{mode}: inner packet unchanged");
        assert_eq!(backend_of(big), backend_of(&run.out[0]), "{mode}");
    }
}

/// A DF jumbo over a 1,500-byte tunnel MTU: answered with "fragmentation needed" built from
/// the chained mbuf's first segment (the rest freed), valid checksums.
#[test]
fn jumbo_df_over_a_small_tunnel_gets_frag_needed() {
    let mut big = jumbo_input()[1].clone();
    big[20] |= 0x40; // DF
    big[24..26].copy_from_slice(&[0, 0]);
    let c = inet_checksum(&big[14..34]);
    big[24..26].copy_from_slice(&c.to_be_bytes());
    let setup = Setup { mode: "IPIP", encap_mtu: 1500, mtu: Some(9000), ..Setup::default() };
    let run = run_frames("jumbo-frag-needed", &setup, &[big.clone()], 1.0);
    assert!(run.success);
    assert_eq!(run.out.len(), 1, "drops: {:?}", run.nonzero_drops());
    assert_eq!(run.status.total.icmp_frag_needed_sent, 1);
    let reply = &run.out[0];
    assert_eq!(&reply[0..6], &big[6..12], "towards the client");
    let s = SlicedPacket::from_ethernet(reply).expect("parse reply");
    let h = ipv4_of(&s).header();
    assert_eq!(inet_checksum(h.slice()), 0);
    assert_eq!(reply.len(), 14 + usize::from(h.total_len()), "no trailing segments");
    let icmp = &reply[34..];
    assert_eq!((icmp[0], icmp[1], u16::from_be_bytes([icmp[6], icmp[7]])), (3, 4, 1480));
    assert_eq!(inet_checksum(icmp), 0);
    assert_eq!(&icmp[8..8 + 28], &big[14..14 + 28]);
}
