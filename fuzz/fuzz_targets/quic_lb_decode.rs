//! Fuzz target: the QUIC-LB connection-ID decoder (`spillway_shared::quic_lb`). The first
//! four bytes pick a configuration (codepoint, lengths, key or none), the rest is a DCID:
//! decoding must never panic, and a decoded server ID re-encoded with the DCID's nonce
//! bytes must decode to the same server ID.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spillway_shared::quic_lb::QuicLbConfig;

fuzz_target!(|data: &[u8]| {
    let [a, b, c, d, dcid @ ..] = data else { return };
    let key = (d & 1 == 1).then_some([*d; 16]);
    let Ok(cfg) = QuicLbConfig::new(a % 7, 1 + b % 15, 4 + c % 15, key) else { return };
    if let Ok(sid) = cfg.decode(dcid) {
        let nonce = &dcid[1 + cfg.server_id_len()..cfg.cid_len()];
        let (cid, len) = cfg.encode(&sid, nonce).expect("lengths match the configuration");
        assert_eq!(cfg.decode(&cid[..len]), Ok(sid), "decode after encode is the identity");
    }
});
