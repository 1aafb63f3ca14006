//! The arguments of `spillwayctl`'s edits that clap cannot check by itself: `FIELD=VALUE`
//! pairs, a NAME left out and a `set` with nothing to set. Every refusal is a usage error (exit 2, the subcommand's usage line) and nothing is
//! sent to the daemon.

use spillway_shared::proto::Request;

/// Splits `field=value` arguments; a field given twice (`weight=1 weight=2`) is refused,
/// since which value was meant is unknown.
pub fn parse_fields(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(args.len());
    for a in args {
        let (k, v) = match a.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => (k.trim().to_string(), v.to_string()),
            _ => return Err(format!("invalid value {a:?} for 'FIELD=VALUE': expected FIELD=VALUE, e.g. weight=80")),
        };
        if let Some((_, w)) = out.iter().find(|(j, _)| *j == k) {
            return Err(format!("field `{k}` is given twice ({k}={w} and {k}={v}); give each field once"));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// A positional NAME that is really a `FIELD=VALUE` pair (the NAME was left out, e.g.
/// `endpoint add web b1 address=10.0.1.13`) is a usage error (exit 2) naming what is
/// missing; names never hold `=` (docs/config.md, names).
/// The usage line printed is the subcommand's (the first two words of `example`).
pub(crate) fn name_given(what: &str, name: &str, example: &str) -> Result<(), i32> {
    if name.contains('=') {
        return Err(crate::usage_error_in(&usage_path(example), format!("{what} NAME is missing: {name:?} is a FIELD=VALUE pair, not a name; e.g. `spillwayctl {example}`")));
    }
    Ok(())
}

/// `set` with no `FIELD=VALUE` pair is a usage error (exit 2) with an example; checked after
/// [`name_given`], so a NAME left out is named as such rather than as "no fields".
pub(crate) fn fields_given(fields: &[String], example: &str) -> Result<(), i32> {
    if fields.is_empty() {
        return Err(crate::usage_error_in(&usage_path(example), format!("nothing to set: give one or more FIELD=VALUE pairs, e.g. `spillwayctl {example}`")));
    }
    Ok(())
}

/// Builds a mutation from `FIELD=VALUE` arguments; a malformed or repeated one is a usage
/// error (exit 2, clap style, with the usage line of `example`'s subcommand) and nothing
/// is sent.
pub(crate) fn with_fields(fields: &[String], example: &str, f: impl FnOnce(Vec<(String, String)>) -> Request) -> Result<Request, i32> {
    parse_fields(fields).map(f).map_err(|e| crate::usage_error_in(&usage_path(example), e))
}

/// The subcommand path of an example command line: its first two words.
fn usage_path(example: &str) -> Vec<&str> {
    example.split_whitespace().take(2).collect()
}
