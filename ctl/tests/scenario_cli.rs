//! The real `spillwayctl` binary over the conformance scenarios and the explain example.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spillwayctl"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn cases() -> Vec<PathBuf> {
    let dir = root().join("shared/tests/cases/policy");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillwayctl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn all_scenarios_pass_exit_0() {
    let files = cases();
    let out = bin().arg("scenario").arg("run").args(&files).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() >= files.len());
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["pass"], true, "{l}");
        for k in ["scenario", "step", "eligible", "drop", "shares"] {
            assert!(v.get(k).is_some(), "{k} missing in {l}");
        }
    }
}

#[test]
fn mismatch_exit_1_with_expected() {
    let text = std::fs::read_to_string(root().join("shared/tests/cases/policy/za-spill-0.8-seed-example.json")).unwrap();
    // expect zone-2 clients to stay in zone: wrong by the spec
    let bad = text.replacen("\"client\": \"10.2.0.7\",\n   \"expect\": {\n    \"eligible\": [\n     \"a1\",\n     \"a2\",\n     \"a3\",\n     \"a4\",\n     \"a5\",\n", "\"client\": \"10.2.0.7\",\n   \"expect\": {\n    \"eligible\": [\n", 1);
    assert_ne!(bad, text);
    let p = tmp("mismatch.json", &bad);
    let out = bin().args(["scenario", "run"]).arg(&p).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(!lines[0].contains("expected") && lines[0].contains("\"pass\":true"), "{}", lines[0]);
    assert!(lines[1].contains("\"pass\":false") && lines[1].contains("\"expected\":{\"eligible\":[\"b1\",\"b2\",\"b3\"]}"), "{}", lines[1]);
}

#[test]
fn invalid_exit_2_with_field_path() {
    let p = tmp("invalid.json", r#"{"name":"x","backends":[{"name":"a","zone":"z1","helthy":true}],"steps":[{"client":"10.0.0.1","expect":{"drop":false}}]}"#);
    let out = bin().args(["scenario", "run"]).arg(&p).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("backends[0].helthy") || stderr.contains("backends[0]: unknown field `helthy`"), "{stderr}");
    // a missing file is exit 2 too
    let out = bin().args(["scenario", "run", "/nonexistent/x.json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // usage error
    let out = bin().args(["scenario", "run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

fn explain(client: &str, json: bool) -> (i32, String) {
    let r = root();
    let mut c = bin();
    c.arg("explain")
        .arg("--config")
        .arg(r.join("examples/zonal-example.toml"))
        .arg("--health")
        .arg(r.join("examples/zonal-example-health.json"))
        .args(["--client", client, "--vip", "10.0.0.100:80/tcp"]);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn explain_worked_example() {
    let (code, out) = explain("10.1.0.7", false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("|I|/|C| = 5/5 endpoints = 1.0000 >= 0.8: result I"), "{out}");
    assert!(out.contains("final: 5 eligible: [a1, a2, a3, a4, a5]"), "{out}");
    let chosen = out.lines().find(|l| l.starts_with("maglev:")).unwrap();
    assert!(["a1", "a2", "a3", "a4", "a5"].iter().any(|b| chosen.ends_with(&format!("backend {b}"))), "{chosen}");

    let (code, out) = explain("10.2.0.7", false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("|I|/|C| = 3/5 endpoints = 0.6000 < 0.8: result A"), "{out}");
    assert!(out.contains("final: 8 eligible: [a1, a2, a3, a4, a5, b1, b2, b3]"), "{out}");

    let (code, out) = explain("10.2.0.7", true);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["decision"]["eligible"].as_array().unwrap().len(), 8);
    let z = v["decision"]["trace"].as_array().unwrap().iter().find(|e| e["stage"] == "zonal_affinity").unwrap().clone();
    assert!((z["numbers"]["ratio"].as_f64().unwrap() - 0.6).abs() < 1e-12);
    assert!(v["backend"].as_str().is_some());
}

#[test]
fn explain_errors_exit_2() {
    let r = root();
    let out = bin().args(["explain", "--config", "/nonexistent.toml", "--client", "10.1.0.1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin()
        .arg("explain")
        .arg("--config")
        .arg(r.join("examples/zonal-example.toml"))
        .args(["--client", "10.1.0.1", "--vip", "10.0.0.1:81/tcp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no service"));
    let h = tmp("health.json", r#"{"zz": {"healthy": false}}"#);
    let out = bin().arg("explain").arg("--config").arg(r.join("examples/zonal-example.toml")).arg("--health").arg(&h)
        .args(["--client", "10.1.0.1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("zz"));
    // a config with no services says so, with or without --vip (fresh-user QA: "(have: )")
    for vip in [&["--vip", "10.0.0.1:80/tcp"][..], &[][..]] {
        let out = bin().args(["explain", "--config", "/dev/null", "--client", "10.1.0.1"]).args(vip).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("the config has no services") && !err.contains("(have: )"), "{vip:?}: {err}");
    }
}
