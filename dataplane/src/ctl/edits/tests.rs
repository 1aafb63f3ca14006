//! Unit tests of the edit engine ([`super`]).

use super::*;
use crate::tests_config::Toml;

#[test]
fn values_parse_as_toml_or_bare_strings() {
    assert_eq!(parse_value("0.5"), Ok(Some(toml::Value::Float(0.5))));
    assert_eq!(parse_value("true"), Ok(Some(toml::Value::Boolean(true))));
    assert_eq!(parse_value("SPILL_CROSS_ZONE"), Ok(Some(toml::Value::String("SPILL_CROSS_ZONE".into()))));
    assert_eq!(parse_value("\"a b\""), Ok(Some(toml::Value::String("a b".into()))));
    assert_eq!(parse_value("[1,\n 2]"), Ok(Some(toml::Value::Array(vec![1.into(), 2.into()]))), "a multi-line array is one value");
    assert_eq!(parse_value("5 # a comment"), Ok(Some(toml::Value::Integer(5))));
    assert_eq!(parse_value(""), Ok(None));
}

#[test]
fn edit_reports_unknown_fields_and_types() {
    let b = Backend::new("b1", "z1");
    let e = edit(&b, &[("wieght".into(), "3".into())], "backend b1", &["name"], "services[].backends[]").unwrap_err();
    assert!(e.contains("wieght"), "{e}");
    let e = edit(&b, &[("weight".into(), "\"x\"".into())], "backend b1", &["name"], "services[].backends[]").unwrap_err();
    assert!(e.contains("backend b1"), "{e}");
    let b2 = edit(&b, &[("weight".into(), "80".into()), ("enabled".into(), "false".into())], "b", &[], "services[].backends[]").unwrap();
    assert_eq!((b2.weight, b2.enabled), (80, false));
    let d = describe_changes(&Config::default(), &Config::default());
    assert!(d.is_empty());
}

/// The config of [`daemon`]: port p0 (10.0.0.2) and service `web` on 10.0.0.100:`port`
/// (with `service_lines`) with one-address backends b1 (10.0.1.1, 02:00:00:00:0b:01) and b2
/// (10.0.1.2, 02:00:00:00:0b:02).
fn two_backends(port: u16, service_lines: &str) -> Toml {
    Toml::new()
        .port("p0", "net_null0", "address = \"10.0.0.2\"")
        .service("web", "10.0.0.100", port, service_lines)
        .backend("b1", "10.0.1.1", "mac = \"02:00:00:00:0b:01\"")
        .backend("b2", "10.0.1.2", "mac = \"02:00:00:00:0b:02\"")
}

/// A daemon of config `text` (validated by the daemon) with one worker.
fn daemon_of(text: &str) -> Daemon {
    Daemon::new(Config::from_toml(text).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap()
}

/// A daemon of [`two_backends`] on port 80.
fn daemon() -> Daemon {
    daemon_of(two_backends(80, "").text())
}

/// `service set web health_check=...`: a TCP check every second that times out after
/// `timeout_sec`.
fn tcp_check(timeout_sec: &str) -> spillway_shared::proto::Request {
    spillway_shared::proto::Request::ServiceSet {
        name: "web".into(),
        fields: vec![("health_check".into(), format!("{{ type = \"tcp\", check_interval_sec = 1.0, timeout_sec = {timeout_sec} }}"))],
        if_generation: None,
    }
}

/// [`daemon`] after a live edit gave web a TCP health check (0.5 s) and b2 went down.
fn checked_with_b2_down() -> Daemon {
    let d = daemon();
    let r = d.edit_request(tcp_check("0.5"));
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    d.set_health("web", "b2", false, None);
    d
}

fn set(service: &str, name: &str, f: &[(&str, &str)], g: Option<u64>) -> spillway_shared::proto::Request {
    spillway_shared::proto::Request::BackendSet {
        service: service.into(),
        name: name.into(),
        fields: f.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        if_generation: g,
    }
}

#[test]
fn health_check_edits_keep_a_down_backend_down_and_new_endpoints_start_down() {
    let d = checked_with_b2_down();
    // change the check: b2 stays down in the view the dataplane uses
    let r = d.edit_request(tcp_check("0.4"));
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    let healthy = |b: &str| d.control.lock().unwrap().health[&("web".to_string(), b.to_string(), b.to_string())].healthy;
    assert!(!healthy("b2"), "a health-check edit revived a down backend");
    // a new address is a new endpoint: unhealthy until probes pass
    assert!(matches!(d.edit_request(set("web", "b1", &[("address", "10.0.1.99")], None)), Response::Applied(_)));
    assert!(!healthy("b1"));
    assert!(d.shared.with_snapshot(|s| s.backends.iter().filter(|b| b.present && (b.name == "b1" || b.name == "b2")).all(|b| !b.healthy)).unwrap());
}

#[test]
fn edits_keep_state_of_unchanged_backends() {
    let d = daemon();
    d.set_health("web", "b2", false, Some(3.0));
    let slot_b2 = d.control.lock().unwrap().slots.slot("web", "b2", "b2");
    let r = d.edit_request(set("web", "b1", &[("weight", "80")], Some(1)));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.generation, 2);
    assert_eq!(a.changes, vec!["service web: backend b1: weight: 50 -> 80".to_string()]);
    {
        let st = d.control.lock().unwrap();
        assert!(!st.health[&("web".to_string(), "b2".to_string(), "b2".to_string())].healthy, "b2's health survives an edit of b1");
        assert_eq!(st.slots.slot("web", "b2", "b2"), slot_b2);
        assert_eq!(st.cfg.services[0].backends[0].weight, 80);
    }
    // stale generation
    let r = d.edit_request(set("web", "b1", &[("weight", "81")], Some(1)));
    assert_eq!(r, Response::Error { message: "config generation is 2, not 1: someone else changed it; re-read and retry".into() });
    // a generation ahead of the daemon's: nobody changed anything (QA)
    let r = d.edit_request(set("web", "b1", &[("weight", "81")], Some(u64::MAX)));
    let Response::Error { message } = r else { panic!("accepted: {r:?}") };
    assert!(message.contains(&format!("{} is ahead of the daemon's current generation", u64::MAX)) && !message.contains("someone else"), "{message}");
    // changing b2's address makes it a new endpoint: without a health check it is
    // static (healthy); removing and re-adding b1 gets a new incarnation
    let inc_b1 = { let st = d.control.lock().unwrap(); st.slots.incarnation(st.slots.slot("web", "b1", "b1").unwrap()) };
    assert!(matches!(d.edit_request(set("web", "b2", &[("address", "10.0.1.22")], None)), Response::Applied(_)));
    assert!(d.control.lock().unwrap().health[&("web".to_string(), "b2".to_string(), "b2".to_string())].healthy);
    let rm = spillway_shared::proto::Request::BackendRemove { service: "web".into(), name: "b1".into(), if_generation: None };
    assert!(matches!(d.edit_request(rm), Response::Applied(_)));
    let add = spillway_shared::proto::Request::BackendAdd {
        service: "web".into(),
        name: "b1".into(),
        fields: vec![("address".into(), "10.0.1.1".into()), ("mac".into(), "02:00:00:00:0b:01".into())],
        if_generation: None,
    };
    assert!(matches!(d.edit_request(add), Response::Applied(_)));
    let st = d.control.lock().unwrap();
    let slot = st.slots.slot("web", "b1", "b1").unwrap();
    assert_ne!(st.slots.incarnation(slot), inc_b1, "a re-added backend never matches old connection entries");
    assert_eq!(st.config_generation, 5);
    assert!(d.shared.with_snapshot(|s| s.generation).unwrap() >= 5);
}

