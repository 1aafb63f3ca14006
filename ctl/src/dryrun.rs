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
        Ok(r) => client::unexpected(&r),
        Err(e) => client::fail_as(e, json),
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The headline of one client class: the share of new connections whose endpoint changes
/// (the fraction of Maglev slots whose owner differs), and how much of it changes backend.
/// When it is 0 nothing moves, even if stages or shares read differently. Equal backend
/// shares do not mean the moves stay inside a backend (a new `maglev_table_size`
/// reshuffles owners across backends with every share unchanged): the words follow the
/// owners (`DryRunClass::backend_moved_share`), not the shares.
fn moved_headline(c: &DryRunClass) -> String {
    if c.moved_share <= 0.0 {
        return "nothing moves: no new connection changes backend or endpoint".into();
    }
    // an older daemon's answer has no backend figure (negative): say "backend" as before
    let backend = if c.backend_moved_share < 0.0 { c.moved_share } else { c.backend_moved_share };
    if backend <= 0.0 {
        format!("{} of new connections change endpoint (all stay on their backend)", pct(c.moved_share))
    } else if c.moved_share - backend > 1e-9 {
        format!("{} of new connections change endpoint, {} change backend", pct(c.moved_share), pct(backend))
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
    // A change no service's routing or tracked connections feel (a drain timeout, an idle
    // timeout, encap_mtu, a failover ratio without failover backends): say so, rather than
    // leave the diff alone as if its effect were unknown.
    let changed = !r.changes.is_empty() && r.changes.iter().all(|c| !c.starts_with("no change"));
    if changed && r.services.is_empty() && r.notes.is_empty() {
        let _ = writeln!(o, "routing unchanged: no new connection changes backend or endpoint, and every tracked connection stays on its backend");
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

    /// A change that moves nothing anywhere says so after the diff (fresh-user QA: a dry run
    /// of `failover_health_threshold` alone printed the diff and nothing else); an edit
    /// that changes nothing, or one with services or notes, gets no such line.
    #[test]
    fn a_change_that_moves_nothing_says_so() {
        let mut r = report(Vec::new());
        r.changes = vec!["service web: connection_drain_timeout_sec: 600 -> 300".into()];
        let text = render(&r);
        assert_eq!(text.lines().nth(2), Some("routing unchanged: no new connection changes backend or endpoint, and every tracked connection stays on its backend"), "{text}");
        r.changes = vec!["no change".into()];
        assert!(!render(&r).contains("routing unchanged"));
        r.changes = vec!["no config change (the drain is held in memory)".into()];
        r.notes = vec!["vip 10.0.0.100: ...".into()];
        assert!(!render(&r).contains("routing unchanged"));
        let text = render(&report(vec![service("changed", Vec::new())]));
        assert!(!text.contains("routing unchanged"), "{text}");
    }

    /// A class whose moved share is 0 says that nothing moves, also over a 100 % -> 100 %
    /// share table; endpoint moves with unchanged backend shares say "change endpoint".
    #[test]
    fn the_headline_says_what_moves() {
        let class = |moved_share: f64, backend_moved_share: f64, before: f64, after: f64| DryRunClass {
            class: "z1".into(),
            moved_share,
            backend_moved_share,
            shares: vec![ShareChange { backend: "b2".into(), before, after }],
            stages: vec![StageChange { stage: "weights".into(), before: "x".into(), after: "y".into() }],
        };
        let mut s = service("changed", vec![class(0.0, 0.0, 1.0, 1.0)]);
        s.repicked.push(Repick { backend: "b2".into(), endpoint: "e1".into(), reason: "removed".into(), connections: Some(0) });
        let text = render(&report(vec![s]));
        assert!(text.contains("client class z1: nothing moves: no new connection changes backend or endpoint\n"), "{text}");
        assert!(!text.contains("change backend\n"), "{text}");
        let text = render(&report(vec![service("changed", vec![class(0.5, 0.0, 1.0, 1.0)])]));
        assert!(text.contains("client class z1: 50.0% of new connections change endpoint (all stay on their backend)\n"), "{text}");
        // equal shares, but the owners moved across backends (a new table size)
        let text = render(&report(vec![service("changed", vec![class(0.666, 0.666, 0.5, 0.5)])]));
        assert!(text.contains("client class z1: 66.6% of new connections change backend\n"), "{text}");
        let text = render(&report(vec![service("changed", vec![class(0.5, 0.25, 0.5, 0.75)])]));
        assert!(text.contains("client class z1: 50.0% of new connections change endpoint, 25.0% change backend\n"), "{text}");
        // an older daemon's answer without the backend figure
        let text = render(&report(vec![service("changed", vec![class(0.25, -1.0, 0.5, 0.75)])]));
        assert!(text.contains("client class z1: 25.0% of new connections change backend\n"), "{text}");
    }
}
