//! Every scenario under tests/cases/policy/ runs through the library and passes.

use spillway_shared::scenario::run_scenario_text;
use std::path::PathBuf;

fn cases() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cases/policy");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

#[test]
fn all_policy_scenarios_pass() {
    let files = cases();
    assert!(files.len() >= 23, "{files:?}");
    let mut failed = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        match run_scenario_text(&text) {
            Err(e) => failed.push(format!("{}: invalid: {e}", f.display())),
            Ok(steps) => {
                for s in steps {
                    if !s.pass {
                        failed.push(format!("{}: {}", f.display(), s.to_line()));
                    }
                }
            }
        }
    }
    assert!(failed.is_empty(), "failing steps:\n{}", failed.join("\n"));
}

#[test]
fn unknown_field_names_its_path() {
    let text = std::fs::read_to_string(cases()[0].clone()).unwrap();
    let bad = text.replacen("\"zone\"", "\"zonee\"", 1);
    let e = run_scenario_text(&bad).unwrap_err();
    assert!(e.path.starts_with("zones[0]"), "{e}");
    assert!(e.message.contains("zonee"), "{e}");
}

#[test]
fn mismatch_reports_expected() {
    let text = r#"{"name":"m","backends":[{"name":"a","zone":"z1"},{"name":"b","zone":"z1","healthy":false}],
      "steps":[{"client":"10.0.0.1","expect":{"eligible":["b"]}}]}"#;
    let out = run_scenario_text(text).unwrap();
    assert!(!out[0].pass);
    let line = out[0].to_line();
    assert!(line.contains("\"expected\":{\"eligible\":[\"b\"]}"), "{line}");
    assert!(line.starts_with("{\"scenario\":\"m\",\"step\":0,\"pass\":false,\"eligible\":[\"a\"],\"drop\":false,\"shares\":{\"a\":1.0}"), "{line}");
}

#[test]
fn semantic_errors_name_paths() {
    let t = r#"{"name":"m","backends":[{"name":"a"}],"steps":[{"client":"10.0.0.1","set":{"zz":{"healthy":true}},"expect":{"drop":false}}]}"#;
    assert_eq!(run_scenario_text(t).unwrap_err().path, "steps[0].set.zz");
    let t = r#"{"name":"m","backends":[{"name":"a"}],"steps":[{"client":"10.0.0.1","expect":{}}]}"#;
    assert_eq!(run_scenario_text(t).unwrap_err().path, "steps[0].expect");
    let t = r#"{"name":"m","backends":[{"name":"a"}],"steps":[{"client":"10.0.0.300","expect":{"drop":false}}]}"#;
    assert_eq!(run_scenario_text(t).unwrap_err().path, "steps[0].client");
}

/// Backend groups in scenarios: `group` gives endpoint weights and health; the
/// outcome's `endpoint_shares` spread the backend shares over healthy endpoints, a `set`
/// replaces the group, and `group` with `endpoints` is refused naming the field.
#[test]
fn groups_give_endpoint_shares() {
    let text = r#"{
      "name": "groups", "service": { "failover_health_threshold": 60 },
      "backends": [
        { "name": "g1", "weight": 100, "group": [
            { "name": "a", "weight": 50 }, { "name": "b", "weight": 150 }, { "name": "c", "healthy": false }, { "name": "d", "enabled": false } ] },
        { "name": "f", "failover": true, "group": [ { "name": "x" } ] }
      ],
      "steps": [
        { "client": "10.0.0.1", "expect": { "shares": { "g1": 1.0 } } },
        { "client": "10.0.0.1", "set": { "g1": { "group": [ { "name": "a" }, { "name": "b", "healthy": false }, { "name": "c", "healthy": false } ] } },
          "expect": { "shares": { "f": 1.0 } } }
      ]
    }"#;
    let out = run_scenario_text(text).unwrap();
    assert!(out.iter().all(|o| o.pass), "{:?}", out.iter().map(|o| o.to_line()).collect::<Vec<_>>());
    // step 0: c down, d disabled -> 2 of 3 enabled healthy = 67 % >= 60 %: stays on g1's a, b;
    // step 1: 1 of 3 = 33 % < 60 %: the failover group
    let s0 = &out[0].endpoint_shares;
    assert_eq!(s0.keys().map(String::as_str).collect::<Vec<_>>(), ["g1/a", "g1/b"], "{s0:?}");
    assert!((s0["g1/a"] - 0.25).abs() < 1e-6 && (s0["g1/b"] - 0.75).abs() < 1e-6, "{s0:?}");
    assert!(out[1].to_line().contains("\"endpoint_shares\":{\"f/x\":1.0}"), "{}", out[1].to_line());
    let bad = text.replace(r#""weight": 100, "group""#, r#""weight": 100, "endpoints": 4, "group""#);
    let e = run_scenario_text(&bad).unwrap_err();
    assert_eq!(e.path, "backends[0].group");
}
