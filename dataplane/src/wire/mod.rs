//! Wire formats of the packet path: Ethernet (with 802.1Q / QinQ tags), ARP, IPv4, TCP,
//! UDP, ICMP — parsed in one bounds-checked pass into a [`Parsed`] description of offsets
//! and fields, plus the in-place rewrites the worker needs (L2 DSR MAC rewrite, ARP reply,
//! IPIP/GUE encapsulation, ICMP "fragmentation needed").
//!
//! Style: every length is checked once in [`parse`]; all later reads use `get` and named
//! offsets, so nothing here can panic on any input (fuzzed by proptest below).

use std::net::Ipv4Addr;

/// Ethernet header length (without tags).
pub const ETH_LEN: usize = 14;
/// EtherType IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType 802.1ad service tag (QinQ outer).
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Legacy QinQ EtherType.
pub const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
/// IP protocol numbers.
pub const PROTO_ICMP: u8 = 1;
/// IP protocol number of IPv4-in-IPv4 (RFC 2003).
pub const PROTO_IPIP: u8 = 4;
/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// UDP destination port of GUE (draft-ietf-intarea-gue: 6080).
pub const GUE_PORT: u16 = 6080;

/// TCP flag bits (RFC 9293 §3.1).
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

/// Named offsets of the Ethernet header.
mod eth {
    use std::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
}

/// Named offsets of the IPv4 header (RFC 791 §3.1), relative to its start.
mod ip {
    pub const VER_IHL: usize = 0;
    pub const TOTAL_LEN: usize = 2;
    pub const ID: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTO: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
    pub const MIN_LEN: usize = 20;
}

/// Named offsets of the ARP packet for Ethernet/IPv4 (RFC 826).
mod arp {
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
    pub const SPA: usize = 14;
    pub const THA: usize = 18;
    pub const TPA: usize = 24;
    pub const LEN: usize = 28;
}

/// Why a frame was not forwarded. Every drop has one of these reasons and a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than an Ethernet header (or its VLAN tags).
    TruncatedEthernet = 0,
    /// EtherType neither IPv4 nor ARP (e.g. IPv6, LLDP).
    UnsupportedEthertype,
    /// IPv4 header shorter than 20 bytes, bad version or IHL.
    MalformedIpv4,
    /// IPv4 total length larger than the frame (or smaller than the header).
    TruncatedIpv4,
    /// TCP/UDP header missing from a first fragment or unfragmented packet.
    TruncatedL4,
    /// ARP that is not a request for a VIP or a port address, or malformed.
    ArpIgnored,
    /// IPv4 destination is not a VIP (nor an address this forwarder answers for).
    NotForVip,
    /// Destination is a VIP but no service serves this protocol/port.
    NoService,
    /// The routing pipeline drops new connections (nothing eligible; STRICT isolation;
    /// drop_traffic_if_unhealthy).
    NoBackend,
    /// ICMP to a VIP that is not an error quoting a flow of ours (e.g. echo request).
    IcmpIgnored,
    /// ICMP error whose quote is too short (needs IPv4 header + 8 bytes).
    IcmpQuoteTooShort,
    /// Encapsulation needs fragmentation but DF is clear (we never fragment).
    EncapTooBig,
    /// No headroom to prepend the encapsulation header.
    NoHeadroom,
    /// The TX queue did not take the packet.
    TxFull,
    /// IPv4 TTL ≤ 1 on a packet we would have to route (encapsulation modes).
    TtlExceeded,
    /// A frame received in several buffer segments (jumbo frame larger than one mbuf):
    /// not parsed; raise the mbuf size or the MTU limit.
    MultiSegment,
    /// A new connection whose source address is a VIP or one of our addresses (spoofed).
    MartianSource,
    /// A later IPv4 fragment whose first fragment was not seen (reordered, or its entry
    /// expired), on a (VIP, protocol) with several services: which service it belongs to
    /// is unknown, and a guess could split the datagram (docs/semantics.md "Fragments").
    FragmentUnknown,
}

