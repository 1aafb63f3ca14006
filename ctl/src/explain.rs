//! `spillwayctl explain`: the routing pipeline's trace for one new connection — offline from
//! `--config FILE` (and `--health FILE`), or against the running daemon's live state.

use serde::{Deserialize, Serialize};
use spillway_shared::config::{Config, Protocol, Service};
use spillway_shared::flow::FlowKey;
use spillway_shared::maglev::{MaglevEntry, MaglevTable};
use spillway_shared::pipeline::{evaluate, BackendState, ClientClass, Decision, ServiceState, Topology};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// Arguments of `spillwayctl explain`.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// Daemon config file (TOML): explain offline. Without it, the running daemon explains
    /// against its live health, load and snapshot.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Client (source) address of the new connection (IPv4 or IPv6).
    #[arg(long, value_name = "IP")]
    pub client: IpAddr,
    /// Service as IP:PORT/PROTO (PROTO tcp or udp, required); optional when the config has
    /// one service. A malformed value is a usage error (exit 2) before any daemon is asked.
    #[arg(long, value_name = "IP:PORT/PROTO", value_parser = parse_vip)]
    pub vip: Option<VipArg>,
    /// JSON object: backend name -> {"healthy": bool | "endpoints": n, "healthy_endpoints": n |
    /// "unhealthy_endpoints": [names], "latency_ms": ms, "load_cps": cps}. Backends not
    /// listed are healthy; a group counts its enabled endpoints. Offline only (needs
    /// --config): the daemon uses its live health.
    #[arg(long, value_name = "FILE", requires = "config")]
    pub health: Option<PathBuf>,
    /// Client source port (for 5-tuple affinity).
    #[arg(long, default_value_t = 40000)]
    pub client_port: u16,
    /// Offered new-connection rate for the capacity stage, connections/s, finite and >= 0
    /// (default: sum of load_cps). Offline only (needs --config).
    #[arg(long, value_name = "CPS", requires = "config", value_parser = parse_cps, allow_negative_numbers = true)]
    pub offered_cps: Option<f64>,
    /// A QUIC short-header packet's DCID (hex, first octet included): also show its
    /// QUIC-LB decode (codepoint, configuration, server ID) and where such packets go. A
    /// value that is not hex octets is a usage error (exit 2) before any daemon is asked.
    #[arg(long, value_name = "HEX", value_parser = parse_dcid)]
    pub quic_dcid: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One backend's entry in the `--health` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthEntry {
    healthy: Option<bool>,
    endpoints: Option<u32>,
    healthy_endpoints: Option<u32>,
    /// Endpoints of a group that fail their health checks, by name.
    unhealthy_endpoints: Option<Vec<String>>,
    latency_ms: Option<f64>,
    load_cps: Option<f64>,
}

#[derive(Serialize)]
struct JsonOut<'a> {
    service: &'a str,
    client: String,
    class: &'a ClientClass,
    decision: &'a Decision,
    backend: Option<&'a str>,
    endpoint: Option<String>,
    endpoint_shares: Vec<(String, String, f64)>,
    /// The dataplane drops this new connection before choosing a backend (`martian_source`).
    drop_reason: Option<&'static str>,
    /// The QUIC-LB decode of `--quic-dcid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    quic: Option<spillway_shared::proto::QuicExplain>,
}

/// `--vip IP:PORT/PROTO`, parsed by clap so a malformed value is a usage error (exit 2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VipArg {
    /// The VIP.
    pub ip: IpAddr,
    /// Its port.
    pub port: u16,
    /// Its protocol (required: a VIP and port may carry a TCP and a UDP service).
    pub proto: Protocol,
}

impl std::fmt::Display for VipArg {
    /// The canonical form sent to the daemon: `10.0.0.100:80/tcp`, `[fd00::100]:80/tcp`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", SocketAddr::new(self.ip, self.port), self.proto.name())
    }
}

