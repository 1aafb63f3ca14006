//! Framing and encoding tests of the control-socket protocol.

use super::frame::MORE_FRAMES;
use super::*;

#[test]
fn roundtrip_through_frames() {
    let mut wire = Vec::new();
    write_frame(&mut wire, &encode_request(&Request::Status)).unwrap();
    let body = read_frame(&mut wire.as_slice()).unwrap().unwrap();
    assert_eq!(decode_request(&body).unwrap(), Request::Status);
    let resp = Response::Status(StatusReport { generation: 7, ..Default::default() });
    assert_eq!(decode_response(&encode_response(&resp)).unwrap(), resp);
}

#[test]
fn version_mismatch_is_named() {
    let body = postcard::to_stdvec(&RequestFrame { version: 99, request: Request::Status }).unwrap();
    let e = decode_request(&body).unwrap_err();
    assert!(matches!(e, FrameError::Version { peer: 99 }));
    assert!(e.to_string().contains("version 99"));
}

#[test]
fn oversized_and_truncated_frames() {
    let wire = ((MAX_FRAME + 1) as u32).to_be_bytes();
    assert!(matches!(read_frame(&mut &wire[..]), Err(FrameError::TooLarge(_))));
    let wire = [0u8, 0, 0, 10, 1, 2];
    assert!(matches!(read_frame(&mut &wire[..]), Err(FrameError::Io(_))));
    assert!(read_frame(&mut &[][..]).unwrap().is_none());
    assert!(matches!(decode_request(&[PROTOCOL_VERSION as u8, 0xff, 0xff]), Err(FrameError::Decode(_))));
    assert!(matches!(decode_request(&[1, 0]), Err(FrameError::Version { peer: 1 })));
}

/// Messages of 0, 1, MAX_FRAME - 1 .. MAX_FRAME + 1 and several frames' bytes: each
/// travels whole, frame boundaries where the rule puts them; two messages back to back
/// stay apart; a stream ending between frames of one message is truncated.
#[test]
fn messages_span_frames() {
    for len in [0, 1, MAX_FRAME - 1, MAX_FRAME, MAX_FRAME + 1, 3 * MAX_FRAME + 17] {
        let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let mut wire = Vec::new();
        write_frame(&mut wire, &body).unwrap();
        write_frame(&mut wire, b"next").unwrap();
        let frames = len.div_ceil(MAX_FRAME).max(1);
        assert_eq!(wire.len(), body.len() + 4 * frames + 8, "len {len}");
        let first = u32::from_be_bytes(wire[..4].try_into().unwrap());
        assert_eq!(first & MORE_FRAMES != 0, frames > 1, "len {len}");
        let mut r = wire.as_slice();
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), body, "len {len}");
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"next");
        assert!(read_frame(&mut r).unwrap().is_none());
        if frames > 1 {
            let cut = &wire[..4 + MAX_FRAME];
            assert!(matches!(read_frame(&mut &cut[..]), Err(FrameError::Io(_))), "len {len}");
        }
    }
    assert!(matches!(write_frame(&mut Vec::new(), &vec![0; MAX_MESSAGE + 1]), Err(FrameError::MessageTooLarge(_))));
}

