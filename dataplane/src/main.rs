//! `spillway`: the Spillway DPDK load balancer daemon.
//!
//! `spillway --config FILE [--socket PATH]`: starts EAL with the config's arguments and
//! ports, one poll-mode worker per configured worker (pinned), the control socket, and runs
//! until SIGINT/SIGTERM, then prints the final counters. Live edits made with `spillwayctl`
//! are written back to FILE atomically (see docs/ctl.md).

use clap::Parser;
use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::ctl::server::group_gid;
use spillway_dataplane::daemon::Daemon;
use spillway_dataplane::health::{self, HealthChecker};
use spillway_dataplane::dpdk::{self, Eal, EthPort, Mempool};

use spillway_dataplane::fastpath::worker::{run_loop, LoopParams, PortInfo, Worker};
use spillway_shared::config::Config;
use spillway_shared::proto::PortStatus;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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

fn install_signals() -> Result<(), String> {
    spillway_dataplane::signals::install(Arc::clone(&STOP))
}

/// Whether a device string is a PCI address (the rule config validation uses too).
fn is_pci(dev: &str) -> bool {
    spillway_shared::device::is_pci(dev)
}

/// Worker `w`'s CPU: `worker_cores[w]`, else the usable cores after the first in turn.
fn worker_core(cfg: &Config, ncores: &[core_affinity::CoreId], w: usize) -> Option<usize> {
    cfg.dataplane.worker_cores.get(w).copied().or_else(|| (!ncores.is_empty()).then(|| ncores[(w + 1) % ncores.len()].id))
}

/// EAL arguments: the config's own, `--vdev`/`-a` for every port and, unless the config
/// chose lcores: `-l 0` (workers are pinned threads registered with EAL), or with
/// `dataplane.packet_capture` an EAL lcore per worker on its core (registering disables
/// the multi-process dpdk-dumpcap needs).
fn eal_args(cfg: &Config, ncores: &[core_affinity::CoreId]) -> Vec<String> {
    let mut a = cfg.dataplane.eal_args.clone();
    if !a.iter().any(|x| x == "-c" || x.starts_with("--lcores") || x.starts_with("-l")) {
        let main = ncores.first().map_or(0, |c| c.id);
        let cpus: Vec<usize> = (0..usize::from(cfg.dataplane.workers)).map(|w| worker_core(cfg, ncores, w).unwrap_or(main)).collect();
        let lcores = if cfg.dataplane.packet_capture { vec![dpdk::worker_lcores_arg(main, &cpus, &ncores.iter().map(|c| c.id).collect::<Vec<_>>())] } else { vec!["-l".into(), "0".into()] };
        a.extend(lcores);
    }
    for p in &cfg.ports {
        if is_pci(&p.device) {
            a.push("-a".into());
            a.push(p.device.clone());
        } else {
            a.push(format!("--vdev={}", p.device));
        }
    }
    a
}

