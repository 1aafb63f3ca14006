//! dist/spillway.service checked with `systemd-analyze verify`: CI and the
//! development hosts run without systemd as PID 1, so the unit is verified rather than
//! started (docs/operations.md "systemd"). `ExecStart=` must name an existing executable
//! for `verify`, so a copy of the unit points at the `spillway` binary under test.
//! Skips, with a message, where `systemd-analyze` is not installed.

use std::path::Path;
use std::process::Command;

fn unit() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/spillway.service")).expect("dist/spillway.service")
}

/// Runs `systemd-analyze verify` on `text`; `None` when the tool is missing.
fn verify(text: &str, name: &str) -> Option<(bool, String)> {
    let dir = std::env::temp_dir().join(format!("spw-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    std::fs::write(&file, text.replace("/usr/bin/spillway", env!("CARGO_BIN_EXE_spillway"))).unwrap();
    // --man=no: the unit's `Documentation=man:spillway(8)` is installed by the package, not
    // by a source build (the package step of scripts/test.sh verifies it with the page).
    let o = Command::new("systemd-analyze").arg("verify").arg("--man=no").arg(&file).output().ok()?;
    Some((o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))))
}

#[test]
fn unit_file_verifies() {
    let text = unit();
    for key in ["Type=notify", "WatchdogSec=", "NotifyAccess=main", "ExecStart=/usr/bin/spillway --config"] {
        assert!(text.contains(key), "unit lacks {key}");
    }
    let Some((ok, out)) = verify(&text, "spillway.service") else {
        eprintln!("SKIP systemd-analyze not found: install systemd to verify dist/spillway.service");
        return;
    };
    assert!(ok && out.trim().is_empty(), "systemd-analyze verify:\n{out}");
    // The check can fail: a misspelt key is reported.
    let (_, out) = verify(&text.replace("WatchdogSec=", "WatchdgSec="), "typo.service").unwrap();
    assert!(out.contains("Unknown key 'WatchdgSec'"), "{out}");
}
