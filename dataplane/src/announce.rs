//! VIP readiness and announcement (docs/decisions.md "VIP announcement through BIRD",
//! docs/bgp.md "Readiness").
//!
//! A VIP is *ready* when (1) every worker's poll counter advanced within
//! `announce.worker_stall_sec`, (2) every worker has used a published snapshot, (3) at
//! least one service on the VIP would serve a new connection — the routing pipeline gives
//! it a backend whose next hop is resolved (with no non-draining backend healthy that is
//! the healthy draining backends, docs/semantics.md "Choices" 3a, else the last-resort set
//! of spec/backend-selection.md, unless `drop_traffic_if_unhealthy`), (4)
//! the operator has not drained it (`spillwayctl vip drain VIP`), (5) no port's link is
//! down (as the control loop's once-a-second link check saw it), and (6) at start, the
//! first round of health probes and the flow-state dump from the peers are over. So a VIP
//! is withdrawn only when this host would drop its traffic, and a restarted host takes no
//! flow before it knows which backends are down and which connections its peers carry.
//! Drain state lives in memory only: a restarted daemon announces again.
//!
//! With `[announce]` configured, the daemon owns a non-persistent TUN interface (default
//! `spw-vip0`) and keeps exactly one point-to-point address `LOCAL peer VIP/32` on it per
//! ready IPv4 VIP, and `LOCAL6+N peer VIP/128` per ready IPv6 VIP (IPv6 allows one peer per
//! local address, so each IPv6 VIP gets its own local address, `announce.local_address6`
//! plus the smallest free N). The
//! VIPs are peers, not local addresses: the host kernel routes VIP traffic that reaches it
//! into the TUN (which drops it) instead of answering it itself. BIRD's `direct` protocol
//! exports the peer `/32`s and `/128`s over BGP. When the process ends,
//! however it ends (SIGKILL included), the kernel closes the TUN file descriptor, deletes the
//! interface and its addresses, and BIRD withdraws every VIP of this host at once.
//!
//! Everything here runs on the control side (the `fleet` thread and the control socket),
//! never on a worker.

use crate::daemon::Daemon;
use spillway_shared::config::Config;
use spillway_shared::config::fleet::AnnounceConfig;
use spillway_shared::proto::VipRow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// What readiness depends on besides the config (one control-thread observation).
#[derive(Clone, Debug, Default)]
pub struct Observation {
    /// Workers whose poll counter stood still longer than the stall limit (indices).
    pub stalled_workers: Vec<usize>,
    /// Every worker has used a published snapshot (generation ≥ 1).
    pub snapshot_in_use: bool,
    /// Start-up conditions still pending (first probe round, peers' dumps), as reasons.
    pub starting: Vec<String>,
    /// Ports whose link is down (names): flows cannot arrive or leave there, so no VIP is
    /// ready until it is up again (the fleet's routers then send the flows to other hosts).
    pub links_down: Vec<String>,
}

/// Readiness of every configured VIP (sorted by address). `serves(service)` says whether
/// the dataplane would give that service's new connections a backend (`Err`: why not);
/// `announced` the VIPs currently announced.
pub fn evaluate(
    cfg: &Config,
    obs: &Observation,
    serves: impl Fn(&str) -> Result<(), String>,
    drained: &BTreeSet<IpAddr>,
    announced: &BTreeSet<IpAddr>,
) -> Vec<VipRow> {
    let mut by_vip: BTreeMap<IpAddr, (Vec<String>, bool, Vec<String>)> = BTreeMap::new();
    for s in &cfg.services {
        let e = by_vip.entry(s.vip).or_default();
        e.0.push(s.name.clone());
        match serves(&s.name) {
            Ok(()) => e.1 = true,
            Err(why) => e.2.push(format!("{}: {why}", s.name)),
        }
    }
    by_vip
        .into_iter()
        .map(|(vip, (services, serving, dropping))| {
            let mut why = Vec::new();
            if !obs.stalled_workers.is_empty() {
                why.push(format!("workers not polling: {:?}", obs.stalled_workers));
            }
            if !obs.snapshot_in_use {
                why.push("no snapshot used by every worker yet".to_string());
            }
            why.extend(obs.starting.iter().cloned());
            why.extend(obs.links_down.iter().map(|p| format!("port {p}: link down")));
            if !serving {
                why.push(format!("would drop new connections ({})", dropping.join("; ")));
            }
            let is_drained = drained.contains(&vip);
            if is_drained {
                why.push("drained by the operator".to_string());
            }
            VipRow { vip: vip.to_string(), services, ready: why.is_empty(), drained: is_drained, announced: announced.contains(&vip), not_ready_because: why }
        })
        .collect()
}

