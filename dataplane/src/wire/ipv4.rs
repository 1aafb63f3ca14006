//! IPv4 headers (RFC 791 §3.1): a checked view for parsing, [`Ipv4Repr`] for writing.

use super::checksum::checksum;
use super::{be16, be32, view_invariant_broken, DropReason};

/// Minimum (and, when we write one, the only) IPv4 header length: IHL 5.
pub const IPV4_MIN_LEN: usize = 20;
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of IPv4-in-IPv4 (RFC 2003).
pub const PROTO_IPIP: u8 = 4;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// Largest IPv4 datagram (the 16-bit total length, RFC 791).
pub const MAX_DATAGRAM: usize = 65_535;

/// Named byte ranges / offsets of the fixed header (RFC 791 §3.1), relative to its start.
pub(crate) mod field {
    use std::ops::Range;
    /// Version (high nibble) and IHL in 32-bit words (low nibble).
    pub const VER_IHL: usize = 0;
    /// DSCP/ECN.
    pub const TOS: usize = 1;
    /// Total length, bytes (header + payload).
    pub const TOTAL_LEN: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (reserved, DF 0x4000, MF 0x2000) and fragment offset (8-byte units).
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum (RFC 1071 over the header).
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
}

/// Don't-fragment flag bit in the flags/offset word.
const FLAG_DF: u16 = 0x4000;
/// More-fragments flag bit.
const FLAG_MF: u16 = 0x2000;
/// Fragment offset mask (8-byte units).
const FRAG_OFFSET: u16 = 0x1fff;

/// IPv4 fragmentation state of a packet (RFC 791 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Frag {
    /// More-fragments flag.
    pub more: bool,
    /// Fragment offset in 8-byte units.
    pub offset: u16,
    /// Don't-fragment flag.
    pub dont_fragment: bool,
}

impl Frag {
    /// Whether this packet is a fragment (first or not).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more || self.offset != 0
    }
}