/// Parses `--vip`: errors name the part that is wrong and the expected form.
fn parse_vip(s: &str) -> Result<VipArg, String> {
    let (addr, proto) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("{s:?}: expected IP:PORT/PROTO, e.g. 10.0.0.100:80/tcp or [fd00::100]:80/tcp"))?;
    let ip: IpAddr = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(h) => h.parse::<std::net::Ipv6Addr>().map(IpAddr::V6).map_err(|_| format!("{s:?}: {h:?} is not an IPv6 address (expected [IPV6]:PORT/PROTO, e.g. [fd00::100]:80/tcp)"))?,
        None => host.parse::<std::net::Ipv4Addr>().map(IpAddr::V4).map_err(|_| {
            format!("{s:?}: {host:?} is not an IPv4 address (expected IP:PORT/PROTO, e.g. 10.0.0.100:80/tcp; an IPv6 VIP in brackets, [fd00::100]:80/tcp)")
        })?,
    };
    let port: u16 = match port.parse() {
        Ok(p) if p > 0 => p,
        _ => return Err(format!("{s:?}: port {port:?} must be an integer in 1..=65535")),
    };
    // No default protocol: 10.0.0.100:80 may be a TCP and a UDP service (docs/ctl.md).
    let proto = match proto.map(str::to_ascii_lowercase).as_deref() {
        None => return Err(format!("{s:?}: the protocol is missing (expected IP:PORT/PROTO with PROTO tcp or udp, e.g. {s}/tcp)")),
        Some("tcp") => Protocol::Tcp,
        Some("udp") => Protocol::Udp,
        Some(p) => return Err(format!("{s:?}: protocol {p:?} must be tcp or udp")),
    };
    Ok(VipArg { ip, port, proto })
}

/// Parses `--offered-cps`: a finite rate >= 0 (connections/s); `-0` is 0 (not shown as
/// `offered_cps=-0` in the trace).
fn parse_cps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(if v == 0.0 { 0.0 } else { v }),
        _ => Err(format!("{s:?}: must be a finite number of connections/s >= 0, e.g. 5000")),
    }
}

/// Checks `--quic-dcid`: hex octets (an optional `0x`, two digits per octet), as
/// [`spillway_shared::quic_lb::parse_hex`] reads them; the text is kept as given. Live, a
/// malformed DCID was sent to the daemon and answered as a decode falling back for
/// `too_short`, exit 0, where offline refused it (fresh-user QA).
fn parse_dcid(s: &str) -> Result<String, String> {
    spillway_shared::quic_lb::parse_hex(s).map(|_| s.to_string()).map_err(|e| format!("{s:?}: {e} (expected the DCID as hex octets, e.g. 0011223344556677)"))
}

fn pick_service<'a>(cfg: &'a Config, vip: Option<&VipArg>) -> Result<&'a Service, String> {
    let list = || cfg.services.iter().map(|s| s.endpoint_label()).collect::<Vec<_>>().join(", ");
    if cfg.services.is_empty() {
        return Err("the config has no services: nothing to explain (add a [[services]] table; docs/config.md)".into());
    }
    match vip {
        None if cfg.services.len() == 1 => Ok(&cfg.services[0]),
        None => Err(format!("the config has {} services; choose one with --vip ({})", cfg.services.len(), list())),
        Some(v) => {
            let VipArg { ip, port, proto } = *v;
            cfg.services
                .iter()
                .find(|s| s.vip == ip && s.port == port && proto == s.protocol)
                .ok_or_else(|| format!("no service {v} in the config (have: {})", list()))
        }
    }
}

/// Backend states and per-endpoint health (`[backend][endpoint]`) from the `--health` file.
type Health = (Vec<BackendState>, Vec<Vec<bool>>);

