//! ICMPv6 (RFC 4443) and Neighbor Discovery (RFC 4861): reading the flow an error message
//! quotes, answering a Neighbor Solicitation for one of our addresses in place, building an
//! unsolicited Neighbor Advertisement and the Neighbor Solicitation that resolves a next
//! hop, reading the Neighbor Advertisement that answers it, and writing a Packet Too Big.
//!
//! Checksums cover the IPv6 pseudo-header (RFC 4443 §2.3, RFC 8200 §8.1,
//! [`super::ipv6::upper_checksum`]).

use super::ethernet::{emit_header, EthernetFrame, MacAddr, ETHERTYPE_IPV6, ETH_LEN};
use super::ipv6::{be128, upper_checksum, walk_ext, Ipv6Repr, IPV6_LEN, NH_ICMPV6};
use super::l4::udp_field;
use super::{be16, DropReason, Ipv6Info, PROTO_TCP, PROTO_UDP};

/// ICMPv6 header length (type, code, checksum, 4 bytes of message body).
pub const ICMPV6_HEADER_LEN: usize = 8;
/// Destination Unreachable.
pub const TYPE_DEST_UNREACHABLE: u8 = 1;
/// Packet Too Big.
pub const TYPE_PACKET_TOO_BIG: u8 = 2;
/// Time Exceeded.
pub const TYPE_TIME_EXCEEDED: u8 = 3;
/// Parameter Problem.
pub const TYPE_PARAMETER_PROBLEM: u8 = 4;
/// Neighbor Solicitation (RFC 4861 §4.3).
pub const TYPE_NEIGHBOR_SOLICITATION: u8 = 135;
/// Neighbor Advertisement (RFC 4861 §4.4).
pub const TYPE_NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// ND option: Source Link-Layer Address (RFC 4861 §4.6.1).
pub const OPT_SOURCE_LL: u8 = 1;
/// ND option: Target Link-Layer Address.
pub const OPT_TARGET_LL: u8 = 2;
/// Neighbor Solicitation / Advertisement body: 4 bytes (reserved / flags) + 16-byte target.
pub const ND_LEN: usize = ICMPV6_HEADER_LEN + 16;
/// Our Neighbor Advertisement: header, target and one 8-octet Target Link-Layer option.
pub const NA_LEN: usize = ND_LEN + 8;
/// Hop limit of ND messages (RFC 4861 §7.1: 255, so they cannot come from off-link).
pub const ND_HOP_LIMIT: u8 = 255;
/// NA flags (RFC 4861 §4.4): Router, Solicited, Override, in the first body byte.
pub const NA_FLAG_SOLICITED: u8 = 0x40;
/// Override flag.
pub const NA_FLAG_OVERRIDE: u8 = 0x20;
/// IPv6 minimum link MTU (RFC 8200 §5): no Packet Too Big reports less.
pub const IPV6_MIN_MTU: u16 = 1280;
/// Hop limit of the ICMPv6 errors we originate.
pub const REPLY_HOP_LIMIT: u8 = 64;
/// All-nodes multicast address ff02::1 (host-order `u128`).
pub const ALL_NODES: u128 = 0xff02_0000_0000_0000_0000_0000_0000_0001;
/// Our Neighbor Solicitation: header, target and one 8-octet Source Link-Layer option.
pub const NS_LEN: usize = ND_LEN + 8;
/// Length of a Neighbor Solicitation frame ([`neighbor_solicitation`]): 14 + 40 + 32 = 86.
pub const SOLICITATION_FRAME_LEN: usize = ETH_LEN + IPV6_LEN + NS_LEN;

/// The solicited-node multicast address of `target` (RFC 4291 §2.7.1):
/// ff02::1:ff00:0/104 with the low 24 bits of `target`.
#[inline]
pub const fn solicited_node(target: u128) -> u128 {
    0xff02_0000_0000_0000_0000_0001_ff00_0000 | (target & 0xff_ffff)
}

/// The Ethernet address of IPv6 multicast address `group` (RFC 2464 §7): 33:33 and its
/// low 32 bits.
#[inline]
pub const fn multicast_mac(group: u128) -> MacAddr {
    let low = (group as u32).to_be_bytes();
    [0x33, 0x33, low[0], low[1], low[2], low[3]]
}

