//! The worker's IPv6 path, next to the IPv4 one of [`super`]: the address
//! [`Family`] trait that makes selection and tracking generic over `u32`/`u128` addresses,
//! and the IPv6 handlers — service lookup, fragments (32-bit identification), ICMPv6
//! (Neighbor Discovery answers, errors quoting a flow). Same rules as the parent: no locks,
//! allocation, syscalls or panics per packet.

use super::{class_table, selection_hash, tracking_key, Inner, PortInfo, Verdict, Worker};
use spillway_shared::flow::FlowKeyOf;
use crate::control::snapshot::{ServiceSnap, Snapshot};
use crate::fastpath::conntrack::ConnTable;
use crate::fastpath::frag::DatagramId;
use crate::fastpath::port::PacketBuf;
use crate::fastpath::stats::bump;
use crate::wire::{self, DropReason, Ipv6Info};
use spillway_shared::flow::{FlowAddr, FlowKey6};

/// An address family of the packet path: `u32` (IPv4) or `u128` (IPv6) addresses. What
/// differs between the families for selection and tracking: the VIP of a service, the
/// client class lookup, our own addresses and the connection table.
pub trait Family: FlowAddr + spillway_shared::martian::SourceAddr {
    /// The service's VIP in this family (0 for a service of the other family).
    fn vip(svc: &ServiceSnap) -> Self;
    /// Client class of a source address.
    fn class_of(snap: &Snapshot, src: Self) -> u16;
    /// Whether `a` is one of our addresses (a VIP or a port address).
    fn is_ours(snap: &Snapshot, a: Self) -> bool;
    /// The worker's connection table of this family.
    fn ct(w: &mut Worker) -> &mut ConnTable<Self>;
}

impl Family for u32 {
    #[inline]
    fn vip(svc: &ServiceSnap) -> u32 {
        svc.vip
    }
    #[inline]
    fn class_of(snap: &Snapshot, src: u32) -> u16 {
        snap.class_of(src)
    }
    #[inline]
    fn is_ours(snap: &Snapshot, a: u32) -> bool {
        snap.arp_addrs.contains_key(&a)
    }
    #[inline]
    fn ct(w: &mut Worker) -> &mut ConnTable<u32> {
        &mut w.ct
    }
}

impl Family for u128 {
    #[inline]
    fn vip(svc: &ServiceSnap) -> u128 {
        svc.vip6
    }
    #[inline]
    fn class_of(snap: &Snapshot, src: u128) -> u16 {
        snap.class_of6(src)
    }
    #[inline]
    fn is_ours(snap: &Snapshot, a: u128) -> bool {
        snap.nd_addrs.contains_key(&a)
    }
    #[inline]
    fn ct(w: &mut Worker) -> &mut ConnTable<u128> {
        &mut w.ct6
    }
}

impl Worker {
    /// The backend of the flow an ICMP/ICMPv6 error quotes (`key`, as the client sent it):
    /// its connection-table entry while that still names the same backend of `svc` (slot
    /// incarnation and service), else the fresh choice. A peek: an error is not flow
    /// traffic, so the entry's state and age do not change. One rule for both families.
    #[inline]
    pub(super) fn quoted_flow_backend<A: Family>(&mut self, key: &FlowKeyOf<A>, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, now: u32) -> Option<u16> {
        let (ct_key, _) = tracking_key(svc, key);
        match A::ct(self).peek(&ct_key, now) {
            Some(h) if snap.backends.get(usize::from(h.backend)).is_some_and(|b| b.present && b.incarnation == h.incarnation && b.service == svc_idx) => Some(h.backend),
            _ => class_table(snap, svc, key.src).and_then(|t| t.pick(selection_hash(key, svc.affinity, false))),
        }
    }

