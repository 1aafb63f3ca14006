//! `--dry-run` of the editing commands: sends the edit wrapped in
//! [`Request::DryRun`] and prints what it would change ([`DryRunReport`]); nothing is
//! applied or written. Exit codes as for the edit itself: 0 (the edit would be accepted),
//! 1 refused, 2 no daemon.

use crate::client;
use spillway_shared::dryrun::DryRunReport;
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
        Err(e) => {
            eprintln!("spillwayctl: {e}");
            e.exit_code()
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// The text of a dry run's answer.
pub fn render(r: &DryRunReport) -> String {
    let mut o = format!("dry run against config generation {}: nothing applied\n", r.config_generation);
    for c in &r.changes {
        let _ = writeln!(o, "  {c}");
    }
    for s in &r.services {
        let _ = writeln!(o, "service {} ({}):", s.service, s.what);
        for c in &s.classes {
            let _ = writeln!(o, "  client class {}: {} of new connections change backend", c.class, pct(c.moved_share));
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
