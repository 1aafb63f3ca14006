//! QUIC-LB decode of a short-header DCID (draft-ietf-quic-load-balancers-19), per
//! algorithm, with a fresh nonce per CID: the cost a short-header packet adds instead of a
//! connection-table lookup (compare with `conntrack/hit`). CIDs are pre-built, 1024 of
//! them, cycled.
//!
//! `quic_process`: the whole per-packet `Worker::process` of 64-byte UDP datagrams from
//! 1 K flows picked at random: `udp_established` to a service without QUIC-LB (every
//! packet a connection-table hit), the others QUIC short-header packets to a QUIC-LB
//! service (four endpoints), one CID per flow, under a plaintext (server ID 2 + nonce 6),
//! single-pass (2 + 14) and four-pass (2 + 6) configuration. The four-pass run goes
//! through the worker's decode cache; `four_pass_uncached` gives every packet a CID
//! never seen (one decode per packet: the cost on a cache miss).
//!
//! Run: `cargo bench -p spillway-benches --bench quic_lb -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use spillway_benches::{flow_of, snapshot, xorshift};
use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::fastpath::port::{MemBuf, PacketBuf};
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PortInfo, Verdict, Worker};
use spillway_shared::config::Config;
use spillway_shared::quic_lb::{QuicLbConfig, ServerId};
use std::sync::Arc;

const KEY: [u8; 16] = [0x8f; 16];
/// (name, codepoint, nonce length, key): the configurations of the bench service.
const CONFIGS: [(&str, u8, u8, bool); 3] = [("plaintext", 0, 6, false), ("single_pass", 1, 14, true), ("four_pass", 2, 6, true)];

/// UDP services on 10.0.0.100: port 80 without QUIC-LB, port 443 with the [`CONFIGS`].
fn config() -> Config {
    use std::os::unix::fs::PermissionsExt;
    let key = std::env::temp_dir().join(format!("spw-bench-quic-{}.key", std::process::id()));
    std::fs::write(&key, KEY.iter().map(|b| format!("{b:02x}")).collect::<String>()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut t = String::from("[[ports]]\nname = \"in\"\ndevice = \"net_null0\"\nforward_to = \"out\"\nmac = \"02:00:00:00:00:01\"\n[[ports]]\nname = \"out\"\ndevice = \"net_null1\"\nmac = \"02:00:00:00:00:02\"\n");
    for (name, port, quic) in [("udp", 80, false), ("quic", 443, true)] {
        t += &format!("[[services]]\nname = \"{name}\"\nvip = \"10.0.0.100\"\nport = {port}\nprotocol = \"udp\"\n");
        if quic {
            for (_, cp, nonce, enc) in CONFIGS {
                t += &format!("[[services.quic_lb]]\nconfig_rotation = {cp}\nserver_id_length = 2\nnonce_length = {nonce}\n");
                t += &if enc { format!("key_file = \"{}\"\n", key.display()) } else { "algorithm = \"plaintext\"\n".into() };
            }
        }
        for b in 1..=4 {
            t += &format!("[[services.backends]]\nname = \"{name}{b}\"\naddress = \"10.10.0.{b}\"\nmac = \"02:00:00:00:0b:{b:02x}\"\n");
            if quic {
                t += &format!("server_id = \"{b:04x}\"\n");
            }
        }
    }
    let cfg = Config::from_toml(&t).expect("bench config");
    cfg.validate().expect("valid bench config");
    cfg
}

/// A 64-byte Ethernet + IPv4 + UDP frame of flow `i` to VIP:`port` whose payload starts
/// with `payload` (zero-filled after it).
fn udp_frame(i: u32, port: u16, payload: &[u8]) -> Vec<u8> {
    let (src, sport) = flow_of(i);
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&src.to_be_bytes());
    f[30..34].copy_from_slice(&[10, 0, 0, 100]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f[42..42 + payload.len()].copy_from_slice(payload);
    f
}

/// A short-header payload: first octet 0x40 and the CID of server `sid` with `nonce`.
fn short_header(cp: u8, nonce_len: u8, key: bool, sid: u16, nonce: u64) -> Vec<u8> {
    let cfg = QuicLbConfig::new(cp, 2, nonce_len, key.then_some(KEY)).unwrap();
    let n = nonce.to_le_bytes().repeat(2); // distinct leading octets for distinct nonces
    let (cid, len) = cfg.encode(&ServerId::new(&sid.to_be_bytes()).unwrap(), &n[..usize::from(nonce_len)]).unwrap();
    let mut p = vec![0x40];
    p.extend_from_slice(&cid[..len]);
    p
}

fn worker() -> Worker {
    let ports = vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 1, addr: 0 }, PortInfo { mac: [2, 0, 0, 0, 0, 2], forward_to: 1, addr: 0 }];
    Worker::new(0, 1 << 12, 0xabcdef, Timeouts::default(), Arc::new(WorkerStats::default()), ports)
}

