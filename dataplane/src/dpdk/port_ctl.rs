//! Control-side calls on a port by its id, made while the workers run: counters
//! (`rte_eth_stats`), extended statistics, link state (and [`LinkWatch`], which logs its changes), and the multicast filter. None of
//! them touches a queue; the control loop, `status` and the metrics endpoint use them.

use super::error::*;
use dpdk_sys as sys;
use std::ffi::CStr;
use std::ptr;
use std::time::{Duration, Instant};

/// Port counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets dropped by the device because RX queues were full.
    pub imissed: u64,
    /// Receive errors.
    pub ierrors: u64,
    /// Transmit errors.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// Counters of port `port_id` (`rte_eth_stats_get`); callable from any thread (the
/// control socket reads them while workers run).
pub fn port_stats(port_id: u16) -> Result<PortStats> {
    let mut s = sys::rte_eth_stats::default();
    // SAFETY: s is a valid out-pointer; an invalid port id is reported as an error.
    let ret = unsafe { sys::rte_eth_stats_get(port_id, &mut s) };
    check("rte_eth_stats_get", ret, || format!("port id {port_id}"))?;
    Ok(PortStats {
        ipackets: s.ipackets,
        opackets: s.opackets,
        ibytes: s.ibytes,
        obytes: s.obytes,
        imissed: s.imissed,
        ierrors: s.ierrors,
        oerrors: s.oerrors,
        rx_nombuf: s.rx_nombuf,
    })
}

/// Whether an extended statistic's name (`rte_eth_xstats_get_names`) is one operators
/// watch: per-queue packet counts (`rx_q0_packets`, `tx_q1_packets`), missed frames,
/// mbuf allocation failures and errors. Drivers name the rest freely; these names follow
/// the ethdev's generic xstats (DPDK programmer's guide, "Extended Statistics API").
pub fn xstat_wanted(name: &str) -> bool {
    let per_queue = (name.starts_with("rx_q") || name.starts_with("tx_q")) && name.ends_with("_packets");
    per_queue || name.contains("missed") || name.contains("nombuf") || name.contains("mbuf_allocation") || name.contains("error")
}

/// The extended statistics of port `port_id` that [`xstat_wanted`] keeps, as (name,
/// value), driver order; callable from any thread (the metrics endpoint reads them).
/// Errors: the port id is invalid or the driver fails the call.
pub fn port_xstats(port_id: u16) -> Result<Vec<(String, u64)>> {
    // SAFETY: a null array with size 0 asks for the number of xstats only.
    let n = unsafe { sys::rte_eth_xstats_get_names(port_id, ptr::null_mut(), 0) };
    check("rte_eth_xstats_get_names", n, || format!("port id {port_id}"))?;
    let n = n.max(0) as usize;
    let mut names = vec![sys::rte_eth_xstat_name::default(); n];
    let mut values = vec![sys::rte_eth_xstat::default(); n];
    // SAFETY: both arrays hold `n` entries, the size passed.
    let got_names = unsafe { sys::rte_eth_xstats_get_names(port_id, names.as_mut_ptr(), n as u32) };
    check("rte_eth_xstats_get_names", got_names, || format!("port id {port_id}"))?;
    // SAFETY: as above.
    let got = unsafe { sys::rte_eth_xstats_get(port_id, values.as_mut_ptr(), n as u32) };
    check("rte_eth_xstats_get", got, || format!("port id {port_id}"))?;
    let m = (got_names.max(0) as usize).min(got.max(0) as usize).min(n);
    let mut out = Vec::new();
    for v in &values[..m] {
        let Some(nm) = names.get(v.id as usize) else { continue };
        // SAFETY: the name is a NUL-terminated C string inside its fixed-size array
        // (DPDK writes it with strlcpy).
        let name = unsafe { CStr::from_ptr(nm.name.as_ptr()) }.to_string_lossy().into_owned();
        if xstat_wanted(&name) {
            out.push((name, v.value));
        }
    }
    Ok(out)
}

/// Link state of port `port_id` without waiting (`rte_eth_link_get_nowait`); callable
/// from any thread.
pub fn port_link(port_id: u16) -> Result<LinkStatus> {
    let mut l = sys::rte_eth_link::default();
    // SAFETY: l is a valid out-pointer; an invalid port id is reported as an error.
    let ret = unsafe { sys::rte_eth_link_get_nowait(port_id, &mut l) };
    check("rte_eth_link_get_nowait", ret, || format!("port id {port_id}"))?;
    Ok(LinkStatus { up: l.link_status() != 0, speed_mbps: link_speed_mbps(l.link_speed) })
}

/// A link speed as the driver reports it (`rte_eth_link::link_speed`, Mbit/s) with its
/// "unknown" (`RTE_ETH_SPEED_NUM_UNKNOWN` = `UINT32_MAX`, what virtio reports) made 0, as
/// `RTE_ETH_SPEED_NUM_NONE` already is: 0 reads as unknown everywhere.
pub fn link_speed_mbps(raw: u32) -> u32 {
    if raw == u32::MAX { 0 } else { raw }
}

