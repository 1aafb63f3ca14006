//! IPv4 ICMP to a VIP in the worker: an error quoting one of our flows goes to that
//! flow's backend (as IPv6's in `v6.rs`). A child of [`super`].

use super::{bump, Inner, PortInfo, Verdict, Worker};
use crate::control::snapshot::Snapshot;
use crate::fastpath::port::PacketBuf;
use crate::wire::{self, DropReason, Ipv4Info};
use spillway_shared::flow::FlowKey;

impl Worker {
    /// ICMP to a VIP: errors quoting one of our flows go to that flow's backend; anything
    /// else is dropped and counted.
    pub(super) fn process_icmp<B: PacketBuf>(&mut self, buf: &mut B, p: &Ipv4Info, snap: &Snapshot, pinfo: PortInfo, now: u32) -> Verdict {
        if !snap.arp_addrs.contains_key(&p.dst) {
            return Verdict::Drop(DropReason::NotForVip);
        }
        let q = match wire::icmp_quote(buf.data(), p) {
            Ok(Some(q)) if !spillway_shared::martian::SourceAddr::never_unicast(p.src) => q,
            Ok(Some(_)) => return Verdict::Drop(DropReason::MartianSource), // spoofed source: as in `process_icmpv6`
            Ok(None) => return Verdict::Drop(DropReason::IcmpIgnored),
            Err(r) => return Verdict::Drop(r),
        };
        let Some(&svc_idx) = snap.by_vip_port.get(&(q.vip, q.vip_port, q.proto)) else {
            return Verdict::Drop(DropReason::NoService);
        };
        let Some(svc) = snap.services.get(usize::from(svc_idx)) else {
            return Verdict::Drop(DropReason::NoService);
        };
        let key = FlowKey { src: q.client, dst: q.vip, sport: q.client_port, dport: q.vip_port, proto: q.proto };
        if let Some(v) = self.redirect_quoted(&key) {
            return v; // the quoted flow is another worker's (worker/redirect.rs)
        }
        let Some(backend) = self.quoted_flow_backend(&key, svc, svc_idx, snap, now) else {
            return Verdict::Drop(DropReason::NoBackend);
        };
        let v = self.deliver(buf, Inner::V4(p), svc, backend, snap, pinfo, &key);
        if v == Verdict::Forward {
            bump(&self.stats.icmp_forwarded, 1);
        }
        v
    }
}
