//! `spillwayctl`: control tool for the Spillway daemon, plus offline tools
//! (`scenario run`, `explain`) that need no daemon.
//!
//! Exit codes: 0 success, 1 a check failed (e.g. a scenario mismatch), 2 usage, file or
//! configuration errors.

mod client;
mod explain;
mod scenario;
mod status;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Command line.
#[derive(Parser, Debug)]
#[command(name = "spillwayctl", version, about = "Control and inspect the Spillway L4 load balancer")]
struct Cli {
    /// Control socket of the daemon.
    #[arg(long, global = true, value_name = "PATH", default_value = spillway_shared::config::DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

/// Top-level commands (extend here: `status`, `backend`, ...).
#[derive(Subcommand, Debug)]
enum Command {
    /// Offline routing conformance scenarios (no daemon needed).
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// Explain, stage by stage, where a new connection from a client would go (offline,
    /// from a config file and optional health/latency/load JSON).
    Explain(explain::ExplainArgs),
    /// Daemon status: ports, workers, counters, drops by reason, new connections per backend.
    Status {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
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

fn main() {
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Scenario(ScenarioCmd::Run { files }) => scenario::run(files),
        Command::Explain(args) => explain::run(args),
        Command::Status { json } => status::run(&cli.socket, *json),
    };
    std::process::exit(code);
}
