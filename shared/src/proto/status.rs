//! The answer of `status` ([`StatusReport`]): ports, services and their backends and
//! endpoints with health and load, the worker counters, neighbors, the control socket,
//! the health checker and fleet sync.

use serde::{Deserialize, Serialize};

/// Readiness and announcement of one VIP (docs/bgp.md "Readiness").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VipRow {
    /// The VIP (dotted quad).
    pub vip: String,
    /// Services on this VIP, config order.
    pub services: Vec<String>,
    /// Workers polling, a snapshot in use by every worker, at least one healthy enabled
    /// backend, and not drained.
    pub ready: bool,
    /// Drained by the operator (`spillwayctl vip drain`).
    pub drained: bool,
    /// Announced now (its address is on the announcement interface; false without
    /// `[announce]`).
    pub announced: bool,
    /// Why it is not ready (empty when ready).
    pub not_ready_because: Vec<String>,
}

/// Counters of one worker, or summed over workers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Frames received.
    pub rx: u64,
    /// Frames sent.
    pub tx: u64,
    /// Frames forwarded to backends.
    pub forwarded: u64,
    /// ARP replies.
    pub arp_replies: u64,
    /// ICMP errors forwarded to the quoted flow's backend.
    pub icmp_forwarded: u64,
    /// ICMP "fragmentation needed" replies generated.
    pub icmp_frag_needed_sent: u64,
    /// IPv4 fragments forwarded.
    pub fragments: u64,
    /// Later IPv4 and IPv6 fragments held until their first fragment arrived (or they expired, then
    /// counted as the drop `fragment_unknown`).
    pub fragments_held: u64,
    /// New connections.
    pub new_connections: u64,
    /// Connections moved to another backend.
    pub rebalanced: u64,
    /// (reason, count) for every drop reason, in a fixed order.
    pub drops: Vec<(String, u64)>,
    /// Connection table hits.
    pub ct_hits: u64,
    /// Connection table misses.
    pub ct_misses: u64,
    /// Evictions of SYN-only entries.
    pub ct_evicted_syn_only: u64,
    /// Evictions of closing entries.
    pub ct_evicted_closing: u64,
    /// First packets of new flows forwarded without a table entry (both buckets full of
    /// established connections; the Maglev choice still applies).
    pub ct_syn_not_tracked: u64,
    /// Snapshot generation in use (minimum over workers when summed).
    pub generation: u64,
    /// Poll iterations.
    pub polls: u64,
    /// Poll iterations that received nothing.
    pub idle_polls: u64,
    /// ARP replies and Neighbor Advertisements handed to the neighbour resolver.
    #[serde(default)]
    pub arp_replies_seen: u64,
    /// Frames sent for the control side (ARP requests, gratuitous ARP).
    #[serde(default)]
    pub control_tx: u64,
    /// Control-side frames that could not be sent (no mbuf, TX full, unknown port).
    #[serde(default)]
    pub control_tx_failed: u64,
    /// Neighbor Advertisements sent in answer to solicitations for our IPv6 addresses.
    #[serde(default)]
    pub nd_advertisements: u64,
    /// Neighbor Solicitations for IPv6 addresses that are not ours (not answered).
    #[serde(default)]
    pub nd_not_ours: u64,
    /// QUIC-LB: (name, count) in a fixed order: `routed` (short-header packets routed by
    /// their DCID's server ID), `long_header`, `fallback_<reason>` (short-header packets
    /// that took the 5-tuple path: unknown codepoint, too short, unknown server ID, not
    /// eligible).
    #[serde(default)]
    pub quic_lb: Vec<(String, u64)>,
    /// Connection-table entries moved to their other bucket to make room for a new one
    /// (relocation on insert), both families.
    #[serde(default)]
    pub ct_relocated: u64,
    /// Insertions into two full buckets for which no chain of moves freed a slot (an
    /// eviction or `ct_syn_not_tracked` follows), both families.
    #[serde(default)]
    pub ct_relocation_failed: u64,
    /// Of `forwarded`, frames the vector fast path decided (established flows of L2 DSR
    /// services; docs/architecture.md "The vector fast path").
    #[serde(default)]
    pub fast_path: u64,
    /// Packets handed to the worker that owns their flow (ICMP errors quoting it, IPv4
    /// fragments of it, which RSS gave another worker; docs/architecture.md "Redirect rings").
    #[serde(default)]
    pub redirected: u64,
}

