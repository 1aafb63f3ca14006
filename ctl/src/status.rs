//! `spillwayctl status`: ports, workers, counters, drops by reason, new connections per
//! backend — as a table or `--json`.

use crate::client;
use spillway_shared::proto::{Request, Response, StatusReport};
use std::fmt::Write;
use std::path::Path;

/// One port's link, RSS and sync placement in words (the lines under the PORTS table):
/// `link up, speed unknown, 2 link changes; 2 RX queues, RSS ipv4 ipv4-tcp ..., key 40 bytes
/// (driver default), RETA 128 entries; sync placement: rss (why)`.
pub fn port_detail(p: &spillway_shared::proto::PortStatus) -> String {
    let link = match p.link_up {
        Some(true) => "up",
        Some(false) => "down",
        None => "unknown",
    };
    let speed = if p.link_speed_mbps == 0 { "unknown".to_string() } else { format!("{} Mbit/s", p.link_speed_mbps) };
    let r = &p.rss;
    let hash = if r.hash_types.is_empty() { "RSS off".to_string() } else { format!("RSS {}", r.hash_types.join(" ")) };
    let key = if r.key.is_empty() { "no key".to_string() } else { format!("key {} bytes ({})", r.key.len() / 2, r.key_source) };
    let reta = if r.reta.is_empty() { "no RETA".to_string() } else { format!("RETA {} entries", r.reta.len()) };
    format!(
        "link {link}, speed {speed}, {} link changes; {} RX queues, {hash}, {key}, {reta}; sync placement: {} ({})",
        p.link_changes, r.rx_queues, r.sync_placement, r.sync_placement_why
    )
}

