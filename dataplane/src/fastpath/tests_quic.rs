//! QUIC-LB in the worker, against a reference model: a worker over the same service
//! *without* QUIC-LB is the 5-tuple path. Every packet the model says is routable (short
//! header, known codepoint, known server ID, eligible endpoint) must reach that
//! endpoint and is not shown to the reference (it must not touch the connection table);
//! every other packet must get exactly the reference's decision. So fallbacks are the
//! 5-tuple path, and QUIC-routed packets never evict or rewrite another flow's entry.

use crate::control::{compile, CompileInput, HealthView, SlotMap};
use crate::control::snapshot::Snapshot;
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::port::{MemBuf, PacketBuf};
use crate::fastpath::stats::WorkerStats;
use crate::fastpath::worker::*;
use proptest::prelude::*;
use spillway_shared::config::Config;
use spillway_shared::quic_lb::{QuicLbConfig, ServerId};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const KEY: &str = "8f95f09245765f80256934e50c66207f";
/// Server IDs of the four backends q1..q4 (MAC last byte 1..4); q4 is unhealthy.
const SIDS: [&str; 4] = ["0a01", "0a02", "0a03", "0a04"];

/// The key file of the tests, written once per process (tests run in parallel: a file
/// rewritten while another test's snapshot reads it would leave a configuration out).
fn key_path() -> String {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("spw-tests-quic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("key");
        std::fs::write(&p, KEY).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p.display().to_string()
    })
    .clone()
}

/// The service with QUIC-LB (encrypted at codepoint 1, plaintext at codepoint 2) or the
/// same service without it.
fn config(quic: bool) -> String {
    config_with(quic, SIDS)
}

/// [`config`] with the backends q1..q4 given `sids`.
fn config_with(quic: bool, sids: [&str; 4]) -> String {
    let mut t = String::from("[[services]]\nname = \"q\"\nvip = \"10.0.0.100\"\nport = 443\nprotocol = \"udp\"\n");
    if quic {
        t += &format!("[[services.quic_lb]]\nconfig_rotation = 1\nserver_id_length = 2\nnonce_length = 6\nkey_file = \"{}\"\n", key_path());
        t += "[[services.quic_lb]]\nconfig_rotation = 2\nserver_id_length = 2\nnonce_length = 4\nalgorithm = \"plaintext\"\n";
        // 2 + 14 = 16 octets: AES-128 single pass (cached by the worker as four-pass is)
        t += &format!("[[services.quic_lb]]\nconfig_rotation = 3\nserver_id_length = 2\nnonce_length = 14\nkey_file = \"{}\"\n", key_path());
    }
    for (i, sid) in sids.iter().enumerate() {
        t += &format!("[[services.backends]]\nname = \"q{}\"\naddress = \"10.10.0.{}\"\nmac = \"02:00:00:00:0b:{:02x}\"\n", i + 1, i + 1, i + 1);
        if quic {
            t += &format!("server_id = \"{sid}\"\n");
        }
    }
    t
}

fn snapshot(quic: bool) -> Snapshot {
    snapshot_of(&config(quic))
}

fn snapshot_of(toml: &str) -> Snapshot {
    let cfg = Config::from_toml(toml).unwrap();
    cfg.validate().unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let mut health = HealthView::new();
    health.entry(("q".into(), "q4".into(), "q4".into())).or_default().healthy = false;
    let mut states = std::collections::HashMap::new();
    compile(&cfg, &slots, CompileInput { health: &health, states: &mut states, now_sec: 0.0, generation: 1, port_addrs: vec![0] })
}

fn worker() -> (Worker, Arc<WorkerStats>) {
    let stats = Arc::new(WorkerStats::default());
    (Worker::new(0, 1024, 9, Timeouts::default(), stats.clone(), vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0 }]), stats)
}

