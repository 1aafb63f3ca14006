//! The vector fast path's classifier (`fastpath/worker/vector.rs`): the common frame read
//! at fixed offsets of its first cache line, with exactly the checks [`super::parse`] makes
//! for it, so a frame it accepts is one `parse` accepts with the same fields. Anything else
//! (a second VLAN tag, IPv4 options or fragments, IPv6 extension headers, ICMP, ARP, a
//! multicast source MAC, TTL or hop limit 0, a truncated header) is `None` and takes the
//! general path, which parses it in full and names its drop reason. A child of [`super`].
//!
//! The frames it takes:
//! - Ethernet, untagged or one 802.1Q/802.1ad tag, from an individual source MAC;
//! - IPv4 with IHL 5 (no options), neither MF nor a fragment offset (DF allowed), TTL ≥ 1,
//!   `20 ≤ total length ≤ frame − L3 offset` (RFC 791); or IPv6 with TCP or UDP right
//!   after the fixed header, hop limit ≥ 1, `40 + payload length ≤ frame − L3 offset`
//!   (RFC 8200 §3);
//! - TCP with a data offset of 5 to 15 words inside the IP payload (RFC 9293 §3.1), or UDP
//!   with its 8-byte header inside it (RFC 768).

use super::{ethernet, ipv4, ipv6, l4, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETH_LEN, PROTO_TCP, PROTO_UDP};

/// Offset of the source MAC's first octet, whose low bit marks a group address.
const SRC_MAC_FIRST: usize = 6;
/// An untagged frame's L3 offset, and a frame with one tag's.
const TAGGED: usize = ETH_LEN + ethernet::VLAN_TAG_LEN;

/// The L4 fields the fast path needs, with the addresses of either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastTuple<A> {
    /// Source address (host order).
    pub src: A,
    /// Destination address: the VIP (host order).
    pub dst: A,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol: [`PROTO_TCP`] or [`PROTO_UDP`].
    pub proto: u8,
    /// TCP flags; 0 for UDP (as [`super::Ipv4Info::tcp_flags`]).
    pub flags: u8,
}

/// What [`classify`] found: a fast-path IPv4 or IPv6 frame, or `General` for any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fast {
    /// An IPv4 TCP/UDP frame the fast path may take.
    V4(FastTuple<u32>),
    /// An IPv6 TCP/UDP frame the fast path may take.
    V6(FastTuple<u128>),
    /// Anything else: the general path parses it.
    General,
}

/// Big-endian u16 at the constant range `r` of the fixed-size header `h` (folded to one
/// load after inlining: no bounds check, no panic path).
#[inline(always)]
fn at16<const N: usize>(h: &[u8; N], r: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([h[r.start], h[r.start + 1]])
}

/// Big-endian u32 at the constant range `r` of `h`, as [`at16`].
#[inline(always)]
fn at32<const N: usize>(h: &[u8; N], r: std::ops::Range<usize>) -> u32 {
    u32::from_be_bytes([h[r.start], h[r.start + 1], h[r.start + 2], h[r.start + 3]])
}

/// Big-endian u128 at the constant range `r` of `h`, as [`at16`].
#[inline(always)]
fn at128<const N: usize>(h: &[u8; N], r: std::ops::Range<usize>) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[r]);
    u128::from_be_bytes(b)
}

/// IPv4 header and a UDP header (the ports of TCP too).
const V4_HEAD: usize = ipv4::IPV4_MIN_LEN + l4::UDP_LEN;
/// IPv6 fixed header and a UDP header.
const V6_HEAD: usize = ipv6::IPV6_LEN + l4::UDP_LEN;

/// The TCP flags of the L4 header at `off` of `l3` (the frame from its L3 header on),
/// inside an IP payload of `payload_len` bytes (0 for UDP), when the header fits as
/// [`super::parse`] requires; `None` else. A UDP datagram needs only its 8 octets in the
/// frame, a TCP segment its 20.
#[inline(always)]
fn l4_flags(l3: &[u8], off: usize, proto: u8, payload_len: usize) -> Option<u8> {
    if proto == PROTO_TCP {
        let tcp = l3.get(off..)?.first_chunk::<{ l4::TCP_MIN_LEN }>()?;
        let doff = usize::from(tcp[l4::tcp_field::DATA_OFF] >> 4) * 4;
        (doff >= l4::TCP_MIN_LEN && doff <= payload_len).then_some(tcp[l4::tcp_field::FLAGS])
    } else if proto == PROTO_UDP && payload_len >= l4::UDP_LEN {
        Some(0)
    } else {
        None
    }
}

