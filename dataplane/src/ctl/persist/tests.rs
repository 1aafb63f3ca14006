//! Unit tests of the config write-back ([`super`]). Over 600 lines: every test shares the
//! commented operator file and its fixture; a split would repeat them.

use super::*;

#[test]
fn atomic_write_replaces_the_file() {
    let dir = std::env::temp_dir().join(format!("spw-atomic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("c.toml");
    std::fs::write(&p, "old").unwrap();
    write_atomic(&p, "new").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
    let _ = std::fs::remove_dir_all(&dir);
}

use crate::daemon::Daemon;
use proptest::prelude::*;
use spillway_shared::proto::{Request, Response};

/// An operator's file: comments above and beside keys and tables, defaults left out, and
/// `[conntrack]` after the services.
const COMMENTED: &str = r#"# Spillway test config: the operator's header comment
[dataplane]
workers = 1 # one worker is plenty here

# The port, with its own address for health checks.
[[ports]]
name = "p0"
device = "net_null0"
address = "10.0.0.2"

# The web service.
[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
connection_drain_timeout_sec = 30   # short drains in tests

# First backend: keep its comment.
[[services.backends]]
name = "b1" # name stays
address = "10.0.1.1"
mac = "02:00:00:00:0b:01"

# Second backend.
[[services.backends]]
name = "b2"
address = "10.0.1.2"
mac = "02:00:00:00:0b:02"
weight = 70

# Connection tracking stays the last table.
[conntrack]
capacity_per_worker = 4096 # small table
"#;

struct Fixture {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    daemon: Daemon,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture(tag: &str) -> Fixture {
    fixture_with(tag, COMMENTED)
}

fn fixture_with(tag: &str, text: &str) -> Fixture {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("spw-persist-{}-{tag}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.toml");
    std::fs::write(&path, text).unwrap();
    let cfg = Config::from_toml(text).unwrap();
    cfg.validate().unwrap();
    let daemon = Daemon::new(cfg, 1, vec![0], Box::new(|_| Default::default())).unwrap().with_config_path(path.clone());
    Fixture { dir, path, daemon }
}

fn fields(f: &[(&str, &str)]) -> Vec<(String, String)> {
    f.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// The comments of `COMMENTED`, from `#` to the end of their line (the value before a
/// trailing comment may be edited).
fn comment_lines() -> Vec<&'static str> {
    COMMENTED.lines().filter_map(|l| l.find('#').map(|i| &l[i..])).collect()
}

/// Table headers in file order.
fn headers(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with('[')).collect()
}

/// The file parses to the running config, keeps every original comment line and keeps
/// `[dataplane]` first and `[conntrack]` last.
fn check_file(f: &Fixture) -> Result<(), String> {
    let text = std::fs::read_to_string(&f.path).unwrap();
    let running = f.daemon.control.lock().unwrap().cfg.clone();
    let back = Config::from_toml(&text).map_err(|e| format!("{e}\n{text}"))?;
    if back != running {
        return Err(format!("the file does not parse to the running config:\n{text}"));
    }
    for l in comment_lines() {
        if !text.lines().any(|x| x.ends_with(l) && (x == l || x.contains(" = "))) {
            return Err(format!("comment line {l:?} lost:\n{text}"));
        }
    }
    let h = headers(&text);
    if h.first() != Some(&"[dataplane]") || h.last() != Some(&"[conntrack]") {
        return Err(format!("table order changed: {h:?}\n{text}"));
    }
    if !text.starts_with(HEADER_PREFIX) {
        return Err(format!("no generation header:\n{text}"));
    }
    Ok(())
}

fn applied(r: Response) {
    assert!(matches!(r, Response::Applied(_)), "{r:?}");
}

#[test]
fn atomic_write_keeps_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("spw-atomic-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("c.toml");
    std::fs::write(&p, "old").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    write_atomic(&p, "new").unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn header_generation_reads_only_our_header() {
    assert_eq!(header_generation("# Written by spillway (config generation 17) after a live edit; x\n[a]\n"), Some(17));
    assert_eq!(header_generation("# my own comment (config generation 17)\n"), None);
    assert_eq!(header_generation("[dataplane]\n# Written by spillway (config generation 3)\n"), None);
    assert_eq!(header_generation(""), None);
}

#[test]
fn comments_and_layout_survive_service_and_backend_edits() {
    let f = fixture("edits");
    let d = &f.daemon;
    applied(d.edit_request(Request::ServiceSet { name: "web".into(), fields: fields(&[("connection_drain_timeout_sec", "45")]), if_generation: None }));
    check_file(&f).unwrap();
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(text.contains("connection_drain_timeout_sec = 45   # short drains in tests"), "edited in place, comment kept:\n{text}");
    assert_eq!(header_generation(&text), Some(2));
    applied(d.edit_request(Request::BackendSet { service: "web".into(), name: "b1".into(), fields: fields(&[("weight", "80")]), if_generation: None }));
    applied(d.edit_request(Request::BackendAdd {
        service: "web".into(),
        name: "b3".into(),
        fields: fields(&[("address", "10.0.1.3"), ("mac", "02:00:00:00:0b:03")]),
        if_generation: None,
    }));
    check_file(&f).unwrap();
    applied(d.edit_request(Request::BackendRemove { service: "web".into(), name: "b2".into(), if_generation: None }));
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(!text.contains("# Second backend."), "a removed backend's comment goes with it:\n{text}");
    assert!(!text.contains("10.0.1.2"));
    assert!(text.contains("# First backend: keep its comment.\n[[services.backends]]\nname = \"b1\" # name stays\n"), "{text}");
    // only the changed keys changed: defaults the operator left out stay out
    assert!(!text.contains("enabled"), "{text}");
    assert_eq!(header_generation(&text), Some(5));
    let back = Config::from_toml(&text).unwrap();
    assert_eq!(back, d.control.lock().unwrap().cfg);
    assert_eq!(back.services[0].backends.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), ["b1", "b3"]);
    assert_eq!(back.services[0].backends[0].weight, 80);
    assert!(text.find("name = \"b3\"").unwrap() < text.find("[conntrack]").unwrap(), "the new backend sits with its service:\n{text}");
    // a header already there is replaced, not stacked
    assert_eq!(text.matches(HEADER_PREFIX).count(), 1);
}

/// A hand edit of the file since the daemon loaded it is never overwritten silently: the
/// live edit is refused, naming the file and what to do; nothing changes (new-user test).
#[test]
fn a_live_edit_never_overwrites_a_hand_edit() {
    let f = fixture("hand");
    let edited = COMMENTED.replace("port = 80", "port = 81");
    std::fs::write(&f.path, &edited).unwrap();
    let before = f.daemon.control.lock().unwrap().cfg.clone();
    let r = f.daemon.edit_request(Request::BackendSet { service: "web".into(), name: "b2".into(), fields: fields(&[("weight", "90")]), if_generation: None });
    match r {
        Response::Error { message } => assert!(message.contains("changed by hand") && message.contains("config apply"), "{message}"),
        other => panic!("the edit overwrote a hand edit: {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&f.path).unwrap(), edited, "the file is untouched");
    assert_eq!(f.daemon.control.lock().unwrap().cfg, before, "the running config is untouched");
    // applying the edited file itself is the way forward, and keeps its comments
    applied(f.daemon.config_apply(&edited, None));
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(text.contains("port = 81") && text.contains("# Second backend."), "{text}");
}

/// The parse cache of the file's texts never hides a hand edit: after a live edit wrote the
/// file (its services cached), a hand edit of one service is still seen, and a hand edit
/// that breaks the file is still a file that does not load.
#[test]
fn a_hand_edit_after_a_write_back_is_still_seen() {
    let f = fixture("hand-after");
    applied(f.daemon.edit_request(Request::BackendSet { service: "web".into(), name: "b2".into(), fields: fields(&[("weight", "90")]), if_generation: None }));
    let written = std::fs::read_to_string(&f.path).unwrap();
    assert!(written.contains("port = 80"), "{written}");
    std::fs::write(&f.path, written.replace("port = 80", "port = 81")).unwrap();
    let set = |w: &str| f.daemon.edit_request(Request::BackendSet { service: "web".into(), name: "b2".into(), fields: fields(&[("weight", w)]), if_generation: None });
    match set("91") {
        Response::Error { message } => assert!(message.contains("changed by hand"), "{message}"),
        other => panic!("the edit overwrote a hand edit: {other:?}"),
    }
    std::fs::write(&f.path, written.replace("port = 80", "port = 0")).unwrap();
    match set("92") {
        Response::Error { message } => assert!(message.contains("does not load"), "{message}"),
        other => panic!("the edit overwrote a broken file: {other:?}"),
    }
    std::fs::write(&f.path, &written).unwrap();
    applied(set("93"));
    check_file(&f).unwrap();
}

#[test]
fn config_apply_keeps_comments_of_unchanged_parts() {
    let f = fixture("apply");
    let new = COMMENTED.replace("weight = 70", "weight = 75").replace("# Second backend.\n", "");
    applied(f.daemon.config_apply(&new, None));
    // "# Second backend." is not in the applied text, but the file keeps it
    check_file(&f).unwrap();
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(text.contains("# Second backend.\n[[services.backends]]\nname = \"b2\"") && text.contains("weight = 75"), "{text}");
    assert_eq!(Config::from_toml(&text).unwrap(), f.daemon.control.lock().unwrap().cfg);
}

/// One random live edit. Backends `b1` and `b2` (which carry comments) are edited but never
/// removed; added backends `n0`..`n5` come and go.
#[derive(Clone, Debug)]
enum Op {
    Weight(bool, u32),
    Enabled(bool, bool),
    Capacity(bool, Option<u32>),
    Add(u8),
    Remove(u8),
    Drain(u32),
    HealthCheck(Option<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<bool>(), 1u32..=1000).prop_map(|(b, w)| Op::Weight(b, w)),
        (any::<bool>(), any::<bool>()).prop_map(|(b, e)| Op::Enabled(b, e)),
        (any::<bool>(), proptest::option::of(1u32..100_000)).prop_map(|(b, c)| Op::Capacity(b, c)),
        (0u8..6).prop_map(Op::Add),
        (0u8..6).prop_map(Op::Remove),
        (0u32..3600).prop_map(Op::Drain),
        proptest::option::of(1u8..10).prop_map(Op::HealthCheck),
    ]
}

/// A health check set live is written back with only the fields given (and those that
/// differ from their defaults), not with every other kind's default (`path = "/"`,
/// `udp_expect = ""`, ...; new-user test).
#[test]
fn a_live_health_check_is_written_with_the_fields_given() {
    let f = fixture("hc");
    let hc = "{ type = \"tcp\", check_interval_sec = 2.0, timeout_sec = 0.5 }";
    applied(f.daemon.edit_request(Request::ServiceSet { name: "web".into(), fields: fields(&[("health_check", hc)]), if_generation: None }));
    check_file(&f).unwrap();
    let text = std::fs::read_to_string(&f.path).unwrap();
    for absent in ["path", "expected_status", "udp_request", "udp_expect", "healthy_threshold", "unhealthy_threshold"] {
        assert!(!text.lines().any(|l| l.trim_start().starts_with(absent) || l.contains(&format!(" {absent} ="))), "{absent} written:\n{text}");
    }
    assert!(text.contains("type = \"tcp\"") && text.contains("check_interval_sec = 2.0") && text.contains("timeout_sec = 0.5"), "{text}");
}

/// `zone=` (and `zone=""`) leaves a backend without a zone and takes the key out of the
/// file: an empty zone name is not a name (docs/config.md "Names"), so `zone = ""` is
/// never written, neither by a set nor by an add.
#[test]
fn an_empty_zone_removes_the_key() {
    let f = fixture("zone");
    let set = |v: &str| Request::BackendSet { service: "web".into(), name: "b1".into(), fields: fields(&[("zone", v)]), if_generation: None };
    applied(f.daemon.edit_request(set("z1")));
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert_eq!(text.matches("zone = \"z1\"").count(), 1, "{text}");
    for empty in ["", "\"\""] {
        applied(f.daemon.edit_request(set("z1")));
        applied(f.daemon.edit_request(set(empty)));
        check_file(&f).unwrap();
        let text = std::fs::read_to_string(&f.path).unwrap();
        assert!(!text.contains("zone"), "zone={empty} left a zone key:\n{text}");
        assert_eq!(f.daemon.control.lock().unwrap().cfg.services[0].backends[0].zone, "");
    }
    applied(f.daemon.edit_request(Request::BackendAdd {
        service: "web".into(),
        name: "b3".into(),
        fields: fields(&[("address", "10.0.1.3"), ("mac", "02:00:00:00:0b:03"), ("zone", "")]),
        if_generation: None,
    }));
    check_file(&f).unwrap();
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(!text.contains("zone"), "an added backend without a zone got a zone key:\n{text}");
}

fn request(op: &Op) -> Request {
    let b = |first: bool| if first { "b1" } else { "b2" }.to_string();
    let set = |name: String, f: Vec<(String, String)>| Request::BackendSet { service: "web".into(), name, fields: f, if_generation: None };
    match op {
        Op::Weight(x, w) => set(b(*x), fields(&[("weight", &w.to_string())])),
        Op::Enabled(x, e) => set(b(*x), fields(&[("enabled", &e.to_string())])),
        Op::Capacity(x, c) => set(b(*x), fields(&[("capacity_cps", &c.map_or(String::new(), |c| format!("{c}.5")))])),
        Op::Add(i) => Request::BackendAdd {
            service: "web".into(),
            name: format!("n{i}"),
            fields: fields(&[("address", &format!("10.0.2.{}", i + 1)), ("mac", &format!("02:00:00:00:0c:0{i}")), ("weight", &format!("{}", 10 + i))]),
            if_generation: None,
        },
        Op::Remove(i) => Request::BackendRemove { service: "web".into(), name: format!("n{i}"), if_generation: None },
        Op::Drain(s) => Request::ServiceSet { name: "web".into(), fields: fields(&[("connection_drain_timeout_sec", &s.to_string())]), if_generation: None },
        Op::HealthCheck(h) => Request::ServiceSet {
            name: "web".into(),
            fields: fields(&[("health_check", &h.map_or(String::new(), |i| format!("{{ type = \"tcp\", check_interval_sec = {i}.0, timeout_sec = 0.5 }}")))]),
            if_generation: None,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// After any sequence of live edits (applied or refused), the file re-parses to exactly
    /// the running config, every original comment line is still there, the table layout is
    /// kept and the header names the config generation.
    #[test]
    fn random_edit_sequences_keep_comments_and_config(ops in proptest::collection::vec(op(), 1..12)) {
        let f = fixture("prop");
        for op in &ops {
            let _ = f.daemon.edit_request(request(op));
            let gen = f.daemon.control.lock().unwrap().config_generation;
            if gen > 1 {
                check_file(&f).map_err(|e| TestCaseError::fail(format!("after {op:?}: {e}")))?;
                let text = std::fs::read_to_string(&f.path).unwrap();
                prop_assert_eq!(header_generation(&text), Some(gen));
            }
        }
    }
}

/// A group whose endpoints carry comments; one endpoint has no name (known by its address).
const GROUPED: &str = r#"# grouped
[[ports]]
name = "p0"
device = "net_null0"

[[services]]
name = "web"
vip = "10.0.0.100"
port = 80

# The group.
[[services.backends]]
name = "g1"
zone = "z1" # the group's zone

# First endpoint: keep this comment.
[[services.backends.endpoints]]
name = "e1"
address = "10.0.1.1" # e1's address
mac = "02:00:00:00:01:01"

# Unnamed endpoint.
[[services.backends.endpoints]]
address = "10.0.1.2"
mac = "02:00:00:00:01:02"
weight = 70 # heavier

# A single-endpoint backend.
[[services.backends]]
name = "b2"
address = "10.0.2.1"
mac = "02:00:00:00:02:01"
"#;

#[test]
fn endpoint_edits_round_trip_with_comments_kept() {
    let f = fixture_with("endpoints", GROUPED);
    let d = &f.daemon;
    let ep = |req: Request| applied(d.edit_request(req));
    let check = |gone: &[&str]| {
        let text = std::fs::read_to_string(&f.path).unwrap();
        let back = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, d.control.lock().unwrap().cfg, "{text}");
        for l in GROUPED.lines().filter_map(|l| l.find('#').map(|i| &l[i..])) {
            if !gone.iter().any(|g| l.contains(g)) {
                assert!(text.contains(l), "comment {l:?} lost:\n{text}");
            }
        }
        text
    };
    ep(Request::EndpointSet { service: "web".into(), backend: "g1".into(), name: "10.0.1.2".into(), fields: fields(&[("weight", "90")]), if_generation: None });
    let text = check(&["heavier"]);
    assert!(text.contains("weight = 90 # heavier"), "edited in place:\n{text}");
    ep(Request::EndpointAdd { service: "web".into(), backend: "g1".into(), name: "e3".into(), fields: fields(&[("address", "10.0.1.3"), ("mac", "02:00:00:00:01:03")]), if_generation: None });
    let text = check(&["heavier"]);
    assert!(text.find("name = \"e3\"").unwrap() < text.find("name = \"b2\"").unwrap(), "the new endpoint sits with its group:\n{text}");
    ep(Request::EndpointRemove { service: "web".into(), backend: "g1".into(), name: "e1".into(), if_generation: None });
    let text = check(&["heavier", "First endpoint", "e1's address"]);
    assert!(!text.contains("First endpoint") && !text.contains("10.0.1.1"), "a removed endpoint's comment goes with it:\n{text}");
    // a single-endpoint backend becomes a group whose first endpoint is its old address
    ep(Request::EndpointAdd { service: "web".into(), backend: "b2".into(), name: "x".into(), fields: fields(&[("address", "10.0.2.2"), ("mac", "02:00:00:00:02:02")]), if_generation: None });
    check(&["heavier", "First endpoint", "e1's address"]);
    let b2 = d.control.lock().unwrap().cfg.services[0].backends[1].clone();
    assert_eq!(b2.members().iter().map(|m| (m.name.clone(), m.address.to_string())).collect::<Vec<_>>(),
        [("b2".to_string(), "10.0.2.1".to_string()), ("x".to_string(), "10.0.2.2".to_string())]);
}

fn refused(r: Response) -> String {
    match r {
        Response::Error { message } => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn weight_of_b2(d: &Daemon, w: u32) -> Response {
    d.edit_request(Request::BackendSet { service: "web".into(), name: "b2".into(), fields: fields(&[("weight", &w.to_string())]), if_generation: None })
}

/// A file broken by hand: the refusal names the ways out, and `config apply` of a good
/// file is one of them (it writes that file's text, comments included).
#[test]
fn a_broken_file_is_recovered_by_config_apply_of_a_good_one() {
    let f = fixture("broken");
    applied(weight_of_b2(&f.daemon, 71));
    let good = std::fs::read_to_string(&f.path).unwrap();
    assert_eq!(std::fs::read_to_string(backup_path(&f.path)).unwrap(), good, "FILE.bak holds the last good file");
    std::fs::write(&f.path, "[dataplane\nthis is not toml").unwrap();
    let m = refused(weight_of_b2(&f.daemon, 72));
    assert!(m.contains("does not load") && m.contains("spillway.toml.bak") && m.contains("config apply"), "{m}");
    // the way out the message gives works: a good file with its own comments
    let fixed = COMMENTED.replace("weight = 70", "weight = 73 # restored");
    applied(f.daemon.config_apply(&fixed, None));
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(text.starts_with(HEADER_PREFIX) && text.contains("weight = 73 # restored"), "{text}");
    assert_eq!(header_generation(&text), Some(3));
    check_file(&f).unwrap();
    // and live edits work again
    applied(weight_of_b2(&f.daemon, 74));
    check_file(&f).unwrap();
}

/// A file that parses but would not start the daemon (a value out of range) is broken
/// too: `config apply` of a good file recovers it, instead of a "changed by hand" refusal
/// that only `config apply` of the broken file itself (refused too) would answer.
#[test]
fn a_file_that_fails_validation_is_recovered_like_a_broken_one() {
    let f = fixture("invalid");
    std::fs::write(&f.path, COMMENTED.replace("weight = 70", "weight = 0")).unwrap();
    let m = refused(weight_of_b2(&f.daemon, 72));
    assert!(m.contains("does not load") && m.contains("weight") && m.contains("config apply GOOD"), "{m}");
    applied(f.daemon.config_apply(&COMMENTED.replace("weight = 70", "weight = 75"), None));
    check_file(&f).unwrap();
    applied(weight_of_b2(&f.daemon, 76));
    check_file(&f).unwrap();
}

/// An edit that changes nothing writes no file, but its answer warns when the file would
/// refuse the next real edit: broken by hand, deleted, or changed by hand (fresh-user QA:
/// it answered a bare `no change`).
#[test]
fn a_no_op_edit_warns_of_a_file_the_next_edit_would_refuse() {
    let f = fixture("noop-warn");
    let no_op = |d: &Daemon| match weight_of_b2(d, 70) {
        Response::Applied(a) => a.changes,
        other => panic!("{other:?}"),
    };
    assert_eq!(no_op(&f.daemon), ["no change"], "an intact file: no warning");
    std::fs::write(&f.path, COMMENTED.replace("weight = 70", "weight = 0")).unwrap();
    let c = no_op(&f.daemon);
    assert!(c.len() == 2 && c[1].starts_with("warning: ") && c[1].contains("does not load") && c[1].contains("config apply GOOD.toml"), "{c:?}");
    std::fs::write(&f.path, COMMENTED.replace("weight = 70", "weight = 71")).unwrap();
    let c = no_op(&f.daemon);
    assert!(c.len() == 2 && c[1].contains("changed by hand") && c[1].contains("config apply"), "{c:?}");
    std::fs::remove_file(&f.path).unwrap();
    let c = no_op(&f.daemon);
    assert!(c.len() == 2 && c[1].contains("is missing") && c[1].contains(".bak"), "{c:?}");
    assert!(!f.path.exists(), "a no-op edit writes nothing");
}

/// A deleted file is not silently recreated without its comments by the next edit.
#[test]
fn a_deleted_file_is_not_recreated_by_an_edit() {
    let f = fixture("deleted");
    std::fs::remove_file(&f.path).unwrap();
    let before = f.daemon.control.lock().unwrap().cfg.clone();
    let m = refused(weight_of_b2(&f.daemon, 72));
    assert!(m.contains("no longer exists") && m.contains(".bak") && m.contains("config apply"), "{m}");
    assert!(!f.path.exists(), "not recreated");
    assert_eq!(f.daemon.control.lock().unwrap().cfg, before, "not applied");
    // `config apply` writes it anew, with the applied file's comments, also when it
    // changes nothing in the running config
    match f.daemon.config_apply(COMMENTED, None) {
        Response::Applied(a) => assert!(a.changes.iter().any(|c| c.contains("written anew")), "{:?}", a.changes),
        other => panic!("{other:?}"),
    }
    check_file(&f).unwrap();
    assert_eq!(f.daemon.control.lock().unwrap().config_generation, 1, "no change: same generation");
    applied(weight_of_b2(&f.daemon, 72));
    check_file(&f).unwrap();
}

/// `--config` a symlink re-pointed while the daemon runs: edits go to the new target (the
/// link stays a link), never to the old one.
#[test]
fn edits_follow_a_re_pointed_config_symlink() {
    let f = fixture("symlink");
    let a = f.dir.join("a.toml");
    let b = f.dir.join("b.toml");
    std::fs::write(&a, COMMENTED).unwrap();
    std::fs::write(&b, COMMENTED).unwrap();
    let link = f.dir.join("link.toml");
    std::os::unix::fs::symlink("a.toml", &link).unwrap();
    let cfg = f.daemon.control.lock().unwrap().cfg.clone();
    let d = Daemon::new(cfg, 1, vec![0], Box::new(|_| Default::default())).unwrap().with_config_path(link.clone());
    applied(weight_of_b2(&d, 71));
    assert!(std::fs::read_to_string(&a).unwrap().contains("weight = 71"));
    // re-pointed (as `ln -sfn b.toml link.toml` does)
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("b.toml", &link).unwrap();
    std::fs::write(&b, std::fs::read_to_string(&a).unwrap()).unwrap();
    let a_before = std::fs::read_to_string(&a).unwrap();
    applied(weight_of_b2(&d, 72));
    assert!(std::fs::read_to_string(&b).unwrap().contains("weight = 72"), "the new target holds the edit");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), a_before, "the old target is left alone");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
}

/// A directory fsync that fails after the rename: the file holds the edit, so the edit is
/// applied (with a warning), and the next edit is not refused as a hand edit.
#[test]
fn a_failed_directory_fsync_does_not_leave_file_and_daemon_apart() {
    let f = fixture("dirsync");
    crate::ctl::persist_file::set_test_hooks(crate::ctl::persist_file::TestHooks { dir_sync_error: Some(libc::EIO), ..Default::default() });
    let r = weight_of_b2(&f.daemon, 71);
    crate::ctl::persist_file::set_test_hooks(Default::default());
    match r {
        Response::Applied(a) => assert!(a.changes.iter().any(|c| c.starts_with("warning: ") && c.contains("could not be fsynced")), "{:?}", a.changes),
        other => panic!("the edit the file holds was reported as not applied: {other:?}"),
    }
    check_file(&f).unwrap();
    applied(weight_of_b2(&f.daemon, 72));
    check_file(&f).unwrap();
}

/// The file is written without the control mutex: while the write stalls (a slow disk),
/// the control state can be locked and still shows the old generation; the edit then
/// applies with the next one.
#[test]
fn the_control_mutex_is_free_while_the_file_is_written() {
    let f = fixture("unlocked");
    let d = &f.daemon;
    let (in_write_tx, in_write_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    std::thread::scope(|s| {
        let edit = s.spawn(move || {
            crate::ctl::persist_file::set_test_hooks(crate::ctl::persist_file::TestHooks {
                before_rename: Some(Box::new(move || {
                    let _ = in_write_tx.send(());
                    let _ = go_rx.lock().unwrap().recv_timeout(std::time::Duration::from_secs(10));
                })),
                ..Default::default()
            });
            let r = weight_of_b2(d, 71);
            crate::ctl::persist_file::set_test_hooks(Default::default());
            r
        });
        in_write_rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the edit reached the write");
        let st = d.control.try_lock().expect("the control mutex is free during the write");
        assert_eq!(st.config_generation, 1, "the generation moves only once the edit applies");
        drop(st);
        // another edit waits for this one (edits stay serialised)
        assert!(d.edit_lock.try_lock().is_err());
        go_tx.send(()).unwrap();
        applied(edit.join().unwrap());
    });
    assert_eq!(d.control.lock().unwrap().config_generation, 2);
    check_file(&f).unwrap();
}

/// Fresh-user QA: `config apply` of a file without `[[zones]]` and `[[client_zones]]`,
/// then of the original again, left `zones= [{ ... }]` inline arrays above the first
/// table (and, once, a second header line). Tables removed and added back are written as
/// tables, the file keeps one header, and it parses to the running config.
#[test]
fn arrays_of_tables_emptied_and_refilled_stay_tables() {
    const ZONED: &str = "# Zoned site\n[dataplane]\nworkers = 1\n\n[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n\n\
        # Zones of this site.\n[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n\n[[client_zones]]\nprefix = \"10.1.0.0/16\"\nzone = \"z1\"\n\n\
        [[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\nzone = \"z1\"\n";
    let f = fixture_with("zones", ZONED);
    let bare = ZONED
        .replace("# Zones of this site.\n[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n\n[[client_zones]]\nprefix = \"10.1.0.0/16\"\nzone = \"z1\"\n\n", "")
        .replace("zone = \"z1\"\n", "");
    applied(f.daemon.config_apply(&bare, None));
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(!text.contains("zones") && !text.contains("[]"), "emptied arrays of tables are left out:\n{text}");
    applied(f.daemon.config_apply(ZONED, None));
    let text = std::fs::read_to_string(&f.path).unwrap();
    let running = f.daemon.control.lock().unwrap().cfg.clone();
    assert_eq!(Config::from_toml(&text).unwrap(), running);
    assert!(text.contains("[[zones]]\n") && text.contains("[[client_zones]]\n"), "written back as tables:\n{text}");
    assert!(!text.contains("zones=") && !text.contains("zones = ["), "no inline arrays of zones:\n{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with(super::HEADER_PREFIX)).count(), 1, "{text}");
    assert!(text.starts_with(super::HEADER_PREFIX), "{text}");
}

/// A `config apply` that swaps two backends' names (so their tables come in a new order)
/// keeps the file's comments and writes the new order: toml_edit sorts tables by their old
/// positions, and the file was written in canonical form instead ("does not parse to the
/// running config (edited by hand since?)").
#[test]
fn config_apply_swapping_names_keeps_comments() {
    let f = fixture("swap");
    let swap = |t: &str| t.replace("name = \"b1\"", "name = \"TMP\"").replace("name = \"b2\"", "name = \"b1\"").replace("name = \"TMP\"", "name = \"b2\"");
    applied(f.daemon.config_apply(&swap(COMMENTED), None));
    check_file(&f).unwrap();
    let text = std::fs::read_to_string(&f.path).unwrap();
    // each name keeps its own table and comments, in the applied order: b2 first
    let b2 = text.find("# Second backend.\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.1\"").expect(&text);
    assert!(b2 < text.find("name = \"b1\" # name stays\naddress = \"10.0.1.2\"").expect(&text), "{text}");
    // and back, and a second service with backends of its own swapped with the first
    applied(f.daemon.config_apply(COMMENTED, None));
    check_file(&f).unwrap();
    let two = COMMENTED.replace("# Connection tracking", "# The API service.\n[[services]]\nname = \"api\"\nvip = \"10.0.0.101\"\nport = 443\n\n[[services.backends]]\nname = \"a1\" # api backend\naddress = \"10.0.2.1\"\nmac = \"02:00:00:00:0c:01\"\n\n# Connection tracking");
    applied(f.daemon.config_apply(&two, None));
    check_file(&f).unwrap();
    let swapped = two.replace("name = \"web\"", "name = \"TMP\"").replace("name = \"api\"", "name = \"web\"").replace("name = \"TMP\"", "name = \"api\"");
    applied(f.daemon.config_apply(&swapped, None));
    // Tables follow names: "web" (its comments, now api's old settings and backend a1) is
    // written after "api"; b1's and b2's comments went with web's old backends. The file
    // is merged, not rewritten in canonical form, and parses to the running config.
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert!(text.contains("comments and layout are kept") && text.contains("# The web service.") && text.contains("# small table"), "{text}");
    assert!(text.find("name = \"api\"").expect(&text) < text.find("name = \"web\"").expect(&text), "{text}");
    assert_eq!(Config::from_toml(&text).unwrap(), f.daemon.control.lock().unwrap().cfg);
}

/// A dry run is refused exactly when the edit would be, for the config file's state: a
/// file changed by hand or missing refuses the dry run of an edit that changes something
/// (QA: it answered with a plan, exit 0, and the edit itself was then refused), and the
/// dry run of an edit that changes nothing carries the edit's warning. A `config apply`,
/// which writes a missing file anew, is not refused.
#[test]
fn a_dry_run_is_refused_by_the_file_like_the_edit() {
    let f = fixture("dryfile");
    let dry = |req: Request| f.daemon.dry_run(req);
    let weight = |w: u32| Request::BackendSet { service: "web".into(), name: "b2".into(), fields: fields(&[("weight", &w.to_string())]), if_generation: None };
    assert!(matches!(dry(weight(75)), Response::DryRun(_)), "a good file: planned");
    std::fs::write(&f.path, COMMENTED.replace("capacity_per_worker = 4096", "capacity_per_worker = 8192")).unwrap();
    let (dried, real) = (dry(weight(75)), crate::ctl::server::Handler::handle(&f.daemon, weight(75)));
    match (&dried, &real) {
        (Response::Error { message: a }, Response::Error { message: b }) => assert!(a == b && a.contains("changed by hand"), "{a}\n{b}"),
        _ => panic!("dry run {dried:?}, edit {real:?}"),
    }
    match dry(weight(70)) {
        Response::DryRun(r) => assert!(r.changes.iter().any(|c| c.starts_with("warning: ") && c.contains("changed by hand")), "{r:?}"),
        r => panic!("{r:?}"),
    }
    std::fs::remove_file(&f.path).unwrap();
    match dry(weight(75)) {
        Response::Error { message } => assert!(message.contains("no longer exists"), "{message}"),
        r => panic!("{r:?}"),
    }
    let apply = Request::ConfigApply { toml: COMMENTED.replace("weight = 70", "weight = 75"), if_generation: None };
    assert!(matches!(dry(apply), Response::DryRun(_)), "config apply writes a missing file anew: planned");
    // one that changes nothing says it would write the file anew, as the apply does
    match dry(Request::ConfigApply { toml: COMMENTED.to_string(), if_generation: None }) {
        Response::DryRun(r) => assert!(r.changes.len() == 1 && r.changes[0].ends_with("is missing or does not parse and would be written anew from the applied file"), "{r:?}"),
        r => panic!("{r:?}"),
    }
    assert!(!f.path.exists(), "a dry run writes nothing");
}


/// A backend or service added live is written with the keys that differ from the
/// defaults only: any kept element that leaves a key out shows its default (here b1, while
/// b2 writes its weight), and an empty array is the default (QA: `enabled = true`,
/// `weight = 50`, `backends = []` were written).
#[test]
fn elements_added_live_leave_defaults_out() {
    // b2 first in the file: the first kept backend writes `weight = 70`
    let text = COMMENTED.replace("# First backend", "# Second backend.\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:0b:02\"\nweight = 70\n\n# First backend");
    let text = text[..text.rfind("# Second backend.").unwrap()].to_string() + &text[text.find("# Connection tracking").unwrap()..];
    let f = fixture_with("defaults", &text);
    let add = Request::BackendAdd { service: "web".into(), name: "b3".into(), fields: fields(&[("address", "10.0.1.3"), ("mac", "02:00:00:00:0b:03")]), if_generation: None };
    applied(crate::ctl::server::Handler::handle(&f.daemon, add));
    let svc = Request::ServiceAdd { name: "api".into(), fields: fields(&[("vip", "10.0.0.101"), ("port", "443")]), if_generation: None };
    applied(crate::ctl::server::Handler::handle(&f.daemon, svc));
    let text = std::fs::read_to_string(&f.path).unwrap();
    let b3 = &text[text.find("name = \"b3\"").expect(&text)..];
    let b3 = &b3[..b3.find("\n\n").unwrap_or(b3.len())];
    assert_eq!(b3, "name = \"b3\"\naddress = \"10.0.1.3\"\nmac = \"02:00:00:00:0b:03\"", "{text}");
    assert!(!text.contains("backends = []"), "{text}");
    assert_eq!(Config::from_toml(&text).unwrap(), f.daemon.control.lock().unwrap().cfg);
}

/// On a file with no services, `service add` then `backend add` write plain table headers
/// (QA: `[[services.backends ]]`, with a stray space).
#[test]
fn backends_added_to_a_new_service_get_a_clean_header() {
    let f = fixture_with("noservices", "[dataplane]\nworkers = 1\n\n[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n");
    applied(f.daemon.edit_request(Request::ServiceAdd { name: "web".into(), fields: fields(&[("vip", "10.0.0.100"), ("port", "80")]), if_generation: None }));
    let backend = |name: &str, address: &str| Request::BackendAdd { service: "web".into(), name: name.into(), fields: fields(&[("address", address), ("mac", "02:00:00:00:0b:01")]), if_generation: None };
    applied(f.daemon.edit_request(backend("b1", "10.0.1.1")));
    applied(f.daemon.edit_request(backend("b2", "10.0.1.2")));
    let text = std::fs::read_to_string(&f.path).unwrap();
    assert_eq!(headers(&text), ["[dataplane]", "[[ports]]", "[[services]]", "[[services.backends]]", "[[services.backends]]"], "{text}");
    assert_eq!(Config::from_toml(&text).unwrap(), f.daemon.control.lock().unwrap().cfg.clone());
}