/// The flow an ICMPv6 error quotes, reversed to the direction client → VIP (as
/// [`super::IcmpQuote`] for IPv4): the quoted packet is the backend's reply VIP → client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icmpv6Quote {
    /// ICMPv6 type (1, 2, 3 or 4).
    pub icmp_type: u8,
    /// Client address (quoted destination).
    pub client: u128,
    /// VIP (quoted source).
    pub vip: u128,
    /// Client port (quoted destination port).
    pub client_port: u16,
    /// VIP port (quoted source port).
    pub vip_port: u16,
    /// Quoted upper-layer protocol.
    pub proto: u8,
}

/// The ICMPv6 message of a parsed packet (`p.proto == 58`): bytes from its header to the
/// end of the IPv6 payload.
#[inline]
fn message<'a>(frame: &'a [u8], p: &Ipv6Info) -> Result<&'a [u8], DropReason> {
    let m = frame.get(p.l4..p.l3 + IPV6_LEN + p.payload_len).ok_or(DropReason::TruncatedIpv6)?;
    if m.len() < ICMPV6_HEADER_LEN {
        return Err(DropReason::IcmpQuoteTooShort);
    }
    Ok(m)
}

/// Reads the quoted flow of the ICMPv6 error in `frame` (parsed as `p`). `Ok(None)` for
/// messages that are not errors quoting a datagram (echo, ND, ...) and for fragments;
/// `Err(IcmpQuoteTooShort)` when the quote lacks the IPv6 header, its extension headers and
/// 8 bytes of the upper layer (RFC 4443 §2.4(c) quotes as much as fits in 1280 bytes; 8
/// upper-layer bytes hold the ports).
#[inline]
pub fn icmpv6_quote(frame: &[u8], p: &Ipv6Info) -> Result<Option<Icmpv6Quote>, DropReason> {
    if p.fragmented {
        return Ok(None);
    }
    let m = message(frame, p)?;
    let ty = m.first().copied().unwrap_or(0);
    if !matches!(ty, TYPE_DEST_UNREACHABLE | TYPE_PACKET_TOO_BIG | TYPE_TIME_EXCEEDED | TYPE_PARAMETER_PROBLEM) {
        return Ok(None);
    }
    let inner = m.get(ICMPV6_HEADER_LEN..).unwrap_or(&[]);
    let h = inner.first_chunk::<IPV6_LEN>().ok_or(DropReason::IcmpQuoteTooShort)?;
    if h[0] >> 4 != 6 {
        return Err(DropReason::IcmpQuoteTooShort);
    }
    // The quote is truncated: walk the extension headers over the bytes present.
    let w = walk_ext(h[6], inner.get(IPV6_LEN..).unwrap_or(&[])).map_err(|_| DropReason::IcmpQuoteTooShort)?;
    if w.frag.is_some_and(|f| f.offset != 0) {
        return Ok(None);
    }
    let l4 = inner.get(IPV6_LEN + w.offset..).and_then(|l| l.first_chunk::<8>()).ok_or(DropReason::IcmpQuoteTooShort)?;
    let (sport, dport) = if w.proto == PROTO_TCP || w.proto == PROTO_UDP {
        (be16(l4, udp_field::SRC_PORT), be16(l4, udp_field::DST_PORT))
    } else {
        (0, 0)
    };
    Ok(Some(Icmpv6Quote {
        icmp_type: ty,
        vip: be128(h, super::ipv6::field::SRC),
        client: be128(h, super::ipv6::field::DST),
        vip_port: sport,
        client_port: dport,
        proto: w.proto,
    }))
}

/// The target of a valid Neighbor Solicitation in `frame` (parsed as `p`), or `Ok(None)`
/// when the ICMPv6 message is not a Neighbor Solicitation. RFC 4861 §7.1.1 validity:
/// hop limit 255, code 0, ICMPv6 length ≥ 24, valid checksum, target not multicast,
/// every option of non-zero length within the message (`nd_options`), and from the
/// unspecified address (Duplicate Address Detection) only to a solicited-node multicast
/// address and without a Source Link-Layer Address option; an invalid one is
/// `Err(NdInvalid)`.
#[inline]
pub fn ns_target(frame: &[u8], p: &Ipv6Info) -> Result<Option<u128>, DropReason> {
    let m = message(frame, p)?;
    if m.first() != Some(&TYPE_NEIGHBOR_SOLICITATION) {
        return Ok(None);
    }
    let target = m.get(8..24).and_then(|t| <[u8; 16]>::try_from(t).ok()).map(u128::from_be_bytes).ok_or(DropReason::NdInvalid)?;
    let valid = p.hop_limit == ND_HOP_LIMIT && m.get(1) == Some(&0) && upper_checksum(p.src, p.dst, NH_ICMPV6, m) == 0 && target >> 120 != 0xff;
    if !valid {
        return Err(DropReason::NdInvalid);
    }
    let source_ll = nd_options(m.get(ND_LEN..).unwrap_or(&[]), OPT_SOURCE_LL)?;
    if p.src == 0 && (source_ll.is_some() || p.dst >> 24 != SOLICITED_NODE_PREFIX) {
        return Err(DropReason::NdInvalid);
    }
    Ok(Some(target))
}

