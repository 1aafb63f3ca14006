//! A dry run is refused exactly as the edit would be: the same message, the same exit
//! code, in text and in JSON, for every kind of editing command (docs/ctl.md "Dry runs";
//! fresh-user QA: `vip drain --dry-run` gave a shorter refusal than `vip drain`).

mod common;

use common::{null_example, Daemon};

#[test]
fn dry_run_refusals_are_the_edits_refusals() {
    let d = Daemon::start("dryrefuse", &null_example());
    let refused: [&[&str]; 9] = [
        &["vip", "drain", "10.9.9.9"],
        &["vip", "undrain", "10.9.9.9"],
        &["service", "set", "nope", "spillover_ratio=0.5"],
        &["service", "set", "web", "spillover_ratio=1.5"],
        &["service", "remove", "nope"],
        &["backend", "set", "web", "b9", "weight=5"],
        &["backend", "add", "web", "b1", "address=10.0.1.9"],
        &["endpoint", "remove", "web", "b1", "b1"],
        &["service", "set", "web", "spillover_ratio=0.5", "--if-generation", "99"],
    ];
    for args in refused {
        for json in [false, true] {
            let mut edit: Vec<&str> = args.to_vec();
            if json {
                edit.push("--json");
            }
            let mut dry = edit.clone();
            dry.push("--dry-run");
            let (a, b) = (d.ctl(&edit), d.ctl(&dry));
            let text = |o: &std::process::Output| (o.status.code(), String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
            let (ta, tb) = (text(&a), text(&b));
            assert_eq!(ta.0, Some(1), "{edit:?} is refused: {ta:?}");
            assert_eq!(ta, tb, "{edit:?}: the dry run's refusal differs from the edit's");
        }
    }
    // nothing was applied
    assert!(d.ok(&["config", "show"]).starts_with("# config generation 1,"));
}