/// Observes the workers (poll progress, snapshot use) through the daemon's counters, and
/// the start-up conditions (first probe round, peers' dumps).
pub fn observe(daemon: &Daemon, stall: Duration, now: Instant) -> Observation {
    let polls: Vec<u64> = daemon.shared.stats.iter().map(|w| w.polls.load(Relaxed)).collect();
    let still = daemon.fleet.observe_polls(&polls, now);
    let mut starting = Vec::new();
    if !first_probe_round_over(daemon, now) {
        starting.push("waiting for the first round of health probes".to_string());
    }
    if let Some(s) = daemon.sync.get() {
        if !s.startup_done() {
            starting.push("waiting for the peers' flow-state dumps".to_string());
        }
    }
    Observation {
        stalled_workers: still.iter().enumerate().filter(|(_, d)| **d > stall).map(|(i, _)| i).collect(),
        snapshot_in_use: daemon.shared.stats.iter().all(|w| w.generation.load(Relaxed) >= 1),
        starting,
        links_down: daemon.links.down(),
    }
}

/// Whether the first round of health probes is over: every target decided and its
/// results published, latched by the control loop ([`Daemon::first_round_pending_and_over`]);
/// or, once the round's longest time ([`first_round_limit`]) has passed, the undecided
/// targets counted unhealthy and published, latched by the control loop too
/// (`control_loop::startup`): a stalled control loop never lets a host announce with
/// endpoints it has not decided.
fn first_probe_round_over(daemon: &Daemon, _now: Instant) -> bool {
    use std::sync::atomic::Ordering::Acquire;
    daemon.first_probe_round.load(Acquire) || daemon.checker.lock().unwrap_or_else(|e| e.into_inner()).is_none()
}

/// The first probe round's longest time at start: twice the longest check's interval +
/// timeout, + its `unhealthy_threshold` quick re-probes (`timeout_sec` + 0.2 s each),
/// + 1 s (docs/bgp.md "Readiness"); zero without health checks.
pub fn first_round_limit(cfg: &Config) -> Duration {
    let limit = cfg
        .services
        .iter()
        .filter_map(|s| s.health_check.as_ref())
        .map(|h| 2.0 * (h.check_interval_sec + h.timeout_sec) + f64::from(h.unhealthy_threshold.max(1)) * (h.timeout_sec + 0.2))
        .fold(0.0, f64::max);
    Duration::from_secs_f64(limit + 1.0)
}

/// Whether the dataplane gives service `si` of `snap` a backend for some client class:
/// a class table with an endpoint whose next hop is resolved. `Err` says why not.
pub fn service_serves(cfg: &Config, snap: &crate::control::snapshot::Snapshot, si: usize) -> Result<(), String> {
    let Some(svc) = snap.services.get(si) else { return Err("not in the snapshot".into()) };
    let mut tables = svc.tables.iter().flatten().peekable();
    if tables.peek().is_none() {
        let c = cfg.services.get(si);
        let live = |b: &&spillway_shared::config::Backend| b.enabled && b.members().iter().any(|m| m.enabled);
        let enabled = c.is_some_and(|s| s.backends.iter().any(|b| live(&b)));
        let all_draining = c.is_some_and(|s| s.backends.iter().filter(live).all(|b| b.capacity_scaler == 0.0));
        return Err(if !enabled {
            "no enabled backend".into()
        } else if all_draining {
            // docs/semantics.md "Choices" 3a: healthy draining backends serve only while
            // some enabled backend is not draining; all drained is drop and withdraw
            "every enabled backend is draining (capacity_scaler 0)".into()
        } else if c.is_some_and(|s| s.drop_traffic_if_unhealthy) {
            "no healthy backend and drop_traffic_if_unhealthy".into()
        } else {
            "the routing pipeline drops every client class".into()
        });
    }
    let resolved = tables.any(|t| t.backends.iter().any(|b| snap.backends.get(usize::from(*b)).is_some_and(|s| s.mac != [0; 6])));
    if resolved {
        Ok(())
    } else {
        Err("no endpoint with a resolved next hop".into())
    }
}