/// Renders a status report as text.
pub fn render(r: &StatusReport) -> String {
    let mut o = String::new();
    let t = &r.total;
    let _ = writeln!(o, "spillway {}  up {:.1} s  snapshot generation {}", r.version, r.uptime_sec, r.generation);
    let h = &r.health_checker;
    match (&h.dead, h.started) {
        (Some(reason), _) => {
            let _ = writeln!(o, "HEALTH CHECKER DEAD: {reason} (backend health is frozen; the daemon exits so that it is restarted)");
        }
        (None, true) => {
            let _ = writeln!(o, "health checker: running, {} targets, {} probes skipped, RLIMIT_NOFILE {}", h.targets, h.probes_skipped, h.nofile_limit);
        }
        (None, false) => {
            let _ = writeln!(o, "health checker: not running (no health checks configured)");
        }
    }
    let c = &r.control_socket;
    let _ = writeln!(o, "control socket: {} requests, {} bad frames, {} refused peers", c.requests, c.bad_frames, c.refused);
    let _ = writeln!(o, "\nPORTS");
    let _ = writeln!(o, "  {:<10} {:<36} {:<17} {:>12} {:>12} {:>8} {:>8} {:>6}", "name", "device", "mac", "rx_pkts", "tx_pkts", "imissed", "errors", "mbufs");
    for p in &r.ports {
        let _ = writeln!(o, "  {:<10} {:<36} {:<17} {:>12} {:>12} {:>8} {:>8} {:>6}", p.name, trunc(&p.device, 36), p.mac, p.ipackets, p.opackets, p.imissed, p.ierrors + p.oerrors, p.mbufs_in_use);
    }
    for p in &r.ports {
        let _ = writeln!(o, "  {}: {}", p.name, port_detail(p));
    }
    let _ = writeln!(o, "\nWORKERS");
    let _ = writeln!(o, "  {:<6} {:>12} {:>12} {:>12} {:>10} {:>10} {:>6}", "worker", "rx", "tx", "forwarded", "new_conns", "dropped", "gen");
    for (i, w) in r.workers.iter().enumerate() {
        let _ = writeln!(o, "  {:<6} {:>12} {:>12} {:>12} {:>10} {:>10} {:>6}", i, w.rx, w.tx, w.forwarded, w.new_connections, w.dropped(), w.generation);
    }
    let _ = writeln!(o, "  {:<6} {:>12} {:>12} {:>12} {:>10} {:>10}", "total", t.rx, t.tx, t.forwarded, t.new_connections, t.dropped());
    let _ = writeln!(o, "\nCOUNTERS\n  arp_replies {}  nd_advertisements {}  nd_not_ours {}  icmp_forwarded {}  icmp_frag_needed_sent {}  fragments {}  fragments_held {}  redirected {}  rebalanced {}", t.arp_replies, t.nd_advertisements, t.nd_not_ours, t.icmp_forwarded, t.icmp_frag_needed_sent, t.fragments, t.fragments_held, t.redirected, t.rebalanced);
    // With the line above, every received frame's outcome (docs/ctl.md "status"): replies
    // to the resolver and control frames sent (ARP requests, NS) are in rx and tx.
    let _ = writeln!(o, "  next hops: arp_replies_seen {}  control_tx {}  control_tx_failed {}", t.arp_replies_seen, t.control_tx, t.control_tx_failed);
    let _ = writeln!(o, "  conntrack: hits {}  misses {}  evicted syn_only {} closing {}  syn_not_tracked {}  relocated {}  relocation_failed {}", t.ct_hits, t.ct_misses, t.ct_evicted_syn_only, t.ct_evicted_closing, t.ct_syn_not_tracked, t.ct_relocated, t.ct_relocation_failed);
    if t.quic_lb.iter().any(|q| q.1 > 0) {
        let q: Vec<String> = t.quic_lb.iter().map(|(n, c)| format!("{n} {c}")).collect();
        let _ = writeln!(o, "  quic_lb: {}", q.join("  "));
    }
    let _ = writeln!(o, "\nDROPS BY REASON");
    if t.dropped() == 0 {
        let _ = writeln!(o, "  (none)");
    }
    for (name, n) in t.drops.iter().filter(|d| d.1 > 0) {
        let _ = writeln!(o, "  {name:<24} {n:>12}");
    }
    // Both levels: a backend's row (healthy/enabled endpoints, drain), then for a group
    // one row per endpoint.
    let _ = writeln!(o, "\nBACKENDS");
    use crate::table::{Align::*, Table};
    let mut table = Table::new(&[
        ("service", 12, Left), ("backend", 16, Left), ("address", 16, Left), ("zone", 6, Left), ("state", 9, Left),
        ("endpoints", 9, Right), ("new_conns", 10, Right), ("packets", 12, Right),
    ]);
    for b in &r.backends {
        // A backend none of whose endpoints has a resolved next hop is UNRESOLVED.
        let unresolved = !b.members.is_empty() && b.members.iter().all(|m| m.unresolved.is_some());
        let state = match (b.enabled, b.healthy, b.drained) {
            (false, _, _) => "disabled",
            (true, _, true) => "DRAINED",
            (true, true, false) => "healthy",
            (true, false, false) if unresolved => "UNRESOLVED",
            (true, false, false) => "UNHEALTHY",
        };
        let eps = format!("{}/{}", b.healthy_endpoints, b.endpoints);
        table.row(vec![b.service.clone(), b.backend.clone(), b.address.clone(), b.zone.clone(), state.into(), eps, b.new_connections.to_string(), b.packets.to_string()]);
        if b.members.len() > 1 || b.members.first().is_some_and(|m| m.name != b.backend) {
            for m in &b.members {
                let state = match (m.enabled, m.healthy) {
                    (false, _) => "disabled",
                    // drained with its backend (capacity 0, auto capacity drain); an
                    // unhealthy one still says so
                    (true, true) if b.drained => "DRAINED",
                    (true, true) => "healthy",
                    (true, false) if m.unresolved.is_some() => "UNRESOLVED",
                    (true, false) => "UNHEALTHY",
                };
                let name = format!("  └ {}", m.name);
                table.row(vec![String::new(), name, m.address.clone(), String::new(), state.into(), format!("w {}", m.weight), m.new_connections.to_string(), m.packets.to_string()]);
            }
        }
    }
    o += &table.render("  ");
    // QUIC-LB: which endpoint each server ID routes to (docs/operations.md "QUIC-LB").
    if r.backends.iter().flat_map(|b| &b.members).any(|m| m.server_id.is_some()) {
        let _ = writeln!(o, "\nQUIC-LB SERVER IDS");
        for b in &r.backends {
            for m in b.members.iter().filter(|m| m.server_id.is_some()) {
                let who = if m.name == b.backend { format!("{}/{}", b.service, b.backend) } else { format!("{}/{}/{}", b.service, b.backend, m.name) };
                let state = if m.healthy { "healthy" } else { "UNHEALTHY: its connections fall back to the 5-tuple path" };
                let _ = writeln!(o, "  {:<8} {who} ({}) {state}", m.server_id.as_deref().unwrap_or(""), m.address);
            }
        }
    }
    render_sync(&mut o, &r.sync);
    // Next hops resolved with ARP and Neighbor Discovery: counters, and why each unresolved
    // endpoint is not eligible.
    let n = &r.neighbors;
    if !n.entries.is_empty() {
        let _ = writeln!(o, "\nNEXT HOPS (ARP, NEIGHBOR DISCOVERY)");
        let _ = writeln!(o, "  requests {}  replies {}  ignored {}  timeouts {}  expired {}  changed {}  gratuitous {}  deferred {}  mld_reports {}", n.requests, n.replies, n.ignored, n.timeouts, n.expired, n.changed, n.gratuitous, n.deferred, n.mld_reports);
        // an IPv6 next hop widens the address column for every line
        let w = n.entries.iter().map(|e| e.0.chars().count()).max().unwrap_or(0).max(16);
        for (addr, mac, age) in &n.entries {
            if mac.is_empty() {
                let _ = writeln!(o, "  {addr:<w$} unresolved");
            } else {
                let _ = writeln!(o, "  {addr:<w$} {mac}  confirmed {age} s ago");
            }
        }
        for b in &r.backends {
            for m in &b.members {
                if let Some(why) = &m.unresolved {
                    let who = if m.name == b.backend { format!("{}/{}", b.service, b.backend) } else { format!("{}/{}/{}", b.service, b.backend, m.name) };
                    let _ = writeln!(o, "  {who} ({}): unresolved: {why}", m.address);
                }
            }
        }
    }
    o
}