impl DropReason {
    /// Number of reasons (size of counter arrays).
    pub const COUNT: usize = 18;
    /// All reasons, in counter order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::TruncatedEthernet,
        DropReason::UnsupportedEthertype,
        DropReason::MalformedIpv4,
        DropReason::TruncatedIpv4,
        DropReason::TruncatedL4,
        DropReason::ArpIgnored,
        DropReason::NotForVip,
        DropReason::NoService,
        DropReason::NoBackend,
        DropReason::IcmpIgnored,
        DropReason::IcmpQuoteTooShort,
        DropReason::EncapTooBig,
        DropReason::NoHeadroom,
        DropReason::TxFull,
        DropReason::TtlExceeded,
        DropReason::MultiSegment,
        DropReason::MartianSource,
        DropReason::FragmentUnknown,
    ];
    /// Stable snake_case name used by counters and `spillwayctl stats`.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::TruncatedEthernet => "truncated_ethernet",
            DropReason::UnsupportedEthertype => "unsupported_ethertype",
            DropReason::MalformedIpv4 => "malformed_ipv4",
            DropReason::TruncatedIpv4 => "truncated_ipv4",
            DropReason::TruncatedL4 => "truncated_l4",
            DropReason::ArpIgnored => "arp_ignored",
            DropReason::NotForVip => "not_for_vip",
            DropReason::NoService => "no_service",
            DropReason::NoBackend => "no_backend",
            DropReason::IcmpIgnored => "icmp_ignored",
            DropReason::IcmpQuoteTooShort => "icmp_quote_too_short",
            DropReason::EncapTooBig => "encap_too_big",
            DropReason::NoHeadroom => "no_headroom",
            DropReason::TxFull => "tx_full",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::MultiSegment => "multi_segment",
            DropReason::MartianSource => "martian_source",
            DropReason::FragmentUnknown => "fragment_unknown",
        }
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}
#[inline]
fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([*b.get(at)?, *b.get(at + 1)?, *b.get(at + 2)?, *b.get(at + 3)?]))
}
#[inline]
fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}
#[inline]
fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// IPv4 fragmentation state of a packet (RFC 791).
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
    pub fn is_fragment(&self) -> bool {
        self.more || self.offset != 0
    }
}

/// What [`parse`] found in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An ARP packet for Ethernet/IPv4.
    Arp(ArpInfo),
    /// An IPv4 packet.
    Ipv4(Ipv4Info),
}

/// ARP fields (RFC 826).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpInfo {
    /// Offset of the ARP packet in the frame.
    pub offset: usize,
    /// 1 = request, 2 = reply.
    pub oper: u16,
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

/// IPv4 and L4 fields of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Info {
    /// Offset of the IPv4 header in the frame (14 + 4 per VLAN tag).
    pub l3: usize,
    /// IPv4 header length in bytes (IHL × 4).
    pub ihl: usize,
    /// IPv4 total length (header + payload), ≤ frame length − l3.
    pub total_len: usize,
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
    /// IP protocol.
    pub proto: u8,
    /// TTL.
    pub ttl: u8,
    /// Fragmentation.
    pub frag: Frag,
    /// Source port (TCP/UDP; 0 when absent, e.g. non-first fragments, ICMP).
    pub sport: u16,
    /// Destination port (TCP/UDP; 0 when absent).
    pub dport: u16,
    /// TCP flags (0 for non-TCP).
    pub tcp_flags: u8,
    /// Whether `sport`/`dport` were read from the packet.
    pub has_ports: bool,
}

impl Ipv4Info {
    /// Offset of the L4 header.
    pub fn l4(&self) -> usize {
        self.l3 + self.ihl
    }
}

/// Parses a frame. Errors name the reason it cannot be forwarded.
///
/// Accepts up to two VLAN tags (802.1Q 0x8100, 802.1ad 0x88a8, 0x9100). For IPv4, checks
/// version 4, IHL ≥ 5, `IHL·4 ≤ total length ≤ frame`; for TCP/UDP first fragments, that
/// the ports (and for TCP the flags) are present. Trailing Ethernet padding is allowed.
#[inline]
pub fn parse(frame: &[u8]) -> Result<Parsed, DropReason> {
    let mut off = 12usize;
    let mut ethertype = be16(frame, off).ok_or(DropReason::TruncatedEthernet)?;
    let mut tags = 0;
    while matches!(ethertype, ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD) && tags < 2 {
        off += 4;
        tags += 1;
        ethertype = be16(frame, off).ok_or(DropReason::TruncatedEthernet)?;
    }
    let l3 = off + 2;
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(frame, l3).map(Parsed::Ipv4),
        ETHERTYPE_ARP => {
            let a = frame.get(l3..l3 + arp::LEN).ok_or(DropReason::ArpIgnored)?;
            // htype 1 (Ethernet), ptype 0x0800, hlen 6, plen 4
            if a[0..6] != [0, 1, 8, 0, 6, 4] {
                return Err(DropReason::ArpIgnored);
            }
            Ok(Parsed::Arp(ArpInfo {
                offset: l3,
                oper: u16::from_be_bytes([a[arp::OPER], a[arp::OPER + 1]]),
                spa: Ipv4Addr::new(a[arp::SPA], a[arp::SPA + 1], a[arp::SPA + 2], a[arp::SPA + 3]),
                tpa: Ipv4Addr::new(a[arp::TPA], a[arp::TPA + 1], a[arp::TPA + 2], a[arp::TPA + 3]),
            }))
        }
        _ => Err(DropReason::UnsupportedEthertype),
    }
}