#[test]
fn invalid_edits_change_nothing() {
    let d = daemon();
    let r = d.edit_request(set("web", "b1", &[("weight", "0")], None));
    let Response::Error { message } = r else { panic!("{r:?}") };
    assert!(message.starts_with("services[0].backends[0].weight = 0: must be in 1..=1000"), "{message}");
    // Without a mac the address is ARP-resolved, so it must be unicast (with a mac, L2 DSR
    // and no health check the address is never used: it may be absent).
    let r = d.edit_request(set("web", "b1", &[("mac", ""), ("address", "\"0.0.0.0\"")], None));
    let Response::Error { message } = r else { panic!("{r:?}") };
    assert!(message.starts_with("services[0].backends[0].address = 0.0.0.0 (or not given): a unicast endpoint address is required"), "{message}");
    // Nor any other address it cannot send to (QA: a link-local endpoint was accepted);
    // IPv4 link-local needs no zone index and is accepted.
    for a in ["0.1.2.3", "127.0.0.1", "224.0.0.5", "240.0.0.5", "255.255.255.255"] {
        let r = d.edit_request(set("web", "b1", &[("mac", ""), ("address", &format!("\"{a}\""))], None));
        assert!(matches!(&r, Response::Error { message } if message.starts_with(&format!("services[0].backends[0].address = {a}: a unicast endpoint address is required"))), "{a}: {r:?}");
    }
    let one = |vip: &str, a: &str| Toml::new().port("p0", "net_null0", "address = \"10.0.0.2\"\naddress6 = \"fd00::2\"").service("s", vip, 80, "").backend("b1", a, "").parsed();
    for a in ["::1", "ff02::1", "fe80::1", "::ffff:10.0.1.1"] {
        let e = super::daemon_checks(&one("fd00::100", a)).unwrap_err();
        assert!(e.starts_with(&format!("services[0].backends[0].address = {a}: a unicast endpoint address is required")), "{a}: {e}");
        // L2 DSR without health check: the error says a mac lifts the rule, and it does
        assert!(e.ends_with("; or give services[0].backends[0].mac: an L2 DSR endpoint with a mac and no health check is never sent to at its address"), "{a}: {e}");
        let mut with_mac = one("fd00::100", a);
        with_mac.services[0].backends[0].mac = Some("02:00:00:00:0b:01".parse().unwrap());
        super::daemon_checks(&with_mac).unwrap();
    }
    super::daemon_checks(&one("fd00::100", "fd00::11")).unwrap();
    super::daemon_checks(&one("10.0.0.100", "169.254.7.1")).unwrap();
    // nor may an address be removed (it read as 0.0.0.0): backend set / add, endpoint add
    for r in [set("web", "b1", &[("address", "")], None), set("web", "b1", &[("mac", "02:00:00:00:0b:07"), ("address", " ")], None)] {
        let r = d.edit_request(r);
        assert!(matches!(&r, Response::Error { message } if message.starts_with("service web: backend b1: address= (empty): an address cannot be removed")), "{r:?}");
    }
    let r = d.edit_request(ep_req("add", "b1", "e9", &[("address", ""), ("mac", "02:00:00:00:0b:19")]));
    assert!(matches!(&r, Response::Error { message } if message.contains("endpoint e9: address= (empty): an address cannot be removed")), "{r:?}");
    // nor the port's own address, nor may `service add` rename the service by a field
    let r = d.edit_request(set("web", "b1", &[("address", "10.0.0.2")], None));
    assert!(matches!(&r, Response::Error { message } if message.contains("must differ from the port's own address (ports[0].address = 10.0.0.2)")), "{r:?}");
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("vip".into(), "10.0.0.101".into()), ("port".into(), "81".into()), ("name".into(), "\"other\"".into())], if_generation: None });
    assert!(matches!(&r, Response::Error { message } if message.contains("field `name` cannot be set here")), "{r:?}");
    // nor bring backends (docs/ctl.md: `backends` cannot be set; use backend add)
    let backends = "[{name = \"k\", address = \"10.0.9.1\", mac = \"02:00:00:00:09:01\"}]";
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("vip".into(), "10.0.0.101".into()), ("port".into(), "81".into()), ("backends".into(), backends.into())], if_generation: None });
    assert!(matches!(&r, Response::Error { message } if message.contains("field `backends` cannot be set here")), "{r:?}");
    let r = d.edit_request(spillway_shared::proto::Request::ServiceSet { name: "web".into(), fields: vec![("backends".into(), "[]".into())], if_generation: None });
    assert!(matches!(r, Response::Error { .. }));
    assert_eq!(d.control.lock().unwrap().config_generation, 1);
    assert_eq!(d.control.lock().unwrap().generation, 1);
}

