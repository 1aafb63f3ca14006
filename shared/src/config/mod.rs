//! Configuration model (TOML) and its validation.
//!
//! One model serves the daemon's config file, live edits from `spillwayctl`, and the offline
//! policy scenarios. Field names follow the specs in snake_case (see `docs/config.md`).
//! [`Config::validate`] checks every range of the specs and reports the first problem as a
//! [`ConfigError`] naming the field path, the value and the allowed range. The ranges live in
//! one table, [`limits::LIMITS`], which also generates docs/config.md's range table.
//! Integer fields deserialise through `i64` (module `ranged`), so `weight = -1` or
//! `port = 65536` get the same kind of message as `weight = 0`.
//!
//! The parts, one per section of the file, each with its validation and tests:
//! - [`error`]: [`ConfigError`], [`LoadError`], the name rule and `is_prime` (a leaf);
//! - [`limits`]: the range table; `ranged`: integer fields read through `i64`;
//! - [`dataplane`]: `[dataplane]`, `[[ports]]`, zones, `[[client_zones]]`, `[conntrack]`;
//! - [`policy`]: the policy enums; [`health`]: `health_check`;
//! - [`service`]: `[[services]]`, backends and endpoints; [`service::quic_lb`] its QUIC-LB part;
//! - [`fleet`]: `[metrics]` and `[announce]`; [`sync`]: `[sync]`; [`neighbors`]: `[neighbors]`;
//! - this module: [`Config`] itself, parsing (errors with line and column), loading, and
//!   the rules across sections (unique names and VIPs, ports, addresses).

pub mod chunked;
pub mod dataplane;
pub mod error;
pub mod fleet;
pub mod health;
pub mod limits;
pub mod neighbors;
pub mod policy;
pub(crate) mod ranged;
pub mod service;
pub mod sync;

pub use dataplane::*;
pub use error::*;
pub use health::*;
pub use policy::*;
pub use service::*;

use crate::net::SourceAddr;
use limits::get as lim;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::net::IpAddr;

/// serde default of the boolean fields that are on unless set (`compatible`, `enabled`).
fn yes() -> bool {
    true
}

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Process-level settings (EAL, workers, control socket).
    #[serde(default)]
    pub dataplane: DataplaneConfig,
    /// DPDK ports, by name.
    #[serde(default)]
    pub ports: Vec<PortConfig>,
    /// Where this forwarder instance runs (zone, region); used by capacity and isolation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarder: Option<Location>,
    /// Known zones with their region.
    #[serde(default)]
    pub zones: Vec<Location>,
    /// Round-trip-time hints in ms: `rtt_ms.<from_zone>.<to_zone>`; symmetric.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty", deserialize_with = "ranged::float_map")]
    pub rtt_ms: std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>>,
    /// Client prefix → zone table (longest prefix match). spec/zonal-affinity.md "Compatible clients".
    #[serde(default)]
    pub client_zones: Vec<ClientZone>,
    /// Connection tracking table size and timeouts.
    #[serde(default)]
    pub conntrack: ConntrackConfig,
    /// Load-balanced services (VIPs).
    #[serde(default)]
    pub services: Vec<Service>,
    /// `[metrics]`: Prometheus endpoint (absent = off). See [`fleet::MetricsConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<fleet::MetricsConfig>,
    /// `[announce]`: VIP announcement through BIRD (absent = off). See
    /// [`fleet::AnnounceConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announce: Option<fleet::AnnounceConfig>,
    /// `[sync]`: flow-state sync with the other hosts of a fleet (absent = off). See
    /// [`sync::SyncConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<sync::SyncConfig>,
    /// `[neighbors]`: ARP / Neighbor Discovery resolution of next hops without a `mac`
    /// (defaults when absent).
    /// See [`neighbors::NeighborsConfig`].
    #[serde(default, skip_serializing_if = "neighbors::NeighborsConfig::is_default")]
    pub neighbors: neighbors::NeighborsConfig,
}

/// The range-table row of a concrete field path (`services[0].spillover_ratio` →
/// `services[].spillover_ratio`), if the table has one.
fn limit_of(path: &str) -> Option<&'static limits::Limit> {
    let mut generic = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                generic.push('[');
            }
            ']' => {
                in_index = false;
                generic.push(']');
            }
            _ if in_index => {}
            _ => generic.push(c),
        }
    }
    limits::LIMITS.iter().find(|l| l.path == generic)
}