/// The fast path's IPv4 packet in `l3` (the frame from its L3 header on).
#[inline(always)]
fn v4(l3: &[u8]) -> Fast {
    let Some(h) = l3.first_chunk::<V4_HEAD>() else { return Fast::General };
    let total = usize::from(at16(h, ipv4::field::TOTAL_LEN));
    let proto = h[ipv4::field::PROTOCOL];
    let ok = h[ipv4::field::VER_IHL] == 0x45 && at16(h, ipv4::field::FLAGS_FRAG) & 0x3fff == 0 && h[ipv4::field::TTL] != 0 && total >= ipv4::IPV4_MIN_LEN && total <= l3.len();
    const L4: usize = ipv4::IPV4_MIN_LEN;
    match l4_flags(l3, L4, proto, total.wrapping_sub(L4)) {
        Some(flags) if ok => Fast::V4(FastTuple {
            src: at32(h, ipv4::field::SRC),
            dst: at32(h, ipv4::field::DST),
            sport: at16(h, L4..L4 + 2),
            dport: at16(h, L4 + 2..L4 + 4),
            proto,
            flags,
        }),
        _ => Fast::General,
    }
}

/// The fast path's IPv6 packet in `l3` (the frame from its L3 header on). Its tail repeats
/// [`v4`]'s on purpose: one generic helper for both (tried 2026-12-07) cost 20 instructions
/// per established packet and per SYN (`packet_ir`), by the code layout it gave.
#[inline(always)]
fn v6(l3: &[u8]) -> Fast {
    let Some(h) = l3.first_chunk::<V6_HEAD>() else { return Fast::General };
    let payload = usize::from(at16(h, ipv6::field::PAYLOAD_LEN));
    let proto = h[ipv6::field::NEXT_HEADER];
    let ok = h[0] >> 4 == 6 && h[ipv6::field::HOP_LIMIT] != 0 && ipv6::IPV6_LEN + payload <= l3.len();
    const L4: usize = ipv6::IPV6_LEN;
    match l4_flags(l3, L4, proto, payload) {
        Some(flags) if ok => Fast::V6(FastTuple {
            src: at128(h, ipv6::field::SRC),
            dst: at128(h, ipv6::field::DST),
            sport: at16(h, L4..L4 + 2),
            dport: at16(h, L4 + 2..L4 + 4),
            proto,
            flags,
        }),
        _ => Fast::General,
    }
}

/// Classifies `frame` (one segment holding the whole frame) for the fast path, reading
/// only its first 58 (IPv4) or 78 (IPv6) octets at fixed offsets (module docs): with one
/// tag, the IP header and 20 octets of TCP or 8 of UDP.
#[inline(always)]
pub fn classify(frame: &[u8]) -> Fast {
    let Some(eth) = frame.first_chunk::<TAGGED>() else { return Fast::General };
    if eth[SRC_MAC_FIRST] & 1 != 0 {
        return Fast::General;
    }
    let et = at16(eth, ethernet::field::ETHERTYPE);
    let (l3, et) = if et == ETHERTYPE_IPV4 || et == ETHERTYPE_IPV6 {
        (ETH_LEN, et)
    } else if ethernet::is_vlan_tpid(et) {
        (TAGGED, at16(eth, TAGGED - 2..TAGGED))
    } else {
        return Fast::General;
    };
    let rest = frame.get(l3..).unwrap_or(&[]);
    match et {
        ETHERTYPE_IPV4 => v4(rest),
        ETHERTYPE_IPV6 => v6(rest),
        _ => Fast::General,
    }
}

/// Little-endian u64 at the constant offset `o` of `h` (one load after inlining, no bounds
/// check left).
#[inline(always)]
fn le64<const N: usize>(h: &[u8; N], o: usize) -> u64 {
    // one 8-octet copy, so that a masked word stays one load (octet by octet, LLVM keeps
    // only the masked octets' loads)
    let mut w = [0u8; 8];
    w.copy_from_slice(&h[o..o + 8]);
    u64::from_le_bytes(w)
}

/// The octets of the first word ([`le64`] at 0) a template compares: the destination MAC
/// and the source MAC's group bit.
const M_ETH: u64 = 0x0001_ffff_ffff_ffff;

/// The frame shapes a [`Template`] learns: the family and whether one 802.1Q tag is there
/// (the L3 offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Nothing learned: no frame matches.
    None,
    /// IPv4, untagged (L3 at 14).
    V4,
    /// IPv4 with one tag (L3 at 18).
    V4Tagged,
    /// IPv6, untagged.
    V6,
    /// IPv6 with one tag.
    V6Tagged,
}