/// a backend whose service loses its health check is
/// static and healthy again, whatever the last probe said.
#[test]
fn removing_the_health_check_revives_a_down_backend() {
    let d = checked_with_b2_down();
    let r = d.edit_request(spillway_shared::proto::Request::ServiceSet { name: "web".into(), fields: vec![("health_check".into(), "".into())], if_generation: None });
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    assert!(d.control.lock().unwrap().cfg.services[0].health_check.is_none());
    let b2_healthy = d.shared.with_snapshot(|s| s.backends.iter().find(|b| b.present && b.name == "b2").map(|b| b.healthy)).unwrap();
    assert_eq!(b2_healthy, Some(true), "b2 has no health check any more, yet stays unhealthy for good");
}

fn ep_req(kind: &str, backend: &str, name: &str, f: &[(&str, &str)]) -> spillway_shared::proto::Request {
    use spillway_shared::proto::Request as R;
    let fields = f.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let (service, backend, name) = ("web".to_string(), backend.to_string(), name.to_string());
    match kind {
        "add" => R::EndpointAdd { service, backend, name, fields, if_generation: None },
        "remove" => R::EndpointRemove { service, backend, name, if_generation: None },
        _ => R::EndpointSet { service, backend, name, fields, if_generation: None },
    }
}

/// `endpoint set` on a one-address backend's own endpoint (named like the backend) writes
/// the backend as a group of one; the answer says so and names the field that changed,
/// not an address and MAC "unset" (fresh-user QA).
#[test]
fn endpoint_set_on_a_one_address_backend_names_what_changed() {
    let d = daemon();
    let r = d.edit_request(ep_req("set", "b1", "b1", &[("weight", "7")]));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.changes, ["service web: backend b1: written as one address -> a group of 1 endpoint", "service web: backend b1: endpoint b1: weight: 50 -> 7"]);
    let r = d.edit_request(ep_req("set", "b1", "b1", &[("address", "10.0.1.77")]));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.changes, ["service web: backend b1: endpoint b1: address: \"10.0.1.1\" -> \"10.0.1.77\""]);
}

/// Re-enabling an endpoint reads `enabled: false -> true`, not `-> (unset)` (`enabled =
/// true` is its default, left out of its TOML; QA).
#[test]
fn re_enabling_an_endpoint_says_true() {
    let d = daemon();
    applied(&d, ep_req("add", "b1", "e2", &[("address", "10.0.1.12"), ("mac", "02:00:00:00:0b:12")]));
    let r = d.edit_request(ep_req("set", "b1", "e2", &[("enabled", "false")]));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.changes, ["service web: backend b1: endpoint e2: enabled: true -> false"]);
    let r = d.edit_request(ep_req("set", "b1", "e2", &[("enabled", "true")]));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.changes, ["service web: backend b1: endpoint e2: enabled: false -> true"]);
}

