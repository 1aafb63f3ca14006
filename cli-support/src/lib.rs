//! What `spillway` and `spillwayctl` share about their command lines:
//!
//! - [`VERSION`], the `--version` text: the crate version and the git commit it was built
//!   from, e.g. `0.1.0 (abc1234)` (set by this crate's build script).
//! - [`parse`]: parses a binary's clap definition, or, given the hidden first argument
//!   `--generate-assets DIR`, writes the binary's man pages and bash/zsh/fish completions
//!   into DIR instead ([`generate`]). The Debian package (`scripts/package.sh`) ships what
//!   this writes, so the man pages and completions are made from the very definitions that
//!   parse the command line and print `--help`: they cannot drift from them.

use clap::Parser;
use clap_complete::Shell;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// `--version` of both binaries: `<version> (<short git commit>)`, `unknown` as the commit
/// when built outside a git checkout.
pub const VERSION: &str = env!("SPILLWAY_VERSION");

/// The hidden first argument that makes [`parse`] write the assets instead of parsing.
pub const GENERATE_ASSETS: &str = "--generate-assets";

/// The shells completions are written for (clap_complete names the files `NAME.bash`,
/// `_NAME` and `NAME.fish`).
pub const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// Parses the process's command line into `T` like `T::parse()` (clap prints usage errors,
/// `--help` and `--version` and exits). When the first argument is `--generate-assets DIR`,
/// writes `T`'s man pages (section `man_section`) and completions under DIR, prints their
/// paths and exits 0 (2 on an error) without looking at anything else; the argument is not
/// part of `T`, so `--help`, the man pages and the completions do not show it.
pub fn parse<T: Parser>(man_section: &str) -> T {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == GENERATE_ASSETS) {
        let name = T::command().get_name().to_string();
        let code = match args.get(2) {
            Some(dir) if args.len() == 3 => match generate(T::command(), man_section, Path::new(dir)) {
                Ok(files) => {
                    files.iter().for_each(|f| println!("{}", f.display()));
                    0
                }
                Err(e) => {
                    eprintln!("{name}: {GENERATE_ASSETS} {}: {e}", Path::new(dir).display());
                    2
                }
            },
            _ => {
                eprintln!("{name}: usage: {name} {GENERATE_ASSETS} DIR");
                2
            }
        };
        std::process::exit(code);
    }
    T::parse()
}

/// Writes the man pages and shell completions of `cmd` under `dir` and returns their paths:
///
/// - `dir/man/NAME.SECTION`, plus one page per visible subcommand at every depth,
///   `NAME-SUB.SECTION`, `NAME-SUB-SUBSUB.SECTION` (as `git` does), so every option of
///   every subcommand is documented; the top page lists the subcommands;
/// - `dir/completions/NAME.bash`, `dir/completions/_NAME` (zsh),
///   `dir/completions/NAME.fish`.
pub fn generate(cmd: clap::Command, man_section: &str, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let man_dir = dir.join("man");
    let completions_dir = dir.join("completions");
    std::fs::create_dir_all(&man_dir)?;
    std::fs::create_dir_all(&completions_dir)?;
    let mut files = Vec::new();
    let mut man_cmd = cmd.clone().disable_help_subcommand(true);
    // Gives subcommands their full display names ("spillwayctl-service") and fills in the
    // version and help flags, as parsing would.
    man_cmd.build();
    man_pages(man_cmd, man_section, &man_dir, &mut files)?;
    let name = cmd.get_name().to_string();
    let mut cmd = cmd;
    for shell in SHELLS {
        files.push(clap_complete::generate_to(shell, &mut cmd, &name, &completions_dir)?);
    }
    Ok(files)
}

/// One page for `cmd`, after one for each of its visible subcommands (recursively).
fn man_pages(cmd: clap::Command, section: &str, dir: &Path, files: &mut Vec<PathBuf>) -> io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        man_pages(sub, section, dir, files)?;
    }
    // Every field set: clap_mangen drops empty ones from `.TH`, shifting the rest.
    let man = clap_mangen::Man::new(cmd).section(section).date(env!("SPILLWAY_DATE")).source(format!("Spillway {VERSION}")).manual("Spillway");
    files.push(man.generate_to(dir)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};

    /// A small two-level command line, like spillwayctl's.
    #[derive(Parser)]
    #[command(name = "demo", version = VERSION, about = "Demo tool")]
    struct Cli {
        /// Socket path.
        #[arg(long)]
        socket: Option<PathBuf>,
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand)]
    enum Cmd {
        /// Services.
        #[command(subcommand)]
        Service(ServiceCmd),
        /// Not for users.
        #[command(hide = true)]
        Internal,
    }

    #[derive(Subcommand)]
    enum ServiceCmd {
        /// List services.
        List {
            /// Machine-readable JSON.
            #[arg(long)]
            json: bool,
        },
    }

    #[test]
    fn version_names_the_crate_version_and_a_commit() {
        let (v, rest) = VERSION.split_once(" (").expect("VERSION is `<version> (<commit>)`");
        assert_eq!(v, env!("CARGO_PKG_VERSION"));
        let commit = rest.strip_suffix(')').expect("closing parenthesis");
        assert!(commit == "unknown" || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())), "{VERSION}");
    }

    #[test]
    fn generate_writes_pages_for_visible_subcommands_and_three_completions() {
        use clap::CommandFactory;
        let dir = std::env::temp_dir().join(format!("spw-cli-assets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = generate(Cli::command(), "1", &dir).unwrap();
        let mut names: Vec<String> = files.iter().map(|f| f.strip_prefix(&dir).unwrap().display().to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            ["completions/_demo", "completions/demo.bash", "completions/demo.fish", "man/demo-service-list.1", "man/demo-service.1", "man/demo.1"]
        );
        let top = std::fs::read_to_string(dir.join("man/demo.1")).unwrap();
        let th = format!(".TH demo 1 {} \"Spillway {VERSION}\" Spillway", env!("SPILLWAY_DATE"));
        assert!(top.contains(&th), "{th} not in {top}");
        assert!(top.contains("demo\\-service(1)") && !top.contains("internal"), "{top}");
        let list = std::fs::read_to_string(dir.join("man/demo-service-list.1")).unwrap();
        assert!(list.contains("\\-\\-json") && list.contains("Machine\\-readable JSON"), "{list}");
        let bash = std::fs::read_to_string(dir.join("completions/demo.bash")).unwrap();
        assert!(bash.contains("service") && bash.contains("complete -F _demo"), "{bash}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
