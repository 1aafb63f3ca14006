//! The worker loop over in-memory ports (no EAL): real frames built with etherparse go
//! through `Worker::poll` with snapshots compiled from real configs, and what leaves is
//! parsed back with etherparse.

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap};
use spillway_dataplane::fastpath::port::{MemBuf, MemPort, PacketBuf};
use spillway_dataplane::control::snapshot::Snapshot;
use spillway_dataplane::control::counters::read;
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PollBuffers, PortInfo, Worker};
use spillway_shared::config::Config;
use std::collections::HashMap;
use std::sync::Arc;

const PORT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 5];

fn config(extra_service: &str, backends: &[(&str, &str, &str)]) -> Config {
    let mut t = String::from(
        r#"
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.2"
[[zones]]
zone = "z1"
region = "r1"
[[zones]]
zone = "z2"
region = "r1"
[[client_zones]]
prefix = "10.1.0.0/16"
zone = "z1"
[[client_zones]]
prefix = "10.2.0.0/16"
zone = "z2"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
"#,
    );
    t.push_str(extra_service);
    t.push('\n');
    for (i, (name, zone, extra)) in backends.iter().enumerate() {
        t.push_str(&format!(
            "[[services.backends]]\nname = \"{name}\"\naddress = \"10.0.1.{}\"\nmac = \"02:00:00:00:0b:{:02x}\"\nzone = \"{zone}\"\n{extra}\n",
            i + 1,
            i + 1
        ));
    }
    let c = Config::from_toml(&t).unwrap();
    c.validate().unwrap();
    c
}

fn four() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![("b1", "z1", ""), ("b2", "z1", ""), ("b3", "z2", ""), ("b4", "z2", "")]
}

struct Rig {
    cfg: Config,
    slots: SlotMap,
    health: HealthView,
    states: HashMap<String, spillway_shared::pipeline::ServiceState>,
    gen: u64,
    worker: Worker,
    port: Vec<MemPort>,
    tx: PollBuffers<MemBuf>,
    snap: Snapshot,
}

impl Rig {
    fn new(cfg: Config) -> Rig {
        let mut slots = SlotMap::default();
        slots.sync(&cfg).unwrap();
        let health = HealthView::new();
        let mut states = HashMap::new();
        let snap = compile(&cfg, &slots, CompileInput { health: &health, states: &mut states, now_sec: 0.0, generation: 1, port_addrs: vec![0x0a00_0002] });
        let stats = Arc::new(WorkerStats::default());
        let worker = Worker::new(0, 4096, 42, Timeouts::default(), stats, vec![PortInfo { mac: PORT_MAC, forward_to: 0, addr: 0x0a00_0002 }]);
        Rig { cfg, slots, health, states, gen: 1, worker, port: vec![MemPort::new(PORT_MAC)], tx: PollBuffers::new(1), snap }
    }
    fn set_healthy(&mut self, b: &str, healthy: bool) {
        self.health.entry(("web".into(), b.into(), b.into())).or_default().healthy = healthy;
        self.gen += 1;
        self.snap = compile(&self.cfg, &self.slots, CompileInput { health: &self.health, states: &mut self.states, now_sec: 0.0, generation: self.gen, port_addrs: vec![0x0a00_0002] });
    }
    /// Sends frames, returns what left (in order).
    fn run(&mut self, frames: Vec<Vec<u8>>, now_ms: u32) -> Vec<Vec<u8>> {
        for f in frames {
            self.port[0].rx.push_back(MemBuf::new(&f));
        }
        while !self.port[0].rx.is_empty() {
            self.worker.poll(&mut self.port, &mut self.tx, &self.snap, now_ms);
        }
        self.port[0].tx.drain(..).map(|b| b.data().to_vec()).collect()
    }
    fn backend_of_mac(&self, mac: &[u8]) -> String {
        let i = mac[5] as usize;
        self.cfg.services[0].backends[i - 1].name.clone()
    }
}

fn tcp(src: [u8; 4], sport: u16, syn: bool, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC).ipv4(src, [10, 0, 0, 100], 64);
    let b = if syn { b.tcp(sport, 80, 1, 1024).syn() } else { b.tcp(sport, 80, 2, 1024).ack(1) };
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

