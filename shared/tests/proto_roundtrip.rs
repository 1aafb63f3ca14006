//! Every report and decision type round-trips through every encoding it travels in —
//! postcard control frames, JSON (`decision_json`, `spillwayctl ... --json`) and
//! `serde_json::Value` (how `spillwayctl` assembles its JSON) — for extreme values:
//! ±inf, NaN, ±0, the largest and smallest floats and integers.
//!
//! Equality is compared on `Debug` text, so NaN equals NaN and -0.0 differs from 0.0.

use proptest::prelude::*;
use spillway_shared::pipeline::{BackendState, ClientClass, Decision, TierKind, TraceEntry};
use spillway_shared::proto::{BadFrameKind, ControlSocketStatus, HealthCheckerStatus, NeighborStatus, 
    decode_response, encode_response, BackendStatus, Counters, ExplainReport, FlowRow, FlowsReport, HealthRow,
    PortStatus, Response, SnapService, SnapshotReport, StatusReport,
};
use std::collections::BTreeMap;

fn extreme_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::NAN),
        Just(0.0),
        Just(-0.0),
        Just(f64::MAX),
        Just(f64::MIN),
        Just(f64::MIN_POSITIVE),
        Just(f64::EPSILON),
        proptest::num::f64::ANY,
    ]
}

fn extreme_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()]
}

fn text() -> impl Strategy<Value = String> {
    "[a-z0-9 _.:\"\\\\-]{0,12}"
}

fn trace_entry() -> impl Strategy<Value = TraceEntry> {
    (text(), text(), prop::collection::vec(text(), 0..3), prop::collection::btree_map(text(), extreme_f64(), 0..4), prop::collection::vec(text(), 0..2))
        .prop_map(|(stage, rule, input, numbers, notes)| TraceEntry { stage, rule, output: input.clone(), input, numbers, notes })
}

fn decision() -> impl Strategy<Value = Decision> {
    (
        any::<bool>(),
        prop::collection::vec(any::<usize>(), 0..4),
        prop::collection::vec((any::<usize>(), extreme_f64()), 0..4),
        prop::collection::vec(trace_entry(), 0..4),
        prop_oneof![
            (1u32..=5).prop_map(|priority| TierKind::HealthyPrimaries { priority }),
            (1u32..=5).prop_map(|priority| TierKind::HealthyFailover { priority }),
            Just(TierKind::LastResortPrimaries),
            Just(TierKind::HealthyDraining),
            Just(TierKind::Drop),
        ],
        prop_oneof![text().prop_map(ClientClass::Zone), Just(ClientClass::Incompatible)],
    )
        .prop_map(|(drop, eligible, weights, trace, tier, client)| Decision { drop, eligible, weights, trace, tier, client })
}

fn health_row() -> impl Strategy<Value = HealthRow> {
    (
        (text(), text(), any::<bool>(), any::<bool>()),
        (proptest::option::of(extreme_f64()), extreme_f64(), proptest::option::of(extreme_f64())),
        (any::<u32>(), any::<u32>(), extreme_u64(), extreme_u64(), proptest::option::of(text())),
    )
        .prop_map(|((service, backend, healthy, checked), (latency_ms, load_cps, since), (cs, cf, probes, failed, last_error))| HealthRow {
            address: format!("{backend}.addr"),
            endpoint: format!("{backend}-e1"),
            service,
            backend,
            healthy,
            checked,
            latency_ms,
            load_cps,
            consecutive_successes: cs,
            consecutive_failures: cf,
            probes,
            probes_failed: failed,
            probes_skipped: probes,
            last_error,
            since_change_sec: since,
        })
}

fn counters() -> impl Strategy<Value = Counters> {
    (prop::collection::vec(extreme_u64(), 20), prop::collection::vec((text(), extreme_u64()), 0..3)).prop_map(|(n, drops)| Counters {
        rx: n[0],
        tx: n[1],
        forwarded: n[2],
        arp_replies: n[3],
        icmp_forwarded: n[4],
        icmp_frag_needed_sent: n[5],
        fragments: n[6],
        fragments_held: n[18],
        new_connections: n[7],
        rebalanced: n[8],
        quic_lb: drops.iter().rev().cloned().collect(),
        drops,
        ct_hits: n[9],
        ct_misses: n[10],
        ct_evicted_syn_only: n[11],
        ct_evicted_closing: n[12],
        ct_syn_not_tracked: n[14],
        generation: n[15],
        polls: n[16],
        idle_polls: n[17],
        arp_replies_seen: n[18],
        control_tx: n[13],
        control_tx_failed: n[0],
        nd_advertisements: n[17],
        nd_not_ours: n[16],
        ct_relocated: n[19],
        ct_relocation_failed: n[5],
        fast_path: n[4],
        redirected: n[5],
    })
}

fn status() -> impl Strategy<Value = StatusReport> {
    (extreme_f64(), extreme_u64(), counters(), prop::collection::vec(counters(), 0..2), text(), extreme_u64()).prop_map(
        |(uptime_sec, generation, total, workers, name, n)| StatusReport {
            version: name.clone(),
            uptime_sec,
            generation,
            ports: vec![PortStatus { name: name.clone(), ipackets: n, rx_nombuf: n, ..Default::default() }],
            workers,
            total,
            backends: vec![BackendStatus { backend: name.clone(), packets: n, new_connections: n, ..Default::default() }],
            health_checker: HealthCheckerStatus { started: true, dead: Some(name.clone()), targets: n, probes_skipped: n, nofile_limit: n },
            control_socket: ControlSocketStatus { accepted: n, refused: 0, bad_frames: n, requests: u64::MAX },
            sync: Default::default(),
            neighbors: NeighborStatus { requests: n, ignored: n, entries: vec![(name.clone(), name, -1)], ..Default::default() },
        },
    )
}

