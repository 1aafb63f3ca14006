//! Next-hop resolution: the MACs of backends, endpoints and the gateway
//! whose `mac` is not configured, learned on Spillway's own ports with ARP (IPv4, RFC 826)
//! and Neighbor Discovery (IPv6, RFC 4861).
//!
//! * [`table`]: the neighbour table, sans-IO, keyed by `IpAddr` (both families alike),
//!   property-tested against a model;
//! * [`frames`]: ARP request and gratuitous-ARP frames (RFC 826, RFC 5227 §3), and the
//!   Neighbor Solicitation (RFC 4861 §7.2.2, built by [`crate::wire::icmpv6`]);
//! * [`driver`]: the control side: wanted addresses from the config, the table's timers,
//!   the resolved view for snapshots and the reason `status` shows;
//! * [`NeighborQueues`]: how the workers and the control side meet without a lock on the
//!   packet path.
//!
//! **Data flow.** A worker that receives an ARP reply addressed to its port's own address
//! (target protocol address; others are dropped as `arp_ignored`), or a valid Neighbor
//! Advertisement (RFC 4861 §7.1.2; invalid ones are dropped as `nd_invalid`) addressed to a
//! port's own IPv6 address (`address6`) with a Target Link-Layer Address option (others are
//! dropped as `nd_ignored`), pushes a [`NeighborSeen`] record (port, sender address, its
//! MAC, our address it was sent to, arrival time, NA flags) into its own bounded lock-free
//! queue ([`NeighborQueues::seen`], one per worker; full = dropped and counted as
//! `neighbor_queue_full`) and frees the frame. The control loop drains the queues, feeds
//! the table (learning only answers to our own outstanding requests; an NA without the
//! Solicited flag is no answer; a gratuitous ARP or an unsolicited NA with Override only
//! replaces the MAC of an address already resolved, [`table`]), and pushes the request frames the table asks for (ARP
//! request or Neighbor Solicitation, by the address family) into [`NeighborQueues::outbox`];
//! worker 0 sends them on its own TX queues
//! ([`crate::fastpath::worker::Worker::send_control_frames`]), from mbufs of the port's
//! pool: no lock, no heap allocation, no syscall on the worker. Resolved MACs go into the
//! next snapshot (republished on every change); an endpoint whose next hop is pending its
//! first resolution stays eligible with the all-zero MAC (workers drop its packets as
//! `next_hop_unresolved`); one whose resolution failed is not eligible, like an unhealthy
//! one ([`table`]).
//!
//! A Neighbor Solicitation is sent from the port's IPv6 address (`ports[].address6`, or an
//! IPv6 `ports[].address`), never from `::` (that is duplicate address detection, RFC 4862
//! §5.4): the daemon refuses a config with a mac-less IPv6 next hop and no forwarding port
//! with an IPv6 address ([`crate::ctl::edits::daemon_checks`]).

pub mod driver;
pub mod frames;
pub mod table;
mod worker_side;

use crossbeam_queue::ArrayQueue;
use std::net::IpAddr;

/// Replies (ARP replies, Neighbor Advertisements) each worker can hand over between two
/// control ticks (50 ms).
pub const SEEN_CAPACITY: usize = 256;
/// Requests (ARP requests, Neighbor Solicitations) sent per control tick over all
/// forwarding ports: half of [`SEEN_CAPACITY`], so the replies to one tick's requests fit
/// one worker's queue (ARP is not RSS-hashed, ND replies need not spread: every reply may
/// land on one worker) with room for stray replies. Requests over the limit wait for the
/// next tick (counted as `deferred`).
pub const REQUESTS_PER_TICK: usize = SEEN_CAPACITY / 2;
/// Frames the control side can queue for worker 0.
pub const OUTBOX_CAPACITY: usize = 1024;
/// Room for one control frame: an MLDv2 report of up to 60 groups (1,270 bytes,
/// [`crate::wire::mld::REPORT_FRAME_LEN`]), an unsolicited Neighbor Advertisement or a
/// Neighbor Solicitation (86 bytes each, [`crate::wire::icmpv6::UNSOLICITED_NA_FRAME_LEN`],
/// [`crate::wire::icmpv6::SOLICITATION_FRAME_LEN`]); ARP frames use the first 60 (the
/// Ethernet minimum without FCS; ARP fits in 42). [`TxFrame::len`] says how many are sent.
pub const FRAME_LEN: usize = crate::wire::mld::REPORT_FRAME_LEN;
/// Bytes of an ARP frame as sent (request or gratuitous): the Ethernet minimum.
pub const ARP_FRAME_LEN: usize = 60;

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
    /// ([`table::NeighborTable::on_announcement`]).
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

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_announce;
#[cfg(test)]
mod tests_nd;
