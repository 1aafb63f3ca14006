//! `[services.health_check]` probe fields (`type = "https"`, `sni`, `verify`, `host`,
//! `request`, `response`): parsing, round trip and validation messages that name the field,
//! the value and what is allowed (docs/config.md "Health checks").

use spillway_shared::config::{Config, HealthCheckKind, HEALTH_MAX_PAYLOAD};

const BASE: &str = r#"
[dataplane]
eal_args = ["--no-huge"]
workers = 1

[[ports]]
name = "p0"
device = "net_null0"

[[services]]
name = "web"
vip = "10.0.0.100"
port = 443

[[services.backends]]
name = "b1"
address = "10.0.1.1"
mac = "02:00:00:00:01:01"
"#;

fn with_check(check: &str) -> Result<Config, String> {
    let text = format!("{BASE}\n[services.health_check]\n{check}\n");
    let c = Config::from_toml(&text)?;
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

fn err(check: &str) -> String {
    with_check(check).expect_err("must be rejected")
}

#[test]
fn https_check_with_every_field_round_trips() {
    let c = with_check(
        "type = \"https\"\npath = \"/healthz\"\nsni = \"web.example.com\"\nverify = true\nhost = \"web.example.com\"\nresponse = \"ok\"\nexpected_status = 204",
    )
    .unwrap();
    let h = c.services[0].health_check.clone().unwrap();
    assert_eq!(h.kind, HealthCheckKind::Https);
    assert_eq!(h.sni.as_deref(), Some("web.example.com"));
    assert!(h.verify);
    assert_eq!(h.host.as_deref(), Some("web.example.com"));
    assert_eq!(h.response.as_deref(), Some("ok"));
    assert_eq!(h.expected_status(), 204);
    assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
}

#[test]
fn defaults_do_not_verify_and_have_no_payloads() {
    let h = with_check("type = \"https\"").unwrap().services[0].health_check.clone().unwrap();
    assert!(!h.verify && h.sni.is_none() && h.host.is_none() && h.response.is_none() && h.request.is_none());
    // The defaults are not written back.
    let text = with_check("type = \"https\"").unwrap().to_toml();
    assert!(!text.contains("verify") && !text.contains("sni"), "{text}");
}

#[test]
fn tcp_request_and_response() {
    let h = with_check("type = \"tcp\"\nrequest = \"PING\\r\\n\"\nresponse = \"+PONG\"").unwrap().services[0]
        .health_check
        .clone()
        .unwrap();
    assert_eq!((h.request.as_deref(), h.response.as_deref()), (Some("PING\r\n"), Some("+PONG")));
}

#[test]
fn fields_of_another_kind_are_rejected_with_the_field_path() {
    let e = err("type = \"http\"\nsni = \"a.example\"");
    assert_eq!(e, "services[0].health_check.sni = a.example: only allowed with type = \"https\" (type is \"http\")");
    let e = err("type = \"tcp\"\nverify = true");
    assert!(e.starts_with("services[0].health_check.verify = true: only allowed with type = \"https\""), "{e}");
    let e = err("type = \"tcp\"\nhost = \"x\"");
    assert!(e.starts_with("services[0].health_check.host = x: only allowed with type = \"http\" or \"https\""), "{e}");
    let e = err("type = \"http\"\nrequest = \"x\"");
    assert!(e.starts_with("services[0].health_check.request = x: only allowed with type = \"tcp\""), "{e}");
    let e = err("type = \"udp\"\nresponse = \"x\"");
    assert!(e.starts_with("services[0].health_check.response = x: only allowed with type = \"tcp\", \"http\" or \"https\""), "{e}");
}

#[test]
fn bad_values_name_value_and_range() {
    let e = err("type = \"https\"\nsni = \"bad name\"");
    assert!(e.starts_with("services[0].health_check.sni = bad name: must be a DNS name"), "{e}");
    let e = err("type = \"https\"\nhost = \"a\\r\\nX-Evil: 1\"");
    assert!(e.starts_with("services[0].health_check.host = "), "{e}");
    assert!(e.contains("without spaces or control characters"), "{e}");
    let e = err("type = \"https\"\npath = \"/a b\"");
    assert!(e.starts_with("services[0].health_check.path = /a b: must start with '/'"), "{e}");
    let e = err("type = \"http\"\nresponse = \"\"");
    assert_eq!(e, format!("services[0].health_check.response = \"\" (0 bytes): must be in 1..={HEALTH_MAX_PAYLOAD} (length in bytes)"));
    let long = "x".repeat(HEALTH_MAX_PAYLOAD + 1);
    let e = err(&format!("type = \"tcp\"\nrequest = \"{long}\""));
    assert!(e.starts_with("services[0].health_check.request = "), "{e}");
    assert!(e.ends_with(&format!("({} bytes): must be in 1..={HEALTH_MAX_PAYLOAD} (length in bytes)", HEALTH_MAX_PAYLOAD + 1)), "{e}");
    // At the limit: accepted.
    let at = "x".repeat(HEALTH_MAX_PAYLOAD);
    with_check(&format!("type = \"tcp\"\nrequest = \"{at}\"\nresponse = \"{at}\"")).unwrap();
}
