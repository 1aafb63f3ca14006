//! Command-line argument errors are usage errors: exit 2 in clap's style
//! (`error: ...`), before any daemon is contacted. A fake daemon listens on the socket and
//! answers every request with a refusal (exit 1), so a request that reached it shows.

use spillway_shared::proto::{self, Response};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A socket that refuses every request and counts the connections it got.
struct FakeDaemon {
    socket: PathBuf,
    connections: Arc<AtomicU64>,
}

impl FakeDaemon {
    fn start(name: &str) -> FakeDaemon {
        let dir = std::env::temp_dir().join(format!("spw-usage-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("fake.sock");
        let _ = std::fs::remove_file(&socket);
        let l = UnixListener::bind(&socket).unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let n = connections.clone();
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                n.fetch_add(1, Ordering::SeqCst);
                let _ = proto::read_frame(&mut s);
                let _ = proto::write_frame(&mut s, &proto::encode_response(&Response::Error { message: "fake daemon refuses".into() }));
            }
        });
        FakeDaemon { socket, connections }
    }

    /// Runs `spillwayctl --socket FAKE args`: (exit code, stderr).
    fn run(&self, args: &[&str]) -> (i32, String) {
        let o = Command::new(env!("CARGO_BIN_EXE_spillwayctl")).arg("--socket").arg(&self.socket).args(args).output().unwrap();
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).to_string())
    }
}

/// Runs `spillwayctl --socket SOCKET args`: (exit code, stdout, stderr).
fn run(socket: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_spillwayctl")).arg("--socket").arg(socket).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string())
}

#[test]
fn the_fake_daemon_sees_a_valid_request() {
    let d = FakeDaemon::start("valid");
    let (code, err) = d.run(&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("fake daemon refuses"), "{err}");
    assert_eq!(d.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn malformed_arguments_exit_2_before_the_daemon_is_asked() {
    let d = FakeDaemon::start("usage");
    let cases: &[(&[&str], &str)] = &[
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:xx/tcp"], "port \"xx\" must be an integer in 1..=65535"),
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:0/tcp"], "must be an integer in 1..=65535"),
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.300:80/tcp"], "\"10.0.0.300\" is not an IPv4 address"),
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/sctp"], "protocol \"sctp\" must be tcp or udp"),
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100"], "expected IP:PORT/PROTO"),
        (&["explain", "--client", "10.1.0.10", "--health", "h.json"], "--config"),
        (&["explain", "--client", "10.1.0.10", "--offered-cps", "5"], "--config"),
        (&["explain", "--config", "x.toml", "--client", "10.1.0.10", "--offered-cps=-5"], "must be a finite number"),
        // a negative value as its own word is the option's value, not an unknown argument
        (&["explain", "--config", "x.toml", "--client", "10.1.0.10", "--offered-cps", "-1"], "must be a finite number"),
        (&["backend", "set", "web", "b1", "weight=80", "--if-generation", "-1"], "invalid value '-1' for '--if-generation <N>'"),
        (&["explain", "--config", "x.toml", "--client", "10.1.0.10", "--offered-cps", "inf"], "must be a finite number"),
        (&["explain", "--client", "10.1.0.999"], "invalid value"),
        (&["backend", "set", "web", "b1", "weight=1", "weight=2"], "`weight` is given twice (weight=1 and weight=2)"),
        (&["backend", "add", "web", "b9", "address=10.0.1.9", "address=10.0.1.8"], "`address` is given twice"),
        (&["service", "set", "web", "spillover_ratio=0.1", "spillover_ratio=0.2"], "`spillover_ratio` is given twice"),
        (&["service", "add", "api", "vip=10.0.0.101", "port"], "expected FIELD=VALUE"),
        (&["endpoint", "set", "web", "b1", "e1", "weight=1", "weight=1"], "`weight` is given twice"),
        // NAME left out: the first FIELD=VALUE is not taken as the name
        (&["endpoint", "add", "web", "b1", "address=10.0.1.13"], "endpoint NAME is missing: \"address=10.0.1.13\" is a FIELD=VALUE pair"),
        (&["backend", "add", "web", "address=10.0.1.9", "zone=z1"], "backend NAME is missing"),
        (&["service", "add", "vip=10.0.0.101", "port=80"], "service NAME is missing"),
        // `set` with NAME left out, or with nothing to set
        (&["service", "set", "spillover_ratio=0.2"], "service NAME is missing"),
        (&["backend", "set", "web", "weight=80"], "backend NAME is missing"),
        (&["endpoint", "set", "web", "b1", "weight=80"], "endpoint NAME is missing"),
        (&["backend", "set", "web", "b1"], "nothing to set: give one or more FIELD=VALUE pairs"),
        (&["service", "set", "web"], "nothing to set"),
        (&["endpoint", "set", "web", "b1", "e1"], "nothing to set"),
        (&["vip", "drain", "10.0.0.256"], "must be an IPv4 or IPv6 address"),
        (&["explain", "--client", "fd01::5", "--vip", "fd00::100:80/tcp"], "an IPv6 VIP in brackets"),
        (&["explain", "--client", "fd01::5", "--vip", "[fd00::1000000]:80/tcp"], "is not an IPv6 address"),
        // no default protocol: the usage says IP:PORT/PROTO (fresh-user QA: taken as TCP)
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80"], "the protocol is missing (expected IP:PORT/PROTO with PROTO tcp or udp, e.g. 10.0.0.100:80/tcp)"),
        // `--count 0` would capture nothing and exit 0 (fresh-user QA)
        (&["capture", "drops", "--count", "0", "-w", "/dev/null"], "invalid value '0' for '--count <N>': must be at least 1"),
        // a DCID that is not hex: live it was answered as a `too_short` fallback, exit 0
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:443/udp", "--quic-dcid", "zz"], "invalid value 'zz' for '--quic-dcid <HEX>': \"zz\": 'z' is not a hex digit"),
        (&["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:443/udp", "--quic-dcid", "123"], "an even number is needed"),
        // a value holding a second TOML line: the daemon took the first and dropped the rest
        (&["backend", "set", "web", "b1", "zone=\"z2\"\nweight=5"], "the value of `zone` holds more TOML after it (`weight`)"),
    ];
    for (args, says) in cases {
        let (code, err) = d.run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.starts_with("error: ") && err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("fake daemon"), "{args:?} reached the daemon: {err}");
    }
    assert_eq!(d.connections.load(Ordering::SeqCst), 0, "no argument error may contact the daemon");
    // the usage line is the subcommand's, not the top level's (fresh-user QA)
    for (args, usage) in [
        (&["backend", "set", "web", "weight=80"][..], "Usage: spillwayctl backend set "),
        (&["endpoint", "add", "web", "b1", "address=10.0.1.13"][..], "Usage: spillwayctl endpoint add "),
        (&["service", "set", "web"][..], "Usage: spillwayctl service set "),
        // a malformed FIELD=VALUE pair too (review)
        (&["backend", "set", "web", "b1", "weight"][..], "Usage: spillwayctl backend set "),
        (&["endpoint", "add", "web", "b1", "e1", "address"][..], "Usage: spillwayctl endpoint add "),
    ] {
        let (_, err) = d.run(args);
        assert!(err.contains(usage), "{args:?}: {err}");
    }
}

