//! The worker's use of the wire rewrites, through
//! `Worker::process` on in-memory buffers:
//! - TTL 0 is dropped as `ttl_exceeded`; TTL 1 is forwarded unchanged in every mode
//!   (docs/semantics.md "TTL");
//! - GUE's outer UDP source port comes from the flow hash, so two flows of one client get
//!   different ports; the outer IPv4 header has DF set, ID 0, TTL 64 and a valid checksum.

use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap};
use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::fastpath::port::{MemBuf, PacketBuf};
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PortInfo, Verdict, Worker};
use spillway_dataplane::wire::{self, DropReason, Ipv4Packet, UdpPacket, ETH_LEN, GUE_PORT};
use spillway_shared::config::Config;
use std::sync::Arc;

const PORT_ADDR: u32 = 0x0a00_0002;

fn snapshot(mode: &str) -> spillway_dataplane::control::snapshot::Snapshot {
    let t = format!(
        "[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nprotocol = \"tcp\"\nforwarding_mode = \"{mode}\"\n[[services.backends]]\nname = \"b1\"\naddress = \"10.10.0.1\"\nmac = \"02:00:00:00:00:0a\"\nzone = \"z1\"\n"
    );
    let cfg = Config::from_toml(&t).unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let mut states = std::collections::HashMap::new();
    compile(&cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut states, now_sec: 0.0, generation: 1, port_addrs: vec![0] })
}

fn worker() -> Worker {
    let ports = vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: PORT_ADDR }];
    Worker::new(0, 1024, 1, Timeouts::default(), Arc::new(WorkerStats::default()), ports)
}

/// A TCP SYN 10.1.0.5:`sport` → 10.0.0.100:80 with `ttl`, DF clear, valid IPv4 checksum.
fn syn(sport: u16, ttl: u8) -> MemBuf {
    let mut f = vec![0u8; 54];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&40u16.to_be_bytes());
    f[22] = ttl;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 1, 0, 5]);
    f[30..34].copy_from_slice(&[10, 0, 0, 100]);
    let c = wire::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    f[46] = 0x50;
    f[47] = wire::tcp_flags::SYN;
    MemBuf::new(&f)
}

#[test]
fn ttl_zero_is_dropped_in_every_mode() {
    for mode in ["L2_DSR", "IPIP", "GUE"] {
        let snap = snapshot(mode);
        let mut w = worker();
        let mut b = syn(40000, 0);
        assert_eq!(w.process(&mut b, 0, &snap, 0), Verdict::Drop(DropReason::TtlExceeded), "{mode}");
    }
}

#[test]
fn ttl_one_is_forwarded_and_not_decremented() {
    for mode in ["L2_DSR", "IPIP", "GUE"] {
        let snap = snapshot(mode);
        let mut w = worker();
        let mut b = syn(40000, 1);
        assert_eq!(w.process(&mut b, 0, &snap, 0), Verdict::Forward, "{mode}");
        let inner_at = match mode {
            "L2_DSR" => ETH_LEN,
            "IPIP" => ETH_LEN + 20,
            _ => ETH_LEN + 28,
        };
        let inner = Ipv4Packet::new_checked(&b.data()[inner_at..]).unwrap();
        assert_eq!(inner.ttl(), 1, "{mode}");
        assert!(inner.verify_checksum(), "{mode}");
        if mode != "L2_DSR" {
            let outer = Ipv4Packet::new_checked(&b.data()[ETH_LEN..]).unwrap();
            assert_eq!(outer.ttl(), 64, "{mode}");
        }
    }
}

/// GUE source port of the flow from client port `sport`, after checking the outer header.
fn gue_port(w: &mut Worker, snap: &spillway_dataplane::control::snapshot::Snapshot, sport: u16) -> u16 {
    let mut b = syn(sport, 64);
    assert_eq!(w.process(&mut b, 0, snap, 0), Verdict::Forward);
    let outer = Ipv4Packet::new_checked(&b.data()[ETH_LEN..]).unwrap();
    assert_eq!(outer.src_addr(), PORT_ADDR);
    assert_eq!(outer.dst_addr(), 0x0a0a_0001);
    // the inner packet had DF clear: the outer one still sets it (atomic, ID 0 allowed)
    assert!(outer.frag().dont_fragment && !outer.frag().is_fragment());
    assert_eq!(outer.ident(), 0);
    assert!(outer.verify_checksum());
    let u = UdpPacket::new_checked(outer.payload()).unwrap();
    assert_eq!(u.dst_port(), GUE_PORT);
    assert!(u.src_port() >= 49152);
    u.src_port()
}

#[test]
fn gue_source_port_follows_the_flow_not_the_client() {
    let snap = snapshot("GUE");
    let mut w = worker();
    let a = gue_port(&mut w, &snap, 40000);
    let b = gue_port(&mut w, &snap, 40001);
    assert_ne!(a, b, "two flows of one client share a GUE source port");
    // a flow keeps its port
    assert_eq!(gue_port(&mut w, &snap, 40000), a);
    let distinct: std::collections::BTreeSet<u16> = (0..64).map(|i| gue_port(&mut w, &snap, 41000 + i)).collect();
    assert!(distinct.len() >= 60, "{} distinct ports of 64 flows", distinct.len());
}

#[test]
fn ipip_outer_header_sets_df() {
    let snap = snapshot("IPIP");
    let mut w = worker();
    let mut b = syn(40000, 64);
    assert_eq!(w.process(&mut b, 0, &snap, 0), Verdict::Forward);
    let outer = Ipv4Packet::new_checked(&b.data()[ETH_LEN..]).unwrap();
    assert_eq!(outer.protocol(), wire::PROTO_IPIP);
    assert!(outer.frag().dont_fragment);
    assert_eq!(outer.ident(), 0);
    assert!(outer.verify_checksum());
}
