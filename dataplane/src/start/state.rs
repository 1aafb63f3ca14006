//! Start-up step 4: the daemon state over the started ports, the health checker and
//! fleet sync, all before the control socket is served and the workers start.

use super::ports::{multicast_programmer, Ports};
use super::preflight::Preflight;
use crate::daemon::Daemon;
use crate::health::{self, HealthChecker, HealthEvent};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// The daemon and the receiving end of the health checker's events (the control loop's).
pub struct Started {
    /// The daemon state, shared with every thread.
    pub daemon: Arc<Daemon>,
    /// Health events for the control loop (closed when the checker is gone).
    pub health_rx: Receiver<HealthEvent>,
}

/// Builds the daemon over `ports`: RSS and the fleet-sync placement it leads to, the
/// ports' status reader and multicast filters, next-hop resolution's port sides, the
/// config generation continued from `config` (the file live edits write back to), the
/// health checker (its first round decides each target, docs/bgp.md "Readiness") and the
/// `[sync]` runtime. Errors: the daemon's snapshot cannot be compiled, the placement fault
/// injection is malformed, the checker or sync cannot start.
pub fn build(pre: &Preflight, config: &Path, ports: &Ports) -> Result<Started, String> {
    let (cfg, workers) = (&pre.cfg, pre.workers);
    // Each port's RSS as its device reports it, and the fleet-sync placement it leads to
    // (shown per port in `status` and the metrics, whether or not [sync] is configured).
    let rss_confs = ports.rss_confs(cfg);
    let (placement, port_rss) = crate::sync::sync_placement(workers, cfg.sync.is_some(), &rss_confs, std::env::var("SPILLWAY_FAULT_SYNC_PLACEMENT").ok().as_deref())?;
    let links = Arc::new(crate::readiness::LinkStates::new(cfg.ports.iter().map(|p| p.name.clone())));
    let port_stats = ports.stats_fn(cfg, links.clone(), port_rss);
    let port_addrs = ports.infos.iter().map(|p| p.addr).collect();
    // Live edits are written to the file the path names at each write (a symlinked config
    // stays a symlink, and one re-pointed while running is followed), and the config
    // generation continues from the one the file was last written with, so an
    // `--if-generation` read before a restart cannot match an edit made after it.
    let config_path = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    let daemon = Arc::new(Daemon::new(cfg.clone(), workers, port_addrs, port_stats)?.with_config_path(config_path).with_multicast(multicast_programmer(ports.multicast.clone())).with_links(links));
    // Next-hop resolution sends on the ports packets are forwarded out of (towards backends).
    let sides = ports
        .infos
        .iter()
        .enumerate()
        .map(|(i, p)| crate::neighbor::driver::PortSide {
            mac: p.mac,
            addr: std::net::Ipv4Addr::from(p.addr),
            forwarding: ports.infos.iter().any(|q| q.forward_to == i),
        })
        .collect();
    daemon.control.lock().unwrap_or_else(|e| e.into_inner()).neighbors.set_ports(sides);
    if let Some(g) = pre.persisted_generation() {
        daemon.control.lock().unwrap_or_else(|e| e.into_inner()).config_generation = g;
        tracing::info!(config_generation = g, "continuing the config generation of the file");
    }
    let health_rx = start_health(&daemon, pre)?;

    // Fleet flow-state sync: socket and key before the workers start (docs/bgp.md).
    if let Some(sc) = &cfg.sync {
        // Peers' entries go to the worker RSS gives the flow: every port must report the
        // same key and table (flows may arrive on any of them); else to every worker
        // (crate::sync::sync_placement, which warns; the reason is in `status`).
        let rt = crate::sync::SyncRuntime::start(sc, workers, placement, spillway_shared::sync::routing_digest(cfg))?;
        let _ = daemon.shared.sync.set(rt.queues.clone());
        let _ = daemon.sync.set(Arc::new(rt));
    }
    Ok(Started { daemon, health_rx })
}

/// Health checks from the host stack: one descriptor per target in flight, so
/// `RLIMIT_NOFILE` is raised to its hard limit first. Started before the control socket is
/// served, so no live edit can come between the checker's first target set (generation 0)
/// and the daemon's health generation (a race that froze health).
fn start_health(daemon: &Daemon, pre: &Preflight) -> Result<Receiver<HealthEvent>, String> {
    match health::raise_nofile_limit() {
        Ok(n) => {
            tracing::info!(nofile = n, "RLIMIT_NOFILE raised to the hard limit");
            daemon.control.lock().unwrap_or_else(|e| e.into_inner()).nofile_limit = n;
        }
        Err(e) => tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
    let (health_tx, health_rx) = std::sync::mpsc::channel();
    let targets = health::targets_from_config(&pre.cfg);
    *daemon.health_events.lock().unwrap_or_else(|e| e.into_inner()) = Some(health_tx.clone());
    if !targets.is_empty() {
        let n = targets.len();
        // The first result of each target decides its state, and the VIPs wait for that
        // round (docs/bgp.md "Readiness").
        let opts = health::CheckerOptions { first_result_decides: true, ..Default::default() };
        let checker = HealthChecker::start_with(targets, health_tx.clone(), opts).map_err(|e| format!("cannot start the health checker: {e}"))?;
        daemon.first_probe_round.store(false, Ordering::SeqCst);
        *daemon.checker.lock().unwrap_or_else(|e| e.into_inner()) = Some(checker);
        tracing::info!(targets = n, "health checker started");
    }
    drop(health_tx);
    Ok(health_rx)
}