fn main() {
    // Also `--generate-assets DIR` (hidden): man page and completions, for the package.
    let args: Args = spillway_cli_support::parse("8");
    init_logging(&args.log_format);
    match run(args) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("spillway: error: {e}");
            std::process::exit(2);
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let path = args.config.to_string_lossy().to_string();
    let cfg = Config::load(&path).map_err(|e| e.to_string())?;
    if cfg.ports.is_empty() {
        return Err(format!("{path}: no [[ports]] configured"));
    }
    spillway_dataplane::ctl::edits::daemon_checks(&cfg).map_err(|e| format!("{path}: {e}"))?;
    let group = match &cfg.dataplane.socket_group {
        Some(g) => Some(
            group_gid(g)
                .map_err(|e| format!("{path}: dataplane.socket_group = {g}: cannot look the group up: {e}"))?
                .ok_or_else(|| format!("{path}: dataplane.socket_group = {g}: must name an existing group of this host"))?,
        ),
        None => None,
    };
    let workers = usize::from(cfg.dataplane.workers);
    // Read the usable cores before EAL pins this thread to its main lcore.
    let ncores = core_affinity::get_core_ids().unwrap_or_default();
    let avail: Vec<usize> = ncores.iter().map(|c| c.id).collect();
    for (i, c) in cfg.dataplane.worker_cores.iter().take(workers).enumerate() {
        if !avail.is_empty() && !avail.contains(c) {
            return Err(format!("{path}: dataplane.worker_cores[{i}] = {c}: must be a usable core of this host (usable: {avail:?})"));
        }
    }
    let warnings = cfg.warnings();
    if let Some(sc) = &cfg.sync {
        // The fleet key is read at start: refuse a missing, open or short one here too.
        spillway_dataplane::sync::read_key(&sc.key_file).map_err(|e| format!("{path}: {e}"))?;
    }
    let socket = spillway_dataplane::ctl::socket::effective_path(args.socket.as_deref(), &cfg, &path)?; // the path used, checked
    // A kernel interface a port's device opens (af_packet, af_xdp, pcap) must exist: DPDK
    // would only fail the probe (and the port be "not found").
    spillway_dataplane::dpdk::check_port_interfaces(&cfg).map_err(|e| format!("{path}: {e}"))?;
    if args.check {
        let mut out = std::io::stdout().lock();
        return check_report(&mut out, &path, &cfg, &warnings, &avail).or_else(|e| stdout_failed(&e));
    }
    install_signals()?;
    // The control socket is taken before EAL starts: a second daemon on the same socket is
    // refused here, before it touches any port; requests wait until it is served below.
    let bound = spillway_dataplane::ctl::socket::Bound::bind(&socket, group).map_err(|e| format!("control socket {}: {e}", socket.display()))?;
    // The file as loaded is the last good one (FILE.bak, docs/operations.md).
    spillway_dataplane::ctl::persist::keep_loaded(&args.config, &cfg);
    // Metrics listener and announcement interface, like the control socket taken before
    // EAL: a bad [metrics]/[announce], or one another daemon holds, fails the start with
    // the field named before any port is touched (nothing is announced before readiness).
    let metrics_listener = match &cfg.metrics {
        Some(m) => Some(spillway_dataplane::metrics::bind(m.addr().map_err(|e| e.to_string())?)?),
        None => None,
    };
    if let Some(l) = &metrics_listener {
        tracing::info!(listen = %l.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()), "metrics listening (GET /metrics)");
    }
    let announcer = match &cfg.announce {
        Some(a) => Some(spillway_dataplane::announce::Announcer::start(a)?),
        None => None,
    };

    if cfg.dataplane.worker_cores.is_empty() && workers >= avail.len().max(1) {
        tracing::warn!(workers, cores = avail.len(), "more workers than spare cores: workers share cores with each other or the control thread");
    }
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let eal = Eal::init(&eal_args(&cfg, &ncores)).map_err(|e| format!("cannot start DPDK: {e}"))?;
    // With packet capture the workers run on EAL worker lcores (see `eal_args`).
    let worker_lcores = if cfg.dataplane.packet_capture {
        let l = eal.worker_lcores(workers).map_err(|n| format!("dataplane.packet_capture: workers run on EAL worker lcores, and the -l/--lcores of dataplane.eal_args give {n} besides the main lcore for {workers} workers: give one per worker, or leave the lcores to Spillway"))?;
        if cfg.dataplane.eal_args.iter().any(|a| a == "--no-huge") {
            tracing::warn!("dataplane.packet_capture with --no-huge: dpdk-dumpcap (a secondary process) cannot map anonymous memory and will not attach; use hugepages");
        }
        eal.pdump_init().map_err(|e| format!("dataplane.packet_capture: {e}"))?;
        tracing::info!(lcores = ?l, "packet capture framework initialised: dpdk-dumpcap can capture the ports; workers on EAL lcores");
        Some(l)
    } else { None };
    // Declared before the ports: locals drop in reverse order, so on an early error the
    // ports are stopped and closed before the pools their RX rings use are freed.
    let mut pools: Vec<Arc<Mempool>> = Vec::new();
    let mut ports: Vec<EthPort> = Vec::new();
    // (port id, name, promiscuous mode on) for the multicast filter (IPv6 Neighbor Discovery)
    let mut mc_ports: Vec<(u16, String, bool)> = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let mut port = EthPort::by_name(&p.device).map_err(|e| format!("ports[{i}] ({}): {e}", p.name))?;
        // Jumbo frames: RX scatter, or mbufs sized for the MTU.
        let plan = port.rx_plan(&format!("ports[{i}]"), p.mtu).map_err(|e| format!("ports[{i}] ({}): {e}", p.name))?;
        let pool = Mempool::with_data_room(&format!("mbuf_{i}"), cfg.dataplane.mbufs_per_port, 256, plan.data_room, port.socket_id())
            .map_err(|e| format!("ports[{i}] ({}): mbuf pool: {e}", p.name))?;
        port.configure_plan(workers as u16, workers as u16, cfg.dataplane.descriptors, &pool, &plan)
            .map_err(|e| format!("ports[{i}] ({}): {e}", p.name))?;
        if p.mtu != spillway_shared::config::DEFAULT_PORT_MTU {
            tracing::info!(port = %p.name, mtu = plan.mtu, rx_scatter = plan.rx_scatter, tx_multi_seg = plan.tx_multi_seg, mbuf_data_room = plan.data_room, "jumbo frames");
        }
        let promiscuous = port.promiscuous(true);
        if let Err(e) = &promiscuous {
            tracing::info!(port = %p.name, error = %e, "promiscuous mode not available: the port receives frames to its MAC, broadcast and its multicast filter");
        }
        mc_ports.push((port.port_id(), p.name.clone(), promiscuous.is_ok()));
        port.start().map_err(|e| format!("ports[{i}] ({}): {e}", p.name))?;
        // `mac`: what frames carry as their source (ports[].mac, else the PMD's); `pmd_mac`: the PMD's.
        let pmd_mac = spillway_shared::net::MacAddr(port.mac());
        tracing::info!(port = %p.name, device = %p.device, mac = %p.mac.unwrap_or(pmd_mac), pmd_mac = %pmd_mac, "port started");
        ports.push(port);
        pools.push(Arc::new(pool));
    }
    let port_infos: Vec<PortInfo> = cfg
        .ports
        .iter()
        .zip(&ports)
        .map(|(pc, port)| PortInfo {
            mac: pc.mac.map(|m| m.0).unwrap_or_else(|| port.mac()),
            forward_to: pc.forward_to.as_ref().and_then(|f| cfg.ports.iter().position(|x| &x.name == f)).unwrap_or(usize::MAX),
            addr: match pc.address {
                Some(std::net::IpAddr::V4(a)) => u32::from(a),
                _ => 0,
            },
        })
        .enumerate()
        .map(|(i, mut pi)| {
            if pi.forward_to == usize::MAX {
                pi.forward_to = i;
            }
            pi
        })
        .collect();
    // Each port's RSS as its device reports it, and the fleet-sync placement it leads to
    // (shown per port in `status` and the metrics, whether or not [sync] is configured).
    let rss_confs: Vec<dpdk::RssConf> = ports.iter().zip(&cfg.ports).map(|(p, c)| dpdk::RssConf { name: c.name.clone(), ..p.rss_conf() }).collect();
    let (placement, port_rss) = dpdk::sync_placement(workers, cfg.sync.is_some(), &rss_confs, std::env::var("SPILLWAY_FAULT_SYNC_PLACEMENT").ok().as_deref())?;
    // Packets RSS gives the wrong worker (ICMP errors, fragments) go to the flow's owner by
    // the device's placement (fastpath/worker/redirect.rs; never the sync test's fault);
    // off without an RSS placement.
    let (redirect_placement, redirect_rings) = (spillway_dataplane::sync::Placement::choose(workers, &rss_confs).0, Arc::new(spillway_dataplane::fastpath::worker::RedirectRings::new(workers, spillway_dataplane::fastpath::worker::REDIRECT_RING_CAPACITY)));
    let links = Arc::new(spillway_dataplane::readiness::LinkStates::new(cfg.ports.iter().map(|p| p.name.clone())));
    let stat_links = links.clone();
    let port_ids: Vec<u16> = ports.iter().map(|p| p.port_id()).collect();
    let device_macs: Vec<[u8; 6]> = ports.iter().map(|p| p.mac()).collect(); // frames to these are ours too
    let tx_multi_seg: Vec<bool> = ports.iter().map(|p| p.tx_multi_seg()).collect(); // chained mbufs to a port without: dropped before counting
    let port_meta: Vec<(String, String, [u8; 6])> = cfg.ports.iter().zip(&port_infos).map(|(p, i)| (p.name.clone(), p.device.clone(), i.mac)).collect();
    let stat_pools = pools.clone();
    let link_ports: Vec<(u16, String)> = port_ids.iter().copied().zip(cfg.ports.iter().map(|p| p.name.clone())).collect();
    let port_stats = Box::new(move |i: usize| {
        let (name, device, mac) = port_meta.get(i).cloned().unwrap_or_default();
        let s = port_ids.get(i).and_then(|id| dpdk::port_stats(*id).ok()).unwrap_or_default();
        let link = port_ids.get(i).and_then(|id| dpdk::port_link(*id).ok());
        PortStatus {
            name,
            device,
            mac: spillway_shared::net::MacAddr(mac).to_string(),
            ipackets: s.ipackets,
            opackets: s.opackets,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
            mbufs_in_use: stat_pools.get(i).map_or(0, |p| u64::from(p.in_use())),
            link_up: link.map(|l| l.up),
            link_speed_mbps: link.map_or(0, |l| l.speed_mbps),
            link_changes: stat_links.changes(i),
            rss: port_rss.get(i).cloned().unwrap_or_default(),
            xstats: port_ids.get(i).and_then(|id| dpdk::port_xstats(*id).ok()).unwrap_or_default(),
        }
    });
    let port_addrs = port_infos.iter().map(|p| p.addr).collect();
    // Live edits are written to the file the path names at each write (a symlinked config
    // stays a symlink, and one re-pointed while running is followed), and the config
    // generation continues from the one the file was last written with, so an
    // `--if-generation` read before a restart cannot match an edit made after it.
    let config_path = std::path::absolute(&args.config).unwrap_or_else(|_| args.config.clone());
    let daemon = Arc::new(Daemon::new(cfg.clone(), workers, port_addrs, port_stats)?.with_config_path(config_path).with_multicast(multicast_programmer(mc_ports)).with_links(links));
    // Next-hop resolution sends on the ports packets are forwarded out of (towards backends).
    let sides = port_infos
        .iter()
        .enumerate()
        .map(|(i, p)| spillway_dataplane::neighbor::driver::PortSide {
            mac: p.mac,
            addr: std::net::Ipv4Addr::from(p.addr),
            forwarding: port_infos.iter().any(|q| q.forward_to == i),
        })
        .collect();
    daemon.control.lock().unwrap_or_else(|e| e.into_inner()).neighbors.set_ports(sides);
    if let Some(g) = persisted_generation(&path) {
        daemon.control.lock().unwrap_or_else(|e| e.into_inner()).config_generation = g;
        tracing::info!(config_generation = g, "continuing the config generation of the file");
    }
    // Health checks from the host stack: one descriptor per target in flight. Started before
    // the control socket is served, so no live edit can come between the checker's first target
    // set (generation 0) and the daemon's health generation (a race that froze health).
    match health::raise_nofile_limit() {
        Ok(n) => {
            tracing::info!(nofile = n, "RLIMIT_NOFILE raised to the hard limit");
            daemon.control.lock().unwrap_or_else(|e| e.into_inner()).nofile_limit = n;
        }
        Err(e) => tracing::warn!(error = %e, "cannot raise RLIMIT_NOFILE"),
    }
    let (health_tx, health_rx) = std::sync::mpsc::channel();
    let targets = health::targets_from_config(&cfg);
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

    // Fleet flow-state sync: socket and key before the workers start (docs/bgp.md).
    if let Some(sc) = &cfg.sync {
        // Peers' entries go to the worker RSS gives the flow: every port must report the
        // same key and table (flows may arrive on any of them); else to every worker
        // (dpdk::sync_placement, which warns; the reason is in `status`).
        let rt = spillway_dataplane::sync::SyncRuntime::start(sc, workers, placement, spillway_shared::sync::routing_digest(&cfg))?;
        let _ = daemon.shared.sync.set(rt.queues.clone());
        let _ = daemon.sync.set(Arc::new(rt));
    }

    let server = bound.serve(daemon.clone(), daemon.ctl_stats.clone()).map_err(|e| format!("control socket {}: {e}", socket.display()))?;
    tracing::info!(socket = %socket.display(), "control socket listening");

    // Workers.
    let timeouts = Timeouts {
        syn_ms: cfg.conntrack.tcp_syn_timeout_sec * 1000,
        tcp_ms: cfg.conntrack.tcp_idle_timeout_sec * 1000,
        closing_ms: cfg.conntrack.tcp_closing_timeout_sec * 1000,
        udp_ms: cfg.conntrack.udp_idle_timeout_sec * 1000,
    };
    let params = |w: usize| LoopParams { index: w, epoch: daemon.started, idle_sleep: Duration::from_micros(u64::from(cfg.dataplane.idle_sleep_us)) };
    // Every thread that touches ports, mempools or the EAL runs inside this scope, so none
    // can outlive them: whatever way the closure returns (an error included), `StopOnExit`
    // stops the workers and the scope joins them before the ports, pools and EAL below are
    // dropped.
    let run_result = std::thread::scope(|scope| -> Result<(), String> {
        let _stop = StopOnExit(&daemon.shared.stop);
        for w in 0..workers {
            let mut queues: Vec<_> = ports.iter().zip(&pools).map(|(p, pool)| p.queue(w as u16).with_pool(pool)).collect();
            let core = worker_core(&cfg, &ncores, w);
            let shared = &*daemon.shared;
            let stats = shared.stats[w].clone();
            let (pinfo, dmacs, multi_seg) = (port_infos.clone(), device_macs.clone(), tx_multi_seg.clone());
            let cap = cfg.conntrack.capacity_per_worker as usize;
            // IPv6 flows get a table of their own (32-byte entries), as large as the IPv4
            // one when IPv6 services are configured at start, else a small one.
            let cap6 = if cfg.services.iter().any(|s| s.vip.is_ipv6()) { cap } else { spillway_dataplane::fastpath::worker::DEFAULT_IPV6_CAPACITY };
            let seed = seed_for(w);
            let icmp_rate = cfg.dataplane.icmp_errors_per_sec;
            let (params, rings, placement) = (params(w), redirect_rings.clone(), redirect_placement.clone());
            let body = move |lcore: u32| {
                let mut worker = Worker::new(w, cap, seed, timeouts, stats, pinfo).with_ipv6_capacity(cap6, seed.rotate_left(17)).with_icmp_errors_per_sec(icmp_rate).with_device_macs(dmacs).with_tx_multi_seg(multi_seg).with_redirect(&placement, workers);
                tracing::info!(worker = w, core = ?core, lcore, "worker polling");
                run_loop(&mut worker, &mut queues, shared, params, Some(rings));
            };
            if let Some(lcore) = worker_lcores.as_ref().map(|l| l[w]) {
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

        // Fleet: the metrics endpoint and the `fleet` thread (readiness, VIP
        // announcement, systemd READY/WATCHDOG), control side, stopped with the workers.
        if let Some(l) = metrics_listener {
            let d = &*daemon;
            std::thread::Builder::new()
                .name("metrics".into())
                .spawn_scoped(scope, move || spillway_dataplane::metrics::serve(l, &d.shared.stop, || spillway_dataplane::metrics::render(d)))
                .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
        }
        if let Some(rt) = daemon.sync.get() {
            let d = &*daemon;
            std::thread::Builder::new()
                .name("sync".into())
                .spawn_scoped(scope, move || spillway_dataplane::sync::run(rt, d, &d.shared.stop))
                .map_err(|e| format!("cannot start the sync thread: {e}"))?;
        }
        {
            let d = &*daemon;
            let acfg = cfg.announce.as_ref();
            std::thread::Builder::new()
                .name("fleet".into())
                .spawn_scoped(scope, move || spillway_dataplane::systemd::run_fleet(d, acfg, announcer, &d.shared.stop))
                .map_err(|e| format!("cannot start the fleet thread: {e}"))?;
        }


        // The control loop: health events (coalesced per control tick), load ticks,
        // snapshot publication and reclamation (spillway_dataplane::control_loop).
        let deadline = args.duration.map(|d| Instant::now() + Duration::from_secs_f64(d));
        let mut links = dpdk::LinkWatch::new(link_ports);
        spillway_dataplane::control_loop::run(&daemon, &health_rx, &mut links, &STOP, deadline)
    });
    if let Some(c) = daemon.checker.lock().unwrap_or_else(|e| e.into_inner()).take() {
        c.stop();
    }
    // Workers have stopped and been joined here, on success and on error alike.
    dpdk::wait_lcores();
    daemon.shared.reclaim();
    let report = daemon.status();
    server.shutdown();
    print_final(&report);
    for mut p in ports {
        let _ = p.stop();
    }
    drop(pools);
    drop(daemon);
    drop(eal);
    run_result
}

/// Logging on stderr (docs/operations.md "Logs"): `RUST_LOG` filter (default
/// `info`); `json` = one JSON object per line; text without colours unless stderr is a
/// terminal, and without timestamps under journald (`JOURNAL_STREAM` set), which stamps
/// every line itself.
fn init_logging(format: &str) {
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

/// Sets the workers' stop flag when dropped: the scope that runs the workers cannot end
/// (and so cannot return an error) with workers still polling.
struct StopOnExit<'a>(&'a AtomicBool);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The config generation recorded in the header a live edit writes
/// (`# Written by spillway (config generation N) ...`), if the file has one.
fn persisted_generation(path: &str) -> Option<u64> {
    spillway_dataplane::ctl::persist::header_generation(&std::fs::read_to_string(path).ok()?)
}

/// A worker's hash seed: 64 bits from the OS (getrandom(2)), distinct per worker.
fn seed_for(worker: usize) -> u64 {
    let r = getrandom::u64().unwrap_or_else(|e| {
        tracing::warn!(worker, error = %e, "no randomness from the OS: the worker's hash seed is predictable");
        0
    });
    r ^ (worker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// What `--check` prints after the checks passed: warnings, then what was checked and
/// what was not.
fn check_report(out: &mut impl std::io::Write, path: &str, cfg: &Config, warnings: &[String], avail: &[usize]) -> std::io::Result<()> {
    for w in warnings {
        writeln!(out, "{path}: warning: {w}")?;
    }
    if let Some(sc) = &cfg.sync {
        if let Err(e) = sc.listen_addr().map_err(|e| e.to_string()).and_then(|a| std::net::UdpSocket::bind(a).map_err(|e| e.to_string())) {
            writeln!(out, "{path}: warning: sync.listen = {}: cannot bind now ({e}): another daemon holds it, or the address is not on this host", sc.listen)?;
        }
    }
    let workers = usize::from(cfg.dataplane.workers);
    if cfg.dataplane.worker_cores.is_empty() && workers >= avail.len().max(1) {
        writeln!(out, "{path}: warning: {workers} workers on {} usable cores: workers share cores with each other or the control thread", avail.len())?;
    }
    let count = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    writeln!(out, "{path}: configuration OK ({}, {})", count(cfg.services.len(), "service"), count(cfg.ports.len(), "port"))?;
    writeln!(out, "  checked: syntax, every range and cross-reference, backend MACs/addresses, port device arguments (key=value, iface= etc. a driver needs), that the kernel interfaces af_packet/af_xdp/pcap devices name exist, socket_group, worker_cores on this host, the [sync] key file (mode, length) and whether sync.listen can be bound now")?;
    writeln!(out, "  not checked without starting DPDK: that the devices exist and start (beyond those kernel interfaces), that they take the port MTU (RX scatter or mbufs sized for it), hugepage memory for the mbuf pools, queue and descriptor counts the NIC supports, whether the control socket can be bound (only its path is checked)")?;
    out.flush()
}

/// A failed write of one-shot output to stdout. When its reader went away (`spillway
/// --check | head`) the process ends quietly the way `spillwayctl` does, by SIGPIPE
/// (exit status 141 in a shell); any other failure is an error.
fn stdout_failed(e: &std::io::Error) -> Result<(), String> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: signal(2) and raise(3) with valid arguments: SIGPIPE's default action
        // (end the process) restored, then raised; nothing runs after it but the exit.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
        std::process::exit(141);
    }
    Err(format!("cannot write to stdout: {e}"))
}

fn print_final(r: &spillway_shared::proto::StatusReport) {
    use std::fmt::Write as _;
    // One write, errors ignored: stdout may be a closed terminal (SIGHUP is ignored, so the
    // daemon outlives it) and `println!` would panic, which aborts before the ports stop.
    let (t, mut o) = (&r.total, String::new());
    let _ = writeln!(o, "spillway: final counters after {:.1} s\n  rx {}  tx {}  forwarded {}  new_connections {}  arp_replies {}  dropped {}", r.uptime_sec, t.rx, t.tx, t.forwarded, t.new_connections, t.arp_replies, t.dropped());
    for (name, n) in t.drops.iter().filter(|d| d.1 > 0) {
        let _ = writeln!(o, "  drop {name}: {n}");
    }
    for b in &r.backends {
        let _ = writeln!(o, "  backend {}/{}: new_connections {} packets {}", b.service, b.backend, b.new_connections, b.packets);
    }
    for p in &r.ports {
        let _ = writeln!(o, "  port {}: ipackets {} opackets {} imissed {} mbufs_in_use {}", p.name, p.ipackets, p.opackets, p.imissed, p.mbufs_in_use);
    }
    if let Ok(j) = serde_json::to_string(r) {
        let _ = writeln!(o, "final_status_json {j}");
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), o.as_bytes());
}

