//! Start-up step 3: EAL and the ports. The EAL arguments come from the config (its own,
//! one `--vdev`/`-a` per port, the lcores), then each port is configured with one RX and
//! one TX queue per worker, its mbuf pool sized for its MTU, and started.

use super::preflight::Preflight;
use crate::daemon::{MulticastFn, PortStatsFn};
use crate::dpdk::{self, Eal, EthPort, Mempool};
use crate::fastpath::worker::PortInfo;
use crate::readiness::LinkStates;
use spillway_shared::config::Config;
use spillway_shared::proto::{PortRss, PortStatus};
use std::sync::Arc;

/// Worker `w`'s CPU: `worker_cores[w]`, else the usable cores after the first in turn
/// (`None` when the host did not say which cores are usable).
pub fn worker_core(cfg: &Config, cores: &[core_affinity::CoreId], w: usize) -> Option<usize> {
    cfg.dataplane.worker_cores.get(w).copied().or_else(|| (!cores.is_empty()).then(|| cores[(w + 1) % cores.len()].id))
}

/// EAL arguments: the config's own, `--vdev`/`-a` for every port and, unless the config
/// chose lcores: `-l 0` (workers are pinned threads registered with EAL), or with
/// `dataplane.packet_capture` an EAL lcore per worker on its core (registering disables
/// the multi-process dpdk-dumpcap needs).
pub fn eal_args(cfg: &Config, cores: &[core_affinity::CoreId]) -> Vec<String> {
    let mut a = cfg.dataplane.eal_args.clone();
    if !a.iter().any(|x| x == "-c" || x.starts_with("--lcores") || x.starts_with("-l")) {
        let main = cores.first().map_or(0, |c| c.id);
        let cpus: Vec<usize> = (0..usize::from(cfg.dataplane.workers)).map(|w| worker_core(cfg, cores, w).unwrap_or(main)).collect();
        let lcores = if cfg.dataplane.packet_capture { vec![dpdk::worker_lcores_arg(main, &cpus, &cores.iter().map(|c| c.id).collect::<Vec<_>>())] } else { vec!["-l".into(), "0".into()] };
        a.extend(lcores);
    }
    for p in &cfg.ports {
        if spillway_shared::device::is_pci(&p.device) {
            a.push("-a".into());
            a.push(p.device.clone());
        } else {
            a.push(format!("--vdev={}", p.device));
        }
    }
    a
}

/// Starts EAL with [`eal_args`]. With `dataplane.packet_capture` the workers run on EAL
/// worker lcores (returned, one per worker) and the capture framework is initialised.
/// Errors: EAL does not start, too few worker lcores, pdump fails.
pub fn start_eal(pre: &Preflight) -> Result<(Eal, Option<Vec<u32>>), String> {
    let (cfg, workers) = (&pre.cfg, pre.workers);
    let eal = Eal::init(&eal_args(cfg, &pre.cores)).map_err(|e| format!("cannot start DPDK: {e}"))?;
    // With packet capture the workers run on EAL worker lcores (see `eal_args`).
    let worker_lcores = if cfg.dataplane.packet_capture {
        let l = eal.worker_lcores(workers).map_err(|n| format!("dataplane.packet_capture: workers run on EAL worker lcores, and the -l/--lcores of dataplane.eal_args give {n} besides the main lcore for {workers} workers: give one per worker, or leave the lcores to Spillway"))?;
        if cfg.dataplane.eal_args.iter().any(|a| a == "--no-huge") {
            tracing::warn!("dataplane.packet_capture with --no-huge: dpdk-dumpcap (a secondary process) cannot map anonymous memory and will not attach; use hugepages");
        }
        eal.pdump_init().map_err(|e| format!("dataplane.packet_capture: {e}"))?;
        tracing::info!(lcores = ?l, "packet capture framework initialised: dpdk-dumpcap can capture the ports; workers on EAL lcores");
        Some(l)
    } else {
        None
    };
    Ok((eal, worker_lcores))
}

/// The started ports, in config order, and what the workers and the daemon need of them.
pub struct Ports {
    /// The ports. Declared before the pools: fields drop in order, so the ports are
    /// stopped and closed before the pools their RX rings use are freed.
    pub ports: Vec<EthPort>,
    /// One mbuf pool per port.
    pub pools: Vec<Arc<Mempool>>,
    /// (port id, name, promiscuous mode on) for the multicast filter (IPv6 Neighbor Discovery).
    pub multicast: Vec<(u16, String, bool)>,
    /// What a worker knows of each port: its MAC (`ports[].mac`, else the PMD's), where
    /// its packets are forwarded to, its IPv4 address.
    pub infos: Vec<PortInfo>,
}