fn process(c: &mut Criterion) {
    const N: u32 = 1 << 10;
    let snap = snapshot(&config());
    let mut g = c.benchmark_group("quic_process");
    g.throughput(Throughput::Elements(1));
    let mut runs: Vec<(String, Vec<MemBuf>)> = vec![("udp_established".into(), (0..N).map(|i| MemBuf::new(&udp_frame(i, 80, &[0x40; 9]))).collect())];
    for (name, cp, nonce, key) in CONFIGS {
        runs.push((name.into(), (0..N).map(|i| MemBuf::new(&udp_frame(i, 443, &short_header(cp, nonce, key, (i % 4 + 1) as u16, u64::from(i) + 1)))).collect()));
    }
    for (name, mut bufs) in runs {
        let mut w = worker();
        for b in bufs.iter_mut() {
            assert_eq!(w.process(b, 0, &snap, 0), Verdict::Forward, "{name}");
        }
        let mut s = 0x77u64;
        g.bench_function(BenchmarkId::new(name.as_str(), "1k"), |b| {
            b.iter(|| {
                let m = &mut bufs[(xorshift(&mut s) as u32 & (N - 1)) as usize];
                spillway_benches::readdress(m.data_mut());
                w.process(black_box(m), 0, &snap, 1)
            })
        });
        eprintln!("{name}: quic_lb {:?}, table hits {}", w.stats.quic.read().into_iter().filter(|e| e.1 > 0).collect::<Vec<_>>(), w.ct.counters.hits);
    }
    // 64 K distinct CIDs in turn, 16 x the cache's entries: every packet a cache miss
    // (one decode each; the copy of the CID into the frame is part of the figure)
    let (_, cp, nonce_len, key) = CONFIGS[2];
    let cids: Vec<Vec<u8>> = (0..1u64 << 16).map(|n| short_header(cp, nonce_len, key, (n % 4 + 1) as u16, n + 1)).collect();
    let mut w = worker();
    let mut buf = MemBuf::new(&udp_frame(0, 443, &cids[0]));
    let mut k = 0usize;
    g.bench_function(BenchmarkId::new("four_pass_uncached", "64k"), |b| {
        b.iter(|| {
            k = (k + 1) & 0xffff;
            buf.data_mut()[42..42 + cids[k].len()].copy_from_slice(&cids[k]);
            spillway_benches::readdress(buf.data_mut());
            w.process(black_box(&mut buf), 0, &snap, 1)
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let key = Some([0x8f; 16]);
    let mut g = c.benchmark_group("quic_lb");
    g.throughput(Throughput::Elements(1));
    for (name, sid_len, nonce_len, key) in [("plaintext_2_6", 2, 6, None), ("four_pass_2_6", 2, 6, key), ("four_pass_10_5", 10, 5, key), ("single_pass_8_8", 8, 8, key)] {
        let cfg = QuicLbConfig::new(0, sid_len, nonce_len, key).unwrap();
        let mut s = 0x1234_5678u64;
        let cids: Vec<([u8; 20], usize)> = (0..1024)
            .map(|_| {
                let sid = ServerId::new(&xorshift(&mut s).to_be_bytes().repeat(2)[..usize::from(sid_len)]).unwrap();
                let nonce = xorshift(&mut s).to_be_bytes().repeat(3);
                cfg.encode(&sid, &nonce[..usize::from(nonce_len)]).unwrap()
            })
            .collect();
        let mut i = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) & 1023;
                let (cid, len) = &cids[i];
                cfg.decode(black_box(&cid[..*len]))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench, process);
criterion_main!(benches);
