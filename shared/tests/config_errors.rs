//! Uniform configuration errors: every refused value names the
//! field path, the value and the allowed range — out-of-type integers included — and the
//! rows of `spillway_shared::config::limits::LIMITS` are the ranges the code enforces, boundary by
//! boundary. Over 600 lines: every refusal the loader words is pinned here against one base
//! config and its helpers, so the messages read alike.

use spillway_shared::config::Config;
use spillway_shared::config::limits::{Range, LIMITS};

const BASE: &str = r#"
[dataplane]
workers = 1

[[ports]]
name = "p0"
device = "net_null0"

[forwarder]
zone = "z1"
region = "r1"

[[zones]]
zone = "z1"
region = "r1"

[[zones]]
zone = "z2"
region = "r1"

[rtt_ms.z1]
z2 = 1.0

[conntrack]
capacity_per_worker = 4096

[[services]]
name = "web"
vip = "10.0.0.100"
port = 80

[services.health_check]
type = "http"
check_interval_sec = 5.0

[[services.backends]]
name = "b1"
zone = "z1"

[[services.backends.endpoints]]
name = "e1"
address = "10.0.1.1"
"#;

/// Loads and validates; the error text as the daemon prints it.
fn load(text: &str) -> Result<Config, String> {
    let c = Config::from_toml(text)?;
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// BASE with `path` (a LIMITS pattern; `[]` = the first element) set to `value`.
fn with(path: &str, value: toml::Value) -> String {
    let mut root: toml::Table = toml::from_str(BASE).unwrap();
    let parts: Vec<&str> = path.split('.').collect();
    let mut t = &mut root;
    for part in &parts[..parts.len() - 1] {
        let (name, indexed) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (*part, false),
        };
        let v = t.entry(name.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
        t = if indexed {
            v.as_array_mut().unwrap().get_mut(0).unwrap().as_table_mut().unwrap()
        } else {
            v.as_table_mut().unwrap()
        };
    }
    t.insert(parts[parts.len() - 1].to_string(), value);
    toml::to_string(&root).unwrap()
}

/// [`with`], plus the sibling values a row's bounds need under a cross-field rule:
/// `[neighbors]` wants `retry_ms ≤ refresh_sec × 1000 < expiry_sec × 1000`, so each of its
/// bounds is tried with siblings that leave it the only rule in play.
fn with_companions(path: &str, value: toml::Value) -> String {
    let siblings: &[(&str, i64)] = match path {
        "neighbors.refresh_sec" => &[("expiry_sec", 86_400), ("retry_ms", 100)],
        "neighbors.expiry_sec" => &[("refresh_sec", 1), ("retry_ms", 100)],
        "neighbors.retry_ms" => &[("refresh_sec", 3600), ("expiry_sec", 86_400)],
        _ => &[],
    };
    let mut root: toml::Table = toml::from_str(&with(path, value)).unwrap();
    for (k, v) in siblings {
        if let Some(t) = root.get_mut("neighbors").and_then(|n| n.as_table_mut()) {
            t.insert(k.to_string(), toml::Value::Integer(*v));
        }
    }
    toml::to_string(&root).unwrap()
}

fn concrete(pattern: &str) -> String {
    pattern.replace("[]", "[0]")
}

#[test]
fn base_config_is_valid() {
    load(BASE).unwrap();
}

/// For every numeric row: the bounds load, the values just outside (and values outside the
/// field's integer type) are refused with the path, the value and the row's rule.
#[test]
fn every_numeric_row_is_the_enforced_range() {
    let mut checked = 0;
    for l in LIMITS {
        if l.path.contains('<') || l.path == "services[].backends" {
            continue; // rtt_ms rows and the backend count have their own tests
        }
        let path = concrete(l.path);
        let (inside, outside): (Vec<toml::Value>, Vec<toml::Value>) = match l.range {
            Range::Int(lo, hi) | Range::Prime(lo, hi) => {
                let (lo, hi) = if let Range::Prime(..) = l.range { (251, 1_048_573) } else { (lo, hi) };
                (
                    vec![toml::Value::Integer(lo), toml::Value::Integer(hi)],
                    vec![toml::Value::Integer(lo - 1), toml::Value::Integer(hi + 1), toml::Value::Integer(-1), toml::Value::Integer(i64::from(u32::MAX) + 1)],
                )
            }
            Range::ByProtocol { tcp, .. } => (
                vec![toml::Value::Integer(tcp.0), toml::Value::Integer(tcp.1)],
                vec![toml::Value::Integer(tcp.0 - 1), toml::Value::Integer(tcp.1 + 1), toml::Value::Integer(-1)],
            ),
            Range::Float(lo, hi) => (
                vec![toml::Value::Float(lo), toml::Value::Float(hi)],
                vec![toml::Value::Float(lo - 0.001 * (1.0 + lo.abs())), toml::Value::Float(hi * 1.001 + 0.001), toml::Value::Float(f64::NAN)],
            ),
            Range::ZeroOrFloat(lo, hi) => (
                vec![toml::Value::Float(0.0), toml::Value::Float(lo), toml::Value::Float(hi)],
                vec![toml::Value::Float(lo / 2.0), toml::Value::Float(hi + 0.01), toml::Value::Float(-0.5)],
            ),
            Range::FloatUpTo(lo, _) => (
                vec![toml::Value::Float(lo), toml::Value::Float(5.0)],
                vec![toml::Value::Float(lo / 2.0), toml::Value::Float(5.5)],
            ),
            Range::OneOf(_) | Range::Rule(_) => continue,
        };
        for v in inside {
            let text = with_companions(l.path, v.clone());
            if let Err(e) = load(&text) {
                panic!("{path} = {v} is inside {} but refused: {e}", l.range.doc());
            }
        }
        for v in outside {
            let text = with_companions(l.path, v.clone());
            let e = match load(&text) {
                Ok(_) => panic!("{path} = {v} is outside {} but accepted", l.range.doc()),
                Err(e) => e,
            };
            let shown = match &v {
                toml::Value::Float(f) if f.is_nan() => "nan".to_string(),
                other => other.to_string(),
            };
            assert!(e.contains(&format!("{path} = ")), "{path} = {v}: error does not name the path: {e}");
            assert!(e.to_lowercase().contains(&shown.to_lowercase()), "{path} = {v}: error does not name the value: {e}");
            assert!(e.contains("must "), "{path} = {v}: error does not state the rule: {e}");
            if !matches!(l.range, Range::FloatUpTo(..)) {
                assert!(e.contains(&l.allowed()), "{path} = {v}: error does not give the range {:?}: {e}", l.allowed());
            }
            checked += 1;
        }
    }
    assert!(checked > 60, "only {checked} cases");
}

#[test]
fn issue_examples_name_path_value_and_range() {
    let e = load(&BASE.replace("name = \"b1\"", "name = \"b1\"\nweight = -1")).unwrap_err();
    assert!(e.starts_with("services[0].backends[0].weight = -1: must be in 1..=1000"), "{e}");
    assert!(e.contains("line "), "{e}");
    let e = load(&BASE.replace("port = 80", "port = 65536")).unwrap_err();
    assert!(e.starts_with("services[0].port = 65536: must be in 1..=65535"), "{e}");
    let e = load(&BASE.replace("workers = 1", "workers = 1\nidle_sleep_us = -1")).unwrap_err();
    assert!(e.starts_with("dataplane.idle_sleep_us = -1: must be in 0..=10000"), "{e}");
    let e = load(&BASE.replace("port = 80", "port = \"eighty\"")).unwrap_err();
    assert!(e.starts_with("services[0].port = \"eighty\": must be in 1..=65535"), "{e}");
    let e = load(&BASE.replace("expected_status", "x").replace("type = \"http\"", "type = \"http\"\nexpected_status = 70000")).unwrap_err();
    assert!(e.starts_with("services[0].health_check.expected_status = 70000: must be in 100..=599"), "{e}");
    let e = load(&BASE.replace("type = \"http\"", "type = \"http\"\nbogus = 1")).unwrap_err();
    assert!(e.starts_with("services[0].health_check") && e.contains("bogus"), "{e}");
}

#[test]
fn a_short_interval_alone_is_valid_and_the_timeout_follows_it() {
    let c = load(&BASE.replace("check_interval_sec = 5.0", "check_interval_sec = 1")).unwrap();
    let h = c.services[0].health_check.as_ref().unwrap();
    assert_eq!((h.check_interval_sec, h.timeout_sec), (1.0, 1.0));
    let c = load(&BASE.replace("check_interval_sec = 5.0", "check_interval_sec = 30")).unwrap();
    assert_eq!(c.services[0].health_check.as_ref().unwrap().timeout_sec, 5.0);
    // A timeout the file does give is still checked against the interval.
    let e = load(&BASE.replace("check_interval_sec = 5.0", "check_interval_sec = 1\ntimeout_sec = 2")).unwrap_err();
    assert!(e.starts_with("services[0].health_check.timeout_sec = 2: must be in [0.01, 1.0]"), "{e}");
}

#[test]
fn rtt_zones_and_forwarder_region_are_checked() {
    let e = load(&BASE.replace("z2 = 1.0", "z9 = 1.0")).unwrap_err();
    assert!(e.starts_with("rtt_ms.z1.z9 = z9: must name a zone of [[zones]] (z1, z2)"), "{e}");
    let e = load(&BASE.replace("[rtt_ms.z1]", "[rtt_ms.y1]")).unwrap_err();
    assert!(e.starts_with("rtt_ms.y1 = y1: must name a zone"), "{e}");
    // a zone's distance to itself is 0 or absent; symmetric: both ways alike, or refused
    // naming a direction out of range first
    for (with, want) in [
        ("z2 = -1.0", "rtt_ms.z1.z2 = -1: must be in [0.0, 1000000.0]"),
        ("z2 = 1.0\nz1 = 5.0", "rtt_ms.z1.z1 = 5: must be 0 or absent: the distance of zone \"z1\" to itself is 0"),
        ("z2 = 1.0\n\n[rtt_ms.z2]\nz1 = -5.0", "rtt_ms.z2.z1 = -5: must be in [0.0"),
    ] {
        let e = load(&BASE.replace("z2 = 1.0", with)).unwrap_err();
        assert!(e.starts_with(want), "{e}");
    }
    load(&BASE.replace("z2 = 1.0", "z2 = 1.0\nz1 = 0.0\n\n[rtt_ms.z2]\nz1 = 1.0")).expect("0 to itself, both directions alike");
    for (a, b) in [("[rtt_ms.z1]\nz2 = 5.0", "[rtt_ms.z2]\nz1 = 50.0"), ("[rtt_ms.z2]\nz1 = 50.0", "[rtt_ms.z1]\nz2 = 5.0")] {
        let e = load(&BASE.replace("[rtt_ms.z1]\nz2 = 1.0", &format!("{a}\n\n{b}"))).unwrap_err();
        assert!(e.starts_with("rtt_ms.z1.z2 = 5: must equal rtt_ms.z2.z1 = 50"), "either order in the file: {e}");
    }
    let e = load(&BASE.replacen("region = \"r1\"", "region = \"r2\"", 1)).unwrap_err();
    assert!(e.starts_with("forwarder.region = r2: must be \"r1\""), "{e}");
}

#[test]
fn short_zonal_affinity_names_are_aliases() {
    for (short, full) in [("SPILL_CROSS_ZONE", "ZONAL_AFFINITY_SPILL_CROSS_ZONE"), ("STAY_WITHIN_ZONE", "ZONAL_AFFINITY_STAY_WITHIN_ZONE"), ("DISABLED", "ZONAL_AFFINITY_DISABLED")] {
        let c = load(&BASE.replace("port = 80", &format!("port = 80\nzonal_affinity = \"{short}\""))).unwrap();
        assert!(c.to_toml().contains(full), "{short} is written back as {full}");
    }
    let e = load(&BASE.replace("port = 80", "port = 80\nzonal_affinity = \"SPILL\"")).unwrap_err();
    assert!(e.contains("services[0].zonal_affinity") && e.contains("ZONAL_AFFINITY_SPILL_CROSS_ZONE"), "{e}");
}

#[test]
fn small_maglev_tables_are_a_warning_not_an_error() {
    let mut text = BASE.replace("port = 80", "port = 80\nmaglev_table_size = 251");
    for i in 2..=3 {
        text.push_str(&format!("\n[[services.backends]]\nname = \"b{i}\"\naddress = \"10.0.1.{i}\"\nzone = \"z1\"\n"));
    }
    let c = load(&text).unwrap();
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("services[0].maglev_table_size = 251: under 100 x 3 backends"), "{w:?}");
    assert!(load(BASE).unwrap().warnings().is_empty());
}

