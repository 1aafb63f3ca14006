//! The daemon's process signals.
//!
//! * SIGINT and SIGTERM stop it: the flag given to [`install`] is set (signal-hook stores to
//!   it from the handler, which is async-signal-safe), the workers stop, the final counters
//!   are printed and the control socket is removed.
//! * SIGHUP, SIGUSR1 and SIGUSR2 are ignored with a warning in the log. Their default action
//!   would kill the daemon at once, without a log line or final counters, dropping every
//!   connection table: a closed terminal (SIGHUP) or a stray `kill -USR1` must not take the
//!   load balancer down. Configuration is reloaded with `spillwayctl config apply FILE`,
//!   not by SIGHUP.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Signals the daemon ignores (with a warning), by name.
pub const IGNORED: [(i32, &str); 3] = [(SIGHUP, "SIGHUP"), (SIGUSR1, "SIGUSR1"), (SIGUSR2, "SIGUSR2")];

/// Installs the handlers: `stop` is set on SIGINT or SIGTERM; the [`IGNORED`] signals are
/// logged by a thread of their own (`signals`). Errors: a handler or the thread could not be
/// set up (named in the message).
pub fn install(stop: Arc<AtomicBool>) -> Result<(), String> {
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| format!("cannot install the handler of signal {sig}: {e}"))?;
    }
    let mut ignored = signal_hook::iterator::Signals::new(IGNORED.map(|(s, _)| s)).map_err(|e| format!("cannot install the handlers of SIGHUP, SIGUSR1 and SIGUSR2: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in ignored.forever() {
                let name = IGNORED.iter().find(|(s, _)| *s == sig).map_or("?", |(_, n)| n);
                tracing::warn!(signal = name, "{name} received and ignored (SIGINT or SIGTERM stop the daemon; `spillwayctl config apply FILE` reloads the configuration)");
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}