    /// The IPv6 path, next to the IPv4 one in [`Worker::process`]: ICMPv6 (Neighbor
    /// Discovery, errors quoting a flow), then service lookup, selection (connection table
    /// for TCP/UDP, the 3-tuple for fragments, all fragments of a datagram to one backend
    /// through [`FragTable`] with 32-bit IDs, later fragments held until their first
    /// fragment is seen when the service is ambiguous) and delivery.
    #[inline]
    pub(super) fn process_v6<B: PacketBuf>(&mut self, buf: &mut B, p: &Ipv6Info, port: usize, pinfo: PortInfo, snap: &Snapshot, now: u32) -> Verdict {
        if p.proto == wire::NH_ICMPV6 && !p.fragmented {
            return self.process_icmpv6(buf, p, snap, port, pinfo, now);
        }
        if self.not_sent_to_us(buf.data(), port, &pinfo, || snap.nd_addrs.contains_key(&p.dst)) {
            return Verdict::Drop(DropReason::NotOurMac);
        }
        let fragment = p.is_fragment();
        let svc_idx = if fragment {
            match self.fragment_service6(p, snap, now) {
                Ok(s) => s,
                Err(v) => return v,
            }
        } else if p.has_ports {
            self.service_of6(p.dst, p.dport, p.proto, snap)
        } else {
            snap.by_vip6_proto.get(&(p.dst, p.proto)).map(|v| v.0)
        };
        let Some(svc_idx) = svc_idx else {
            let is_vip = snap.nd_addrs.contains_key(&p.dst);
            return Verdict::Drop(if is_vip { DropReason::NoService } else { DropReason::NotForVip });
        };
        let Some(svc) = snap.services.get(usize::from(svc_idx)) else {
            return Verdict::Drop(DropReason::NoService);
        };
        // Fragments hash on the Fragment header's Next Header (the same in all of them).
        let proto = if fragment { p.frag_next } else { p.proto };
        let key = FlowKey6 { src: p.src, dst: p.dst, sport: p.sport, dport: p.dport, proto };
        if let Some(v) = if fragment { self.redirect_fragment6(p, &key, now) } else { None } {
            return v; // its datagram's flow is another worker's (worker/redirect.rs)
        }
        if svc.encap_overhead != 0 && p.total_len() + usize::from(svc.encap_overhead) > usize::from(svc.encap_mtu) {
            // Too big for the tunnel: answered (or dropped) before it is tracked or counted.
            return self.too_big(buf, Inner::V6(p), svc.encap_mtu.saturating_sub(svc.encap_overhead), pinfo);
        } else if self.unsendable(buf, pinfo) {
            return Verdict::Drop(DropReason::MultiSegment); // neither tracked nor counted
        }
        let backend = if fragment {
            // A first fragment follows its flow's entry, later ones their first (frag_route.rs).
            match self.fragment_backend6(p, &key, svc, svc_idx, snap, now) {
                Some(b) => b,
                None => return Verdict::Drop(DropReason::NoBackend),
            }
        } else if !p.has_ports {
            match class_table(snap, svc, p.src).and_then(|t| t.pick(selection_hash(&key, svc.affinity, true))) {
                Some(b) => b,
                None => return Verdict::Drop(DropReason::NoBackend),
            }
        } else {
            // QUIC-LB first (a short-header DCID's server ID, worker/quic.rs), else the 5-tuple path.
            match self.quic_route(buf.data(), p.l4, p.l3 + p.total_len(), svc, svc_idx, snap, p.src, now).map_or_else(|| self.select(&key, p.tcp_flags, svc, svc_idx, snap, now), Ok) {
                Ok(b) => b,
                Err(r) => return Verdict::Drop(r),
            }
        };
        self.deliver(buf, Inner::V6(p), svc, backend, snap, pinfo, &key)
    }

    /// The service of an IPv6 fragment, as [`Worker::fragment_service`] for IPv4 (32-bit
    /// identification; keyed on the Fragment header's Next Header): the one its first
    /// fragment named; for a later fragment whose first fragment was not seen, the only
    /// service of its (VIP, protocol), else [`Verdict::Hold`] until the first fragment
    /// arrives ([`crate::fastpath::frag`], docs/semantics.md "Fragments").
    #[inline]
    fn fragment_service6(&mut self, p: &Ipv6Info, snap: &Snapshot, now: u32) -> Result<Option<u16>, Verdict> {
        // Keyed on the Fragment header's Next Header, which every fragment carries (the
        // upper protocol only shows in the first when extension headers follow it).
        if p.frag_offset == 0 && p.has_ports {
            self.frags6.learn_upper(p.src, p.dst, p.frag_next, p.ident, p.dport, p.proto, now);
            self.learned_first = true;
            return Ok(snap.by_vip6_port.get(&(p.dst, p.dport, p.proto)).copied());
        }
        if let Some((dport, upper)) = self.frags6.lookup_upper(p.src, p.dst, p.frag_next, p.ident, now) {
            return Ok(snap.by_vip6_port.get(&(p.dst, dport, upper)).copied());
        }
        match snap.by_vip6_proto.get(&(p.dst, p.proto)) {
            // one service: forwarded now, and its first fragment will follow it (frag_route.rs)
            Some(&(only, 1)) => Ok(Some(only)),
            Some(_) => Err(self.hold_datagram(DatagramId::V6 { src: p.src.to_be_bytes(), dst: p.dst.to_be_bytes(), next: p.frag_next, ident: p.ident })),
            // Extension headers after the Fragment header (RFC 8200 §4.5: Destination
            // Options, Routing, AH in the fragmentable part): the upper protocol shows only
            // in the first fragment, so a later one for our VIP waits for it.
            None if crate::wire::ipv6::is_extension_header(p.frag_next) && snap.nd_addrs.contains_key(&p.dst) => {
                Err(self.hold_datagram(DatagramId::V6 { src: p.src.to_be_bytes(), dst: p.dst.to_be_bytes(), next: p.frag_next, ident: p.ident }))
            }
            None => Ok(None),
        }
    }

