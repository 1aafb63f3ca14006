//! `--dry-run` of the editing commands: sends the edit wrapped in
//! [`Request::DryRun`] and prints what it would change ([`DryRunReport`]); nothing is
//! applied or written. Exit codes as for the edit itself: 0 (the edit would be accepted),
//! 1 refused, 2 no daemon.

use crate::client;
use spillway_shared::dryrun::{DryRunClass, DryRunReport};
use spillway_shared::proto::{Request, Response};
use std::fmt::Write;
use std::path::Path;

/// Sends `req` as a dry run and prints the answer (text, or JSON with `json`).
pub fn request(socket: &Path, req: Request, json: bool) -> i32 {
    match client::request(socket, &Request::DryRun(Box::new(req))) {
        Ok(Response::DryRun(r)) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                print!("{}", render(&r));
            }
            0
        }
        Ok(r) => {
            eprintln!("spillwayctl: unexpected response from the daemon: {r:?}");
            2
        }
        Err(e) => client::fail_as(e, json),
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The headline of one client class: the share of new connections whose endpoint changes
/// (the fraction of Maglev slots whose owner differs). When it is 0 nothing moves, even if
/// stages or shares read differently; when the backends' shares are all unchanged the moves
/// are between endpoints (an endpoint edit), not a change of backend share.
fn moved_headline(c: &DryRunClass) -> String {
    if c.moved_share <= 0.0 {
        return "nothing moves: no new connection changes backend or endpoint".into();
    }
    let same_shares = c.shares.iter().all(|sh| (sh.before - sh.after).abs() <= 1e-9);
    if same_shares {
        format!("{} of new connections change endpoint (backend shares unchanged)", pct(c.moved_share))
    } else {
        format!("{} of new connections change backend", pct(c.moved_share))
    }
}

/// The text of a dry run's answer.
pub fn render(r: &DryRunReport) -> String {
    let mut o = format!("dry run against config generation {}: nothing applied\n", r.config_generation);
    for c in &r.changes {
        let _ = writeln!(o, "  {c}");
    }
    for s in &r.services {
        if s.classes.is_empty() && s.repicked.is_empty() {
            // no backends before or after (`DryRunService`): one line, not a trace per class
            let what = match s.what.as_str() {
                "added" => "a new service with no backends: new connections to it are dropped (no_backend), nothing moves",
                "removed" => "it has no backends: no connections to move",
                _ => "no backends before or after: new connections stay dropped (no_backend), nothing moves",
            };
            let _ = writeln!(o, "service {} ({}): {what}", s.service, s.what);
            continue;
        }
        let _ = writeln!(o, "service {} ({}):", s.service, s.what);
        for c in &s.classes {
            let _ = writeln!(o, "  client class {}: {}", c.class, moved_headline(c));
            for sh in &c.shares {
                let _ = writeln!(o, "    {:<16} {:>6} -> {:>6}", sh.backend, pct(sh.before), pct(sh.after));
            }
            for st in &c.stages {
                let _ = writeln!(o, "    stage {}:\n      before: {}\n      after:  {}", st.stage, st.before, st.after);
            }
        }
        if s.repicked.is_empty() {
            let _ = writeln!(o, "  tracked connections: all stay on their backends");
        } else {
            let _ = writeln!(o, "  tracked connections re-picked:");
            for p in &s.repicked {
                let n = p.connections.map_or_else(|| "? (workers did not answer)".to_string(), |n| n.to_string());
                let who = if p.endpoint == p.backend { p.backend.clone() } else { format!("{}/{}", p.backend, p.endpoint) };
                let _ = writeln!(o, "    {who:<20} {n:>8}  {}", p.reason);
            }
        }
    }
    for n in &r.notes {
        let _ = writeln!(o, "{n}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_shared::dryrun::{DryRunService, Repick, ShareChange, StageChange};

    fn report(services: Vec<DryRunService>) -> DryRunReport {
        DryRunReport { config_generation: 1, changes: vec!["service api added (0 backends)".into()], services, notes: Vec::new() }
    }

    fn service(what: &str, classes: Vec<DryRunClass>) -> DryRunService {
        DryRunService { service: "api".into(), what: what.into(), classes, repicked: Vec::new() }
    }

    /// A service without backends before and after gets one line, whatever the edit.
    #[test]
    fn an_empty_service_is_one_line() {
        for (what, says) in [("added", "a new service with no backends"), ("removed", "it has no backends"), ("changed", "no backends before or after")] {
            let text = render(&report(vec![service(what, Vec::new())]));
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 3, "{text}");
            assert!(lines[2].starts_with(&format!("service api ({what}): {says}")), "{text}");
        }
    }

    /// A class whose moved share is 0 says that nothing moves, also over a 100 % -> 100 %
    /// share table; endpoint moves with unchanged backend shares say "change endpoint".
    #[test]
    fn the_headline_says_what_moves() {
        let class = |moved_share: f64, before: f64, after: f64| DryRunClass {
            class: "z1".into(),
            moved_share,
            shares: vec![ShareChange { backend: "b2".into(), before, after }],
            stages: vec![StageChange { stage: "weights".into(), before: "x".into(), after: "y".into() }],
        };
        let mut s = service("changed", vec![class(0.0, 1.0, 1.0)]);
        s.repicked.push(Repick { backend: "b2".into(), endpoint: "e1".into(), reason: "removed".into(), connections: Some(0) });
        let text = render(&report(vec![s]));
        assert!(text.contains("client class z1: nothing moves: no new connection changes backend or endpoint\n"), "{text}");
        assert!(!text.contains("change backend\n"), "{text}");
        let text = render(&report(vec![service("changed", vec![class(0.5, 1.0, 1.0)])]));
        assert!(text.contains("client class z1: 50.0% of new connections change endpoint (backend shares unchanged)\n"), "{text}");
        let text = render(&report(vec![service("changed", vec![class(0.25, 0.5, 0.75)])]));
        assert!(text.contains("client class z1: 25.0% of new connections change backend\n"), "{text}");
    }
}
