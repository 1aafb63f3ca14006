//! The frame template ([`super::Template`]) against [`super::classify`]: a frame the
//! template matches is one `classify` accepts with the same fields (sound), and a frame
//! `classify` accepts with the template's invariant fields is matched (complete), over
//! frames of every shape with random octets of their headers changed.

use super::*;
use etherparse::PacketBuilder;
use proptest::prelude::*;

/// A frame of `shape` (0: IPv4, 1: IPv4 with one tag, 2: IPv6, 3: IPv6 with one tag) and
/// protocol (TCP when `tcp`), from client port `sport` with TCP flags `ack`/`fin`, and
/// `payload` octets of payload.
fn frame(shape: u8, tcp: bool, sport: u16, fin: bool, payload: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 1]);
    let data = vec![0xabu8; payload];
    let mut out = Vec::new();
    macro_rules! l4 {
        ($ip:expr) => {
            if tcp {
                let t = $ip.tcp(sport, 80, 1, 1024).ack(5);
                let t = if fin { t.fin() } else { t };
                t.write(&mut out, &data).unwrap()
            } else {
                $ip.udp(sport, 443).write(&mut out, &data).unwrap()
            }
        };
    }
    let (v4s, v4d) = ([10, 1, 0, 5], [10, 0, 0, 100]);
    let (v6s, v6d) = ([0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5], [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    match shape {
        0 => l4!(b.ipv4(v4s, v4d, 64)),
        1 => l4!(b.single_vlan(7u16.try_into().unwrap()).ipv4(v4s, v4d, 64)),
        2 => l4!(b.ipv6(v6s, v6d, 64)),
        _ => l4!(b.single_vlan(7u16.try_into().unwrap()).ipv6(v6s, v6d, 64)),
    }
    out
}

/// The fields a template stands for: the destination MAC, the octets that name the
/// EtherType (and the tag protocol), the destination, its port and the protocol.
fn invariants(f: &[u8], fast: &Fast) -> Option<(Vec<u8>, u128, u16, u8)> {
    let tagged = f.get(12..14).is_some_and(|t| ethernet::is_vlan_tpid(u16::from_be_bytes([t[0], t[1]])));
    let mut head = f.get(..6)?.to_vec();
    head.extend_from_slice(f.get(12..if tagged { 18 } else { 14 })?);
    let ethertype_only: Vec<u8> = if tagged { [&head[..8], &head[10..]].concat() } else { head };
    match fast {
        Fast::V4(t) => Some((ethertype_only, u128::from(t.dst), t.dport, t.proto)),
        Fast::V6(t) => Some((ethertype_only, t.dst, t.dport, t.proto)),
        Fast::General => None,
    }
}

/// `(source, source port, flags)` of a classified frame.
fn varying(fast: &Fast) -> Option<(u128, u16, u8)> {
    match fast {
        Fast::V4(t) => Some((u128::from(t.src), t.sport, t.flags)),
        Fast::V6(t) => Some((t.src, t.sport, t.flags)),
        Fast::General => None,
    }
}

/// The template's answer for `f`, either family.
fn matched(t: &Template, f: &[u8]) -> Option<(u128, u16, u8)> {
    t.match4(f).map(|(s, p, fl)| (u128::from(s), p, fl)).or_else(|| t.match6(f))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32768, ..ProptestConfig::default() })]

    #[test]
    fn a_template_matches_exactly_what_classify_accepts_with_its_invariants(
        shape in 0u8..4,
        tcp in any::<bool>(),
        fin in any::<bool>(),
        payload in 0usize..40,
        sport in any::<u16>(),
        learn_sport in any::<u16>(),
        edits in proptest::collection::vec((0usize..80, any::<u8>(), 0u8..4), 0..4),
        cut in 0usize..16,
        pad in 0usize..8,
    ) {
        let learned = frame(shape, tcp, learn_sport, false, payload);
        let fast = classify(&learned);
        prop_assert!(fast != Fast::General, "the base frame is one classify accepts");
        let t = Template::learn(&learned, &fast);
        let mut f = frame(shape, tcp, sport, fin, payload);
        // header octets changed: one bit flipped, cleared, set, or any value
        for (at, v, how) in edits {
            if let Some(b) = f.get_mut(at) {
                *b = match how {
                    0 => *b ^ (1 << (v % 8)),
                    1 => 0,
                    2 => 0xff,
                    _ => v,
                };
            }
        }
        // a frame cut short, or padded past its IP length (Ethernet padding)
        f.truncate(f.len().saturating_sub(cut));
        f.extend(std::iter::repeat_n(0u8, pad));
        let c = classify(&f);
        match matched(&t, &f) {
            // sound: what the template says is what classify says, with the invariants
            Some(v) => {
                prop_assert_eq!(Some(v), varying(&c), "the template matched a frame classify reads otherwise: {:02x?}", f);
                prop_assert_eq!(invariants(&f, &c), invariants(&learned, &fast));
            }
            // complete: once learned (from a frame long enough for the template's reach), a
            // frame classify accepts with the template's invariants, long enough too, matches
            None => {
                let reach = ETH_LEN + if shape % 2 == 1 { 4 } else { 0 } + if shape < 2 { V4_REACH } else { V6_REACH };
                let same = c != Fast::General && invariants(&f, &c) == invariants(&learned, &fast) && f.get(6).is_some_and(|b| b & 1 == 0);
                prop_assert!(!(same && f.len() >= reach && learned.len() >= reach), "classify accepts a frame of the template's shape it did not match: {:02x?}", f);
            }
        }
    }
}

#[test]
fn no_template_matches_nothing() {
    let f = frame(0, true, 1000, false, 0);
    assert_eq!(Template::NONE.match4(&f), None);
    assert_eq!(Template::NONE.match6(&frame(2, true, 1000, false, 0)), None);
    assert!(Template::learn(&f, &Fast::General).match4(&f).is_none());
}
