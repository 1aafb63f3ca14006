//! Prometheus metrics: `GET /metrics` on `[metrics] listen`, served by a control-side
//! thread (never a worker core) running hyper's HTTP/1 server on a current-thread tokio
//! runtime, a task per connection (at most [`MAX_CONNECTIONS`] at once, each cut
//! [`REQUEST_DEADLINE`] after accept without a request, or when its answer stalls that
//! long or is not taken within [`ANSWER_DEADLINE`]; when all are taken, a new connection
//! takes the place of the one that has waited longest for its request head, and is
//! answered `503` only when every one is answering a request; [`serve`]), encoded with the
//! `prometheus-client` crate in the OpenMetrics text format (which Prometheus and
//! `promtool check metrics` read).
//!
//! Every scrape reads the counters the way [`Daemon::status`] does (per-worker atomics
//! summed on read, per-backend counters from their slot baselines) into a fresh registry,
//! so the workers never do anything for metrics: even the connection-table occupancy is read
//! from counters each worker mirrors at the end of its poll (no mailbox request, no table
//! walk; `WorkerStats::ct_entries`).
//! Names, labels and meanings: docs/metrics.md; dashboard: docs/grafana-dashboard.json.

use crate::daemon::Daemon;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering;

/// Label set of one series: `(name, value)` pairs, shared by the families that label
/// their series alike (a backend's or an endpoint's rows in each of its families: one
/// label set per endpoint a scrape, not one per series).
type Labels = std::sync::Arc<[(&'static str, String)]>;

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// The empty label set.
fn no_labels() -> Labels {
    labels(&[])
}

/// One histogram series: labels, sum, count, (upper bound, count) per bucket (`+Inf` last).
type HistogramRow = (Labels, f64, u64, Vec<(f64, u64)>);

/// Builds one scrape's registry from rows of `(labels, value)`.
struct Builder {
    reg: Registry,
}

impl Builder {
    /// A counter family `spillway_<name>_total`. Each row's labels are unique (names of
    /// services, backends, endpoints, workers, reasons): the rows are encoded as given,
    /// without a `Family`'s map of one atomic per series (20,000 endpoints: 100,000 series
    /// a scrape).
    fn counter(&mut self, name: &str, help: &str, rows: impl IntoIterator<Item = (Labels, u64)>) {
        self.reg.register(name, help, Rows(rows.into_iter().collect(), MetricType::Counter));
    }

    /// A histogram family `spillway_<name>` of pre-aggregated rows (labels, sum, count,
    /// per-bucket counts with upper bounds, `+Inf` last).
    fn histogram(&mut self, name: &str, help: &str, rows: Vec<HistogramRow>) {
        self.reg.register(name, help, Histograms(rows));
    }

    /// A gauge family `spillway_<name>` (rows as [`Builder::counter`]'s).
    fn gauge(&mut self, name: &str, help: &str, rows: impl IntoIterator<Item = (Labels, f64)>) {
        self.reg.register(name, help, Rows(rows.into_iter().collect(), MetricType::Gauge));
    }
}

/// Counter (`u64`) or gauge (`f64`) series of one family, encoded as `prometheus-client`
/// encodes a `Family` of `Counter`s or `Gauge`s, in the order given.
#[derive(Debug)]
struct Rows<V>(Vec<(Labels, V)>, MetricType);

impl prometheus_client::encoding::EncodeMetric for Rows<u64> {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error> {
        for (l, v) in &self.0 {
            encoder.encode_family(&&**l)?.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(v, None)?;
        }
        Ok(())
    }
    fn metric_type(&self) -> MetricType {
        self.1
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl prometheus_client::encoding::EncodeMetric for Rows<f64> {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error> {
        for (l, v) in &self.0 {
            encoder.encode_family(&&**l)?.encode_gauge(v)?;
        }
        Ok(())
    }
    fn metric_type(&self) -> MetricType {
        self.1
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Histograms whose buckets were counted elsewhere (the health checker's per-endpoint
/// RTTs): `prometheus-client`'s own `Histogram` only counts what it observes itself.
#[derive(Debug)]
struct Histograms(Vec<HistogramRow>);

impl prometheus_client::encoding::EncodeMetric for Histograms {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error> {
        for (l, sum, count, buckets) in &self.0 {
            encoder.encode_family(&&**l)?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(*sum, *count, buckets, None)?;
        }
        Ok(())
    }
    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// The whole exposition (OpenMetrics text, ending in `# EOF`).
pub fn render(daemon: &Daemon) -> String {
    // Per endpoint (a single-endpoint backend's endpoint is named like the backend), while
    // `metrics.per_endpoint` allows (off by default above 1,000 endpoints: docs/metrics.md);
    // without them, the status has no per-endpoint rows to build.
    let per_endpoint = {
        let st = daemon.control.lock().unwrap_or_else(|e| e.into_inner());
        let n_endpoints: usize = st.cfg.services.iter().flat_map(|s| &s.backends).map(|b| b.member_addresses().count()).sum();
        st.cfg.metrics.as_ref().is_none_or(|m| m.per_endpoint_series(n_endpoints))
    };
    let status = daemon.status_with(per_endpoint);
    let mut b = Builder { reg: Registry::with_prefix("spillway") };
    let one = |v: bool| if v { 1.0 } else { 0.0 };

    b.gauge("uptime_seconds", "Seconds since the daemon started", [(no_labels(), status.uptime_sec)]);
    b.gauge("build_info", "Always 1; the version label names the build", [(labels(&[("version", &status.version)]), 1.0)]);

    // Per service and backend.
    let backends: Vec<(Labels, &spillway_shared::proto::BackendStatus)> = status.backends.iter().map(|s| (labels(&[("service", &s.service), ("backend", &s.backend), ("address", &s.address)]), s)).collect();
    b.counter("backend_packets", "Packets forwarded to the backend (client to backend direction)", backends.iter().map(|(l, s)| (l.clone(), s.packets)));
    b.counter("backend_bytes", "Bytes (whole frames as received) forwarded to the backend", backends.iter().map(|(l, s)| (l.clone(), s.bytes)));
    b.counter("backend_new_connections", "New connections (connection-table misses) that selected the backend", backends.iter().map(|(l, s)| (l.clone(), s.new_connections)));
    b.gauge("backend_healthy", "1 when the backend passes its health checks: an enabled endpoint healthy (a group with every endpoint disabled: any endpoint healthy); admin state and drain are backend_enabled and backend_drained", backends.iter().map(|(l, s)| (l.clone(), one(s.healthy))));
    b.gauge("backend_enabled", "1 when the backend is enabled in the config (0 also for a group whose endpoints are all disabled)", backends.iter().map(|(l, s)| (l.clone(), one(s.enabled))));
    b.gauge("backend_drained", "1 when the backend takes no new connections by drain: capacity_scaler = 0, capacity_cps = 0, or auto capacity drain", backends.iter().map(|(l, s)| (l.clone(), one(s.drained))));
    let endpoints: Vec<(Labels, &spillway_shared::proto::EndpointStatus)> = status
        .backends
        .iter()
        .filter(|_| per_endpoint)
        .flat_map(|s| s.members.iter().map(move |m| (labels(&[("service", &s.service), ("backend", &s.backend), ("endpoint", &m.name), ("address", &m.address)]), m)))
        .collect();
    b.counter("endpoint_packets", "Packets forwarded to the endpoint", endpoints.iter().map(|(l, m)| (l.clone(), m.packets)));
    b.counter("endpoint_bytes", "Bytes (whole frames as received) forwarded to the endpoint", endpoints.iter().map(|(l, m)| (l.clone(), m.bytes)));
    b.counter("endpoint_new_connections", "New connections that selected the endpoint", endpoints.iter().map(|(l, m)| (l.clone(), m.new_connections)));
    b.gauge("endpoint_healthy", "1 when the endpoint is eligible: passing its health check and its next hop resolved", endpoints.iter().map(|(l, m)| (l.clone(), one(m.healthy))));
    b.gauge("endpoint_next_hop_resolved", "0 while the endpoint's next-hop MAC is not resolved (ARP), 1 otherwise", endpoints.iter().map(|(l, m)| (l.clone(), one(m.unresolved.is_none()))));
    let mut per_service: std::collections::BTreeMap<&str, (u64, u64, u64, u64)> = Default::default();
    for s in &status.backends {
        let e = per_service.entry(&s.service).or_default();
        e.0 += s.packets;
        e.1 += s.new_connections;
        e.2 += u64::from(s.healthy && s.enabled);
        e.3 += s.bytes;
    }
    let per_service: Vec<(Labels, (u64, u64, u64, u64))> = per_service.into_iter().map(|(s, v)| (labels(&[("service", s)]), v)).collect();
    b.counter("service_packets", "Packets forwarded for the service, all backends", per_service.iter().map(|(l, v)| (l.clone(), v.0)));
    b.counter("service_bytes", "Bytes forwarded for the service, all backends", per_service.iter().map(|(l, v)| (l.clone(), v.3)));
    b.counter("service_new_connections", "New connections of the service, all backends", per_service.iter().map(|(l, v)| (l.clone(), v.1)));
    b.gauge("service_healthy_backends", "Backends of the service that are healthy and enabled", per_service.iter().map(|(l, v)| (l.clone(), v.2 as f64)));

    // Drops by reason (summed over workers; every reason present, zero or not).
    b.counter("drops", "Frames dropped, by reason (docs/semantics.md)", status.total.drops.iter().map(|(r, n)| (labels(&[("reason", r)]), *n)));
    b.counter("quic_lb_packets", "QUIC-LB services' packets: routed by server ID, long headers, and fallbacks to the 5-tuple path by reason", status.total.quic_lb.iter().map(|(r, n)| (labels(&[("outcome", r)]), *n)));

    // Per worker.
    let w = |i: usize| labels(&[("worker", &i.to_string())]);
    let workers = &status.workers;
    b.counter("worker_rx_packets", "Frames received by the worker, all ports", workers.iter().enumerate().map(|(i, c)| (w(i), c.rx)));
    b.counter("worker_tx_packets", "Frames sent by the worker, all ports", workers.iter().enumerate().map(|(i, c)| (w(i), c.tx)));
    b.counter("worker_forwarded_packets", "Frames forwarded to a backend", workers.iter().enumerate().map(|(i, c)| (w(i), c.forwarded)));
    b.counter("worker_fast_path_packets", "Of the frames forwarded, those the vector fast path decided (established flows of L2 DSR services)", workers.iter().enumerate().map(|(i, c)| (w(i), c.fast_path)));
    b.counter(
        "worker_polls",
        "Poll-loop iterations: kind=busy received frames, kind=idle received nothing",
        workers.iter().enumerate().flat_map(|(i, c)| {
            let i = i.to_string();
            [(labels(&[("worker", &i), ("kind", "busy")]), c.polls.saturating_sub(c.idle_polls)), (labels(&[("worker", &i), ("kind", "idle")]), c.idle_polls)]
        }),
    );
    b.gauge("worker_snapshot_generation", "Snapshot generation the worker last used", workers.iter().enumerate().map(|(i, c)| (w(i), c.generation as f64)));
    b.counter("worker_arp_replies", "ARP replies sent", workers.iter().enumerate().map(|(i, c)| (w(i), c.arp_replies)));
    b.counter("worker_nd_advertisements", "IPv6 Neighbor Advertisements sent for our addresses", workers.iter().enumerate().map(|(i, c)| (w(i), c.nd_advertisements)));
    b.counter("worker_nd_not_ours", "IPv6 Neighbor Solicitations for addresses that are not ours", workers.iter().enumerate().map(|(i, c)| (w(i), c.nd_not_ours)));
    b.counter("worker_icmp_forwarded", "ICMP errors forwarded to the backend of the quoted flow", workers.iter().enumerate().map(|(i, c)| (w(i), c.icmp_forwarded)));
    b.counter("worker_fragments", "IPv4 fragments forwarded", workers.iter().enumerate().map(|(i, c)| (w(i), c.fragments)));
    b.counter("worker_fragments_held", "Later IPv4 and IPv6 fragments held until their first fragment arrived", workers.iter().enumerate().map(|(i, c)| (w(i), c.fragments_held)));
    b.counter("worker_redirected", "Packets handed to the worker that owns their flow (ICMP errors, IPv4 fragments)", workers.iter().enumerate().map(|(i, c)| (w(i), c.redirected)));
    b.counter("worker_rebalanced_connections", "Connections moved to another backend", workers.iter().enumerate().map(|(i, c)| (w(i), c.rebalanced)));

    // Connection table.
    b.counter("conntrack_hits", "Connection-table lookups that found the flow", workers.iter().enumerate().map(|(i, c)| (w(i), c.ct_hits)));
    b.counter("conntrack_misses", "Connection-table lookups that did not", workers.iter().enumerate().map(|(i, c)| (w(i), c.ct_misses)));
    b.counter(
        "conntrack_evictions",
        "Entries evicted to make room, by the evicted entry's state",
        workers.iter().enumerate().flat_map(|(i, c)| {
            let i = i.to_string();
            [(labels(&[("worker", &i), ("state", "syn_only")]), c.ct_evicted_syn_only), (labels(&[("worker", &i), ("state", "closing")]), c.ct_evicted_closing)]
        }),
    );
    b.counter("conntrack_syn_not_tracked", "Packets of new flows not tracked because both buckets were full of established entries (each packet of such a flow counts: it misses again)", workers.iter().enumerate().map(|(i, c)| (w(i), c.ct_syn_not_tracked)));
    let (capacity, generation, config_generation, propagation) = {
        let st = daemon.control.lock().unwrap_or_else(|e| e.into_inner());
        (st.cfg.conntrack.capacity_per_worker, st.generation, st.config_generation, st.last_propagation_us)
    };
    b.gauge("conntrack_capacity", "Connection-table entries per worker", [(no_labels(), f64::from(capacity))]);
    let stats = &daemon.shared.stats;
    b.counter("conntrack_relocations", "Entries moved to their other bucket to make room for a new one", stats.iter().enumerate().map(|(i, s)| (w(i), s.ct_relocated.load(Ordering::Relaxed))));
    b.counter(
        "conntrack_relocation_failures",
        "Relocation searches (insertions into two full buckets below 31/32 occupancy) that found no room (an eviction or syn_not_tracked follows); at 31/32 or more no search runs and nothing is counted here",
        stats.iter().enumerate().map(|(i, s)| (w(i), s.ct_relocation_failed.load(Ordering::Relaxed))),
    );
    b.gauge("conntrack_entries", "Connection-table entries held, both families (occupancy counters; no table walk)", stats.iter().enumerate().map(|(i, s)| (w(i), crate::fastpath::stats::ct_entries(s) as f64)));
    b.gauge(
        "conntrack_entries_by_state",
        "Connection-table entries held, by family and state",
        stats.iter().enumerate().flat_map(|(i, s)| {
            use crate::fastpath::stats::{CT_FAMILIES, CT_STATES};
            let i = i.to_string();
            (0..6).map(move |j| (labels(&[("worker", &i), ("family", CT_FAMILIES[j / 3]), ("state", CT_STATES[j % 3])]), s.ct_entries[j].load(Ordering::Relaxed) as f64)).collect::<Vec<_>>()
        }),
    );

    // Control socket.
    let cs = &status.control_socket;
    b.counter("control_requests", "Control-socket requests answered", [(no_labels(), cs.requests)]);
    b.counter("control_bad_frames", "Control-socket request frames that were truncated, too large, of another protocol version or garbage (each answered with a typed error)", [(no_labels(), cs.bad_frames)]);
    b.counter("control_abandoned_requests", "Control-socket requests not applied because their client had closed the connection before they were served (its --timeout ran out)", [(no_labels(), daemon.ctl_stats.abandoned.load(Ordering::Relaxed))]);
    b.counter("control_refused_peers", "Control-socket connections refused by the peer-credential check", [(no_labels(), cs.refused)]);

    // Snapshots.
    b.gauge("snapshot_generation", "Last snapshot generation published", [(no_labels(), generation as f64)]);
    b.gauge("config_generation", "Config generation (moves with every applied spillwayctl edit)", [(no_labels(), config_generation as f64)]);
    b.gauge(
        "snapshot_publish_latency_seconds",
        "Last measured time from publishing a snapshot until every worker used it",
        propagation.map(|us| (no_labels(), us as f64 / 1e6)),
    );

    // Health probes (what the checker exposes: counts, RTT moving average and last RTT).
    let probes = match daemon.checker.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(c) if per_endpoint => c.snapshot(),
        _ => Vec::new(),
    };
    let probes: Vec<(Labels, crate::health::TargetStatus)> = probes.into_iter().map(|t| (labels(&[("service", &t.service), ("backend", &t.backend), ("endpoint", &t.endpoint)]), t)).collect();
    b.counter("health_probes_sent", "Health probes sent", probes.iter().map(|(l, t)| (l.clone(), t.probes_sent)));
    b.counter("health_probes_failed", "Health probes that failed", probes.iter().map(|(l, t)| (l.clone(), t.probes_failed)));
    b.counter("health_probes_skipped", "Health probes skipped (previous probe still running)", probes.iter().map(|(l, t)| (l.clone(), t.probes_skipped)));
    b.gauge("health_probe_rtt_seconds", "Probe round-trip time, moving average", probes.iter().filter_map(|(l, t)| t.rtt_ewma_ms.map(|r| (l.clone(), r / 1e3))));
    b.gauge("health_probe_last_rtt_seconds", "Round-trip time of the last successful probe", probes.iter().filter_map(|(l, t)| t.rtt_last_ms.map(|r| (l.clone(), r / 1e3))));
    b.histogram(
        "endpoint_probe_rtt_seconds",
        "Round-trip time of successful health probes of the endpoint (measured by the health checker)",
        probes.iter().map(|(l, t)| (l.clone(), t.rtt_histogram.sum_sec, t.rtt_histogram.count(), t.rtt_histogram.buckets())).collect(),
    );

    // Fleet flow-state sync (crate::sync; docs/bgp.md "Flow-state sync").
    let sy = &status.sync;
    if sy.enabled {
        b.counter("sync_sent_messages", "Flow-sync messages sent to peers", [(no_labels(), sy.sent_messages)]);
        b.counter("sync_sent_records", "Connection records sent to peers", [(no_labels(), sy.sent_records)]);
        b.counter("sync_sent_bytes", "Flow-sync bytes sent (UDP payload)", [(no_labels(), sy.sent_bytes)]);
        b.counter("sync_send_errors", "Flow-sync messages the kernel refused to send", [(no_labels(), sy.send_errors)]);
        b.counter("sync_received_messages", "Flow-sync messages accepted from peers", [(no_labels(), sy.received_messages)]);
        b.counter("sync_received_records", "Connection records in accepted messages", [(no_labels(), sy.received_records)]);
        let reasons: Vec<(Labels, u64)> = <spillway_shared::sync::Reject as strum::IntoEnumIterator>::iter()
            .map(|r| {
                let name: &str = r.into();
                (labels(&[("reason", name)]), sy.rejected.iter().find(|(n, _)| n == name).map_or(0, |x| x.1))
            })
            .collect();
        b.counter("sync_rejected_messages", "Flow-sync messages refused, by reason (never installed)", reasons);
        let outcomes = [
            ("installed", sy.installed),
            ("updated", sy.updated),
            ("conflict_local", sy.conflicts),
            ("no_room", sy.no_room),
            ("unknown_service", sy.unknown_service),
            ("unknown_endpoint", sy.unknown_endpoint),
            ("removed", sy.removed),
            ("older", sy.older),
            ("bad_record", sy.bad_records),
        ];
        b.counter("sync_records", "Peers' connection records by outcome", outcomes.iter().map(|(o, n)| (labels(&[("outcome", o)]), *n)));
        b.counter("sync_adopted_connections", "Flows that arrived here and kept their backend through a peer's synced entry", [(no_labels(), sy.adopted)]);
        b.counter("sync_queue_drops", "Records dropped because a worker queue was full, by direction", [(labels(&[("direction", "outbound")]), sy.outbound_queue_full), (labels(&[("direction", "inbound")]), sy.inbound_queue_full)]);
        b.counter("sync_lost_messages", "Peers' messages that never arrived (gaps in their numbering)", [(no_labels(), sy.lost_messages)]);
        b.counter("sync_stale_slot_records", "Records of this host not sent: the endpoint slot no longer held the entry's endpoint", [(no_labels(), sy.stale_slot)]);
        b.gauge("sync_lag_seconds", "Receive time minus send time of the last accepted record message", [(no_labels(), sy.lag_ms_last as f64 / 1e3)]);
        b.gauge("sync_config_digest_info", "Always 1; the digest label is this host's routing-config digest (equal on hosts whose configs route alike)", [(labels(&[("digest", &sy.digest)]), 1.0)]);
        b.gauge("sync_startup_done", "1 once the start-up dump from the peers is over (VIPs may be announced)", [(no_labels(), one(sy.startup_done))]);
        b.gauge("sync_config_digest_drift", "1 when the peer's routing-config digest differs from this host's", sy.peers.iter().map(|p| (labels(&[("peer", &p.address)]), one(p.drift))));
        b.gauge("sync_peer_last_heard_seconds", "Seconds since the peer's last accepted message", sy.peers.iter().filter_map(|p| p.last_heard_sec.map(|t| (labels(&[("peer", &p.address)]), t))));
    }

    // Next-hop resolution (crate::neighbor).
    let n = &status.neighbors;
    b.counter("neighbor_requests", "ARP requests and Neighbor Solicitations sent to resolve next hops", [(no_labels(), n.requests)]);
    b.counter("neighbor_replies", "ARP replies and Neighbor Advertisements learned (answers to our outstanding requests)", [(no_labels(), n.replies)]);
    b.counter("neighbor_ignored_replies", "ARP replies and Neighbor Advertisements ignored: no request of ours was outstanding for that address, not addressed to the port we ask on, or not solicited", [(no_labels(), n.ignored)]);
    b.counter("neighbor_timeouts", "Requests unanswered within neighbors.retry_ms", [(no_labels(), n.timeouts)]);
    b.counter("neighbor_deferred_requests", "Requests postponed to a later control tick by the per-tick request limit", [(no_labels(), n.deferred)]);
    b.counter("neighbor_expired", "Neighbour entries expired (neighbors.expiry_sec without a reply)", [(no_labels(), n.expired)]);
    b.counter("neighbor_mac_changes", "Replies that changed a known next-hop MAC", [(no_labels(), n.changed)]);
    b.counter("gratuitous_arp_sent", "Gratuitous ARPs queued for VIPs and port addresses", [(no_labels(), n.gratuitous)]);
    b.counter("mld_reports_sent", "MLDv2 reports queued for the solicited-node groups of the IPv6 VIPs and port addresses (RFC 3810)", [(no_labels(), n.mld_reports)]);
    b.gauge("neighbor_resolved", "1 when the next-hop address has a MAC", n.entries.iter().map(|(a, mac, _)| (labels(&[("address", a)]), one(!mac.is_empty()))));
    b.counter("worker_arp_replies_seen", "ARP replies and Neighbor Advertisements the worker handed to the neighbour resolver", workers.iter().enumerate().map(|(i, c)| (w(i), c.arp_replies_seen)));
    b.counter("worker_control_tx_packets", "Frames the worker sent for the control side (ARP requests, gratuitous ARP, Neighbor Solicitations and Advertisements)", workers.iter().enumerate().map(|(i, c)| (w(i), c.control_tx)));

    // VIP readiness and announcement (crate::announce).
    let vips = daemon.fleet.vips();
    let vl = |v: &spillway_shared::proto::VipRow| labels(&[("vip", &v.vip)]);
    b.gauge("vip_ready", "1 when the VIP is ready: workers polling, snapshot in use, a healthy backend, not drained", vips.iter().map(|v| (vl(v), one(v.ready))));
    b.gauge("vip_drained", "1 when the operator drained the VIP", vips.iter().map(|v| (vl(v), one(v.drained))));
    b.gauge("vip_announced", "1 when the VIP is announced (on the announcement interface)", vips.iter().map(|v| (vl(v), one(v.announced))));
    b.gauge("announce_enabled", "1 when [announce] runs (announcement interface up)", [(no_labels(), one(daemon.fleet.announcing()))]);

    // Ports (DPDK device counters).
    let pl = |p: &spillway_shared::proto::PortStatus| labels(&[("port", &p.name)]);
    b.counter("port_rx_packets", "Frames received by the device", status.ports.iter().map(|p| (pl(p), p.ipackets)));
    b.counter("port_tx_packets", "Frames sent by the device", status.ports.iter().map(|p| (pl(p), p.opackets)));
    b.counter("port_rx_missed", "Frames the device dropped for lack of RX descriptors", status.ports.iter().map(|p| (pl(p), p.imissed)));
    b.counter("port_rx_errors", "Erroneous frames received", status.ports.iter().map(|p| (pl(p), p.ierrors)));
    b.counter("port_tx_errors", "Frames the device failed to send", status.ports.iter().map(|p| (pl(p), p.oerrors)));
    b.counter("port_rx_nombuf", "RX mbuf allocation failures", status.ports.iter().map(|p| (pl(p), p.rx_nombuf)));
    b.gauge("port_mbufs_in_use", "mbufs of the port's pool in use", status.ports.iter().map(|p| (pl(p), p.mbufs_in_use as f64)));
    b.gauge("port_link_up", "1 when the port's link is up, 0 when down (absent when the driver cannot tell)", status.ports.iter().filter_map(|p| p.link_up.map(|u| (pl(p), one(u)))));
    b.gauge("port_link_speed_mbps", "Link speed, Mbit/s (0 when unknown)", status.ports.iter().map(|p| (pl(p), f64::from(p.link_speed_mbps))));
    b.counter("port_link_changes", "Link up/down changes seen by the once-a-second link check", status.ports.iter().map(|p| (pl(p), p.link_changes)));
    // RSS as the device reports it and the sync placement it leads to (docs/metrics.md)
    b.gauge("port_rx_queues", "RX queues configured (one per worker)", status.ports.iter().map(|p| (pl(p), f64::from(p.rss.rx_queues))));
    b.gauge("port_rss_reta_size", "Entries of the device's RSS redirection table (0 when it reports none)", status.ports.iter().map(|p| (pl(p), p.rss.reta.len() as f64)));
    b.gauge("port_rss_key_bytes", "Length of the device's RSS key in bytes (0 when it reports none)", status.ports.iter().map(|p| (pl(p), (p.rss.key.len() / 2) as f64)));
    b.gauge(
        "port_rss_info",
        "1, labelled with the RSS hash types the device uses, the key's source and the sync placement (rss, broadcast, single, off) for the port's flows",
        status.ports.iter().map(|p| {
            let hash = p.rss.hash_types.join(",");
            (labels(&[("port", &p.name), ("hash_types", &hash), ("key_source", &p.rss.key_source), ("sync_placement", &p.rss.sync_placement)]), 1.0)
        }),
    );
    // Extended statistics (rte_eth_xstats): per-queue packets as their own series, the
    // rest (missed, nombuf, errors) by their driver's name.
    let queue = |dir: &str, name: &str| name.strip_prefix(dir).and_then(|r| r.strip_suffix("_packets")).filter(|q| q.bytes().all(|c| c.is_ascii_digit())).map(str::to_string);
    let per_queue = |dir: &'static str| {
        status.ports.iter().flat_map(move |p| p.xstats.iter().filter_map(move |(n, v)| queue(dir, n).map(|q| (labels(&[("port", &p.name), ("queue", &q)]), *v))))
    };
    b.counter("port_queue_rx_packets", "Packets received on the RX queue (device xstat rx_qN_packets; queue N = worker N)", per_queue("rx_q"));
    b.counter("port_queue_tx_packets", "Packets sent on the TX queue (device xstat tx_qN_packets)", per_queue("tx_q"));
    b.counter(
        "port_xstat",
        "Device extended statistics of missed frames, mbuf allocation failures and errors, by the driver's name (rte_eth_xstats_get)",
        status.ports.iter().flat_map(|p| p.xstats.iter().filter(|(n, _)| queue("rx_q", n).is_none() && queue("tx_q", n).is_none()).map(|(n, v)| (labels(&[("port", &p.name), ("name", n)]), *v))),
    );

    let mut out = String::new();
    if let Err(e) = encode(&mut out, &b.reg) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    out
}

/// Content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of [`to_prometheus_text`]'s output.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Converts [`render`]'s OpenMetrics text to the Prometheus text format 0.0.4, for clients
/// that do not ask for OpenMetrics (`curl`, `promtool check metrics`): in 0.0.4 a counter's
/// `# HELP`/`# TYPE` name carries the `_total` of its samples, and there is no `# UNIT` or
/// `# EOF`. Everything else is the same in both formats.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "].iter().find_map(|p| line.strip_prefix(p).map(|rest| (*p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) { "_total" } else { "" };
                out.push_str(&format!("{p}{name}{total} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

mod http;
pub use http::{bind, serve, BodyCache, Served, ANSWER_DEADLINE, CACHE_FOR, MAX_CONNECTIONS, REQUEST_DEADLINE};

#[cfg(test)]
mod tests;