/// The 5-tuple `(src, dst, sport, dport, proto)` of an unfragmented IPv4 TCP/UDP frame
/// (untagged or one 802.1Q/802.1ad tag), read at fixed offsets with minimal checks; `None`
/// for anything else. Only a hint (the worker's burst prefetch): [`parse`] still decides.
#[inline]
pub fn flow_tuple_hint(frame: &[u8]) -> Option<(u32, u32, u16, u16, u8)> {
    let mut l3 = ETH_LEN;
    let mut et = be16(frame, 12)?;
    if matches!(et, ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD) {
        l3 += 4;
        et = be16(frame, 16)?;
    }
    if et != ETHERTYPE_IPV4 {
        return None;
    }
    let h = frame.get(l3..l3 + 24)?;
    let proto = h[ip::PROTO];
    // version 4, IHL 5, no MF, offset 0
    if h[0] != 0x45 || (proto != PROTO_TCP && proto != PROTO_UDP) || u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
        return None;
    }
    Some((
        u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        u32::from_be_bytes([h[16], h[17], h[18], h[19]]),
        u16::from_be_bytes([h[20], h[21]]),
        u16::from_be_bytes([h[22], h[23]]),
        proto,
    ))
}

/// Whether `frame` looks like a TCP SYN without ACK (a new connection) — a hint for the
/// prefetch pass, read at fixed offsets like [`flow_tuple_hint`]; never an error.
#[inline]
pub fn syn_hint(frame: &[u8]) -> bool {
    let l3 = match be16(frame, 12) {
        Some(ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD) => ETH_LEN + 4,
        _ => ETH_LEN,
    };
    match (frame.get(l3), frame.get(l3 + ip::PROTO), frame.get(l3 + 20 + 13)) {
        (Some(0x45), Some(&PROTO_TCP), Some(f)) => f & (tcp_flags::SYN | tcp_flags::ACK) == tcp_flags::SYN,
        _ => false,
    }
}

