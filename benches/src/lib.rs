//! Shared fixtures of the criterion benchmarks in `benches/benches/`.

use spillway_dataplane::control::{compile, CompileInput, HealthView, SlotMap};
use spillway_dataplane::control::snapshot::Snapshot;
use spillway_shared::config::Config;
use spillway_shared::flow::FlowKey;

/// VIP of the bench service (10.0.0.100:80/tcp).
pub const VIP: [u8; 4] = [10, 0, 0, 100];

/// A config with one L2 DSR TCP service on 10.0.0.100:80 and `backends` backends in two
/// zones, and a pcap-style port pair (`in` forwards to `out`).
pub fn bench_config(backends: usize) -> Config {
    let mut t = String::from(
        r#"
[[ports]]
name = "in"
device = "net_null0"
forward_to = "out"
mac = "02:00:00:00:00:01"
[[ports]]
name = "out"
device = "net_null1"
mac = "02:00:00:00:00:02"
[[zones]]
zone = "z1"
region = "r1"
[[zones]]
zone = "z2"
region = "r1"
[[client_zones]]
prefix = "10.1.0.0/16"
zone = "z1"
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
protocol = "tcp"
"#,
    );
    for b in 0..backends {
        t.push_str(&format!(
            "[[services.backends]]\nname = \"b{b}\"\naddress = \"10.10.{}.{}\"\nmac = \"02:00:00:01:{:02x}:{:02x}\"\nzone = \"z{}\"\n",
            b / 250,
            b % 250 + 1,
            b / 256,
            b % 256,
            b % 2 + 1
        ));
    }
    Config::from_toml(&t).expect("bench config")
}

/// The snapshot the daemon would publish first for `cfg` (as `daemon::Daemon::new`).
pub fn snapshot(cfg: &Config) -> Snapshot {
    let mut slots = SlotMap::default();
    slots.sync(cfg).expect("slots");
    let health = HealthView::new();
    let mut states = std::collections::HashMap::new();
    compile(cfg, &slots, CompileInput { health: &health, states: &mut states, now_sec: 0.0, generation: 1, port_addrs: vec![0, 0] })
}

/// Offset of the IPv4 header in [`tcp_frame`] frames (one 802.1Q tag).
pub const L3: usize = 18;

/// A 64-byte Ethernet + 802.1Q + IPv4 + TCP frame (client → VIP:80) with `flags`.
/// Checksums are not computed (the worker does not verify them).
pub fn tcp_frame(src: u32, sport: u16, flags: u8) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
    f[14..16].copy_from_slice(&100u16.to_be_bytes());
    f[16..18].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[L3..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&src.to_be_bytes());
    ip[16..20].copy_from_slice(&VIP);
    let tcp = &mut ip[20..];
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = flags;
    f
}

/// The benches' receiving port MAC: [`tcp_frame`]'s destination and the workers'
/// `PortInfo::mac`.
pub const PORT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// Addresses `frame` to the receiving port again ([`PORT_MAC`]): a forwarded frame leaves
/// with the backend's MAC as its destination (L2 DSR), and the worker forwards only frames
/// sent to its port (`not_our_mac`), so a buffer processed again must be readdressed.
#[inline]
pub fn readdress(frame: &mut [u8]) {
    frame[0..6].copy_from_slice(&PORT_MAC);
}

/// Writes flow `i`'s source address and port into a [`tcp_frame`] in place, addressed to
/// the port ([`readdress`]).
#[inline]
pub fn set_flow(frame: &mut [u8], i: u32) {
    readdress(frame);
    let (src, sport) = flow_of(i);
    frame[L3 + 12..L3 + 16].copy_from_slice(&src.to_be_bytes());
    frame[L3 + 20..L3 + 22].copy_from_slice(&sport.to_be_bytes());
}

/// Source address (in 10.1.0.0/16 and above) and port of flow `i` (distinct for all i < 2^32).
#[inline]
pub fn flow_of(i: u32) -> (u32, u16) {
    (0x0a01_0000u32.wrapping_add(i >> 12), 1024 + (i & 0xfff) as u16)
}

/// The 5-tuple key of flow `i`.
#[inline]
pub fn key_of(i: u32) -> FlowKey {
    let (src, sport) = flow_of(i);
    FlowKey { src, dst: u32::from_be_bytes(VIP), sport, dport: 80, proto: 6 }
}

/// xorshift64*: a cheap random index stream for lookups.
#[inline]
pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}
