//! Ethernet II frames (IEEE 802.3 §3.2.6) with up to two VLAN tags: 802.1Q (0x8100) and
//! 802.1ad / QinQ (0x88a8, legacy 0x9100), IEEE 802.1Q §9.
//!
//! [`EthernetFrame`] is a view over a byte buffer in the style of smoltcp `wire::ethernet`:
//! [`EthernetFrame::new_checked`] checks the length once (including the tags it walks), and
//! every accessor after that reads inside the checked header.

use super::{view_invariant_broken, DropReason};

/// A MAC address, transmission order.
pub type MacAddr = [u8; 6];

/// Ethernet header length without tags: destination, source, EtherType.
pub const ETH_LEN: usize = 14;
/// Length of one VLAN tag (TPID + TCI).
pub const VLAN_TAG_LEN: usize = 4;
/// Most VLAN tags walked (QinQ: service tag + customer tag).
pub const MAX_TAGS: usize = 2;
/// EtherType IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType 802.1ad service tag (QinQ outer).
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Legacy QinQ EtherType.
pub const ETHERTYPE_QINQ_OLD: u16 = 0x9100;

/// Named byte ranges of the untagged header.
pub(crate) mod field {
    use std::ops::Range;
    /// Destination MAC.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType (or the TPID of the first tag).
    pub const ETHERTYPE: Range<usize> = 12..14;
}

/// Whether `ethertype` is the TPID of a VLAN tag this parser walks.
#[inline]
pub fn is_vlan_tpid(ethertype: u16) -> bool {
    matches!(ethertype, ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD)
}

/// A checked view of an Ethernet frame: `header_len` (14 + 4 per tag, ≤ 22) bytes are
/// present, so every accessor is in bounds.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
    header_len: usize,
    ethertype: u16,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the header and its tags (at most [`MAX_TAGS`]) fit in `buffer`.
    /// `Err(TruncatedEthernet)` otherwise. A third tag is not walked: its TPID is then the
    /// frame's EtherType (unsupported).
    #[inline(always)]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        let mut at = field::ETHERTYPE.start;
        let mut ethertype = be16_at(b, at).ok_or(DropReason::TruncatedEthernet)?;
        let mut tags = 0;
        while is_vlan_tpid(ethertype) && tags < MAX_TAGS {
            at += VLAN_TAG_LEN;
            tags += 1;
            ethertype = be16_at(b, at).ok_or(DropReason::TruncatedEthernet)?;
        }
        Ok(EthernetFrame { buffer, header_len: at + 2, ethertype })
    }

    /// Header length in bytes including tags (the offset of the L3 header): 14, 18 or 22.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Number of VLAN tags walked (0..=2).
    #[inline]
    pub fn tag_count(&self) -> usize {
        (self.header_len - ETH_LEN) / VLAN_TAG_LEN
    }

    /// Destination MAC.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.untagged()[field::DST]);
        m
    }

    /// Source MAC.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.untagged()[field::SRC]);
        m
    }

    /// Whether the source MAC has the individual/group bit (the least significant bit of
    /// its first octet) set: a multicast or broadcast source, which IEEE 802.3 §3.2.3
    /// never allows (a source address is an individual address).
    #[inline(always)]
    pub fn src_is_group(&self) -> bool {
        self.untagged()[field::SRC.start] & 1 != 0
    }

    /// The first 14 bytes (present by the check).
    #[inline]
    fn untagged(&self) -> &[u8; ETH_LEN] {
        match self.buffer.as_ref().first_chunk::<ETH_LEN>() {
            Some(h) => h,
            None => view_invariant_broken(),
        }
    }

    /// EtherType after the tags (e.g. [`ETHERTYPE_IPV4`]), as read by the check.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// The bytes after the header (L3 packet plus any Ethernet padding).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len..).unwrap_or(&[])
    }

    /// The whole buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    #[inline]
    pub fn set_dst_addr(&mut self, mac: MacAddr) {
        self.untagged_mut()[field::DST].copy_from_slice(&mac);
    }

    /// Sets the source MAC.
    #[inline]
    pub fn set_src_addr(&mut self, mac: MacAddr) {
        self.untagged_mut()[field::SRC].copy_from_slice(&mac);
    }

    /// The first 14 bytes (present by the check), writable.
    #[inline]
    fn untagged_mut(&mut self) -> &mut [u8; ETH_LEN] {
        match self.buffer.as_mut().first_chunk_mut::<ETH_LEN>() {
            Some(h) => h,
            None => view_invariant_broken(),
        }
    }

    /// The L2 DSR rewrite (docs/architecture.md): destination = the backend's (or next
    /// hop's) MAC, source = our port's MAC. Tags and the L3 packet stay as they came.
    #[inline]
    pub fn rewrite_l2(&mut self, dst: MacAddr, src: MacAddr) {
        self.set_dst_addr(dst);
        self.set_src_addr(src);
    }

    /// The bytes after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len;
        self.buffer.as_mut().get_mut(at..).unwrap_or(&mut [])
    }
}