/// A checked view of an IPv4 header and its payload. After [`Ipv4Packet::new_checked`]:
/// version 4, `20 ≤ IHL·4 ≤ total length ≤ buffer length`, and the fragment ends within a
/// 65,535-byte datagram. Options are kept but not interpreted.
#[derive(Debug)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks the header (`Err(MalformedIpv4)`: shorter than 20 bytes, version ≠ 4, IHL < 5,
    /// fragment past 65,535 bytes; `Err(TruncatedIpv4)`: total length below the header or
    /// beyond the buffer). Bytes after the total length (Ethernet padding) are allowed.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let len = buffer.as_ref().len();
        Self::new_checked_head(buffer, len)
    }

    /// Like [`Self::new_checked`] for the first bytes of a packet that is `packet_len`
    /// bytes long from this header on (the first segment of a multi-segment packet): the total length is checked against `packet_len`, and [`Self::payload`]
    /// and [`Self::packet`] stop at the end of `buffer`. The fixed header must be in
    /// `buffer` (`Err(MalformedIpv4)` otherwise).
    #[inline]
    pub fn new_checked_head(buffer: T, packet_len: usize) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        let packet_len = packet_len.max(b.len());
        let h = b.first_chunk::<IPV4_MIN_LEN>().ok_or(DropReason::MalformedIpv4)?;
        let ihl = usize::from(h[field::VER_IHL] & 0x0f) * 4;
        if h[field::VER_IHL] >> 4 != 4 || ihl < IPV4_MIN_LEN {
            return Err(DropReason::MalformedIpv4);
        }
        let total_len = usize::from(be16(h, field::TOTAL_LEN));
        if total_len < ihl || total_len > packet_len {
            return Err(DropReason::TruncatedIpv4);
        }
        // RFC 791: the fragment must end within the 65,535-byte datagram.
        let offset = usize::from(be16(h, field::FLAGS_FRAG) & FRAG_OFFSET);
        if offset * 8 + (total_len - ihl) > MAX_DATAGRAM {
            return Err(DropReason::MalformedIpv4);
        }
        Ok(Ipv4Packet { buffer })
    }

    /// The fixed 20 bytes (present by the check).
    #[inline]
    fn fixed(&self) -> &[u8; IPV4_MIN_LEN] {
        match self.buffer.as_ref().first_chunk::<IPV4_MIN_LEN>() {
            Some(h) => h,
            None => view_invariant_broken(),
        }
    }

    /// Header length in bytes (IHL × 4, 20..=60).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.fixed()[field::VER_IHL] & 0x0f) * 4
    }

    /// Total length in bytes (header + payload).
    #[inline]
    pub fn total_len(&self) -> usize {
        usize::from(be16(self.fixed(), field::TOTAL_LEN))
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.fixed(), field::IDENT)
    }

    /// Flags and fragment offset.
    #[inline]
    pub fn frag(&self) -> Frag {
        let ff = be16(self.fixed(), field::FLAGS_FRAG);
        Frag { more: ff & FLAG_MF != 0, offset: ff & FRAG_OFFSET, dont_fragment: ff & FLAG_DF != 0 }
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.fixed()[field::TTL]
    }

    /// Protocol (e.g. [`PROTO_TCP`]).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.fixed()[field::PROTOCOL]
    }

    /// Header checksum as stored.
    #[inline]
    pub fn header_checksum(&self) -> u16 {
        be16(self.fixed(), field::CHECKSUM)
    }

    /// Whether the header checksum is valid (RFC 1071 §1 step 3).
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        self.buffer.as_ref().get(..self.header_len()).is_some_and(|h| checksum(h) == 0)
    }

    /// Source address (host order).
    #[inline]
    pub fn src_addr(&self) -> u32 {
        be32(self.fixed(), field::SRC)
    }

    /// Destination address (host order).
    #[inline]
    pub fn dst_addr(&self) -> u32 {
        be32(self.fixed(), field::DST)
    }

    /// The payload: bytes `header_len..total_len` (padding after it excluded), or up to
    /// the end of the buffer for a [`Self::new_checked_head`] view.
    #[inline(always)]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        b.get(self.header_len()..self.total_len().min(b.len())).unwrap_or(&[])
    }

    /// Header and payload (`..total_len`; up to the end of the buffer for a head view).
    #[inline]
    pub fn packet(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        b.get(..self.total_len().min(b.len())).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the TTL (the caller then refreshes the checksum with [`Self::fill_checksum`]).
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        match self.buffer.as_mut().first_chunk_mut::<IPV4_MIN_LEN>() {
            Some(h) => h[field::TTL] = ttl,
            None => view_invariant_broken(),
        }
    }

    /// Recomputes the header checksum over `header_len` bytes.
    #[inline]
    pub fn fill_checksum(&mut self) {
        let ihl = self.header_len();
        match self.buffer.as_mut().get_mut(..ihl) {
            Some(h) => {
                h[field::CHECKSUM].copy_from_slice(&[0, 0]);
                let c = checksum(h);
                h[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
            }
            None => view_invariant_broken(),
        }
    }
}