/// Evaluates readiness against the daemon's live state and stores it in `daemon.fleet`.
pub fn refresh(daemon: &Daemon, obs: &Observation, announced: &BTreeSet<IpAddr>, announcing: bool) -> Vec<VipRow> {
    let (rows, generation) = evaluate_live(daemon, obs, announced);
    daemon.fleet.store(rows.clone(), announcing, generation);
    rows
}

/// Readiness against the daemon's live state, with `announced` the VIPs announced now,
/// and the generation of the snapshot it read; nothing stored (the fleet thread stores
/// the rows once its announcer has acted on them, so `vip show` after an edit never sees
/// a VIP the edit made ready as not announced yet: review).
pub fn evaluate_live(daemon: &Daemon, obs: &Observation, announced: &BTreeSet<IpAddr>) -> (Vec<VipRow>, u64) {
    let drained = daemon.fleet.drained();
    let mut generation = 0;
    let rows = {
        let st = daemon.control.lock().unwrap_or_else(|e| e.into_inner());
        // What the workers do: the published snapshot's tables (an endpoint whose next hop
        // is not resolved yet does not make its VIP ready, docs/operations.md "Next hops").
        daemon
            .shared
            .with_snapshot(|snap| {
                generation = snap.generation;
                // by name: a lookup per service, not a scan (this runs every 100 ms)
                let by_name: std::collections::HashMap<&str, usize> = st.cfg.services.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
                let index = |name: &str| by_name.get(name).copied();
                evaluate(&st.cfg, obs, |s| index(s).map_or(Err("not configured".into()), |i| service_serves(&st.cfg, snap, i)), &drained, announced)
            })
            .unwrap_or_default()
    };
    (rows, generation)
}