/// Type errors serde reports without a range (a string where a number goes, an integer
/// beyond 64 bits) still name the field and its allowed range (new-user test).
#[test]
fn type_errors_name_the_range_too() {
    let base = "[dataplane]\nidle_sleep_us = 5\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nspillover_ratio = 0.5\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\n";
    let e = spillway_shared::config::Config::from_toml(&base.replace("spillover_ratio = 0.5", "spillover_ratio = \"high\"")).unwrap_err();
    assert!(e.contains("services[0].spillover_ratio = \"high\"") && e.contains("must be in [0.0, 1.0]"), "{e}");
    let e = spillway_shared::config::Config::from_toml(&base.replace("idle_sleep_us = 5", "idle_sleep_us = 99999999999999999999")).unwrap_err();
    assert!(e.contains("dataplane.idle_sleep_us") && e.contains("must be in 0..=10000"), "{e}");
    // Errors of the TOML parser itself (beyond i64, beyond f64) name the value as written
    // and the index of the table holding it, counted from its `[[...]]` header (fresh-user
    // QA: `services[].spillover_ratio: invalid floating-point number`).
    let two = format!("{base}[[services]]\nname = \"api\"\nvip = \"10.0.0.101\"\nport = 81\nspillover_ratio = 0.5\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.2\"\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.3\"\n");
    for (from, to, want) in [
        ("idle_sleep_us = 5", "idle_sleep_us = 99999999999999999999", "dataplane.idle_sleep_us = 99999999999999999999: "),
        ("spillover_ratio = 0.5\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.2\"", "spillover_ratio = 1e309\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.2\"", "services[1].spillover_ratio = 1e309: "),
        ("name = \"b2\"", "name = \"b2\"\npriority = 18446744073709551616", "services[1].backends[1].priority = 18446744073709551616: "),
    ] {
        assert!(two.contains(from), "{from}");
        let e = spillway_shared::config::Config::from_toml(&two.replacen(from, to, 1)).unwrap_err();
        assert!(e.starts_with(want) && e.contains("must be in") && e.contains("(line "), "{to}: {e}");
    }
}