/// The FLOW SYNC section (docs/bgp.md "Flow-state sync"); nothing without `[sync]`.
fn render_sync(o: &mut String, s: &spillway_shared::sync::SyncStatus) {
    if !s.enabled {
        return;
    }
    let _ = writeln!(o, "\nFLOW SYNC ({}, sender {}, config digest {})", s.listen, s.sender, s.digest);
    let _ = writeln!(o, "  start-up: {}", s.startup);
    let _ = writeln!(o, "  sent {} messages, {} records, {} bytes, {} errors; received {} messages, {} records; lag {} ms (max {})", s.sent_messages, s.sent_records, s.sent_bytes, s.send_errors, s.received_messages, s.received_records, s.lag_ms_last, s.lag_ms_max);
    let _ = writeln!(o, "  installed {}  updated {}  adopted {}  removed {}  conflicts {}  no_room {}  unknown_service {}  unknown_endpoint {}", s.installed, s.updated, s.adopted, s.removed, s.conflicts, s.no_room, s.unknown_service, s.unknown_endpoint);
    let _ = writeln!(o, "  older {}  bad_records {}  lost_messages {};  queue full: outbound {}  inbound {};  stale_slot {};  dumps sent {}", s.older, s.bad_records, s.lost_messages, s.outbound_queue_full, s.inbound_queue_full, s.stale_slot, s.dumps_sent);
    let rejected: Vec<String> = s.rejected.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let _ = writeln!(o, "  rejected: {}", if rejected.is_empty() { "none".to_string() } else { rejected.join("  ") });
    for p in &s.peers {
        let heard = p.last_heard_sec.map_or("never heard".to_string(), |t| format!("heard {t:.1} s ago"));
        let drift = if p.drift { "  CONFIG DRIFT (digest differs: Maglev picks may differ)" } else { "" };
        let _ = writeln!(o, "  peer {:<22} {heard}  digest {}  dump {}  lost {}{drift}", p.address, p.digest.as_deref().unwrap_or("-"), if p.dump_received { "received" } else { "-" }, p.lost_messages);
    }
}

