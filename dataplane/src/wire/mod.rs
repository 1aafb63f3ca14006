//! Wire formats of the packet path, one file per header, in the style of smoltcp
//! `src/wire`: [`ethernet`] (with 802.1Q / QinQ tags), [`arp`], [`ipv4`], [`ipv6`] (with the
//! extension-header walk), [`l4`] (TCP, UDP), [`icmp`], [`icmpv6`] (with Neighbor
//! Discovery), [`encap`] (IPIP, GUE, over IPv4 or IPv6) and [`checksum`] (RFC 1071).
//!
//! Each header has a view over a byte buffer (`XxxPacket<T: AsRef<[u8]>>`) whose
//! `new_checked` checks the length once; its accessors read named field ranges inside the
//! checked bytes and cannot fail after that. Rewrites are methods on views over
//! `T: AsMut<[u8]>` or `emit` of a small `Repr` struct, and every write that could fall
//! outside the buffer returns a [`DropReason`] instead of being skipped.
//!
//! [`parse`] runs the views over one frame in a single pass and reports what the worker
//! needs ([`Parsed`]); [`flow_tuple_hint`] and [`syn_hint`] are the burst-prefetch hints.
//!
//! May use: `std` only (and `strum` derives). Hot path: no allocation, locks, syscalls,
//! and no panic on any input (every module has proptests of random and mutated frames).

pub mod arp;
pub mod checksum;
pub mod encap;
pub mod ethernet;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod l4;
pub mod mld;
mod hint;
pub mod fast;
pub use hint::{flow_tuple_hint, flow_tuple_hint6, syn_hint, syn_hint6};

pub use arp::{ArpInfo, ArpPacket};
pub use checksum::checksum;
pub use encap::{Encap, Tunnel, GUE_PORT};
pub use ethernet::{EthernetFrame, MacAddr, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD, ETHERTYPE_VLAN, ETH_LEN};
pub use icmp::{frag_needed_len, icmp_frag_needed_in_place, icmp_quote, IcmpQuote};
pub use icmpv6::{icmpv6_quote, Icmpv6Quote};
pub use ipv4::{Frag, Ipv4Packet, Ipv4Repr, PROTO_ICMP, PROTO_IPIP, PROTO_TCP, PROTO_UDP};
pub use ipv6::{Ipv6Packet, Ipv6Repr, NH_ICMPV6};
pub use l4::{tcp_flags, TcpPacket, UdpPacket};

