//! Start-up and shutdown of the daemon, the steps `main.rs` runs in this order
//! (docs/architecture.md "The tree"):
//!
//! 1. [`preflight`]: the config loaded and checked on this host before anything is taken
//!    (`--check` stops here and prints [`report::check`]);
//! 2. the control socket, then the metrics listener and announcement interface
//!    ([`preflight::Listeners`]), all before EAL, so a second daemon or a bad field fails
//!    the start before any port is touched;
//! 3. [`ports`]: EAL with the config's arguments, then every port configured and started;
//! 4. [`state`]: the daemon state over those ports, the health checker, fleet sync;
//! 5. [`spawn`]: the workers and the side threads (metrics, sync, fleet) in the scope that
//!    holds them, while the main thread runs [`crate::control_loop::run`];
//! 6. shutdown: workers joined, the final counters printed ([`report::final_counters`]),
//!    ports stopped, then the pools, the daemon and the EAL dropped.

pub mod ports;
pub mod preflight;
pub mod report;
pub mod spawn;
pub mod state;

/// Logging on stderr (docs/operations.md "Logs"): `RUST_LOG` filter (default
/// `info`); `json` = one JSON object per line; text without colours unless stderr is a
/// terminal, and without timestamps under journald (`JOURNAL_STREAM` set), which stamps
/// every line itself. `format`: `text` or `json` (the CLI's `--log-format`).
pub fn init_logging(format: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if format == "json" {
        b.json().with_current_span(false).init();
    } else if std::env::var_os("JOURNAL_STREAM").is_some() {
        b.with_ansi(false).without_time().init();
    } else {
        b.with_ansi(std::io::stderr().is_terminal()).init();
    }
}
