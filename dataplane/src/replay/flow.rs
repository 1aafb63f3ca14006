//! The flow a captured frame belongs to, read with etherparse (outside the packet path:
//! the worker parses the frame itself), and the probe frame that asks a worker where a
//! flow's next packet would go.
//!
//! A flow is the client's 5-tuple towards the VIP. A later IPv4/IPv6 fragment carries no
//! ports: it belongs to the flow its first fragment named (followed by datagram, in a
//! bounded map). An ICMP error about a packet the VIP sent (RFC 792, RFC 4443: the
//! error quotes the start of the VIP → client packet) belongs to the client's flow, the
//! quoted 5-tuple reversed.

use etherparse::{Icmpv4Type, Icmpv6Type, IpNumber, LaxNetSlice, LaxSlicedPacket, TransportSlice};
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;

/// A flow: source (the client), destination (the VIP), IP protocol number and ports (0
/// for a protocol without them, or a fragment whose first fragment was not seen).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    /// Client address.
    pub src: IpAddr,
    /// Client port.
    pub sport: u16,
    /// Destination (VIP) address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// IP protocol number (6 TCP, 17 UDP, 1/58 ICMP).
    pub proto: u8,
}

impl std::fmt::Display for Flow {
    /// `10.1.0.5:40000 -> 10.0.0.100:80/tcp`, IPv6 in brackets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = match self.proto {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            1 => "icmp".to_string(),
            58 => "icmpv6".to_string(),
            n => format!("proto{n}"),
        };
        write!(f, "{} -> {}/{p}", std::net::SocketAddr::new(self.src, self.sport), std::net::SocketAddr::new(self.dst, self.dport))
    }
}

impl Serialize for Flow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a frame is, as far as the report cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A TCP or UDP packet with its ports (an unfragmented packet or a first fragment).
    Transport {
        /// TCP FIN or RST: the connection closes.
        closes: bool,
        /// A TCP SYN without ACK: a new connection.
        syn: bool,
    },
    /// A later fragment (attributed to its datagram's flow when the first was seen).
    Fragment,
    /// An ICMP error quoting a packet of the flow.
    IcmpError,
    /// Anything else (ARP, echo requests, other protocols): its own flow, without ports.
    Other,
}

/// A frame's flow and kind; `None` for a frame etherparse cannot read as Ethernet
/// (the worker still gets it, and counts its drop).
pub fn classify(frame: &[u8], frags: &mut FragMap) -> Option<(Flow, Kind)> {
    let p = LaxSlicedPacket::from_ethernet(frame).ok()?;
    let net = p.net.as_ref()?;
    let (src, dst, proto, frag) = match net {
        LaxNetSlice::Ipv4(v4) => {
            let h = v4.header();
            let frag = (h.more_fragments() || h.fragments_offset().value() != 0).then(|| (u32::from(h.identification()), h.fragments_offset().value() == 0));
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), h.protocol(), frag)
        }
        LaxNetSlice::Ipv6(v6) => {
            let h = v6.header();
            let frag = v6.extensions().clone().into_iter().find_map(|e| match e {
                etherparse::Ipv6ExtensionSlice::Fragment(f) => Some((f.identification(), f.fragment_offset().value() == 0)),
                _ => None,
            });
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), v6.payload().ip_number, frag)
        }
    };
    let base = Flow { src, sport: 0, dst, dport: 0, proto: proto.0 };
    if let Some((id, false)) = frag {
        let flow = frags.get(&(src, dst, proto.0, id)).copied().unwrap_or(base);
        return Some((flow, Kind::Fragment));
    }
    let (flow, kind) = match &p.transport {
        Some(TransportSlice::Tcp(t)) => (Flow { sport: t.source_port(), dport: t.destination_port(), ..base }, Kind::Transport { closes: t.fin() || t.rst(), syn: t.syn() && !t.ack() }),
        Some(TransportSlice::Udp(u)) => (Flow { sport: u.source_port(), dport: u.destination_port(), ..base }, Kind::Transport { closes: false, syn: false }),
        Some(TransportSlice::Icmpv4(i)) => match i.icmp_type() {
            Icmpv4Type::DestinationUnreachable(_) | Icmpv4Type::TimeExceeded(_) | Icmpv4Type::ParameterProblem(_) => quoted(i.payload()).map_or((base, Kind::Other), |f| (f, Kind::IcmpError)),
            _ => (base, Kind::Other),
        },
        Some(TransportSlice::Icmpv6(i)) => match i.icmp_type() {
            Icmpv6Type::DestinationUnreachable(_) | Icmpv6Type::PacketTooBig { .. } | Icmpv6Type::TimeExceeded(_) | Icmpv6Type::ParameterProblem(_) => {
                quoted(i.payload()).map_or((base, Kind::Other), |f| (f, Kind::IcmpError))
            }
            _ => (base, Kind::Other),
        },
        // a first fragment: etherparse leaves a fragmented payload unparsed; the ports
        // are its first four octets (TCP and UDP alike)
        None if frag.is_some() && (proto == IpNumber::TCP || proto == IpNumber::UDP) => match net.ip_payload_ref().map(|p| p.payload) {
            Some(l4) if l4.len() >= 4 => (Flow { sport: u16::from_be_bytes([l4[0], l4[1]]), dport: u16::from_be_bytes([l4[2], l4[3]]), ..base }, Kind::Transport { closes: false, syn: false }),
            _ => (base, Kind::Other),
        },
        _ => (base, Kind::Other),
    };
    if let Some((id, true)) = frag {
        frags.insert((src, dst, proto.0, id), flow);
    }
    Some((flow, kind))
}

