//! Fuzz target: the fleet flow-sync decoder (`spillway_shared::sync`). Any datagram, with
//! the fleet key or not, must be refused or decoded without a panic, and whatever verifies
//! must decode to records that encode back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spillway_shared::sync::{encode, records, verify, Receiver, SyncKey};

fuzz_target!(|data: &[u8]| {
    let key = SyncKey::from_file_contents(b"fuzz key of thirty-two bytes....").expect("key");
    // As received from the network: framing, tag, replay and stale checks, records.
    if let Ok(h) = verify(data, &key) {
        let _ = Receiver::new(0, h.to, &[h.from], 30_000).accept(&h, h.from, h.sent_ms);
        if let (rs, 0) = records(data) {
            assert_eq!(encode(&h, &rs, &key), data, "decode then encode is the identity");
        }
    }
    // Record parsing does not depend on the tag: every byte string exercises it.
    let _ = records(data);
});
