//! Multicast Listener Discovery version 2 reports (RFC 3810 §5.2), so that MLD-snooping
//! switches forward the Neighbor Solicitations for our IPv6 VIPs and port addresses to us:
//! a snooping switch forwards a solicited-node group's frames only to the ports that
//! reported a listener for it (RFC 4541 §3).
//!
//! A report is built off the packet path, by the control side, into a fixed array: IPv6
//! from the port's link-local address (RFC 3810 §5.2.13: "MLDv2 Reports MUST be sent with a
//! valid IPv6 link-local source address"), to all MLDv2-capable routers `ff02::16`, hop
//! limit 1, a Hop-by-Hop Options header with the Router Alert option (RFC 2711, value 0:
//! MLD; RFC 3810 §5), then ICMPv6 type 143 with one Multicast Address Record per group and
//! no sources (EXCLUDE {} = "every source": a plain join).

use super::ethernet::{emit_header, MacAddr, ETHERTYPE_IPV6, ETH_LEN};
use super::icmpv6::multicast_mac;
use super::ipv6::{upper_checksum, Ipv6Repr, IPV6_LEN, NH_ICMPV6};
use super::DropReason;

/// All MLDv2-capable routers, `ff02::16` (RFC 3810 §5.2.14).
pub const ALL_MLDV2_ROUTERS: u128 = 0xff02_0000_0000_0000_0000_0000_0000_0016;
/// ICMPv6 type of a Version 2 Multicast Listener Report (RFC 3810 §5.2).
pub const TYPE_MLDV2_REPORT: u8 = 143;
/// Record type "MODE_IS_EXCLUDE": a Current State Record (RFC 3810 §5.2.12), sent
/// periodically so that switches keep the membership.
pub const MODE_IS_EXCLUDE: u8 = 2;
/// Record type "CHANGE_TO_INCLUDE_MODE" with no sources: leaving the group (§5.2.12).
pub const CHANGE_TO_INCLUDE_MODE: u8 = 3;
/// Record type "CHANGE_TO_EXCLUDE_MODE" with no sources: joining the group (§5.2.12).
pub const CHANGE_TO_EXCLUDE_MODE: u8 = 4;
/// Hop-by-Hop Options header with Router Alert (MLD) and a 2-byte PadN: 8 bytes.
const HBH: [u8; 8] = [NH_ICMPV6, 0, 5, 2, 0, 0, 1, 0];
/// ICMPv6 header of a report: type, code, checksum, reserved, number of records.
const REPORT_HEADER_LEN: usize = 8;
/// One Multicast Address Record without sources: type, aux length, source count, address.
const RECORD_LEN: usize = 20;
/// Most records one report frame carries: the IPv6 packet stays within the minimum MTU
/// (RFC 8200 §5: 1280 bytes), so no link fragments or drops it.
pub const MAX_RECORDS: usize = 60;
/// Length of a report frame of [`MAX_RECORDS`] records: 14 + 40 + 8 + 8 + 60 × 20 = 1270.
pub const REPORT_FRAME_LEN: usize = ETH_LEN + IPV6_LEN + HBH.len() + REPORT_HEADER_LEN + MAX_RECORDS * RECORD_LEN;

/// The link-local address of a port with Ethernet address `mac` (RFC 4291 §2.5.1 and
/// Appendix A: modified EUI-64, the universal/local bit inverted; RFC 2464 §4-5).
pub fn link_local(mac: MacAddr) -> u128 {
    let iid = [mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]];
    (0xfe80u128 << 112) | u128::from(u64::from_be_bytes(iid))
}