/// An integer field takes a plain integer only: `1e3` and `80.0` are TOML floats and are
/// refused naming the field, the value and the range, even when integral (/// live edits: `weight=1e3` was accepted as 1000).
#[test]
fn integer_fields_refuse_floats_even_integral_ones() {
    for (from, to, path, range) in [
        ("name = \"b1\"", "name = \"b1\"\nweight = 1e3", "services[0].backends[0].weight = 1e3", "must be in 1..=1000"),
        ("name = \"b1\"", "name = \"b1\"\nweight = 80.0", "services[0].backends[0].weight = 80.0", "must be in 1..=1000"),
        ("port = 80", "port = 8e1", "services[0].port = 8e1", "must be in 1..=65535"),
        ("workers = 1", "workers = 1.0", "dataplane.workers = 1.0", "must be in 1..=64"),
    ] {
        let e = load(&BASE.replace(from, to)).unwrap_err();
        assert!(e.starts_with(path) && e.contains(range) && e.contains("plain integer"), "{to}: {e}");
    }
    // plain integers still load
    assert_eq!(load(&BASE.replace("name = \"b1\"", "name = \"b1\"\nweight = 1000")).unwrap().services[0].backends[0].weight, 1000);
}

/// Every probe field given for a kind that does not use it is refused, naming the field,
/// its value and the kinds that use it (new-user test: `path`, `expected_status`,
/// `udp_request` and `udp_expect` were accepted silently on `type = "tcp"`).
#[test]
fn probe_fields_of_another_kind_are_refused() {
    for (kind, field, value, kinds) in [
        ("tcp", "path", "\"/healthz\"", "only allowed with type = \"http\" or \"https\" (type is \"tcp\")"),
        ("udp", "path", "\"/x\"", "only allowed with type = \"http\" or \"https\" (type is \"udp\")"),
        ("tcp", "expected_status", "204", "only allowed with type = \"http\" or \"https\" (type is \"tcp\")"),
        ("tcp", "udp_request", "\"PING\"", "only allowed with type = \"udp\""),
        ("http", "udp_request", "\"PING\"", "only allowed with type = \"udp\""),
        ("https", "udp_expect", "\"PONG\"", "only allowed with type = \"udp\""),
    ] {
        let text = BASE.replace("type = \"http\"", &format!("type = \"{kind}\"\n{field} = {value}"));
        let e = load(&text).unwrap_err();
        let shown = value.trim_matches('"');
        assert!(e.starts_with(&format!("services[0].health_check.{field} = {shown}: {kinds}")), "{kind} {field}: {e}");
    }
    // Exactly the defaults an older daemon wrote into every live-edited check still load
    // for any kind (upgrade).
    load(&BASE.replace("type = \"http\"", "type = \"tcp\"\npath = \"/\"\nexpected_status = 200\nudp_request = \"\"\nudp_expect = \"\"")).unwrap();
    // The fields of the kind itself still load.
    load(&BASE.replace("type = \"http\"", "type = \"https\"\npath = \"/healthz\"\nexpected_status = 204")).unwrap();
    load(&BASE.replace("type = \"http\"", "type = \"udp\"\nudp_request = \"PING\"\nudp_expect = \"PONG\"")).unwrap();
}