fn load_states(svc: &Service, path: Option<&PathBuf>) -> Result<Health, String> {
    let mut up: Vec<Vec<bool>> = svc.backends.iter().map(|b| vec![true; b.members().len()]).collect();
    let count = |i: usize, up: &[Vec<bool>]| {
        let (n, h) = spillway_shared::pipeline::endpoints::group_counts(&svc.backends[i].members(), |k| up[i][k]);
        BackendState { endpoints: n, healthy_endpoints: h, latency_ms: None, load_cps: 0.0 }
    };
    let mut states: Vec<BackendState> = (0..svc.backends.len()).map(|i| count(i, &up)).collect();
    let Some(path) = path else { return Ok((states, up)) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    let map: BTreeMap<String, HealthEntry> = serde::Deserialize::deserialize(de)
        .map_err(|e: serde_json::Error| format!("{}: {e}", path.display()))?;
    for (name, h) in map {
        let i = svc
            .backends
            .iter()
            .position(|b| b.name == name)
            .ok_or_else(|| format!("{}: {name}: no backend of this name in service {}", path.display(), svc.name))?;
        if let Some(down) = &h.unhealthy_endpoints {
            let members = svc.backends[i].members();
            for e in down {
                let k = members.iter().position(|m| &m.name == e)
                    .ok_or_else(|| format!("{}: {name}.unhealthy_endpoints: no endpoint {e:?} in backend {name}", path.display()))?;
                up[i][k] = false;
            }
            states[i] = count(i, &up);
        }
        let s = &mut states[i];
        if let Some(n) = h.endpoints {
            s.endpoints = n;
            s.healthy_endpoints = n;
        }
        if let Some(ok) = h.healthy {
            s.healthy_endpoints = if ok { s.endpoints } else { 0 };
            up[i].iter_mut().for_each(|u| *u = ok);
        }
        if let Some(n) = h.healthy_endpoints {
            if n > s.endpoints {
                return Err(format!("{}: {name}.healthy_endpoints = {n} exceeds endpoints = {}", path.display(), s.endpoints));
            }
            s.healthy_endpoints = n;
        }
        s.latency_ms = h.latency_ms.or(s.latency_ms);
        s.load_cps = h.load_cps.unwrap_or(s.load_cps);
    }
    Ok((states, up))
}

/// `endpoint shares: g1/e1=0.25 ...` when some backend is a group (single-endpoint
/// services print as before).
fn endpoint_line(shares: &[(String, String, f64)]) -> String {
    if shares.iter().all(|(b, e, _)| b == e) {
        return String::new();
    }
    let v: Vec<String> = shares.iter().map(|(b, e, s)| format!("{b}/{e}={}", num(*s))).collect();
    format!("endpoint shares: {}\n", v.join(" "))
}

fn num(x: f64) -> String {
    if x.is_infinite() {
        "inf".into()
    } else if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.4}");
        s.trim_end_matches('0').to_string()
    }
}

/// Runs the command; returns the exit code (0 ok, 1 the daemon refused, 2 usage/file/config
/// error or no daemon).
pub fn run(args: &ExplainArgs, socket: &std::path::Path) -> i32 {
    if args.config.is_none() {
        return live(args, socket);
    }
    match explain(args) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => crate::client::error_out("spillwayctl explain", "input", 2, &e),
    }
}

fn live(args: &ExplainArgs, socket: &std::path::Path) -> i32 {
    use spillway_shared::proto::{Request, Response};
    // --health and --offered-cps require --config (clap refuses them here with exit 2).
    let req = Request::Explain { client: args.client, client_port: args.client_port, vip: args.vip.map(|v| v.to_string()), quic_dcid: args.quic_dcid.clone() };
    let r = match crate::client::request(socket, &req) {
        Ok(Response::Explain(r)) => r,
        Ok(other) => return crate::client::error_out("spillwayctl explain", "protocol", 2, &format!("unexpected response {other:?}")),
        Err(e) => return crate::client::fail_from("spillwayctl explain", e),
    };
    let d: Decision = match serde_json::from_str(&r.decision_json) {
        Ok(d) => d,
        Err(e) => return crate::client::error_out("spillwayctl explain", "protocol", 2, &format!("bad decision from the daemon: {e}")),
    };
    if args.json {
        let j = serde_json::json!({
            "service": r.service, "vip": r.vip, "client": r.client, "class": d.client, "decision": d,
            "backend": r.backend, "endpoint": r.endpoint, "endpoint_shares": r.endpoint_shares,
            "hash": r.hash, "table_size": r.table_size, "snapshot_generation": r.snapshot_generation, "live": true,
            "drop_reason": r.drop_reason, "quic": r.quic,
        });
        println!("{}", serde_json::to_string_pretty(&j).unwrap_or_default());
        return 0;
    }
    let mut o = format!("service {} ({}), client {} -> {} [live, snapshot generation {}]\n", r.service, r.vip, r.client, r.class, r.snapshot_generation);
    o += &r.quic.as_ref().map(crate::explain_quic::render).unwrap_or_default();
    if r.drop_reason.is_some() {
        // the worker drops it before the pipeline: no stages, no pick
        o += &spillway_shared::martian::explanation(args.client);
        o.push('\n');
        print!("{o}");
        return 0;
    }
    o += &render_stages(&d, |i| r.backends.get(i).cloned().unwrap_or_else(|| format!("#{i}")));
    o += &endpoint_line(&r.endpoint_shares);
    let ep = match (&r.backend, &r.endpoint) {
        (Some(b), Some(e)) if b != e => format!(" endpoint {e}"),
        _ => String::new(),
    };
    match &r.backend {
        Some(b) => o += &format!("maglev: M={} hash {:#018x} -> backend {b}{ep}\n", r.table_size, r.hash),
        None => o += "maglev: no eligible backend -> new connection dropped\n",
    }
    print!("{o}");
    0
}