/// Why a frame was not forwarded. Every drop has one of these reasons and a counter
/// (`WorkerStats::drops`, indexed by `reason as usize`).
///
/// Names and count come from `strum` derives: [`DropReason::COUNT`] (`EnumCount`),
/// [`DropReason::name`] (`IntoStaticStr`, snake_case: the names `spillwayctl stats` and
/// docs/architecture.md print), and `DropReason::iter()` (`EnumIter`, counter order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::EnumCount, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than an Ethernet header (or its VLAN tags).
    TruncatedEthernet = 0,
    /// EtherType neither IPv4, IPv6 nor ARP (e.g. LLDP).
    UnsupportedEthertype,
    /// IPv4 header shorter than 20 bytes, bad version or IHL.
    MalformedIpv4,
    /// IPv4 total length larger than the frame (or smaller than the header).
    TruncatedIpv4,
    /// TCP/UDP header missing from a first fragment or unfragmented packet.
    TruncatedL4,
    /// ARP that is neither a request for a VIP or a port address nor a reply (replies go
    /// to the neighbour resolver), or malformed.
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
    /// IPv4 TTL 0: no forwarder may pass such a datagram on (RFC 1812 §5.3.1, RFC 1122
    /// §3.2.1.7). TTL 1 is forwarded in every mode (docs/semantics.md, "TTL").
    TtlExceeded,
    /// A frame in several buffer segments (a jumbo frame received into chained mbufs)
    /// that the device cannot handle: its headers do not fit the first segment, or the
    /// port it leaves by cannot send chained mbufs (no `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`).
    MultiSegment,
    /// A new connection whose source address is a VIP or one of our addresses (spoofed).
    MartianSource,
    /// A later IPv4 or IPv6 fragment whose first fragment was not seen (reordered, or its entry
    /// expired), on a (VIP, protocol) with several services: which service it belongs to
    /// is unknown, and a guess could split the datagram (docs/semantics.md "Fragments").
    FragmentUnknown,
    /// A later IPv4 or IPv6 fragment that had to be held (as for `fragment_unknown`) while the
    /// worker already held its maximum of fragments
    /// ([`crate::fastpath::frag::HOLD_SLOTS`]).
    FragmentHoldFull,
    /// An ARP reply the worker could not hand to the neighbour resolver: its queue was
    /// full (`crate::neighbor::SEEN_CAPACITY` replies between two control ticks).
    NeighborQueueFull,
    /// The chosen backend's next-hop MAC is not resolved (ARP): only a connection kept on
    /// it, or a last-resort choice when nothing is eligible, gets here (docs/operations.md
    /// "Next hops"). A configured `mac` is never all-zero, so zero means unresolved.
    NextHopUnresolved,
    /// IPv6 header shorter than 40 bytes or version ≠ 6.
    MalformedIpv6,
    /// IPv6 payload length beyond the frame, or an extension header running past the
    /// payload (or, in a jumbo frame of chained mbufs, past its first segment after the
    /// pull-up: `crate::fastpath::segments::SEGMENTED_HEADERS_MAX_V6`).
    TruncatedIpv6,
    /// More IPv6 extension headers than [`ipv6::MAX_EXT_HEADERS`] (a bound on per-packet
    /// work).
    Ipv6ExtChain,
    /// IPv6 hop limit 0: never forwarded (RFC 8200 §3; as `ttl_exceeded` for IPv4).
    HopLimitExceeded,
    /// A Neighbor Solicitation for an address that is not ours (not a VIP nor a port
    /// address), a Neighbor Advertisement not addressed to a port's own IPv6 address or
    /// without a Target Link-Layer Address, or other Neighbor Discovery traffic.
    NdIgnored,
    /// A Neighbor Solicitation or Advertisement failing RFC 4861 §7.1.1/§7.1.2 validation
    /// (hop limit ≠ 255, code ≠ 0, shorter than 24 bytes, bad checksum, multicast target,
    /// a zero-length option; an advertisement to a multicast address with Solicited set).
    NdInvalid,
    /// A packet too big for the tunnel whose source may not be sent an ICMP error: a
    /// broadcast, multicast, unspecified, loopback or reserved (240/4) IPv4 source (RFC 1812
    /// §4.3.2.7), a non-unicast IPv6 source or a multicast IPv6 destination (RFC 4443
    /// §2.4(e)). Dropped silently, so the VIP reflects nothing to spoofed sources.
    IcmpErrorForbidden,
    /// A packet too big for the tunnel while the worker's ICMP error budget
    /// (`dataplane.icmp_errors_per_sec`) is spent (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)).
    IcmpErrorRateLimited,
    /// A frame whose Ethernet source MAC has the individual/group bit set (multicast or
    /// broadcast): a source address is always an individual address (IEEE 802.3 §3.2.3),
    /// so the frame is spoofed or broken; replying to it or forwarding it would reflect
    /// traffic to a group.
    MulticastSourceMac,
    /// An IPv6 packet with a Type 0 Routing Header and Segments Left > 0: RFC 5095 §3
    /// deprecates it (source routing that lets a packet bounce between hosts) and a node
    /// must not process it; forwarding it unchanged would hand it to a backend that might.
    Ipv6RoutingType0,
    /// An IP frame not addressed to the receiving port: unicast to another MAC (a switch
    /// flooding a frame for a backend or another host, promiscuous mode), or a packet for
    /// a VIP sent to a broadcast or multicast MAC (RFC 1812 §5.3.4: a router does not
    /// forward unicast IP received as a link-layer broadcast). Forwarding either would let
    /// two hosts on one segment hand a frame back and forth without end (L2 DSR changes
    /// no TTL). ARP and Neighbor Discovery requests for our addresses are answered
    /// whatever MAC they were sent to (`Worker::not_sent_to_us`).
    NotOurMac,
    /// A packet of a flow another worker owns (an ICMP error quoting it, a fragment of it)
    /// whose owner's redirect ring was full (`fastpath::worker::redirect`): a worker never
    /// waits on another.
    RedirectRingFull,
}

impl DropReason {
    /// Stable snake_case name used by counters and `spillwayctl stats` (from the
    /// `IntoStaticStr` derive).
    #[inline]
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// What [`parse`] found in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An ARP packet for Ethernet/IPv4.
    Arp(ArpInfo),
    /// An IPv4 packet.
    Ipv4(Ipv4Info),
    /// An IPv6 packet.
    Ipv6(Ipv6Info),
}