    /// ICMPv6: a Neighbor Solicitation for one of our addresses (an IPv6 VIP or port
    /// address) is answered in place with a Neighbor Advertisement (RFC 4861 §7.2.4); one
    /// for any other address is counted (`nd_not_ours`) and dropped as `nd_ignored`. A
    /// Neighbor Advertisement to a port's own address goes to next-hop resolution
    /// ([`Worker::hand_over_na`]); invalid solicitations and advertisements (§7.1) are
    /// dropped as `nd_invalid`, other Neighbor Discovery as `nd_ignored`. Errors quoting
    /// one of our flows go to that flow's backend (as [`Worker::process_icmp`]); anything
    /// else is dropped and counted.
    fn process_icmpv6<B: PacketBuf>(&mut self, buf: &mut B, p: &Ipv6Info, snap: &Snapshot, port: usize, pinfo: PortInfo, now: u32) -> Verdict {
        match wire::icmpv6::ns_target(buf.data(), p) {
            Ok(Some(target)) => {
                if !snap.nd_addrs.contains_key(&target) {
                    bump(&self.stats.nd_not_ours, 1);
                    return Verdict::Drop(DropReason::NdIgnored);
                }
                let need = p.l3 + wire::ipv6::IPV6_LEN + wire::icmpv6::NA_LEN;
                let have = buf.data().len();
                if have < need && !buf.append(need - have) {
                    return Verdict::Drop(DropReason::NoHeadroom);
                }
                match wire::icmpv6::na_reply_in_place(buf.data_mut(), p, target, pinfo.mac) {
                    Ok(n) => buf.truncate(n),
                    Err(r) => return Verdict::Drop(r),
                }
                bump(&self.stats.nd_advertisements, 1);
                return Verdict::Reply;
            }
            Ok(None) => {}
            Err(r) => return Verdict::Drop(r),
        }
        match wire::icmpv6::na_info(buf.data(), p) {
            Ok(Some(na)) => return self.hand_over_na(p, &na, snap, port, now),
            Ok(None) => {}
            Err(r) => return Verdict::Drop(r),
        }
        // Router Solicitation/Advertisement, Redirect (RFC 4861 §4): not ours to act on.
        if buf.data().get(p.l4).is_some_and(|t| (133..=137).contains(t)) {
            return Verdict::Drop(DropReason::NdIgnored);
        }
        // an ICMPv6 error for a VIP is forwarded as its flow is: sent to our MAC only
        if self.not_sent_to_us(buf.data(), port, &pinfo, || snap.nd_addrs.contains_key(&p.dst)) {
            return Verdict::Drop(DropReason::NotOurMac);
        }
        if !snap.nd_addrs.contains_key(&p.dst) {
            return Verdict::Drop(DropReason::NotForVip);
        }
        let q = match wire::icmpv6_quote(buf.data(), p) {
            Ok(Some(q)) => q,
            Ok(None) => return Verdict::Drop(DropReason::IcmpIgnored),
            Err(r) => return Verdict::Drop(r),
        };
        // An error from a source that is never unicast (a broadcast, multicast, loopback
        // or unspecified address) can only be spoofed: it must not reach a backend as a
        // PMTU or unreachable update (RFC 1812 §5.3.7; RFC 4291 §2.7).
        if spillway_shared::martian::SourceAddr::never_unicast(p.src) {
            return Verdict::Drop(DropReason::MartianSource);
        }
        let Some(&svc_idx) = snap.by_vip6_port.get(&(q.vip, q.vip_port, q.proto)) else {
            return Verdict::Drop(DropReason::NoService);
        };
        let Some(svc) = snap.services.get(usize::from(svc_idx)) else {
            return Verdict::Drop(DropReason::NoService);
        };
        let key = FlowKey6 { src: q.client, dst: q.vip, sport: q.client_port, dport: q.vip_port, proto: q.proto };
        if let Some(v) = self.redirect_quoted(&key) {
            return v; // the quoted flow is another worker's (worker/redirect.rs)
        }
        let Some(backend) = self.quoted_flow_backend(&key, svc, svc_idx, snap, now) else {
            return Verdict::Drop(DropReason::NoBackend);
        };
        let v = self.deliver(buf, Inner::V6(p), svc, backend, snap, pinfo, &key);
        if v == Verdict::Forward {
            bump(&self.stats.icmp_forwarded, 1);
        }
        v
    }
}