/// What a config does not give is not written back: a `type = "tcp"` check is written as
/// just that, not with every other kind's default (`path = "/"`, `udp_expect = ""`, ...).
#[test]
fn a_tcp_check_is_written_without_other_kinds_defaults() {
    let c = load(&BASE.replace("type = \"http\"", "type = \"tcp\"")).unwrap();
    let text = c.to_toml();
    let hc = text.split("[services.health_check]").nth(1).unwrap().split("\n[").next().unwrap();
    assert_eq!(hc.trim(), "type = \"tcp\"", "{text}");
    assert_eq!(Config::from_toml(&text).unwrap(), c, "the short form reads back the same");
    let c = load(&BASE.replace("check_interval_sec = 5.0", "check_interval_sec = 1\nhealthy_threshold = 3")).unwrap();
    assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
}

/// The same `[[client_zones]] prefix` twice is refused at the second, naming both indices
/// (new-user test: it was accepted, and which zone won was up to the table's order).
#[test]
fn duplicate_client_zone_prefixes_are_refused() {
    let cz = "\n[[client_zones]]\nprefix = \"10.1.0.0/16\"\nzone = \"z1\"\n\n[[client_zones]]\nprefix = \"10.2.0.0/16\"\nzone = \"z2\"\n";
    load(&format!("{BASE}{cz}")).unwrap();
    for second in ["zone = \"z2\"", "zone = \"z1\"", "compatible = false"] {
        let text = format!("{BASE}{cz}\n[[client_zones]]\nprefix = \"10.1.0.0/16\"\n{second}\n");
        let e = load(&text).unwrap_err();
        assert!(e.starts_with("client_zones[2].prefix = 10.1.0.0/16: must be unique: client_zones[0] already has this prefix"), "{second}: {e}");
    }
    let text = "[[client_zones]]\nprefix = \"fd01::/64\"\nzone = \"z1\"\n[[client_zones]]\nprefix = \"fd01::/64\"\ncompatible = false\n";
    let e = load(&format!("{BASE}{text}")).unwrap_err();
    assert!(e.starts_with("client_zones[1].prefix = fd01::/64: must be unique: client_zones[0]"), "{e}");
}