/// IPv6 and L4 fields of a packet, with the offsets the rewrites need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Ipv6Info {
    /// Offset of the IPv6 header in the frame (14 + 4 per VLAN tag).
    pub l3: usize,
    /// IPv6 payload length (bytes after the 40-byte header), ≤ frame length − l3 − 40.
    pub payload_len: usize,
    /// Offset in the frame of the upper-layer header (after the extension headers).
    pub l4: usize,
    /// Source address (host-order `u128`).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Upper-layer protocol ([`ipv6::ExtWalk::proto`]).
    pub proto: u8,
    /// Hop limit (≥ 1: [`parse`] drops 0).
    pub hop_limit: u8,
    /// Whether the packet has a Fragment header (first fragment or not).
    pub fragmented: bool,
    /// Fragment offset in 8-octet units (0 when not fragmented).
    pub frag_offset: u16,
    /// M flag of the Fragment header (more fragments follow).
    pub frag_more: bool,
    /// Fragment identification (32 bits, RFC 8200 §4.5).
    pub ident: u32,
    /// The Fragment header's Next Header ([`ipv6::Frag6::next`]; `proto` when not
    /// fragmented): what keys and hashes a datagram's fragments alike.
    pub frag_next: u8,
    /// Source port (TCP/UDP; 0 when absent, e.g. non-first fragments, ICMPv6).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// TCP flags (0 for non-TCP).
    pub tcp_flags: u8,
    /// Whether `sport`/`dport` were read from the packet.
    pub has_ports: bool,
}

impl Ipv6Info {
    /// Length of the IPv6 packet (header + payload).
    #[inline]
    pub fn total_len(&self) -> usize {
        ipv6::IPV6_LEN + self.payload_len
    }

    /// Whether this is a fragment of a larger datagram: a Fragment header with a non-zero
    /// offset or the M flag. An atomic fragment (offset 0, M clear, RFC 6946) is the whole
    /// datagram and is balanced like an unfragmented packet.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.fragmented && (self.frag_offset != 0 || self.frag_more)
    }
}

/// IPv4 and L4 fields of a packet, with the offsets the rewrites need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
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
    /// TTL (≥ 1: [`parse`] drops TTL 0).
    pub ttl: u8,
    /// Fragmentation.
    pub frag: Frag,
    /// Identification (RFC 791): with source, destination and protocol, names the datagram
    /// a fragment belongs to.
    pub ident: u16,
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
    #[inline]
    pub fn l4(&self) -> usize {
        self.l3 + self.ihl
    }
}

/// `Err(MulticastSourceMac)` for a frame whose source MAC is a group (multicast or
/// broadcast) address: one bit test on the checked header (IEEE 802.3 §3.2.3).
#[inline(always)]
fn individual_source<T: AsRef<[u8]>>(eth: &EthernetFrame<T>) -> Result<(), DropReason> {
    if eth.src_is_group() {
        return Err(DropReason::MulticastSourceMac);
    }
    Ok(())
}

/// Parses a frame. Errors name the reason it cannot be forwarded.
///
/// Ethernet with up to two VLAN tags ([`EthernetFrame`]) from an individual source MAC
/// (`Err(MulticastSourceMac)` for a group one, IEEE 802.3 §3.2.3); ARP for Ethernet/IPv4
/// ([`ArpPacket`]); IPv4 ([`Ipv4Packet`]: version 4, IHL ≥ 5, `IHL·4 ≤ total length ≤
/// frame`, trailing Ethernet padding allowed) with TTL ≥ 1 (`Err(TtlExceeded)` for TTL 0,
/// RFC 1812 §5.3.1: a router must not forward it); for TCP/UDP first fragments and whole
/// packets, the ports (and the whole TCP header with its flags, [`TcpPacket`]).
#[inline]
pub fn parse(frame: &[u8]) -> Result<Parsed, DropReason> {
    let eth = EthernetFrame::new_checked(frame)?;
    individual_source(&eth)?;
    let l3 = eth.header_len();
    match eth.ethertype() {
        ETHERTYPE_IPV4 => parse_ipv4(eth.payload(), l3).map(Parsed::Ipv4),
        ETHERTYPE_IPV6 => parse_ipv6(eth.payload(), l3).map(Parsed::Ipv6),
        ETHERTYPE_ARP => Ok(Parsed::Arp(ArpPacket::new_checked(eth.payload())?.info(l3))),
        _ => Err(DropReason::UnsupportedEthertype),
    }
}