/// An IPv4 header to write: always IHL 5 (no options), TOS 0, fragment offset 0, MF clear
/// (we never fragment), valid checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload length in bytes (total length − 20).
    pub payload_len: usize,
    /// Identification (RFC 6864: any value, 0 included, for atomic datagrams — DF set).
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_fragment: bool,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4Repr {
    /// Writes the 20-byte header at the start of `buf` with a valid checksum.
    /// `Err(TruncatedIpv4)` when `buf` is shorter than 20 bytes; `Err(MalformedIpv4)` when
    /// the total length would exceed 65,535.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), DropReason> {
        let total = u16::try_from(self.payload_len + IPV4_MIN_LEN).map_err(|_| DropReason::MalformedIpv4)?;
        let h = buf.first_chunk_mut::<IPV4_MIN_LEN>().ok_or(DropReason::TruncatedIpv4)?;
        h[field::VER_IHL] = 0x45;
        h[field::TOS] = 0;
        h[field::TOTAL_LEN].copy_from_slice(&total.to_be_bytes());
        h[field::IDENT].copy_from_slice(&self.ident.to_be_bytes());
        let ff = if self.dont_fragment { FLAG_DF } else { 0 };
        h[field::FLAGS_FRAG].copy_from_slice(&ff.to_be_bytes());
        h[field::TTL] = self.ttl;
        h[field::PROTOCOL] = self.protocol;
        h[field::CHECKSUM].copy_from_slice(&[0, 0]);
        h[field::SRC].copy_from_slice(&self.src.to_be_bytes());
        h[field::DST].copy_from_slice(&self.dst.to_be_bytes());
        let c = checksum(h);
        h[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }

    /// The header of a checked packet (options dropped, payload length from the total).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Ipv4Repr {
        let f = p.frag();
        Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len(),
            ident: p.ident(),
            dont_fragment: f.dont_fragment,
            ttl: p.ttl(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    fn repr() -> impl Strategy<Value = Ipv4Repr> {
        (any::<u32>(), any::<u32>(), any::<u8>(), 0usize..200, any::<u16>(), any::<bool>(), any::<u8>()).prop_map(|(src, dst, protocol, payload_len, ident, dont_fragment, ttl)| Ipv4Repr {
            src,
            dst,
            protocol,
            payload_len,
            ident,
            dont_fragment,
            ttl,
        })
    }

    #[test]
    fn emit_refuses_short_buffers_and_huge_lengths() {
        let r = Ipv4Repr { src: 1, dst: 2, protocol: PROTO_UDP, payload_len: 0, ident: 0, dont_fragment: true, ttl: 64 };
        assert_eq!(r.emit(&mut [0u8; 19]), Err(DropReason::TruncatedIpv4));
        assert_eq!(Ipv4Repr { payload_len: 65_516, ..r }.emit(&mut [0u8; 20]), Err(DropReason::MalformedIpv4));
        assert_eq!(Ipv4Repr { payload_len: 65_515, ..r }.emit(&mut [0u8; 20]), Ok(()));
    }

    #[test]
    fn check_errors_name_reasons() {
        let mut b = [0u8; 40];
        Ipv4Repr { src: 1, dst: 2, protocol: PROTO_TCP, payload_len: 20, ident: 7, dont_fragment: false, ttl: 9 }.emit(&mut b).unwrap();
        assert!(Ipv4Packet::new_checked(&b[..]).is_ok());
        assert_eq!(Ipv4Packet::new_checked(&b[..19]).err(), Some(DropReason::MalformedIpv4));
        assert_eq!(Ipv4Packet::new_checked(&b[..39]).err(), Some(DropReason::TruncatedIpv4));
        let mut v6 = b;
        v6[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&v6[..]).err(), Some(DropReason::MalformedIpv4));
        let mut ihl4 = b;
        ihl4[0] = 0x44;
        assert_eq!(Ipv4Packet::new_checked(&ihl4[..]).err(), Some(DropReason::MalformedIpv4));
        let mut far = b;
        far[6..8].copy_from_slice(&0x1fffu16.to_be_bytes()); // offset 65,528 + 20 bytes
        assert_eq!(Ipv4Packet::new_checked(&far[..]).err(), Some(DropReason::MalformedIpv4));
    }

    proptest! {
        /// emit → check → parse gives the same header; the checksum matches etherparse's.
        #[test]
        fn emit_parse_round_trip(r in repr()) {
            let mut b = vec![0u8; IPV4_MIN_LEN + r.payload_len];
            r.emit(&mut b).unwrap();
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Ipv4Repr::parse(&p), r);
            prop_assert_eq!(p.frag(), Frag { more: false, offset: 0, dont_fragment: r.dont_fragment });
            let theirs = etherparse::Ipv4HeaderSlice::from_slice(&b).unwrap().to_header().calc_header_checksum();
            prop_assert_eq!(p.header_checksum(), theirs);
        }

        /// Random and mutated headers never panic; a checked view's slices stay in bounds.
        #[test]
        fn mutated_never_panic(idx in 0usize..40, val in any::<u8>(), cut in 0usize..40, rnd in proptest::collection::vec(any::<u8>(), 0..80)) {
            for buf in [rnd.clone(), {
                let mut out = Vec::new();
                PacketBuilder::ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64).udp(1, 2).write(&mut out, &[1, 2, 3]).unwrap();
                if idx < out.len() { out[idx] = val; }
                let n = out.len().saturating_sub(cut);
                out.truncate(n);
                out
            }] {
                if let Ok(mut p) = Ipv4Packet::new_checked(buf.clone()) {
                    prop_assert!(p.header_len() <= p.total_len() && p.total_len() <= buf.len());
                    prop_assert_eq!(p.payload().len(), p.total_len() - p.header_len());
                    let _ = (p.frag(), p.ttl(), p.protocol(), p.src_addr(), p.dst_addr(), p.ident(), p.packet().len());
                    p.set_ttl(1);
                    p.fill_checksum();
                    prop_assert!(p.verify_checksum());
                }
            }
        }
    }
}
