//! Live `spillwayctl explain` against a running daemon works for every load-balancing
//! algorithm, with and without `capacity_cps` (issue 15, item 1: an unlimited capacity is
//! `inf`, which once broke the JSON step between daemon and tool).

mod common;

use common::{null_example, Daemon};

const ALGORITHMS: [&str; 3] = ["WATERFALL_BY_REGION", "SPRAY_TO_REGION", "WATERFALL_BY_ZONE"];

fn capacity_numbers(j: &serde_json::Value) -> Vec<serde_json::Value> {
    j["decision"]["trace"]
        .as_array()
        .expect("trace is an array")
        .iter()
        .filter(|e| e["stage"] == "capacity")
        .filter_map(|e| e["numbers"].get("capacity_cps").cloned())
        .collect()
}

#[test]
fn live_explain_works_for_every_algorithm_with_and_without_capacity() {
    let d = Daemon::start("explain", &null_example());
    let args = ["explain", "--client", "10.1.0.10", "--vip", "10.0.0.100:80/tcp"];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    for with_capacity in [false, true] {
        if with_capacity {
            for b in ["b1", "b2", "b3", "b4"] {
                d.ok(&["backend", "set", "web", b, "capacity_cps=100"]);
            }
        }
        for algo in ALGORITHMS {
            d.ok(&["service", "set", "web", &format!("load_balancing_algorithm={algo}")]);
            let text = d.ok(&args);
            assert!(text.contains("[live, snapshot generation"), "{algo}, capacity {with_capacity}:\n{text}");
            assert!(text.contains("capacity"), "{algo}: no capacity stage:\n{text}");
            assert!(text.contains("-> backend b"), "{algo}, capacity {with_capacity}: no backend chosen:\n{text}");
            let out = d.ok(&json_args);
            let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{algo}: {e}\n{out}"));
            assert_eq!(j["live"], true);
            assert!(j["backend"].as_str().is_some_and(|b| b.starts_with('b')), "{algo}: {out}");
            let caps = capacity_numbers(&j);
            assert!(!caps.is_empty(), "{algo}: the capacity stage names no capacity_cps: {out}");
            for c in caps {
                if with_capacity {
                    assert!(c.as_f64().is_some_and(|x| x > 0.0 && x.is_finite()), "{algo}: capacity_cps = {c}");
                } else {
                    assert_eq!(c, "inf", "{algo}: an unlimited capacity is written \"inf\"");
                }
            }
        }
    }
}