/// The stage table, final set and shares of a decision (`name` maps a backend index to its
/// name).
fn render_stages(d: &Decision, name: impl Fn(usize) -> String) -> String {
    let mut o = String::new();
    use std::fmt::Write;
    let _ = writeln!(o, "{:<3} {:<19} {:>9}  rule", "#", "stage", "in -> out");
    for (k, e) in d.trace.iter().enumerate() {
        let _ = writeln!(o, "{:<3} {:<19} {:>9}  {}", k + 1, e.stage, format!("{} -> {}", e.input.len(), e.output.len()), e.rule);
        let _ = writeln!(o, "    out: [{}]", e.output.join(", "));
        if !e.numbers.is_empty() {
            let nums: Vec<String> = e.numbers.iter().map(|(k, v)| format!("{k}={}", num(*v))).collect();
            let _ = writeln!(o, "    numbers: {}", nums.join(" "));
        }
        for n in &e.notes {
            let _ = writeln!(o, "    - {n}");
        }
    }
    let names: Vec<String> = d.eligible.iter().map(|&i| name(i)).collect();
    let _ = writeln!(o, "final: {} eligible{}: [{}]", names.len(), if d.drop { " (DROP)" } else { "" }, names.join(", "));
    let shares: Vec<String> = d.weights.iter().map(|&(i, s)| format!("{}={}", name(i), num(s))).collect();
    let _ = writeln!(o, "shares: {}", shares.join(" "));
    o
}