#[test]
fn endpoint_edits_keep_slots_and_health_of_the_others_and_refuse_bad_input() {
    let d = daemon();
    d.set_health("web", "b2", false, None);
    let slot_b1 = d.control.lock().unwrap().slots.slot("web", "b1", "b1");
    // b1 becomes a group: its old endpoint keeps its slot (same key: named like the backend)
    let r = d.edit_request(ep_req("add", "b1", "e2", &[("address", "10.0.1.11"), ("mac", "02:00:00:00:0b:11")]));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.changes, ["service web: backend b1: written as one address -> a group of 2 endpoints", "service web: backend b1: endpoint e2 added"]);
    {
        let st = d.control.lock().unwrap();
        assert_eq!(st.slots.slot("web", "b1", "b1"), slot_b1);
        assert!(st.slots.slot("web", "b1", "e2").is_some());
        assert!(!st.health[&("web".to_string(), "b2".to_string(), "b2".to_string())].healthy, "b2's health survives");
        assert_eq!(st.cfg.services[0].backends[0].members().len(), 2);
    }
    let r = d.edit_request(ep_req("set", "b1", "e2", &[("weight", "80")]));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.changes, ["service web: backend b1: endpoint e2: weight: 50 -> 80"]);
    // errors name what is wrong
    let err = |r: Response| match r {
        Response::Error { message } => message,
        other => panic!("{other:?}"),
    };
    assert!(err(d.edit_request(ep_req("add", "b1", "e3", &[("mac", "02:00:00:00:0b:13")]))).contains("address is required"));
    let e = err(d.edit_request(ep_req("add", "b1", "e3", &[("address", "10.0.1.2"), ("mac", "02:00:00:00:0b:13")])));
    assert!(e.contains("services[0].backends[1].address = 10.0.1.2") && e.contains("unique within the service (also at services[0].backends[0].endpoints[2].address)"), "{e}");
    let e = err(d.edit_request(ep_req("set", "b1", "e2", &[("weight", "0")])));
    assert!(e.contains("endpoints[1].weight = 0") && e.contains("enabled = false"), "{e}");
    assert!(err(d.edit_request(ep_req("remove", "b1", "nope", &[]))).contains("has no endpoint nope (have: b1, e2)"));
    assert!(err(d.edit_request(ep_req("remove", "b2", "b2", &[]))).contains("last endpoint"));
    // a group is not emptied by a field either (QA: refused as `address = 0.0.0.0`)
    let e = err(d.edit_request(set("web", "b1", &[("endpoints", "[]")], None)));
    assert!(e == "service web: backend b1: endpoints = []: a group keeps at least one endpoint, or becomes a one-address backend given its address= (remove endpoints one by one with `endpoint remove`; the last one cannot go: remove the backend instead)", "{e}");
    // an empty value puts a field with a default back to it (QA: `weight=` was refused as
    // `weight = : must be in 1..=1000`)
    assert!(matches!(d.edit_request(set("web", "b2", &[("weight", "70")], None)), Response::Applied(_)));
    let r = d.edit_request(set("web", "b2", &[("weight", "")], None));
    assert!(matches!(&r, Response::Applied(a) if a.changes == ["service web: backend b2: weight: 70 -> 50"]), "{r:?}");
    assert!(err(d.edit_request(ep_req("add", "zz", "e1", &[("address", "10.0.9.1")]))).contains("has no backend zz"));
    // remove: the endpoint's slot and health go, the other's stay
    assert!(matches!(d.edit_request(ep_req("remove", "b1", "e2", &[])), Response::Applied(_)));
    let st = d.control.lock().unwrap();
    assert!(st.slots.slot("web", "b1", "e2").is_none() && st.slots.slot("web", "b1", "b1") == slot_b1);
    assert!(!st.health.contains_key(&("web".to_string(), "b1".to_string(), "e2".to_string())));
}