impl Counters {
    /// Sums several workers' counters (generation: the minimum).
    pub fn sum<'a>(items: impl IntoIterator<Item = &'a Counters>) -> Counters {
        let mut out = Counters::default();
        let mut gen: Option<u64> = None;
        for c in items {
            out.rx += c.rx;
            out.tx += c.tx;
            out.forwarded += c.forwarded;
            out.fast_path += c.fast_path;
            out.redirected += c.redirected;
            out.arp_replies += c.arp_replies;
            out.icmp_forwarded += c.icmp_forwarded;
            out.icmp_frag_needed_sent += c.icmp_frag_needed_sent;
            out.fragments += c.fragments;
            out.fragments_held += c.fragments_held;
            out.new_connections += c.new_connections;
            out.rebalanced += c.rebalanced;
            if out.quic_lb.is_empty() {
                out.quic_lb = c.quic_lb.clone();
            } else {
                for (o, i) in out.quic_lb.iter_mut().zip(&c.quic_lb) {
                    o.1 += i.1;
                }
            }
            if out.drops.is_empty() {
                out.drops = c.drops.clone();
            } else {
                for (o, i) in out.drops.iter_mut().zip(&c.drops) {
                    o.1 += i.1;
                }
            }
            out.ct_hits += c.ct_hits;
            out.ct_misses += c.ct_misses;
            out.ct_evicted_syn_only += c.ct_evicted_syn_only;
            out.ct_evicted_closing += c.ct_evicted_closing;
            out.ct_syn_not_tracked += c.ct_syn_not_tracked;
            out.ct_relocated += c.ct_relocated;
            out.ct_relocation_failed += c.ct_relocation_failed;
            out.nd_advertisements += c.nd_advertisements;
            out.nd_not_ours += c.nd_not_ours;
            gen = Some(gen.map_or(c.generation, |g| g.min(c.generation)));
            out.polls += c.polls;
            out.idle_polls += c.idle_polls;
            out.arp_replies_seen += c.arp_replies_seen;
            out.control_tx += c.control_tx;
            out.control_tx_failed += c.control_tx_failed;
        }
        out.generation = gen.unwrap_or(0);
        out
    }

    /// Total drops over all reasons.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().map(|d| d.1).sum()
    }
}

/// One port's device counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    /// Port name from the config.
    pub name: String,
    /// Device string.
    pub device: String,
    /// MAC address.
    pub mac: String,
    /// Device RX packets.
    pub ipackets: u64,
    /// Device TX packets.
    pub opackets: u64,
    /// Packets the device dropped for lack of RX descriptors.
    pub imissed: u64,
    /// RX errors.
    pub ierrors: u64,
    /// TX errors.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
    /// mbufs in use in this port's pool.
    pub mbufs_in_use: u64,
    /// Link up (`rte_eth_link_get_nowait`); `None` when the driver cannot tell.
    #[serde(default)]
    pub link_up: Option<bool>,
    /// Link speed, Mbit/s; 0 when unknown (DPDK's `RTE_ETH_SPEED_NUM_UNKNOWN`, `UINT32_MAX`,
    /// and `RTE_ETH_SPEED_NUM_NONE` both read as 0; virtio reports the former).
    #[serde(default)]
    pub link_speed_mbps: u32,
    /// Link up/down changes the daemon's once-a-second link check has seen since start
    /// (each also logged as `link up` / `link down`).
    #[serde(default)]
    pub link_changes: u64,
    /// How the port spreads frames over its RX queues (RSS), and how fleet sync places
    /// peers' entries for flows arriving on it.
    #[serde(default)]
    pub rss: PortRss,
    /// The device's extended statistics that operators watch, as (name, value) in driver
    /// order: per-queue packets (`rx_q0_packets`), missed frames, mbuf allocation failures
    /// and errors (`dataplane::dpdk::xstat_wanted`).
    #[serde(default)]
    pub xstats: Vec<(String, u64)>,
}

