//! ICMP for IPv4 (RFC 792): reading the flow an error quotes, and writing the
//! "fragmentation needed" error of path MTU discovery (RFC 1191 §4).

use super::checksum::checksum;
use super::ethernet::{EthernetFrame, MacAddr};
use super::ipv4::{Ipv4Repr, IPV4_MIN_LEN, PROTO_ICMP, PROTO_TCP, PROTO_UDP};
use super::ipv4::field as ip_field;
use super::l4::udp_field;
use super::{be16, be32, view_invariant_broken, DropReason, Ipv4Info};

/// ICMP header length: type, code, checksum, 4 bytes of "rest of header".
pub const ICMP_HEADER_LEN: usize = 8;
/// Bytes of the offending datagram's payload an ICMP error quotes (RFC 792: "the internet
/// header plus the first 64 bits of the original datagram's data").
pub const QUOTED_PAYLOAD: usize = 8;
/// Destination unreachable.
pub const TYPE_DEST_UNREACHABLE: u8 = 3;
/// Time exceeded.
pub const TYPE_TIME_EXCEEDED: u8 = 11;
/// Parameter problem.
pub const TYPE_PARAMETER_PROBLEM: u8 = 12;
/// Code "fragmentation needed and DF set" of destination unreachable.
pub const CODE_FRAG_NEEDED: u8 = 4;
/// TTL of the ICMP errors we originate (RFC 1812 §4.2.2.9 leaves it to configuration;
/// the common host default).
pub const REPLY_TTL: u8 = 64;

/// Named byte ranges of the ICMP header (RFC 792).
pub(crate) mod field {
    use std::ops::Range;
    /// Type.
    pub const TYPE: usize = 0;
    /// Code.
    pub const CODE: usize = 1;
    /// Checksum over the whole ICMP message.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Unused for type 3 (RFC 1191 §4: the low 16 bits are the next-hop MTU for code 4).
    pub const UNUSED: Range<usize> = 4..6;
    /// Next-hop MTU (type 3 code 4, RFC 1191 §4).
    pub const NEXT_HOP_MTU: Range<usize> = 6..8;
}

/// A checked view of an ICMP message: at least the 8-byte header is present.
#[derive(Debug)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// `Err(IcmpQuoteTooShort)` when shorter than the 8-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        if buffer.as_ref().len() < ICMP_HEADER_LEN {
            return Err(DropReason::IcmpQuoteTooShort);
        }
        Ok(IcmpPacket { buffer })
    }

    #[inline]
    fn fixed(&self) -> &[u8; ICMP_HEADER_LEN] {
        match self.buffer.as_ref().first_chunk::<ICMP_HEADER_LEN>() {
            Some(h) => h,
            None => view_invariant_broken(),
        }
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.fixed()[field::TYPE]
    }

    /// Message code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.fixed()[field::CODE]
    }

    /// Whether this is an error message that quotes a datagram (types 3, 11, 12).
    #[inline]
    pub fn is_error(&self) -> bool {
        matches!(self.msg_type(), TYPE_DEST_UNREACHABLE | TYPE_TIME_EXCEEDED | TYPE_PARAMETER_PROBLEM)
    }

    /// Bytes after the 8-byte header (for errors: the quoted datagram).
    #[inline]
    pub fn data(&self) -> &[u8] {
        self.buffer.as_ref().get(ICMP_HEADER_LEN..).unwrap_or(&[])
    }
}

/// The flow an ICMP error quotes (RFC 792: IP header + first 8 bytes of the datagram),
/// reversed to the direction client → VIP: the quoted packet is the backend's reply
/// (VIP → client), so `src`/`dst` and ports are swapped back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpQuote {
    /// ICMP type (3 unreachable, 11 time exceeded, 12 parameter problem).
    pub icmp_type: u8,
    /// ICMP code.
    pub code: u8,
    /// Client address (quoted destination).
    pub client: u32,
    /// VIP (quoted source).
    pub vip: u32,
    /// Client port (quoted destination port).
    pub client_port: u16,
    /// VIP port (quoted source port).
    pub vip_port: u16,
    /// Quoted protocol.
    pub proto: u8,
}