/// The solicited-node multicast prefix ff02::1:ff00:0/104 (RFC 4291 §2.7.1), as the top
/// 104 bits of an address (`addr >> 24`).
const SOLICITED_NODE_PREFIX: u128 = 0xff02_0000_0000_0000_0000_0001_ff00_0000 >> 24;

/// Walks the options of a Neighbor Discovery message (`opts`: what follows its fixed part;
/// RFC 4861 §4.6): `Err(NdInvalid)` unless every option has a non-zero length (in 8-octet
/// units) and ends within the message (§7.1.1, §7.1.2); else the link-layer address of
/// the first option of type `want` (Source or Target Link-Layer Address), if any. At most
/// one option per 8 octets: bounded by the packet.
fn nd_options(mut opts: &[u8], want: u8) -> Result<Option<MacAddr>, DropReason> {
    let mut mac = None;
    while let [ty, len, ..] = *opts {
        let n = usize::from(len) * 8;
        let Some(opt) = opts.get(..n).filter(|_| n > 0) else {
            return Err(DropReason::NdInvalid);
        };
        if ty == want && mac.is_none() {
            mac = opt.get(2..8).and_then(|b| MacAddr::try_from(b).ok());
        }
        opts = opts.get(n..).unwrap_or(&[]);
    }
    if opts.is_empty() {
        Ok(mac)
    } else {
        Err(DropReason::NdInvalid)
    }
}

/// A valid Neighbor Advertisement ([`na_info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NaInfo {
    /// The Target Address: whose link-layer address is advertised (host-order `u128`).
    pub target: u128,
    /// The Target Link-Layer Address option (RFC 4861 §4.6.1), if present.
    pub mac: Option<MacAddr>,
    /// Solicited flag: the advertisement answers a Neighbor Solicitation (§4.4).
    pub solicited: bool,
    /// Override flag: the advertised address should replace a cached one (§7.2.5).
    pub overrides: bool,
}

/// The valid Neighbor Advertisement in `frame` (parsed as `p`), or `Ok(None)` when the
/// ICMPv6 message is not a Neighbor Advertisement. RFC 4861 §7.1.2 validity: hop limit
/// 255, valid checksum, code 0, ICMPv6 length ≥ 24, target not multicast, Solicited clear
/// when sent to a multicast address, every option of non-zero length within the message;
/// an invalid one is `Err(NdInvalid)`. Options are walked to the end of the message (at
/// most one per 8 bytes of it: bounded by the packet).
#[inline]
pub fn na_info(frame: &[u8], p: &Ipv6Info) -> Result<Option<NaInfo>, DropReason> {
    let m = message(frame, p)?;
    if m.first() != Some(&TYPE_NEIGHBOR_ADVERTISEMENT) {
        return Ok(None);
    }
    let target = m.get(8..24).and_then(|t| <[u8; 16]>::try_from(t).ok()).map(u128::from_be_bytes).ok_or(DropReason::NdInvalid)?;
    let flags = m.get(4).copied().unwrap_or(0);
    let solicited = flags & NA_FLAG_SOLICITED != 0;
    let valid = p.hop_limit == ND_HOP_LIMIT
        && m.get(1) == Some(&0)
        && target >> 120 != 0xff
        && !(solicited && p.dst >> 120 == 0xff)
        && upper_checksum(p.src, p.dst, NH_ICMPV6, m) == 0;
    if !valid {
        return Err(DropReason::NdInvalid);
    }
    let mac = nd_options(m.get(ND_LEN..).unwrap_or(&[]), OPT_TARGET_LL)?;
    Ok(Some(NaInfo { target, mac, solicited, overrides: flags & NA_FLAG_OVERRIDE != 0 }))
}

