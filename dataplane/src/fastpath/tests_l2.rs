//! The worker's link-layer rule: ports run promiscuous, so a frame is forwarded only when
//! it was sent to the receiving port's MAC (`DropReason::NotOurMac`). Without it, two
//! Spillway hosts on one L2 segment forwarded each other's frames to a backend whose MAC
//! the switch flooded, without end (L2 DSR changes no TTL: fresh-user QA, 2026-12-05).

use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::tests::{snap, syn};
use crate::fastpath::worker::*;
use crate::wire::DropReason;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];

fn host(mac: [u8; 6]) -> Worker {
    Worker::new(0, 1024, 1, Timeouts::default(), Arc::new(WorkerStats::default()), vec![PortInfo { mac, forward_to: 0, addr: 0 }])
}

fn with_dst(mut b: MemBuf, dst: [u8; 6]) -> MemBuf {
    b.data_mut()[0..6].copy_from_slice(&dst);
    b
}

/// An ARP request from 10.1.0.5 for the VIP, to `dst`.
fn arp_request(dst: [u8; 6]) -> MemBuf {
    let mut f = dst.to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 9]);
    f.extend_from_slice(&[10, 1, 0, 5, 0, 0, 0, 0, 0, 0, 10, 0, 0, 100]);
    MemBuf::new(&f)
}

/// A SYN for a VIP is forwarded only when sent to the port's MAC (or its device's, when
/// the config sets another): not to another host's MAC, the backend's (a flooded copy of a
/// frame another host sent), broadcast or an IPv4 multicast MAC; none of those creates a
/// connection. ARP for the VIP is answered whatever MAC it was sent to (a neighbour with a
/// stale entry is repaired by the reply). Group traffic not for a VIP stays `not_for_vip`.
#[test]
fn only_frames_to_the_ports_mac_are_forwarded() {
    let s = snap(&[("web", 80, "02:00:00:00:00:0a")], 1);
    let mut a = host(A_MAC);
    for dst in [B_MAC, BACKEND_MAC, [0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 1], [0; 6]] {
        assert_eq!(a.process(&mut with_dst(syn(80), dst), 0, &s, 0), Verdict::Drop(DropReason::NotOurMac), "SYN to {dst:02x?}");
    }
    assert_eq!((a.stats.new_connections.load(Relaxed), a.ct.occupancy().syn_only), (0, 0), "nothing tracked");
    assert_eq!(a.process(&mut syn(80), 0, &s, 0), Verdict::Forward, "the same SYN to our MAC");
    assert_eq!(a.process(&mut arp_request([0xff; 6]), 0, &s, 0), Verdict::Reply, "ARP request, broadcast");
    assert_eq!(a.process(&mut arp_request(A_MAC), 0, &s, 0), Verdict::Reply, "ARP request to our MAC");
    assert_eq!(a.process(&mut arp_request(B_MAC), 0, &s, 0), Verdict::Reply, "ARP request to a stale MAC");
    // multicast not for a VIP (mDNS to 224.0.0.251) is what it always was
    let mut mdns = with_dst(syn(5353), [0x01, 0x00, 0x5e, 0, 0, 0xfb]);
    mdns.data_mut()[30..34].copy_from_slice(&[224, 0, 0, 251]);
    assert_eq!(a.process(&mut mdns, 0, &s, 0), Verdict::Drop(DropReason::NotForVip));
    // a port configured with another MAC also takes frames to its device's own
    let device = [2, 0, 0, 0, 0, 0x77];
    let mut d = host(A_MAC).with_device_macs(vec![device]);
    assert_eq!(d.process(&mut with_dst(syn(80), device), 0, &s, 0), Verdict::Forward, "SYN to the device MAC");
    assert_eq!(d.process(&mut with_dst(syn(80), B_MAC), 0, &s, 0), Verdict::Drop(DropReason::NotOurMac));
    // ... but not another port's device MAC: a frame for it was not sent to this port
    let two = |dev: [[u8; 6]; 2]| {
        let ports = vec![PortInfo { mac: A_MAC, forward_to: 0, addr: 0 }, PortInfo { mac: B_MAC, forward_to: 1, addr: 0 }];
        Worker::new(0, 1024, 1, Timeouts::default(), Arc::new(WorkerStats::default()), ports).with_device_macs(dev.to_vec())
    };
    let (dev0, dev1) = ([2, 0, 0, 0, 0, 0x70], [2, 0, 0, 0, 0, 0x71]);
    let mut w = two([dev0, dev1]);
    assert_eq!(w.process(&mut with_dst(syn(80), dev1), 0, &s, 0), Verdict::Drop(DropReason::NotOurMac), "port 1's device MAC on port 0");
    assert_eq!(w.process(&mut with_dst(syn(80), B_MAC), 0, &s, 0), Verdict::Drop(DropReason::NotOurMac), "port 1's MAC on port 0");
    assert_eq!(w.process(&mut with_dst(syn(80), dev0), 0, &s, 0), Verdict::Forward, "port 0's device MAC on port 0");
    assert_eq!(w.process(&mut with_dst(syn(80), dev1), 1, &s, 0), Verdict::Forward, "port 1's device MAC on port 1");
}

/// Two hosts on one segment serving the same VIP: what host A sends to the backend,
/// flooded by the switch, reaches host B and host A itself; neither forwards it again,
/// so one SYN is one frame to the backend, not a loop.
#[test]
fn two_hosts_on_one_segment_do_not_loop_a_frame() {
    let s = snap(&[("web", 80, "02:00:00:00:00:0a")], 1);
    let (mut a, mut b) = (host(A_MAC), host(B_MAC));
    let mut frame = syn(80);
    assert_eq!(a.process(&mut frame, 0, &s, 0), Verdict::Forward);
    assert_eq!((&frame.data()[0..6], &frame.data()[6..12]), (&BACKEND_MAC[..], &A_MAC[..]), "A sent it to the backend");
    let flooded = frame.data().to_vec();
    assert_eq!(b.process(&mut MemBuf::new(&flooded), 0, &s, 1), Verdict::Drop(DropReason::NotOurMac), "B does not forward A's frame");
    assert_eq!(a.process(&mut MemBuf::new(&flooded), 0, &s, 1), Verdict::Drop(DropReason::NotOurMac), "nor does A, seeing its own frame again");
    assert_eq!((a.stats.new_connections.load(Relaxed), b.stats.new_connections.load(Relaxed)), (1, 0));
}