/// Writes an untagged Ethernet header (`dst`, `src`, `ethertype`) into the first 14 bytes
/// of `buf`; `Err(TruncatedEthernet)` if `buf` is shorter.
#[inline]
pub fn emit_header(buf: &mut [u8], dst: MacAddr, src: MacAddr, ethertype: u16) -> Result<(), DropReason> {
    let h: &mut [u8; ETH_LEN] = buf.get_mut(..ETH_LEN).and_then(|h| h.try_into().ok()).ok_or(DropReason::TruncatedEthernet)?;
    h[field::DST].copy_from_slice(&dst);
    h[field::SRC].copy_from_slice(&src);
    h[field::ETHERTYPE].copy_from_slice(&ethertype.to_be_bytes());
    Ok(())
}

/// Big-endian u16 at `at`, `None` past the end.
#[inline]
pub(crate) fn be16_at(b: &[u8], at: usize) -> Option<u16> {
    match b.get(at..at.checked_add(2)?) {
        Some(&[x, y]) => Some(u16::from_be_bytes([x, y])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tags: &[u16], ethertype: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 1];
        for (i, t) in tags.iter().enumerate() {
            let tpid = if i == 0 && tags.len() == 2 { ETHERTYPE_QINQ } else { ETHERTYPE_VLAN };
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&t.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&[0x45; 20]);
        f
    }

    #[test]
    fn walks_up_to_two_tags() {
        for tags in [&[][..], &[100][..], &[200, 100][..]] {
            let f = frame(tags, ETHERTYPE_IPV4);
            let e = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(e.header_len(), 14 + 4 * tags.len());
            assert_eq!(e.tag_count(), tags.len());
            assert_eq!(e.ethertype(), ETHERTYPE_IPV4);
            assert_eq!(e.dst_addr(), [2, 0, 0, 0, 0, 9]);
            assert_eq!(e.src_addr(), [2, 0, 0, 0, 0, 1]);
            assert_eq!(e.payload().len(), 20);
        }
        // a third tag is the EtherType
        let f = frame(&[1, 2, 3], ETHERTYPE_IPV4);
        assert_eq!(EthernetFrame::new_checked(&f[..]).unwrap().ethertype(), ETHERTYPE_VLAN);
    }

    #[test]
    fn rewrite_keeps_tags() {
        let mut f = frame(&[200, 100], ETHERTYPE_IPV4);
        let orig = f.clone();
        let mut e = EthernetFrame::new_checked(&mut f[..]).unwrap();
        e.rewrite_l2([2, 0, 0, 0, 0, 0xb], [2, 0, 0, 0, 0, 1]);
        assert_eq!(e.dst_addr(), [2, 0, 0, 0, 0, 0xb]);
        assert_eq!(&f[12..], &orig[12..]);
    }

    #[test]
    fn emit_needs_room() {
        assert_eq!(emit_header(&mut [0u8; 13], [1; 6], [2; 6], ETHERTYPE_IPV4), Err(DropReason::TruncatedEthernet));
        let mut b = [0u8; 14];
        emit_header(&mut b, [1; 6], [2; 6], ETHERTYPE_ARP).unwrap();
        let e = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!((e.dst_addr(), e.src_addr(), e.ethertype()), ([1; 6], [2; 6], ETHERTYPE_ARP));
    }

    proptest::proptest! {
        /// Random bytes never panic; a checked header always lies inside the buffer.
        #[test]
        fn random_frames_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            if let Ok(mut e) = EthernetFrame::new_checked(bytes.clone()) {
                proptest::prop_assert!(e.header_len() <= bytes.len());
                proptest::prop_assert!(e.tag_count() <= MAX_TAGS);
                let _ = (e.ethertype(), e.payload().len(), e.dst_addr());
                e.rewrite_l2([7; 6], [8; 6]);
            } else {
                proptest::prop_assert!(bytes.len() < ETH_LEN + 2 * VLAN_TAG_LEN);
            }
        }

        /// emit then parse round-trips.
        #[test]
        fn emit_parse_round_trip(dst in proptest::array::uniform6(0u8..), src in proptest::array::uniform6(0u8..), et in 0u16..0x8000) {
            let mut b = [0u8; 14];
            emit_header(&mut b, dst, src, et).unwrap();
            let e = EthernetFrame::new_checked(&b[..]).unwrap();
            proptest::prop_assert_eq!((e.dst_addr(), e.src_addr(), e.ethertype(), e.header_len()), (dst, src, et, ETH_LEN));
        }
    }
}