fn udp(src: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC).ipv4(src, [10, 0, 0, 100], 64).udp(sport, dport).write(&mut out, b"q").unwrap();
    out
}

fn client(i: u32, zone: u8) -> [u8; 4] {
    [10, zone, (i >> 8) as u8, i as u8]
}

#[test]
fn l2_dsr_rewrites_only_macs_and_keeps_flows_on_one_backend() {
    let mut rig = Rig::new(config("", &four()));
    let mut frames = Vec::new();
    for i in 0..1000u32 {
        frames.push(tcp(client(i, 1 + (i % 2) as u8), 40000 + i as u16, true, &[]));
    }
    for i in 0..1000u32 {
        frames.push(tcp(client(i, 1 + (i % 2) as u8), 40000 + i as u16, false, b"GET / HTTP/1.1\r\n\r\n"));
    }
    let sent = rig.run(frames.clone(), 10);
    assert_eq!(sent.len(), 2000);
    let mut per_flow: HashMap<(Vec<u8>, u16), String> = HashMap::new();
    let mut per_backend: HashMap<String, usize> = HashMap::new();
    for (out, inp) in sent.iter().zip(&frames) {
        assert_eq!(&out[6..12], &PORT_MAC, "source MAC = port MAC");
        assert_eq!(&out[12..], &inp[12..], "everything after the MACs unchanged");
        let p = SlicedPacket::from_ethernet(out).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = p.net else { panic!() };
        let Some(TransportSlice::Tcp(t)) = p.transport else { panic!() };
        let b = rig.backend_of_mac(&out[0..6]);
        let key = (ip.header().source().to_vec(), t.source_port());
        if let Some(prev) = per_flow.insert(key, b.clone()) {
            assert_eq!(prev, b, "a flow changed backend");
        }
        if t.syn() {
            *per_backend.entry(b).or_default() += 1;
        }
    }
    for (b, n) in &per_backend {
        assert!((150..=350).contains(n), "backend {b} got {n} of 1000 new flows");
    }
    let c = read(&rig.worker.stats);
    assert_eq!((c.rx, c.tx, c.forwarded, c.new_connections), (2000, 2000, 2000, 1000));
    assert_eq!(c.dropped(), 0);
}

#[test]
fn arp_for_vip_and_port_address_answered_others_dropped() {
    let mut rig = Rig::new(config("", &four()));
    let arp = |tpa: [u8; 4]| {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&CLIENT_MAC);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&CLIENT_MAC);
        f.extend_from_slice(&[10, 1, 0, 5]);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&tpa);
        f
    };
    let out = rig.run(vec![arp([10, 0, 0, 100]), arp([10, 0, 0, 2]), arp([10, 0, 0, 77])], 1);
    assert_eq!(out.len(), 2);
    for (o, ip) in out.iter().zip([[10, 0, 0, 100], [10, 0, 0, 2]]) {
        assert_eq!(&o[0..6], &CLIENT_MAC);
        assert_eq!(&o[20..22], &[0, 2], "ARP reply");
        assert_eq!(&o[22..28], &PORT_MAC, "sender MAC = port MAC");
        assert_eq!(&o[28..32], &ip);
    }
    let c = read(&rig.worker.stats);
    assert_eq!(c.arp_replies, 2);
    assert_eq!(c.drops.iter().find(|d| d.0 == "arp_ignored").unwrap().1, 1);
}

#[test]
fn drops_are_counted_by_reason() {
    let mut rig = Rig::new(config("", &four()));
    let mut to_other = tcp(client(1, 1), 1000, true, &[]);
    to_other[33] = 7; // destination 10.0.0.7 (checksum irrelevant to the forwarder)
    let mut wrong_port = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, PORT_MAC).ipv4([10, 1, 0, 1], [10, 0, 0, 100], 64).tcp(1, 8080, 1, 1).syn().write(&mut wrong_port, &[]).unwrap();
    let ipv6 = {
        let mut f = tcp(client(1, 1), 1, true, &[]);
        f[12] = 0x86;
        f[13] = 0xdd;
        f
    };
    // an IPv4 packet under the IPv6 EtherType is a malformed IPv6 header; LLDP
    // is an EtherType Spillway does not handle
    let lldp = {
        let mut f = tcp(client(1, 1), 1, true, &[]);
        f[12] = 0x88;
        f[13] = 0xcc;
        f
    };
    let out = rig.run(vec![to_other, wrong_port, ipv6, lldp, vec![1, 2, 3, 4, 5]], 1);
    assert!(out.is_empty());
    let c = read(&rig.worker.stats);
    let d = |n: &str| c.drops.iter().find(|d| d.0 == n).unwrap().1;
    assert_eq!((d("not_for_vip"), d("no_service"), d("unsupported_ethertype"), d("truncated_ethernet"), d("malformed_ipv6")), (1, 1, 1, 1, 1));
}