/// Writes an MLDv2 report from `our_mac` (and its [`link_local`] address) with one record
/// of `record_type` and no sources per group of `groups` (1 to [`MAX_RECORDS`] IPv6
/// multicast addresses) into `frame`; returns the frame length (70 + 20 per group).
/// Errors: `NoHeadroom` when `frame` is too short, or `groups` is empty or too long.
pub fn report(frame: &mut [u8], our_mac: MacAddr, groups: &[u128], record_type: u8) -> Result<usize, DropReason> {
    if groups.is_empty() || groups.len() > MAX_RECORDS {
        return Err(DropReason::NoHeadroom);
    }
    let icmp_len = REPORT_HEADER_LEN + groups.len() * RECORD_LEN;
    let total = ETH_LEN + IPV6_LEN + HBH.len() + icmp_len;
    let frame = frame.get_mut(..total).ok_or(DropReason::NoHeadroom)?;
    emit_header(frame, multicast_mac(ALL_MLDV2_ROUTERS), our_mac, ETHERTYPE_IPV6)?;
    let src = link_local(our_mac);
    let ip = &mut frame[ETH_LEN..];
    Ipv6Repr { src, dst: ALL_MLDV2_ROUTERS, next_header: 0, payload_len: HBH.len() + icmp_len, hop_limit: 1, flow_label: 0 }.emit(ip)?;
    let (hbh, icmp) = ip[IPV6_LEN..].split_at_mut(HBH.len());
    hbh.copy_from_slice(&HBH);
    icmp.fill(0);
    icmp[0] = TYPE_MLDV2_REPORT;
    icmp[6..8].copy_from_slice(&(groups.len() as u16).to_be_bytes());
    for (rec, g) in icmp[REPORT_HEADER_LEN..].chunks_exact_mut(RECORD_LEN).zip(groups) {
        rec[0] = record_type;
        rec[4..20].copy_from_slice(&g.to_be_bytes());
    }
    let c = upper_checksum(src, ALL_MLDV2_ROUTERS, NH_ICMPV6, icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::icmpv6::solicited_node;
    use proptest::prelude::*;

    /// RFC 1071 over the pseudo-header and message, written out independently of
    /// `upper_checksum`: a correct checksum makes the sum 0xffff.
    fn sums_to_ones(src: u128, dst: u128, msg: &[u8]) -> bool {
        let mut words: Vec<u16> = Vec::new();
        for a in [src, dst] {
            words.extend(a.to_be_bytes().chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])));
        }
        let len = msg.len() as u32;
        words.extend([(len >> 16) as u16, len as u16, 0, u16::from(NH_ICMPV6)]);
        words.extend(msg.chunks(2).map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])));
        let mut s: u32 = words.iter().map(|w| u32::from(*w)).sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s == 0xffff
    }

    #[test]
    fn link_local_is_modified_eui64() {
        // RFC 4291 Appendix A: 02:00:00:00:00:01 -> fe80::ff:fe00:1 (U/L bit flipped to 0)
        assert_eq!(link_local([0x02, 0, 0, 0, 0, 1]), u128::from("fe80::ff:fe00:1".parse::<std::net::Ipv6Addr>().unwrap()));
        assert_eq!(link_local([0x00, 0x1b, 0x21, 0x0a, 0x0b, 0x0c]), u128::from("fe80::21b:21ff:fe0a:b0c".parse::<std::net::Ipv6Addr>().unwrap()));
    }

    #[test]
    fn a_report_has_the_fields_of_rfc_3810() {
        let mac = [0x02, 0, 0, 0, 0, 1];
        let g = solicited_node(u128::from("fd00:200::100".parse::<std::net::Ipv6Addr>().unwrap()));
        let mut f = [0u8; REPORT_FRAME_LEN];
        let n = report(&mut f, mac, &[g], CHANGE_TO_EXCLUDE_MODE).unwrap();
        assert_eq!(n, 90);
        assert_eq!(&f[0..6], &[0x33, 0x33, 0, 0, 0, 0x16], "to the Ethernet group of ff02::16");
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        let ip = &f[14..];
        assert_eq!(ip[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 8 + 8 + 20, "payload length");
        assert_eq!((ip[6], ip[7]), (0, 1), "Hop-by-Hop next, hop limit 1");
        assert_eq!(&ip[8..24], &link_local(mac).to_be_bytes());
        assert_eq!(&ip[24..40], &ALL_MLDV2_ROUTERS.to_be_bytes());
        assert_eq!(&ip[40..48], &[58, 0, 5, 2, 0, 0, 1, 0], "Router Alert (MLD) + PadN");
        let m = &ip[48..n - 14];
        assert_eq!((m[0], m[1]), (143, 0));
        assert_eq!(u16::from_be_bytes([m[6], m[7]]), 1);
        assert_eq!((m[8], m[9], m[10], m[11]), (4, 0, 0, 0), "CHANGE_TO_EXCLUDE, no aux data, no sources");
        assert_eq!(&m[12..28], &g.to_be_bytes());
        assert!(sums_to_ones(link_local(mac), ALL_MLDV2_ROUTERS, m));
        assert!(report(&mut f, mac, &[], MODE_IS_EXCLUDE).is_err());
        assert!(report(&mut f, mac, &[g; MAX_RECORDS + 1], MODE_IS_EXCLUDE).is_err());
        assert!(report(&mut f[..89], mac, &[g], MODE_IS_EXCLUDE).is_err());
    }

    proptest! {
        /// Any groups, any MAC: the checksum verifies, every record names its group.
        #[test]
        fn reports_verify(mac in any::<[u8; 6]>(), groups in proptest::collection::vec(any::<u128>(), 1..=MAX_RECORDS), t in 1u8..=6) {
            let mut f = [0u8; REPORT_FRAME_LEN];
            let n = report(&mut f, mac, &groups, t).unwrap();
            prop_assert_eq!(n, 70 + 20 * groups.len());
            let m = &f[14 + 48..n];
            prop_assert!(sums_to_ones(link_local(mac), ALL_MLDV2_ROUTERS, m));
            for (i, g) in groups.iter().enumerate() {
                prop_assert_eq!(&m[8 + 20 * i + 4..8 + 20 * i + 20], &g.to_be_bytes()[..]);
                prop_assert_eq!(m[8 + 20 * i], t);
            }
        }
    }
}
