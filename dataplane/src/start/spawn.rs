//! Start-up step 5: the threads, spawned in the scope `main.rs` opens so that none can
//! outlive the ports, mempools or the EAL: one poll-mode worker per configured worker
//! (pinned, or on its EAL lcore), and the control-side threads `metrics`, `sync` and
//! `fleet`. All stop when the daemon's stop flag is set ([`StopOnExit`]).

use super::ports::{worker_core, Ports};
use super::preflight::Preflight;
use crate::announce::Announcer;
use crate::daemon::Daemon;
use crate::dpdk;
use crate::fastpath::conntrack::Timeouts;
use crate::fastpath::worker::{run_loop, LoopParams, RedirectRings, Worker, DEFAULT_IPV6_CAPACITY, REDIRECT_RING_CAPACITY};
use spillway_shared::config::Config;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Scope;
use std::time::Duration;

/// Sets the workers' stop flag when dropped: the scope that runs the workers cannot end
/// (and so cannot return an error) with workers still polling.
pub struct StopOnExit<'a>(pub &'a AtomicBool);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The connection-table timeouts of `[conntrack]`, in ms.
fn timeouts(cfg: &Config) -> Timeouts {
    Timeouts {
        syn_ms: cfg.conntrack.tcp_syn_timeout_sec * 1000,
        tcp_ms: cfg.conntrack.tcp_idle_timeout_sec * 1000,
        closing_ms: cfg.conntrack.tcp_closing_timeout_sec * 1000,
        udp_ms: cfg.conntrack.udp_idle_timeout_sec * 1000,
    }
}

/// Spawns worker `w` for every `w < dataplane.workers` in `scope`: queue `w` of every
/// port, its own connection tables (`capacity_per_worker` entries; the IPv6 table as large
/// when IPv6 services are configured at start, else [`DEFAULT_IPV6_CAPACITY`]) seeded from
/// the OS, pinned to [`worker_core`] and registered with EAL, or run on `worker_lcores[w]`
/// when packet capture put the workers on EAL lcores. Errors: a thread cannot start.
pub fn workers<'scope, 'env>(scope: &'scope Scope<'scope, 'env>, pre: &'env Preflight, ports: &'env Ports, daemon: &'env Daemon, worker_lcores: Option<&[u32]>) -> Result<(), String> {
    let cfg = &pre.cfg;
    let timeouts = timeouts(cfg);
    let (device_macs, tx_multi_seg) = (ports.device_macs(), ports.tx_multi_seg());
    let params = |w: usize| LoopParams { index: w, epoch: daemon.started, idle_sleep: Duration::from_micros(u64::from(cfg.dataplane.idle_sleep_us)) };
    // Packets RSS gives the wrong worker (ICMP errors, fragments) go to the flow's owner by
    // the device's placement (fastpath/worker/redirect.rs; never the sync test's fault);
    // off without an RSS placement.
    let redirect_placement: std::sync::Arc<dyn crate::fastpath::worker::FlowOwner> = std::sync::Arc::new(crate::sync::Placement::choose(pre.workers, &ports.rss_confs(cfg)).0);
    let redirect_rings = std::sync::Arc::new(RedirectRings::new(pre.workers, REDIRECT_RING_CAPACITY));
    for w in 0..pre.workers {
        let mut queues: Vec<_> = ports.ports.iter().zip(&ports.pools).map(|(p, pool)| p.queue(w as u16).with_pool(pool)).collect();
        let core = worker_core(cfg, &pre.cores, w);
        let shared = &*daemon.shared;
        let stats = shared.stats[w].clone();
        let (pinfo, dmacs, multi_seg) = (ports.infos.clone(), device_macs.clone(), tx_multi_seg.clone());
        let cap = cfg.conntrack.capacity_per_worker as usize;
        // IPv6 flows get a table of their own (32-byte entries), as large as the IPv4
        // one when IPv6 services are configured at start, else a small one.
        let cap6 = if cfg.services.iter().any(|s| s.vip.is_ipv6()) { cap } else { DEFAULT_IPV6_CAPACITY };
        let seed = seed_for(w);
        let icmp_rate = cfg.dataplane.icmp_errors_per_sec;
        let (params, rings, placement, workers) = (params(w), redirect_rings.clone(), redirect_placement.clone(), pre.workers);
        let body = move |lcore: u32| {
            let mut worker = Worker::new(w, cap, seed, timeouts, stats, pinfo).with_ipv6_capacity(cap6, seed.rotate_left(17)).with_icmp_errors_per_sec(icmp_rate).with_device_macs(dmacs).with_tx_multi_seg(multi_seg).with_redirect(placement, workers);
            tracing::info!(worker = w, core = ?core, lcore, "worker polling");
            run_loop(&mut worker, &mut queues, shared, params, Some(rings));
        };
        if let Some(lcore) = worker_lcores.map(|l| l[w]) {
            // An EAL lcore: pinned by EAL, its lcore id is its own (mempool cache kept).
            dpdk::spawn_on_lcore(scope, lcore, format!("worker-{w}"), move || body(lcore))
                .map_err(|e| format!("cannot start worker {w} on EAL lcore {lcore}: {e}"))?;
            continue;
        }
        std::thread::Builder::new()
            .name(format!("worker-{w}"))
            .spawn_scoped(scope, move || {
                if let Some(c) = core {
                    if !core_affinity::set_for_current(core_affinity::CoreId { id: c }) {
                        tracing::warn!(worker = w, core = c, "could not pin worker");
                    }
                }
                let lcore = dpdk::register_thread().unwrap_or_else(|e| {
                    tracing::warn!(worker = w, error = %e, "rte_thread_register failed; mempool cache disabled");
                    dpdk::lcore_id()
                });
                body(lcore);
                dpdk::unregister_thread();
            })
            .map_err(|e| format!("cannot start worker {w}: {e}"))?;
    }
    Ok(())
}

/// Spawns the control-side threads in `scope`, stopped with the workers: `metrics` (the
/// `GET /metrics` endpoint, when `metrics` is bound), `sync` (when `[sync]` runs) and
/// `fleet` (VIP readiness and announcement through `announcer`, systemd READY/WATCHDOG).
/// Errors: a thread cannot start.
pub fn side_threads<'scope, 'env>(scope: &'scope Scope<'scope, 'env>, cfg: &'env Config, daemon: &'env Daemon, metrics: Option<TcpListener>, announcer: Option<Announcer>) -> Result<(), String> {
    let d = daemon;
    if let Some(l) = metrics {
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn_scoped(scope, move || crate::metrics::serve(l, &d.shared.stop, || crate::metrics::render(d)))
            .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    }
    if let Some(rt) = d.sync.get() {
        std::thread::Builder::new()
            .name("sync".into())
            .spawn_scoped(scope, move || crate::sync::run(rt, d, &d.shared.stop))
            .map_err(|e| format!("cannot start the sync thread: {e}"))?;
    }
    let acfg = cfg.announce.as_ref();
    std::thread::Builder::new()
        .name("fleet".into())
        .spawn_scoped(scope, move || crate::systemd::run_fleet(d, acfg, announcer, &d.shared.stop))
        .map_err(|e| format!("cannot start the fleet thread: {e}"))?;
    Ok(())
}

/// A worker's hash seed: 64 bits from the OS (getrandom(2)), distinct per worker.
fn seed_for(worker: usize) -> u64 {
    let r = getrandom::u64().unwrap_or_else(|e| {
        tracing::warn!(worker, error = %e, "no randomness from the OS: the worker's hash seed is predictable");
        0
    });
    r ^ (worker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