impl Ports {
    /// Configures and starts every port of `cfg`: `workers` RX and TX queues, RX scatter
    /// or mbufs sized for the MTU, promiscuous mode when the device has it. Errors name the
    /// port: `ports[1] (uplink): ...`.
    pub fn start(cfg: &Config, workers: usize) -> Result<Ports, String> {
        // Declared before the ports: locals drop in reverse order, so on an early error the
        // ports are stopped and closed before the pools their RX rings use are freed.
        let mut pools: Vec<Arc<Mempool>> = Vec::new();
        let mut ports: Vec<EthPort> = Vec::new();
        let mut multicast: Vec<(u16, String, bool)> = Vec::new();
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
            multicast.push((port.port_id(), p.name.clone(), promiscuous.is_ok()));
            port.start().map_err(|e| format!("ports[{i}] ({}): {e}", p.name))?;
            // `mac`: what frames carry as their source (ports[].mac, else the PMD's); `pmd_mac`: the PMD's.
            let pmd_mac = spillway_shared::net::MacAddr(port.mac());
            tracing::info!(port = %p.name, device = %p.device, mac = %p.mac.unwrap_or(pmd_mac), pmd_mac = %pmd_mac, "port started");
            ports.push(port);
            pools.push(Arc::new(pool));
        }
        let infos = port_infos(cfg, &ports);
        Ok(Ports { ports, pools, multicast, infos })
    }

    /// (port id, name) of every port, for the control loop's link watch.
    pub fn link_ports(&self, cfg: &Config) -> Vec<(u16, String)> {
        self.ports.iter().map(|p| p.port_id()).zip(cfg.ports.iter().map(|p| p.name.clone())).collect()
    }

    /// Each port's RSS as its device reports it, named as in the config: the input of the
    /// fleet-sync placement and of the workers' redirect placement.
    pub fn rss_confs(&self, cfg: &Config) -> Vec<dpdk::RssConf> {
        self.ports.iter().zip(&cfg.ports).map(|(p, c)| dpdk::RssConf { name: c.name.clone(), ..p.rss_conf() }).collect()
    }

    /// The MACs the devices report: frames to these are ours too.
    pub fn device_macs(&self) -> Vec<[u8; 6]> {
        self.ports.iter().map(|p| p.mac()).collect()
    }

    /// Whether each port sends chained mbufs (a multi-segment frame to a port without is
    /// dropped before counting).
    pub fn tx_multi_seg(&self) -> Vec<bool> {
        self.ports.iter().map(|p| p.tx_multi_seg()).collect()
    }

    /// The reader of port `i`'s status for `status` and the metrics: device counters,
    /// xstats, link, mbufs in use, link changes (`links`) and RSS (`rss`, per port).
    pub fn stats_fn(&self, cfg: &Config, links: Arc<LinkStates>, rss: Vec<PortRss>) -> PortStatsFn {
        let port_ids: Vec<u16> = self.ports.iter().map(|p| p.port_id()).collect();
        let port_meta: Vec<(String, String, [u8; 6])> = cfg.ports.iter().zip(&self.infos).map(|(p, i)| (p.name.clone(), p.device.clone(), i.mac)).collect();
        let pools = self.pools.clone();
        Box::new(move |i: usize| {
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
                mbufs_in_use: pools.get(i).map_or(0, |p| u64::from(p.in_use())),
                link_up: link.map(|l| l.up),
                link_speed_mbps: link.map_or(0, |l| l.speed_mbps),
                link_changes: links.changes(i),
                rss: rss.get(i).cloned().unwrap_or_default(),
                xstats: port_ids.get(i).and_then(|id| dpdk::port_xstats(*id).ok()).unwrap_or_default(),
            }
        })
    }

    /// Stops every port, then frees the pools (the daemon's status reader holds the last
    /// references to them until it is dropped).
    pub fn stop(self) {
        for mut p in self.ports {
            let _ = p.stop();
        }
        drop(self.pools);
    }
}

/// Each port's [`PortInfo`]: its MAC (`ports[].mac`, else the PMD's), the index of
/// `forward_to` (itself when unset), its IPv4 address (0 when none).
fn port_infos(cfg: &Config, ports: &[EthPort]) -> Vec<PortInfo> {
    cfg.ports
        .iter()
        .zip(ports)
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
        .collect()
}

/// Programs the ports' multicast filters with the solicited-node groups of our IPv6
/// addresses (called by the control loop when they change, the first time at start): the
/// device's list, else all-multicast. A port that supports neither and refused promiscuous
/// mode may never see the Neighbor Solicitations for our IPv6 addresses: warned (once per
/// port), since IPv6 VIPs would then not resolve (docs/operations.md "IPv6").
/// `ports`: [`Ports::multicast`].
pub fn multicast_programmer(ports: Vec<(u16, String, bool)>) -> MulticastFn {
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

#[cfg(test)]
mod tests {
    use super::*;
    use core_affinity::CoreId;

    fn cfg(dataplane: &str) -> Config {
        Config::from_toml(&format!("[dataplane]\n{dataplane}\n[[ports]]\nname = \"p0\"\ndevice = \"0000:00:04.0\"\n[[ports]]\nname = \"p1\"\ndevice = \"net_ring0\"\n")).unwrap()
    }

    fn cores(ids: &[usize]) -> Vec<CoreId> {
        ids.iter().map(|&id| CoreId { id }).collect()
    }

    #[test]
    fn eal_args_name_every_port_and_main_lcore_0() {
        let c = cfg("workers = 2\neal_args = [\"--no-huge\"]");
        assert_eq!(eal_args(&c, &cores(&[0, 1, 2])), ["--no-huge", "-l", "0", "-a", "0000:00:04.0", "--vdev=net_ring0"]);
    }

    #[test]
    fn eal_args_keep_the_configs_lcores() {
        let c = cfg("workers = 1\neal_args = [\"-l\", \"3\"]");
        assert_eq!(eal_args(&c, &cores(&[0, 1])), ["-l", "3", "-a", "0000:00:04.0", "--vdev=net_ring0"]);
    }

    #[test]
    fn workers_take_configured_cores_else_the_cores_after_the_first_in_turn() {
        let c = cfg("workers = 3");
        let host = cores(&[4, 5, 6]);
        assert_eq!((0..3).map(|w| worker_core(&c, &host, w)).collect::<Vec<_>>(), [Some(5), Some(6), Some(4)]);
        assert_eq!(worker_core(&c, &[], 0), None);
        let pinned = cfg("workers = 2\nworker_cores = [6, 4]");
        assert_eq!((0..2).map(|w| worker_core(&pinned, &host, w)).collect::<Vec<_>>(), [Some(6), Some(4)]);
    }
}