/// A burst's common frame shape, learned from one frame [`classify`] accepted, so that the
/// frames after it that share its invariant octets are classified by a few masked word
/// compares instead of a parse: what l3fwd's multi-lookup does with its masked key loads,
/// here for the whole header check. The masked octets are those [`classify`]'s decision
/// does not depend on per packet (the destination MAC, the source MAC's group bit, the
/// EtherType and tag protocol, the IP version and header length, the fragment bits, the
/// protocol, the destination address and port); a frame matching them is then checked for
/// what varies per packet exactly as [`classify`] checks it (TTL or hop limit, the lengths,
/// the TCP data offset), so [`Template::match4`] and [`Template::match6`] accept exactly
/// the frames [`classify`] accepts with these invariant octets, with the same fields (a
/// property test and a debug check of every match hold them to it). Frames shorter than
/// the header with 20 octets of L4 (a short UDP datagram) do not match and take
/// [`classify`].
#[derive(Clone, Copy, Debug)]
pub struct Template {
    shape: Shape,
    /// The masked words the frame must equal, in the order of the shape's compares.
    vals: [u64; 6],
    /// The protocol ([`PROTO_TCP`] or [`PROTO_UDP`]).
    proto: u8,
}

impl Default for Template {
    fn default() -> Self {
        Template::NONE
    }
}

impl Template {
    /// No template: matches no frame.
    pub const NONE: Template = Template { shape: Shape::None, vals: [0; 6], proto: 0 };

    /// The template of `frame`, which [`classify`] accepted as `fast`; [`Template::NONE`]
    /// when the frame is shorter than the template's reach or `fast` is `General`.
    pub fn learn(frame: &[u8], fast: &Fast) -> Template {
        let tagged = frame.get(12..14).is_some_and(|et| ethernet::is_vlan_tpid(u16::from_be_bytes([et[0], et[1]])));
        match (fast, tagged) {
            (Fast::V4(t), false) => learn4::<ETH_LEN, { ETH_LEN + V4_REACH }>(frame, t.proto),
            (Fast::V4(t), true) => learn4::<TAGGED, { TAGGED + V4_REACH }>(frame, t.proto),
            (Fast::V6(t), false) => learn6::<ETH_LEN, { ETH_LEN + V6_REACH }>(frame, t.proto),
            (Fast::V6(t), true) => learn6::<TAGGED, { TAGGED + V6_REACH }>(frame, t.proto),
            (Fast::General, _) => Template::NONE,
        }
    }

    /// [`classify`]'s answer for an IPv4 `frame` that matches the template, as `(source
    /// address, source port, TCP flags)` (the destination, its port and the protocol are
    /// the template's); `None` when the frame does not match (it may still be one
    /// [`classify`] accepts).
    #[inline(always)]
    pub fn match4(&self, frame: &[u8]) -> Option<(u32, u16, u8)> {
        match self.shape {
            Shape::V4 => self.m4::<ETH_LEN, { ETH_LEN + V4_REACH }>(frame),
            Shape::V4Tagged => self.m4::<TAGGED, { TAGGED + V4_REACH }>(frame),
            _ => None,
        }
    }

    /// The protocol of the frames the template matches.
    #[inline(always)]
    pub fn proto(&self) -> u8 {
        self.proto
    }

    /// [`Template::match4`] for IPv6.
    #[inline(always)]
    pub fn match6(&self, frame: &[u8]) -> Option<(u128, u16, u8)> {
        match self.shape {
            Shape::V6 => self.m6::<ETH_LEN, { ETH_LEN + V6_REACH }>(frame),
            Shape::V6Tagged => self.m6::<TAGGED, { TAGGED + V6_REACH }>(frame),
            _ => None,
        }
    }

    #[inline(always)]
    fn m4<const L3: usize, const N: usize>(&self, frame: &[u8]) -> Option<(u32, u16, u8)> {
        let h = frame.first_chunk::<N>()?;
        let v = &self.vals;
        if le64(h, 0) & M_ETH != v[0] || le64(h, 12) & m1_v4(L3) != v[1] || le64(h, L3 + 6) & M2_V4 != v[2] || le64(h, L3 + 16) & M3_V4 != v[3] {
            return None;
        }
        // what varies per packet, as `v4` and `l4_flags` check it
        let total = usize::from(u16::from_be_bytes([h[L3 + 2], h[L3 + 3]]));
        if h[L3 + ipv4::field::TTL] == 0 || total < ipv4::IPV4_MIN_LEN || total > frame.len() - L3 {
            return None;
        }
        let payload = total - ipv4::IPV4_MIN_LEN;
        let flags = l4_fixed::<N>(h, L3 + ipv4::IPV4_MIN_LEN, self.proto, payload)?;
        let src = u32::from_be_bytes([h[L3 + 12], h[L3 + 13], h[L3 + 14], h[L3 + 15]]);
        Some((src, u16::from_be_bytes([h[L3 + 20], h[L3 + 21]]), flags))
    }