fn debug<T: std::fmt::Debug>(t: &T) -> String {
    format!("{t:?}")
}

/// The response through a postcard frame, JSON text and a `serde_json::Value`.
fn assert_roundtrips(resp: &Response) -> Result<(), TestCaseError> {
    let want = debug(resp);
    let via_postcard = decode_response(&encode_response(resp)).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(debug(&via_postcard), want.clone(), "postcard");
    let json = serde_json::to_string(resp).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let via_json: Response = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
    prop_assert_eq!(debug(&via_json), want.clone(), "JSON {}", json);
    let value = serde_json::to_value(resp).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let via_value: Response = serde_json::from_value(value).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(debug(&via_value), want, "serde_json::Value");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The live-explain path: daemon `serde_json::to_string(&decision)` -> postcard frame ->
    /// `spillwayctl` `serde_json::from_str` -> `--json` output through `serde_json::Value`.
    #[test]
    fn decision_survives_the_live_explain_path(d in decision(), hash in extreme_u64()) {
        let decision_json = serde_json::to_string(&d).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let r = ExplainReport {
            service: "web".into(), vip: "10.0.0.100:80/tcp".into(), client: "10.1.0.10:40000".into(),
            class: "zone z1".into(), decision_json, backends: vec!["b1".into()], backend: None, endpoint: None,
            endpoint_shares: vec![("b1".into(), "e1".into(), 0.25)], hash,
            table_size: u32::MAX, snapshot_generation: hash,
            drop_reason: if hash % 2 == 0 { Some("martian_source".into()) } else { None },
            quic: (hash % 3 == 0).then(|| spillway_shared::proto::QuicExplain { dcid: "07c4".into(), codepoint: Some(0), fallback: Some("too_short".into()), ..Default::default() }),
        };
        let resp = Response::Explain(r);
        assert_roundtrips(&resp)?;
        let Ok(Response::Explain(back)) = decode_response(&encode_response(&resp)) else {
            return Err(TestCaseError::fail("not an explain answer"));
        };
        let d2: Decision = serde_json::from_str(&back.decision_json).map_err(|e| TestCaseError::fail(format!("{e}: {}", back.decision_json)))?;
        prop_assert_eq!(debug(&d2), debug(&d));
        let out = serde_json::json!({ "decision": d2 });
        let d3: Decision = serde_json::from_value(out["decision"].clone()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(debug(&d3), debug(&d));
    }

    #[test]
    fn health_rows_roundtrip(rows in prop::collection::vec(health_row(), 0..4)) {
        assert_roundtrips(&Response::Health(rows))?;
    }

    #[test]
    fn status_roundtrips(s in status()) {
        assert_roundtrips(&Response::Status(s))?;
    }

    #[test]
    fn backend_state_roundtrips_in_json(latency in proptest::option::of(extreme_f64()), load in extreme_f64(), n in any::<u32>()) {
        let s = BackendState { endpoints: n, healthy_endpoints: n, latency_ms: latency, load_cps: load };
        let json = serde_json::to_string(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: BackendState = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
        prop_assert_eq!(debug(&back), debug(&s));
    }

    #[test]
    fn other_reports_roundtrip(n in extreme_u64(), name in text(), limit in any::<u32>()) {
        assert_roundtrips(&Response::Flows(FlowsReport {
            per_worker: vec![n, 0], total: n,
            entries: vec![FlowRow { worker: limit, client: name.clone(), vip: name.clone(), proto: 17, service: name.clone(),
                backend: name.clone(), state: "established".into(), idle_ms: limit }],
        }))?;
        assert_roundtrips(&Response::Snapshot(SnapshotReport {
            generation: n, config_generation: n, age_ms: n, last_propagation_us: Some(n), workers_min_generation: 0,
            services: vec![SnapService { name: name.clone(), classes: vec![(name.clone(), None, vec![]), (name.clone(), Some(limit), vec![name.clone()])],
                distinct_tables: limit, failed_over: true }],
            distinct_tables: limit,
        }))?;
        assert_roundtrips(&Response::Config { generation: n, toml: name.clone(), path: name.clone() })?;
        assert_roundtrips(&Response::Error { message: name.clone() })?;
        for kind in [BadFrameKind::Truncated, BadFrameKind::TooLarge, BadFrameKind::Version, BadFrameKind::Malformed] {
            assert_roundtrips(&Response::BadFrame { kind, message: name.clone() })?;
        }
    }
}

#[test]
fn unlimited_capacity_is_written_as_inf() {
    let mut numbers = BTreeMap::new();
    numbers.insert("capacity_cps".to_string(), f64::INFINITY);
    let e = TraceEntry { stage: "capacity".into(), rule: "r".into(), input: vec![], output: vec![], numbers, notes: vec![] };
    let j = serde_json::to_string(&e).unwrap();
    assert!(j.contains(r#""capacity_cps":"inf""#), "{j}");
}