/// `--json` on a refused edit (and its dry run, and `vip drain`) prints the JSON error
/// object on stdout, `{"error", "message", "exit_code"}`, and exits 1; with no daemon,
/// `"error": "no_daemon"` and exit 2. Without `--json` the refusal stays a text line on
/// stderr (docs/ctl.md "Exit codes").
#[test]
fn json_edits_answer_a_refusal_with_a_json_error_object() {
    let d = FakeDaemon::start("json");
    let edits: [&[&str]; 4] = [
        &["backend", "set", "web", "b1", "weight=0", "--json"],
        &["backend", "set", "web", "b1", "weight=0", "--json", "--dry-run"],
        &["service", "remove", "web", "--json"],
        &["vip", "drain", "10.0.0.100", "--json"],
    ];
    for args in edits {
        let (code, out, err) = run(&d.socket, args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out:?} {err:?}"));
        assert_eq!(v, serde_json::json!({ "error": "refused", "message": "fake daemon refuses", "exit_code": 1 }), "{args:?}");
    }
    let (code, out, err) = run(&d.socket, &["backend", "set", "web", "b1", "weight=0"]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(err.starts_with("spillwayctl: daemon refused: fake daemon refuses"), "{err}");
    let (code, out, _) = run(&d.socket.with_file_name("none.sock"), &["backend", "set", "web", "b1", "weight=0", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((code, &v["error"], &v["exit_code"]), (2, &serde_json::json!("no_daemon"), &serde_json::json!(2)), "{out}");
    // a config file that cannot be read is an `input` error object, nothing sent
    let (code, out, err) = run(&d.socket, &["config", "apply", "/nonexistent/spillway.toml", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?} {err:?}"));
    assert_eq!((code, &v["error"], &v["exit_code"]), (2, &serde_json::json!("input"), &serde_json::json!(2)), "{out}");
    assert!(v["message"].as_str().unwrap().starts_with("cannot read /nonexistent/spillway.toml"), "{out}");
    // a file that is not TOML is named, nothing sent (new-user test: the daemon's parse
    // error did not say which file)
    let json = d.socket.with_file_name("not-a-config.json");
    std::fs::write(&json, "{\"services\": []}\n").unwrap();
    let before = d.connections.load(Ordering::SeqCst);
    let (code, out, err) = run(&d.socket, &["config", "apply", json.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains(&format!("{} is not a TOML document: ", json.display())) && err.contains("(line 1, column 1)"), "{err}");
    assert_eq!(d.connections.load(Ordering::SeqCst), before, "a non-TOML file must not reach the daemon");
    // an integer beyond 64 bits is named with its field's path and range (fresh-user QA:
    // "not a TOML document: number too large")
    let big = d.socket.with_file_name("big-weight.toml");
    std::fs::write(&big, "[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nweight = 9223372036854775808\n").unwrap();
    let (code, out, err) = run(&d.socket, &["config", "apply", big.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains(&format!("{}: services[0].backends[0].weight = 9223372036854775808: ", big.display())) && err.contains("must be in 1..=1000"), "{err}");
    assert_eq!(d.connections.load(Ordering::SeqCst), before, "a file that does not parse must not reach the daemon");
}

/// With `--json`, every command's failure is the JSON error object on stdout, nothing on
/// stderr — reads (`status`, `flows show`, `config show`, `explain`, ...) as edits, a
/// refusal, a missing daemon and a usage error alike (fresh-user QA: reads printed
/// plain-text errors under `--json`).
#[test]
fn every_json_command_fails_with_the_json_error_object() {
    let d = FakeDaemon::start("jsonreads");
    let reads: [&[&str]; 15] = [
        &["status"], &["stats"], &["config", "show"], &["service", "list"], &["service", "show", "web"], &["backend", "list", "web"],
        &["backend", "show", "web", "b1"], &["health", "show"], &["flows", "count"], &["flows", "show"], &["flows", "flush"],
        &["snapshot", "show"], &["vip", "show"], &["explain", "--client", "10.1.0.1"], &["top", "--once", "--interval", "0.2"],
    ];
    let none = d.socket.with_file_name("none.sock");
    for args in reads {
        let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
        for (socket, kind, code) in [(&d.socket, "refused", 1), (&none, "no_daemon", 2)] {
            let (c, out, err) = run(socket, &args);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out:?} {err:?}"));
            assert_eq!((c, &v["error"], &v["exit_code"], err.as_str()), (code, &serde_json::json!(kind), &serde_json::json!(code), ""), "{args:?}: {out}");
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{args:?}: {out}");
        }
    }
    let asked = d.connections.load(Ordering::SeqCst);
    for (args, says) in [
        (&["flows", "show", "--bogus", "--json"][..], "unexpected argument '--bogus' found"),
        (&["backend", "set", "web", "b1", "weight", "--json"][..], "invalid value \"weight\" for 'FIELD=VALUE'"),
        (&["--if-generation", "3", "backend", "set", "web", "b1", "weight=1", "--json"][..], "give it after the command"),
    ] {
        let (c, out, err) = run(&d.socket, args);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out:?} {err:?}"));
        assert_eq!((c, &v["error"], &v["exit_code"], err.as_str()), (2, &serde_json::json!("usage"), &serde_json::json!(2), ""), "{args:?}: {out}");
        assert!(v["message"].as_str().unwrap().contains(says), "{args:?}: {out}");
    }
    assert_eq!(d.connections.load(Ordering::SeqCst), asked, "usage errors ask no daemon");
    // without --json: text on stderr, as before
    let (c, out, err) = run(&d.socket, &["status"]);
    assert_eq!((c, out.as_str()), (1, ""), "{err}");
    assert!(err.starts_with("spillwayctl: daemon refused: fake daemon refuses"), "{err}");
}

/// A `--socket` that is a directory or a regular file is named as not a socket, not as a
/// socket nobody listens on (fresh-user QA: `--socket /tmp` said "Connection refused").
#[test]
fn a_socket_path_that_is_no_socket_says_so() {
    let dir = std::env::temp_dir().join(format!("spw-usage-{}-notasocket", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plain");
    std::fs::write(&file, "").unwrap();
    for (path, what) in [(&dir, "a directory"), (&file, "a regular file")] {
        let (code, out, err) = run(path, &["status"]);
        assert_eq!((code, out.as_str()), (2, ""), "{err}");
        assert!(err.starts_with(&format!("spillwayctl: {} is {what}, not a socket: ", path.display())) && err.contains("--socket"), "{err}");
        assert!(!err.contains("refused"), "{err}");
        let (code, out, _) = run(path, &["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!((code, &v["error"]), (2, &serde_json::json!("no_daemon")), "{out}");
    }
    // a missing path is still "no daemon listening"
    let (code, _, err) = run(&dir.join("none.sock"), &["status"]);
    assert!(code == 2 && err.contains("no spillway daemon is listening on"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