/// What [`parse_ipv4_frame`] found: an IPv4 packet (its [`Ipv4Info`] filled), or the link
/// layer of any other frame, for [`parse_ipv6_at`] or [`parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// IPv4: the out-parameter holds its fields.
    Ipv4,
    /// Another ethertype (IPv6, ARP, unsupported): where its L3 header starts, after the
    /// Ethernet header and its tags (14, 18 or 22 bytes), and the ethertype.
    Other {
        /// Offset of the L3 header in the frame.
        l3: usize,
        /// The ethertype after the tags.
        ethertype: u16,
    },
}

/// The IPv4 entry of [`parse`], for the packet path's common case: `Ok(Ipv4)` with `out`
/// filled for an IPv4 packet (untagged or VLAN/QinQ-tagged), `Err` exactly as [`parse`]
/// gives for it, and `Ok(Other { .. })` (`out` untouched) for any other ethertype, whose
/// Ethernet header, checked, need not be parsed again ([`parse_ipv6_at`]).
///
/// Why an out-parameter, inlined: returned by value, the 48-byte [`Ipv4Info`] (or a
/// [`Parsed`], sized by its IPv6 variant) was written field by field and then copied in
/// 16-byte loads, which cannot be forwarded from those narrower stores: a store-forwarding
/// stall per packet, the hottest spot of the worker under `perf` (docs/benchmarks.md
/// "Per-stage budget"). Inlined into the caller's local, its fields stay in registers.
#[inline(always)]
pub fn parse_ipv4_frame(frame: &[u8], out: &mut Ipv4Info) -> Result<FrameKind, DropReason> {
    let eth = EthernetFrame::new_checked(frame)?;
    individual_source(&eth)?;
    let (l3, ethertype) = (eth.header_len(), eth.ethertype());
    if ethertype != ETHERTYPE_IPV4 {
        return Ok(FrameKind::Other { l3, ethertype });
    }
    fill_ipv4(Ipv4Packet::new_checked(eth.payload())?, l3, out)?;
    Ok(FrameKind::Ipv4)
}

/// The IPv6 entry of [`parse`], after [`parse_ipv4_frame`] found a frame of another
/// ethertype (`l3`, `ethertype`: its [`FrameKind::Other`]): `Ok(true)` with `out` filled
/// for an IPv6 packet, `Err` exactly as [`parse`] gives for it, and `Ok(false)` (`out`
/// untouched) for any other ethertype. Inlined into the caller's local for the reason
/// [`parse_ipv4_frame`] gives (no [`Parsed`] returned by value and copied).
#[inline(always)]
pub fn parse_ipv6_at(frame: &[u8], l3: usize, ethertype: u16, out: &mut Ipv6Info) -> Result<bool, DropReason> {
    if ethertype != ETHERTYPE_IPV6 {
        return Ok(false);
    }
    fill_ipv6(Ipv6Packet::new_checked(frame.get(l3..).unwrap_or(&[]))?, l3, out)?;
    Ok(true)
}

/// Parses the first segment `head` of a frame of `frame_len` bytes spread over several
/// buffer segments (a jumbo frame received with RX scatter): like
/// [`parse`], with the IPv4 total length or the IPv6 payload length checked against
/// `frame_len` ([`Ipv4Packet::new_checked_head`], [`Ipv6Packet::new_checked_head`]); every
/// header the worker reads must be in `head`, the caller pulls them up first
/// (`crate::fastpath::segments::parse_segmented`):
/// - Ethernet and its tags, ARP, the fixed IPv4 or IPv6 header (`Err(TruncatedEthernet)`,
///   `Err(MalformedIpv4)`, `Err(MalformedIpv6)` otherwise);
/// - IPv6 extension headers ([`ipv6::walk_ext`]): `Err(TruncatedIpv6)` when one runs past
///   `head` (or past the payload);
/// - the TCP/UDP header: `Err(TruncatedL4)`.
///
/// The [`Ipv6Info`] / [`Ipv4Info`] lengths are those of the whole packet.
#[inline]
pub fn parse_head(head: &[u8], frame_len: usize) -> Result<Parsed, DropReason> {
    let eth = EthernetFrame::new_checked(head)?;
    individual_source(&eth)?;
    let l3 = eth.header_len();
    match eth.ethertype() {
        ETHERTYPE_IPV4 => ipv4_info(Ipv4Packet::new_checked_head(eth.payload(), frame_len.saturating_sub(l3))?, l3).map(Parsed::Ipv4),
        ETHERTYPE_ARP => Ok(Parsed::Arp(ArpPacket::new_checked(eth.payload())?.info(l3))),
        ETHERTYPE_IPV6 => ipv6_info(Ipv6Packet::new_checked_head(eth.payload(), frame_len.saturating_sub(l3))?, l3).map(Parsed::Ipv6),
        _ => Err(DropReason::UnsupportedEthertype),
    }
}