/// `weight=1e3` (a TOML float), `0x10`, `1_000` or `+5` for an integer field are refused
/// naming the field, the value and the range; live edits take plain integers only.
#[test]
fn integer_fields_take_plain_integers_only() {
    let d = daemon();
    for (f, v) in [("weight", "1e3"), ("weight", "80.0"), ("weight", "0x10"), ("weight", "1_000"), ("weight", "+5"), ("priority", "2e0")] {
        let r = d.edit_request(set("web", "b1", &[(f, v)], None));
        let Response::Error { message } = r else { panic!("{f}={v} accepted: {r:?}") };
        assert!(message.contains(&format!("{f} = {v}")) && message.contains("must be in 1..="), "{f}={v}: {message}");
    }
    let r = d.edit_request(spillway_shared::proto::Request::ServiceSet { name: "web".into(), fields: vec![("port".into(), "8e1".into())], if_generation: None });
    let Response::Error { message } = r else { panic!("port=8e1 accepted: {r:?}") };
    assert!(message.contains("port = 8e1") && message.contains("must be in 1..=65535"), "{message}");
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("vip".into(), "10.0.0.101".into()), ("port".into(), "0x50".into())], if_generation: None });
    let Response::Error { message } = r else { panic!("port=0x50 accepted: {r:?}") };
    assert!(message.contains("port = 0x50") && message.contains("must be in 1..=65535"), "{message}");
    // out of range for its type (u16): the field and value are named too
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("vip".into(), "10.0.0.101".into()), ("port".into(), "65536".into())], if_generation: None });
    let Response::Error { message } = r else { panic!("port=65536 accepted: {r:?}") };
    assert!(message.contains("port = 65536") && message.contains("must be in 1..=65535"), "{message}");
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("port".into(), "80".into())], if_generation: None });
    let Response::Error { message } = r else { panic!("a service without vip accepted: {r:?}") };
    assert!(message.contains("vip") && !message.contains("port = 80"), "{message}");
    // a missing field is no given field's fault (fresh-user QA: `vip` was blamed for it)
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("vip".into(), "10.0.0.101".into())], if_generation: None });
    let Response::Error { message } = r else { panic!("a service without port accepted: {r:?}") };
    assert!(message.contains("missing field `port`") && !message.contains("vip = "), "{message}");
    // ... while a missing field inside a given value is still that value's (review)
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("vip".into(), "10.0.0.101".into()), ("port".into(), "81".into()), ("quic_lb".into(), "[{config_rotation=0}]".into())], if_generation: None });
    let Response::Error { message } = r else { panic!("a QUIC-LB config without lengths accepted: {r:?}") };
    assert!(message.contains("quic_lb = [{config_rotation=0}]: missing field"), "{message}");
    // an integer beyond 64 bits is named as one, not as a string (fresh-user QA)
    let r = d.edit_request(set("web", "b1", &[("weight", "99999999999999999999999")], None));
    let Response::Error { message } = r else { panic!("accepted: {r:?}") };
    assert!(message.contains("weight = 99999999999999999999999") && message.contains("beyond TOML's signed 64-bit integers") && !message.contains("not a string"), "{message}");
    let r = d.edit_request(ep_req("add", "b1", "e2", &[("address", "10.0.1.9"), ("mac", "02:00:00:00:0b:09"), ("weight", "5e1")]));
    let Response::Error { message } = r else { panic!("endpoint weight=5e1 accepted: {r:?}") };
    assert!(message.contains("weight = 5e1") && message.contains("must be in 1..="), "{message}");
    // nothing changed, and plain integers still apply
    assert_eq!(d.control.lock().unwrap().config_generation, 1);
    assert!(matches!(d.edit_request(set("web", "b1", &[("weight", "1000")], None)), Response::Applied(_)));
}

/// A value holding a second TOML line (`5`, a newline, `enabled=false` in one field, from
/// a client other than spillwayctl) is refused naming the extra key; nothing is applied
/// (fresh-user QA: `zone` was applied and `weight` dropped without a word).
#[test]
fn a_value_with_more_toml_after_it_is_refused_whole() {
    let d = daemon();
    let r = d.edit_request(set("web", "b1", &[("weight", "5\nenabled=false")], None));
    let Response::Error { message } = r else { panic!("half applied: {r:?}") };
    assert!(message.contains("weight = \"5\\nenabled=false\"") && message.contains("(`enabled`)") && message.contains("nothing was applied"), "{message}");
    // something that is no TOML at all but spans lines is no bare word either
    let r = d.edit_request(set("web", "b1", &[("zone", "z2\nweight=5 x")], None));
    let Response::Error { message } = r else { panic!("accepted: {r:?}") };
    assert!(message.contains("spans lines"), "{message}");
    let add = |fields: &[(&str, &str)]| spillway_shared::proto::Request::ServiceAdd {
        name: "api".into(),
        fields: fields.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
        if_generation: None,
    };
    let r = d.edit_request(add(&[("vip", "\"10.0.0.101\""), ("port", "81\n[extra]\nk = 1")]));
    let Response::Error { message } = r else { panic!("accepted: {r:?}") };
    assert!(message.contains("service api: port = ") && message.contains("(`extra`)"), "{message}");
    let st = d.control.lock().unwrap();
    assert_eq!((st.config_generation, st.cfg.services.len()), (1, 1), "nothing applied");
    assert_eq!((st.cfg.services[0].backends[0].weight, st.cfg.services[0].backends[0].enabled), (50, true));
}

/// A field given twice in one command is refused, naming both values; nothing is applied.
#[test]
fn a_field_given_twice_is_refused() {
    let d = daemon();
    let r = d.edit_request(set("web", "b1", &[("weight", "1"), ("weight", "2")], None));
    let Response::Error { message } = r else { panic!("accepted: {r:?}") };
    assert!(message.contains("`weight` is given twice (weight=1 and weight=2)"), "{message}");
    let r = d.edit_request(spillway_shared::proto::Request::ServiceAdd { name: "api".into(), fields: vec![("vip".into(), "10.0.0.101".into()), ("port".into(), "81".into()), ("port".into(), "82".into())], if_generation: None });
    let Response::Error { message } = r else { panic!("accepted: {r:?}") };
    assert!(message.contains("`port` is given twice"), "{message}");
    assert_eq!(d.control.lock().unwrap().config_generation, 1);
    assert_eq!(d.control.lock().unwrap().cfg.services[0].backends[0].weight, 50);
}

/// The Maglev picks of service `web` for 3,000 spread hashes (backend slots).
fn picks(d: &Daemon) -> Vec<Option<u16>> {
    d.shared
        .with_snapshot(|s| {
            let t = s.services[0].tables.iter().flatten().next().cloned();
            (0..3000u64).map(|i| t.as_ref().and_then(|t| t.pick(spillway_shared::flow::fmix64(i + 1)))).collect()
        })
        .unwrap()
}

