//! The worker's side of next-hop resolution, kept out of `fastpath/worker.rs`: handing a
//! received ARP reply to the control side, and sending the control side's frames (worker
//! 0). Hot path rules apply: no lock, no heap allocation, no syscall, no panic.

use crate::fastpath::port::{Burst, Port};
use crate::fastpath::stats::bump;
use crate::fastpath::worker::{Verdict, Worker};
use crate::wire::{self, DropReason};

impl Worker {
    /// An ARP reply addressed to this port's own address (its target protocol address;
    /// 0.0.0.0 when the port has none: the answer to an RFC 5227 probe) goes, with its
    /// arrival time `now_ms`, to the control side's neighbour table, which learns it only
    /// if it answers a request of ours ([`crate::neighbor::table`]); any other reply is
    /// dropped and counted as `arp_ignored`.
    #[inline]
    pub(crate) fn hand_over_arp_reply(&self, frame: &[u8], a: &wire::ArpInfo, port: usize, now_ms: u32) -> Verdict {
        let Some(q) = self.neighbors.as_ref().and_then(|n| n.seen.get(self.id)) else {
            return Verdict::Drop(DropReason::ArpIgnored);
        };
        if self.ports.get(port).is_none_or(|p| p.addr != u32::from(a.tpa)) {
            return Verdict::Drop(DropReason::ArpIgnored);
        }
        let Some(Ok(arp)) = frame.get(a.offset..).map(wire::ArpPacket::new_checked) else {
            return Verdict::Drop(DropReason::ArpIgnored);
        };
        let seen = crate::neighbor::ArpSeen { port: port as u16, spa: a.spa, sha: arp.sender_hw_addr(), tpa: a.tpa, at_ms: now_ms };
        if q.push(seen).is_err() {
            return Verdict::Drop(DropReason::NeighborQueueFull);
        }
        bump(&self.stats.arp_replies_seen, 1);
        Verdict::Consumed
    }

    /// Sends up to one burst of the control side's frames (ARP requests, gratuitous ARP)
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
