//! QUIC-LB: the draft's test vectors (Appendix "Load Balancer Test Vectors" and the
//! §5.4.2 encryption example), and properties over random configurations and CIDs.
use super::*;
use proptest::prelude::*;

fn hex(text: &str) -> Vec<u8> {
    parse_hex(text).unwrap()
}

fn key(text: &str) -> Option<[u8; KEY_LEN]> {
    Some(hex(text).try_into().unwrap())
}

const VECTOR_KEY: &str = "8f95f09245765f80256934e50c66207f";

/// Encodes `sid` and `nonce` and compares with `cid`; decodes `cid` back to `sid`.
fn check(cfg: &QuicLbConfig, sid: &str, nonce: &str, cid: &str) {
    let sid = ServerId::from_hex(sid).unwrap();
    let (out, len) = cfg.encode(&sid, &hex(nonce)).unwrap();
    assert_eq!(&out[..len], &hex(cid)[..], "encode under {cfg:?}");
    assert_eq!(cfg.decode(&hex(cid)), Ok(sid), "decode under {cfg:?}");
    assert_eq!(cfg.decode_key(&hex(cid)), Ok(sid.key()), "decode_key under {cfg:?}");
}

#[test]
fn unencrypted_vector() {
    let cfg = QuicLbConfig::new(0, 3, 4, None).unwrap();
    assert_eq!(cfg.algorithm(), Algorithm::Plaintext);
    check(&cfg, "c4605e", "4504cc4f", "07c4605e4504cc4f");
    // The draft's second unencrypted vector (codepoint 1, server ID 350d28b420) lists a
    // nine-digit nonce and an 11-octet CID whose first octet does not self-describe its
    // length: it is not self-consistent, so it is not used here.
}

#[test]
fn four_pass_vector_odd_length() {
    let cfg = QuicLbConfig::new(0, 3, 4, key(VECTOR_KEY)).unwrap();
    assert_eq!(cfg.algorithm(), Algorithm::FourPass);
    check(&cfg, "ed793a", "ee080dbf", "0720b1d07b359d3c");
}

#[test]
fn four_pass_vector_server_id_longer_than_nonce() {
    // Needs the fourth decryption pass.
    let cfg = QuicLbConfig::new(1, 10, 5, key(VECTOR_KEY)).unwrap();
    check(&cfg, "ed793a51d49b8f5fab65", "ee080dbf48", "2fcc381bc74cb4fbad2823a3d1f8fed2");
}

#[test]
fn single_pass_vector() {
    let cfg = QuicLbConfig::new(2, 8, 8, key(VECTOR_KEY)).unwrap();
    assert_eq!(cfg.algorithm(), Algorithm::SinglePass);
    check(&cfg, "ed793a51d49b8f5f", "ee080dbf48c0d1e5", "504dd2d05a7b0de9b2b9907afb5ecf8cc3");
}

#[test]
fn four_pass_vector_nineteen_octets() {
    // The draft lists this vector under config rotation bits 3, but its first octet 0x12
    // is codepoint 0 with self-described length 18 (the first octet is never encrypted),
    // so it is checked at codepoint 0.
    let cfg = QuicLbConfig::new(0, 9, 9, key(VECTOR_KEY)).unwrap();
    check(&cfg, "ed793a51d49b8f5fab", "ee080dbf48c0d1e55d", "125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc");
}

#[test]
fn encryption_example_of_section_5_4_2() {
    let k = key("fdf726a9893ec05c0632d3956680baf0");
    let aes = Aes128::new(GenericArray::from_slice(&k.unwrap()));
    // Step 3: the first pass's AES output, truncated to half_len = 4.
    let (left, _, hl) = split(&hex("31441a9c69c275"));
    assert_eq!(&left[..4], &hex("31441a90")[..]);
    assert_eq!(&round(&aes, 7, 1, &left, hl)[..4], &hex("a255dd8c")[..]);
    let cfg = QuicLbConfig::new(0, 3, 4, k).unwrap();
    check(&cfg, "31441a", "9c69c275", "0767947d29be054a");
}

#[test]
fn split_and_join_follow_the_drafts_odd_length_example() {
    let (l, r, hl) = split(&hex("7040b81b55ccf3"));
    assert_eq!(hl, 4);
    assert_eq!(&l[..4], &hex("7040b810")[..]);
    assert_eq!(&r[..4], &hex("0b55ccf3")[..]);
    assert_eq!(&join(&l, &r, 7)[..7], &hex("7040b81b55ccf3")[..]);
}

#[test]
fn aes_primitive_matches_fips_197_appendix_c1() {
    // The AES-128 known answer of FIPS 197 Appendix C.1: the round function is AES itself.
    let aes = Aes128::new(GenericArray::from_slice(&hex("000102030405060708090a0b0c0d0e0f")));
    let mut block = GenericArray::clone_from_slice(&hex("00112233445566778899aabbccddeeff"));
    aes.encrypt_block(&mut block);
    assert_eq!(block.as_slice(), &hex("69c4e0d86a7b0430d8cdb78070b4c55a")[..]);
}