/// Parses the IPv4 packet `l3_bytes` (found at offset `l3` of its frame) and its ports.
#[inline(always)]
fn parse_ipv4(l3_bytes: &[u8], l3: usize) -> Result<Ipv4Info, DropReason> {
    ipv4_info(Ipv4Packet::new_checked(l3_bytes)?, l3)
}

/// The fields of a checked IPv4 view at offset `l3`, and its ports. Always inlined: with
/// two callers ([`parse`] and [`parse_head`]) LLVM kept it out of line, a call that the
/// single-segment path did not pay before `parse_head` existed.
#[inline(always)]
fn ipv4_info(ip: Ipv4Packet<&[u8]>, l3: usize) -> Result<Ipv4Info, DropReason> {
    let mut info = Ipv4Info::default();
    fill_ipv4(ip, l3, &mut info)?;
    Ok(info)
}

/// [`ipv4_info`] written field by field into `info` (untouched on `Err`: every check comes
/// before the first store), so [`parse_ipv4_frame`] builds no temporary to copy.
#[inline(always)]
fn fill_ipv4(ip: Ipv4Packet<&[u8]>, l3: usize, info: &mut Ipv4Info) -> Result<(), DropReason> {
    let (frag, proto, ttl) = (ip.frag(), ip.protocol(), ip.ttl());
    if ttl == 0 {
        return Err(DropReason::TtlExceeded);
    }
    let (mut sport, mut dport, mut tcp_flags, mut has_ports) = (0, 0, 0, false);
    if frag.offset == 0 {
        if proto == PROTO_TCP {
            let tcp = TcpPacket::new_checked(ip.payload())?;
            (sport, dport, tcp_flags, has_ports) = (tcp.src_port(), tcp.dst_port(), tcp.flags(), true);
        } else if proto == PROTO_UDP {
            let udp = UdpPacket::new_checked(ip.payload())?;
            (sport, dport, has_ports) = (udp.src_port(), udp.dst_port(), true);
        }
    }
    info.l3 = l3;
    info.ihl = ip.header_len();
    info.total_len = ip.total_len();
    info.src = ip.src_addr();
    info.dst = ip.dst_addr();
    info.proto = proto;
    info.ttl = ttl;
    info.frag = frag;
    info.ident = ip.ident();
    info.sport = sport;
    info.dport = dport;
    info.tcp_flags = tcp_flags;
    info.has_ports = has_ports;
    Ok(())
}

/// Parses the IPv6 packet `l3_bytes` (at offset `l3` of its frame): the fixed header
/// ([`Ipv6Packet`]), hop limit ≥ 1 (`Err(HopLimitExceeded)`), the extension-header chain
/// ([`ipv6::walk_ext`], bounded), and for TCP/UDP in a first fragment or a whole packet
/// the ports (and TCP flags). Non-first fragments are never read past their Fragment header.
#[inline]
fn parse_ipv6(l3_bytes: &[u8], l3: usize) -> Result<Ipv6Info, DropReason> {
    ipv6_info(Ipv6Packet::new_checked(l3_bytes)?, l3)
}

/// The fields of a checked IPv6 view at offset `l3` (whole or, from [`parse_head`], the
/// first segment), as [`parse_ipv6`] describes: [`fill_ipv6`] into a fresh value.
#[inline(always)]
fn ipv6_info(ip: Ipv6Packet<&[u8]>, l3: usize) -> Result<Ipv6Info, DropReason> {
    let mut info = Ipv6Info::default();
    fill_ipv6(ip, l3, &mut info)?;
    Ok(info)
}