#[test]
fn unsent_tx_tail_is_freed_and_counted() {
    let mut rig = Rig::new(config("", &four()));
    rig.port[0].tx_limit = Some(10);
    let frames: Vec<_> = (0..32u32).map(|i| tcp(client(i, 1), 1000 + i as u16, true, &[])).collect();
    let out = rig.run(frames, 1);
    assert_eq!(out.len(), 10);
    let c = read(&rig.worker.stats);
    assert_eq!(c.tx, 10);
    assert_eq!(c.drops.iter().find(|d| d.0 == "tx_full").unwrap().1, 22);
}

#[test]
fn tcp_persists_on_unhealthy_backend_and_new_flows_avoid_it() {
    let mut cfg = config("", &four());
    let mut udp_svc = cfg.services[0].clone();
    udp_svc.name = "dns".into();
    udp_svc.port = 53;
    udp_svc.protocol = spillway_shared::config::Protocol::Udp;
    cfg.services.push(udp_svc);
    let mut rig = Rig::new(cfg);
    let tcp_flows: Vec<_> = (0..200u32).map(|i| tcp(client(i, 1), 2000 + i as u16, true, &[])).collect();
    let udp_flows: Vec<_> = (0..200u32).map(|i| udp(client(i, 1), 3000 + i as u16, 53)).collect();
    let before_tcp = rig.run(tcp_flows, 1);
    let before_udp = rig.run(udp_flows, 1);
    let victim = rig.backend_of_mac(&before_tcp[0][0..6]);
    rig.set_healthy(&victim, false);
    // established traffic of the same TCP flows: stays (DEFAULT_FOR_PROTOCOL persists TCP)
    let again: Vec<_> = (0..200u32).map(|i| tcp(client(i, 1), 2000 + i as u16, false, b"x")).collect();
    let after_tcp = rig.run(again, 2);
    for (a, b) in before_tcp.iter().zip(&after_tcp) {
        assert_eq!(&a[0..6], &b[0..6], "TCP connection moved off an unhealthy backend");
    }
    // the UDP service's backends are other slots (same names), all still healthy: no move
    let after_udp = rig.run((0..200u32).map(|i| udp(client(i, 1), 3000 + i as u16, 53)).collect(), 2);
    for (a, b) in before_udp.iter().zip(&after_udp) {
        assert_eq!(&a[0..6], &b[0..6]);
    }
    // new TCP flows avoid the unhealthy backend
    let fresh = rig.run((0..300u32).map(|i| tcp(client(i, 2), 5000 + i as u16, true, &[])).collect(), 3);
    assert!(fresh.iter().all(|f| rig.backend_of_mac(&f[0..6]) != victim));
}

#[test]
fn udp_flows_move_when_their_backend_turns_unhealthy() {
    let mut cfg = config("", &four());
    cfg.services[0].protocol = spillway_shared::config::Protocol::Udp;
    cfg.services[0].port = 53;
    let mut rig = Rig::new(cfg);
    let flows = || (0..200u32).map(|i| udp(client(i, 1), 3000 + i as u16, 53)).collect::<Vec<_>>();
    let before = rig.run(flows(), 1);
    let victim = rig.backend_of_mac(&before[0][0..6]);
    rig.set_healthy(&victim, false);
    let after = rig.run(flows(), 2);
    let mut moved = 0;
    for (a, b) in before.iter().zip(&after) {
        let (ba, bb) = (rig.backend_of_mac(&a[0..6]), rig.backend_of_mac(&b[0..6]));
        if ba == victim {
            assert_ne!(bb, victim);
            moved += 1;
        } else {
            assert_eq!(ba, bb, "a UDP flow on a healthy backend moved");
        }
    }
    assert!(moved > 0);
    assert_eq!(read(&rig.worker.stats).rebalanced, moved);
}

