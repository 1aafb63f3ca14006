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