/// The client's flow of the packet an ICMP error quotes (the quoted packet went from the
/// VIP to the client: reversed), or `None` when the quote is too short to hold ports.
fn quoted(payload: &[u8]) -> Option<Flow> {
    let ip = etherparse::LaxIpSlice::from_slice(payload).ok()?.0;
    let (src, dst) = match &ip {
        etherparse::LaxIpSlice::Ipv4(v) => (IpAddr::V4(v.header().source_addr()), IpAddr::V4(v.header().destination_addr())),
        etherparse::LaxIpSlice::Ipv6(v) => (IpAddr::V6(v.header().source_addr()), IpAddr::V6(v.header().destination_addr())),
    };
    let proto = ip.payload().ip_number;
    let l4 = ip.payload().payload;
    if !(proto == IpNumber::TCP || proto == IpNumber::UDP) || l4.len() < 4 {
        return None;
    }
    let sport = u16::from_be_bytes([l4[0], l4[1]]);
    let dport = u16::from_be_bytes([l4[2], l4[3]]);
    Some(Flow { src: dst, sport: dport, dst: src, dport: sport, proto: proto.0 })
}

/// Datagrams whose first fragment was seen → their flow; bounded ([`FRAG_MAP_MAX`]
/// entries, cleared when full: a later fragment of a forgotten datagram then counts as a
/// flow without ports).
#[derive(Default)]
pub struct FragMap(HashMap<(IpAddr, IpAddr, u8, u32), Flow>);

/// Most datagrams [`FragMap`] follows at once.
pub const FRAG_MAP_MAX: usize = 4096;

impl FragMap {
    fn get(&self, k: &(IpAddr, IpAddr, u8, u32)) -> Option<&Flow> {
        self.0.get(k)
    }
    fn insert(&mut self, k: (IpAddr, IpAddr, u8, u32), f: Flow) {
        if self.0.len() >= FRAG_MAP_MAX {
            self.0.clear();
        }
        self.0.insert(k, f);
    }
}

/// A frame that continues `flow` (a TCP ACK with one byte of data, or a one-byte UDP
/// datagram) from `client_mac` to `port_mac`: what the worker is asked about when the
/// report looks for tracked connections that would move. `None` for a flow without ports
/// or of mixed families.
pub fn probe(flow: &Flow, client_mac: [u8; 6], port_mac: [u8; 6]) -> Option<Vec<u8>> {
    let eth = etherparse::PacketBuilder::ethernet2(client_mac, port_mac);
    let ip = match (flow.src, flow.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
        _ => return None,
    };
    let mut out = Vec::new();
    match flow.proto {
        6 => ip.tcp(flow.sport, flow.dport, 1, 65535).ack(1).write(&mut out, b"x").ok()?,
        17 => ip.udp(flow.sport, flow.dport).write(&mut out, b"x").ok()?,
        _ => return None,
    }
    Some(out)
}
