//! `[dataplane]` (process: EAL, workers, control socket), `[[ports]]`, `[[zones]]`,
//! `[forwarder]`, `[[client_zones]]` and `[conntrack]`: the host-level sections. Their
//! cross-field rules (ports, zones, cores) are checked by [`super::Config::validate`], the
//! ports' identities (each port's own MAC and addresses) by [`validate_port_identities`].

use super::ranged;
use super::yes;
use crate::net::{IpPrefix, MacAddr};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest control socket path in bytes: `sun_path` holds 108 bytes with the terminating
/// NUL (unix(7)).
pub const SOCKET_PATH_MAX: usize = 107;

/// Checks the control socket path the daemon will bind (`--socket`, else
/// `dataplane.socket`): 1 to [`SOCKET_PATH_MAX`] bytes without NUL. `field` names where
/// the path came from (`--socket` or `dataplane.socket`) in the error. Only the path
/// actually used is checked: a config whose `dataplane.socket` is unusable starts with a
/// usable `--socket` (and gets a warning, [`super::Config::warnings`]).
///
/// `dataplane.socket` must also be absolute: a relative path would be resolved from the
/// daemon's working directory (`/` under systemd), not from the config file's, so
/// `spillwayctl` would look for the socket elsewhere. `--socket` may be relative (the
/// operator's shell resolves it where they typed it).
pub fn check_socket_path(field: &str, path: &[u8]) -> Result<(), super::ConfigError> {
    let shown = || format!("{:?}", String::from_utf8_lossy(path));
    if path.is_empty() || path.contains(&0) || path.len() > SOCKET_PATH_MAX {
        return Err(super::ConfigError::new(
            field,
            shown(),
            format!("must be a file path of 1 to {SOCKET_PATH_MAX} bytes without NUL (the control socket; default /run/spillway/ctl.sock)"),
        ));
    }
    if field == "dataplane.socket" && path.first() != Some(&b'/') {
        return Err(super::ConfigError::new(
            field,
            shown(),
            "must be an absolute path: a relative one would be resolved from the daemon's working directory (/ under systemd), not from the config file's (or pass --socket PATH)",
        ));
    }
    Ok(())
}

/// `[dataplane]`: process-level settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Extra EAL arguments, e.g. `["--no-huge", "-m", "512", "--no-pci"]`.
    #[serde(default)]
    pub eal_args: Vec<String>,
    /// Number of poll-mode workers (1–64); worker i polls RX queue i of every port.
    #[serde(default = "default_workers", deserialize_with = "ranged::workers")]
    pub workers: u16,
    /// CPU cores to pin workers to, in order; empty = cores 1.. (core 0 left to control).
    #[serde(default, deserialize_with = "ranged::worker_cores")]
    pub worker_cores: Vec<usize>,
    /// mbufs in the pool per port (power of two minus one is best), 1023–1048575.
    #[serde(default = "default_mbufs", deserialize_with = "ranged::mbufs_per_port")]
    pub mbufs_per_port: u32,
    /// RX/TX descriptors per queue, 64–4096.
    #[serde(default = "default_descriptors", deserialize_with = "ranged::descriptors")]
    pub descriptors: u16,
    /// Control socket path.
    #[serde(default = "default_socket")]
    pub socket: String,
    /// Group (name) whose members may use the control socket besides root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    /// Microseconds a worker sleeps after a poll that received nothing (0 = pure busy
    /// polling, the production setting; >0 shares a core on small test hosts). 0–10,000.
    #[serde(default, deserialize_with = "ranged::idle_sleep_us")]
    pub idle_sleep_us: u32,
    /// ICMP errors (fragmentation needed, Packet Too Big) each worker sends per second at
    /// most, in bursts of up to 50; 0 never sends one. 0–1,000,000 (default 1,000, Linux's
    /// `icmp_ratelimit` rate). RFC 1812 §4.3.2.8, RFC 4443 §2.4(f).
    #[serde(default = "default_icmp_rate", deserialize_with = "ranged::icmp_errors_per_sec")]
    pub icmp_errors_per_sec: u32,
    /// Initialise DPDK's packet capture framework at start (`rte_pdump_init`), so that
    /// `dpdk-dumpcap` (a DPDK secondary process) can capture the ports while the daemon
    /// runs. Needs EAL multi-process: `eal_args` without `--no-shconf` or `--in-memory`
    /// (docs/operations.md "Port capture with dpdk-dumpcap"). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub packet_capture: bool,
}