fn trunc(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// Runs `status`; exit code 0, 1 when the daemon refused, 2 when it cannot be reached.
pub fn run(socket: &Path, json: bool) -> i32 {
    match client::request(socket, &Request::Status) {
        Ok(Response::Status(r)) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                print!("{}", render(&r));
            }
            0
        }
        Ok(other) => client::unexpected(&other),
        Err(e) => client::fail(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_shared::proto::{HealthCheckerStatus, HealthRow};

    #[test]
    fn health_checker_state_is_shown() {
        let mut r = StatusReport::default();
        assert!(render(&r).contains("health checker: not running (no health checks configured)"));
        r.health_checker = HealthCheckerStatus { started: true, dead: None, targets: 3, probes_skipped: 2, nofile_limit: 1024 };
        assert!(render(&r).contains("health checker: running, 3 targets, 2 probes skipped, RLIMIT_NOFILE 1024"));
        r.health_checker.dead = Some("panicked: boom".into());
        assert!(render(&r).contains("HEALTH CHECKER DEAD: panicked: boom"), "{}", render(&r));
    }

    /// Each port's link (an unknown speed as "unknown", not 4294967295), link changes, RSS
    /// and sync placement with its reason are shown, in text and JSON.
    #[test]
    fn port_link_rss_and_placement_are_shown() {
        use spillway_shared::proto::{PortRss, PortStatus};
        let rss = PortRss {
            rx_queues: 2,
            hash_types: vec!["ipv4".into(), "ipv4-tcp".into()],
            key_source: "driver default".into(),
            key: "6d5a".repeat(20),
            reta: (0..128).map(|i| i % 2).collect(),
            sync_placement: "rss".into(),
            sync_placement_why: "software Toeplitz".into(),
        };
        let p = PortStatus { name: "p0".into(), link_up: Some(false), link_speed_mbps: 0, link_changes: 2, rss, ..Default::default() };
        let r = StatusReport { ports: vec![p], ..Default::default() };
        let t = render(&r);
        assert!(
            t.contains("  p0: link down, speed unknown, 2 link changes; 2 RX queues, RSS ipv4 ipv4-tcp, key 40 bytes (driver default), RETA 128 entries; sync placement: rss (software Toeplitz)"),
            "{t}"
        );
        let json = serde_json::to_value(&r).unwrap();
        let rj = &json["ports"][0]["rss"];
        assert_eq!((rj["rx_queues"].as_u64(), rj["reta"].as_array().map(Vec::len), rj["sync_placement"].as_str()), (Some(2), Some(128), Some("rss")), "{json}");
        assert_eq!(json["ports"][0]["link_changes"].as_u64(), Some(2));
        let none = PortStatus { name: "v".into(), link_speed_mbps: 10_000, ..Default::default() };
        assert!(port_detail(&none).starts_with("link unknown, speed 10000 Mbit/s, 0 link changes; 0 RX queues, RSS off, no key, no RETA"), "{}", port_detail(&none));
    }

    /// The counters that reconcile `rx` and `tx` are all shown: the ARP replies and NAs
    /// handed to the next-hop resolver and the control frames sent (fresh-user QA: with
    /// backends without a MAC, rx did not add up from `status`).
    #[test]
    fn every_outcome_of_a_received_frame_is_shown() {
        use spillway_shared::proto::Counters;
        let c = Counters {
            rx: 99, tx: 66, forwarded: 50, arp_replies: 7, nd_advertisements: 3, icmp_frag_needed_sent: 1, arp_replies_seen: 9, control_tx: 6,
            control_tx_failed: 2, drops: vec![("next_hop_unresolved".into(), 29), ("tx_full".into(), 1)], ..Default::default()
        };
        let r = StatusReport { workers: vec![c.clone()], total: c, ..Default::default() };
        let t = render(&r);
        assert!(t.contains("  next hops: arp_replies_seen 9  control_tx 6  control_tx_failed 2\n"), "{t}");
        // rx = forwarded + replies + handed over + (dropped - tx_full); tx = forwarded +
        // replies + control_tx - tx_full: every term is on the screen
        let number = |name: &str| -> u64 {
            let at = t.find(&format!(" {name} ")).unwrap_or_else(|| panic!("no {name} in {t}")) + name.len() + 2;
            t[at..].split_whitespace().next().unwrap().parse().unwrap()
        };
        let total: Vec<u64> = t.lines().find(|l| l.trim_start().starts_with("total")).unwrap().split_whitespace().skip(1).map(|n| n.parse().unwrap()).collect();
        let (rx, tx, forwarded) = (total[0], total[1], total[2]);
        let replies = number("arp_replies") + number("nd_advertisements") + number("icmp_frag_needed_sent");
        let dropped = number("next_hop_unresolved") + number("tx_full");
        assert_eq!(dropped, total[4]);
        assert_eq!(forwarded + replies + number("arp_replies_seen") + dropped - number("tx_full"), rx);
        assert_eq!(forwarded + replies + number("control_tx") - number("tx_full"), tx);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!((json["total"]["arp_replies_seen"].as_u64(), json["workers"][0]["control_tx"].as_u64()), (Some(9), Some(6)), "{json}");
    }

    #[test]
    fn backends_show_both_levels() {
        use spillway_shared::proto::{BackendStatus, EndpointStatus};
        let ep = |n: &str, healthy| EndpointStatus { name: n.into(), address: format!("10.0.1.{}", n.len()), weight: 50, healthy, enabled: true, new_connections: 7, packets: 9, ..Default::default() };
        let mut r = StatusReport::default();
        r.backends.push(BackendStatus {
            service: "web".into(), backend: "g1".into(), zone: "z1".into(), healthy: true, enabled: true, new_connections: 14, packets: 18,
            endpoints: 2, healthy_endpoints: 1, drained: true, members: vec![ep("e1", true), ep("e22", false)], ..Default::default()
        });
        r.backends.push(BackendStatus {
            service: "web".into(), backend: "b2".into(), address: "10.0.2.1".into(), healthy: true, enabled: true,
            endpoints: 1, healthy_endpoints: 1, members: vec![ep("b2", true)], ..Default::default()
        });
        let t = render(&r);
        let line = |s: &str| t.lines().find(|l| l.contains(s)).unwrap_or_else(|| panic!("no {s} in {t}")).to_string();
        assert!(line(" g1 ").contains("DRAINED") && line(" g1 ").contains("1/2"), "{t}");
        // g1 is drained: its healthy endpoint with it (fresh-user QA: drained endpoints
        // showed healthy), its unhealthy one stays UNHEALTHY
        assert!(line("└ e22").contains("UNHEALTHY") && line("└ e1 ").contains("DRAINED"), "{t}");
        assert!(line(" b2 ").contains("1/1") && !t.contains("└ b2"), "a single endpoint has no endpoint row: {t}");
    }

    /// IPv6 endpoint and next-hop addresses widen their columns: every row's state and
    /// counters start where the header's do.
    #[test]
    fn ipv6_addresses_keep_the_tables_in_line() {
        use spillway_shared::proto::{BackendStatus, EndpointStatus, NeighborStatus};
        let long = "fd00:1:2:3:4:5:6:7";
        let ep = |n: &str, a: &str| EndpointStatus { name: n.into(), address: a.into(), weight: 50, healthy: true, enabled: true, ..Default::default() };
        let mut r = StatusReport::default();
        r.backends.push(BackendStatus {
            service: "web6".into(), backend: "g1".into(), zone: "z1".into(), healthy: true, enabled: true, endpoints: 2, healthy_endpoints: 2,
            members: vec![ep("e1", long), ep("e2", "fd00::2")], ..Default::default()
        });
        r.backends.push(BackendStatus { service: "web".into(), backend: "b1".into(), address: "10.0.1.1".into(), healthy: true, enabled: true, endpoints: 1, healthy_endpoints: 1, members: vec![ep("b1", "10.0.1.1")], ..Default::default() });
        r.neighbors = NeighborStatus { entries: vec![(long.into(), "02:00:00:00:00:12".into(), 4), ("10.0.0.11".into(), String::new(), -1)], ..Default::default() };
        let t = render(&r);
        let lines: Vec<&str> = t.lines().collect();
        let header = lines.iter().position(|l| l.trim_start().starts_with("service ")).unwrap();
        let col = |l: &str, s: &str| l.find(s).map(|b| l[..b].chars().count());
        for l in &lines[header + 1..header + 5] {
            assert_eq!(col(l, "healthy"), col(lines[header], "state"), "{t}");
            assert_eq!(l.chars().count(), lines[header].chars().count(), "{t}");
        }
        let hops: Vec<&&str> = lines.iter().filter(|l| l.contains("confirmed") || l.ends_with("unresolved")).collect();
        assert_eq!(hops[0].find("02:00"), hops[1].find("unresolved"), "{t}");
    }

    #[test]
    fn unresolved_next_hops_say_why() {
        use spillway_shared::proto::{BackendStatus, EndpointStatus, NeighborStatus};
        let mut r = StatusReport::default();
        let why = "no ARP reply from 10.0.0.11 (3 requests unanswered)";
        r.backends.push(BackendStatus {
            service: "web".into(), backend: "b1".into(), address: "10.0.0.11".into(), enabled: true, endpoints: 1,
            members: vec![EndpointStatus { name: "b1".into(), address: "10.0.0.11".into(), enabled: true, unresolved: Some(why.into()), ..Default::default() }],
            ..Default::default()
        });
        r.neighbors = NeighborStatus { requests: 4, timeouts: 3, entries: vec![("10.0.0.11".into(), String::new(), -1), ("10.0.0.12".into(), "02:00:00:00:00:12".into(), 4)], ..Default::default() };
        let t = render(&r);
        assert!(t.lines().any(|l| l.contains(" b1 ") && l.contains("UNRESOLVED")), "{t}");
        assert!(t.contains(&format!("  web/b1 (10.0.0.11): unresolved: {why}\n")), "{t}");
        assert!(t.contains("requests 4  replies 0  ignored 0  timeouts 3"), "{t}");
        assert!(t.contains("10.0.0.12        02:00:00:00:00:12  confirmed 4 s ago"), "{t}");
        // Without next hops to resolve there is no section.
        assert!(!render(&StatusReport::default()).contains("NEXT HOPS"));
    }

    #[test]
    fn health_show_prints_skipped_probes_and_their_total() {
        let row = |b: &str, skipped| HealthRow {
            service: "web".into(), backend: b.into(), endpoint: b.into(), address: "10.0.0.1".into(), healthy: true, checked: true,
            latency_ms: Some(1.0), load_cps: 0.0, consecutive_successes: 2, consecutive_failures: 0, probes: 9,
            probes_failed: 0, last_error: None, since_change_sec: None, probes_skipped: skipped,
        };
        let t = crate::live::render_health(&[row("b1", 0)]);
        assert!(t.lines().next().unwrap().contains(" skipped "), "{t}");
        assert!(!t.contains("SKIPPED PROBES"), "{t}");
        let t = crate::live::render_health(&[row("b1", 3), row("b2", 4)]);
        assert!(t.contains("SKIPPED PROBES: 7 in total"), "{t}");
        assert!(t.lines().nth(2).unwrap().split_whitespace().nth(10) == Some("4"), "{t}");
    }
}