/// A link speed for people: `10000 Mbit/s`, or `unknown` for 0 ([`link_speed_mbps`]).
pub fn link_speed_text(mbps: u32) -> String {
    if mbps == 0 { "unknown".to_string() } else { format!("{mbps} Mbit/s") }
}

/// Link state (`rte_eth_link_get_nowait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Link up.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown: [`link_speed_mbps`]).
    pub speed_mbps: u32,
}

/// How a port receives the multicast groups Spillway listens to ([`set_multicast`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MulticastMode {
    /// The device filters on the given list (`rte_eth_dev_set_mc_addr_list`).
    List,
    /// The device has no list filter: all multicast is received (`rte_eth_allmulticast_enable`).
    AllMulticast,
}

/// Makes port `port_id` receive the Ethernet multicast addresses `macs` (the solicited-node
/// groups of our IPv6 addresses, RFC 4861 §7.2.1): the device's multicast list, else
/// all-multicast. Called from the control side at start and when the IPv6 addresses
/// change. Errors: neither is supported (the caller warns when promiscuous mode is off
/// too: Neighbor Solicitations for our addresses may never arrive).
pub fn set_multicast(port_id: u16, macs: &[[u8; 6]]) -> Result<MulticastMode> {
    let mut list: Vec<sys::rte_ether_addr> = macs.iter().map(|m| sys::rte_ether_addr { addr_bytes: *m }).collect();
    // SAFETY: valid port id; `list` holds `list.len()` addresses and outlives the call (the
    // driver copies them).
    let ret = unsafe { sys::rte_eth_dev_set_mc_addr_list(port_id, list.as_mut_ptr(), list.len() as u32) };
    if ret == 0 {
        return Ok(MulticastMode::List);
    }
    // SAFETY: valid port id.
    let all = unsafe { sys::rte_eth_allmulticast_enable(port_id) };
    check("rte_eth_allmulticast_enable", all, || format!("port {port_id} (rte_eth_dev_set_mc_addr_list: {})", super::strerror(ret)))
        .map(|_| MulticastMode::AllMulticast)
}

/// Logs and counts link up/down changes of the ports (checked once a second on the control
/// thread with `rte_eth_link_get_nowait`, which every driver supports, rather than
/// link-state interrupts, which virtual devices lack). The caller publishes
/// [`LinkWatch::states`] and [`LinkWatch::changes`] (status, metrics, readiness).
pub struct LinkWatch {
    ports: Vec<(u16, String)>,
    last: Vec<Option<bool>>,
    changes: Vec<u64>,
    checked: Instant,
}

impl LinkWatch {
    /// Watches `ports` (port id, name); the first [`LinkWatch::tick`] logs every port's state.
    pub fn new(ports: Vec<(u16, String)>) -> LinkWatch {
        let last = vec![None; ports.len()];
        let changes = vec![0; ports.len()];
        LinkWatch { ports, last, changes, checked: Instant::now() - Duration::from_secs(1) }
    }

    /// Checks the links when a second has passed since the last check; logs and counts
    /// changes. Returns whether it checked.
    pub fn tick(&mut self) -> bool {
        if self.checked.elapsed() < Duration::from_secs(1) {
            return false;
        }
        self.checked = Instant::now();
        for (i, (id, name)) in self.ports.iter().enumerate() {
            let Ok(l) = port_link(*id) else { continue };
            let speed = link_speed_text(l.speed_mbps);
            match self.last[i] {
                Some(was) if was != l.up && l.up => tracing::info!(port = %name, speed = %speed, "link up"),
                Some(was) if was != l.up => tracing::warn!(port = %name, "link down"),
                None => tracing::info!(port = %name, up = l.up, speed = %speed, "link state"),
                _ => {}
            }
            if self.last[i].is_some_and(|was| was != l.up) {
                self.changes[i] += 1;
            }
            self.last[i] = Some(l.up);
        }
        true
    }

    /// Per port (the order of `new`): the link state last seen (`None` before the first
    /// check or when the driver cannot tell).
    pub fn states(&self) -> &[Option<bool>] {
        &self.last
    }

    /// Per port: link up/down changes seen since start.
    pub fn changes(&self) -> &[u64] {
        &self.changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_speed_reads_as_unknown() {
        assert_eq!(link_speed_mbps(u32::MAX), 0, "RTE_ETH_SPEED_NUM_UNKNOWN");
        assert_eq!(link_speed_mbps(0), 0, "RTE_ETH_SPEED_NUM_NONE");
        assert_eq!(link_speed_mbps(10_000), 10_000);
        assert_eq!(link_speed_text(0), "unknown");
        assert_eq!(link_speed_text(link_speed_mbps(u32::MAX)), "unknown");
        assert_eq!(link_speed_text(25_000), "25000 Mbit/s");
    }
}
