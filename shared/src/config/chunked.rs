//! Parsing a whole config file again after a small change (`spillwayctl config apply` of
//! a file of 20,000 endpoints with one weight changed) in time proportional to the change:
//! the text is cut before each `[[services]]` header, and a service whose text is the same
//! as in the last file parsed is taken from that parse ([`ParseCache`]).
//!
//! The result is always what [`Config::from_toml`] gives for the same text: the cut is made
//! only where TOML itself separates the services (a line that is exactly `[[services]]`
//! starts a new element of the `services` array, and every table header after it up to
//! the next one is a `services.` sub-table of that element), and any text where that cannot
//! be told line by line (a multi-line string, a header of another table after the first
//! service, a services array written inline) or that does not parse piece by piece is
//! parsed whole by [`Config::from_toml`], whose error names the line.

use super::{Config, Service};
use std::collections::HashMap;

/// The services of the last text parsed, by their text (each piece from its `[[services]]`
/// line to the next): about one copy of the services' config, replaced by each parse.
#[derive(Debug, Default)]
pub struct ParseCache {
    services: HashMap<String, Service>,
}

/// The part before the first `[[services]]` line and each service's piece, or `None` when
/// the text cannot be cut safely (see the module doc).
fn cut(text: &str) -> Option<(&str, Vec<&str>)> {
    if text.contains("\"\"\"") || text.contains("'''") {
        return None;
    }
    let mut starts = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        if t == "[[services]]" {
            starts.push(at);
        } else if t.starts_with('[') && !starts.is_empty() && !(t.starts_with("[services.") || t.starts_with("[[services.")) {
            // another table after the first service (or an array value's line): whole
            return None;
        }
        at += line.len();
    }
    let first = *starts.first()?;
    let mut pieces = Vec::with_capacity(starts.len());
    for (i, &s) in starts.iter().enumerate() {
        let e = starts.get(i + 1).copied().unwrap_or(text.len());
        pieces.push(&text[s..e]);
    }
    Some((&text[..first], pieces))
}

impl Config {
    /// [`Config::from_toml`], taking every service whose text is unchanged since the last
    /// call with `cache` from that call's parse, and keeping this text's services in
    /// `cache` for the next. The result equals `Config::from_toml(text)`, errors included.
    pub fn from_toml_cached(text: &str, cache: &mut ParseCache) -> Result<Config, String> {
        let Some((head, pieces)) = cut(text) else {
            cache.services.clear();
            return Config::from_toml(text);
        };
        let parsed = (|| {
            // `services = [...]` (even empty) before the headers: whole (the parser refuses
            // the headers then)
            if toml::from_str::<toml::Table>(head).ok()?.contains_key("services") {
                return None;
            }
            let mut cfg: Config = toml::from_str(head).ok()?;
            let mut next = HashMap::with_capacity(pieces.len());
            for piece in pieces {
                let svc = match cache.services.remove(piece) {
                    Some(s) => s,
                    None => {
                        let one: Config = toml::from_str(piece).ok()?;
                        let [s]: [Service; 1] = one.services.try_into().ok()?;
                        s
                    }
                };
                cfg.services.push(svc.clone());
                next.insert(piece.to_string(), svc);
            }
            Some((cfg, next))
        })();
        match parsed {
            Some((cfg, next)) => {
                cache.services = next;
                Ok(cfg)
            }
            None => {
                cache.services.clear();
                Config::from_toml(text)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "[dataplane]\nworkers = 1\n[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n";

    fn service(i: u32, weight: u32) -> String {
        format!("[[services]]\nname = \"s{i}\"\nvip = \"10.0.0.{i}\"\nport = 80\n[services.health_check]\ntype = \"tcp\"\n[[services.backends]]\nname = \"b\"\nweight = {weight}\n[[services.backends.endpoints]]\naddress = \"10.1.0.{i}\"\nmac = \"02:00:00:00:00:01\"\n")
    }

    /// Pieces taken from the cache and pieces parsed anew give what a whole parse gives,
    /// for the texts a `config apply` sends (one weight changed, a service added or removed)
    /// and for texts that must be parsed whole (a table after the services, a multi-line
    /// string, an error, whose message and line are the whole parse's).
    #[test]
    fn equals_a_whole_parse() {
        let mut cache = ParseCache::default();
        let text = |ws: &[u32], tail: &str| format!("{HEAD}{}{tail}", ws.iter().enumerate().map(|(i, w)| service(i as u32 + 1, *w)).collect::<String>());
        for t in [
            text(&[1, 2, 3], ""),
            text(&[1, 5, 3], ""),
            text(&[1, 5, 3, 4], ""),
            text(&[1, 5], ""),
            text(&[1, 5], "[metrics]\nlisten = \"127.0.0.1:9100\"\n"),
            text(&[1, 5], "[[services.backends.endpoints]]\naddress = \"10.1.0.9\"\nmac = \"02:00:00:00:00:09\"\n"),
            text(&[7, 5], "# trailing comment\n"),
            format!("{HEAD}description = '''a\n[[services]]\n'''\n"),
            text(&[1, 2000], ""),
            text(&[1, 2], "[[services]]\nname = 3\n"),
            format!("services = []\n{}", text(&[1], "")),
            text(&[1, 2, 3], ""),
        ] {
            let whole = Config::from_toml(&t);
            let cached = Config::from_toml_cached(&t, &mut cache);
            assert_eq!(cached, whole, "{t}");
        }
    }

    /// A service whose text is unchanged is not parsed again: the cache holds each
    /// service's piece, and a second parse of one changed service leaves the others'.
    #[test]
    fn unchanged_services_come_from_the_cache() {
        let mut cache = ParseCache::default();
        let a = format!("{HEAD}{}{}", service(1, 1), service(2, 2));
        Config::from_toml_cached(&a, &mut cache).unwrap();
        assert_eq!(cache.services.len(), 2);
        assert!(cache.services.contains_key(&service(1, 1)));
        let b = format!("{HEAD}{}{}", service(1, 1), service(2, 9));
        let c = Config::from_toml_cached(&b, &mut cache).unwrap();
        assert_eq!(c.services[1].backends[0].weight, 9);
        assert!(cache.services.contains_key(&service(2, 9)) && !cache.services.contains_key(&service(2, 2)));
    }
}