/// Addresses no client or backend can use are refused by validation (and so by
/// `--check`): a VIP that is unspecified, broadcast, multicast or loopback, or a port's own
/// address; a backend or endpoint address that is a VIP; a core listed twice.
#[test]
fn impossible_addresses_and_cores_are_refused() {
    // link-local and IPv4-mapped VIPs too: their clients' sources are martian
    for vip in ["0.0.0.0", "::", "255.255.255.255", "224.0.0.5", "ff02::1", "127.0.0.1", "::1", "169.254.1.1", "fe80::1", "::ffff:10.0.0.9"] {
        let e = load(&BASE.replace("vip = \"10.0.0.100\"", &format!("vip = \"{vip}\""))).unwrap_err();
        assert!(e.starts_with(&format!("services[0].vip = {vip}: must be a unicast IPv4 or IPv6 address a client can reach (not unspecified, broadcast, multicast, loopback, link-local or IPv4-mapped)")), "{vip}: {e}");
    }
    let e = load(&BASE.replace("device = \"net_null0\"", "device = \"net_null0\"\naddress = \"10.0.0.100\"")).unwrap_err();
    assert!(e.starts_with("services[0].vip = 10.0.0.100: must differ from the port's own address (ports[0].address = 10.0.0.100)"), "{e}");
    let six = BASE.replace("vip = \"10.0.0.100\"", "vip = \"fd00::100\"\nforwarding_mode = \"IPIP\"");
    load(&six.replace("device = \"net_null0\"", "device = \"net_null0\"\naddress = \"10.9.0.1\"\naddress6 = \"fd00::1\"")).unwrap();
    let e = load(&six.replace("device = \"net_null0\"", "device = \"net_null0\"\naddress = \"10.9.0.1\"\naddress6 = \"fd00::100\"")).unwrap_err();
    assert!(e.starts_with("services[0].vip = fd00::100: must differ from the port's own address (ports[0].address6 = fd00::100)"), "{e}");
    // An endpoint, or a single-endpoint backend, at a VIP (its own service's or another's).
    let e = load(&BASE.replace("address = \"10.0.1.1\"", "address = \"10.0.0.100\"")).unwrap_err();
    assert!(e.starts_with("services[0].backends[0].endpoints[0].address = 10.0.0.100: must not be a VIP (services[0].vip = 10.0.0.100)"), "{e}");
    let other = "\n[[services]]\nname = \"dns\"\nvip = \"10.0.0.53\"\nport = 53\nprotocol = \"udp\"\n\n[[services.backends]]\nname = \"d1\"\naddress = \"10.0.0.100\"\nzone = \"z1\"\n";
    let e = load(&format!("{BASE}{other}")).unwrap_err();
    assert!(e.starts_with("services[1].backends[0].address = 10.0.0.100: must not be a VIP (services[0].vip = 10.0.0.100)"), "{e}");
    load(&format!("{BASE}{}", other.replace("address = \"10.0.0.100\"", "address = \"10.0.1.53\""))).unwrap();
    // worker_cores: each core once.
    load(&BASE.replace("workers = 1", "workers = 2\nworker_cores = [1, 2]")).unwrap();
    let e = load(&BASE.replace("workers = 1", "workers = 2\nworker_cores = [1, 1]")).unwrap_err();
    assert!(e.starts_with("dataplane.worker_cores[1] = 1: must differ from the other cores (dataplane.worker_cores[0] is also 1)"), "{e}");
}

/// `packet_capture` (dpdk-dumpcap) needs EAL multi-process: refused with `--no-shconf` or
/// `--in-memory` in `eal_args`, naming the argument to remove.
#[test]
fn packet_capture_needs_multi_process() {
    let with = |eal: &str| BASE.replace("workers = 1", &format!("workers = 1\npacket_capture = true\neal_args = [{eal}]"));
    load(&with("\"--no-huge\"")).unwrap();
    for a in ["--no-shconf", "--in-memory"] {
        let e = load(&with(&format!("\"--no-huge\", \"{a}\""))).unwrap_err();
        assert!(e.starts_with(&format!("dataplane.packet_capture = true: needs EAL multi-process for dpdk-dumpcap (a secondary process): remove {a} from dataplane.eal_args")), "{e}");
    }
}

/// The control socket path must be usable (an empty one failed only at start, naming no
/// field), but only the path actually used is checked (`check_socket_path`, called by the
/// daemon with `--socket` or `dataplane.socket`): a config whose own path is unusable
/// loads, with a warning, since `--socket` may override it. An over-long value is echoed
/// cut, with its length.
#[test]
fn control_socket_path_and_long_values() {
    use spillway_shared::config::check_socket_path;
    let with = |sock: &str| BASE.replace("workers = 1", &format!("workers = 1\nsocket = \"{sock}\""));
    load(&with("/run/spillway/ctl.sock")).unwrap();
    assert!(check_socket_path("dataplane.socket", b"/run/spillway/ctl.sock").is_ok());
    assert!(check_socket_path("--socket", &[b'/'; 107]).is_ok());
    for bad in [String::new(), format!("/tmp/{}", "s".repeat(110))] {
        load(&with(&bad)).unwrap();
        let cfg = Config::from_toml(&with(&bad)).unwrap();
        assert!(cfg.warnings().iter().any(|w| w.starts_with("dataplane.socket = ") && w.ends_with("the daemon starts only with --socket PATH")), "{:?}", cfg.warnings());
        for field in ["dataplane.socket", "--socket"] {
            let e = check_socket_path(field, bad.as_bytes()).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{field} = ")), "{e}");
            assert!(e.contains("must be a file path of 1 to 107 bytes"), "{e}");
            assert!(e.len() < 400, "the value is echoed cut: {e}");
        }
    }
    assert!(check_socket_path("--socket", b"/tmp/a\0b").is_err(), "a NUL byte");
    let e = load(&BASE.replace("zone = \"z2\"", &format!("zone = \"{}\"", "z".repeat(100_000)))).unwrap_err();
    assert!(e.contains("[100002 characters]") && e.len() < 600, "a 100,000-character name is not echoed in full: {} bytes", e.len());
}

