//! `--version` names the git commit, and the hidden `--generate-assets DIR` (run by
//! scripts/package.sh) writes a man page for every subcommand `--help` lists and the three
//! completion files, from the same clap definitions.

use std::process::Command;

fn ctl(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_spillwayctl")).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn version_is_the_crate_version_and_the_commit() {
    let (code, out, _) = ctl(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(out.trim(), format!("spillwayctl {}", spillway_cli_support::VERSION));
    assert!(out.starts_with(&format!("spillwayctl {} (", env!("CARGO_PKG_VERSION"))), "{out}");
}

#[test]
fn generate_assets_covers_every_subcommand_of_help() {
    let dir = std::env::temp_dir().join(format!("spw-ctl-assets-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = ctl(&["--generate-assets", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().count() > 10, "{out}");
    let (_, help, _) = ctl(&["--help"]);
    let subs: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    assert!(subs.contains(&"service") && subs.contains(&"explain"), "{help}");
    for s in subs {
        assert!(dir.join(format!("man/spillwayctl-{s}.1")).is_file(), "no man page for {s}");
    }
    assert!(dir.join("man/spillwayctl-service-set.1").is_file());
    let top = std::fs::read_to_string(dir.join("man/spillwayctl.1")).unwrap();
    assert!(top.contains("\\-\\-socket") && !top.contains("generate"), "{top}");
    for f in ["spillwayctl.bash", "_spillwayctl", "spillwayctl.fish"] {
        let text = std::fs::read_to_string(dir.join("completions").join(f)).unwrap();
        assert!(text.contains("service") && !text.contains("generate-assets"), "{f}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn generate_assets_without_a_directory_is_a_usage_error() {
    let (code, _, err) = ctl(&["--generate-assets"]);
    assert_eq!(code, 2);
    assert!(err.contains("usage: spillwayctl --generate-assets DIR"), "{err}");
}