/// The worker's live connection-table entries (key, backend, state, last seen), sorted.
fn entries(w: &mut Worker, snap: &Snapshot, now: u32) -> Vec<String> {
    let req = crate::control::FlowRequest { seq: 0, op: spillway_shared::proto::FlowOp::Show { limit: u32::MAX }, slots: None };
    let mut out: Vec<String> = w.control(&req, snap, now).entries.iter().map(|e| format!("{:?}", e.0)).collect();
    out.sort();
    out
}

/// A UDP datagram from 10.1.0.`client`:`sport` to the VIP, port 443, with `payload`.
fn udp(client: u8, sport: u16, payload: &[u8]) -> MemBuf {
    let mut f = vec![0u8; 14 + 28];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]); // the worker's port MAC
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 1, 0, client]);
    f[30..34].copy_from_slice(&[10, 0, 0, 100]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&443u16.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(payload);
    MemBuf::new(&f)
}

/// A UDP datagram from [fd01::`client`]:`sport` to the VIP fd00::100, port 443, with `payload`.
fn udp6(client: u8, sport: u16, payload: &[u8]) -> MemBuf {
    let mut src = [0u8; 16];
    src[0] = 0xfd;
    src[1] = 1;
    src[15] = client;
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x99], [2, 0, 0, 0, 0, 1])
        .ipv6(src, "fd00::100".parse::<std::net::Ipv6Addr>().unwrap().octets(), 64)
        .udp(sport, 443)
        .write(&mut f, payload)
        .unwrap();
    MemBuf::new(&f)
}

fn send(w: &mut Worker, snap: &Snapshot, mut b: MemBuf, now: u32) -> Result<u8, Verdict> {
    match w.process(&mut b, 0, snap, now) {
        Verdict::Forward => Ok(b.data()[5]),
        v => Err(v),
    }
}

/// What a generated packet's first octets are.
#[derive(Clone, Debug)]
enum Kind {
    /// A long header (Initial): 5-tuple path.
    Long,
    /// A short header with a CID of codepoint 1 (four-pass), 2 (plaintext) or 3 (single
    /// pass; its 14-octet nonce is `nonce` repeated) for server
    /// `sid` (0–3 known; 4 unknown), cut to `cut` octets when given.
    Short { codepoint: u8, sid: usize, nonce: [u8; 6], cut: Option<usize> },
    /// A short header with arbitrary bytes.
    Random(Vec<u8>),
}