/// One rule for service, backend, endpoint and zone names: 1 to 63 characters of
/// `[A-Za-z0-9._-]`; the error shows the name quoted (new-user test: `"my web"`,
/// `"a/b"` and names with a newline were accepted for services and backends).
#[test]
fn names_are_short_and_safe() {
    let long = "a".repeat(64);
    let ok63 = "a".repeat(63);
    for (from, field) in [
        ("name = \"web\"", "services[0].name"),
        ("name = \"b1\"", "services[0].backends[0].name"),
        ("name = \"e1\"", "services[0].backends[0].endpoints[0].name"),
    ] {
        for bad in ["", "my web", "a/b", "web\\n", "tab\\there", "caf\u{e9}", long.as_str()] {
            let e = load(&BASE.replace(from, &from.replace(from.split('"').nth(1).unwrap(), bad))).unwrap_err();
            assert!(e.starts_with(&format!("{field} = \"")), "{field} {bad:?}: {e}");
            assert!(e.contains(": must be 1 to 63 characters, each an ASCII letter, a digit, '.', '_' or '-'"), "{field} {bad:?}: {e}");
        }
        for good in ["web-1", "b_2.prod", ok63.as_str(), "10.0.1.1"] {
            load(&BASE.replace(from, &from.replace(from.split('"').nth(1).unwrap(), good))).unwrap();
        }
    }
    // Zone names: [[zones]] (and so every zone naming one of them).
    let e = load(&BASE.replace("zone = \"z2\"\nregion", "zone = \"z 2\"\nregion").replace("z2 = 1.0", "\"z 2\" = 1.0")).unwrap_err();
    assert!(e.starts_with("zones[1].zone = \"z 2\": must be 1 to 63 characters"), "{e}");
    let e = load("[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nzone = \"z/1\"\n").unwrap_err();
    assert!(e.starts_with("services[0].backends[0].zone = \"z/1\": must be 1 to 63 characters"), "{e}");
}

/// Review finding: an IPv6 VIP over IPIP/GUE needs `encap_mtu` ≥ 1280 + 48, or
/// the Packet Too Big it sends (never below 1280) would repeat for ever.
#[test]
fn ipv6_tunnels_carry_the_ipv6_minimum_mtu() {
    let cfg = |mtu: u16, mode: &str| {
        format!(
            "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress6 = \"fd00::2\"\n[[services]]\nname = \"web6\"\nvip = \"fd00::100\"\nport = 80\nforwarding_mode = \"{mode}\"\nencap_mtu = {mtu}\n[[services.backends]]\nname = \"b1\"\naddress = \"fd00:21::1\"\nmac = \"02:00:00:00:21:01\"\n"
        )
    };
    let e = Config::from_toml(&cfg(1300, "GUE")).and_then(|c| c.validate().map_err(|e| e.to_string())).unwrap_err();
    assert!(e.contains("services[0].encap_mtu = 1300") && e.contains("at least 1328"), "{e}");
    Config::from_toml(&cfg(1328, "GUE")).unwrap().validate().unwrap();
    Config::from_toml(&cfg(1300, "L2_DSR")).unwrap().validate().unwrap();
}