/// The one range-table row whose field is named `key`, when exactly one is.
fn unique_limit_by_key(key: &str) -> Option<&'static limits::Limit> {
    let mut rows = limits::LIMITS.iter().filter(|l| l.path.rsplit('.').next() == Some(key));
    let first = rows.next()?;
    rows.next().is_none().then_some(first)
}

/// The range-table row of `key` in the table whose header is the last before byte offset
/// `at` of `text` (`[[services.backends]]` and `weight`: `services[].backends[].weight`),
/// for a key several rows share (`port`: services, sync, ...; QA: an integer beyond 64 bits
/// in a service lost its path and range).
fn limit_in_table(text: &str, at: usize, key: &str) -> Option<&'static limits::Limit> {
    let before = text.get(..at.min(text.len()))?;
    let header = before.lines().rev().map(|l| l.split('#').next().unwrap_or("").trim()).find(|l| l.starts_with('['))?;
    let want = format!("{}.{key}", header.trim_start_matches('[').trim_end_matches(']').replace([' ', '\t'], ""));
    limits::LIMITS.iter().find(|l| l.path.replace("[]", "") == want)
}

/// The key of the `key = value` line holding byte offset `at`, if that line is one and
/// `at` lies in its value (after the `=`): an error there is about the value. An error at
/// the key itself (a duplicate key) is about the key, and gets `None`.
fn span_value_key(text: &str, at: usize) -> Option<String> {
    let (start, line) = line_at(text, at)?;
    let (k, _) = line.split_once('=')?;
    if at <= start + k.len() {
        return None;
    }
    let k = k.trim();
    (!k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then(|| k.to_string())
}

/// The value of the `key = value` line holding byte offset `at`, as written (up to a
/// comment; at most 80 characters), for messages about it.
fn line_value(text: &str, at: usize) -> Option<String> {
    let v = line_at(text, at)?.1.split_once('=')?.1;
    let v = if v.trim_start().starts_with('"') { v } else { v.split('#').next().unwrap_or("") };
    let v = v.trim();
    (!v.is_empty() && v.chars().count() <= 80).then(|| v.to_string())
}

/// `path` (a range table's, e.g. `services[].backends[].weight`) with the indices of the
/// `[[...]]` tables that hold byte offset `at` of `text`, counted from their headers
/// (`services[2].backends[0].weight`); an index that cannot be counted (an inline array,
/// a header not written as `[[services]]`) stays `[]`. For errors the TOML parser
/// reports before serde knows the path (an integer beyond 64 bits, a float beyond f64).
fn indexed_path(text: &str, at: usize, path: &str) -> String {
    let before = text.get(..at.min(text.len())).unwrap_or("");
    let parts: Vec<&str> = path.split("[]").collect();
    let (mut out, mut table, mut from) = (String::new(), String::new(), 0usize);
    for (i, part) in parts.iter().enumerate() {
        out.push_str(part);
        if i + 1 == parts.len() {
            break;
        }
        table.push_str(part);
        let header = format!("[[{table}]]");
        let starts: Vec<usize> = before[from..]
            .match_indices('\n')
            .map(|(j, _)| from + j + 1)
            .chain((from == 0).then_some(0))
            .filter(|&j| before[j..].lines().next().is_some_and(|l| l.trim_start_matches('\u{feff}').split('#').next().unwrap_or("").replace([' ', '\t'], "") == header))
            .collect();
        match starts.iter().max() {
            Some(&last) => {
                out.push_str(&format!("[{}]", starts.len() - 1));
                from = last;
            }
            None => {
                out.push_str("[]");
                from = before.len();
            }
        }
    }
    out
}

/// The line holding byte offset `at` of `text`: its start offset and its text (without
/// the line break); `None` past the end or inside a character.
fn line_at(text: &str, at: usize) -> Option<(usize, &str)> {
    let start = text.get(..at.min(text.len()))?.rfind('\n').map_or(0, |i| i + 1);
    Some((start, text.get(start..)?.lines().next()?))
}

/// 1-based line and column (in characters) of byte offset `at` in `text`, as every
/// "(line L, column C)" of a config error gives it (the daemon's and `spillwayctl config
/// apply`'s); an offset past the end or inside a character is clamped to the nearest
/// boundary before it, so any offset is safe.
pub fn line_col(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

impl Config {
    /// Parses TOML text (no range validation; see [`validate`](Self::validate)). A syntax
    /// or type error names the field path, the value as written and the allowed values,
    /// then the line: `services[0].backends[1].weight = -1: must be in 1..=1000 (...)
    /// (line 40, column 10)`.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        // The same deserialisation without tracking the field path first (a `config apply`
        // of 20,000 endpoints spends a third of its parse on the path); only a text that
        // fails is parsed again with it, for the error's path.
        if let Ok(c) = toml::from_str::<Config>(text) {
            return Ok(c);
        }
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize::<_, Config>(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // the parser's message may run over lines ("invalid table header\nduplicate
            // key `metrics` in document root"): one line, its parts joined by ": "
            let msg = inner.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(": ");
            let msg = msg.as_str();
            let span = inner.span();
            let at = span.as_ref().map(|s| line_col(text, s.start)).map(|(l, c)| format!(" (line {l}, column {c})")).unwrap_or_default();
            let raw = span.and_then(|s| text.get(s)).map(str::trim).filter(|r| !r.is_empty() && r.len() <= 80 && !r.contains('\n'));
            // The allowed range of the field, from the one range table, for errors that
            // serde reports without it (a string where a number goes, a number beyond
            // what the field's type holds).
            let allowed = |p: &str| limit_of(p).map(|l| format!("; {}", l.allowed())).unwrap_or_default();
            if path.is_empty() || path == "." {
                // the TOML parser itself. About a value (e.g. an integer beyond 64 bits):
                // name the key of that line and, when it names one field, its range. About
                // a key (`duplicate key `workers` in table `dataplane``): the parser's
                // message names the key and the table; no range, the value is not at fault.
                let key = span_value_key(text, inner.span().map_or(0, |s| s.start));
                match key {
                    Some(k) => {
                        let l = unique_limit_by_key(&k).or_else(|| limit_in_table(text, inner.span().map_or(0, |s| s.start), &k));
                        let name = l.map_or(k.clone(), |l| indexed_path(text, inner.span().map_or(0, |s| s.start), l.path));
                        let range = l.map(|l| format!("; {}", l.allowed())).unwrap_or_default();
                        // the value as written on its line (the parser's span may cover
                        // one character of it)
                        match line_value(text, inner.span().map_or(0, |s| s.start)) {
                            Some(v) => format!("{name} = {v}: {msg}{range}{at}"),
                            None => format!("{name}: {msg}{range}{at}"),
                        }
                    }
                    // No TOML document starts with `{` (a key, a `[table]` header or a
                    // comment does): a JSON file given by mistake is named as one.
                    None if text.trim_start_matches('\u{feff}').trim_start().starts_with('{') => {
                        format!("not a TOML document: it starts with '{{' (JSON?); the config is TOML (docs/config.md): {msg}{at}")
                    }
                    None => format!("{msg}{at}"),
                }
            } else if msg.starts_with("invalid type") {
                let extra = allowed(&path);
                match raw {
                    Some(r) => format!("{path} = {r}: {msg}{extra}{at}"),
                    None => format!("{path}: {msg}{extra}{at}"),
                }
            } else if msg.starts_with('.') || msg.starts_with(':') {
                format!("{path}{msg}{at}")
            } else if msg.starts_with("missing field") || msg.starts_with("unknown field") {
                format!("{path}: {msg}{at}")
            } else {
                match raw {
                    Some(r) => format!("{path} = {r}: {msg}{at}"),
                    None => format!("{path}: {msg}{at}"),
                }
            }
        })
    }

    /// Reads, parses and validates a file.
    pub fn load(path: &str) -> Result<Config, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io { path: path.into(), source })?;
        let cfg = Config::from_toml(&text).map_err(|message| LoadError::Parse { path: path.into(), message })?;
        cfg.validate().map_err(|source| LoadError::Invalid { path: path.into(), source })?;
        Ok(cfg)
    }

    /// Serialises to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot serialise: {e}\n"))
    }

    /// A VIP is not a port's own address, and no backend or endpoint address is a VIP
    /// (a packet to it would be balanced again, or answered by the forwarder itself).
    fn validate_vip_addresses(&self) -> Result<(), ConfigError> {
        for (i, s) in self.services.iter().enumerate() {
            for (k, pc) in self.ports.iter().enumerate() {
                for (f, a) in [("address", pc.address), ("address6", pc.address6.map(IpAddr::V6))] {
                    if a == Some(s.vip) {
                        return Err(ConfigError::new(format!("services[{i}].vip"), s.vip,
                            format!("must differ from the port's own address (ports[{k}].{f} = {}): the port answers ARP/ND for it itself", s.vip)));
                    }
                }
            }
        }
        // A port's own address is answered by the port itself (ARP/ND): never a backend's.
        let own: std::collections::HashMap<IpAddr, (usize, &str)> = self.ports.iter().enumerate()
            .flat_map(|(k, pc)| [(pc.address, "address"), (pc.address6.map(IpAddr::V6), "address6")].into_iter().filter_map(move |(a, f)| a.map(|a| (a, (k, f)))))
            .collect();
        for (i, s) in self.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                for (k, address) in b.member_addresses().enumerate() {
                    let Some(&(pk, f)) = own.get(&address) else { continue };
                    let here = if b.is_group() { format!("services[{i}].backends[{bi}].endpoints[{k}].address") } else { format!("services[{i}].backends[{bi}].address") };
                    return Err(ConfigError::new(here, address,
                        format!("must differ from the port's own address (ports[{pk}].{f} = {}): the port answers for it itself", address)));
                }
            }
        }
        // VIP -> first service index: one pass, so 20,000 endpoints × 2,000 VIPs cost a
        // lookup each, not a scan.
        let mut vips: std::collections::HashMap<IpAddr, usize> = std::collections::HashMap::with_capacity(self.services.len());
        for (i, s) in self.services.iter().enumerate() {
            vips.entry(s.vip).or_insert(i);
        }
        for (i, s) in self.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                for (k, address) in b.member_addresses().enumerate() {
                    let Some(&vi) = vips.get(&address) else { continue };
                    let here = if b.is_group() { format!("services[{i}].backends[{bi}].endpoints[{k}].address") } else { format!("services[{i}].backends[{bi}].address") };
                    return Err(ConfigError::new(here, address,
                        format!("must not be a VIP (services[{vi}].vip = {}): a backend needs its own address", address)));
                }
            }
        }
        Ok(())
    }

    /// Checks every range and cross-reference; the first problem is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_with(None)
    }

    /// [`Config::validate`] of an edit of `running`, a config that passed it, where every
    /// service whose name is not in `changed` is equal to `running`'s service of that name
    /// (the caller compared them): the same answer, but such a service is not checked again
    /// on its own (its own rules, [`Service::validate`], read nothing else, and nor do its
    /// backends' zone names while `zones` is unchanged); every rule across services is
    /// checked as by `validate`. A live edit of one backend among 20,000 endpoints then
    /// costs the checks of the service it changes.
    pub fn validate_edit(&self, running: &Config, changed: &HashSet<String>) -> Result<(), ConfigError> {
        self.validate_with(Some((running, changed)))
    }

    fn validate_with(&self, running: Option<(&Config, &HashSet<String>)>) -> Result<(), ConfigError> {
        let unchanged = |s: &Service| running.is_some_and(|(_, changed)| !changed.contains(&s.name));
        let zones_unchanged = running.is_some_and(|(r, _)| r.zones == self.zones);
        let d = &self.dataplane;
        for (f, v) in [("workers", i64::from(d.workers)), ("mbufs_per_port", d.mbufs_per_port.into()), ("idle_sleep_us", d.idle_sleep_us.into()), ("descriptors", d.descriptors.into()), ("icmp_errors_per_sec", d.icmp_errors_per_sec.into())] {
            let path = format!("dataplane.{f}");
            lim(&path).check_int(&path, v)?;
        }
        // `dataplane.socket` is checked where it is used (`check_socket_path`): `--socket`
        // overrides it, and then its value does not matter (a warning says so).
        if let Some(i) = d.eal_args.iter().position(|a| a.trim().is_empty()) {
            return Err(ConfigError::new(format!("dataplane.eal_args[{i}]"), format!("{:?}", d.eal_args[i]),
                "must not be empty: the EAL would get an empty argument (remove it)"));
        }
        if let Some(a) = d.eal_args.iter().find(|a| d.packet_capture && matches!(a.as_str(), "--no-shconf" | "--in-memory")) {
            return Err(ConfigError::new("dataplane.packet_capture", "true",
                format!("needs EAL multi-process for dpdk-dumpcap (a secondary process): remove {a} from dataplane.eal_args")));
        }
        if !d.worker_cores.is_empty() && d.worker_cores.len() < usize::from(d.workers) {
            return Err(ConfigError::new("dataplane.worker_cores", format!("{:?}", d.worker_cores),
                format!("must list at least `workers` = {} cores", d.workers)));
        }
        for (i, c) in d.worker_cores.iter().enumerate() {
            if let Some(j) = d.worker_cores[..i].iter().position(|x| x == c) {
                return Err(ConfigError::new(format!("dataplane.worker_cores[{i}]"), c,
                    format!("must differ from the other cores (dataplane.worker_cores[{j}] is also {c}): one worker per core")));
            }
        }
        let c = &self.conntrack;
        for (f, v) in [
            ("capacity_per_worker", c.capacity_per_worker),
            ("tcp_idle_timeout_sec", c.tcp_idle_timeout_sec),
            ("tcp_syn_timeout_sec", c.tcp_syn_timeout_sec),
            ("tcp_closing_timeout_sec", c.tcp_closing_timeout_sec),
            ("udp_idle_timeout_sec", c.udp_idle_timeout_sec),
        ] {
            let path = format!("conntrack.{f}");
            lim(&path).check_int(&path, v.into())?;
        }

        let mut port_names = HashSet::new();
        for (i, pcfg) in self.ports.iter().enumerate() {
            if pcfg.name.is_empty() || !port_names.insert(pcfg.name.as_str()) {
                return Err(ConfigError::new(format!("ports[{i}].name"), &pcfg.name, "must be non-empty and unique"));
            }
            if pcfg.device.is_empty() {
                return Err(ConfigError::new(format!("ports[{i}].device"), "\"\"", "a PCI address or a vdev like net_af_packet0,iface=eth1"));
            }
            crate::device::check(&pcfg.device).map_err(|rule| ConfigError::new(format!("ports[{i}].device"), format!("{:?}", pcfg.device), rule))?;
            if let Some(j) = self.ports[..i].iter().position(|q| crate::device::device_name(&q.device) == crate::device::device_name(&pcfg.device)) {
                return Err(ConfigError::new(format!("ports[{i}].device"), format!("{:?}", pcfg.device), format!("must name another device than ports[{j}] ({}): one DPDK port per device", crate::device::device_name(&pcfg.device))));
            }
            // Our source MAC on every frame we send: a group or zero one would be dropped by
            // neighbours (IEEE 802.3 §3.2.3), as `multicast_source_mac` drops it here.
            if let Some(m) = pcfg.mac.filter(|m| m.0[0] & 1 != 0 || m.0 == [0; 6]) {
                return Err(ConfigError::new(format!("ports[{i}].mac"), m, "must be a unicast, non-zero MAC address (the source MAC of the frames this port sends)"));
            }
            let mtu_path = format!("ports[{i}].mtu");
            lim("ports[].mtu").check_int(&mtu_path, pcfg.mtu.into())?;
        }
        for (i, pcfg) in self.ports.iter().enumerate() {
            if let Some(f) = &pcfg.forward_to {
                if !port_names.contains(f.as_str()) {
                    return Err(ConfigError::new(format!("ports[{i}].forward_to"), f, "must name a port in [[ports]]"));
                }
            }
            // A port address is the source of ARP requests, Neighbor Solicitations and
            // tunnels on the wire: an address that can never be unicast (the martian rule's
            // first list: 0.0.0.0/8, loopback, multicast, 240.0.0.0/4 with broadcast; RFC
            // 1812 §5.3.7) and IPv4-mapped IPv6 (RFC 4291 §2.5.5.2) never reach a neighbour.
            let unusable = |a: IpAddr| a.never_unicast() || a.ipv4_mapped();
            if let Some(a) = pcfg.address {
                if unusable(a) {
                    return Err(ConfigError::new(format!("ports[{i}].address"), a, "must be a unicast IPv4 or IPv6 address that can be on a wire (not 0.0.0.0/8, 240.0.0.0/4, multicast, broadcast, loopback, unspecified or IPv4-mapped)"));
                }
            }
            if let Some(a6) = pcfg.address6 {
                if unusable(IpAddr::V6(a6)) {
                    return Err(ConfigError::new(format!("ports[{i}].address6"), a6, "must be a unicast IPv6 address that can be on a wire (not unspecified, multicast, loopback ::1 or IPv4-mapped ::ffff:a.b.c.d)"));
                }
                if let Some(a @ IpAddr::V6(_)) = pcfg.address {
                    return Err(ConfigError::new(format!("ports[{i}].address6"), a6,
                        format!("only for a port whose address is IPv4 (ports[{i}].address = {a} is already IPv6)")));
                }
            }
        }
        dataplane::validate_port_identities(self)?;
        let mut zones = HashSet::new();
        for (i, z) in self.zones.iter().enumerate() {
            check_name(&format!("zones[{i}].zone"), &z.zone)?;
            if z.region.is_empty() {
                return Err(ConfigError::new(format!("zones[{i}].region"), "\"\"", "must name the zone's region (1 or more characters): an empty region is refused as an empty zone is"));
            }
            if !zones.insert(z.zone.as_str()) {
                return Err(ConfigError::new(format!("zones[{i}].zone"), &z.zone, "must be unique"));
            }
        }
        // With [[zones]] listed, every zone named elsewhere must be one of them (a typo in a
        // zone name would silently disable zonal affinity for those clients or backends).
        let known = |z: &str| zones.is_empty() || z.is_empty() || zones.contains(z);
        let listed = || self.zones.iter().map(|z| z.zone.as_str()).collect::<Vec<_>>().join(", ");
        for (i, cz) in self.client_zones.iter().enumerate() {
            if let Some(j) = self.client_zones[..i].iter().position(|o| o.prefix == cz.prefix) {
                return Err(ConfigError::new(format!("client_zones[{i}].prefix"), cz.prefix,
                    format!("must be unique: client_zones[{j}] already has this prefix (a client matches one zone)")));
            }
            if cz.compatible && cz.zone.as_deref().unwrap_or("").is_empty() {
                return Err(ConfigError::new(format!("client_zones[{i}].zone"), "(none)",
                    "a compatible client prefix needs a zone (or set compatible = false)"));
            }
            if let Some(z) = cz.zone.as_ref().filter(|z| !z.is_empty()) {
                check_name(&format!("client_zones[{i}].zone"), z)?;
                if !known(z) {
                    return Err(ConfigError::new(format!("client_zones[{i}].zone"), z, format!("must be one of [[zones]]: {}", listed())));
                }
            }
        }
        if let Some(f) = &self.forwarder {
            if !f.zone.is_empty() {
                check_name("forwarder.zone", &f.zone)?;
            }
            if !known(&f.zone) {
                return Err(ConfigError::new("forwarder.zone", &f.zone, format!("must be one of [[zones]]: {}", listed())));
            }
            if let Some(z) = self.zones.iter().find(|z| z.zone == f.zone) {
                if z.region != f.region {
                    return Err(ConfigError::new("forwarder.region", &f.region,
                        format!("must be {:?}, the region [[zones]] gives zone {:?}", z.region, z.zone)));
                }
            }
        }
        // RTT hints: zones of [[zones]], a distance in [0, 1e6] ms.
        let rtt = lim("rtt_ms.<zone>.<zone>");
        for (from, row) in &self.rtt_ms {
            if !zones.contains(from.as_str()) {
                return Err(ConfigError::new(format!("rtt_ms.{from}"), from,
                    format!("must name a zone of [[zones]] ({})", if zones.is_empty() { "none listed".to_string() } else { listed() })));
            }
            for (to, &ms) in row {
                let path = format!("rtt_ms.{from}.{to}");
                if !zones.contains(to.as_str()) {
                    return Err(ConfigError::new(path, to,
                        format!("must name a zone of [[zones]] ({})", if zones.is_empty() { "none listed".to_string() } else { listed() })));
                }
                rtt.check_f(&path, ms, 0.0)?;
                // A zone's distance to itself is 0 (Topology::rtt): another value here
                // would be silently ignored.
                if from == to && ms != 0.0 {
                    return Err(ConfigError::new(path, ms, format!("must be 0 or absent: the distance of zone {from:?} to itself is 0")));
                }
                // Symmetric (spec/service-lb-policy.md): both directions, when both are given,
                // must agree, or one of them would be used for one direction only. The other
                // direction's own range is checked first, so the error names the bad one.
                if let Some(&back) = self.rtt_ms.get(to.as_str()).and_then(|r| r.get(from.as_str())) {
                    rtt.check_f(&format!("rtt_ms.{to}.{from}"), back, 0.0)?;
                    if back != ms && from < to {
                        return Err(ConfigError::new(path, ms, format!("must equal rtt_ms.{to}.{from} = {back} (distances are symmetric: give one direction, or both alike)")));
                    }
                }
            }
        }
        for (si, s) in self.services.iter().enumerate() {
            if zones_unchanged && unchanged(s) {
                continue;
            }
            for (bi, b) in s.backends.iter().enumerate() {
                if !b.zone.is_empty() {
                    check_name(&format!("services[{si}].backends[{bi}].zone"), &b.zone)?;
                }
                if !known(&b.zone) {
                    return Err(ConfigError::new(format!("services[{si}].backends[{bi}].zone"), &b.zone,
                        format!("must be one of [[zones]]: {}", listed())));
                }
            }
        }
        let mut names = HashSet::new();
        let mut vips: std::collections::HashMap<_, usize> = std::collections::HashMap::with_capacity(self.services.len());
        for (i, s) in self.services.iter().enumerate() {
            let sp = format!("services[{i}]");
            if !unchanged(s) {
                s.validate(&sp)?;
            }
            if !names.insert(s.name.as_str()) {
                return Err(ConfigError::new(format!("{sp}.name"), &s.name, "must be unique"));
            }
            if let Some(&j) = vips.get(&(s.vip, s.port, s.protocol)) {
                return Err(ConfigError::new(format!("{sp}.vip"), s.endpoint_label(),
                    format!("services {:?} ({sp}) and {:?} (services[{j}]) cannot both have this VIP, port and protocol", s.name, self.services[j].name)));
            }
            vips.insert((s.vip, s.port, s.protocol), i);
        }
        self.validate_vip_addresses()?;
        // [metrics] / [announce] (fleet).
        if let Some(m) = &self.metrics {
            m.addr()?;
        }
        if let Some(a) = &self.announce {
            // VIPs and the ports' own addresses: none may become a local or peer address of
            // the announcement interface
            let taken: Vec<IpAddr> = self.services.iter().map(|s| s.vip).chain(self.ports.iter().flat_map(|p| p.address.into_iter().chain(p.address6.map(IpAddr::V6)))).collect();
            a.validate(&taken)?;
        }
        if let Some(s) = &self.sync {
            s.validate()?;
        }
        // [neighbors] and ports[].gateway (neighbors).
        self.neighbors.validate()?;
        neighbors::validate_gateways(self)?;
        Ok(())
    }

    /// Advice that does not refuse the config (printed by `spillway --check` and logged at
    /// start): `maglev_table_size` under 100 × endpoints (shares may be uneven by more than
    /// 1 %, Maglev NSDI 2016 §3.4).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Err(e) = check_socket_path("dataplane.socket", self.dataplane.socket.as_bytes()) {
            out.push(format!("{e}; the daemon starts only with --socket PATH"));
        }
        for (i, s) in self.services.iter().enumerate() {
            // Maglev tables are built over endpoints (a group counts once per endpoint).
            let n: usize = s.backends.iter().map(|b| b.members().len()).sum();
            if (s.maglev_table_size as usize) < 100 * n {
                out.push(format!(
                    "services[{i}].maglev_table_size = {}: under 100 x {n} backends; shares may be uneven by more than 1 % (Maglev, NSDI 2016)",
                    s.maglev_table_size
                ));
            }
        }
        out
    }

    /// Finds a service by name.
    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| s.name == name)
    }

    /// The services whose VIP is `vip` (config order), or the refusal of `vip
    /// drain|undrain` (and of its dry run) for an address that is no VIP, listing the VIPs
    /// there are: `vip 10.9.9.9: not a configured VIP (configured: 10.0.0.100, fd00::100)`.
    pub fn services_of_vip(&self, vip: IpAddr) -> Result<Vec<&Service>, String> {
        let of: Vec<&Service> = self.services.iter().filter(|s| s.vip == vip).collect();
        if !of.is_empty() {
            return Ok(of);
        }
        let mut known: Vec<String> = Vec::new();
        for s in &self.services {
            let v = s.vip.to_string();
            if !known.contains(&v) {
                known.push(v);
            }
        }
        Err(format!("vip {vip}: not a configured VIP (configured: {})", if known.is_empty() { "none".into() } else { known.join(", ") }))
    }
}

#[cfg(test)]
mod tests;
