//! The edit engine: live configuration edits from `spillwayctl` (`service|backend|endpoint
//! add|remove|set`, `config apply`), validated like the file, refused when they need a
//! restart, written back to the config file ([`super::persist`]) and applied as a diff:
//! slots, health state and connections of unchanged backends are kept (the steps and their
//! locking: [`super::transaction`]).
//!
//! Generations: the *config generation* ([`crate::daemon::ControlState::config_generation`]) starts at 1
//! and increases by one with every applied mutation; `--if-generation` compares against it.
//! The *snapshot generation* ([`crate::daemon::ControlState::generation`]) increases with every published
//! snapshot (config edits, health changes, load ticks).

use super::views::no_service;
use crate::daemon::Daemon;
use serde::de::DeserializeOwned;
use serde::Serialize;
use spillway_shared::config::{Backend, Config, Endpoint, Service};
use spillway_shared::martian::SourceAddr;
use spillway_shared::proto::Response;

/// Whether an endpoint address can be sent to (probed, encapsulated to, resolved): a
/// unicast address ([`SourceAddr::never_unicast`]: not unspecified, 0/8, loopback,
/// multicast, 240/4 or broadcast, the addresses whose ARP replies the dataplane ignores),
/// not IPv4-mapped IPv6 (RFC 4291 §2.5.5.2: write the IPv4 address), and not IPv6
/// link-local (fe80::/10): the health checker's sockets and the neighbour table take no
/// zone index, and without one such an address names no interface (RFC 4007 §6). IPv4
/// link-local (169.254/16) needs no zone and is usable.
fn usable_endpoint_address(a: std::net::IpAddr) -> bool {
    // IPv6: the martian-source rule (never unicast, link-local, IPv4-mapped); IPv4: never
    // unicast only (its link-local needs no zone).
    let unusable = match a {
        std::net::IpAddr::V4(v4) => u32::from(v4).never_unicast(),
        std::net::IpAddr::V6(v6) => u128::from(v6).never_a_source(),
    };
    !(a.is_unspecified() || unusable)
}