/// RSS of one port as the device reports it after start (`rte_eth_dev_rss_hash_conf_get`,
/// `rte_eth_dev_rss_reta_query`), and the sync placement it leads to (docs/bgp.md
/// "Flow sync": entries go to the worker RSS gives the flow, else to every worker).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRss {
    /// RX queues configured (one per worker; queue N is worker N).
    pub rx_queues: u16,
    /// Hash types the device hashes on, in DPDK's names (`ipv4`, `ipv4-tcp`, `ipv6-udp`, ...,
    /// as testpmd prints them; an unnamed bit as `bit N`); empty when RSS is off (one queue).
    pub hash_types: Vec<String>,
    /// Where the Toeplitz key comes from: `driver default` (Spillway sets no key; the value is
    /// the one the device reports) or `none` (RSS off, or the device reports no key).
    pub key_source: String,
    /// The key as the device reports it, lowercase hex (empty when none): 40 bytes for most
    /// NICs and virtio, 52 for some.
    pub key: String,
    /// Redirection table: queue (= worker) per entry, as the device reports it; empty when it
    /// reports none.
    pub reta: Vec<u16>,
    /// Sync placement for flows of this port: `rss` (software Toeplitz over `key` and `reta`
    /// picks one worker), `broadcast` (every worker gets the entry), `single` (one worker),
    /// or `off` (no `[sync]`).
    pub sync_placement: String,
    /// Why that placement (e.g. the device reports no RETA, or ports disagree).
    pub sync_placement_why: String,
}

/// One backend's state and counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// Service name.
    pub service: String,
    /// Backend name.
    pub backend: String,
    /// Address.
    pub address: String,
    /// Zone.
    pub zone: String,
    /// Health: at least one enabled endpoint is healthy (as the dataplane counts it); for
    /// a group whose endpoints are all disabled, at least one endpoint passes its checks
    /// (admin state is [`Self::enabled`], not health).
    pub healthy: bool,
    /// Admin state: false when the backend is disabled, or when every endpoint of a group is.
    pub enabled: bool,
    /// New connections, summed over workers (and endpoints).
    pub new_connections: u64,
    /// Packets forwarded to it, summed over workers (and endpoints).
    pub packets: u64,
    /// Bytes forwarded to it, summed over workers (and endpoints).
    #[serde(default)]
    pub bytes: u64,
    /// Enabled endpoints.
    #[serde(default)]
    pub endpoints: u32,
    /// Enabled endpoints passing health checks.
    #[serde(default)]
    pub healthy_endpoints: u32,
    /// It takes no new connections by drain, its endpoints with it: auto capacity drain
    /// holds it (spec/service-lb-policy.md "Auto capacity drain"), or the operator set its
    /// capacity to zero (`capacity_scaler = 0` or `capacity_cps = 0`).
    #[serde(default)]
    pub drained: bool,
    /// Its endpoints, config order.
    #[serde(default)]
    pub members: Vec<EndpointStatus>,
}

/// One endpoint's state and counters, in [`BackendStatus::members`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointStatus {
    /// Endpoint name.
    pub name: String,
    /// Address.
    pub address: String,
    /// Weight among the backend's endpoints.
    pub weight: u32,
    /// Health as used by the dataplane.
    pub healthy: bool,
    /// Admin state.
    pub enabled: bool,
    /// New connections, summed over workers.
    pub new_connections: u64,
    /// Packets forwarded to it, summed over workers.
    pub packets: u64,
    /// Bytes (whole frames as forwarded) sent to it, summed over workers.
    #[serde(default)]
    pub bytes: u64,
    /// Why its next hop has no MAC (`no ARP reply from 10.0.0.11 (3 requests
    /// unanswered)`); `None` when resolved or configured. An unresolved endpoint is not
    /// eligible (docs/operations.md "Next hops").
    #[serde(default)]
    pub unresolved: Option<String>,
    /// Its QUIC-LB server ID (hex), when its service has QUIC-LB.
    #[serde(default)]
    pub server_id: Option<String>,
}

