use super::*;
use crate::config::sync::SyncConfig;
use std::net::SocketAddr;
use proptest::prelude::*;

fn key() -> SyncKey {
    SyncKey::from_file_contents(b"0123456789abcdef0123456789abcdef\n").unwrap()
}

fn header(seq: u64) -> Header {
    Header { kind: Kind::Records, sender: 7, seq, sent_ms: 1_000_000, digest: 42 }
}

fn rec(sport: u16) -> Record {
    Record {
        op: Op::Upsert,
        ipv6: false,
        src: u128::from(u32::from(Ipv4Addr::new(10, 201, 0, 10))),
        dst: u128::from(u32::from(Ipv4Addr::new(10, 200, 0, 100))),
        sport,
        dport: 80,
        proto: 6,
        session: false,
        state: SyncState::Established,
        remaining_ms: 599_000,
        endpoint: IpAddr::V4(Ipv4Addr::new(10, 200, 11, 1)),
        relayed: false,
    }
}

fn arb_record() -> impl Strategy<Value = Record> {
    (any::<bool>(), any::<bool>(), 1u128.., 1u128.., any::<u16>(), 1u16.., prop_oneof![Just(6u8), Just(17u8)], any::<bool>(), any::<bool>(), any::<u32>(), 1u128.., (any::<bool>(), any::<bool>()))
        .prop_map(|(upsert, ipv6, src, dst, sport, dport, proto, session, closing, remaining_ms, ep, (ep_v6, relayed))| {
            let fit = |a: u128, v6: bool| if v6 { a } else { (a % u128::from(u32::MAX)).max(1) };
            let ep = fit(ep, ep_v6);
            Record {
                op: if upsert { Op::Upsert } else { Op::Remove },
                ipv6,
                src: fit(src, ipv6),
                dst: fit(dst, ipv6),
                sport: if session { 0 } else { sport.max(1) },
                dport,
                proto,
                session,
                state: if closing { SyncState::Closing } else { SyncState::Established },
                remaining_ms,
                endpoint: if ep_v6 { IpAddr::V6(Ipv6Addr::from(ep)) } else { IpAddr::V4(Ipv4Addr::from(ep as u32)) },
                relayed,
            }
        })
}

#[test]
fn a_message_round_trips_and_has_the_documented_size() {
    let rs: Vec<Record> = (1..=MAX_RECORDS as u16).map(rec).collect();
    let m = encode(&header(5), &rs, &key());
    assert_eq!(m.len(), MAX_MESSAGE_LEN);
    assert!(m.len() <= 1500 - 40 - 8, "fits an IPv6/UDP datagram on a 1500-byte MTU");
    assert_eq!(verify(&m, &key()), Ok(header(5)));
    assert_eq!(records(&m), (rs, 0));
}

#[test]
fn another_key_or_one_flipped_bit_is_a_bad_tag() {
    let m = encode(&header(1), &[rec(40000)], &key());
    let other = SyncKey::from_file_contents(b"another key of 32 bytes, really!").unwrap();
    assert_eq!(verify(&m, &other), Err(Reject::BadTag));
    for byte in [8, 20, HEADER_LEN + 5, m.len() - 1] {
        let mut f = m.clone();
        f[byte] ^= 0x10;
        assert_eq!(verify(&f, &key()), Err(Reject::BadTag), "byte {byte}");
    }
}

#[test]
fn framing_errors_are_malformed() {
    let m = encode(&header(1), &[rec(40000)], &key());
    assert_eq!(verify(&m[..m.len() - 1], &key()), Err(Reject::Malformed));
    let mut v = m.clone();
    v[4] = 2;
    assert_eq!(verify(&v, &key()), Err(Reject::Malformed), "version");
    let mut c = m.clone();
    c[7] = 2;
    assert_eq!(verify(&c, &key()), Err(Reject::Malformed), "count disagrees with the length");
    let req = encode(&Header { kind: Kind::DumpRequest, ..header(2) }, &[], &key());
    assert_eq!(verify(&req, &key()).map(|h| h.kind), Ok(Kind::DumpRequest));
    assert_eq!(verify(&[0u8; 3], &key()), Err(Reject::Malformed));
}

