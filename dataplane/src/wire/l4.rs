//! TCP (RFC 9293 §3.1) and UDP (RFC 768) headers: checked views of the fields a load
//! balancer reads (ports, TCP flags), and [`UdpRepr`] for the GUE outer header.

use super::{be16, view_invariant_broken, DropReason};

/// TCP header length without options (data offset 5).
pub const TCP_MIN_LEN: usize = 20;
/// UDP header length.
pub const UDP_LEN: usize = 8;

/// TCP flag bits (RFC 9293 §3.1, byte 13 of the header).
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// Named byte ranges of the TCP header (RFC 9293 §3.1).
pub(crate) mod tcp_field {
    use std::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Data offset (high nibble, 32-bit words).
    pub const DATA_OFF: usize = 12;
    /// Flags (CWR ECE URG ACK PSH RST SYN FIN).
    pub const FLAGS: usize = 13;
}

/// Named byte ranges of the UDP header (RFC 768).
pub(crate) mod udp_field {
    use std::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length (header + data).
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum (0 = none, allowed over IPv4).
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// A checked view of a TCP header: 20 bytes present, `20 ≤ data offset·4 ≤ segment length`.
#[derive(Debug)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// `Err(TruncatedL4)` when the header (with its options) does not fit in `buffer`
    /// (RFC 9293 §3.1: data offset ≥ 5 words, within the segment).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let b = buffer.as_ref();
        let h = b.first_chunk::<TCP_MIN_LEN>().ok_or(DropReason::TruncatedL4)?;
        let doff = usize::from(h[tcp_field::DATA_OFF] >> 4) * 4;
        if doff < TCP_MIN_LEN || doff > b.len() {
            return Err(DropReason::TruncatedL4);
        }
        Ok(TcpPacket { buffer })
    }

    #[inline]
    fn fixed(&self) -> &[u8; TCP_MIN_LEN] {
        match self.buffer.as_ref().first_chunk::<TCP_MIN_LEN>() {
            Some(h) => h,
            None => view_invariant_broken(),
        }
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.fixed(), tcp_field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.fixed(), tcp_field::DST_PORT)
    }

    /// Header length in bytes (data offset × 4, 20..=60).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.fixed()[tcp_field::DATA_OFF] >> 4) * 4
    }

    /// Flag byte ([`tcp_flags`]).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.fixed()[tcp_field::FLAGS]
    }
}

/// A checked view of a UDP header: 8 bytes present. The length field is not checked
/// against the buffer (a load balancer forwards the datagram as it came).
#[derive(Debug)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// `Err(TruncatedL4)` when shorter than 8 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < UDP_LEN {
            return Err(DropReason::TruncatedL4);
        }
        Ok(UdpPacket { buffer })
    }

    #[inline]
    fn fixed(&self) -> &[u8; UDP_LEN] {
        match self.buffer.as_ref().first_chunk::<UDP_LEN>() {
            Some(h) => h,
            None => view_invariant_broken(),
        }
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.fixed(), udp_field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.fixed(), udp_field::DST_PORT)
    }

    /// Length field (header + data, bytes).
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.fixed(), udp_field::LENGTH)
    }

    /// Whether the length field is 0 (never valid: it counts the 8-byte header).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checksum field (0 = not computed).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.fixed(), udp_field::CHECKSUM)
    }
}

/// A UDP header to write, checksum 0: allowed for UDP over IPv4 (RFC 768 "an all zero
/// transmitted checksum value means that the transmitter generated no checksum") and what
/// GUE tunnels send (RFC 8086 §4.1 / draft-ietf-intarea-gue §5.6.3 for IPv4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes (the length field is this + 8).
    pub payload_len: usize,
}

impl UdpRepr {
    /// Writes the 8-byte header at the start of `buf`. `Err(TruncatedL4)` when `buf` is
    /// shorter than 8 bytes or the length does not fit 16 bits.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), DropReason> {
        let len = u16::try_from(self.payload_len + UDP_LEN).map_err(|_| DropReason::TruncatedL4)?;
        let h = buf.first_chunk_mut::<UDP_LEN>().ok_or(DropReason::TruncatedL4)?;
        h[udp_field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        h[udp_field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        h[udp_field::LENGTH].copy_from_slice(&len.to_be_bytes());
        h[udp_field::CHECKSUM].copy_from_slice(&[0, 0]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tcp(doff: u8, flags: u8, len: usize) -> Vec<u8> {
        let mut h = vec![0u8; len];
        h[0..2].copy_from_slice(&40000u16.to_be_bytes());
        h[2..4].copy_from_slice(&80u16.to_be_bytes());
        if len > 13 {
            h[12] = doff << 4;
            h[13] = flags;
        }
        h
    }

    #[test]
    fn tcp_data_offset_is_checked() {
        let t = tcp(5, tcp_flags::SYN, 20);
        let p = TcpPacket::new_checked(&t[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.flags(), p.header_len()), (40000, 80, tcp_flags::SYN, 20));
        assert_eq!(TcpPacket::new_checked(&tcp(4, 0, 20)[..]).err(), Some(DropReason::TruncatedL4));
        assert_eq!(TcpPacket::new_checked(&tcp(6, 0, 20)[..]).err(), Some(DropReason::TruncatedL4));
        assert_eq!(TcpPacket::new_checked(&tcp(5, 0, 19)[..]).err(), Some(DropReason::TruncatedL4));
        assert!(TcpPacket::new_checked(&tcp(15, 0, 60)[..]).is_ok());
    }

    #[test]
    fn udp_needs_eight_bytes() {
        assert_eq!(UdpPacket::new_checked(&[0u8; 7][..]).err(), Some(DropReason::TruncatedL4));
        assert_eq!(UdpRepr { src_port: 1, dst_port: 2, payload_len: 0 }.emit(&mut [0u8; 7]), Err(DropReason::TruncatedL4));
        assert_eq!(UdpRepr { src_port: 1, dst_port: 2, payload_len: 65_528 }.emit(&mut [0u8; 8]), Err(DropReason::TruncatedL4));
    }

    proptest! {
        /// UDP emit → check → read round-trips.
        #[test]
        fn udp_round_trip(src_port in any::<u16>(), dst_port in any::<u16>(), payload_len in 0usize..65_528) {
            let mut b = [0xffu8; 8];
            UdpRepr { src_port, dst_port, payload_len }.emit(&mut b).unwrap();
            let u = UdpPacket::new_checked(&b[..]).unwrap();
            prop_assert_eq!((u.src_port(), u.dst_port(), usize::from(u.len()), u.checksum()), (src_port, dst_port, payload_len + 8, 0));
        }

        /// Random and mutated headers never panic; a checked TCP header fits its buffer.
        #[test]
        fn mutated_never_panic(idx in 0usize..24, val in any::<u8>(), cut in 0usize..24, rnd in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut t = tcp(5, tcp_flags::ACK, 24);
            t[idx] = val;
            let n = t.len() - cut;
            for b in [&t[..n], &rnd[..]] {
                if let Ok(p) = TcpPacket::new_checked(b) {
                    prop_assert!(p.header_len() <= b.len());
                    let _ = (p.src_port(), p.dst_port(), p.flags());
                }
                if let Ok(u) = UdpPacket::new_checked(b) {
                    let _ = (u.src_port(), u.dst_port(), u.len(), u.checksum());
                }
            }
        }
    }
}