fn explain(args: &ExplainArgs) -> Result<String, String> {
    let path = args.config.as_ref().map(|p| p.to_string_lossy().to_string()).unwrap_or_default();
    let cfg = Config::load(&path).map_err(|e| e.to_string())?;
    let svc = pick_service(&cfg, args.vip.as_ref())?;
    let (states, up) = load_states(svc, args.health.as_ref())?;
    let topo = Topology::from_config(&cfg);
    let class = topo.classify(args.client);
    let mut st = ServiceState::default();
    let d = evaluate(svc, &states, &topo, &class, args.offered_cps, &mut st, 0.0);
    // Maglev over endpoints, named as the daemon names them (docs/semantics.md "Backend groups").
    let eps = spillway_shared::pipeline::endpoints::endpoint_shares(svc, &d.weights, |b, e| up[b].get(e).copied().unwrap_or(false));
    let ep_name = |b: usize, e: usize| svc.backends[b].members()[e].name.clone();
    let hash_names: Vec<String> = eps
        .iter()
        .map(|x| svc.backends[x.backend].maglev_name(&ep_name(x.backend, x.endpoint)))
        .collect();
    let entries: Vec<MaglevEntry<'_>> = eps.iter().zip(&hash_names).map(|(x, n)| MaglevEntry { name: n, weight: x.share }).collect();
    let table = MaglevTable::build(&entries, svc.maglev_table_size);
    let proto_n = svc.protocol.number();
    let hash = match (args.client, svc.vip) {
        (IpAddr::V4(c), IpAddr::V4(v)) => FlowKey::new(c, v, args.client_port, svc.port, proto_n).affinity_hash(svc.session_affinity),
        (IpAddr::V6(c), IpAddr::V6(v)) => {
            spillway_shared::flow::FlowKey6::new6(c, v, args.client_port, svc.port, proto_n).affinity_hash(svc.session_affinity)
        }
        _ => return Err(format!("--client {}: not of the family of service {}'s VIP {} (one family per service)", args.client, svc.name, svc.vip)),
    };
    // The dataplane's own rule first: a spoofed source never reaches the pipeline.
    let martian = spillway_shared::martian::is_martian_source_in(&cfg, args.client);
    let drop_reason = martian.then_some(spillway_shared::martian::MARTIAN_SOURCE);
    let pick = if d.drop || martian { None } else { table.lookup(hash).and_then(|e| eps.get(usize::from(e))) };
    let chosen = pick.map(|x| svc.backends[x.backend].name.as_str());
    let endpoint = pick.map(|x| ep_name(x.backend, x.endpoint));
    let endpoint_shares: Vec<(String, String, f64)> = eps.iter().map(|x| (svc.backends[x.backend].name.clone(), ep_name(x.backend, x.endpoint), x.share)).collect();
    let proto = svc.protocol.name();
    let quic = args.quic_dcid.as_deref().map(|d| crate::explain_quic::offline(svc, &up, d)).transpose()?;
    if args.json {
        let j = JsonOut {
            service: &svc.name,
            client: SocketAddr::new(args.client, args.client_port).to_string(),
            class: &class,
            decision: &d,
            backend: chosen,
            endpoint: endpoint.clone(),
            endpoint_shares,
            drop_reason,
            quic,
        };
        return serde_json::to_string_pretty(&j).map(|s| s + "\n").map_err(|e| e.to_string());
    }
    let mut o = String::new();
    use std::fmt::Write;
    let _ = writeln!(o, "service {} ({}/{proto}), client {} -> {class}", svc.name, SocketAddr::new(svc.vip, svc.port), SocketAddr::new(args.client, args.client_port));
    o += &quic.as_ref().map(crate::explain_quic::render).unwrap_or_default();
    if martian {
        let _ = writeln!(o, "{}", spillway_shared::martian::explanation(args.client));
        return Ok(o);
    }
    o += &render_stages(&d, |i| svc.backends[i].name.clone());
    o += &endpoint_line(&endpoint_shares);
    match chosen {
        Some(b) => {
            let ep = endpoint.filter(|e| e != b).map(|e| format!(" endpoint {e}")).unwrap_or_default();
            let _ = writeln!(o, "maglev: M={} key {:?} hash {hash:#018x} -> backend {b}{ep}", table.len(), svc.session_affinity);
        }
        None => {
            let _ = writeln!(o, "maglev: no eligible backend -> new connection dropped");
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    /// `--vip` needs its `/PROTO`, as its usage line and docs/ctl.md say (fresh-user QA:
    /// `10.0.0.100:80` was taken as TCP).
    #[test]
    fn vip_needs_its_protocol() {
        let e = super::parse_vip("10.0.0.100:80").unwrap_err();
        assert!(e.contains("the protocol is missing") && e.contains("10.0.0.100:80/tcp"), "{e}");
        let v = super::parse_vip("[fd00::100]:53/UDP").unwrap();
        assert_eq!(v.to_string(), "[fd00::100]:53/udp");
    }

    /// `--offered-cps -0` is the rate 0, never a negative zero shown as `offered_cps=-0`.
    #[test]
    fn offered_cps_negative_zero_is_zero() {
        let v = super::parse_cps("-0").unwrap();
        assert!(v == 0.0 && v.is_sign_positive());
        assert_eq!(super::parse_cps("2.5"), Ok(2.5));
        assert!(super::parse_cps("-1").is_err() && super::parse_cps("inf").is_err());
    }
}