fn default_icmp_rate() -> u32 {
    1000
}

fn default_workers() -> u16 {
    1
}
fn default_mbufs() -> u32 {
    8191
}
fn default_descriptors() -> u16 {
    1024
}
/// Default control socket path.
pub const DEFAULT_SOCKET: &str = "/run/spillway/ctl.sock";
fn default_socket() -> String {
    DEFAULT_SOCKET.to_string()
}

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            eal_args: Vec::new(),
            workers: default_workers(),
            worker_cores: Vec::new(),
            mbufs_per_port: default_mbufs(),
            descriptors: default_descriptors(),
            socket: default_socket(),
            socket_group: None,
            idle_sleep_us: 0,
            icmp_errors_per_sec: default_icmp_rate(),
            packet_capture: false,
        }
    }
}

/// `[[ports]]`: one DPDK port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Name used in logs, counters and `forward_to`.
    pub name: String,
    /// A PCI address (`0000:3b:00.0`) or a virtual device with arguments
    /// (`net_af_packet0,iface=veth0`, `net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`).
    pub device: String,
    /// Port that packets received here leave on; default: this port (one-armed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_to: Option<String>,
    /// This port's own address, IPv4 (answered in ARP) or IPv6 (answered in Neighbor
    /// Discovery, RFC 4861); optional. Also the outer source of IPIP/GUE of its family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// A second, IPv6 address for a port whose `address` is IPv4 (dual stack); optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address6: Option<Ipv6Addr>,
    /// Override of the port's MAC address used as source MAC on rewritten frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<MacAddr>,
    /// Router towards routed backends: IPIP/GUE endpoints without a `mac` are sent to
    /// its ARP-resolved MAC ([`crate::neighbors::next_hop`]); optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Ipv4Addr>,
    /// Largest IP packet the port receives and sends, bytes (the L3 MTU: Ethernet header,
    /// VLAN tags and FCS excluded), 1280–9216, default 1500. Above 1500 (jumbo frames)
    /// the port receives into chained mbufs (RX scatter) or into mbufs
    /// sized for the frame, as the device allows (docs/operations.md "Jumbo frames").
    #[serde(default = "d_port_mtu", deserialize_with = "ranged::port_mtu", skip_serializing_if = "is_default_port_mtu")]
    pub mtu: u16,
}

/// Default [`PortConfig::mtu`]: the Ethernet MTU (RFC 894).
pub const DEFAULT_PORT_MTU: u16 = 1500;
/// Each port has its own addresses (link-local IPv6 ones excepted), and no backend or
/// endpoint `mac` is a port's: a neighbour learns one port per address (ARP, Neighbor
/// Discovery), and a frame rewritten to a port's own MAC never reaches a backend. Errors name the later
/// field and the earlier one: `ports[1].mac = 02:00:00:00:00:01: same as ports[0].mac ...`.
pub(super) fn validate_port_identities(cfg: &super::Config) -> Result<(), super::ConfigError> {
    use super::ConfigError;
    let addrs = |p: &PortConfig| [("address", p.address), ("address6", p.address6.map(IpAddr::V6))];
    // Two ports may share a MAC: MACs are unique per LAN, and two-armed ports
    // (`forward_to`) sit on different segments; so may two ports share a link-local IPv6
    // address (RFC 4291 §2.5.6: link-local addresses are per link).
    for (i, p) in cfg.ports.iter().enumerate() {
        for (f, a) in addrs(p) {
            let Some(a) = a.filter(|a| !matches!(a, IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80)) else { continue };
            for (j, q) in cfg.ports[..i].iter().enumerate() {
                if let Some((g, _)) = addrs(q).into_iter().find(|(_, b)| *b == Some(a)) {
                    return Err(ConfigError::new(format!("ports[{i}].{f}"), a,
                        format!("same as ports[{j}].{g}: each port needs its own address (both ports would answer ARP/ND for it, and replies to requests from it could arrive on either)")));
                }
            }
        }
    }
    let own: Vec<(usize, MacAddr)> = cfg.ports.iter().enumerate().filter_map(|(k, p)| p.mac.map(|m| (k, m))).collect();
    if own.is_empty() {
        return Ok(());
    }
    for (i, s) in cfg.services.iter().enumerate() {
        for (bi, b) in s.backends.iter().enumerate() {
            for (e, m) in b.members().iter().enumerate() {
                let Some(&(k, mac)) = m.mac.and_then(|mac| own.iter().find(|(_, o)| *o == mac)) else { continue };
                let here = if b.is_group() { format!("services[{i}].backends[{bi}].endpoints[{e}].mac") } else { format!("services[{i}].backends[{bi}].mac") };
                return Err(ConfigError::new(here, mac,
                    format!("same as ports[{k}].mac: a backend's MAC must not be a port's own (frames for the backend would be sent to this port, not to the backend)")));
            }
        }
    }
    Ok(())
}

