//! Parsing `spillwayctl`'s command line with clap, plus what clap cannot know by itself:
//!
//! - an option given before the command it belongs to (`spillwayctl --if-generation 3
//!   backend set web b1 weight=80`) is an unknown argument where clap meets it; the error
//!   gets clap's own `tip:` lines ([`misplaced_option_tips`]): the command line with the
//!   option moved after the command, or the commands that take it;
//! - with `--json` on the line, a usage error is the JSON error object of every other
//!   failure (`{"error": "usage", "exit_code": 2, "message": ...}`, docs/ctl.md "JSON
//!   errors") instead of clap's text, and after parsing [`crate::client::set_json_errors`]
//!   makes every later error JSON too.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgMatches, Command};

/// Whether the innermost subcommand of `m` has `--json` set.
pub fn json_set(m: &ArgMatches) -> bool {
    let mut m = m;
    while let Some((_, sub)) = m.subcommand() {
        m = sub;
    }
    m.try_get_one::<bool>("json").ok().flatten().copied().unwrap_or(false)
}

/// Whether `--json` is among the arguments (before a `--`): how a usage error, found
/// before there are matches, knows the output wanted.
pub fn json_in(args: &[String]) -> bool {
    args.iter().skip(1).take_while(|a| *a != "--").any(|a| a == "--json")
}

/// The `tip:` lines for an unknown argument `bad` (`--if-generation` or
/// `--if-generation=3`) that is an option of a command named on the line (`args`, the
/// program name first) or of commands below the one reached: with the option where it
/// belongs, `spillwayctl backend set web b1 weight=80 --if-generation 3`; else the commands
/// that take it. Empty when no command takes it (a misspelling: clap's own tips stand).
pub fn misplaced_option_tips(root: &Command, args: &[String], bad: &str) -> Vec<String> {
    let Some(long) = bad.strip_prefix("--").map(|b| b.split('=').next().unwrap_or(b)) else { return Vec::new() };
    // follow the subcommand names on the line as far as they go
    let mut cmd = root;
    let mut path: Vec<&str> = Vec::new();
    for a in args.iter().skip(1) {
        if let Some(sub) = cmd.find_subcommand(a) {
            cmd = sub;
            path.push(sub.get_name());
        }
    }
    let name = root.get_name();
    if let Some(arg) = cmd.get_arguments().find(|x| x.get_long() == Some(long)) {
        // the line with the option (and its value, when it takes one and was not given
        // as `--opt=value`) moved to the end
        let Some(at) = args.iter().position(|a| a == bad || a.split('=').next() == Some(&format!("--{long}"))) else { return Vec::new() };
        let with_value = !args[at].contains('=') && arg.get_action().takes_values() && at + 1 < args.len();
        let moved = &args[at..=at + usize::from(with_value)];
        let rest: Vec<&str> = args.iter().enumerate().skip(1).filter(|(i, _)| *i < at || *i > at + usize::from(with_value)).map(|(_, a)| a.as_str()).collect();
        return vec![format!("--{long} is an option of `{name} {}`: give it after the command: `{name} {} {}`", path.join(" "), rest.join(" "), moved.join(" "))];
    }
    let mut takers = Vec::new();
    let mut prefix = vec![name.to_string()];
    prefix.extend(path.iter().map(|p| p.to_string()));
    fn walk(c: &Command, prefix: &mut Vec<String>, long: &str, out: &mut Vec<String>) {
        for sub in c.get_subcommands() {
            prefix.push(sub.get_name().to_string());
            if sub.get_arguments().any(|x| x.get_long() == Some(long)) {
                out.push(prefix.join(" "));
            }
            walk(sub, prefix, long, out);
            prefix.pop();
        }
    }
    walk(cmd, &mut prefix, long, &mut takers);
    if takers.is_empty() {
        return Vec::new();
    }
    let value = cmd_value_name(cmd, long).map(|v| format!(" {v}")).unwrap_or_default();
    let list = if takers.len() > 4 { format!("{}, ... ({} commands)", takers[..4].join(", "), takers.len()) } else { takers.join(", ") };
    vec![format!("--{long} is an option of {list}: give it after the command, e.g. `{} ... --{long}{value}`", takers[0])]
}

