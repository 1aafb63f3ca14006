use super::*;
use crate::config::sync::SyncConfig;
use std::net::SocketAddr;
use proptest::prelude::*;

fn key() -> SyncKey {
    SyncKey::from_file_contents(b"0123456789abcdef0123456789abcdef\n").unwrap()
}

/// Hosts S (sender id 7), A and B of the review's case, and a bystander that is no peer.
const S: &str = "10.200.0.31:7946";
const A: &str = "10.200.0.32:7946";
const B: &str = "10.200.0.33:7946";
const BYSTANDER: &str = "192.0.2.99:7946";

fn at(a: &str) -> SocketAddr {
    a.parse().unwrap()
}

/// A message of S (sender 7) to B.
fn header(seq: u64) -> Header {
    Header { kind: Kind::Records, sender: 7, seq, sent_ms: 1_000_000, digest: 42, from: at(S), to: at(B), request: 0 }
}

/// Host B (sender id `own`), whose peers are S and A.
fn receiver_b(own: u64, max_age_ms: u64) -> Receiver {
    Receiver::new(own, at(B), &[at(S), at(A)], max_age_ms)
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
    v[4] = 1;
    assert_eq!(verify(&v, &key()), Err(Reject::Version), "a version-1 peer's message");
    assert_eq!(version_of(&v), Some(1));
    assert_eq!(verify(&v[..12], &key()), Err(Reject::Version), "named by its version whatever its length");
    let mut fam = m.clone();
    fam[76] = 5;
    assert_eq!(verify(&fam, &key()), Err(Reject::Malformed), "address family");
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
    let mut r = receiver_b(1, 30_000);
    let now = 1_000_000;
    let s = at(S);
    assert_eq!(r.accept(&header(100), s, now).map(|_| ()), Ok(()));
    assert_eq!(r.accept(&header(100), s, now), Err(Reject::Replayed));
    assert_eq!(r.accept(&header(98), s, now).map(|_| ()), Ok(()), "late but inside the window");
    assert_eq!(r.accept(&header(98), s, now), Err(Reject::Replayed));
    assert_eq!(r.accept(&header(200), s, now).map(|_| ()), Ok(()));
    assert_eq!(r.accept(&header(100), s, now), Err(Reject::Replayed), "below the window");
    assert_eq!(r.accept(&Header { sender: 1, ..header(300) }, s, now), Err(Reject::Own));
    assert_eq!(r.accept(&header(300), s, now + 30_001), Err(Reject::Stale));
    assert_eq!(r.accept(&header(301), s, now - 30_001), Err(Reject::Stale), "from the future");
    let mut fresh = receiver_b(1, 30_000).not_before(now);
    assert_eq!(fresh.accept(&Header { sent_ms: now - 2_000, ..header(400) }, s, now), Err(Reject::Stale), "sent before this receiver started");
    assert_eq!(fresh.accept(&Header { sent_ms: now, ..header(401) }, s, now), Ok(0));
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
    let mut r = receiver_b(0, 30_000);
    let s = at(S);
    assert_eq!(r.accept(&header(10), s, 1_000_000), Ok(0));
    assert_eq!(r.accept(&header(11), s, 1_000_000), Ok(0));
    assert_eq!(r.accept(&header(15), s, 1_000_000), Ok(3));
    assert_eq!(r.accept(&header(13), s, 1_000_000), Ok(0), "late, inside the window");
    assert_eq!(r.accept(&header(u64::MAX), s, 1_000_000), Ok(0), "a huge jump is not counted as losses");
}

#[test]
fn the_sender_table_is_bounded() {
    let mut r = receiver_b(0, 30_000);
    for s in 1..=(MAX_SENDERS as u64 + 10) {
        r.accept(&Header { sender: s, ..header(1) }, at(S), 1_000_000 + s).unwrap();
    }
    assert_eq!(r.senders(), MAX_SENDERS);
}