fn payload(kind: &Kind) -> (Vec<u8>, Option<u8>) {
    match kind {
        Kind::Long => (vec![0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0], None),
        Kind::Short { codepoint, sid, nonce, cut } => {
            let key = (*codepoint != 2).then(|| spillway_shared::config::service::quic_lb::key_from_file_contents(KEY.as_bytes()).unwrap());
            let nonce_len = [0, 6, 4, 14][usize::from(*codepoint)];
            let cfg = QuicLbConfig::new(*codepoint, 2, nonce_len, key).unwrap();
            let id = if *sid < 4 { SIDS[*sid].to_string() } else { "7777".into() };
            let nonce: Vec<u8> = nonce.iter().cycle().take(usize::from(nonce_len)).copied().collect();
            let (cid, len) = cfg.encode(&ServerId::from_hex(&id).unwrap(), &nonce).unwrap();
            let mut p = vec![0x40];
            p.extend_from_slice(&cid[..len]);
            p.extend_from_slice(&[0xee; 20]); // protected packet number and payload
            let whole = cut.is_none_or(|c| c > len); // the first octet + the CID
            if let Some(c) = cut {
                p.truncate(*c);
            }
            // Routable only when whole, known and healthy (q4 is not).
            (p, (whole && *sid < 3).then_some(*sid as u8 + 1))
        }
        Kind::Random(bytes) => {
            let mut p = vec![0x40];
            p.extend_from_slice(bytes);
            (p, None)
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Long),
        // few nonces, so CIDs repeat (the worker's decode cache answers those)
        (1u8..=3, 0usize..5, prop_oneof![any::<[u8; 6]>(), (0u8..3).prop_map(|n| [n; 6])], proptest::option::of(0usize..12))
            .prop_map(|(codepoint, sid, nonce, cut)| Kind::Short { codepoint, sid, nonce, cut }),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Kind::Random),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any sequence of long-header, routable, unroutable and random packets from a few
    /// clients and source ports: routable ones reach their server's endpoint, the others
    /// get the 5-tuple path's decision, and the connection table ends as the 5-tuple
    /// path's alone would leave it.
    #[test]
    fn routable_packets_reach_their_server_and_the_rest_take_the_5_tuple_path(
        packets in proptest::collection::vec((1u8..4, 40000u16..40004, kind()), 1..60),
    ) {
        let (quic, plain) = (snapshot(true), snapshot(false));
        let ((mut w, stats), (mut reference, _)) = (worker(), worker());
        let mut routed = 0;
        for (i, (client, sport, k)) in packets.iter().enumerate() {
            let (p, expect) = payload(k);
            let now = i as u32 * 10;
            let got = send(&mut w, &quic, udp(*client, *sport, &p), now);
            match expect {
                Some(mac) => {
                    prop_assert_eq!(got, Ok(mac), "{:?}", k);
                    routed += 1;
                }
                None => {
                    // A random DCID may decode to a known server ID by chance: only
                    // check those that the table cannot route (the others are routed
                    // unless they name the unhealthy q4).
                    let lookup = quic.services[0].quic_lb.as_ref().unwrap().lookup(p.get(1..).unwrap_or(&[]));
                    if let (Kind::Random(_), Ok((sid, _))) = (k, &lookup) {
                        routed += u64::from(*sid != ServerId::from_hex(SIDS[3]).unwrap());
                        continue;
                    }
                    prop_assert_eq!(got, send(&mut reference, &plain, udp(*client, *sport, &p), now), "{:?}", k);
                }
            }
        }
        prop_assert_eq!(stats.quic.routed.load(Relaxed), routed);
        let now = packets.len() as u32 * 10;
        prop_assert_eq!(entries(&mut w, &quic, now), entries(&mut reference, &plain, now));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The worker's decode cache answers exactly as the table: any sequence of CIDs (few
    /// distinct ones, so they repeat and collide; cut, unknown and random ones among them)
    /// through one cache and two tables built from the same config (a new snapshot).
    #[test]
    fn the_decode_cache_answers_as_the_table(
        cids in proptest::collection::vec((kind(), any::<bool>()), 1..200),
    ) {
        let (a, b) = (snapshot(true), snapshot(true));
        let mut cache = crate::fastpath::worker::quic::CidCache::default();
        for (k, second) in &cids {
            let (p, _) = payload(k);
            let t = if *second { &b } else { &a }.services[0].quic_lb.as_deref().unwrap();
            let dcid = p.get(1..).unwrap_or(&[]);
            prop_assert_eq!(cache.lookup(t, dcid), t.lookup(dcid).map(|r| r.1), "{:?}", k);
        }
    }
}

/// A four-pass CID the worker decoded (and cached) is decoded again under a new snapshot:
/// when a live edit swaps two endpoints' server IDs, the same CID goes to the endpoint
/// that now has its server ID, and back after the edit is undone.
#[test]
fn a_cached_decode_never_answers_for_a_new_snapshot() {
    let swapped = ["0a02", "0a01", "0a03", "0a04"];
    let (mut w, stats) = worker();
    let (short, _) = payload(&Kind::Short { codepoint: 1, sid: 0, nonce: [5; 6], cut: None });
    for (round, (sids, mac)) in [(SIDS, 1), (swapped, 2), (SIDS, 1), (swapped, 2)].into_iter().enumerate() {
        let snap = snapshot_of(&config_with(true, sids));
        for i in 0..3 {
            assert_eq!(send(&mut w, &snap, udp(1, 40000 + i, &short), 0), Ok(mac), "round {round}, packet {i}");
        }
    }
    assert_eq!(stats.quic.routed.load(Relaxed), 12);
}

/// A connection migrates (new source port and address): its short-header packets still
/// reach its server, without a connection-table entry for the new 5-tuple; when its
/// endpoint is unhealthy they fall back (counted `not_eligible`).
#[test]
fn a_migrated_connection_stays_on_its_server_and_falls_back_when_it_dies() {
    let snap = snapshot(true);
    let (mut w, stats) = worker();
    let (initial, _) = payload(&Kind::Long);
    let first = send(&mut w, &snap, udp(1, 40000, &initial), 0).unwrap();
    let sid = usize::from(first) - 1;
    let (short, _) = payload(&Kind::Short { codepoint: 1, sid, nonce: [1; 6], cut: None });
    let before = entries(&mut w, &snap, 10);
    for (client, sport) in [(1, 40000), (1, 50000), (2, 50001), (3, 61000)] {
        let got = send(&mut w, &snap, udp(client, sport, &short), 10);
        if sid == 3 {
            assert_ne!(got, Ok(4), "q4 is unhealthy: never QUIC-routed");
        } else {
            assert_eq!(got, Ok(first), "from {client}:{sport}");
        }
    }
    if sid != 3 {
        assert_eq!(entries(&mut w, &snap, 10), before, "QUIC-routed packets add no entries");
    }
    // To the unhealthy q4: the fallback, counted.
    let (to_q4, _) = payload(&Kind::Short { codepoint: 2, sid: 3, nonce: [2; 6], cut: None });
    let _ = send(&mut w, &snap, udp(3, 40001, &to_q4), 20);
    let fb = stats.quic.read();
    assert!(fb.iter().any(|(n, c)| n == "fallback_not_eligible" && *c >= 1), "{fb:?}");
    assert!(fb.iter().any(|(n, c)| n == "long_header" && *c == 1), "{fb:?}");
}

/// IPv6: a short-header packet from any client address and port reaches the server its
/// DCID names (the same code path as IPv4, through worker/v6.rs).
#[test]
fn ipv6_short_headers_reach_their_server_from_any_address() {
    let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress6 = \"fd00::2\"\n[[services]]\nname = \"q6\"\nvip = \"fd00::100\"\nport = 443\nprotocol = \"udp\"\n");
    t += "[[services.quic_lb]]\nconfig_rotation = 2\nserver_id_length = 2\nnonce_length = 4\nalgorithm = \"plaintext\"\n";
    for (i, sid) in SIDS.iter().enumerate() {
        t += &format!("[[services.backends]]\nname = \"q{}\"\naddress = \"fd00:21::{}\"\nmac = \"02:00:00:00:0b:{:02x}\"\nserver_id = \"{sid}\"\n", i + 1, i + 1, i + 1);
    }
    let cfg = Config::from_toml(&t).unwrap();
    cfg.validate().unwrap();
    let mut slots = SlotMap::default();
    slots.sync(&cfg).unwrap();
    let snap = compile(&cfg, &slots, CompileInput { health: &HealthView::new(), states: &mut Default::default(), now_sec: 0.0, generation: 1, port_addrs: vec![0] });
    let (mut w, stats) = worker();
    for sid in 0..4 {
        let (p, _) = payload(&Kind::Short { codepoint: 2, sid, nonce: [9; 6], cut: None });
        for client in 1..=5u8 {
            assert_eq!(send(&mut w, &snap, udp6(client, 40000 + u16::from(client), &p), 0), Ok(sid as u8 + 1), "server {sid} from client {client}");
        }
    }
    assert_eq!(stats.quic.routed.load(Relaxed), 20);
}

