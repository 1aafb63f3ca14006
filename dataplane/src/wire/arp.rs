//! ARP for Ethernet / IPv4 (RFC 826): the view the worker needs to answer requests for VIPs
//! and port addresses.

use super::ethernet::MacAddr;
use super::{be16, be32, view_invariant_broken, DropReason};
use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP packet (RFC 826 with hlen 6, plen 4).
pub const ARP_LEN: usize = 28;
/// `ar$op` of a request.
pub const OP_REQUEST: u16 = 1;
/// `ar$op` of a reply.
pub const OP_REPLY: u16 = 2;

/// Named byte ranges (RFC 826 "Packet format").
pub(crate) mod field {
    use std::ops::Range;
    /// `ar$hrd`, `ar$pro`, `ar$hln`, `ar$pln`: must be 1, 0x0800, 6, 4.
    pub const FIXED: Range<usize> = 0..6;
    /// `ar$op`.
    pub const OPER: Range<usize> = 6..8;
    /// `ar$sha`: sender hardware address.
    pub const SHA: Range<usize> = 8..14;
    /// `ar$spa`: sender protocol address.
    pub const SPA: Range<usize> = 14..18;
    /// `ar$tha`: target hardware address.
    pub const THA: Range<usize> = 18..24;
    /// `ar$tpa`: target protocol address.
    pub const TPA: Range<usize> = 24..28;
}

/// The fixed part for Ethernet (hrd 1) / IPv4 (pro 0x0800), hln 6, pln 4.
const ETHERNET_IPV4: [u8; 6] = [0, 1, 8, 0, 6, 4];

/// What [`super::parse`] reports of an ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpInfo {
    /// Offset of the ARP packet in the frame (the Ethernet header length, tags included).
    pub offset: usize,
    /// 1 = request, 2 = reply.
    pub oper: u16,
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

/// A checked view of an Ethernet/IPv4 ARP packet: [`ARP_LEN`] bytes present and the fixed
/// part is Ethernet/IPv4.
#[derive(Debug)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// `Err(ArpIgnored)` when shorter than 28 bytes or not Ethernet/IPv4.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        match buffer.as_ref().get(field::FIXED) {
            Some(f) if f == ETHERNET_IPV4 && buffer.as_ref().len() >= ARP_LEN => Ok(ArpPacket { buffer }),
            _ => Err(DropReason::ArpIgnored),
        }
    }

    /// The 28 checked bytes.
    #[inline]
    fn bytes(&self) -> &[u8; ARP_LEN] {
        match self.buffer.as_ref().first_chunk::<ARP_LEN>() {
            Some(b) => b,
            None => view_invariant_broken(),
        }
    }

    /// `ar$op` (1 request, 2 reply).
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(self.bytes(), field::OPER)
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_hw_addr(&self) -> MacAddr {
        mac(self.bytes(), field::SHA)
    }

    /// Sender protocol address.
    #[inline]
    pub fn sender_proto_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.bytes(), field::SPA))
    }

    /// Target hardware address.
    #[inline]
    pub fn target_hw_addr(&self) -> MacAddr {
        mac(self.bytes(), field::THA)
    }

    /// Target protocol address.
    #[inline]
    pub fn target_proto_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(self.bytes(), field::TPA))
    }

    /// The fields [`super::parse`] reports, with the packet at `offset` in its frame.
    #[inline]
    pub fn info(&self, offset: usize) -> ArpInfo {
        ArpInfo { offset, oper: self.operation(), spa: self.sender_proto_addr(), tpa: self.target_proto_addr() }
    }
}