/// Checks the daemon needs beyond [`Config::validate`]: endpoints that are health-checked,
/// encapsulated or resolved by ARP/ND to have a usable address ([`usable_endpoint_address`]), and IPIP/GUE services have a port address as
/// outer source. Errors name the field path. A `mac` is optional: next hops without one are
/// resolved with ARP or, for IPv6, Neighbor Discovery, which needs a forwarding port with
/// an IPv6 address ([`crate::neighbor`]). QUIC-LB key files are read here (missing, too
/// open or malformed: refused) and kept for the next compilations
/// ([`crate::control::quic_lb::load_keys`]).
pub fn daemon_checks(cfg: &Config) -> Result<(), String> {
    crate::control::quic_lb::load_keys(cfg)?;
    for (si, s) in cfg.services.iter().enumerate() {
        for (bi, b) in s.backends.iter().enumerate() {
            for (ei, m) in b.members().iter().enumerate() {
                // the field path, formatted only for an error (20,000 endpoints pass)
                let at = || if b.is_group() { format!("services[{si}].backends[{bi}].endpoints[{ei}]") } else { format!("services[{si}].backends[{bi}]") };
                // An address ARP resolves must be unicast too.
                let next_hop = spillway_shared::neighbors::next_hop(cfg, s, m);
                let resolves = m.mac.is_none() && next_hop == spillway_shared::neighbors::NextHop::Resolve(m.address);
                // An IPv6 next hop is resolved with Neighbor Solicitations sent from the IPv6
                // address of a port that forwards to backends, never from `::` (RFC 4861
                // §7.2.2; `::` would be duplicate address detection).
                if let spillway_shared::neighbors::NextHop::Resolve(a @ std::net::IpAddr::V6(_)) = next_hop {
                    if !forwarding_ports(cfg).any(|i| crate::neighbor::driver::port_address6(cfg, i).is_some()) {
                        let ports = forwarding_ports(cfg).map(|i| format!("ports[{i}].address6")).collect::<Vec<_>>().join(" or ");
                        return Err(format!(
                            "{}.mac: required for the IPv6 next hop {a} unless {ports} is set: Neighbor Discovery (RFC 4861) resolves it by a Neighbor Solicitation from the IPv6 address of the port that forwards to backends, never from :: ([[ports]] cannot change live: edit the file and restart)",
                            at()
                        ));
                    }
                }
                let needs_address = resolves || s.health_check.is_some() || s.forwarding_mode != spillway_shared::config::ForwardingMode::L2_DSR;
                if needs_address && !usable_endpoint_address(m.address) {
                    let at = at();
                    // Only the resolution needed it: a `mac` lifts the rule (review F6).
                    let only_resolution = s.health_check.is_none() && s.forwarding_mode == spillway_shared::config::ForwardingMode::L2_DSR;
                    let hint = if only_resolution { format!("; or give {at}.mac: an L2 DSR endpoint with a mac and no health check is never sent to at its address") } else { String::new() };
                    // an address left out reads as 0.0.0.0: say so rather than quote a
                    // value nobody typed (QA)
                    let given = if m.address.is_unspecified() { format!("{at}.address = {} (or not given)", m.address) } else { format!("{at}.address = {}", m.address) };
                    return Err(format!(
                        "{given}: a unicast endpoint address is required (health checks, IPIP/GUE and ARP/ND resolution of a missing mac send to it): not unspecified, 0/8, loopback, multicast, 240/4, broadcast, IPv4-mapped, or IPv6 link-local (no zone index can be given){hint}"
                    ));
                }
            }
        }
        if s.forwarding_mode != spillway_shared::config::ForwardingMode::L2_DSR {
            // The outer source address is a port address of the endpoint's family.
            let has4 = cfg.ports.iter().any(|p| matches!(p.address, Some(std::net::IpAddr::V4(_))));
            let has6 = cfg.ports.iter().any(|p| matches!(p.address, Some(std::net::IpAddr::V6(_))) || p.address6.is_some());
            for b in &s.backends {
                for m in b.members() {
                    if (m.address.is_ipv4() && !has4) || (m.address.is_ipv6() && !has6) {
                        let (fam, field) = if m.address.is_ipv4() { ("IPv4", "ports[].address") } else { ("IPv6", "ports[].address (IPv6) or ports[].address6") };
                        return Err(format!(
                            "services[{si}].forwarding_mode = {:?} needs an {fam} port address ({field}) as the outer source address for endpoint {} ({})",
                            s.forwarding_mode, m.name, m.address
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Indices of the ports packets are forwarded out of (towards backends): those some port
/// names in `forward_to`, or that forward to themselves (no `forward_to`). Next-hop
/// resolution sends its requests there (as `main.rs` sets up the resolver's ports).
fn forwarding_ports(cfg: &Config) -> impl Iterator<Item = usize> + '_ {
    (0..cfg.ports.len()).filter(move |&i| {
        cfg.ports.iter().enumerate().any(|(j, q)| match &q.forward_to {
            Some(f) => *f == cfg.ports[i].name,
            None => j == i,
        })
    })
}

/// Parses one `field=value` value: a TOML value (`0.5`, `true`, `"x"`, `[1, 2]`); a bare
/// word that is not TOML is taken as a string (`SPILL_CROSS_ZONE`). Empty = remove
/// (`Ok(None)`).
///
/// Errors (docs/ctl.md "Field syntax"): a value that holds more TOML after it, read as
/// the document `x = VALUE` (`"z2"`, a newline, `weight=5` brings the key `weight`): only
/// the first value would be applied, so the error names the extra keys; and a value that
/// is not TOML but spans lines (a bare word is one line), for the same reason. The client
/// `spillwayctl` refuses these too, but the daemon must not half-apply another client's.
pub fn parse_value(v: &str) -> Result<Option<toml::Value>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    match toml::from_str::<toml::Table>(&format!("x = {v}")) {
        Ok(mut t) => {
            let value = t.remove("x");
            if !t.is_empty() {
                let extra = t.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                return Err(format!("the value holds more TOML after it ({extra}), which would not be applied; give each field as its own field=value pair"));
            }
            Ok(value)
        }
        Err(_) if v.contains(['\n', '\r']) => Err("the value spans lines but is not one TOML value (a bare word is one line); give each field as its own field=value pair".into()),
        Err(_) => Ok(Some(toml::Value::String(v.to_string()))),
    }
}

/// [`parse_value`] of `v`, the value of field `k` of `what`, its error naming both.
fn parse_field(what: &str, k: &str, v: &str) -> Result<Option<toml::Value>, String> {
    parse_value(v).map_err(|e| format!("{what}: {k} = {v:?}: {e}; nothing was applied"))
}

/// Refuses a field given twice in one command (`weight=1 weight=2`): which one was meant
/// is unknown, so neither is applied. Errors name `what` and both values.
pub fn refuse_duplicates(fields: &[(String, String)], what: &str) -> Result<(), String> {
    for (i, (k, v)) in fields.iter().enumerate() {
        if let Some((_, w)) = fields[..i].iter().find(|(j, _)| j == k) {
            return Err(format!("{what}: field `{k}` is given twice ({k}={w} and {k}={v}); give each field once"));
        }
    }
    Ok(())
}

/// Whether `v` is a plain decimal integer (`80`, `-1`): no exponent, fraction, sign `+`,
/// `_` separators or `0x`/`0o`/`0b` prefix.
fn is_plain_integer(v: &str) -> bool {
    let d = v.trim().strip_prefix('-').unwrap_or(v.trim());
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses a value that is not a plain decimal integer for a field that holds an integer
/// (`weight=1e3`, `weight=0x10`, `port=8_0`), naming the field, the value and the range of
/// its [`spillway_shared::config::limits`] row. `decoded` is the object after the edit; `rows` is
/// the row prefix of its fields (`services[].backends[]`).
fn plain_integers<T: Serialize>(decoded: &T, fields: &[(String, String)], what: &str, rows: &str) -> Result<(), String> {
    let t = toml::Table::try_from(decoded).unwrap_or_default();
    for (k, v) in fields {
        // an empty value removed the field (back to its default: QA, `weight=` was refused)
        if !v.trim().is_empty() && matches!(t.get(k), Some(toml::Value::Integer(_))) && !is_plain_integer(v) {
            let range = spillway_shared::config::limits::find(&format!("{rows}.{k}")).map_or_else(|| "must be an integer".to_string(), |l| l.allowed());
            return Err(format!("{what}: {k} = {v}: {range} (a plain decimal integer)"));
        }
    }
    Ok(())
}

/// What a type error (`invalid type: string "abc", expected f64`) of field `k` leaves out:
/// `; ` and the field's range from its [`spillway_shared::config::limits`] row (`rows` is
/// the row prefix, `services[]`), and for a number with a fraction how to write one (a
/// value that is no TOML number, `.5`, `NaN`, `1e400`, reads as a string). Empty for
/// other errors, or a field without a row.
fn type_hint(rows: &str, k: &str, msg: &str) -> String {
    if !msg.starts_with("invalid type") {
        return String::new();
    }
    let range = spillway_shared::config::limits::find(&format!("{rows}.{k}")).map_or_else(String::new, |l| format!("; {}", l.allowed()));
    let float = if msg.ends_with("expected f64") { "; write a decimal number with a digit before the point, e.g. 0.5 (not .5, NaN or inf)" } else { "" };
    format!("{range}{float}")
}

/// Applies `fields` to a serialisable object through its TOML form; errors name `what`.
/// An empty value removes the field, except `address` (refused: it would become 0.0.0.0).
/// `rows` is the [`spillway_shared::config::limits`] prefix of the object's fields
/// (`services[].backends[]`), for the range an integer error gives.
fn edit<T: Serialize + DeserializeOwned>(obj: &T, fields: &[(String, String)], what: &str, fixed: &[&str], rows: &str) -> Result<T, String> {
    refuse_duplicates(fields, what)?;
    let mut t = toml::Table::try_from(obj).map_err(|e| format!("{what}: {e}"))?;
    for (k, v) in fields {
        if fixed.contains(&k.as_str()) {
            return Err(format!("{what}: field `{k}` cannot be set here (use the add/remove commands or config apply)"));
        }
        match parse_field(what, k, v)? {
            Some(val) => {
                t.insert(k.clone(), val);
            }
            // An empty value removes a field, and a removed address reads as 0.0.0.0, which
            // a later edit would then refuse with a value the operator never typed.
            None if k == "address" => return Err(format!("{what}: address= (empty): an address cannot be removed; give one (e.g. address=10.0.1.3)")),
            None => {
                t.remove(k);
            }
        }
        // Decode after each field so a type error names the field and the value given.
        if let Err(e) = toml::Value::Table(t.clone()).try_into::<T>() {
            return Err(format!("{what}: {k} = {v}: {}{}", e.message(), type_hint(rows, k, e.message())));
        }
    }
    let out: T = toml::Value::Table(t).try_into().map_err(|e: toml::de::Error| format!("{what}: {}", e.message()))?;
    plain_integers(&out, fields, what, rows)?;
    Ok(out)
}

/// The error of a new table `t` (built from `fields`) that did not decode, naming the
/// field and the value given when one field alone causes `msg` (without it the table
/// decodes, or fails otherwise: e.g. `port = 65536` then reads "missing field `port`"),
/// as [`edit`] names them; else `msg` alone (a required field missing).
fn culprit(t: &toml::Table, fields: &[(String, String)], what: &str, msg: &str) -> String {
    // A field is at fault when removing it changes the error. For a missing field, only
    // when removing it leaves no missing field: a `backends=[{...}]` lacking a `name` is
    // that value's fault, while removing `vip` from `vip=... ` (no `port`) only trades one
    // missing field for another (fresh-user QA: `vip` was blamed for the missing `port`).
    let missing = |m: &str| m.starts_with("missing field");
    let alone = |k: &str| {
        let mut without = t.clone();
        without.remove(k);
        toml::Value::Table(without).try_into::<Service>().map_or_else(|e| e.message() != msg && !(missing(msg) && missing(e.message())), |_| true)
    };
    match fields.iter().find(|(k, _)| alone(k)) {
        Some((k, v)) => format!("{what}: {k} = {v}: {msg}{}", type_hint("services[]", k, msg)),
        None => format!("{what}: {msg}"),
    }
}

fn table_diff(prefix: &str, a: &toml::Table, b: &toml::Table, skip: &str, out: &mut Vec<String>) {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).filter(|k| k.as_str() != skip).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let (x, y) = (a.get(k), b.get(k));
        if x != y {
            let s = |v: Option<&toml::Value>| v.map_or("(unset)".to_string(), |v| v.to_string());
            out.push(format!("{prefix}{k}: {} -> {}", s(x), s(y)));
        }
    }
}

/// What differs between two configs, one line per change.
pub fn describe_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let tab = |v: &dyn erased::Ser| v.table();
    // By name, so thousands of services cost a lookup each, not a scan.
    fn index(c: &Config) -> std::collections::HashMap<&str, &spillway_shared::config::Service> {
        c.services.iter().map(|s| (s.name.as_str(), s)).collect()
    }
    let (old_by_name, new_by_name) = (index(old), index(new));
    for s in &old.services {
        if !new_by_name.contains_key(s.name.as_str()) {
            out.push(format!("service {} removed", s.name));
        }
    }
    for s in &new.services {
        let Some(&o) = old_by_name.get(s.name.as_str()) else {
            out.push(format!("service {} added ({} backends)", s.name, s.backends.len()));
            continue;
        };
        if o == s {
            continue;
        }
        table_diff(&format!("service {}: ", s.name), &tab(o), &tab(s), "backends", &mut out);
        for b in &o.backends {
            if !s.backends.iter().any(|x| x.name == b.name) {
                out.push(format!("service {}: backend {} removed", s.name, b.name));
            }
        }
        for b in &s.backends {
            match o.backends.iter().find(|x| x.name == b.name) {
                None => out.push(format!("service {}: backend {} added", s.name, b.name)),
                Some(ob) => {
                    let prefix = format!("service {}: backend {}: ", s.name, b.name);
                    let (mut to, mut tb) = (tab(ob), tab(b));
                    if ob.is_group() != b.is_group() {
                        // the one-address form's address, MAC and server ID move into (or
                        // out of) the endpoint named like the backend: said by
                        // `endpoint_diff`, not as an address "unset"
                        for t in [&mut to, &mut tb] {
                            t.remove("address");
                            t.remove("mac");
                            t.remove("server_id");
                        }
                    }
                    table_diff(&prefix, &to, &tb, "endpoints", &mut out);
                    endpoint_diff(&prefix, ob, b, &mut out);
                }
            }
        }
    }
    // Everything but the services, without copying them (thousands of endpoints).
    let rest = |c: &Config| {
        let Config { dataplane, ports, forwarder, zones, rtt_ms, client_zones, conntrack, services: _, metrics, announce, sync, neighbors } = c;
        Config {
            dataplane: dataplane.clone(),
            ports: ports.clone(),
            forwarder: forwarder.clone(),
            zones: zones.clone(),
            rtt_ms: rtt_ms.clone(),
            client_zones: client_zones.clone(),
            conntrack: conntrack.clone(),
            services: Vec::new(),
            metrics: metrics.clone(),
            announce: announce.clone(),
            sync: sync.clone(),
            neighbors: neighbors.clone(),
        }
    };
    if rest(old) != rest(new) {
        table_diff("", &tab(&rest(old)), &tab(&rest(new)), "services", &mut out);
    }
    out
}

/// Endpoint-level lines of a backend's change (`endpoint e3 added`, `endpoint e1: weight:
/// 50 -> 80`). A switch between the one-address form and a group is one line (`written
/// as one address -> a group of 2 endpoints`) and then the endpoints compared by name,
/// the one-address form being one endpoint named like the backend (`Backend::members`):
/// `endpoint set web b1 b1 weight=7` on a one-address backend says `endpoint b1:
/// weight: 50 -> 7`, not that its address was unset (fresh-user QA).
fn endpoint_diff(prefix: &str, old: &Backend, new: &Backend, out: &mut Vec<String>) {
    if old.is_group() != new.is_group() {
        let form = |b: &Backend| match b.endpoints.len() {
            0 => "one address".to_string(),
            1 => "a group of 1 endpoint".to_string(),
            n => format!("a group of {n} endpoints"),
        };
        out.push(format!("{prefix}written as {} -> {}", form(old), form(new)));
        let (om, nm) = (old.members(), new.members());
        for m in &om {
            if !nm.iter().any(|x| x.name == m.name) {
                out.push(format!("{prefix}endpoint {} removed", m.name));
            }
        }
        for m in &nm {
            let Some(o) = om.iter().find(|x| x.name == m.name) else {
                out.push(format!("{prefix}endpoint {} added", m.name));
                continue;
            };
            let opt = |v: Option<String>| v.map_or("(unset)".to_string(), |v| format!("{v:?}"));
            let fields = [
                ("address", format!("{:?}", o.address.to_string()), format!("{:?}", m.address.to_string())),
                ("mac", opt(o.mac.map(|x| x.to_string())), opt(m.mac.map(|x| x.to_string()))),
                ("weight", o.weight.to_string(), m.weight.to_string()),
                ("enabled", o.enabled.to_string(), m.enabled.to_string()),
                ("server_id", opt(o.server_id.clone()), opt(m.server_id.clone())),
            ];
            for (k, a, b) in fields {
                if a != b {
                    out.push(format!("{prefix}endpoint {}: {k}: {a} -> {b}", m.name));
                }
            }
        }
        return;
    }
    for e in &old.endpoints {
        if new.endpoint_index(&e.label()).is_none() {
            out.push(format!("{prefix}endpoint {} removed", e.label()));
        }
    }
    for e in &new.endpoints {
        match old.endpoint_index(&e.label()) {
            None => out.push(format!("{prefix}endpoint {} added", e.label())),
            Some(i) => {
                // `enabled` is left out of an endpoint's TOML when true (its default): put it
                // back so re-enabling reads `false -> true`, not `-> (unset)` (QA)
                let t = |e: &spillway_shared::config::Endpoint| {
                    let mut t = toml::Table::try_from(e).unwrap_or_default();
                    t.entry("enabled").or_insert(toml::Value::Boolean(e.enabled));
                    t
                };
                table_diff(&format!("{prefix}endpoint {}: ", e.label()), &t(&old.endpoints[i]), &t(e), "", out);
            }
        }
    }
}

mod erased {
    /// Object-safe "serialise to a TOML table".
    pub trait Ser {
        fn table(&self) -> toml::Table;
    }
    impl<T: serde::Serialize> Ser for T {
        fn table(&self) -> toml::Table {
            toml::Table::try_from(self).unwrap_or_default()
        }
    }
}

impl Daemon {
    /// `config apply`: replaces the config by `text` (a complete config file).
    pub fn config_apply(&self, text: &str, if_generation: Option<u64>) -> Response {
        self.config_apply_as(text, if_generation, false)
    }

    /// [`Daemon::config_apply`], or its dry run ([`super::dryrun`]).
    pub fn config_apply_as(&self, text: &str, if_generation: Option<u64>, dry_run: bool) -> Response {
        // Only the services whose text changed since the last apply are parsed again.
        let parsed = Config::from_toml_cached(text, &mut self.apply_parse_cache.lock().unwrap_or_else(|e| e.into_inner()));
        let new = match parsed {
            Ok(c) => c,
            Err(e) => return Response::Error { message: format!("config: {e}") },
        };
        // A file without ports is not a whole config (new-user test: an empty file was
        // refused as "[dataplane] cannot change", from its defaults).
        if new.ports.is_empty() {
            return Response::Error {
                message: "config: no [[ports]]: config apply takes the whole config file, as `spillwayctl config show` prints it (a section left out means its defaults)".into(),
            };
        }
        self.mutate_with(if_generation, Some(text), dry_run, move |c| {
            *c = new;
            Ok(())
        })
    }

    /// `service add|remove|set`, `backend add|remove|set`, `endpoint add|remove|set`.
    pub fn edit_request(&self, req: spillway_shared::proto::Request) -> Response {
        self.edit_request_as(req, false)
    }

    /// [`Daemon::edit_request`], or its dry run ([`super::dryrun`]).
    pub fn edit_request_as(&self, req: spillway_shared::proto::Request, dry_run: bool) -> Response {
        use spillway_shared::proto::Request as R;
        match req {
            R::ServiceAdd { name, fields, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                if c.service(&name).is_some() {
                    return Err(format!("service {name} already exists"));
                }
                let what = format!("service {name}");
                refuse_duplicates(&fields, &what)?;
                if fields.iter().any(|(k, _)| k == "name") {
                    return Err(format!("{what}: field `name` cannot be set here (the command names the service)"));
                }
                if fields.iter().any(|(k, _)| k == "backends") {
                    return Err(format!("{what}: field `backends` cannot be set here (add the service, then `backend add {name} NAME ...`, or use config apply)"));
                }
                let mut t = toml::Table::new();
                t.insert("name".into(), toml::Value::String(name.clone()));
                for (k, v) in &fields {
                    if let Some(v) = parse_field(&what, k, v)? {
                        t.insert(k.clone(), v);
                    }
                }
                let s: Service = toml::Value::Table(t.clone()).try_into().map_err(|e: toml::de::Error| culprit(&t, &fields, &what, e.message()))?;
                plain_integers(&s, &fields, &what, "services[]")?;
                c.services.push(s);
                Ok(())
            }),
            R::ServiceRemove { name, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let n = c.services.len();
                c.services.retain(|s| s.name != name);
                if c.services.len() == n {
                    return Err(no_service(c, &name));
                }
                Ok(())
            }),
            R::ServiceSet { name, fields, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let i = c.services.iter().position(|s| s.name == name).ok_or_else(|| no_service(c, &name))?;
                c.services[i] = edit(&c.services[i], &fields, &format!("service {name}"), &["name", "backends"], "services[]")?;
                Ok(())
            }),
            R::BackendAdd { service, name, fields, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let si = c.services.iter().position(|s| s.name == service).ok_or_else(|| no_service(c, &service))?;
                if c.services[si].backends.iter().any(|b| b.name == name) {
                    return Err(format!("service {service}: backend {name} already exists"));
                }
                let b = edit(&Backend::new(&name, ""), &fields, &format!("service {service}: backend {name}"), &["name"], "services[].backends[]")?;
                c.services[si].backends.push(b);
                Ok(())
            }),
            R::BackendRemove { service, name, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let si = c.services.iter().position(|s| s.name == service).ok_or_else(|| no_service(c, &service))?;
                let n = c.services[si].backends.len();
                c.services[si].backends.retain(|b| b.name != name);
                if c.services[si].backends.len() == n {
                    return Err(format!("service {service} has no backend {name}"));
                }
                Ok(())
            }),
            R::BackendSet { service, name, fields, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let si = c.services.iter().position(|s| s.name == service).ok_or_else(|| no_service(c, &service))?;
                let bi = c.services[si].backends.iter().position(|b| b.name == name).ok_or_else(|| format!("service {service} has no backend {name}"))?;
                let b = &c.services[si].backends[bi];
                let what = format!("service {service}: backend {name}");
                let edited = edit(b, &fields, &what, &["name"], "services[].backends[]")?;
                // a group emptied would read as a one-address backend without an address
                // (QA: refused as `address = 0.0.0.0`, a value nobody typed)
                // (with a mac it is a valid one-address L2 DSR backend: config.md; review)
                if b.is_group() && !edited.is_group() && edited.address.is_unspecified() && edited.mac.is_none() {
                    return Err(format!("{what}: endpoints = []: a group keeps at least one endpoint, or becomes a one-address backend given its address= (remove endpoints one by one with `endpoint remove`; the last one cannot go: remove the backend instead)"));
                }
                c.services[si].backends[bi] = edited;
                Ok(())
            }),
            R::EndpointAdd { service, backend, name, fields, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let b = find_backend(c, &service, &backend)?;
                if b.members().iter().any(|m| m.name == name) {
                    return Err(format!("service {service}: backend {backend}: endpoint {name} already exists"));
                }
                into_group(b);
                let what = format!("service {service}: backend {backend}: endpoint {name}");
                let e = edit(&Endpoint::new(Some(&name), std::net::Ipv4Addr::UNSPECIFIED), &fields, &what, &["name"], "services[].backends[].endpoints[]")?;
                if e.address.is_unspecified() {
                    return Err(format!("{what}: address is required (e.g. address=10.0.1.3)"));
                }
                b.endpoints.push(e);
                Ok(())
            }),
            R::EndpointRemove { service, backend, name, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let b = find_backend(c, &service, &backend)?;
                if !b.members().iter().any(|m| m.name == name) {
                    return Err(no_endpoint(&service, b, &name));
                }
                let i = b.endpoint_index(&name).unwrap_or(0);
                if b.members().len() == 1 {
                    return Err(format!("service {service}: backend {backend}: endpoint {name} is its last endpoint (a backend keeps at least one); remove the backend instead"));
                }
                b.endpoints.remove(i);
                Ok(())
            }),
            R::EndpointSet { service, backend, name, fields, if_generation } => self.mutate_as(dry_run, if_generation, |c| {
                let b = find_backend(c, &service, &backend)?;
                if !b.members().iter().any(|m| m.name == name) {
                    return Err(no_endpoint(&service, b, &name));
                }
                into_group(b);
                let i = b.endpoint_index(&name).ok_or_else(|| no_endpoint(&service, b, &name))?;
                let what = format!("service {service}: backend {backend}: endpoint {name}");
                let mut e = edit(&b.endpoints[i], &fields, &what, &["name"], "services[].backends[].endpoints[]")?;
                // an unnamed endpoint keeps the name it is known by (its old address)
                if e.name.is_none() && e.address != b.endpoints[i].address {
                    e.name = Some(name.clone());
                }
                b.endpoints[i] = e;
                Ok(())
            }),
            _ => Response::Error { message: "not an edit request".into() },
        }
    }
}