    #[inline(always)]
    fn m6<const L3: usize, const N: usize>(&self, frame: &[u8]) -> Option<(u128, u16, u8)> {
        let h = frame.first_chunk::<N>()?;
        let v = &self.vals;
        if le64(h, 0) & M_ETH != v[0]
            || le64(h, 12) & m1_v6(L3) != v[1]
            || le64(h, L3 + 4) & M2_V6 != v[2]
            || le64(h, L3 + 24) != v[3]
            || le64(h, L3 + 32) != v[4]
            || le64(h, L3 + 40) & M5_V6 != v[5]
        {
            return None;
        }
        let payload = usize::from(u16::from_be_bytes([h[L3 + 4], h[L3 + 5]]));
        if h[L3 + ipv6::field::HOP_LIMIT] == 0 || ipv6::IPV6_LEN + payload > frame.len() - L3 {
            return None;
        }
        let flags = l4_fixed::<N>(h, L3 + ipv6::IPV6_LEN, self.proto, payload)?;
        let mut src = [0u8; 16];
        src.copy_from_slice(&h[L3 + 8..L3 + 24]);
        Some((u128::from_be_bytes(src), u16::from_be_bytes([h[L3 + 40], h[L3 + 41]]), flags))
    }
}

/// How far past the L3 offset a template reads: the IPv4 header and a TCP header's 20
/// octets (a UDP datagram's 8 and 12 more: shorter frames take [`classify`]).
const V4_REACH: usize = ipv4::IPV4_MIN_LEN + l4::TCP_MIN_LEN;
/// [`V4_REACH`] for IPv6.
const V6_REACH: usize = ipv6::IPV6_LEN + l4::TCP_MIN_LEN;
/// The second word's octets (at 12): the EtherType and the version/IHL octet (0x45), or
/// with a tag the tag protocol, the inner EtherType and the version/IHL octet.
const fn m1_v4(l3: usize) -> u64 {
    if l3 == ETH_LEN {
        0x0000_0000_00ff_ffff
    } else {
        0x00ff_ffff_0000_ffff
    }
}
/// [`m1_v4`] for IPv6: the version nibble instead of the version/IHL octet.
const fn m1_v6(l3: usize) -> u64 {
    if l3 == ETH_LEN {
        0x0000_0000_00f0_ffff
    } else {
        0x00f0_ffff_0000_ffff
    }
}
/// The IPv4 word at L3 + 6: the fragment bits (MF and the offset; DF may vary) and the
/// protocol.
const M2_V4: u64 = 0x0000_0000_ff00_ff3f;
/// The IPv4 word at L3 + 16: the destination address and the destination port.
const M3_V4: u64 = 0xffff_0000_ffff_ffff;
/// The IPv6 word at L3 + 4: the next header.
const M2_V6: u64 = 0x0000_0000_00ff_0000;
/// The IPv6 word at L3 + 40: the destination port.
const M5_V6: u64 = 0x0000_0000_ffff_0000;

/// [`l4_flags`] for a frame of at least `N` octets whose L4 header (at `off`, 20 octets
/// before `N`) is in it.
#[inline(always)]
fn l4_fixed<const N: usize>(h: &[u8; N], off: usize, proto: u8, payload_len: usize) -> Option<u8> {
    if proto == PROTO_TCP {
        let doff = usize::from(h[off + l4::tcp_field::DATA_OFF] >> 4) * 4;
        (doff >= l4::TCP_MIN_LEN && doff <= payload_len).then_some(h[off + l4::tcp_field::FLAGS])
    } else {
        (payload_len >= l4::UDP_LEN).then_some(0)
    }
}

fn learn4<const L3: usize, const N: usize>(frame: &[u8], proto: u8) -> Template {
    let Some(h) = frame.first_chunk::<N>() else { return Template::NONE };
    let vals = [le64(h, 0) & M_ETH, le64(h, 12) & m1_v4(L3), le64(h, L3 + 6) & M2_V4, le64(h, L3 + 16) & M3_V4, 0, 0];
    Template { shape: if L3 == ETH_LEN { Shape::V4 } else { Shape::V4Tagged }, vals, proto }
}

fn learn6<const L3: usize, const N: usize>(frame: &[u8], proto: u8) -> Template {
    let Some(h) = frame.first_chunk::<N>() else { return Template::NONE };
    let vals = [le64(h, 0) & M_ETH, le64(h, 12) & m1_v6(L3), le64(h, L3 + 4) & M2_V6, le64(h, L3 + 24), le64(h, L3 + 32), le64(h, L3 + 40) & M5_V6];
    Template { shape: if L3 == ETH_LEN { Shape::V6 } else { Shape::V6Tagged }, vals, proto }
}

#[cfg(test)]
mod tests;
