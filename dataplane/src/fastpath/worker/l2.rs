//! The worker's link-layer rule (ports run promiscuous: a frame is ours to forward only
//! when it was sent to the receiving port; fresh-user QA, 2026-12-05: two hosts on one
//! segment looped a frame) and the device MACs it accepts. A child of [`super`].

use super::{PortInfo, Worker};

impl Worker {
    /// The ports' device MACs (`macs[i]` for port `i`'s device), for ports configured with
    /// another `mac`: frames a port receives sent to its device's own MAC (static neighbour
    /// entries, fabrics that ignore ARP) are then also ours, beside those to the configured
    /// one. Another port's device MAC is not: a frame for it was not sent to this port.
    pub fn with_device_macs(mut self, macs: Vec<[u8; 6]>) -> Worker {
        self.device_macs = macs;
        self
    }

    /// Whether an IP frame received on port `port` (`pinfo`) was not sent to it, so is not
    /// ours to forward ([`crate::wire::DropReason::NotOurMac`]; ports run promiscuous): unicast to another
    /// MAC (neither the port's nor its own device's), or sent to a broadcast or multicast MAC
    /// while `for_vip()` (RFC 1812 §5.3.4; other group traffic is left to the usual
    /// `not_for_vip`). ARP and Neighbor Discovery do not ask: they answer requests for our
    /// addresses whatever MAC they were sent to (a neighbour with a stale entry for the
    /// VIP is repaired by the reply), and a reply cannot loop.
    #[inline(always)]
    pub(super) fn not_sent_to_us(&self, frame: &[u8], port: usize, pinfo: &PortInfo, for_vip: impl FnOnce() -> bool) -> bool {
        match frame.get(..6) {
            Some(dst) if dst[0] & 1 != 0 => for_vip(),
            Some(dst) => *dst != pinfo.mac && self.device_macs.get(port).is_none_or(|m| m != dst),
            None => false,
        }
    }
}