/// The backend `backend` of service `service`, or an error naming what exists.
fn find_backend<'a>(c: &'a mut Config, service: &str, backend: &str) -> Result<&'a mut Backend, String> {
    let si = c.services.iter().position(|s| s.name == service).ok_or_else(|| no_service(c, service))?;
    let s = &mut c.services[si];
    let names = s.backends.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", ");
    s.backends.iter_mut().find(|b| b.name == backend).ok_or_else(|| format!("service {service} has no backend {backend} (have: {names})"))
}

fn no_endpoint(service: &str, b: &Backend, name: &str) -> String {
    let names = b.members().into_iter().map(|m| m.name).collect::<Vec<_>>().join(", ");
    format!("service {service}: backend {} has no endpoint {name} (have: {names})", b.name)
}

/// Turns a single-endpoint backend into a group whose first endpoint is the old one, named
/// like the backend (so its health, slot and connections are kept).
fn into_group(b: &mut Backend) {
    if b.is_group() {
        return;
    }
    let mut e = Endpoint::new(Some(&b.name), b.address);
    e.mac = b.mac.take();
    // a group's server IDs are its endpoints' (QUIC-LB); the backend's would be ignored
    e.server_id = b.server_id.take();
    b.address = std::net::Ipv4Addr::UNSPECIFIED.into();
    b.endpoints.push(e);
}

#[cfg(test)]
mod tests;
