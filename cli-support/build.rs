//! Sets `SPILLWAY_VERSION` to `<crate version> (<short git commit>)`, e.g. `0.1.0 (abc1234)`,
//! for `--version` of both binaries; the commit is `unknown` outside a git checkout (a source
//! tarball) or without git. Sets `SPILLWAY_DATE` to the commit's date (YYYY-MM-DD), the date
//! of the man pages, so the same commit gives the same pages; outside git, today's date. Reruns only when HEAD moves (a commit, a checkout), not on every
//! edit: the paths watched are HEAD and the branch's ref, located with `git rev-parse
//! --git-path` so that linked worktrees (whose HEAD lives under the main repository) work too.
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn watch(git_path: &str) {
    if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", git_path]) {
        // A path that does not exist would make cargo rerun this script on every build.
        if Path::new(&p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    if commit.is_some() {
        watch("HEAD");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch(&branch);
        }
        watch("packed-refs");
    }
    let date = git(&["log", "-1", "--format=%cs", "HEAD"])
        .or_else(|| {
            let out = Command::new("date").args(["-u", "+%Y-%m-%d"]).output().ok()?;
            Some(String::from_utf8(out.stdout).ok()?.trim().to_string()).filter(|d| !d.is_empty())
        })
        .unwrap_or_else(|| "1970-01-01".into());
    println!("cargo:rustc-env=SPILLWAY_DATE={date}");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=SPILLWAY_VERSION={version} ({})", commit.as_deref().unwrap_or("unknown"));
}