/// [`ipv6_info`] written field by field into `info` (untouched on `Err`: every check comes
/// before the first store), so [`parse_ipv6_at`] builds no temporary to copy, as
/// [`fill_ipv4`] does. A TCP or UDP header right after the fixed 40 octets (no extension
/// headers, the common case) is taken without calling [`ipv6::walk_ext`]: the walk
/// would stop there at once with the same answer (upper protocol, offset 0, no Fragment
/// header). The shortcut stays here: inside `walk_ext`, with the chain walked out of line,
/// it cost 13 more instructions per IPv6 packet (`packet_ir established6` 980.1 → 993.1,
/// 2026-12-02; undone).
#[inline(always)]
fn fill_ipv6(ip: Ipv6Packet<&[u8]>, l3: usize, info: &mut Ipv6Info) -> Result<(), DropReason> {
    let (nh, hop_limit) = (ip.next_header(), ip.hop_limit());
    if hop_limit == 0 {
        return Err(DropReason::HopLimitExceeded);
    }
    let payload = ip.payload();
    let w = if nh == PROTO_TCP || nh == PROTO_UDP { ipv6::ExtWalk { proto: nh, offset: 0, frag: None, headers: 0 } } else { ipv6::walk_ext(nh, payload)? };
    let frag = w.frag.unwrap_or_default();
    let (mut sport, mut dport, mut tcp_flags, mut has_ports) = (0, 0, 0, false);
    if frag.offset == 0 {
        let upper = payload.get(w.offset..).unwrap_or(&[]);
        if w.proto == PROTO_TCP {
            let tcp = TcpPacket::new_checked(upper)?;
            (sport, dport, tcp_flags, has_ports) = (tcp.src_port(), tcp.dst_port(), tcp.flags(), true);
        } else if w.proto == PROTO_UDP {
            let udp = UdpPacket::new_checked(upper)?;
            (sport, dport, has_ports) = (udp.src_port(), udp.dst_port(), true);
        }
    }
    info.l3 = l3;
    info.payload_len = ip.payload_len();
    info.l4 = l3 + ipv6::IPV6_LEN + w.offset;
    info.src = ip.src_addr();
    info.dst = ip.dst_addr();
    info.proto = w.proto;
    info.hop_limit = hop_limit;
    info.fragmented = w.frag.is_some();
    info.frag_offset = frag.offset;
    info.frag_more = frag.more;
    info.ident = frag.ident;
    info.frag_next = if w.frag.is_some() { frag.next } else { w.proto };
    info.sport = sport;
    info.dport = dport;
    info.tcp_flags = tcp_flags;
    info.has_ports = has_ports;
    Ok(())
}

/// Turns the ARP request `a` in `frame` into the reply "`a.tpa` is at `our_mac`" in place
/// (RFC 826), with Ethernet addresses set for sending back out the receiving port. VLAN
/// tags are kept. `Err(ArpIgnored)` when `frame` does not hold the packet `a` describes.
#[inline]
pub fn arp_reply_in_place(frame: &mut [u8], a: &ArpInfo, our_mac: MacAddr) -> Result<(), DropReason> {
    let mut arp = ArpPacket::new_checked(frame.get_mut(a.offset..).ok_or(DropReason::ArpIgnored)?)?;
    let requester = arp.make_reply(our_mac);
    EthernetFrame::new_checked(frame)?.rewrite_l2(requester, our_mac);
    Ok(())
}

/// Big-endian u16 of the two bytes `r` of a checked header (`r` is a named field range
/// inside it; the `0` arm is never taken for such a range and is folded away).
#[inline(always)]
pub(crate) fn be16(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    match b.get(r) {
        Some(&[x, y]) => u16::from_be_bytes([x, y]),
        _ => 0,
    }
}

/// Big-endian u32 of the four bytes `r` of a checked header (as [`be16`]).
#[inline(always)]
pub(crate) fn be32(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    match b.get(r) {
        Some(&[w, x, y, z]) => u32::from_be_bytes([w, x, y, z]),
        _ => 0,
    }
}

/// A view's checked length was lost: only an `AsRef<[u8]>` whose length changes between
/// calls can get here (the buffers of this crate — slices, `Vec`, mbuf data — cannot), so no
/// packet content can reach it.
#[cold]
#[inline(never)]
pub(crate) fn view_invariant_broken() -> ! {
    unreachable!("wire view: buffer shorter than its checked length")
}

#[cfg(test)]
mod tests;