#[test]
fn decode_errors() {
    let cfg = QuicLbConfig::new(1, 2, 4, key(VECTOR_KEY)).unwrap();
    assert_eq!(cfg.decode(&[]), Err(DecodeError::TooShort { need: 7, got: 0 }));
    assert_eq!(cfg.decode(&[0x20; 6]), Err(DecodeError::TooShort { need: 7, got: 6 }));
    assert_eq!(cfg.decode(&[0x40; 7]), Err(DecodeError::OtherCodepoint(2)));
    assert!(cfg.decode(&[0x3f; 20]).is_ok(), "extra server octets after the nonce are ignored");
}

#[test]
fn config_ranges_are_refused_with_the_rule() {
    assert!(QuicLbConfig::new(7, 2, 4, None).unwrap_err().contains("0–6"));
    assert!(QuicLbConfig::new(0, 0, 4, None).unwrap_err().contains("1–15"));
    assert!(QuicLbConfig::new(0, 16, 4, None).unwrap_err().contains("1–15"));
    assert!(QuicLbConfig::new(0, 2, 3, None).unwrap_err().contains("4–18"));
    assert!(QuicLbConfig::new(0, 15, 5, None).unwrap_err().contains("at most 19"));
    assert!(QuicLbConfig::new(6, 15, 4, None).is_ok());
}

#[test]
fn server_id_hex() {
    assert_eq!(ServerId::from_hex("0x0A1b").unwrap().as_bytes(), &[0x0a, 0x1b]);
    assert_eq!(ServerId::from_hex("0a1b").unwrap().to_string(), "0a1b");
    assert!(ServerId::from_hex("").unwrap_err().contains("1–15"));
    assert!(ServerId::from_hex("abc").unwrap_err().contains("even"));
    assert!(ServerId::from_hex("zz").unwrap_err().contains("'z'"));
    assert!(ServerId::from_hex(&"00".repeat(16)).is_err());
}

fn any_config() -> impl Strategy<Value = QuicLbConfig> {
    (0..=MAX_CODEPOINT, SERVER_ID_LEN_MIN..=SERVER_ID_LEN_MAX, NONCE_LEN_MIN..=NONCE_LEN_MAX, any::<Option<[u8; 16]>>())
        .prop_filter("sum ≤ 19", |(_, s, n, _)| s + n <= PLAINTEXT_LEN_MAX)
        .prop_map(|(c, s, n, k)| QuicLbConfig::new(c, s, n, k).unwrap())
}

proptest! {
    /// decode(encode(server ID, nonce)) is the server ID, for every algorithm and length.
    #[test]
    fn decode_after_encode_is_the_identity(cfg in any_config(), sid in any::<[u8; 15]>(), nonce in any::<[u8; 18]>()) {
        let sid = ServerId::new(&sid[..cfg.server_id_len()]).unwrap();
        let (cid, len) = cfg.encode(&sid, &nonce[..cfg.nonce_len()]).unwrap();
        prop_assert_eq!(len, cfg.cid_len());
        prop_assert_eq!(codepoint(&cid[..len]), Some(cfg.codepoint()));
        prop_assert_eq!(cfg.decode(&cid[..len]), Ok(sid));
        prop_assert_eq!(cfg.decode_key(&cid[..len]), Ok(sid.key()));
    }

    /// The four-pass network is a permutation: decrypting all four passes gives the
    /// server ID and the nonce back.
    #[test]
    fn four_pass_is_invertible(k in any::<[u8; 16]>(), plain in proptest::collection::vec(any::<u8>(), 5..=19)) {
        prop_assume!(plain.len() != 16);
        let aes = Aes128::new(GenericArray::from_slice(&k));
        let enc = feistel_encrypt(&aes, &plain);
        let dec = feistel_decrypt(&aes, &enc[..plain.len()], usize::MAX);
        prop_assert_eq!(&dec[..plain.len()], &plain[..]);
    }

    /// Random DCIDs of any length (0–20 octets and beyond) never panic; a result is
    /// either a server ID of the configured length or a named error.
    #[test]
    fn random_cids_never_panic(cfg in any_config(), dcid in proptest::collection::vec(any::<u8>(), 0..=24)) {
        match cfg.decode(&dcid) {
            Ok(sid) => {
                prop_assert_eq!(sid.len(), cfg.server_id_len());
                prop_assert!(dcid.len() >= cfg.cid_len());
            }
            Err(DecodeError::TooShort { need, got }) => prop_assert!(got < need),
            Err(DecodeError::OtherCodepoint(c)) => prop_assert_ne!(c, cfg.codepoint()),
        }
    }

    /// `decode_key` is `decode` then `ServerId::key`, for every DCID (short ones, exactly
    /// the CID length, and longer than the 16-octet window), and keys identify server IDs.
    #[test]
    fn decode_key_is_the_key_of_decode(cfg in any_config(), dcid in proptest::collection::vec(any::<u8>(), 0..=24), other in any::<[u8; 15]>()) {
        prop_assert_eq!(cfg.decode_key(&dcid), cfg.decode(&dcid).map(|s| s.key()));
        if let Ok(sid) = cfg.decode(&dcid) {
            let o = ServerId::new(&other[..1 + usize::from(other[0]) % 15]).unwrap();
            prop_assert_eq!(o.key() == sid.key(), o == sid);
            prop_assert_ne!(sid.key(), 0);
        }
    }
}