/// An edit that changes nothing moves no flow: `endpoint set web b1 b1 weight=50` on a
/// one-address backend writes it as a group of one endpoint named like it — the same
/// endpoint, so the same Maglev identity and the same table (docs/maglev.md "Identity").
/// So does adding an endpoint and removing it again.
#[test]
fn a_no_op_endpoint_edit_moves_no_pick() {
    let d = daemon();
    let before = picks(&d);
    let r = d.edit_request(ep_req("set", "b1", "b1", &[("weight", "50")]));
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    assert_eq!(picks(&d), before, "the same endpoint written as a group");
    assert!(matches!(d.edit_request(ep_req("add", "b1", "e2", &[("address", "10.0.1.11"), ("mac", "02:00:00:00:0b:11")])), Response::Applied(_)));
    assert_ne!(picks(&d), before, "a new endpoint takes its share");
    assert!(matches!(d.edit_request(ep_req("remove", "b1", "e2", &[])), Response::Applied(_)));
    assert_eq!(picks(&d), before, "back to the same endpoints");
}

/// Two hosts whose files say the same thing in two spellings build the same tables.
#[test]
fn equal_configs_in_two_spellings_build_equal_tables() {
    let single = daemon();
    // The same config with b1 written as a group of one endpoint named like it, listed
    // after b2.
    let b1 = "[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\n";
    let two = two_backends(80, "");
    assert!(two.text().contains(b1));
    let grouped_b1 = "[[services.backends]]\nname = \"b1\"\n[[services.backends.endpoints]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\n";
    let grouped = daemon_of(&(two.text().replace(b1, "") + grouped_b1));
    let name = |d: &Daemon| -> Vec<Option<String>> {
        let p = picks(d);
        d.shared.with_snapshot(|s| p.iter().map(|x| x.map(|slot| s.backends[usize::from(slot)].name.clone())).collect()).unwrap()
    };
    assert_eq!(name(&single), name(&grouped));
}

/// `[sync]` cannot change live, but its peer list is a set: the same peers in another
/// order are no change.
#[test]
fn a_reordered_sync_peer_list_is_no_change() {
    let sync = |peers: &str| two_backends(80, "").section("sync", &format!("listen = \"10.0.0.2:7946\"\npeers = [{peers}]\nkey_file = \"/etc/spillway/sync.key\""));
    let d = daemon_of(sync("\"10.0.0.3:7946\", \"10.0.0.4:7946\"").text());
    let r = d.config_apply(sync("\"10.0.0.4:7946\", \"10.0.0.3:7946\"").text(), None);
    assert!(!matches!(&r, Response::Error { message } if message.contains("[sync] cannot change")), "{r:?}");
    let r = d.config_apply(sync("\"10.0.0.4:7946\"").text(), None);
    assert!(matches!(&r, Response::Error { message } if message.contains("[sync] cannot change")), "{r:?}");
}

/// `config apply` of a file without `[[ports]]` (an empty file, a fragment) is refused as
/// not a whole config, not as "[dataplane] cannot change" from the sections' defaults
/// (new-user test); nothing changes.
#[test]
fn config_apply_of_a_file_without_ports_says_it_takes_the_whole_file() {
    let d = daemon();
    let generation = d.shared.with_snapshot(|s| s.generation).unwrap();
    for text in ["", "[conntrack]\ncapacity_per_worker = 4096\n", "[[services]]\nname = \"x\"\nvip = \"10.0.0.9\"\nport = 80\n"] {
        let r = d.config_apply(text, None);
        assert!(matches!(&r, Response::Error { message } if message.starts_with("config: no [[ports]]: config apply takes the whole config file")), "{text:?}: {r:?}");
    }
    assert_eq!(d.shared.with_snapshot(|s| s.generation).unwrap(), generation);
}

/// A daemon that started without IPv6 services has small IPv6 tables: the first IPv6
/// service is refused live with the restart advice, not silently given 1,024 entries.
#[test]
fn the_first_ipv6_service_needs_a_restart() {
    let d = daemon();
    let v6 = two_backends(80, "").service("web6", "fd00::100", 80, "").backend("v1", "fd00:10::1", "mac = \"02:00:00:00:16:01\"");
    let r = d.config_apply(v6.text(), None);
    assert!(matches!(&r, Response::Error { message } if message.contains("first IPv6 service") && message.contains("restart")), "{r:?}");
    let started_with_v6 = daemon_of(v6.text());
    let more = v6.service("dns6", "fd00::100", 53, "protocol = \"udp\"").backend("w1", "fd00:10::2", "mac = \"02:00:00:00:16:02\"");
    assert!(matches!(started_with_v6.config_apply(more.text(), None), Response::Applied(_)), "later IPv6 services are fine");
}

