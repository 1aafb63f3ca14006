//! Next-hop resolution (issue 13 item 3): the MACs of backends, endpoints and the gateway
//! whose `mac` is not configured, learned with ARP on Spillway's own ports.
//!
//! * [`table`]: the neighbour table, sans-IO, keyed by `IpAddr` (IPv6 Neighbor Discovery
//!   plugs in later), property-tested against a model;
//! * [`frames`]: ARP request and gratuitous-ARP frames (RFC 826, RFC 5227 §3);
//! * [`driver`]: the control side: wanted addresses from the config, the table's timers,
//!   the resolved view for snapshots and the reason `status` shows;
//! * [`NeighborQueues`]: how the workers and the control side meet without a lock on the
//!   packet path.
//!
//! **Data flow.** A worker that receives an ARP reply addressed to its port's own address
//! (target protocol address; others are dropped as `arp_ignored`) pushes (port, sender
//! address, sender MAC, target address, arrival time) into its own bounded lock-free queue ([`NeighborQueues::seen`], one per
//! worker; full = dropped and counted as `neighbor_queue_full`) and frees the frame. The
//! control loop drains the queues, feeds the table, and pushes the request frames the
//! table asks for into [`NeighborQueues::outbox`]; worker 0 sends them on its own TX
//! queues ([`crate::fastpath::worker::Worker::send_control_frames`]), from mbufs of the
//! port's pool: no lock, no heap allocation, no syscall on the worker. Resolved MACs go
//! into the next snapshot (republished on every change); an endpoint whose next hop is
//! pending its first resolution stays eligible with the all-zero MAC (workers drop its
//! packets as `next_hop_unresolved`); one whose resolution failed is not eligible, like
//! an unhealthy one ([`table`]).

pub mod driver;
pub mod frames;
pub mod table;
mod worker_side;

use crossbeam_queue::ArrayQueue;
use std::net::Ipv4Addr;

/// ARP replies each worker can hand over between two control ticks (50 ms).
pub const SEEN_CAPACITY: usize = 256;
/// ARP requests sent per control tick over all forwarding ports: half of
/// [`SEEN_CAPACITY`], so the replies to one tick's requests fit one worker's queue (ARP
/// is not RSS-hashed: every reply may land on one worker) with room for stray replies.
pub const REQUESTS_PER_TICK: usize = SEEN_CAPACITY / 2;
/// Frames the control side can queue for worker 0.
pub const OUTBOX_CAPACITY: usize = 1024;
/// Room for one control frame: an unsolicited Neighbor Advertisement (86 bytes,
/// [`crate::wire::icmpv6::UNSOLICITED_NA_FRAME_LEN`]); ARP frames use the first 60 (the
/// Ethernet minimum without FCS; ARP fits in 42). [`TxFrame::len`] says how many are sent.
pub const FRAME_LEN: usize = 86;
/// Bytes of an ARP frame as sent (request or gratuitous): the Ethernet minimum.
pub const ARP_FRAME_LEN: usize = 60;

/// An ARP reply a worker received: "`spa` is at `sha`", on port `port`, for `tpa`, at
/// `at_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpSeen {
    /// Port index it came in on.
    pub port: u16,
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Sender hardware address.
    pub sha: [u8; 6],
    /// Target protocol address (the port's own address when it answers our request).
    pub tpa: Ipv4Addr,
    /// When the worker received it, ms on the worker clock (the daemon's `started` epoch,
    /// wrapping at 2^32 ms: [`crate::daemon::Daemon::now_ms`]); the reply window is
    /// measured to it, not to when the control tick drains the queue.
    pub at_ms: u32,
}

/// A frame for worker 0 to send on port `port`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFrame {
    /// Port index.
    pub port: u16,
    /// The frame (Ethernet header first) in the first [`TxFrame::len`] of [`FRAME_LEN`]
    /// bytes.
    pub bytes: [u8; FRAME_LEN],
    /// Bytes of `bytes` to send (60 for ARP, 86 for an unsolicited Neighbor Advertisement).
    pub len: u16,
}

/// The queues between the workers and the control side (module docs). Capacity is fixed
/// at creation; push and pop never allocate nor lock.
#[derive(Debug)]
pub struct NeighborQueues {
    /// Worker `i` → control: ARP replies it received.
    pub seen: Vec<ArrayQueue<ArpSeen>>,
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
