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
    Ok(LinkStatus { up: l.link_status() != 0, speed_mbps: l.link_speed })
}

/// Link state (`rte_eth_link_get_nowait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Link up.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown).
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

/// Logs link up/down changes of the ports (checked once a second on the control thread
/// with `rte_eth_link_get_nowait`, which every driver supports, rather than link-state
/// interrupts, which virtual devices lack). The state itself is the `port_link_up` gauge.
pub struct LinkWatch {
    ports: Vec<(u16, String)>,
    last: Vec<Option<bool>>,
    checked: Instant,
}

impl LinkWatch {
    /// Watches `ports` (port id, name); the first [`LinkWatch::tick`] logs every port's state.
    pub fn new(ports: Vec<(u16, String)>) -> LinkWatch {
        let last = vec![None; ports.len()];
        LinkWatch { ports, last, checked: Instant::now() - Duration::from_secs(1) }
    }

    /// Checks the links when a second has passed since the last check; logs changes.
    pub fn tick(&mut self) {
        if self.checked.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.checked = Instant::now();
        for ((id, name), last) in self.ports.iter().zip(self.last.iter_mut()) {
            let Ok(l) = port_link(*id) else { continue };
            match *last {
                Some(was) if was != l.up && l.up => tracing::info!(port = %name, speed_mbps = l.speed_mbps, "link up"),
                Some(was) if was != l.up => tracing::warn!(port = %name, "link down"),
                None => tracing::info!(port = %name, up = l.up, speed_mbps = l.speed_mbps, "link state"),
                _ => {}
            }
            *last = Some(l.up);
        }
    }
}