/// The value name (`N`) of option `--long` on the first command below `c` that has it.
fn cmd_value_name(c: &Command, long: &str) -> Option<String> {
    for sub in c.get_subcommands() {
        if let Some(a) = sub.get_arguments().find(|x| x.get_long() == Some(long)) {
            return a.get_value_names().and_then(|v| v.first()).map(|v| v.to_string());
        }
        if let Some(v) = cmd_value_name(sub, long) {
            return Some(v);
        }
    }
    None
}

/// `e` with [`misplaced_option_tips`] added to its `tip:` lines (for an unknown argument).
pub fn with_tips(mut e: clap::Error, root: &Command, args: &[String]) -> clap::Error {
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg).cloned() else { return e };
    let tips = misplaced_option_tips(root, args, &bad);
    if tips.is_empty() {
        return e;
    }
    let mut all = match e.get(ContextKind::Suggested) {
        Some(ContextValue::StyledStrs(v)) => v.clone(),
        _ => Vec::new(),
    };
    all.extend(tips.into_iter().map(clap::builder::StyledStr::from));
    e.insert(ContextKind::Suggested, ContextValue::StyledStrs(all));
    e
}

/// The message of a usage error for the JSON error object: clap's text without `error: `,
/// the usage and the `--help` hint, lines joined with `; `.
pub fn usage_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let body = text.split("\nUsage:").next().unwrap_or(&text);
    let lines: Vec<&str> = body.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join("; ").trim_start_matches("error: ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn error(line: &str) -> String {
        let root = crate::Cli::command();
        let a = args(line);
        let e = root.clone().try_get_matches_from(&a).unwrap_err();
        with_tips(e.format(&mut root.clone()), &root, &a).render().to_string()
    }

    /// An option before its command: the error says where it goes, as a clap `tip:`, with
    /// the corrected line (fresh-user QA: only "unexpected argument '--if-generation'").
    #[test]
    fn an_option_before_its_command_gets_the_corrected_line() {
        let e = error("spillwayctl --if-generation 3 backend set web b1 weight=80");
        assert!(e.starts_with("error: unexpected argument '--if-generation' found"), "{e}");
        assert!(e.contains("  tip: --if-generation is an option of `spillwayctl backend set`: give it after the command: `spillwayctl backend set web b1 weight=80 --if-generation 3`"), "{e}");
        let e = error("spillwayctl --if-generation=3 service remove api");
        assert!(e.contains("`spillwayctl service remove api --if-generation=3`"), "{e}");
        let e = error("spillwayctl --json status");
        assert!(e.contains("`spillwayctl status --json`"), "{e}");
        let e = error("spillwayctl --dry-run vip drain 10.0.0.100");
        assert!(e.contains("`spillwayctl vip drain 10.0.0.100 --dry-run`"), "{e}");
    }

    /// Without a command that takes it on the line, the tip names the commands that do;
    /// an option no command has gets no such tip.
    #[test]
    fn without_the_command_the_tip_lists_the_takers() {
        let e = error("spillwayctl backend --if-generation 3");
        assert!(e.contains("tip: --if-generation is an option of spillwayctl backend add, spillwayctl backend remove, spillwayctl backend set: give it after the command, e.g. `spillwayctl backend add ... --if-generation N`"), "{e}");
        let e = error("spillwayctl --if-generaton 3 backend set web b1 weight=80");
        assert!(!e.contains("is an option of"), "{e}");
    }

    #[test]
    fn usage_errors_under_json_are_one_line_messages() {
        let root = crate::Cli::command();
        let e = root.clone().try_get_matches_from(args("spillwayctl flows show --bogus --json")).unwrap_err().format(&mut root.clone());
        assert_eq!(usage_message(&e), "unexpected argument '--bogus' found");
        assert!(json_in(&args("spillwayctl flows show --bogus --json")));
        assert!(!json_in(&args("spillwayctl service add x -- --json")));
    }
}