/// More distinct four-pass CIDs than the decode cache holds (4,096), in turn, twice, with
/// repeats in between: every cache answer (hit, miss, eviction of a bucket's oldest
/// entry) is the table's.
#[test]
fn a_full_decode_cache_still_answers_as_the_table() {
    let snap = snapshot(true);
    let t = snap.services[0].quic_lb.as_deref().unwrap();
    let mut cache = crate::fastpath::worker::quic::CidCache::default();
    let cids: Vec<Vec<u8>> = (0..6000u32)
        .map(|n| {
            let b = n.to_le_bytes();
            payload(&Kind::Short { codepoint: 1, sid: n as usize % 5, nonce: [b[0], b[1], 7, 7, 7, 7], cut: None }).0
        })
        .collect();
    for round in 0..2 {
        for (i, p) in cids.iter().enumerate() {
            for q in [p, &cids[i / 2]] {
                let dcid = &q[1..];
                assert_eq!(cache.lookup(t, dcid), t.lookup(dcid).map(|r| r.1), "round {round}, CID {i}");
            }
        }
    }
}

/// IPv6 fallbacks: a short header naming an unknown server ID, one naming the unhealthy
/// endpoint, a cut CID and a long header get the 5-tuple path's decision (a worker over
/// the same IPv6 service without QUIC-LB), are counted by reason, and leave the IPv6
/// connection table as the 5-tuple path leaves it; routable packets from the same
/// clients add nothing to it.
#[test]
fn ipv6_unroutable_packets_take_the_5_tuple_path() {
    let config6 = |quic: bool| {
        let mut t = String::from("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress6 = \"fd00::2\"\n[[services]]\nname = \"q\"\nvip = \"fd00::100\"\nport = 443\nprotocol = \"udp\"\n");
        if quic {
            t += "[[services.quic_lb]]\nconfig_rotation = 2\nserver_id_length = 2\nnonce_length = 4\nalgorithm = \"plaintext\"\n";
        }
        for (i, sid) in SIDS.iter().enumerate() {
            t += &format!("[[services.backends]]\nname = \"q{}\"\naddress = \"fd00:21::{}\"\nmac = \"02:00:00:00:0b:{:02x}\"\n", i + 1, i + 1, i + 1);
            if quic {
                t += &format!("server_id = \"{sid}\"\n");
            }
        }
        snapshot_of(&t)
    };
    let (quic, plain) = (config6(true), config6(false));
    let ((mut w, stats), (mut reference, _)) = (worker(), worker());
    let unroutable = [
        Kind::Short { codepoint: 2, sid: 4, nonce: [1; 6], cut: None },
        Kind::Short { codepoint: 2, sid: 3, nonce: [2; 6], cut: None },
        Kind::Short { codepoint: 2, sid: 0, nonce: [3; 6], cut: Some(4) },
        Kind::Long,
    ];
    for (i, k) in unroutable.iter().enumerate() {
        let (p, expect) = payload(k);
        assert_eq!(expect, None, "{k:?}");
        for client in 1..=3u8 {
            let sport = 40000 + i as u16;
            let got = send(&mut w, &quic, udp6(client, sport, &p), 10);
            assert!(got.is_ok(), "{k:?} from {client}: {got:?}");
            assert_eq!(got, send(&mut reference, &plain, udp6(client, sport, &p), 10), "{k:?} from {client}");
        }
    }
    let (routable, mac) = payload(&Kind::Short { codepoint: 2, sid: 1, nonce: [4; 6], cut: None });
    for client in 1..=3u8 {
        assert_eq!(send(&mut w, &quic, udp6(client, 41000, &routable), 10), Ok(mac.unwrap()));
    }
    let c: std::collections::HashMap<String, u64> = stats.quic.read().into_iter().collect();
    assert_eq!((c["routed"], c["long_header"]), (3, 3), "{c:?}");
    assert_eq!((c["fallback_unknown_server_id"], c["fallback_not_eligible"], c["fallback_too_short"]), (3, 3, 3), "{c:?}");
    let entries6 = |w: &mut Worker, snap: &Snapshot| {
        let req = crate::control::FlowRequest { seq: 0, op: spillway_shared::proto::FlowOp::Show { limit: u32::MAX }, slots: None };
        let mut out: Vec<String> = w.control(&req, snap, 10).entries6.iter().map(|e| format!("{:?}", e.0)).collect();
        out.sort();
        out
    };
    let got = entries6(&mut w, &quic);
    assert_eq!(got, entries6(&mut reference, &plain));
    assert_eq!(got.len(), 12, "one IPv6 entry per unroutable flow, none for the routed ones: {got:?}");
}