/// Next-hop resolution in [`StatusReport::neighbors`] (docs/operations.md "Next hops").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighborStatus {
    /// Requests sent (ARP requests, Neighbor Solicitations).
    pub requests: u64,
    /// Replies learned (answers to our outstanding requests).
    pub replies: u64,
    /// Replies ignored (no request of ours outstanding for that address, or not addressed to the port we ask on).
    pub ignored: u64,
    /// Requests unanswered within `retry_ms`.
    pub timeouts: u64,
    /// Entries expired (`expiry_sec` without a reply).
    pub expired: u64,
    /// Replies that changed a known MAC.
    pub changed: u64,
    /// Gratuitous ARPs and unsolicited Neighbor Advertisements sent.
    pub gratuitous: u64,
    /// Requests postponed to a later control tick by the per-tick limit
    /// (`REQUESTS_PER_TICK`), each counted once per tick it waited.
    pub deferred: u64,
    /// MLDv2 report frames sent (joins, leaves, periodic reports of the solicited-node
    /// groups of our IPv6 addresses; RFC 3810).
    pub mld_reports: u64,
    /// Every address being resolved: (address, MAC or "", seconds since the last reply
    /// or -1 when unresolved).
    pub entries: Vec<(String, String, i64)>,
}

/// Answer to [`Request::Status`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Daemon version.
    pub version: String,
    /// Seconds since start.
    #[serde(with = "crate::real::f64")]
    pub uptime_sec: f64,
    /// Current snapshot generation.
    pub generation: u64,
    /// Ports.
    pub ports: Vec<PortStatus>,
    /// Per-worker counters.
    pub workers: Vec<Counters>,
    /// Sum over workers.
    pub total: Counters,
    /// Per backend.
    pub backends: Vec<BackendStatus>,
    /// The health checker thread. Default (no checker) for reports without the field.
    #[serde(default)]
    pub health_checker: HealthCheckerStatus,
    /// Next-hop resolution (ARP).
    #[serde(default)]
    pub neighbors: NeighborStatus,
    /// Counters of the control socket since start.
    #[serde(default)]
    pub control_socket: ControlSocketStatus,
    /// Fleet flow-state sync (`enabled: false` without `[sync]`).
    #[serde(default)]
    pub sync: crate::sync::SyncStatus,
}

/// Counters of the control socket, in [`StatusReport::control_socket`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlSocketStatus {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused by the peer-credential check (not root or `socket_group`).
    pub refused: u64,
    /// Request frames that could not be read or decoded (answered with
    /// [`Response::BadFrame`]).
    pub bad_frames: u64,
    /// Requests answered.
    pub requests: u64,
}

/// State of the health checker thread, in [`StatusReport::health_checker`]
/// (docs/operations.md "Health checker").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheckerStatus {
    /// A checker thread was started (some service has a `health_check`).
    pub started: bool,
    /// Why the checker thread died (it panicked or its event loop failed); `None` while it
    /// runs. A dead checker freezes every backend's health, so the daemon exits non-zero.
    pub dead: Option<String>,
    /// Targets probed.
    pub targets: u64,
    /// Probes skipped for a local resource shortage since start, over all targets (see
    /// [`HealthRow::probes_skipped`]).
    pub probes_skipped: u64,
    /// `RLIMIT_NOFILE` soft limit in force (the daemon raises it to the hard limit at
    /// start); 0 if unknown.
    pub nofile_limit: u64,
}