/// Values that parse but can never work are refused, naming the field: an empty region
/// (as an empty zone is), a group or all-zero `[[ports]] mac` (our source MAC: backends'
/// MACs are held to the same rule), an empty EAL argument, and a relative
/// `dataplane.socket` (resolved from the daemon's working directory, not the config's).
#[test]
fn empty_region_group_port_mac_empty_eal_argument_and_relative_socket_are_refused() {
    let cases = [
        (BASE.replacen("zone = \"z2\"\nregion = \"r1\"", "zone = \"z2\"\nregion = \"\"", 1), "zones[1].region", "an empty region"),
        (BASE.replace("device = \"net_null0\"", "device = \"net_null0\"\nmac = \"01:00:00:00:00:01\""), "ports[0].mac", "unicast, non-zero"),
        (BASE.replace("device = \"net_null0\"", "device = \"net_null0\"\nmac = \"ff:ff:ff:ff:ff:ff\""), "ports[0].mac", "unicast, non-zero"),
        (BASE.replace("device = \"net_null0\"", "device = \"net_null0\"\nmac = \"00:00:00:00:00:00\""), "ports[0].mac", "unicast, non-zero"),
        (BASE.replace("workers = 1", "workers = 1\neal_args = [\"--no-pci\", \"\"]"), "dataplane.eal_args[1]", "must not be empty"),
        (BASE.replace("workers = 1", "workers = 1\neal_args = [\" \"]"), "dataplane.eal_args[0]", "must not be empty"),
    ];
    for (text, field, why) in cases {
        let e = load(&text).unwrap_err();
        assert!(e.starts_with(&format!("{field} = ")) && e.contains(why), "{field}: {e}");
    }
    load(&BASE.replace("device = \"net_null0\"", "device = \"net_null0\"\nmac = \"02:00:00:00:00:01\"")).unwrap();
    load(&BASE.replace("workers = 1", "workers = 1\neal_args = [\"--no-pci\"]")).unwrap();
    use spillway_shared::config::check_socket_path;
    for rel in ["rel.sock", "./ctl.sock", "run/spillway/ctl.sock"] {
        let e = check_socket_path("dataplane.socket", rel.as_bytes()).unwrap_err().to_string();
        assert!(e.starts_with("dataplane.socket = ") && e.contains("absolute path") && e.contains("working directory"), "{e}");
        assert!(check_socket_path("--socket", rel.as_bytes()).is_ok(), "--socket {rel} is the operator's own path");
        let cfg = Config::from_toml(&BASE.replace("workers = 1", &format!("workers = 1\nsocket = \"{rel}\""))).unwrap();
        assert!(cfg.warnings().iter().any(|w| w.contains("absolute path")), "{:?}", cfg.warnings());
    }
}

/// Negative zero (`-0.0`, a TOML float that passes every `>= 0.0` check) reads as `0.0` in
/// every float field whose range admits zero — file and live edit alike (both decode
/// through serde) — so `config show`, an edit's diff and the written-back file never show
/// `-0.0` (fresh-user QA: `spillover_ratio=-0.0` was kept and shown as `-0.0`).
#[test]
fn negative_zero_reads_as_zero_in_every_float_field() {
    let mut checked = 0;
    for l in LIMITS {
        let zero_ok = match l.range {
            Range::Float(lo, _) => lo == 0.0,
            Range::ZeroOrFloat(..) => true,
            _ => false,
        };
        if !zero_ok {
            continue;
        }
        let text = if l.path.starts_with("rtt_ms.") {
            BASE.replace("z2 = 1.0", "z2 = -0.0")
        } else {
            with(l.path, toml::Value::Float(-0.0))
        };
        assert!(text.contains("-0.0"), "{}: {text}", l.path);
        let cfg = load(&text).unwrap_or_else(|e| panic!("{}: {e}", l.path));
        let shown = cfg.to_toml();
        assert!(!shown.contains("-0"), "{}: -0.0 kept:\n{shown}", l.path);
        assert!(shown.contains(&format!("{} = 0.0", l.field().replace("<zone>", "z2"))), "{}: no `= 0.0`:\n{shown}", l.path);
        checked += 1;
    }
    assert_eq!(checked, 7, "rtt_ms, spillover_ratio, failover_ratio, latency_sensitivity_ms, capacity_cps, capacity_scaler, latency_ms");
    // The live-edit path: `service set web spillover_ratio=-0.0` decodes the edited table.
    let mut t: toml::Table = toml::from_str("name = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n").unwrap();
    t.insert("spillover_ratio".into(), toml::Value::Float(-0.0));
    let s: spillway_shared::config::Service = toml::Value::Table(t).try_into().unwrap();
    assert!(s.spillover_ratio.is_some_and(|r| r == 0.0 && r.is_sign_positive()), "{:?}", s.spillover_ratio);
}

/// A key given twice in one table is named with its table and line only: no field range
/// (the value is not at fault; fresh-user QA: `spillover_ratio` twice also printed `must be
/// in [0.0, 1.0]`). A value the parser refuses still gets its field's range.
#[test]
fn a_duplicate_key_names_the_key_and_its_line_only() {
    for (from, to, key, table) in [
        ("port = 80", "port = 80\nspillover_ratio = 0.5\nspillover_ratio = 0.6", "spillover_ratio", "services"),
        ("workers = 1", "workers = 1\nworkers = 2", "workers", "dataplane"),
        ("name = \"b1\"", "name = \"b1\"\nweight = 5\nweight = 6", "weight", "services.backends"),
        ("name = \"b1\"", "name = \"b1\"\nname = \"b2\"", "name", "services.backends"),
        ("z2 = 1.0", "z2 = 1.0\nz2 = 2.0", "z2", "rtt_ms.z1"),
    ] {
        let text = BASE.replacen(from, to, 1);
        // the second key: the last line of `to`
        let at = text.find(to).unwrap() + to.rfind('\n').unwrap() + 1;
        let line = text[..at].matches('\n').count() + 1;
        let e = load(&text).unwrap_err();
        assert_eq!(e, format!("duplicate key `{key}` in table `{table}` (line {line}, column 1)"), "{to}");
    }
    let e = load(&BASE.replace("workers = 1", "workers = 99999999999999999999")).unwrap_err();
    assert!(e.starts_with("dataplane.workers = 99999999999999999999: ") && e.contains("must be in 1..=64") && e.contains("(line 3, column "), "{e}");
    // A table given twice: one line, the parser's two statements joined (fresh-user QA:
    // "invalid table header duplicate key `conntrack` ..." read as one garbled sentence).
    let text = BASE.replacen("[conntrack]", "[conntrack]\n[conntrack]", 1);
    let line = text[..text.find("[conntrack]\n[conntrack]").unwrap()].matches('\n').count() + 2;
    let e = load(&text).unwrap_err();
    assert_eq!(e, format!("invalid table header: duplicate key `conntrack` in document root (line {line}, column 1)"));
}

