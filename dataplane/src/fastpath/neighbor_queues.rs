//! The queues between the workers and next-hop resolution's control side
//! ([`crate::neighbor`], which re-exports these): each worker hands over the ARP replies
//! and Neighbor Advertisements it received ([`NeighborSeen`]), and worker 0 sends the
//! control side's frames ([`TxFrame`]). Defined on the packet side, below both users.

use crossbeam_queue::ArrayQueue;
use std::net::IpAddr;

/// Replies (ARP replies, Neighbor Advertisements) each worker can hand over between two
/// control ticks (50 ms).
pub const SEEN_CAPACITY: usize = 256;
/// Frames the control side can queue for worker 0.
pub const OUTBOX_CAPACITY: usize = 1024;
/// Room for one control frame: an MLDv2 report of up to 60 groups (1,270 bytes,
/// [`crate::wire::mld::REPORT_FRAME_LEN`]), an unsolicited Neighbor Advertisement or a
/// Neighbor Solicitation (86 bytes each, [`crate::wire::icmpv6::UNSOLICITED_NA_FRAME_LEN`],
/// [`crate::wire::icmpv6::SOLICITATION_FRAME_LEN`]); ARP frames use the first 60 (the
/// Ethernet minimum without FCS; ARP fits in 42). [`TxFrame::len`] says how many are sent.
pub const FRAME_LEN: usize = crate::wire::mld::REPORT_FRAME_LEN;

/// A reply a worker received, of either family: "`addr` is at `mac`", on port `port`,
/// sent to our address `to`, at `at_ms`. From an ARP reply (RFC 826: `addr` = sender
/// protocol address, `mac` = sender hardware address, `to` = target protocol address) or a
/// Neighbor Advertisement (RFC 4861 §4.4: `addr` = Target Address, `mac` = Target
/// Link-Layer Address option, `to` = IPv6 destination). `Copy`, 48 bytes: queued without
/// allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborSeen {
    /// Port index it came in on (addressed to that port's own address).
    pub port: u16,
    /// The address resolved.
    pub addr: IpAddr,
    /// Its MAC.
    pub mac: [u8; 6],
    /// Our address the reply was sent to (the port's own address when it answers our
    /// request).
    pub to: IpAddr,
    /// When the worker received it, ms on the worker clock (the daemon's `started` epoch,
    /// wrapping at 2^32 ms: [`crate::daemon::Daemon::now_ms`]); the reply window is
    /// measured to it, not to when the control tick drains the queue.
    pub at_ms: u32,
    /// The NA's Solicited flag (RFC 4861 §4.4): it answers a solicitation. Always set for
    /// an ARP reply.
    pub solicited: bool,
    /// The NA's Override flag (§7.2.5): it may replace a known MAC. Always set for an ARP
    /// reply.
    pub overrides: bool,
}

// The queue entry stays small and `Copy` (module docs): 48 bytes.
const _: () = assert!(std::mem::size_of::<NeighborSeen>() <= 48);

impl NeighborSeen {
    /// The record of an ARP reply "`spa` is at `sha`" to `tpa` (Solicited and Override
    /// set: an ARP reply answers a request and replaces a known MAC).
    pub fn arp(port: u16, spa: std::net::Ipv4Addr, sha: [u8; 6], tpa: std::net::Ipv4Addr, at_ms: u32) -> NeighborSeen {
        NeighborSeen { port, addr: IpAddr::V4(spa), mac: sha, to: IpAddr::V4(tpa), at_ms, solicited: true, overrides: true }
    }

    /// The record of a gratuitous ARP "`spa` is at `sha`" (RFC 5227 §3 "ARP Announcement":
    /// sender and target protocol address both `spa`, a request or a reply): `to` is `spa`
    /// itself, Solicited clear, Override set ([`NeighborSeen::is_announcement`]).
    pub fn gratuitous_arp(port: u16, spa: std::net::Ipv4Addr, sha: [u8; 6], at_ms: u32) -> NeighborSeen {
        NeighborSeen { port, addr: IpAddr::V4(spa), mac: sha, to: IpAddr::V4(spa), at_ms, solicited: false, overrides: true }
    }

    /// Whether this is an announcement rather than a reply: a gratuitous ARP (`to` is the
    /// address itself) or a Neighbor Advertisement without the Solicited flag (RFC 4861
    /// §7.2.6, to all-nodes or to us). Only a resolved next hop learns from it
    /// ([`crate::neighbor::table::NeighborTable::on_announcement`]).
    pub fn is_announcement(&self) -> bool {
        self.addr == self.to || (self.addr.is_ipv6() && !self.solicited)
    }
}

/// A frame for worker 0 to send on port `port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFrame {
    /// Port index.
    pub port: u16,
    /// The frame (Ethernet header first) in the first [`TxFrame::len`] of [`FRAME_LEN`]
    /// bytes.
    pub bytes: [u8; FRAME_LEN],
    /// Bytes of `bytes` to send (60 for ARP, 86 for a Neighbor Solicitation or an
    /// unsolicited Neighbor Advertisement).
    pub len: u16,
}

/// The queues between the workers and the control side (module docs). Capacity is fixed
/// at creation; push and pop never allocate nor lock.
#[derive(Debug)]
pub struct NeighborQueues {
    /// Worker `i` → control: ARP replies and Neighbor Advertisements it received.
    pub seen: Vec<ArrayQueue<NeighborSeen>>,
    /// Control → worker 0: frames to send.
    pub outbox: ArrayQueue<TxFrame>,
}

impl NeighborQueues {
    /// Queues for `workers` workers.
    pub fn new(workers: usize) -> NeighborQueues {
        NeighborQueues { seen: (0..workers).map(|_| ArrayQueue::new(SEEN_CAPACITY)).collect(), outbox: ArrayQueue::new(OUTBOX_CAPACITY) }
    }
}