fn d_port_mtu() -> u16 {
    DEFAULT_PORT_MTU
}
fn is_default_port_mtu(m: &u16) -> bool {
    *m == DEFAULT_PORT_MTU
}

/// A zone and its region (also used for `forwarder`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Location {
    /// Zone name, e.g. `z1`.
    pub zone: String,
    /// Region name, e.g. `r1`.
    pub region: String,
}

/// `[[client_zones]]`: clients under `prefix` are in `zone`, or not zonal-compatible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientZone {
    /// Source prefix, IPv4 (`10.1.0.0/16`) or IPv6 (`fd01::/64`).
    pub prefix: IpPrefix,
    /// Zone of these clients (required when `compatible`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `false` marks VPN, interconnect or other-region sources: never a zonal match.
    #[serde(default = "yes")]
    pub compatible: bool,
}

/// `[conntrack]`: per-worker connection tracking table. spec/backend-selection.md
/// "Connection tracking". All timeouts in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConntrackConfig {
    /// Entries per worker (rounded up to a power of two, 1,024–67,108,864).
    #[serde(default = "d_ct_cap", deserialize_with = "ranged::capacity_per_worker")]
    pub capacity_per_worker: u32,
    /// Idle timeout of established TCP entries (default 600 s, range 600–57,600).
    #[serde(default = "d_tcp", deserialize_with = "ranged::tcp_idle_timeout_sec")]
    pub tcp_idle_timeout_sec: u32,
    /// Idle timeout of TCP entries that saw only a SYN (default 5 s, 1–600).
    #[serde(default = "d_syn", deserialize_with = "ranged::tcp_syn_timeout_sec")]
    pub tcp_syn_timeout_sec: u32,
    /// Life of TCP entries after FIN or RST (default 10 s, 1–600).
    #[serde(default = "d_fin", deserialize_with = "ranged::tcp_closing_timeout_sec")]
    pub tcp_closing_timeout_sec: u32,
    /// Idle timeout of UDP entries (default 30 s, 1–57,600).
    #[serde(default = "d_udp", deserialize_with = "ranged::udp_idle_timeout_sec")]
    pub udp_idle_timeout_sec: u32,
}
fn d_ct_cap() -> u32 {
    1 << 20
}
fn d_tcp() -> u32 {
    600
}
fn d_syn() -> u32 {
    5
}
fn d_fin() -> u32 {
    10
}
fn d_udp() -> u32 {
    30
}
impl Default for ConntrackConfig {
    fn default() -> Self {
        ConntrackConfig {
            capacity_per_worker: d_ct_cap(),
            tcp_idle_timeout_sec: d_tcp(),
            tcp_syn_timeout_sec: d_syn(),
            tcp_closing_timeout_sec: d_fin(),
            udp_idle_timeout_sec: d_udp(),
        }
    }
}