/// A float refused for its range echoes negative zero as written, `-0.0` (Display
/// prints `-0`).
#[test]
fn a_refused_negative_zero_is_echoed_as_written() {
    let e = load(&BASE.replace("check_interval_sec = 5.0", "check_interval_sec = -0.0")).unwrap_err();
    assert!(e.starts_with("services[0].health_check.check_interval_sec = -0.0: must be in [0.1, "), "{e}");
}

/// Addresses that can never be unicast are refused where the daemon sends from or to them
/// (new-user test: each was accepted): a port's own `address` in 0.0.0.0/8 or 240.0.0.0/4,
/// a `sync.peers` entry or `sync.listen` that is broadcast, 0.0.0.0/8 or IPv4-mapped, a
/// `metrics.listen` that is multicast, broadcast or IPv4-mapped. Loopback peers (several hosts on one machine) and an
/// unspecified metrics address (every interface) stay accepted.
#[test]
fn never_unicast_port_peer_and_metrics_addresses_are_refused() {
    for a in ["0.1.2.3", "240.0.0.1", "255.255.255.255", "224.0.0.1", "127.0.0.1"] {
        let e = load(&BASE.replace("device = \"net_null0\"", &format!("device = \"net_null0\"\naddress = \"{a}\""))).unwrap_err();
        assert!(e.starts_with(&format!("ports[0].address = {a}: must be a unicast IPv4 or IPv6 address that can be on a wire")), "{a}: {e}");
    }
    load(&BASE.replace("device = \"net_null0\"", "device = \"net_null0\"\naddress = \"10.9.0.1\"")).unwrap();
    let sync = |peer: &str| format!("{BASE}\n[sync]\nlisten = \"127.0.0.1:7946\"\npeers = [\"{peer}\"]\nkey_file = \"/etc/spillway/sync.key\"\n");
    for p in ["255.255.255.255:7946", "0.0.0.9:7946", "240.1.1.1:7946", "224.0.0.9:7946"] {
        let e = load(&sync(p)).unwrap_err();
        assert!(e.starts_with(&format!("sync.peers[0] = {p}: must be a unicast address with a port")), "{p}: {e}");
    }
    load(&sync("127.0.0.2:7946")).unwrap();
    let metrics = |l: &str| format!("{BASE}\n[metrics]\nlisten = \"{l}\"\n");
    for l in ["224.0.0.1:9101", "255.255.255.255:9101", "[ff02::1]:9101", "240.0.0.1:9101", "[::ffff:224.0.0.1]:9101"] {
        let e = load(&metrics(l)).unwrap_err();
        assert!(e.starts_with(&format!("metrics.listen = {l:?}: must be a unicast, loopback or unspecified address")), "{l}: {e}");
    }
    for p in ["[::ffff:10.0.0.9]:7946", "[::ffff:0.0.0.9]:7946"] {
        let e = load(&sync(p).replace("127.0.0.1:7946", "[fd00::1]:7946")).unwrap_err();
        assert!(e.starts_with(&format!("sync.peers[0] = {p}: must be a unicast address with a port")), "{p}: {e}");
    }
    for l in ["0.0.0.9:7946", "[::ffff:10.0.0.1]:7946", "0.0.0.0:7946", "224.0.0.1:7946"] {
        let e = load(&sync("127.0.0.2:7946").replace("127.0.0.1:7946", l)).unwrap_err();
        assert!(e.starts_with(&format!("sync.listen = {l}: must be a unicast IP:PORT")), "{l}: {e}");
    }
    for l in ["0.0.0.0:9101", "[::]:9101", "127.0.0.1:9101", "10.0.0.7:0"] {
        load(&metrics(l)).unwrap();
    }
}

/// Two services on one VIP, port and protocol: the error names the service that already
/// has them (new-user test: it said only "another service").
#[test]
fn a_vip_port_clash_names_the_other_service() {
    let web2 = "\n[[services]]\nname = \"web2\"\nvip = \"10.0.0.100\"\nport = 80\n\n[[services.backends]]\nname = \"c1\"\naddress = \"10.0.1.7\"\nzone = \"z1\"\n";
    let e = load(&format!("{BASE}{web2}")).unwrap_err();
    assert!(e.starts_with("services[1].vip = 10.0.0.100:80/tcp: services \"web2\" (services[1]) and \"web\" (services[0]) cannot both have this VIP, port and protocol"), "{e}");
    load(&format!("{BASE}{}", web2.replace("port = 80", "port = 81"))).unwrap();
}
