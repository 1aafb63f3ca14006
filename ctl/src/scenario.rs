//! `spillwayctl scenario run FILE...`: runs routing conformance scenarios offline
//! (format: `shared/cases/policy/README.md`).

use spillway_shared::scenario::run_scenario_text;
use std::io::Write;
use std::path::PathBuf;

/// Runs every file, printing one JSON line per step on stdout. Returns 0 when every step
/// of every file passes, 1 when any step does not, 2 when a file cannot be read or is not
/// a valid scenario (the field path and the reason go to stderr). All files are run.
pub fn run(files: &[PathBuf]) -> i32 {
    let mut invalid = false;
    let mut mismatch = false;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for f in files {
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{}: cannot read: {e}", f.display());
                invalid = true;
                continue;
            }
        };
        match run_scenario_text(&text) {
            Err(e) => {
                eprintln!("{}: invalid scenario: {}: {}", f.display(), e.path, e.message);
                invalid = true;
            }
            Ok(steps) => {
                for s in steps {
                    mismatch |= !s.pass;
                    let _ = writeln!(out, "{}", s.to_line());
                }
            }
        }
    }
    let _ = out.flush();
    if invalid {
        2
    } else if mismatch {
        1
    } else {
        0
    }
}