#[test]
fn every_request_roundtrips() {
    let reqs = vec![
        Request::ConfigShow,
        Request::ConfigApply { toml: "x".into(), if_generation: Some(3) },
        Request::ServiceSet { name: "web".into(), fields: vec![("spillover_ratio".into(), "0.5".into())], if_generation: None },
        Request::BackendRemove { service: "a".into(), name: "b".into(), if_generation: Some(1) },
        Request::Flows { op: FlowOp::Show { limit: 5 }, filter: FlowFilter::Backend("a".into(), "b".into()) },
        Request::Explain { client: std::net::Ipv4Addr::new(1, 2, 3, 4).into(), client_port: 9, vip: None, quic_dcid: Some("07c4605e4504cc4f".into()) },
        Request::SnapshotShow,
        Request::EndpointAdd { service: "a".into(), backend: "g".into(), name: "e3".into(), fields: vec![("address".into(), "10.0.0.3".into())], if_generation: None },
        Request::EndpointRemove { service: "a".into(), backend: "g".into(), name: "e3".into(), if_generation: Some(2) },
        Request::EndpointSet { service: "a".into(), backend: "g".into(), name: "e3".into(), fields: vec![("weight".into(), "80".into())], if_generation: None },
    ];
    for r in reqs {
        assert_eq!(decode_request(&encode_request(&r)).unwrap(), r);
    }
    let resp = Response::Health(vec![HealthRow {
        service: "s".into(), backend: "b".into(), endpoint: "e1".into(), address: "1.2.3.4".into(), healthy: true, checked: false,
        latency_ms: None, load_cps: 1.5, consecutive_successes: 0, consecutive_failures: 2, probes: 3,
        probes_failed: 1, last_error: Some("x".into()), since_change_sec: Some(1.0), probes_skipped: 4,
    }]);
    assert_eq!(decode_response(&encode_response(&resp)).unwrap(), resp);
    let resp = Response::Status(StatusReport {
        backends: vec![BackendStatus {
            service: "s".into(), backend: "g".into(), endpoints: 4, healthy_endpoints: 1, drained: true,
            members: vec![EndpointStatus { name: "e1".into(), address: "10.0.0.1".into(), weight: 50, healthy: true, enabled: true, new_connections: 3, packets: 9, ..Default::default() }],
            ..Default::default()
        }],
        health_checker: HealthCheckerStatus { started: true, dead: Some("panicked: x".into()), targets: 2, probes_skipped: 5, nofile_limit: 1024 },
        ..Default::default()
    });
    assert_eq!(decode_response(&encode_response(&resp)).unwrap(), resp);
}

#[test]
fn health_fields_default_when_absent_from_json() {
    // JSON written before these fields existed (e.g. saved `--json` output) still decodes.
    let mut row = serde_json::to_value(HealthRow {
        service: "s".into(), backend: "b".into(), endpoint: "b".into(), address: "a".into(), healthy: true, checked: true, latency_ms: None,
        load_cps: 0.0, consecutive_successes: 0, consecutive_failures: 0, probes: 1, probes_failed: 0, last_error: None,
        since_change_sec: None, probes_skipped: 9,
    })
    .unwrap();
    assert!(row.as_object_mut().unwrap().remove("probes_skipped").is_some());
    assert_eq!(serde_json::from_value::<HealthRow>(row).unwrap().probes_skipped, 0);
    let mut st = serde_json::to_value(StatusReport {
        health_checker: HealthCheckerStatus { started: true, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    assert!(st.as_object_mut().unwrap().remove("health_checker").is_some());
    assert_eq!(serde_json::from_value::<StatusReport>(st).unwrap().health_checker, HealthCheckerStatus::default());
}

proptest::proptest! {
    #[test]
    fn random_bytes_after_a_valid_version(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let mut body = postcard::to_stdvec(&PROTOCOL_VERSION).unwrap();
        body.extend_from_slice(&bytes);
        let _ = decode_request(&body);
        let _ = decode_response(&body);
    }


    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
        let _ = decode_request(&bytes);
        let _ = decode_response(&bytes);
        let _ = read_frame(&mut bytes.as_slice());
    }
}

#[test]
fn a_dry_run_decodes_one_level_only_and_deep_nesting_is_refused_without_recursion() {
    let one = Request::DryRun(Box::new(Request::BackendRemove { service: "web".into(), name: "b1".into(), if_generation: None }));
    assert_eq!(decode_request(&encode_request(&one)).unwrap(), one);
    let two = Request::DryRun(Box::new(one.clone()));
    assert!(decode_request(&encode_request(&two)).is_err());
    // a frame of a million nested DryRun tags: an error, not a stack overflow
    let tag = encode_request(&one)[postcard::to_stdvec(&PROTOCOL_VERSION).unwrap().len()];
    let mut body = postcard::to_stdvec(&PROTOCOL_VERSION).unwrap();
    body.extend(std::iter::repeat_n(tag, 1 << 20));
    assert!(decode_request(&body).is_err());
    // and decoding works again afterwards on the same thread
    assert_eq!(decode_request(&encode_request(&one)).unwrap(), one);
}