/// Whether the ARP packet `a` in the Ethernet `frame` names a sender that may be answered
/// or learned: its sender hardware address (`ar$sha`) is an individual, non-zero address
/// equal to the frame's Ethernet source address, and its sender protocol address (`ar$spa`)
/// is a unicast address (not 0/8, 127/8, 224/4 or 240/4 with 255.255.255.255:
/// [`spillway_shared::martian::SourceAddr::never_unicast`]), except that a request from
/// 0.0.0.0 is an ARP Probe (RFC 5227 §2.1.1), answered (never learned) so that the prober
/// sees the address is in use. RFC 826 "Packet Reception" merges the sender's pair into the
/// cache and answers to `ar$sha`: a sender that is a group, zero or another station's
/// address would have us learn a bogus neighbour or send the reply to a group or to any
/// MAC the frame names. Whether `ar$spa` is one of our own addresses (an address
/// conflict) is the caller's check. `false` also when `a` does not fit in `frame`.
#[inline]
pub fn sender_is_valid(frame: &[u8], a: &ArpInfo) -> bool {
    let sha = frame.get(a.offset + field::SHA.start..a.offset + field::SHA.end);
    let (Some(src), Some(sha)) = (frame.get(6..12), sha) else {
        return false;
    };
    let spa = u32::from(a.spa);
    let probe = a.oper == OP_REQUEST && spa == 0;
    sha == src && sha[0] & 1 == 0 && sha != [0u8; 6] && (probe || !spillway_shared::martian::SourceAddr::never_unicast(spa))
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// The 28 checked bytes, writable.
    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8; ARP_LEN] {
        // Length checked by `new_checked`: `first_chunk_mut` always answers.
        match self.buffer.as_mut().first_chunk_mut::<ARP_LEN>() {
            Some(b) => b,
            None => view_invariant_broken(),
        }
    }

    /// Turns this request into the reply "`target_proto_addr` is at `our_mac`" (RFC 826
    /// "Packet Reception": swap sender and target, set `ar$sha` to our MAC, `ar$op` to
    /// reply). Returns the requester's MAC (the Ethernet destination of the reply).
    #[inline]
    pub fn make_reply(&mut self, our_mac: MacAddr) -> MacAddr {
        let requester = self.sender_hw_addr();
        let b = self.bytes_mut();
        let mut spa = [0u8; 4];
        spa.copy_from_slice(&b[field::SPA]);
        let mut tpa = [0u8; 4];
        tpa.copy_from_slice(&b[field::TPA]);
        b[field::OPER].copy_from_slice(&OP_REPLY.to_be_bytes());
        b[field::SHA].copy_from_slice(&our_mac);
        b[field::SPA].copy_from_slice(&tpa);
        b[field::THA].copy_from_slice(&requester);
        b[field::TPA].copy_from_slice(&spa);
        requester
    }
}

/// The MAC in the 6 bytes `r` of the checked packet.
#[inline]
fn mac(b: &[u8; ARP_LEN], r: std::ops::Range<usize>) -> MacAddr {
    let mut m = [0u8; 6];
    if let Some(s) = b.get(r) {
        m.copy_from_slice(s);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Vec<u8> {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
        a.extend_from_slice(&[2, 0, 0, 0, 0, 9, 10, 1, 0, 5]);
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&[10, 0, 0, 100]);
        a
    }

    #[test]
    fn reply_swaps_addresses() {
        let mut a = request();
        let mut p = ArpPacket::new_checked(&mut a[..]).unwrap();
        assert_eq!(p.info(14), ArpInfo { offset: 14, oper: 1, spa: Ipv4Addr::new(10, 1, 0, 5), tpa: Ipv4Addr::new(10, 0, 0, 100) });
        assert_eq!(p.make_reply([2, 0, 0, 0, 0, 1]), [2, 0, 0, 0, 0, 9]);
        assert_eq!(p.operation(), OP_REPLY);
        assert_eq!(p.sender_hw_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.sender_proto_addr(), Ipv4Addr::new(10, 0, 0, 100));
        assert_eq!(p.target_hw_addr(), [2, 0, 0, 0, 0, 9]);
        assert_eq!(p.target_proto_addr(), Ipv4Addr::new(10, 1, 0, 5));
    }

    #[test]
    fn refuses_short_or_foreign() {
        let a = request();
        assert_eq!(ArpPacket::new_checked(&a[..27]).err(), Some(DropReason::ArpIgnored));
        let mut b = a.clone();
        b[1] = 6; // token ring
        assert_eq!(ArpPacket::new_checked(&b[..]).err(), Some(DropReason::ArpIgnored));
    }

    proptest::proptest! {
        /// Random and mutated packets never panic; a reply of a reply is the request again
        /// (with our MAC as sender).
        #[test]
        fn mutated_never_panic_and_reply_round_trips(idx in 0usize..40, val in proptest::num::u8::ANY, cut in 0usize..30, rnd in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = ArpPacket::new_checked(&rnd[..]).map(|p| p.info(0));
            let mut a = request();
            if idx < a.len() { a[idx] = val; }
            let len = a.len().saturating_sub(cut);
            if let Ok(mut p) = ArpPacket::new_checked(&mut a[..len]) {
                let before = p.info(0);
                let requester = p.sender_hw_addr();
                let mac = p.make_reply([2, 0, 0, 0, 0, 1]);
                proptest::prop_assert_eq!(mac, requester);
                let after = p.info(0);
                proptest::prop_assert_eq!((after.spa, after.tpa, after.oper), (before.tpa, before.spa, OP_REPLY));
            }
        }
    }
}
