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

pub use crate::fastpath::neighbor_queues::*;

/// Requests (ARP requests, Neighbor Solicitations) sent per control tick over all
/// forwarding ports: half of [`SEEN_CAPACITY`], so the replies to one tick's requests fit
/// one worker's queue (ARP is not RSS-hashed, ND replies need not spread: every reply may
/// land on one worker) with room for stray replies. Requests over the limit wait for the
/// next tick (counted as `deferred`).
pub const REQUESTS_PER_TICK: usize = SEEN_CAPACITY / 2;
/// Bytes of an ARP frame as sent (request or gratuitous): the Ethernet minimum.
pub const ARP_FRAME_LEN: usize = 60;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_announce;
#[cfg(test)]
mod tests_nd;