/// The review's case: S numbers each peer's messages on its own, and its count
/// for A ran ahead (1,000 dump messages to A). A bystander passes the last of them to B from
/// its own address: B refuses it as from no peer, and it moves nothing, so S's next genuine
/// message to B is accepted (before: B's window for S jumped to A's numbers and refused
/// every message of S as `replayed`).
#[test]
fn a_message_relayed_from_a_bystander_silences_no_peer() {
    let (s, a, b) = (at(S), at(A), at(B));
    let sender = Sender::new(7, s, &[a, b], 1_000);
    let out = |kind| Outgoing { kind, request: 0, sent_ms: 1_000_000, digest: 42 };
    let mut host_a = Receiver::new(20, a, &[s, b], 30_000);
    let mut host_b = receiver_b(30, 30_000);
    let first = sender.message(b, out(Kind::Records), &[rec(40000)], &key()).unwrap();
    assert_eq!(host_b.accept(&verify(&first, &key()).unwrap(), s, 1_000_000), Ok(0));
    let mut last = Vec::new();
    for i in 0..1_000u16 {
        last = sender.message(a, out(Kind::Records), &[rec(1 + i)], &key()).unwrap();
        assert!(host_a.accept(&verify(&last, &key()).unwrap(), s, 1_000_000).is_ok(), "dump message {i} to A");
    }
    let relayed = verify(&last, &key()).unwrap();
    assert_eq!(host_b.accept(&relayed, at(BYSTANDER), 1_000_001), Err(Reject::UnknownPeer));
    let next = sender.message(b, out(Kind::Records), &[rec(40001)], &key()).unwrap();
    assert_eq!(host_b.accept(&verify(&next, &key()).unwrap(), s, 1_000_002), Ok(0), "S's next genuine message to B, no gap");
}

/// The same copy re-sent from S's own address (spoofed) or from A's: B refuses it (it names
/// A as its recipient, and S as its sender), installs nothing and keeps taking S's messages;
/// A, its recipient, takes it once.
#[test]
fn a_relayed_copy_from_a_peers_address_is_refused_and_moves_nothing() {
    let (s, a, b) = (at(S), at(A), at(B));
    let sender = Sender::new(7, s, &[a, b], 1_000);
    let out = Outgoing { kind: Kind::Records, request: 0, sent_ms: 1_000_000, digest: 42 };
    let mut host_a = Receiver::new(20, a, &[s, b], 30_000);
    let mut host_b = receiver_b(30, 30_000);
    for _ in 0..100 {
        sender.message(a, out, &[], &key());
    }
    let to_a = verify(&sender.message(a, out, &[rec(40000)], &key()).unwrap(), &key()).unwrap();
    assert_eq!(host_b.accept(&to_a, s, 1_000_000), Err(Reject::WrongRecipient), "spoofed from S");
    assert_eq!(host_b.accept(&to_a, a, 1_000_000), Err(Reject::WrongSource), "from A's address");
    assert_eq!(host_b.senders(), 0, "no replay window moved");
    let to_b = verify(&sender.message(b, out, &[rec(40001)], &key()).unwrap(), &key()).unwrap();
    assert_eq!(host_b.accept(&to_b, s, 1_000_001), Ok(0));
    assert_eq!(host_a.accept(&to_b, s, 1_000_001), Err(Reject::WrongRecipient), "and the other way round");
    assert_eq!(host_a.accept(&to_a, s, 1_000_001), Ok(0));
    assert_eq!(host_a.accept(&to_a, s, 1_000_001), Err(Reject::Replayed), "at most once");
    assert!(sender.message(at(BYSTANDER), out, &[], &key()).is_none(), "no numbering for a non-peer");
}

/// A DumpEnd names the requester it answers: the end of a pass asked for by this host's
/// previous run (another sender id, same address) does not end this run's wait, and
/// changes nothing, so this run's own DumpEnd is taken after it.
#[test]
fn a_dump_end_counts_only_for_its_request() {
    let (s, b) = (at(S), at(B));
    let sender = Sender::new(7, s, &[b], 1_000);
    let end = |request| Outgoing { kind: Kind::DumpEnd, request, sent_ms: 1_000_000, digest: 42 };
    let (old_run, this_run) = (30, 31);
    let mut host_b = receiver_b(this_run, 30_000);
    let stale_end = verify(&sender.message(b, end(old_run), &[], &key()).unwrap(), &key()).unwrap();
    assert_eq!(stale_end.request, old_run);
    assert_eq!(host_b.accept(&stale_end, s, 1_000_000), Err(Reject::OtherRequest));
    let own_end = verify(&sender.message(b, end(this_run), &[], &key()).unwrap(), &key()).unwrap();
    assert_eq!(host_b.accept(&own_end, s, 1_000_000), Ok(0), "no gap: the refused end moved nothing");
    let m = sender.message(b, Outgoing { kind: Kind::Records, ..end(5) }, &[], &key()).unwrap();
    assert_eq!(verify(&m, &key()), Err(Reject::Malformed), "only a DumpEnd names a request");
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
        let h = Header { kind: Kind::Records, sender, seq, sent_ms: 123, digest, from: "[fd00::1]:7946".parse().unwrap(), to: "[fd00::2]:7000".parse().unwrap(), request: 0 };
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
        let mut r = receiver_b(0, 1000);
        let mut accepted = std::collections::HashSet::new();
        for s in seqs {
            if r.accept(&header(s), at(S), 1_000_000).is_ok() {
                prop_assert!(accepted.insert(s), "sequence {} accepted twice", s);
            }
        }
    }
}
