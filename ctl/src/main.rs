//! `spillwayctl`: control tool for the Spillway daemon, plus offline tools
//! (`scenario run`, `explain`) that need no daemon.
//!
//! Exit codes: 0 success, 1 a check failed (a scenario mismatch) or the daemon refused the
//! request (validation error, stale `--if-generation`, unknown name), 2 usage, file or
//! configuration errors, or no daemon listening, 3 no answer within `--timeout` (the
//! request may still be applied). See docs/ctl.md.

mod args;
mod capture;
mod client;
mod dryrun;
mod endpoint;
mod explain;
mod explain_quic;
mod fields;
mod live;
mod replay;
mod scenario;
mod service_read;
mod status;
mod table;
mod top;
mod vip;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Command line.
#[derive(Parser, Debug)]
#[command(name = "spillwayctl", version = spillway_cli_support::VERSION, about = "Control and inspect the Spillway L4 load balancer")]
struct Cli {
    /// Control socket of the daemon.
    #[arg(long, global = true, value_name = "PATH", default_value = spillway_shared::config::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Seconds to wait for the daemon's answer (at least 1). Past it the command exits 3
    /// (JSON error `timeout`): the request may still be applied (docs/ctl.md "Exit codes").
    #[arg(long, global = true, value_name = "SECS", default_value_t = client::DEFAULT_TIMEOUT_SEC, value_parser = clap::value_parser!(u64).range(1..=86400))]
    timeout: u64,
    #[command(subcommand)]
    command: Command,
}

/// Top-level commands.
#[derive(Subcommand, Debug)]
enum Command {
    /// Offline routing conformance scenarios (no daemon needed).
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// Explain, stage by stage, where a new connection from a client would go: against the
    /// running daemon's live state, or offline with --config FILE (and optional --health).
    Explain(explain::ExplainArgs),
    /// Replay a capture (pcap or pcapng) through the real packet path under a baseline
    /// config and a new one, offline: which flows would change backend, be dropped or no
    /// longer be dropped, and which tracked connections would move mid-flow.
    Replay(replay::ReplayArgs),
    /// Daemon status: ports, workers, counters, drops by reason, new connections per backend.
    Status {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Live view refreshed every second: per service and backend new connections/s,
    /// packets/s, bits/s and health; per worker busy-poll share; per port imissed/s; drops/s
    /// by reason. Keys: q (or Ctrl-C) quit, s sort, r reverse, / filter, c clear. `--once` (`--json`)
    /// prints one sample.
    Top(top::TopArgs),
    /// Packet capture: `capture drops -w FILE|-` writes the frames the daemon drops as
    /// pcapng, each with its drop reason and worker as the packet comment.
    #[command(subcommand)]
    Capture(capture::CaptureCmd),
    /// Counters per port, worker, backend and drop reason.
    Stats {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// The running configuration: show, apply a file (as a diff).
    #[command(subcommand)]
    Config(live::ConfigCmd),
    /// Services: list, show, add, remove, set FIELD=VALUE.
    #[command(subcommand)]
    Service(live::ServiceCmd),
    /// Backends of a service: list, show, add, remove, set FIELD=VALUE.
    #[command(subcommand)]
    Backend(live::BackendCmd),
    /// Endpoints of a backend group: add, remove, set FIELD=VALUE.
    #[command(subcommand)]
    Endpoint(endpoint::EndpointCmd),
    /// Health of every endpoint of every backend.
    #[command(subcommand)]
    Health(live::HealthCmd),
    /// Connection tables of the workers: count, show, flush (by service or backend).
    #[command(subcommand)]
    Flows(live::FlowsCmd),
    /// The published routing snapshot.
    #[command(subcommand)]
    Snapshot(live::SnapshotCmd),
    /// VIP readiness and announcement: show, drain VIP, undrain VIP (docs/bgp.md).
    #[command(subcommand)]
    Vip(vip::VipCmd),
}

#[derive(Subcommand, Debug)]
enum ScenarioCmd {
    /// Run scenario files: one JSON line per step; exit 0 all pass, 1 any mismatch,
    /// 2 an invalid file.
    Run {
        /// Scenario JSON files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

/// Reports a command-line error found after parsing (a malformed or repeated
/// `FIELD=VALUE`, a NAME left out) the way clap reports its own: `error: ...` plus the
/// usage line of the subcommand at `path` (e.g. `["service", "set"]`; a path that names no
/// subcommand stops at the deepest one found) on stderr, or the JSON error object under
/// `--json`; returns exit code 2. Nothing is sent to the daemon.
pub(crate) fn usage_error_in(path: &[&str], message: impl std::fmt::Display) -> i32 {
    use clap::CommandFactory;
    if client::json_errors() {
        return client::error_out("spillwayctl", "usage", 2, &message.to_string());
    }
    let mut top = Cli::command();
    top.build();
    let mut cmd = &mut top;
    for p in path {
        if cmd.find_subcommand(p).is_none() {
            break;
        }
        cmd = cmd.find_subcommand_mut(p).expect("found above");
    }
    let e = cmd.error(clap::error::ErrorKind::ValueValidation, message);
    let _ = e.print();
    2
}

/// Parses the command line ([`args`]): clap's errors, with a tip for an option given before
/// its command, as JSON under `--json`; `--help`, `--version` and `--generate-assets DIR`
/// as usual.
fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let raw: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    if raw.get(1).is_some_and(|a| a == spillway_cli_support::GENERATE_ASSETS) {
        return spillway_cli_support::parse("1");
    }
    let root = Cli::command();
    let parsed = root.clone().try_get_matches_from(std::env::args_os()).and_then(|m| Cli::from_arg_matches(&m).map(|c| (c, args::json_set(&m))));
    match parsed {
        Ok((cli, json)) => {
            client::set_json_errors(json);
            cli
        }
        Err(e) => {
            let e = args::with_tips(e.format(&mut root.clone()), &root, &raw);
            if e.use_stderr() && args::json_in(&raw) {
                client::set_json_errors(true);
                std::process::exit(client::error_out("spillwayctl", "usage", 2, &args::usage_message(&e)));
            }
            e.exit()
        }
    }
}

fn main() {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`spillwayctl ... | head`) instead of panicking on a broken pipe.
    // SAFETY: setting a signal disposition to the default at start, before any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Also `--generate-assets DIR` (hidden): man pages and completions, for the package.
    let cli: Cli = parse();
    client::set_timeout(cli.timeout);
    let code = match &cli.command {
        Command::Scenario(ScenarioCmd::Run { files }) => scenario::run(files),
        Command::Explain(args) => explain::run(args, &cli.socket),
        Command::Replay(args) => replay::run(args, &cli.socket),
        Command::Status { json } => status::run(&cli.socket, *json),
        Command::Top(args) => top::run(&cli.socket, args),
        Command::Capture(c) => capture::run(&cli.socket, c),
        Command::Stats { json } => live::stats(&cli.socket, *json),
        Command::Config(c) => live::config(&cli.socket, c),
        Command::Service(c) => live::service(&cli.socket, c),
        Command::Backend(c) => live::backend(&cli.socket, c),
        Command::Endpoint(c) => endpoint::run(&cli.socket, c),
        Command::Health(c) => live::health(&cli.socket, c),
        Command::Flows(c) => live::flows(&cli.socket, c),
        Command::Snapshot(c) => live::snapshot(&cli.socket, c),
        Command::Vip(c) => vip::run(&cli.socket, c),
    };
    std::process::exit(code);
}