/// Every pair of (tracking_mode, session_affinity) as a live `service set`: applied exactly
/// when the connection-tracking key keeps its form (5-tuple, or the same affinity tuple),
/// refused with the reason otherwise; a refused edit changes nothing.
#[test]
fn live_edits_that_change_the_tracking_key_are_refused() {
    use spillway_shared::config::{SessionAffinity as A, TrackingMode as T};
    use spillway_shared::proto::Request;
    let affinities = [A::NONE, A::CLIENT_IP_PORT_PROTO, A::CLIENT_IP_PROTO, A::CLIENT_IP, A::CLIENT_IP_NO_DESTINATION];
    // the worker's key: a session entry (client address + the service's VIP, port,
    // protocol) under PER_SESSION with a reduced affinity, else the 5-tuple
    let form = |t: T, a: A| t == T::PER_SESSION && !matches!(a, A::NONE | A::CLIENT_IP_PORT_PROTO);
    for t0 in [T::PER_CONNECTION, T::PER_SESSION] {
        for a0 in affinities {
            for t1 in [T::PER_CONNECTION, T::PER_SESSION] {
                for a1 in affinities {
                    let d = daemon_of(two_backends(80, &format!("tracking_mode = \"{t0:?}\"\nsession_affinity = \"{a0:?}\"")).text());
                    let req = Request::ServiceSet {
                        name: "web".into(),
                        fields: vec![("tracking_mode".into(), format!("{t1:?}")), ("session_affinity".into(), format!("{a1:?}"))],
                        if_generation: None,
                    };
                    let r = d.edit_request(req);
                    let st = d.control.lock().unwrap();
                    let now = st.cfg.service("web").unwrap();
                    if form(t0, a0) == form(t1, a1) {
                        assert!(matches!(r, Response::Applied(_)), "{t0:?}/{a0:?} -> {t1:?}/{a1:?}: {r:?}");
                        assert_eq!((now.tracking_mode, now.session_affinity), (t1, a1));
                    } else {
                        let Response::Error { message } = &r else { panic!("{t0:?}/{a0:?} -> {t1:?}/{a1:?} applied: {r:?}") };
                        assert!(message.contains("changes the connection-tracking key"), "{message}");
                        assert_eq!((now.tracking_mode, now.session_affinity), (t0, a0), "refused: unchanged");
                    }
                }
            }
        }
    }
}

/// QUIC-LB is edited live: server IDs first (unused without the section), then the
/// section; a key file that is too open or missing refuses the edit and the running
/// config is unchanged; the snapshot's table routes the new server IDs.
#[test]
fn quic_lb_is_edited_live_and_a_bad_key_file_refuses_the_edit() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("spw-edit-quic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("k");
    std::fs::write(&key, "8f95f09245765f80256934e50c66207f\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let d = daemon_of(two_backends(443, "protocol = \"udp\"").text());
    for (b, sid) in [("b1", "ed793a"), ("b2", "c4605e")] {
        let r = d.edit_request(set("web", b, &[("server_id", sid)], None));
        assert!(matches!(r, Response::Applied(_)), "{r:?}");
    }
    let section = format!("[{{ config_rotation = 0, server_id_length = 3, nonce_length = 4, key_file = \"{}\" }}]", key.display());
    let quic = |v: &str| spillway_shared::proto::Request::ServiceSet { name: "web".into(), fields: vec![("quic_lb".into(), v.into())], if_generation: None };
    let r = d.edit_request(quic(&section));
    assert!(matches!(&r, Response::Error { message } if message.contains("mode 0644: must be 0600 or 0400")), "{r:?}");
    let r = d.edit_request(quic(&section.replace("/k\"", "/missing\"")));
    assert!(matches!(&r, Response::Error { message } if message.contains("services[0].quic_lb[0].key_file") && message.contains("No such file")), "{r:?}");
    assert!(d.shared.with_snapshot(|s| s.services[0].quic_lb.is_none()).unwrap(), "refused edits change nothing");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = d.edit_request(quic(&section));
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    let dcid = spillway_shared::quic_lb::parse_hex("0720b1d07b359d3c").unwrap();
    let q = d.shared.with_snapshot(|s| crate::control::quic_lb::explain(s, Some(0), "0720b1d07b359d3c", |_| Some(("b1".into(), "b1".into())))).unwrap();
    assert_eq!((q.server_id.as_deref(), q.fallback.as_deref()), (Some("ed793a"), None), "{q:?}");
    let routed = d.shared.with_snapshot(|s| s.services[0].quic_lb.as_ref().unwrap().lookup(&dcid).map(|r| r.1)).unwrap();
    assert_eq!(routed, Ok(d.control.lock().unwrap().slots.slot("web", "b1", "b1").unwrap()));
    // b1 written as a group of one (endpoint set on its own endpoint): its server ID moves
    // into the endpoint, the edit is applied and the ID still routes to it (review: it was
    // left on the backend, and the edit refused with `server_id = absent: required`)
    let r = d.edit_request(ep_req("set", "b1", "b1", &[("weight", "7")]));
    let Response::Applied(a) = r else { panic!("{r:?}") };
    assert_eq!(a.changes, ["service web: backend b1: written as one address -> a group of 1 endpoint", "service web: backend b1: endpoint b1: weight: 50 -> 7"]);
    let routed = d.shared.with_snapshot(|s| s.services[0].quic_lb.as_ref().unwrap().lookup(&dcid).map(|r| r.1)).unwrap();
    assert_eq!(routed, Ok(d.control.lock().unwrap().slots.slot("web", "b1", "b1").unwrap()));
    std::fs::remove_dir_all(&dir).ok();
}