/// Parses an IPv4 header (and TCP/UDP ports) at `l3`.
#[inline]
pub fn parse_ipv4(frame: &[u8], l3: usize) -> Result<Ipv4Info, DropReason> {
    let h = frame.get(l3..).ok_or(DropReason::MalformedIpv4)?;
    if h.len() < ip::MIN_LEN {
        return Err(DropReason::MalformedIpv4);
    }
    let ver_ihl = h[ip::VER_IHL];
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    if ver_ihl >> 4 != 4 || ihl < ip::MIN_LEN {
        return Err(DropReason::MalformedIpv4);
    }
    let total_len = usize::from(u16::from_be_bytes([h[ip::TOTAL_LEN], h[ip::TOTAL_LEN + 1]]));
    if total_len < ihl || total_len > h.len() {
        return Err(DropReason::TruncatedIpv4);
    }
    let ff = u16::from_be_bytes([h[ip::FLAGS_FRAG], h[ip::FLAGS_FRAG + 1]]);
    let frag = Frag { more: ff & 0x2000 != 0, offset: ff & 0x1fff, dont_fragment: ff & 0x4000 != 0 };
    let mut info = Ipv4Info {
        l3,
        ihl,
        total_len,
        src: u32::from_be_bytes([h[ip::SRC], h[ip::SRC + 1], h[ip::SRC + 2], h[ip::SRC + 3]]),
        dst: u32::from_be_bytes([h[ip::DST], h[ip::DST + 1], h[ip::DST + 2], h[ip::DST + 3]]),
        proto: h[ip::PROTO],
        ttl: h[ip::TTL],
        frag,
        sport: 0,
        dport: 0,
        tcp_flags: 0,
        has_ports: false,
    };
    // RFC 791: the fragment must end within the 65,535-byte datagram.
    if usize::from(frag.offset) * 8 + (total_len - ihl) > 65_535 {
        return Err(DropReason::MalformedIpv4);
    }
    if frag.offset == 0 && (info.proto == PROTO_TCP || info.proto == PROTO_UDP) {
        let l4 = &h[ihl..total_len];
        let need = if info.proto == PROTO_TCP { 14 } else { 8 };
        if l4.len() < need {
            return Err(DropReason::TruncatedL4);
        }
        // RFC 9293 §3.1: data offset ≥ 5 words, within the segment (first fragments of a
        // TCP segment are unusual; they must still carry the whole header).
        if info.proto == PROTO_TCP {
            let doff = usize::from(l4[12] >> 4) * 4;
            if doff < 20 || doff > l4.len() {
                return Err(DropReason::TruncatedL4);
            }
        }
        info.sport = u16::from_be_bytes([l4[0], l4[1]]);
        info.dport = u16::from_be_bytes([l4[2], l4[3]]);
        info.has_ports = true;
        if info.proto == PROTO_TCP {
            info.tcp_flags = l4[13];
        }
    }
    Ok(info)
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

/// Reads the quoted flow of an ICMP error message. `Ok(None)` for ICMP messages that are
/// not errors (echo etc.); `Err(IcmpQuoteTooShort)` when the quote lacks the IPv4 header
/// plus 8 bytes.
pub fn icmp_quote(frame: &[u8], outer: &Ipv4Info) -> Result<Option<IcmpQuote>, DropReason> {
    if outer.frag.is_fragment() {
        return Ok(None);
    }
    let icmp = frame.get(outer.l4()..outer.l3 + outer.total_len).ok_or(DropReason::IcmpQuoteTooShort)?;
    let (&ty, &code) = match (icmp.first(), icmp.get(1)) {
        (Some(t), Some(c)) => (t, c),
        _ => return Err(DropReason::IcmpQuoteTooShort),
    };
    if !matches!(ty, 3 | 11 | 12) {
        return Ok(None);
    }
    let inner = icmp.get(8..).ok_or(DropReason::IcmpQuoteTooShort)?;
    if inner.len() < ip::MIN_LEN || inner[0] >> 4 != 4 {
        return Err(DropReason::IcmpQuoteTooShort);
    }
    let ihl = usize::from(inner[0] & 0x0f) * 4;
    let l4 = inner.get(ihl..ihl + 8).ok_or(DropReason::IcmpQuoteTooShort)?;
    let proto = inner[ip::PROTO];
    let (sport, dport) = if proto == PROTO_TCP || proto == PROTO_UDP {
        (u16::from_be_bytes([l4[0], l4[1]]), u16::from_be_bytes([l4[2], l4[3]]))
    } else {
        (0, 0)
    };
    Ok(Some(IcmpQuote {
        icmp_type: ty,
        code,
        vip: be32(inner, ip::SRC).unwrap_or(0),
        client: be32(inner, ip::DST).unwrap_or(0),
        vip_port: sport,
        client_port: dport,
        proto,
    }))
}

/// L2 DSR rewrite: destination MAC = backend, source MAC = our port. Tags and the IP packet
/// are left as they came.
#[inline]
pub fn rewrite_l2(frame: &mut [u8], dst: [u8; 6], src: [u8; 6]) {
    if let Some(d) = frame.get_mut(eth::DST) {
        d.copy_from_slice(&dst);
    }
    if let Some(s) = frame.get_mut(eth::SRC) {
        s.copy_from_slice(&src);
    }
}

/// Turns an ARP request into the reply "`tpa` is at `our_mac`" in place (RFC 826), with
/// Ethernet addresses set for sending back out the receiving port. VLAN tags are kept.
pub fn arp_reply_in_place(frame: &mut [u8], a: &ArpInfo, our_mac: [u8; 6]) {
    let o = a.offset;
    if frame.len() < o + arp::LEN {
        return;
    }
    let mut requester_mac = [0u8; 6];
    requester_mac.copy_from_slice(&frame[o + arp::SHA..o + arp::SHA + 6]);
    let spa: [u8; 4] = a.spa.octets();
    let tpa: [u8; 4] = a.tpa.octets();
    put16(frame, o + arp::OPER, 2);
    frame[o + arp::SHA..o + arp::SHA + 6].copy_from_slice(&our_mac);
    frame[o + arp::SPA..o + arp::SPA + 4].copy_from_slice(&tpa);
    frame[o + arp::THA..o + arp::THA + 6].copy_from_slice(&requester_mac);
    frame[o + arp::TPA..o + arp::TPA + 4].copy_from_slice(&spa);
    rewrite_l2(frame, requester_mac, our_mac);
}

/// The Internet checksum (RFC 1071): one's-complement sum of 16-bit big-endian words,
/// complemented. An odd trailing byte is padded with zero.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum_words(data, 0))
}