#[test]
fn stay_within_zone_keeps_clients_in_their_zone() {
    let mut rig = Rig::new(config("zonal_affinity = \"ZONAL_AFFINITY_STAY_WITHIN_ZONE\"", &four()));
    let z1 = rig.run((0..300u32).map(|i| tcp(client(i, 1), 100 + i as u16, true, &[])).collect(), 1);
    let z2 = rig.run((0..300u32).map(|i| tcp(client(i, 2), 100 + i as u16, true, &[])).collect(), 1);
    assert!(z1.iter().all(|f| ["b1", "b2"].contains(&rig.backend_of_mac(&f[0..6]).as_str())));
    assert!(z2.iter().all(|f| ["b3", "b4"].contains(&rig.backend_of_mac(&f[0..6]).as_str())));
    // a client outside every prefix is not zonal-compatible: all four
    let other = rig.run((0..400u32).map(|i| tcp([192, 0, 2, i as u8], 100 + i as u16, true, &[])).collect(), 1);
    let used: std::collections::HashSet<String> = other.iter().map(|f| rig.backend_of_mac(&f[0..6])).collect();
    assert_eq!(used.len(), 4);
}

#[test]
fn failover_without_drain_moves_connections_at_once_then_failback() {
    let backends = vec![("p1", "z1", ""), ("p2", "z1", ""), ("f1", "z2", "failover = true")];
    let mut rig = Rig::new(config("failover_ratio = 0.5\ndisable_connection_drain_on_failover = true", &backends));
    let flows = |syn| (0..100u32).map(|i| tcp(client(i, 1), 700 + i as u16, syn, b"")).collect::<Vec<_>>();
    let first = rig.run(flows(true), 1);
    assert!(first.iter().all(|f| rig.backend_of_mac(&f[0..6]).starts_with('p')));
    rig.set_healthy("p1", false);
    rig.set_healthy("p2", false);
    // the daemon marks the inactive pool; emulate its drain bookkeeping here
    for b in rig.snap.backends.iter_mut().filter(|b| b.name.starts_with('p')) {
        b.evict_connections = true;
    }
    let moved = rig.run(flows(false), 2);
    assert!(moved.iter().all(|f| rig.backend_of_mac(&f[0..6]) == "f1"), "connections moved to the failover pool");
}

#[test]
fn draining_backend_keeps_connections_until_the_deadline() {
    let backends = vec![("p1", "z1", ""), ("p2", "z1", ""), ("f1", "z2", "failover = true")];
    let mut rig = Rig::new(config("failover_ratio = 0.5", &backends));
    let flows = |syn| (0..100u32).map(|i| tcp(client(i, 1), 900 + i as u16, syn, b"")).collect::<Vec<_>>();
    let first = rig.run(flows(true), 1_000);
    rig.run(flows(false), 1_100); // handshake completes: established entries
    rig.set_healthy("p1", false);
    rig.set_healthy("p2", false);
    for b in rig.snap.backends.iter_mut().filter(|b| b.name.starts_with('p')) {
        b.draining_until_ms = Some(61_000); // drain for 60 s from t = 1 s
    }
    // before the deadline: TCP connections stay on their (draining) primaries
    let during = rig.run(flows(false), 60_000);
    for (a, b) in first.iter().zip(&during) {
        assert_eq!(&a[0..6], &b[0..6], "connection left a draining backend before the deadline");
    }
    // after it: they move to the active (failover) pool
    let after = rig.run(flows(false), 61_500);
    assert!(after.iter().all(|f| rig.backend_of_mac(&f[0..6]) == "f1"));
    assert_eq!(read(&rig.worker.stats).rebalanced, 100);
}