#[test]
fn a_record_with_bad_fields_is_skipped_and_the_others_taken() {
    // A validly tagged message (a peer of a newer version, or a bug) with a bad record.
    let mut body = encode(&header(1), &[rec(40000), rec(40001)], &key());
    body.truncate(body.len() - TAG_LEN);
    body[HEADER_LEN + 2] = 1; // ICMP is never tracked
    let mut mac = key().mac();
    mac.update(&body);
    body.extend_from_slice(&mac.finalize().into_bytes());
    assert!(verify(&body, &key()).is_ok());
    assert_eq!(records(&body), (vec![rec(40001)], 1));
}

#[test]
fn replay_window_accepts_each_sequence_once() {
    let mut r = Receiver::new(1, 30_000);
    let now = 1_000_000;
    assert_eq!(r.accept(&header(100), now).map(|_| ()), Ok(()));
    assert_eq!(r.accept(&header(100), now), Err(Reject::Replayed));
    assert_eq!(r.accept(&header(98), now).map(|_| ()), Ok(()), "late but inside the window");
    assert_eq!(r.accept(&header(98), now), Err(Reject::Replayed));
    assert_eq!(r.accept(&header(200), now).map(|_| ()), Ok(()));
    assert_eq!(r.accept(&header(100), now), Err(Reject::Replayed), "below the window");
    assert_eq!(r.accept(&Header { sender: 1, ..header(300) }, now), Err(Reject::Own));
    assert_eq!(r.accept(&header(300), now + 30_001), Err(Reject::Stale));
    assert_eq!(r.accept(&header(301), now - 30_001), Err(Reject::Stale), "from the future");
    let mut fresh = Receiver::new(1, 30_000).not_before(now);
    assert_eq!(fresh.accept(&Header { sent_ms: now - 2_000, ..header(400) }, now), Err(Reject::Stale), "sent before this receiver started");
    assert_eq!(fresh.accept(&Header { sent_ms: now, ..header(401) }, now), Ok(0));
}

/// An IPv4 service whose endpoints are IPv6 (IPIP/GUE) sends an IPv6 endpoint address.
#[test]
fn an_endpoint_of_the_other_family_round_trips() {
    let r = Record { endpoint: IpAddr::V6("fd00::11".parse().unwrap()), ..rec(40000) };
    let r6 = Record { ipv6: true, src: 0xfd01 << 112 | 7, dst: 0xfd02 << 112 | 1, endpoint: IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1)), ..rec(40001) };
    let m = encode(&header(1), &[r, r6], &key());
    assert_eq!(records(&m), (vec![r, r6], 0));
}

/// Senders number each peer's messages on their own: a gap is a lost message.
#[test]
fn gaps_in_a_senders_numbers_are_reported() {
    let mut r = Receiver::new(0, 30_000);
    assert_eq!(r.accept(&header(10), 1_000_000), Ok(0));
    assert_eq!(r.accept(&header(11), 1_000_000), Ok(0));
    assert_eq!(r.accept(&header(15), 1_000_000), Ok(3));
    assert_eq!(r.accept(&header(13), 1_000_000), Ok(0), "late, inside the window");
    assert_eq!(r.accept(&header(u64::MAX), 1_000_000), Ok(0), "a huge jump is not counted as losses");
}

#[test]
fn the_sender_table_is_bounded() {
    let mut r = Receiver::new(0, 30_000);
    for s in 1..=(MAX_SENDERS as u64 + 10) {
        r.accept(&Header { sender: s, ..header(1) }, 1_000_000 + s).unwrap();
    }
    assert_eq!(r.senders(), MAX_SENDERS);
}

#[test]
fn short_keys_are_refused() {
    assert!(SyncKey::from_file_contents(b"  short  \n").is_err());
    assert!(SyncKey::from_file_contents(&[b'k'; MIN_KEY_LEN]).is_ok());
}

