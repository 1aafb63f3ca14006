//! The arguments of `spillwayctl`'s edits that clap cannot check by itself: `FIELD=VALUE`
//! pairs, a NAME left out and a `set` with nothing to set. Every refusal is a usage error (exit 2, the subcommand's usage line) and nothing is
//! sent to the daemon.

use spillway_shared::proto::Request;

/// Splits `field=value` arguments; a field given twice (`weight=1 weight=2`) is refused,
/// since which value was meant is unknown, and so is a value that is more than one TOML
/// line ([`extra_keys`]).
pub fn parse_fields(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(args.len());
    for a in args {
        let (k, v) = match a.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => (k.trim().to_string(), v.to_string()),
            _ => return Err(format!("invalid value {a:?} for 'FIELD=VALUE': expected FIELD=VALUE, e.g. weight=80")),
        };
        if let Some(extra) = extra_keys(&v) {
            return Err(format!(
                "invalid value {a:?} for 'FIELD=VALUE': the value of `{k}` holds more TOML after it ({extra}), which would not be applied; give each field as its own FIELD=VALUE argument"
            ));
        }
        if let Some((_, w)) = out.iter().find(|(j, _)| *j == k) {
            return Err(format!("field `{k}` is given twice ({k}={w} and {k}={v}); give each field once"));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// The keys a value brings besides its own when it is read as the daemon reads it (a
/// TOML document `x = VALUE`, docs/ctl.md "Field syntax"): `zone="z2"` + newline +
/// `weight=5` is one argument holding two lines, of which the daemon would take only the
/// first and drop `weight` without a word. `None` for a value that is one TOML value (a
/// multi-line array included) or no TOML at all (a bare word, taken as a string).
fn extra_keys(v: &str) -> Option<String> {
    let t = toml::from_str::<toml::Table>(&format!("x = {}", v.trim())).ok()?;
    let extra: Vec<&str> = t.keys().map(String::as_str).filter(|k| *k != "x").collect();
    (!extra.is_empty()).then(|| extra.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn one(a: &str) -> Result<Vec<(String, String)>, String> {
        parse_fields(&[a.to_string()])
    }

    /// A value holding a second `key=value` line is refused, naming the key, instead of
    /// being sent: the daemon reads `x = VALUE` as a TOML document and keeps only `x`, so
    /// `zone="z2"` + newline + `weight=5` applied the zone and dropped the weight, answered
    /// "applied" (fresh-user QA). One value over several lines, a bare word or a comment
    /// stays a value.
    #[test]
    fn a_value_with_another_key_after_it_is_refused() {
        let e = one("zone=\"z2\"\nweight=5").unwrap_err();
        assert!(e.contains("the value of `zone` holds more TOML after it (`weight`)"), "{e}");
        let e = one("spillover_ratio=0.5\n[health_check]\npath=\"/x\"").unwrap_err();
        assert!(e.contains("(`health_check`)"), "{e}");
        for ok in ["weight=80", "zone=z1", "zone=\"z1\"", "eal_args=[\n\"-l\",\n\"1\"\n]", "name=a b", "ratio=0.5 # was 0.8", "zone="] {
            assert!(one(ok).is_ok(), "{ok}");
        }
    }
}
