//! `spillway`: the Spillway DPDK load balancer daemon.
//!
//! `spillway --config FILE [--socket PATH]`: starts EAL with the config's arguments and
//! ports, one poll-mode worker per configured worker (pinned), the control socket, and runs
//! until SIGINT/SIGTERM, then prints the final counters. Live edits made with `spillwayctl`
//! are written back to FILE atomically (see docs/ctl.md).

use clap::Parser;
use spillway_dataplane::start::{self, ports::Ports, preflight::Listeners, preflight::Preflight, report, spawn};
use spillway_dataplane::{ctl, dpdk};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Command line of the daemon.
#[derive(Parser, Debug)]
#[command(name = "spillway", version = spillway_cli_support::VERSION, about = "Spillway: userspace L4 passthrough load balancer on DPDK")]
struct Args {
    /// Configuration file (TOML; see docs/config.md).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Control socket path (overrides dataplane.socket).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Stop by itself after this many seconds (benchmarks, tests): 0.1 to 31,536,000.
    #[arg(long, value_name = "SECONDS", value_parser = parse_duration)]
    duration: Option<f64>,
    /// Validate the configuration and exit.
    #[arg(long)]
    check: bool,
    /// Log format on stderr: `text` (default) or `json` (one JSON object per line, for
    /// journald/log shippers); also `SPILLWAY_LOG_FORMAT`. See docs/operations.md.
    #[arg(long, value_name = "FORMAT", env = "SPILLWAY_LOG_FORMAT", value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
}

/// `--duration`: a finite number of seconds in [0.1, 31,536,000] (one year).
fn parse_duration(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if v.is_finite() && (0.1..=31_536_000.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is out of range: must be between 0.1 and 31536000 seconds"))
    }
}

/// Set by SIGINT/SIGTERM ([`spillway_dataplane::signals`]).
static STOP: std::sync::LazyLock<Arc<AtomicBool>> = std::sync::LazyLock::new(|| Arc::new(AtomicBool::new(false)));

fn main() {
    // Also `--generate-assets DIR` (hidden): man page and completions, for the package.
    let args: Args = spillway_cli_support::parse("8");
    start::init_logging(&args.log_format);
    match run(args) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("spillway: error: {e}");
            std::process::exit(2);
        }
    }
}

/// The daemon's life, in the order of the steps of [`spillway_dataplane::start`].
fn run(args: Args) -> Result<(), String> {
    // 1. The config, checked on this host before anything is taken.
    let pre = Preflight::load(&args.config, args.socket.as_deref())?;
    if args.check {
        return report::check_to_stdout(&pre);
    }
    spillway_dataplane::signals::install(Arc::clone(&STOP))?;
    // 2. The control socket is taken before EAL starts: a second daemon on the same socket
    // is refused here, before it touches any port; requests wait until it is served below.
    let socket = &pre.socket;
    let bound = ctl::socket::Bound::bind(socket, pre.group).map_err(|e| format!("control socket {}: {e}", socket.display()))?;
    // The file as loaded is the last good one (FILE.bak, docs/operations.md).
    ctl::persist::keep_loaded(&args.config, &pre.cfg);
    let Listeners { metrics, announcer } = Listeners::take(&pre.cfg)?;
    pre.log_warnings();

    // 3. EAL, then the ports (dropped before the EAL: locals drop in reverse order).
    let (eal, worker_lcores) = start::ports::start_eal(&pre)?;
    let ports = Ports::start(&pre.cfg, pre.workers)?;
    let link_ports = ports.link_ports(&pre.cfg);

    // 4. The daemon state, the health checker, fleet sync; then the control socket served.
    let start::state::Started { daemon, health_rx } = start::state::build(&pre, &args.config, &ports)?;
    let server = bound.serve(daemon.clone(), daemon.ctl_stats.clone()).map_err(|e| format!("control socket {}: {e}", socket.display()))?;
    tracing::info!(socket = %socket.display(), "control socket listening");

    // 5. Every thread that touches ports, mempools or the EAL runs inside this scope, so
    // none can outlive them: whatever way the closure returns (an error included),
    // `StopOnExit` stops the workers and the scope joins them before the ports, pools and
    // EAL below are dropped.
    let run_result = std::thread::scope(|scope| -> Result<(), String> {
        let _stop = spawn::StopOnExit(&daemon.shared.stop);
        spawn::workers(scope, &pre, &ports, &daemon, worker_lcores.as_deref())?;
        // Fleet: the metrics endpoint and the `fleet` thread (readiness, VIP
        // announcement, systemd READY/WATCHDOG), control side, stopped with the workers.
        spawn::side_threads(scope, &pre.cfg, &daemon, metrics, announcer)?;
        // The control loop: health events (coalesced per control tick), load ticks,
        // snapshot publication and reclamation (spillway_dataplane::control_loop).
        let deadline = args.duration.map(|d| Instant::now() + Duration::from_secs_f64(d));
        let mut links = dpdk::LinkWatch::new(link_ports);
        spillway_dataplane::control_loop::run(&daemon, &health_rx, &mut links, &STOP, deadline)
    });

    // 6. Shutdown: workers have stopped and been joined here, on success and on error alike.
    if let Some(c) = daemon.checker.lock().unwrap_or_else(|e| e.into_inner()).take() {
        c.stop();
    }
    dpdk::wait_lcores();
    daemon.shared.reclaim();
    let status = daemon.status();
    server.shutdown();
    report::final_counters(&status);
    ports.stop();
    drop(daemon);
    drop(eal);
    run_result
}