/// Live edits under traffic: removing a service before `web` shifts `web`'s index, and
/// removing a backend frees its slot. Established flows of unchanged backends stay put (no
/// rebalance), flows of the removed backend move, nothing is dropped, and a re-added backend
/// reusing the slot never inherits old entries (incarnation).
#[test]
fn removing_services_and_backends_under_traffic() {
    let mut cfg = config("", &four());
    let mut first = spillway_shared::config::Service::new("first", "10.0.0.100".parse::<std::net::IpAddr>().unwrap(), 81, spillway_shared::config::Protocol::Tcp);
    let mut fb = spillway_shared::config::Backend::new("f1", "z1");
    fb.mac = Some(spillway_shared::net::MacAddr([2, 0, 0, 0, 0x0f, 1]));
    first.backends.push(fb);
    cfg.services.insert(0, first);
    let mut rig = Rig::new(cfg);
    let syns: Vec<Vec<u8>> = (0..400u32).map(|i| tcp(client(i, 1 + (i % 2) as u8), 30000 + i as u16, true, &[])).collect();
    let acks: Vec<Vec<u8>> = (0..400u32).map(|i| tcp(client(i, 1 + (i % 2) as u8), 30000 + i as u16, false, b"x")).collect();
    let name_of = |out: &[u8]| format!("b{}", out[5]);
    let before: Vec<String> = rig.run(syns, 10).iter().map(|o| name_of(o)).collect();
    let recompile = |rig: &mut Rig| {
        rig.slots.sync(&rig.cfg).unwrap();
        rig.gen += 1;
        rig.snap = compile(&rig.cfg, &rig.slots, CompileInput { health: &rig.health, states: &mut rig.states, now_sec: 0.0, generation: rig.gen, port_addrs: vec![0x0a00_0002] });
    };
    // 1. remove the service in front of web: web moves from index 1 to 0
    rig.cfg.services.remove(0);
    recompile(&mut rig);
    let after: Vec<String> = rig.run(acks.clone(), 20).iter().map(|o| name_of(o)).collect();
    assert_eq!(before, after, "index shift moved no flow");
    assert_eq!(read(&rig.worker.stats).rebalanced, 0);
    // 2. remove b2: its flows move, the others stay
    rig.cfg.services[0].backends.retain(|b| b.name != "b2");
    recompile(&mut rig);
    let moved: Vec<String> = rig.run(acks.clone(), 30).iter().map(|o| name_of(o)).collect();
    let n_b2 = before.iter().filter(|b| *b == "b2").count();
    assert!(n_b2 > 0);
    for (b, a) in before.iter().zip(&moved) {
        if b == "b2" {
            assert_ne!(a, "b2");
        } else {
            assert_eq!(a, b, "flows of unchanged backends stay");
        }
    }
    assert_eq!(read(&rig.worker.stats).rebalanced, n_b2 as u64);
    // 3. a new backend takes b2's slot: the entries now pointing at other backends are kept,
    //    and nothing reaches the newcomer through an old entry
    let mut nb = spillway_shared::config::Backend::new("b9", "z1");
    nb.mac = Some(spillway_shared::net::MacAddr([2, 0, 0, 0, 0x0b, 9]));
    rig.cfg.services[0].backends.push(nb);
    recompile(&mut rig);
    let again: Vec<String> = rig.run(acks, 40).iter().map(|o| name_of(o)).collect();
    assert_eq!(again, moved);
    assert_eq!(read(&rig.worker.stats).dropped(), 0);
}

#[test]
fn service_idle_timeout_applies_to_established_connections() {
    // conntrack default 600 s; this service keeps idle connections 1200 s
    let mut rig = Rig::new(config("idle_timeout_sec = 1200", &four()));
    let flows = |syn| (0..50u32).map(|i| tcp(client(i, 1), 3000 + i as u16, syn, b"")).collect::<Vec<_>>();
    rig.run(flows(true), 1_000);
    rig.run(flows(false), 1_100); // established
    let before = read(&rig.worker.stats).new_connections;
    rig.run(flows(false), 1_100 + 900_000); // 900 s idle: past 600, within 1200
    assert_eq!(read(&rig.worker.stats).new_connections, before, "entries expired at the global timeout");
    rig.run(flows(false), 1_100 + 900_000 + 1_201_000); // 1201 s idle: expired
    assert_eq!(read(&rig.worker.stats).new_connections, before + 50);
}
