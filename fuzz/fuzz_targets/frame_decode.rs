//! The control server's frame decoding on arbitrary bytes: the length-prefixed frame
//! reader, then the versioned request decoder (what `ctl_server::serve_conn` runs on client
//! input). Neither may panic, allocate past `MAX_MESSAGE`, or accept a wrong version.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spillway_shared::proto::{decode_request, read_frame, FrameError, PROTOCOL_VERSION};

fuzz_target!(|data: &[u8]| {
    let _ = decode_request(data);
    let mut r = data;
    while let Ok(Some(body)) = read_frame(&mut r) {
        match decode_request(&body) {
            Ok(_) => {
                let v = postcard::take_from_bytes::<u16>(&body).map(|x| x.0).ok();
                assert_eq!(v, Some(PROTOCOL_VERSION));
            }
            Err(FrameError::Version { peer }) => assert_ne!(peer, PROTOCOL_VERSION),
            Err(_) => {}
        }
    }
});