/// Writes a Neighbor Advertisement for `target` at `our_mac` into `frame` from offset `l3`
/// (the IPv6 header; Ethernet and tags before it are the caller's), to `dst`: IPv6 source
/// `target`, hop limit 255, Override set, Solicited as given, a Target Link-Layer Address
/// option with `our_mac`, valid checksum (RFC 4861 §4.4, §7.2.4). Returns the frame length.
fn emit_na(frame: &mut [u8], l3: usize, target: u128, dst: u128, solicited: bool, our_mac: MacAddr) -> Result<usize, DropReason> {
    let total = l3 + IPV6_LEN + NA_LEN;
    let ip = frame.get_mut(l3..total).ok_or(DropReason::NoHeadroom)?;
    Ipv6Repr { src: target, dst, next_header: NH_ICMPV6, payload_len: NA_LEN, hop_limit: ND_HOP_LIMIT, flow_label: 0 }.emit(ip)?;
    let na = ip.get_mut(IPV6_LEN..).and_then(|m| m.first_chunk_mut::<NA_LEN>()).ok_or(DropReason::NoHeadroom)?;
    *na = [0; NA_LEN];
    na[0] = TYPE_NEIGHBOR_ADVERTISEMENT;
    na[4] = NA_FLAG_OVERRIDE | if solicited { NA_FLAG_SOLICITED } else { 0 };
    na[8..24].copy_from_slice(&target.to_be_bytes());
    na[24] = OPT_TARGET_LL;
    na[25] = 1; // length in 8-octet units
    na[26..32].copy_from_slice(&our_mac);
    let c = upper_checksum(target, dst, NH_ICMPV6, na);
    na[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(total)
}

/// Turns the Neighbor Solicitation in `frame` (parsed as `p`, target `target`, one of our
/// addresses) into the Neighbor Advertisement answering it, in place (RFC 4861 §7.2.4):
/// to the solicitation's source with the Solicited flag, or — for a solicitation from the
/// unspecified address (duplicate address detection) — to all-nodes without it; Override
/// set, hop limit 255, Target Link-Layer Address option `our_mac`, valid checksum.
/// Ethernet addresses are set to go back out the receiving port; VLAN tags are kept.
///
/// `frame` must hold `p.l3 + 72` bytes (the caller grows a shorter one); returns the new
/// frame length.
pub fn na_reply_in_place(frame: &mut [u8], p: &Ipv6Info, target: u128, our_mac: MacAddr) -> Result<usize, DropReason> {
    let mut eth = EthernetFrame::new_checked(&mut *frame)?;
    let requester = eth.src_addr();
    let (dst, solicited, dst_mac) = if p.src == 0 {
        (ALL_NODES, false, [0x33, 0x33, 0, 0, 0, 1])
    } else {
        (p.src, true, requester)
    };
    eth.rewrite_l2(dst_mac, our_mac);
    emit_na(frame, p.l3, target, dst, solicited, our_mac)
}

/// Length of an unsolicited Neighbor Advertisement frame ([`unsolicited_na`]).
pub const UNSOLICITED_NA_FRAME_LEN: usize = ETH_LEN + IPV6_LEN + NA_LEN;

/// Writes an unsolicited Neighbor Advertisement for `target` at `our_mac` to all-nodes
/// (RFC 4861 §7.2.6: Solicited clear, Override set) into `frame`; returns its length. Sent
/// at start for every IPv6 VIP and port address, as the gratuitous ARP is for IPv4.
pub fn unsolicited_na(frame: &mut [u8], target: u128, our_mac: MacAddr) -> Result<usize, DropReason> {
    emit_header(frame, [0x33, 0x33, 0, 0, 0, 1], our_mac, ETHERTYPE_IPV6)?;
    emit_na(frame, ETH_LEN, target, ALL_NODES, false, our_mac)
}

/// Writes a Neighbor Solicitation (RFC 4861 §4.3, §7.2.2) asking for `target` into
/// `frame`: from `our_mac` and our address `src` (never `::`, which would make it a
/// duplicate address detection probe, §7.2.2) to the solicited-node multicast address of
/// `target` (RFC 4291 §2.7.1) at its Ethernet multicast address (RFC 2464 §7), hop limit
/// 255, a Source Link-Layer Address option with `our_mac`, valid checksum. Returns its
/// length, [`SOLICITATION_FRAME_LEN`] (86 bytes).
pub fn neighbor_solicitation(frame: &mut [u8], src: u128, target: u128, our_mac: MacAddr) -> Result<usize, DropReason> {
    let dst = solicited_node(target);
    emit_header(frame, multicast_mac(dst), our_mac, ETHERTYPE_IPV6)?;
    let ip = frame.get_mut(ETH_LEN..SOLICITATION_FRAME_LEN).ok_or(DropReason::NoHeadroom)?;
    Ipv6Repr { src, dst, next_header: NH_ICMPV6, payload_len: NS_LEN, hop_limit: ND_HOP_LIMIT, flow_label: 0 }.emit(ip)?;
    let ns = ip.get_mut(IPV6_LEN..).and_then(|m| m.first_chunk_mut::<NS_LEN>()).ok_or(DropReason::NoHeadroom)?;
    *ns = [0; NS_LEN];
    ns[0] = TYPE_NEIGHBOR_SOLICITATION;
    ns[8..24].copy_from_slice(&target.to_be_bytes());
    ns[24] = OPT_SOURCE_LL;
    ns[25] = 1; // length in 8-octet units
    ns[26..32].copy_from_slice(&our_mac);
    let c = upper_checksum(src, dst, NH_ICMPV6, ns);
    ns[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(SOLICITATION_FRAME_LEN)
}

/// Bytes of the offending packet an ICMPv6 error quotes: as much as fits in the minimum MTU
/// (RFC 4443 §2.4(c)): 1280 − 40 − 8.
pub const MAX_QUOTE: usize = IPV6_MIN_MTU as usize - IPV6_LEN - ICMPV6_HEADER_LEN;

/// Rewrites `frame` (an IPv6 packet to a VIP, parsed as `p`, too big for the tunnel) into
/// an ICMPv6 Packet Too Big (RFC 4443 §3.2) from the VIP to the client reporting `mtu`
/// (raised to 1280 if lower, RFC 8200 §5), quoting the start of the packet so the whole
/// error fits in 1280 bytes. Our MAC `our_mac` as source, back out the receiving port (VLAN
/// tags kept). Returns the new frame length.
pub fn packet_too_big_in_place(frame: &mut [u8], p: &Ipv6Info, mtu: u16, our_mac: MacAddr) -> Result<usize, DropReason> {
    let quote_len = (IPV6_LEN + p.payload_len).min(MAX_QUOTE);
    let icmp_at = p.l3 + IPV6_LEN;
    let total = icmp_at + ICMPV6_HEADER_LEN + quote_len;
    if frame.len() < total || frame.len() < p.l3 + quote_len {
        return Err(DropReason::NoHeadroom);
    }
    // Move the quoted packet 48 bytes up (over its own tail) to make room for the headers.
    frame.copy_within(p.l3..p.l3 + quote_len, icmp_at + ICMPV6_HEADER_LEN);
    let frame = frame.get_mut(..total).ok_or(DropReason::NoHeadroom)?;
    let mut eth = EthernetFrame::new_checked(&mut *frame)?;
    let client_mac = eth.src_addr();
    eth.rewrite_l2(client_mac, our_mac);
    let (ip, icmp) = frame.split_at_mut(icmp_at);
    let ip = ip.get_mut(p.l3..).ok_or(DropReason::TruncatedIpv6)?;
    let payload_len = ICMPV6_HEADER_LEN + quote_len;
    Ipv6Repr { src: p.dst, dst: p.src, next_header: NH_ICMPV6, payload_len, hop_limit: REPLY_HOP_LIMIT, flow_label: 0 }.emit(ip)?;
    let hdr = icmp.first_chunk_mut::<ICMPV6_HEADER_LEN>().ok_or(DropReason::TruncatedIpv6)?;
    hdr[0] = TYPE_PACKET_TOO_BIG;
    hdr[1] = 0;
    hdr[2..4].copy_from_slice(&[0, 0]);
    hdr[4..8].copy_from_slice(&u32::from(mtu.max(IPV6_MIN_MTU)).to_be_bytes());
    let c = upper_checksum(p.dst, p.src, NH_ICMPV6, icmp);
    icmp.get_mut(2..4).ok_or(DropReason::TruncatedIpv6)?.copy_from_slice(&c.to_be_bytes());
    Ok(total)
}

#[cfg(test)]
mod tests;