/// Adds `data` as big-endian 16-bit words to a 32-bit accumulator (RFC 1071 §4.1).
fn sum_words(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u64::from(*b) << 8;
    }
    acc
}

/// Folds carries into 16 bits (RFC 1071 §4.1: "while (sum>>16) sum = (sum & 0xffff) + (sum >> 16)").
fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Writes a 20-byte IPv4 header at `at` (no options) with a valid checksum (RFC 791).
#[allow(clippy::too_many_arguments)]
pub fn write_ipv4_header(frame: &mut [u8], at: usize, total_len: u16, id: u16, df: bool, ttl: u8, proto: u8, src: u32, dst: u32) {
    let Some(h) = frame.get_mut(at..at + ip::MIN_LEN) else { return };
    h[ip::VER_IHL] = 0x45;
    h[1] = 0;
    put16(h, ip::TOTAL_LEN, total_len);
    put16(h, ip::ID, id);
    put16(h, ip::FLAGS_FRAG, if df { 0x4000 } else { 0 });
    h[ip::TTL] = ttl;
    h[ip::PROTO] = proto;
    put16(h, ip::CHECKSUM, 0);
    put32(h, ip::SRC, src);
    put32(h, ip::DST, dst);
    let c = checksum(h);
    put16(h, ip::CHECKSUM, c);
}

/// Bytes added in front of the inner IPv4 packet by each encapsulation.
pub fn encap_overhead(gue: bool) -> usize {
    if gue {
        28
    } else {
        20
    }
}

/// Encapsulates the IPv4 packet of `frame` (which must already have `overhead` bytes of
/// new room at the front, i.e. the caller prepended them) into IPIP (RFC 2003) or GUE
/// variant 1 (direct IPv4 in UDP to port 6080, draft-ietf-intarea-gue §4). Frame layout
/// after: Ethernet (tags dropped) | outer IPv4 | [UDP] | inner IPv4.
///
/// `inner_l3` is the offset of the inner IPv4 header *before* the prepend; `inner_len` its
/// total length. Returns the new frame length. The outer TTL is 64, DF copied from inner.
#[allow(clippy::too_many_arguments)]
pub fn encapsulate(frame: &mut [u8], overhead: usize, inner_l3: usize, inner_len: usize, gue: bool, src: u32, dst: u32, src_port: u16, df: bool, dst_mac: [u8; 6], src_mac: [u8; 6]) -> usize {
    // After the prepend, the old Ethernet header (+tags) starts at `overhead`; the inner IP
    // packet at `overhead + inner_l3`. New layout: 14-byte Ethernet at 0, outer IP at 14.
    let inner_at = overhead + inner_l3;
    let outer_ip = ETH_LEN;
    let new_inner_at = ETH_LEN + overhead;
    if inner_at != new_inner_at && frame.len() >= inner_at + inner_len {
        frame.copy_within(inner_at..inner_at + inner_len, new_inner_at);
    }
    let total = new_inner_at + inner_len;
    rewrite_l2(frame, dst_mac, src_mac);
    put16(frame, 12, ETHERTYPE_IPV4);
    let outer_len = (overhead + inner_len) as u16;
    let proto = if gue { PROTO_UDP } else { PROTO_IPIP };
    write_ipv4_header(frame, outer_ip, outer_len, 0, df, 64, proto, src, dst);
    if gue {
        let u = outer_ip + ip::MIN_LEN;
        put16(frame, u, src_port);
        put16(frame, u + 2, GUE_PORT);
        put16(frame, u + 4, (8 + inner_len) as u16);
        // UDP checksum 0: allowed for UDP/IPv4 (RFC 768) and used by GUE tunnels.
        put16(frame, u + 6, 0);
    }
    total
}