#[test]
fn config_ranges_and_peer_list() {
    let c = SyncConfig {
        listen: "10.0.0.1:7946".into(),
        peers: vec!["10.0.0.1:7946".into(), "10.0.0.2:7946".into(), "10.0.0.2:7946".into()],
        key_file: "/etc/spillway/sync.key".into(),
        refresh_interval_sec: 5,
        startup_sync_timeout_sec: 5,
        max_message_age_sec: 30,
    };
    c.validate().unwrap();
    assert_eq!(c.peer_addrs().unwrap(), vec!["10.0.0.2:7946".parse::<SocketAddr>().unwrap()], "own address and duplicates skipped");
    let bad = SyncConfig { refresh_interval_sec: 0, ..c.clone() };
    assert_eq!(bad.validate().unwrap_err().path, "sync.refresh_interval_sec");
    let bad = SyncConfig { peers: vec!["nope".into()], ..c.clone() };
    assert_eq!(bad.validate().unwrap_err().path, "sync.peers[0]");
    let bad = SyncConfig { listen: "10.0.0.1".into(), ..c.clone() };
    assert_eq!(bad.validate().unwrap_err().path, "sync.listen");
    let bad = SyncConfig { listen: "255.255.255.255:7946".into(), ..c.clone() };
    assert_eq!(bad.validate().unwrap_err().path, "sync.listen");
    let bad = SyncConfig { peers: vec!["[::1]:7946".into()], ..c.clone() };
    assert_eq!(bad.validate().unwrap_err().path, "sync.peers[0]", "families must match");
    let own_plus_64 = SyncConfig { peers: (0..=64).map(|i| format!("10.0.1.{i}:7946")).chain(["10.0.0.1:7946".to_string()]).collect(), ..c.clone() };
    assert!(own_plus_64.validate().is_err(), "65 others");
    let own_plus_63 = SyncConfig { peers: (0..64).map(|i| format!("10.0.1.{i}:7946")).chain(["10.0.0.1:7946".to_string()]).collect(), ..c };
    assert!(own_plus_63.validate().is_ok(), "64 others plus this host: one list for a 65-host fleet");
}

#[test]
fn equal_configs_written_two_ways_have_one_digest() {
    let single = crate::config::Config::from_toml(
        "[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.2\"\n",
    )
    .unwrap();
    let group = crate::config::Config::from_toml(
        "[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.2\"\n[[services.backends]]\nname = \"b1\"\n[[services.backends.endpoints]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\n",
    )
    .unwrap();
    assert_eq!(routing_digest(&single), routing_digest(&group));
    let mut heavier = single.clone();
    heavier.services[0].backends[0].weight = 100;
    assert_ne!(routing_digest(&single), routing_digest(&heavier));
}

proptest! {
    /// Decode after encode is the identity, for any records and header.
    #[test]
    fn decode_after_encode_is_the_identity(rs in proptest::collection::vec(arb_record(), 0..=MAX_RECORDS), seq in any::<u64>(), sender in any::<u64>(), digest in any::<u64>()) {
        let h = Header { kind: Kind::Records, sender, seq, sent_ms: 123, digest };
        let m = encode(&h, &rs, &key());
        prop_assert_eq!(verify(&m, &key()), Ok(h));
        prop_assert_eq!(records(&m), (rs, 0));
    }

    /// Random bytes never panic and never verify.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
        prop_assert!(verify(&bytes, &key()).is_err());
        let _ = records(&bytes);
    }

    /// Any single-byte change of a valid message is refused.
    #[test]
    fn any_change_is_refused(rs in proptest::collection::vec(arb_record(), 1..4), at in any::<prop::sample::Index>(), x in 1u8..) {
        let m = encode(&header(9), &rs, &key());
        let mut f = m.clone();
        let i = at.index(f.len());
        f[i] ^= x;
        prop_assert!(verify(&f, &key()).is_err());
    }

    /// The window accepts every sequence number at most once, whatever the arrival order.
    #[test]
    fn each_sequence_accepted_at_most_once(seqs in proptest::collection::vec(0u64..200, 1..300)) {
        let mut r = Receiver::new(0, 1000);
        let mut accepted = std::collections::HashSet::new();
        for s in seqs {
            if r.accept(&header(s), 1_000_000).is_ok() {
                prop_assert!(accepted.insert(s), "sequence {} accepted twice", s);
            }
        }
    }
}