/// Reads the quoted flow of the ICMP message in `frame` (parsed as `outer`). `Ok(None)` for
/// fragments and for messages that are not errors (echo etc.); `Err(IcmpQuoteTooShort)`
/// when the quote lacks an IPv4 header plus 8 bytes (the quoted header's own lengths are
/// not checked: it is usually truncated).
#[inline]
pub fn icmp_quote(frame: &[u8], outer: &Ipv4Info) -> Result<Option<IcmpQuote>, DropReason> {
    if outer.frag.is_fragment() {
        return Ok(None);
    }
    let msg = frame.get(outer.l4()..outer.l3 + outer.total_len).ok_or(DropReason::IcmpQuoteTooShort)?;
    let icmp = IcmpPacket::new_checked(msg)?;
    if !icmp.is_error() {
        return Ok(None);
    }
    let inner = icmp.data();
    let h = inner.first_chunk::<IPV4_MIN_LEN>().ok_or(DropReason::IcmpQuoteTooShort)?;
    if h[ip_field::VER_IHL] >> 4 != 4 {
        return Err(DropReason::IcmpQuoteTooShort);
    }
    let ihl = usize::from(h[ip_field::VER_IHL] & 0x0f) * 4;
    let l4 = inner.get(ihl..).and_then(|l| l.first_chunk::<QUOTED_PAYLOAD>()).ok_or(DropReason::IcmpQuoteTooShort)?;
    let proto = h[ip_field::PROTOCOL];
    // TCP and UDP both start with the source and destination ports.
    let (sport, dport) = if proto == PROTO_TCP || proto == PROTO_UDP {
        (be16(l4, udp_field::SRC_PORT), be16(l4, udp_field::DST_PORT))
    } else {
        (0, 0)
    };
    Ok(Some(IcmpQuote {
        icmp_type: icmp.msg_type(),
        code: icmp.code(),
        vip: be32(h, ip_field::SRC),
        client: be32(h, ip_field::DST),
        vip_port: sport,
        client_port: dport,
        proto,
    }))
}

/// Length of the ICMP "fragmentation needed" reply built by [`icmp_frag_needed_in_place`]
/// for a packet whose IPv4 header starts at `l3` (Ethernet + the client's VLAN tags):
/// IPv4 + ICMP header + quoted IPv4 header + 8 bytes (RFC 792, RFC 1191).
#[inline]
pub fn frag_needed_len(l3: usize, quoted_ihl: usize) -> usize {
    l3 + IPV4_MIN_LEN + ICMP_HEADER_LEN + quoted_ihl + QUOTED_PAYLOAD
}

