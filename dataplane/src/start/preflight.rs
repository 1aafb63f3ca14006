//! Start-up step 1: the config loaded and checked on this host before the daemon takes
//! anything (socket, listener, port, EAL), and step 2's listeners that are taken before
//! EAL. Errors name the file and the field: `FILE: dataplane.worker_cores[1] = 9: ...`.

use crate::announce::Announcer;
use spillway_shared::config::Config;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

/// What the checks before start-up found: the config and the host facts the later steps use.
pub struct Preflight {
    /// The config file's path as given (for messages).
    pub path: String,
    /// The config as loaded.
    pub cfg: Config,
    /// `dataplane.workers`.
    pub workers: usize,
    /// The usable cores, read before EAL pins this thread to its main lcore.
    pub cores: Vec<core_affinity::CoreId>,
    /// Their ids (empty when the host did not say).
    pub avail: Vec<usize>,
    /// The config's warnings ([`Config::warnings`]).
    pub warnings: Vec<String>,
    /// The control socket's path: `--socket`, else `dataplane.socket` (checked).
    pub socket: PathBuf,
    /// `dataplane.socket_group` as a gid.
    pub group: Option<u32>,
}

impl Preflight {
    /// Loads `config` and checks what can be checked without taking anything: the
    /// daemon's own rules beyond validation, `socket_group` names a group of this host,
    /// `worker_cores` are usable cores, the `[sync]` key file (mode, length), the control
    /// socket's path, and that the kernel interfaces af_packet/af_xdp/pcap devices name
    /// exist (DPDK would only fail the probe). `socket`: the `--socket` override.
    pub fn load(config: &Path, socket: Option<&Path>) -> Result<Preflight, String> {
        let path = config.to_string_lossy().to_string();
        let cfg = Config::load(&path).map_err(|e| e.to_string())?;
        if cfg.ports.is_empty() {
            return Err(format!("{path}: no [[ports]] configured"));
        }
        crate::ctl::edits::daemon_checks(&cfg).map_err(|e| format!("{path}: {e}"))?;
        let group = match &cfg.dataplane.socket_group {
            Some(g) => Some(
                crate::ctl::server::group_gid(g)
                    .map_err(|e| format!("{path}: dataplane.socket_group = {g}: cannot look the group up: {e}"))?
                    .ok_or_else(|| format!("{path}: dataplane.socket_group = {g}: must name an existing group of this host"))?,
            ),
            None => None,
        };
        let workers = usize::from(cfg.dataplane.workers);
        // Read the usable cores before EAL pins this thread to its main lcore.
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let avail: Vec<usize> = cores.iter().map(|c| c.id).collect();
        for (i, c) in cfg.dataplane.worker_cores.iter().take(workers).enumerate() {
            if !avail.is_empty() && !avail.contains(c) {
                return Err(format!("{path}: dataplane.worker_cores[{i}] = {c}: must be a usable core of this host (usable: {avail:?})"));
            }
        }
        let warnings = cfg.warnings();
        if let Some(sc) = &cfg.sync {
            // The fleet key is read at start: refuse a missing, open or short one here too.
            crate::sync::read_key(&sc.key_file).map_err(|e| format!("{path}: {e}"))?;
        }
        let socket = crate::ctl::socket::effective_path(socket, &cfg, &path)?; // the path used, checked
        // A kernel interface a port's device opens (af_packet, af_xdp, pcap) must exist: DPDK
        // would only fail the probe (and the port be "not found").
        crate::dpdk::check_port_interfaces(&cfg).map_err(|e| format!("{path}: {e}"))?;
        Ok(Preflight { path, cfg, workers, cores, avail, warnings, socket, group })
    }

    /// Logs the config's warnings, and one when workers outnumber the spare cores.
    pub fn log_warnings(&self) {
        let workers = self.workers;
        if self.cfg.dataplane.worker_cores.is_empty() && workers >= self.avail.len().max(1) {
            tracing::warn!(workers, cores = self.avail.len(), "more workers than spare cores: workers share cores with each other or the control thread");
        }
        for w in &self.warnings {
            tracing::warn!("{w}");
        }
    }

    /// The config generation recorded in the header a live edit writes
    /// (`# Written by spillway (config generation N) ...`), if the file has one.
    pub fn persisted_generation(&self) -> Option<u64> {
        crate::ctl::persist::header_generation(&std::fs::read_to_string(&self.path).ok()?)
    }
}

/// The metrics listener and the announcement interface: like the control socket taken
/// before EAL, so a bad `[metrics]`/`[announce]`, or one another daemon holds, fails the
/// start with the field named before any port is touched (nothing is announced before
/// readiness, docs/bgp.md).
pub struct Listeners {
    /// `GET /metrics` listener, when `[metrics]` is configured.
    pub metrics: Option<TcpListener>,
    /// The announcement TUN interface, when `[announce]` is configured.
    pub announcer: Option<Announcer>,
}

impl Listeners {
    /// Binds `[metrics]` and creates the `[announce]` interface. Errors: the address does
    /// not parse or cannot be bound, the interface cannot be created.
    pub fn take(cfg: &Config) -> Result<Listeners, String> {
        let metrics = match &cfg.metrics {
            Some(m) => Some(crate::metrics::bind(m.addr().map_err(|e| e.to_string())?)?),
            None => None,
        };
        if let Some(l) = &metrics {
            tracing::info!(listen = %l.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()), "metrics listening (GET /metrics)");
        }
        let announcer = match &cfg.announce {
            Some(a) => Some(Announcer::start(a)?),
            None => None,
        };
        Ok(Listeners { metrics, announcer })
    }
}