/// A group emptied by `endpoints=[]` with a `mac` becomes a one-address L2 DSR backend
/// without an address, which config.md allows (review: refused like one without a mac).
#[test]
fn an_emptied_group_with_a_mac_is_a_one_address_backend() {
    let d = daemon();
    assert!(matches!(d.edit_request(ep_req("add", "b1", "e2", &[("address", "10.0.1.11"), ("mac", "02:00:00:00:0b:11")])), Response::Applied(_)));
    let r = d.edit_request(set("web", "b1", &[("endpoints", "[]"), ("mac", "02:00:00:00:0b:09")], None));
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
    let st = d.control.lock().unwrap();
    let b1 = &st.cfg.services[0].backends[0];
    assert!(!b1.is_group() && b1.address.is_unspecified() && b1.mac.is_some(), "{b1:?}");
}

/// A value that is no number for a number field (`abc`, `.5`, `NaN`, `1e400`: all read as
/// strings) is refused with the field's range and how to write the number (fresh-user QA:
/// only `invalid type: string "abc", expected f64`).
#[test]
fn a_float_field_given_no_number_gets_its_range_and_a_hint() {
    let d = daemon();
    for v in ["abc", ".5", "NaN", "1e400"] {
        let r = d.edit_request(spillway_shared::proto::Request::ServiceSet { name: "web".into(), fields: vec![("spillover_ratio".into(), v.into())], if_generation: None });
        let Response::Error { message } = r else { panic!("spillover_ratio={v} accepted: {r:?}") };
        assert!(message.starts_with(&format!("service web: spillover_ratio = {v}: invalid type: string")), "{v}: {message}");
        assert!(message.contains("; must be in [0.0, 1.0] (ratio;") && message.ends_with("; write a decimal number with a digit before the point, e.g. 0.5 (not .5, NaN or inf)"), "{v}: {message}");
    }
    let r = d.edit_request(set("web", "b1", &[("capacity_scaler", "half")], None));
    let Response::Error { message } = r else { panic!("capacity_scaler=half accepted: {r:?}") };
    assert!(message.contains("capacity_scaler = half: invalid type") && message.contains("must be 0.0 or in [0.1, 1.0]"), "{message}");
}

/// Backend `backend`'s row of `status`.
fn status_row(d: &Daemon, backend: &str) -> spillway_shared::proto::BackendStatus {
    d.status().backends.into_iter().find(|b| b.backend == backend).unwrap()
}

fn applied(d: &Daemon, req: spillway_shared::proto::Request) {
    let r = d.edit_request(req);
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
}

/// The value of metric `name` of backend `backend`.
fn backend_metric(d: &Daemon, name: &str, backend: &str) -> f64 {
    let text = crate::metrics::render(d);
    let prefix = format!("spillway_{name}{{");
    let line = text.lines().find(|l| l.starts_with(&prefix) && l.contains(&format!("backend=\"{backend}\""))).unwrap_or_else(|| panic!("no {name} of {backend}:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A backend whose capacity the operator set to zero takes no new connections: `status`
/// says drained, and so does `spillway_backend_drained` (fresh-user QA: `capacity_scaler=0`
/// showed healthy, drained false, and no metric said so).
#[test]
fn a_backend_with_zero_capacity_is_drained() {
    let d = daemon();
    assert!(!status_row(&d, "b1").drained);
    assert_eq!(backend_metric(&d, "backend_drained", "b1"), 0.0);
    applied(&d, set("web", "b1", &[("capacity_scaler", "0")], None));
    let b1 = status_row(&d, "b1");
    assert!(b1.drained && b1.enabled && b1.healthy, "{b1:?}");
    assert_eq!(backend_metric(&d, "backend_drained", "b1"), 1.0);
    applied(&d, set("web", "b1", &[("capacity_scaler", "1.0")], None));
    applied(&d, set("web", "b1", &[("capacity_cps", "0")], None));
    assert!(status_row(&d, "b1").drained);
    assert!(!status_row(&d, "b2").drained);
}

/// A group whose endpoints are all disabled is disabled, as a disabled one-address backend
/// is, and its health is its endpoints' own (fresh-user QA: "UNHEALTHY 0/0" and
/// `spillway_backend_healthy` 0 for two healthy endpoints).
#[test]
fn a_group_with_every_endpoint_disabled_is_disabled_not_unhealthy() {
    let d = daemon();
    applied(&d, ep_req("add", "b2", "e2", &[("address", "10.0.1.12"), ("mac", "02:00:00:00:0b:12")]));
    applied(&d, ep_req("set", "b2", "b2", &[("enabled", "false")]));
    let g = status_row(&d, "b2");
    assert!(g.enabled && g.healthy && (g.endpoints, g.healthy_endpoints) == (1, 1), "{g:?}");
    applied(&d, ep_req("set", "b2", "e2", &[("enabled", "false")]));
    let g = status_row(&d, "b2");
    assert!(!g.enabled && g.healthy, "{g:?}");
    assert_eq!((backend_metric(&d, "backend_enabled", "b2"), backend_metric(&d, "backend_healthy", "b2")), (0.0, 1.0));
}
