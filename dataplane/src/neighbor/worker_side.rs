//! The worker's side of next-hop resolution, kept out of `fastpath/worker.rs`: handing a
//! received ARP reply or Neighbor Advertisement to the control side, and sending the
//! control side's frames (worker 0). Hot path rules apply: no lock, no heap allocation, no
//! syscall, no panic.

use super::NeighborSeen;
use crate::control::snapshot::Snapshot;
use crate::fastpath::port::{Burst, Port};
use crate::fastpath::stats::bump;
use crate::fastpath::worker::{PortInfo, Verdict, Worker};
use crate::wire::{self, DropReason};
use std::net::{IpAddr, Ipv6Addr};

impl Worker {
    /// Whether the ARP packet `a` in `frame`, received on a port with `pinfo`, is neither
    /// answered nor learned (dropped as `arp_ignored`): its sender is not a valid unicast
    /// station ([`wire::arp::sender_is_valid`]), or its sender protocol address is one of
    /// our own (a VIP or a port address: `snap.arp_addrs`, this port's address): another
    /// station claims our address (an address conflict, RFC 5227 §2.4), and learning or
    /// answering it would help it take the address over.
    #[inline]
    pub(crate) fn arp_sender_refused(&self, frame: &[u8], a: &wire::ArpInfo, snap: &Snapshot, pinfo: PortInfo) -> bool {
        let spa = u32::from(a.spa);
        !wire::arp::sender_is_valid(frame, a) || snap.arp_addrs.contains_key(&spa) || (spa != 0 && spa == pinfo.addr)
    }

    /// An ARP reply addressed to this port's own address (its target protocol address;
    /// 0.0.0.0 when the port has none: the answer to an RFC 5227 probe) goes, with its
    /// arrival time `now_ms`, to the control side's neighbour table, which learns it only
    /// if it answers a request of ours ([`crate::neighbor::table`]). A gratuitous ARP
    /// (RFC 5227 §3 announcement: sender and target protocol address equal, not 0.0.0.0;
    /// a reply, or a request when the caller hands requests over) goes too, as
    /// [`NeighborSeen::gratuitous_arp`]: the table lets it replace the MAC of a resolved
    /// next hop at once (a backend recreated with a new MAC). Any other ARP is dropped and
    /// counted as `arp_ignored`.
    #[inline]
    pub(crate) fn hand_over_arp_reply(&self, frame: &[u8], a: &wire::ArpInfo, port: usize, now_ms: u32) -> Verdict {
        let Some(q) = self.neighbors.as_ref().and_then(|n| n.seen.get(self.id)) else {
            return Verdict::Drop(DropReason::ArpIgnored);
        };
        let gratuitous = a.spa == a.tpa && !a.spa.is_unspecified();
        if !gratuitous && (a.oper != wire::arp::OP_REPLY || self.ports.get(port).is_none_or(|p| p.addr != u32::from(a.tpa))) {
            return Verdict::Drop(DropReason::ArpIgnored);
        }
        let Some(Ok(arp)) = frame.get(a.offset..).map(wire::ArpPacket::new_checked) else {
            return Verdict::Drop(DropReason::ArpIgnored);
        };
        let seen = if gratuitous {
            NeighborSeen::gratuitous_arp(port as u16, a.spa, arp.sender_hw_addr(), now_ms)
        } else {
            NeighborSeen::arp(port as u16, a.spa, arp.sender_hw_addr(), a.tpa, now_ms)
        };
        if q.push(seen).is_err() {
            return Verdict::Drop(DropReason::NeighborQueueFull);
        }
        bump(&self.stats.arp_replies_seen, 1);
        Verdict::Consumed
    }

    /// A valid Neighbor Advertisement `na` (RFC 4861 §7.1.2, checked by
    /// [`wire::icmpv6::na_info`]) in the packet `p`, received on port `port` and addressed
    /// to that port's own IPv6 address (`snap.port_addrs6`: `ports[].address6`), carrying
    /// a Target Link-Layer Address, goes with its flags and arrival time `now_ms` to the
    /// control side's neighbour table, which learns it only if it answers a solicitation
    /// of ours on that port (neighbour state is per interface, RFC 4861 §7.2.5). An
    /// unsolicited NA (Solicited clear) to all-nodes (ff02::1, RFC 4861 §7.2.6) goes too:
    /// the table lets it (with Override) replace the MAC of a resolved next hop at once.
    /// Any other NA (to a VIP, to another multicast group, to another port's address,
    /// without the option) is dropped as `nd_ignored`, as an ARP reply for another port's
    /// address is. Counted in
    /// `arp_replies_seen` with the ARP replies (replies handed to the resolver).
    #[inline]
    pub(crate) fn hand_over_na(&self, p: &wire::Ipv6Info, na: &wire::icmpv6::NaInfo, snap: &Snapshot, port: usize, now_ms: u32) -> Verdict {
        let Some(q) = self.neighbors.as_ref().and_then(|n| n.seen.get(self.id)) else {
            return Verdict::Drop(DropReason::NdIgnored);
        };
        let announced = !na.solicited && p.dst == wire::icmpv6::ALL_NODES;
        let ours = announced || snap.port_addrs6.get(port).is_some_and(|a| *a != 0 && *a == p.dst);
        let (true, Some(mac)) = (ours, na.mac) else {
            return Verdict::Drop(DropReason::NdIgnored);
        };
        let seen = NeighborSeen {
            port: port as u16,
            addr: IpAddr::V6(Ipv6Addr::from(na.target)),
            mac,
            to: IpAddr::V6(Ipv6Addr::from(p.dst)),
            at_ms: now_ms,
            solicited: na.solicited,
            overrides: na.overrides,
        };
        if q.push(seen).is_err() {
            return Verdict::Drop(DropReason::NeighborQueueFull);
        }
        bump(&self.stats.arp_replies_seen, 1);
        Verdict::Consumed
    }

    /// Sends up to one burst of the control side's frames (ARP requests, gratuitous ARP,
    /// Neighbor Solicitations, unsolicited Neighbor Advertisements)
    /// from `outbox` on their ports, in buffers of the port ([`Port::alloc_tx`]); worker 0
    /// calls it once per iteration. A frame for an unknown port, or without a buffer, is
    /// dropped and counted (`control_tx_failed`).
    pub fn send_control_frames<P: Port>(&mut self, ports: &mut [P], outbox: &crossbeam_queue::ArrayQueue<crate::neighbor::TxFrame>) {
        let mut n = 0;
        while n < crate::fastpath::port::BURST {
            let Some(f) = outbox.pop() else { break };
            n += 1;
            let Some(p) = ports.get_mut(usize::from(f.port)) else {
                bump(&self.stats.control_tx_failed, 1);
                continue;
            };
            let Some(b) = f.bytes.get(..usize::from(f.len)).and_then(|bytes| p.alloc_tx(bytes)) else {
                bump(&self.stats.control_tx_failed, 1);
                continue;
            };
            let mut burst: Burst<P::Buf> = Burst::new();
            let _ = burst.try_push(b);
            let sent = p.tx_burst(&mut burst) as u64;
            bump(&self.stats.tx, sent);
            bump(&self.stats.control_tx, sent);
            bump(&self.stats.control_tx_failed, 1 - sent.min(1));
        }
    }
}