/// Programs the ports' multicast filters with the solicited-node groups of our IPv6
/// addresses (called by the control loop when they change, the first time at start): the
/// device's list, else all-multicast. A port that supports neither and refused promiscuous
/// mode may never see the Neighbor Solicitations for our IPv6 addresses: warned (once per
/// port), since IPv6 VIPs would then not resolve (docs/operations.md "IPv6").
fn multicast_programmer(ports: Vec<(u16, String, bool)>) -> spillway_dataplane::daemon::MulticastFn {
    let warned = std::sync::Mutex::new(vec![false; ports.len()]);
    Box::new(move |macs: &[[u8; 6]]| {
        for (i, (id, name, promiscuous)) in ports.iter().enumerate() {
            match dpdk::set_multicast(*id, macs) {
                Ok(mode) => tracing::info!(port = %name, groups = macs.len(), ?mode, "multicast filter set for IPv6 Neighbor Discovery"),
                Err(e) if *promiscuous => tracing::debug!(port = %name, error = %e, "no multicast filter; promiscuous mode receives the groups anyway"),
                Err(e) => {
                    let mut w = warned.lock().unwrap_or_else(|e| e.into_inner());
                    if !w[i] {
                        w[i] = true;
                        tracing::warn!(port = %name, error = %e,
                            "neither promiscuous mode, a multicast list nor all-multicast works on this port: Neighbor Solicitations for IPv6 VIPs may never arrive (docs/operations.md \"IPv6\")");
                    }
                }
            }
        }
    })
}