/// Whether `vip drain|undrain VIP` (`drained`: drain) may change `vip`'s operator drain,
/// and whether the VIP is configured: a drain needs a configured VIP; an undrain also
/// takes a VIP no service has any more whose drain is remembered (the drain outlives a
/// `service remove` or a moved VIP and applies again if the VIP comes back, so the operator
/// must be able to clear it meanwhile). `Err` names why not, as the config does.
pub fn drain_target(daemon: &Daemon, vip: IpAddr, drained: bool) -> Result<bool, String> {
    let st = daemon.control.lock().unwrap_or_else(|e| e.into_inner());
    match st.cfg.services_of_vip(vip) {
        Ok(_) => Ok(true),
        Err(_) if !drained && daemon.fleet.drained().contains(&vip) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Control-socket side of `spillwayctl vip drain|undrain VIP`: `vip` must be a configured
/// VIP, or for an undrain one whose drain is remembered ([`drain_target`]). Returns the VIP rows after the change has been applied by the `fleet` thread (or
/// after 2 s, whichever comes first).
pub fn drain_request(daemon: &Daemon, vip: IpAddr, drained: bool) -> Result<Vec<VipRow>, String> {
    let configured = drain_target(daemon, vip, drained)?;
    daemon.fleet.set_drained(vip, drained);
    if daemon.fleet.vips().is_empty() || !configured {
        // No `fleet` thread evaluates readiness (tests driving a bare `Daemon`).
        return Ok(Vec::new());
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let rows = daemon.fleet.vips();
        let announcing = daemon.fleet.announcing();
        let applied = rows.iter().any(|r| r.vip == vip.to_string() && r.drained == drained && (!announcing || r.announced == r.ready));
        if applied || Instant::now() >= deadline {
            return Ok(rows);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------
// The announcer: a TUN interface whose point-to-point addresses are the announced VIPs.
// ---------------------------------------------------------------------------------------

/// Owns the TUN interface; dropping it (or the process ending) deletes the interface and
/// so withdraws every VIP.
pub struct Announcer {
    cfg: AnnounceConfig,
    _tun: OwnedFd,
    announced: BTreeSet<IpAddr>,
    /// The index `n` of each announced IPv6 VIP's local address,
    /// `announce.local_address6 + n`; the smallest free index is taken.
    locals6: std::collections::BTreeMap<std::net::Ipv6Addr, u16>,
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Announcer {
    /// Creates the TUN interface `cfg.interface` (not persistent: it lives as long as this
    /// process holds it), brings it up, and announces nothing yet.
    pub fn start(cfg: &AnnounceConfig) -> Result<Announcer, String> {
        let name = &cfg.interface;
        // SAFETY: plain open(2) of a NUL-terminated path.
        let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!("announce.interface = {name:?}: cannot open /dev/net/tun: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let tun = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: IFF_TUN | IFF_NO_PI, _pad: [0; 22] };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes an ifreq-sized struct that lives across the call.
        if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) } < 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("announce.interface = {name:?}: cannot create the TUN interface: {e} (another spillway running, or a persistent interface of that name?)"));
        }
        ip(&["link", "set", "dev", name, "up"])?;
        tracing::info!(interface = %name, "announcement interface up (BIRD `direct` protocol exports its peer /32s)");
        Ok(Announcer { cfg: cfg.clone(), _tun: tun, announced: BTreeSet::new(), locals6: Default::default() })
    }

    /// VIPs announced now.
    pub fn announced(&self) -> &BTreeSet<IpAddr> {
        &self.announced
    }

    /// Makes the announced set equal to the ready VIPs of `rows`; logs each change.
    pub fn reconcile(&mut self, rows: &[VipRow]) {
        let want: BTreeSet<IpAddr> = rows.iter().filter(|r| r.ready).filter_map(|r| r.vip.parse().ok()).collect();
        for vip in self.announced.difference(&want).copied().collect::<Vec<_>>() {
            match self.addr("del", vip) {
                Ok(()) => {
                    self.announced.remove(&vip);
                    let why = rows.iter().find(|r| r.vip == vip.to_string()).map(|r| r.not_ready_because.join("; ")).unwrap_or_else(|| "no longer configured".into());
                    tracing::warn!(%vip, reason = %why, "VIP withdrawn");
                }
                Err(e) => tracing::error!(%vip, error = %e, "cannot withdraw VIP"),
            }
        }
        for vip in want.difference(&self.announced).copied().collect::<Vec<_>>() {
            match self.addr("add", vip) {
                Ok(()) => {
                    self.announced.insert(vip);
                    tracing::info!(%vip, "VIP announced");
                }
                Err(e) => tracing::error!(%vip, error = %e, "cannot announce VIP"),
            }
        }
    }

    fn addr(&mut self, op: &str, vip: IpAddr) -> Result<(), String> {
        let r = match vip {
            IpAddr::V4(v) => ip(&["addr", op, &self.cfg.local_address.to_string(), "peer", &format!("{v}/32"), "dev", &self.cfg.interface]),
            // An IPv6 VIP: its own local address (local_address6 + n), the VIP as the peer.
            IpAddr::V6(v) => {
                let n = match self.locals6.get(&v) {
                    Some(&n) => n,
                    None => (0..=u16::MAX).find(|n| !self.locals6.values().any(|x| x == n)).ok_or("more than 65,536 IPv6 VIPs announced")?,
                };
                let local = std::net::Ipv6Addr::from(u128::from(self.cfg.local_address6) + u128::from(n)).to_string();
                let peer = format!("{v}/128");
                let mut args = vec!["-6", "addr", op, &local, "peer", &peer, "dev", &self.cfg.interface];
                if op == "add" {
                    args.push("nodad");
                }
                let r = tolerant(op, ip(&args));
                if r.is_ok() {
                    if op == "add" {
                        self.locals6.insert(v, n);
                    } else {
                        self.locals6.remove(&v);
                    }
                }
                return r;
            }
        };
        tolerant(op, r)
    }
}

/// Adding what is there, or deleting what is not, is not an error here.
fn tolerant(op: &str, r: Result<(), String>) -> Result<(), String> {
    match r {
        Err(e) if (op == "add" && e.contains("File exists")) || (op == "del" && e.contains("Cannot assign")) => Ok(()),
        r => r,
    }
}

/// Runs `ip ARGS` (iproute2) and returns its error output on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e} (iproute2 is required for [announce])"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readiness::FleetState;
    use proptest::prelude::*;
    use spillway_shared::config::{Backend, Protocol, Service};
    use std::net::Ipv4Addr;


    /// QA: `vip drain`, then `service remove` of the VIP's only service: the drain is
    /// remembered (it applies again if the VIP comes back), and `vip undrain` must clear it
    /// while the VIP is absent (it answered "not a configured VIP"). A drain of an
    /// unconfigured VIP stays refused.
    #[test]
    fn a_remembered_drain_of_a_removed_vip_can_be_undrained() {
        let text = crate::tests_config::Toml::new()
            .port("p0", "net_null0", "address = \"10.0.0.2\"")
            .service("web", "10.0.0.100", 80, "")
            .backend("b1", "10.0.1.1", "mac = \"02:00:00:00:0b:01\"")
            .service("api", "10.0.0.101", 80, "")
            .backend("a1", "10.0.1.2", "mac = \"02:00:00:00:0b:02\"")
            .text()
            .to_string();
        let d = Daemon::new(Config::from_toml(&text).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
        let api: IpAddr = Ipv4Addr::new(10, 0, 0, 101).into();
        drain_request(&d, api, true).expect("drain a configured VIP");
        let r = d.edit_request(spillway_shared::proto::Request::ServiceRemove { name: "api".into(), if_generation: None });
        assert!(!matches!(r, spillway_shared::proto::Response::Error { .. }), "{r:?}");
        assert!(d.fleet.drained().contains(&api), "the drain is remembered");
        assert!(drain_request(&d, Ipv4Addr::new(10, 0, 0, 102).into(), true).is_err(), "a drain of an unknown VIP is refused");
        drain_request(&d, api, false).expect("undrain the remembered drain of a VIP no service has");
        assert!(!d.fleet.drained().contains(&api));
        assert!(drain_request(&d, api, false).is_err(), "nothing left to undrain: refused as before");
    }

    fn cfg() -> Config {
        let mut c = Config::default();
        for (name, vip, port) in [("web", [10, 0, 0, 100], 80), ("tls", [10, 0, 0, 100], 443), ("dns", [10, 0, 0, 53], 53)] {
            let mut s = Service::new(name, Ipv4Addr::from(vip), port, Protocol::Tcp);
            for b in ["b1", "b2"] {
                s.backends.push(Backend::new(b, ""));
            }
            c.services.push(s);
        }
        c
    }

    fn ok() -> Observation {
        Observation { stalled_workers: vec![], snapshot_in_use: true, starting: vec![], links_down: vec![] }
    }

    fn serving(names: &'static [&'static str]) -> impl Fn(&str) -> Result<(), String> {
        move |s: &str| if names.contains(&s) { Ok(()) } else { Err("no enabled backend".into()) }
    }

    #[test]
    fn ready_when_everything_holds() {
        let rows = evaluate(&cfg(), &ok(), |_| Ok(()), &BTreeSet::new(), &BTreeSet::new());
        assert_eq!(rows.iter().map(|r| r.vip.as_str()).collect::<Vec<_>>(), ["10.0.0.53", "10.0.0.100"]);
        assert!(rows.iter().all(|r| r.ready && r.not_ready_because.is_empty()));
        assert_eq!(rows[1].services, ["web", "tls"]);
    }

    #[test]
    fn one_serving_service_is_enough() {
        let rows = evaluate(&cfg(), &ok(), serving(&["tls"]), &BTreeSet::new(), &BTreeSet::new());
        assert!(rows[1].ready, "10.0.0.100 has tls serving");
        assert!(!rows[0].ready);
        assert_eq!(rows[0].not_ready_because, ["would drop new connections (dns: no enabled backend)"]);
    }

    #[test]
    fn stall_and_snapshot_and_drain_and_start_up_each_block() {
        let stalled = Observation { stalled_workers: vec![1], ..ok() };
        let rows = evaluate(&cfg(), &stalled, |_| Ok(()), &BTreeSet::new(), &BTreeSet::new());
        assert!(rows.iter().all(|r| !r.ready && r.not_ready_because[0].contains("[1]")));
        let unpublished = Observation { snapshot_in_use: false, ..ok() };
        assert!(evaluate(&cfg(), &unpublished, |_| Ok(()), &BTreeSet::new(), &BTreeSet::new()).iter().all(|r| !r.ready));
        let starting = Observation { starting: vec!["waiting for the first round of health probes".into()], ..ok() };
        let rows = evaluate(&cfg(), &starting, |_| Ok(()), &BTreeSet::new(), &BTreeSet::new());
        assert!(rows.iter().all(|r| !r.ready && r.not_ready_because == ["waiting for the first round of health probes"]));
        let link_down = Observation { links_down: vec!["lb0".into()], ..ok() };
        let rows = evaluate(&cfg(), &link_down, |_| Ok(()), &BTreeSet::new(), &BTreeSet::new());
        assert!(rows.iter().all(|r| !r.ready && r.not_ready_because == ["port lb0: link down"]), "{rows:?}");
        let drained: BTreeSet<IpAddr> = [IpAddr::from(Ipv4Addr::new(10, 0, 0, 53))].into();
        let announced: BTreeSet<IpAddr> = [IpAddr::from(Ipv4Addr::new(10, 0, 0, 53))].into();
        let rows = evaluate(&cfg(), &ok(), |_| Ok(()), &drained, &announced);
        assert!(!rows[0].ready && rows[0].drained && rows[0].announced);
        assert_eq!(rows[0].not_ready_because, ["drained by the operator"]);
        assert!(rows[1].ready && !rows[1].drained && !rows[1].announced);
    }

    fn daemon(extra: &str) -> Daemon {
        let text = format!(
            "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n{extra}\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:0b:02\"\n"
        );
        Daemon::new(Config::from_toml(&text).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap()
    }

    /// With every backend unhealthy the pipeline serves the last-resort set (all backends,
    /// spec/backend-selection.md), so the VIP stays announced: withdrawing it on every host
    /// of the fleet would drop traffic the pipeline serves. Only `drop_traffic_if_unhealthy`
    /// (or no enabled backend) withdraws it.
    #[test]
    fn a_vip_is_withdrawn_only_when_the_pipeline_would_drop_its_traffic() {
        let d = daemon("");
        assert!(refresh(&d, &ok(), &BTreeSet::new(), false)[0].ready);
        d.set_health("web", "b1", false, None);
        d.set_health("web", "b2", false, None);
        let rows = refresh(&d, &ok(), &BTreeSet::new(), false);
        assert!(rows[0].ready, "last resort: every backend unhealthy still serves: {:?}", rows[0].not_ready_because);
        let d = daemon("drop_traffic_if_unhealthy = true");
        d.set_health("web", "b1", false, None);
        d.set_health("web", "b2", false, None);
        let rows = refresh(&d, &ok(), &BTreeSet::new(), false);
        assert!(!rows[0].ready);
        assert_eq!(rows[0].not_ready_because, ["would drop new connections (web: no healthy backend and drop_traffic_if_unhealthy)"]);
    }

    /// Readiness follows the healthy-draining rule (docs/semantics.md "Choices" 3a): b1
    /// draining (`capacity_scaler = 0`) and alive, b2 dead. Even with
    /// `drop_traffic_if_unhealthy` the pipeline sends new connections to b1, so the VIP
    /// stays announced; once b2 drains too (all draining) it is withdrawn.
    #[test]
    fn a_vip_with_a_healthy_draining_backend_stays_ready_until_all_drain() {
        let with = |scaler2: &str| {
            let text = format!(
                "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\ndrop_traffic_if_unhealthy = true\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\ncapacity_scaler = 0.0\n[[services.backends]]\nname = \"b2\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:0b:02\"\ncapacity_scaler = {scaler2}\n"
            );
            let d = Daemon::new(Config::from_toml(&text).unwrap(), 1, vec![0], Box::new(|_| Default::default())).unwrap();
            d.set_health("web", "b2", false, None);
            refresh(&d, &ok(), &BTreeSet::new(), false)
        };
        let rows = with("1.0");
        assert!(rows[0].ready, "b1 is draining and healthy: {:?}", rows[0].not_ready_because);
        let rows = with("0.0");
        assert!(!rows[0].ready);
        assert_eq!(rows[0].not_ready_because, ["would drop new connections (web: every enabled backend is draining (capacity_scaler 0))"]);
    }

    /// At start the VIPs wait for the first probe round: the checker's targets begin
    /// healthy, and a host that announced before its first results would pin moved flows to
    /// backends that are in fact down.
    #[test]
    fn a_starting_daemon_waits_for_its_first_probe_round() {
        let d = daemon("[services.health_check]\ntype = \"tcp\"\ncheck_interval_sec = 30\ntimeout_sec = 5");
        d.first_probe_round.store(false, std::sync::atomic::Ordering::SeqCst);
        let (tx, _rx) = std::sync::mpsc::channel();
        // Probes to TEST-NET-1 (RFC 5737) never answer within the test: the round is not over.
        let target = crate::health::Target {
            service: "web".into(),
            backend: "b1".into(),
            endpoint: "b1".into(),
            addr: "192.0.2.1:80".parse().unwrap(),
            check: d.control.lock().unwrap().cfg.services[0].health_check.clone().unwrap(),
        };
        let opts = crate::health::CheckerOptions { first_result_decides: true, ..Default::default() };
        *d.checker.lock().unwrap() = Some(crate::health::HealthChecker::start_with(vec![target], tx, opts).unwrap());
        let obs = observe(&d, Duration::from_secs(60), Instant::now());
        assert_eq!(obs.starting, ["waiting for the first round of health probes"]);
        // Past the round's longest time, the control loop counts the undecided target
        // unhealthy, publishes, and only then lets the VIPs be announced: a host never
        // announces with an endpoint it has not decided counted healthy.
        let late = Instant::now() + Duration::from_secs(100);
        assert!(!observe(&d, Duration::from_secs(60), late).starting.is_empty(), "the fleet thread alone never announces undecided");
        assert_eq!(crate::control_loop::startup::settle_first_round(&d, late), Some(1));
        assert!(observe(&d, Duration::from_secs(60), late).starting.is_empty(), "announces after the first round's longest time at the latest");
        let snap = d.shared.current();
        let b1 = snap.backends.iter().find(|b| b.present && b.name == "b1").unwrap();
        assert!(!b1.healthy, "the undecided endpoint is published unhealthy before the VIPs are announced");
        assert!(d.control.lock().unwrap().undecided.contains(&("web".to_string(), "b1".to_string(), "b1".to_string())));
    }

    #[test]
    fn poll_progress_tracking() {
        let f = FleetState::default();
        let t0 = Instant::now();
        assert_eq!(f.observe_polls(&[1, 1], t0), [Duration::ZERO, Duration::ZERO]);
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(f.observe_polls(&[2, 1], t1), [Duration::ZERO, Duration::from_millis(500)]);
        let t2 = t0 + Duration::from_millis(900);
        assert_eq!(f.observe_polls(&[2, 5], t2), [Duration::from_millis(400), Duration::ZERO]);
    }

    proptest! {
        /// Ready exactly when no worker stalls, the snapshot is in use, start-up is over,
        /// every link is up, some service of the VIP serves, and the VIP is not drained.
        #[test]
        fn readiness_is_the_conjunction(stalled in any::<bool>(), in_use in any::<bool>(), starting in any::<bool>(), link_down in any::<bool>(), serve in proptest::collection::vec(any::<bool>(), 3), drain in proptest::collection::vec(any::<bool>(), 2)) {
            let obs = Observation { stalled_workers: if stalled { vec![0] } else { vec![] }, snapshot_in_use: in_use, starting: if starting { vec!["x".into()] } else { vec![] }, links_down: if link_down { vec!["p0".into()] } else { vec![] } };
            let idx = |s: &str| ["web", "tls", "dns"].iter().position(|x| *x == s).unwrap();
            let vips = [IpAddr::from(Ipv4Addr::new(10, 0, 0, 53)), IpAddr::from(Ipv4Addr::new(10, 0, 0, 100))];
            let drained: BTreeSet<IpAddr> = vips.iter().zip(&drain).filter(|(_, d)| **d).map(|(v, _)| *v).collect();
            let rows = evaluate(&cfg(), &obs, |s| if serve[idx(s)] { Ok(()) } else { Err("no".into()) }, &drained, &BTreeSet::new());
            let base = !stalled && in_use && !starting && !link_down;
            prop_assert_eq!(rows[0].ready, base && serve[2] && !drain[0]);
            prop_assert_eq!(rows[1].ready, base && (serve[0] || serve[1]) && !drain[1]);
            for r in &rows {
                prop_assert_eq!(r.ready, r.not_ready_because.is_empty());
            }
        }
    }
}