/// Length of the ICMP "fragmentation needed" reply built by [`icmp_frag_needed_in_place`]
/// for a packet whose IPv4 header starts at `l3` (Ethernet + the client's VLAN tags):
/// IPv4 + ICMP header + quoted IPv4 header + 8 bytes (RFC 792, RFC 1191).
pub fn frag_needed_len(l3: usize, quoted_ihl: usize) -> usize {
    l3 + ip::MIN_LEN + 8 + quoted_ihl + 8
}

/// Rewrites `frame` (an oversize DF packet to a VIP, parsed as `p`) into an ICMP
/// destination unreachable / fragmentation needed (type 3 code 4, RFC 792 and RFC 1191 §4:
/// next-hop MTU in the low 16 bits of the second word) sent from the VIP back to the client,
/// quoting the offending header plus 8 bytes. The reply leaves by the receiving port, so the
/// client's VLAN tags (everything between the MACs and `p.l3`) are kept as they came.
/// Returns the new frame length (the caller truncates). Checksums are valid; fragment
/// offset and flags are 0.
pub fn icmp_frag_needed_in_place(frame: &mut [u8], p: &Ipv4Info, mtu: u16, our_mac: [u8; 6]) -> usize {
    let quote_len = (p.ihl + 8).min(p.total_len);
    let mut quote = [0u8; 68];
    let Some(q) = frame.get(p.l3..p.l3 + quote_len) else { return 0 };
    quote[..quote_len].copy_from_slice(q);
    let mut client_mac = [0u8; 6];
    client_mac.copy_from_slice(&frame[eth::SRC]);
    let ip_at = p.l3;
    let icmp_at = ip_at + ip::MIN_LEN;
    let total = icmp_at + 8 + quote_len;
    if frame.len() < total {
        return 0;
    }
    rewrite_l2(frame, client_mac, our_mac);
    // The EtherType before `l3` (after any tags) is already IPv4.
    write_ipv4_header(frame, ip_at, (ip::MIN_LEN + 8 + quote_len) as u16, 0, false, 64, PROTO_ICMP, p.dst, p.src);
    let icmp = &mut frame[icmp_at..total];
    icmp[0] = 3;
    icmp[1] = 4;
    icmp[2] = 0;
    icmp[3] = 0;
    icmp[4] = 0;
    icmp[5] = 0;
    icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
    icmp[8..].copy_from_slice(&quote[..quote_len]);
    let c = checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

    fn tcp_syn(vlan: &[u16]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 1]);
        let mut out = Vec::new();
        match vlan {
            [] => b.ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64).tcp(40000, 80, 1, 1024).syn().write(&mut out, &[]).unwrap(),
            [v] => b.single_vlan((*v).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64).tcp(40000, 80, 1, 1024).syn().write(&mut out, &[]).unwrap(),
            [o, i] => b.double_vlan((*o).try_into().unwrap(), (*i).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64).tcp(40000, 80, 1, 1024).syn().write(&mut out, &[]).unwrap(),
            _ => unreachable!(),
        }
        out
    }

    #[test]
    fn parses_tcp_through_vlan_tags() {
        for tags in [&[][..], &[100][..], &[200, 100][..]] {
            let f = tcp_syn(tags);
            let Parsed::Ipv4(p) = parse(&f).unwrap() else { panic!() };
            assert_eq!(p.l3, 14 + 4 * tags.len());
            assert_eq!((p.sport, p.dport, p.proto), (40000, 80, PROTO_TCP));
            assert_eq!(p.tcp_flags & tcp_flags::SYN, tcp_flags::SYN);
            assert_eq!(Ipv4Addr::from(p.src), Ipv4Addr::new(10, 1, 0, 5));
            assert_eq!(Ipv4Addr::from(p.dst), Ipv4Addr::new(10, 0, 0, 100));
        }
    }

    #[test]
    fn malformed_frames_have_reasons() {
        assert_eq!(parse(&[0u8; 5]), Err(DropReason::TruncatedEthernet));
        let mut f = tcp_syn(&[]);
        f[12] = 0x86;
        f[13] = 0xdd;
        assert_eq!(parse(&f), Err(DropReason::UnsupportedEthertype));
        let mut f = tcp_syn(&[]);
        f[16] = 0x05; // total length 0x05xx > frame
        assert_eq!(parse(&f), Err(DropReason::TruncatedIpv4));
        let mut f = tcp_syn(&[]);
        f[14] = 0x65;
        assert_eq!(parse(&f), Err(DropReason::MalformedIpv4));
        let f = tcp_syn(&[]);
        assert_eq!(parse(&f[..14 + 20 + 4]), Err(DropReason::TruncatedIpv4));
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3 example bytes: 00 01 f2 03 f4 f5 f6 f7 → sum ddf2 → checksum 220d
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), !0xddf2u16);
        // a header with its checksum filled sums to 0xffff
        let f = tcp_syn(&[]);
        assert_eq!(checksum(&f[14..34]), 0);
    }

    #[test]
    fn arp_reply_is_valid() {
        let mut out = Vec::new();
        out.extend_from_slice(&[0xff; 6]);
        out.extend_from_slice(&[2, 0, 0, 0, 0, 9]);
        out.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        out.extend_from_slice(&[2, 0, 0, 0, 0, 9, 10, 1, 0, 5]);
        out.extend_from_slice(&[0; 6]);
        out.extend_from_slice(&[10, 0, 0, 100]);
        let Parsed::Arp(a) = parse(&out).unwrap() else { panic!() };
        assert_eq!((a.oper, a.tpa), (1, Ipv4Addr::new(10, 0, 0, 100)));
        arp_reply_in_place(&mut out, &a, [2, 0, 0, 0, 0, 1]);
        let Parsed::Arp(r) = parse(&out).unwrap() else { panic!() };
        assert_eq!((r.oper, r.spa, r.tpa), (2, Ipv4Addr::new(10, 0, 0, 100), Ipv4Addr::new(10, 1, 0, 5)));
        assert_eq!(&out[0..6], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&out[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&out[22..28], &[2, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn ipip_and_gue_encapsulation_parse_back() {
        for gue in [false, true] {
            let f = tcp_syn(&[100]);
            let Parsed::Ipv4(p) = parse(&f).unwrap() else { panic!() };
            let oh = encap_overhead(gue);
            let mut buf = vec![0u8; oh];
            buf.extend_from_slice(&f);
            let n = encapsulate(&mut buf, oh, p.l3, p.total_len, gue, 0x0a000002, 0x0a000b01, 5555, false, [2, 0, 0, 0, 0xb, 1], [2, 0, 0, 0, 0, 1]);
            buf.truncate(n);
            let s = SlicedPacket::from_ethernet(&buf).unwrap();
            let outer = match s.net.unwrap() {
                etherparse::NetSlice::Ipv4(h) => h,
                _ => panic!(),
            };
            assert_eq!(outer.header().destination(), [10, 0, 11, 1]);
            assert_eq!(checksum(outer.header().slice()), 0);
            if gue {
                let Some(TransportSlice::Udp(u)) = s.transport else { panic!() };
                assert_eq!(u.destination_port(), GUE_PORT);
                assert_eq!(&buf[14 + 28..], &f[18..]);
            } else {
                assert_eq!(outer.header().protocol(), etherparse::IpNumber(4));
                assert_eq!(&buf[14 + 20..], &f[18..]);
            }
        }
    }

    #[test]
    fn frag_needed_reply() {
        let mut out = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 1])
            .ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64)
            .tcp(40000, 80, 1, 1024)
            .write(&mut out, &[7u8; 1460])
            .unwrap();
        let Parsed::Ipv4(p) = parse(&out).unwrap() else { panic!() };
        let n = icmp_frag_needed_in_place(&mut out, &p, 1480, [2, 0, 0, 0, 0, 1]);
        out.truncate(n);
        let s = SlicedPacket::from_ethernet(&out).unwrap();
        let etherparse::NetSlice::Ipv4(ipv4) = s.net.unwrap() else { panic!() };
        assert_eq!(ipv4.header().source(), [10, 0, 0, 100]);
        assert_eq!(ipv4.header().destination(), [10, 1, 0, 5]);
        assert_eq!(checksum(ipv4.header().slice()), 0);
        assert_eq!(ipv4.header().fragments_offset().value(), 0);
        let icmp = &out[34..];
        assert_eq!((icmp[0], icmp[1]), (3, 4));
        assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), 1480);
        assert_eq!(checksum(icmp), 0);
        let Parsed::Ipv4(outer) = parse(&out).unwrap() else { panic!() };
        // our own quote parser sees the original flow reversed... of the client's packet
        let q = icmp_quote(&out, &outer).unwrap().unwrap();
        assert_eq!((q.vip, q.client), (0x0a01_0005, 0x0a00_0064));
    }

    #[test]
    fn frag_needed_reply_keeps_vlan_tags() {
        for tags in [&[][..], &[100][..], &[200, 100][..]] {
            let mut out = Vec::new();
            let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 1]);
            let b = match tags {
                [] => b.ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64),
                [v] => b.single_vlan((*v).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64),
                [o, i] => b.double_vlan((*o).try_into().unwrap(), (*i).try_into().unwrap()).ipv4([10, 1, 0, 5], [10, 0, 0, 100], 64),
                _ => unreachable!(),
            };
            b.tcp(40000, 80, 1, 1024).write(&mut out, &[7u8; 1460]).unwrap();
            let orig = out.clone();
            let Parsed::Ipv4(p) = parse(&out).unwrap() else { panic!() };
            let n = icmp_frag_needed_in_place(&mut out, &p, 1480, [2, 0, 0, 0, 0, 1]);
            assert_eq!(n, frag_needed_len(p.l3, 20));
            out.truncate(n);
            assert_eq!(&out[12..p.l3], &orig[12..p.l3]);
            let Parsed::Ipv4(r) = parse(&out).unwrap() else { panic!() };
            assert_eq!((r.l3, r.proto, r.src, r.dst), (p.l3, PROTO_ICMP, p.dst, p.src));
            assert_eq!(checksum(&out[r.l3..r.l3 + 20]), 0);
            assert_eq!(checksum(&out[r.l4()..]), 0);
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse(&bytes);
            if let Ok(Parsed::Ipv4(p)) = parse(&bytes) {
                let _ = icmp_quote(&bytes, &p);
            }
        }

        #[test]
        fn parse_never_panics_on_mutated_valid_frames(idx in 0usize..60, val in proptest::num::u8::ANY, cut in 0usize..60) {
            let mut f = tcp_syn(&[100]);
            if idx < f.len() { f[idx] = val; }
            let len = f.len().saturating_sub(cut);
            let _ = parse(&f[..len]);
        }

        #[test]
        fn flow_tuple_hint_agrees_with_parse(f in proptest::collection::vec(0u8.., 0..80), vlan in proptest::bool::ANY) {
            let mut out = Vec::new();
            let b = PacketBuilder::ethernet2([0; 6], [0; 6]);
            if vlan {
                b.single_vlan(7u16.try_into().unwrap()).ipv4([10, 1, 2, 3], [10, 0, 0, 100], 64).tcp(4000, 80, 1, 1000).write(&mut out, &f).unwrap();
            } else {
                b.ipv4([10, 1, 2, 3], [10, 0, 0, 100], 64).udp(4000, 80).write(&mut out, &f).unwrap();
            }
            let (src, dst, sport, dport, proto) = flow_tuple_hint(&out).unwrap();
            match parse(&out) {
                Ok(Parsed::Ipv4(p)) => proptest::prop_assert_eq!((p.src, p.dst, p.sport, p.dport, p.proto), (src, dst, sport, dport, proto)),
                other => proptest::prop_assert!(false, "{other:?}"),
            }
            // random bytes: never panics
            let _ = flow_tuple_hint(&f);
        }

        #[test]
        fn checksum_matches_etherparse(src in proptest::array::uniform4(0u8..), dst in proptest::array::uniform4(0u8..), ttl in 1u8.., len in 0usize..100) {
            let mut out = Vec::new();
            PacketBuilder::ethernet2([0; 6], [0; 6]).ipv4(src, dst, ttl).udp(1, 2).write(&mut out, &vec![0u8; len]).unwrap();
            let mut mine = out.clone();
            let total = (out.len() - 14) as u16;
            write_ipv4_header(&mut mine, 14, total, 0, true, ttl, PROTO_UDP, u32::from_be_bytes(src), u32::from_be_bytes(dst));
            proptest::prop_assert_eq!(&mine[24..26], &out[24..26]);
        }
    }
}
