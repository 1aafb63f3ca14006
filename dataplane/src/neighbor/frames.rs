//! Request frames the control side sends (built off the packet path, into fixed arrays):
//! ARP requests and announcements, and Neighbor Solicitations (RFC 4861 §7.2.2).

use super::FRAME_LEN;
use crate::wire::arp::{field, OP_REQUEST};
use crate::wire::{ETHERTYPE_ARP, ETH_LEN};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Broadcast MAC.
pub const BROADCAST: [u8; 6] = [0xff; 6];

/// An Ethernet broadcast ARP request (RFC 826) from `our_mac`/`our_addr` asking for
/// `target`, padded to [`FRAME_LEN`]. `our_addr` may be 0.0.0.0 when the port has no
/// address (an ARP probe, RFC 5227 §2.1.1, which hosts answer too).
pub fn request(our_mac: [u8; 6], our_addr: Ipv4Addr, target: Ipv4Addr) -> [u8; FRAME_LEN] {
    arp(our_mac, our_addr, target)
}

/// A gratuitous ARP for `addr` (RFC 5227 §3 "ARP Announcement": a request whose sender
/// and target address are both `addr`), so neighbours update their caches at start.
pub fn gratuitous(our_mac: [u8; 6], addr: Ipv4Addr) -> [u8; FRAME_LEN] {
    arp(our_mac, addr, addr)
}

/// A Neighbor Solicitation from `our_mac`/`our_addr` asking for `target`
/// ([`crate::wire::icmpv6::neighbor_solicitation`]: to its solicited-node multicast
/// address, Source Link-Layer Address option, hop limit 255), and its length (86 bytes).
/// `our_addr` is the port's IPv6 address, never `::` (that would be duplicate address
/// detection, RFC 4862 §5.4): `None` when it is unspecified.
pub fn solicitation(our_mac: [u8; 6], our_addr: Ipv6Addr, target: Ipv6Addr) -> Option<([u8; FRAME_LEN], usize)> {
    if our_addr.is_unspecified() {
        return None;
    }
    let mut f = [0u8; FRAME_LEN];
    let n = crate::wire::icmpv6::neighbor_solicitation(&mut f, u128::from(our_addr), u128::from(target), our_mac).ok()?;
    Some((f, n))
}

fn arp(sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> [u8; FRAME_LEN] {
    let mut f = [0u8; FRAME_LEN];
    f[0..6].copy_from_slice(&BROADCAST);
    f[6..12].copy_from_slice(&sha);
    f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let a = &mut f[ETH_LEN..];
    a[field::FIXED].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
    a[field::OPER].copy_from_slice(&OP_REQUEST.to_be_bytes());
    a[field::SHA].copy_from_slice(&sha);
    a[field::SPA].copy_from_slice(&spa.octets());
    a[field::TPA].copy_from_slice(&tpa.octets());
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{parse, Parsed};

    #[test]
    fn request_parses_as_the_request_it_is() {
        let f = request([2, 0, 0, 0, 0, 1], Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 11));
        let Ok(Parsed::Arp(a)) = parse(&f) else { panic!("not ARP") };
        assert_eq!((a.oper, a.spa, a.tpa, a.offset), (1, Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 11), 14));
        assert_eq!(&f[0..6], &BROADCAST);
        let p = crate::wire::ArpPacket::new_checked(&f[14..]).unwrap();
        assert_eq!(p.sender_hw_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.target_hw_addr(), [0; 6]);
        // the bytes of RFC 826 for Ethernet/IPv4, by hand
        assert_eq!(&f[12..22], &[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        assert!(f[42..].iter().all(|b| *b == 0), "padding is zero");
    }

    #[test]
    fn gratuitous_names_the_address_twice() {
        let f = gratuitous([2, 0, 0, 0, 0, 1], Ipv4Addr::new(10, 0, 0, 100));
        let Ok(Parsed::Arp(a)) = parse(&f) else { panic!("not ARP") };
        assert_eq!((a.oper, a.spa, a.tpa), (1, Ipv4Addr::new(10, 0, 0, 100), Ipv4Addr::new(10, 0, 0, 100)));
    }
}