/// Rewrites `frame` (an oversize DF packet to a VIP, parsed as `p`) into an ICMP
/// destination unreachable / fragmentation needed (type 3 code 4, RFC 792 and RFC 1191 §4:
/// next-hop MTU in the low 16 bits of the second word) sent from the VIP back to the client
/// with our MAC `our_mac`, quoting the offending header plus 8 bytes. The reply leaves by
/// the receiving port, so the client's VLAN tags (everything between the MACs and `p.l3`)
/// are kept as they came. Checksums are valid; fragment offset and flags are 0.
///
/// Returns the new frame length (the caller truncates); `Err(TruncatedIpv4)` when `frame`
/// does not hold the packet `p` describes (`p` is from another frame).
pub fn icmp_frag_needed_in_place(frame: &mut [u8], p: &Ipv4Info, mtu: u16, our_mac: MacAddr) -> Result<usize, DropReason> {
    let quote_len = (p.ihl + QUOTED_PAYLOAD).min(p.total_len);
    let mut quote = [0u8; 60 + QUOTED_PAYLOAD];
    let q = frame.get(p.l3..p.l3 + quote_len).ok_or(DropReason::TruncatedIpv4)?;
    quote.get_mut(..quote_len).ok_or(DropReason::MalformedIpv4)?.copy_from_slice(q);
    let icmp_at = p.l3 + IPV4_MIN_LEN;
    let total = icmp_at + ICMP_HEADER_LEN + quote_len;
    let frame = frame.get_mut(..total).ok_or(DropReason::TruncatedIpv4)?;
    let mut eth = EthernetFrame::new_checked(&mut *frame)?;
    let client_mac = eth.src_addr();
    eth.rewrite_l2(client_mac, our_mac);
    // The EtherType before `l3` (after any tags) is already IPv4.
    let (ip, icmp) = frame.split_at_mut(icmp_at);
    let ip = ip.get_mut(p.l3..).ok_or(DropReason::TruncatedIpv4)?;
    Ipv4Repr { src: p.dst, dst: p.src, protocol: PROTO_ICMP, payload_len: ICMP_HEADER_LEN + quote_len, ident: 0, dont_fragment: false, ttl: REPLY_TTL }.emit(ip)?;
    let hdr = icmp.first_chunk_mut::<ICMP_HEADER_LEN>().ok_or(DropReason::TruncatedIpv4)?;
    hdr[field::TYPE] = TYPE_DEST_UNREACHABLE;
    hdr[field::CODE] = CODE_FRAG_NEEDED;
    hdr[field::CHECKSUM].copy_from_slice(&[0, 0]);
    hdr[field::UNUSED].copy_from_slice(&[0, 0]);
    hdr[field::NEXT_HOP_MTU].copy_from_slice(&mtu.to_be_bytes());
    icmp.get_mut(ICMP_HEADER_LEN..).ok_or(DropReason::TruncatedIpv4)?.copy_from_slice(quote.get(..quote_len).unwrap_or(&[]));
    let c = checksum(icmp);
    icmp.get_mut(field::CHECKSUM).ok_or(DropReason::TruncatedIpv4)?.copy_from_slice(&c.to_be_bytes());
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{parse, Parsed};
    use proptest::prelude::*;

    /// An ICMP error of `icmp_type` from `router` to the VIP quoting the backend's reply
    /// VIP:vip_port → client:client_port (`quoted` bytes of it after the IPv4 header).
    fn icmp_error(icmp_type: u8, proto: u8, vip_port: u16, client_port: u16, quoted: usize) -> Vec<u8> {
        let mut inner = vec![0u8; IPV4_MIN_LEN + 8];
        Ipv4Repr { src: 0x0a00_0064, dst: 0x0a01_0005, protocol: proto, payload_len: 8, ident: 1, dont_fragment: true, ttl: 60 }.emit(&mut inner).unwrap();
        inner[20..22].copy_from_slice(&vip_port.to_be_bytes());
        inner[22..24].copy_from_slice(&client_port.to_be_bytes());
        inner.truncate(IPV4_MIN_LEN + quoted);
        let mut f = vec![0u8; 14 + 20 + 8];
        crate::wire::ethernet::emit_header(&mut f, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 9], crate::wire::ETHERTYPE_IPV4).unwrap();
        Ipv4Repr { src: 0x0a09_0001, dst: 0x0a00_0064, protocol: PROTO_ICMP, payload_len: 8 + inner.len(), ident: 2, dont_fragment: false, ttl: 64 }.emit(&mut f[14..]).unwrap();
        f[34] = icmp_type;
        f.extend_from_slice(&inner);
        f
    }

    fn quote_of(f: &[u8]) -> Result<Option<IcmpQuote>, DropReason> {
        let Ok(Parsed::Ipv4(p)) = parse(f) else { panic!("not IPv4") };
        icmp_quote(f, &p)
    }

    #[test]
    fn errors_only_and_eight_bytes_needed() {
        let echo = icmp_error(8, PROTO_TCP, 80, 40000, 8);
        assert_eq!(quote_of(&echo), Ok(None));
        let short = icmp_error(3, PROTO_TCP, 80, 40000, 7);
        assert_eq!(quote_of(&short), Err(DropReason::IcmpQuoteTooShort));
        assert_eq!(IcmpPacket::new_checked(&[3u8; 7][..]).err(), Some(DropReason::IcmpQuoteTooShort));
    }

    proptest! {
        /// A quoted reply VIP → client reads back as the client → VIP flow.
        #[test]
        fn quote_reverses_the_flow(ty in prop::sample::select(vec![3u8, 11, 12]), udp in any::<bool>(), vip_port in any::<u16>(), client_port in any::<u16>(), extra in 0usize..20) {
            let proto = if udp { PROTO_UDP } else { PROTO_TCP };
            let mut f = icmp_error(ty, proto, vip_port, client_port, 8);
            f.resize(f.len() + extra, 0); // Ethernet padding
            let q = quote_of(&f).unwrap().unwrap();
            prop_assert_eq!(q, IcmpQuote { icmp_type: ty, code: 0, client: 0x0a01_0005, vip: 0x0a00_0064, client_port, vip_port, proto });
        }

        /// Random bytes after the ICMP header never panic.
        #[test]
        fn random_quotes_never_panic(ty in prop::sample::select(vec![0u8, 3, 8, 11, 12]), tail in prop::collection::vec(any::<u8>(), 0..80)) {
            let mut f = icmp_error(ty, PROTO_TCP, 80, 40000, 0);
            f.truncate(14 + 20 + 8);
            f.extend_from_slice(&tail);
            let len = (f.len() - 14) as u16;
            f[16..18].copy_from_slice(&len.to_be_bytes());
            if let Ok(Parsed::Ipv4(p)) = parse(&f) {
                let _ = icmp_quote(&f, &p);
            }
        }
    }
}
