//! Live commands against the running daemon: `config`, `service`, `backend`, `health`,
//! `flows`, `stats`, `snapshot`. Reads take `--json`; mutations take `--if-generation N`
//! and print the new config generation and what changed.

use crate::client::{self, fail, json, unexpected};
use crate::fields::{fields_given, name_given, with_fields};
use clap::{Args, Subcommand};
use spillway_shared::config::Config;
use spillway_shared::proto::{Applied, FlowFilter, FlowOp, Request, Response};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Options of every mutation.
#[derive(Args, Debug, Clone, Copy)]
pub struct MutOpts {
    /// Refuse the edit unless the daemon's config generation is still N (optimistic
    /// concurrency: read with `config show`, edit, retry on refusal).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub if_generation: Option<u64>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// Change nothing: answer what the edit would do (config diff, share of new
    /// connections that change backend per service and client zone class, backend shares
    /// before -> after, tracked connections that would be re-picked, pipeline stages whose
    /// outcome changes). Refused exactly when the edit would be.
    #[arg(long)]
    pub dry_run: bool,
}

/// `--json` of reads.
#[derive(Args, Debug, Clone, Copy)]
pub struct JsonOpt {
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

/// `config ...`
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// The running configuration (TOML, or JSON with --json) and its config generation.
    Show(JsonOpt),
    /// Replace the configuration with FILE, applied as a diff (unchanged backends keep
    /// their health state and connections).
    Apply {
        /// A complete config file.
        file: PathBuf,
        #[command(flatten)]
        opts: MutOpts,
    },
}

/// `service ...`
#[derive(Subcommand, Debug)]
pub enum ServiceCmd {
    /// Services: VIP, policy summary, backend count.
    List(JsonOpt),
    /// One service's configuration (TOML, or JSON with --json).
    Show {
        /// Service name.
        name: String,
        #[command(flatten)]
        json: JsonOpt,
    },
    /// Add a service: `service add api vip=10.0.0.101 port=8080 protocol=tcp`.
    Add {
        /// Service name.
        name: String,
        /// `field=value` pairs with the config's field names; values are TOML values.
        #[arg(value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        #[command(flatten)]
        opts: MutOpts,
    },
    /// Remove a service (its connections are no longer forwarded).
    Remove {
        /// Service name.
        name: String,
        #[command(flatten)]
        opts: MutOpts,
    },
    /// Set fields: `service set web spillover_ratio=0.2 zonal_affinity=SPILL_CROSS_ZONE`;
    /// `field=` (empty) removes an optional field.
    Set {
        /// Service name.
        name: String,
        /// `field=value` pairs (at least one).
        #[arg(value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        #[command(flatten)]
        opts: MutOpts,
    },
}

/// `backend ...`
#[derive(Subcommand, Debug)]
pub enum BackendCmd {
    /// Backends of a service with health and counters.
    List {
        /// Service name.
        service: String,
        #[command(flatten)]
        json: JsonOpt,
    },
    /// One backend's configuration and state.
    Show {
        /// Service name.
        service: String,
        /// Backend name.
        name: String,
        #[command(flatten)]
        json: JsonOpt,
    },
    /// Add a backend: `backend add web b5 address=10.0.1.5 mac=02:00:00:00:0b:05 zone=z2`.
    Add {
        /// Service name.
        service: String,
        /// Backend name.
        name: String,
        /// `field=value` pairs.
        #[arg(value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        #[command(flatten)]
        opts: MutOpts,
    },
    /// Remove a backend. Its connections move to other backends at their next packet,
    /// where TCP ones are reset (mid-stream); to remove it without resets, `backend set
    /// SERVICE NAME enabled=false` first and remove it once its connections have ended.
    Remove {
        /// Service name.
        service: String,
        /// Backend name.
        name: String,
        #[command(flatten)]
        opts: MutOpts,
    },
    /// Set fields: `backend set web b1 weight=80 enabled=false`.
    Set {
        /// Service name.
        service: String,
        /// Backend name.
        name: String,
        /// `field=value` pairs (at least one).
        #[arg(value_name = "FIELD=VALUE")]
        fields: Vec<String>,
        #[command(flatten)]
        opts: MutOpts,
    },
}

/// `health ...`
#[derive(Subcommand, Debug)]
pub enum HealthCmd {
    /// Health of every endpoint: state, probes, latency, load, last failure reason.
    Show(JsonOpt),
}

/// Which flows.
#[derive(Args, Debug, Clone)]
pub struct FlowSel {
    /// Only this service's flows.
    #[arg(long)]
    pub service: Option<String>,
    /// Only this backend's flows (needs --service).
    #[arg(long, requires = "service")]
    pub backend: Option<String>,
    /// Machine-readable JSON.
    #[arg(long)]
    pub json: bool,
}

impl FlowSel {
    fn filter(&self) -> FlowFilter {
        match (&self.service, &self.backend) {
            (Some(s), Some(b)) => FlowFilter::Backend(s.clone(), b.clone()),
            (Some(s), None) => FlowFilter::Service(s.clone()),
            _ => FlowFilter::All,
        }
    }
}

/// Renders `health show` rows (one per endpoint) as a table, with a total of skipped probes when there are
/// any (probes the daemon could not start for lack of descriptors or memory).
pub fn render_health(rows: &[spillway_shared::proto::HealthRow]) -> String {
    use crate::table::{Align::*, Table};
    let mut t = Table::new(&[
        ("service", 12, Left), ("backend", 12, Left), ("endpoint", 12, Left), ("address", 16, Left), ("state", 9, Left), ("checked", 7, Left),
        ("latency_ms", 10, Right), ("load_cps", 9, Right), ("probes", 8, Right), ("failed", 8, Right), ("skipped", 8, Right), (" last_error", 0, Free),
    ]);
    for r in rows {
        let lat = r.latency_ms.map_or("-".into(), |l| format!("{l:.2}"));
        t.row(vec![
            r.service.clone(), r.backend.clone(), r.endpoint.clone(), r.address.clone(), (if r.healthy { "healthy" } else { "UNHEALTHY" }).into(),
            (if r.checked { "yes" } else { "static" }).into(), lat, format!("{:.1}", r.load_cps), r.probes.to_string(), r.probes_failed.to_string(),
            r.probes_skipped.to_string(), format!(" {}", r.last_error.as_deref().unwrap_or("-")),
        ]);
    }
    let mut o = t.render("");
    let skipped: u64 = rows.iter().map(|r| r.probes_skipped).sum();
    if skipped > 0 {
        let _ = writeln!(o, "\nSKIPPED PROBES: {skipped} in total (the daemon ran out of file descriptors, memory or ports; raise LimitNOFILE, see docs/operations.md \"Health checker\")");
    }
    o
}

/// `flows ...`
#[derive(Subcommand, Debug)]
pub enum FlowsCmd {
    /// Count live connection-table entries (per worker and total).
    Count(FlowSel),
    /// List live entries.
    Show {
        #[command(flatten)]
        sel: FlowSel,
        /// Most entries per worker (the daemon lists at most 5000 per worker).
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Remove entries: their next packet is balanced anew, by today's table; those picked
    /// elsewhere are reset (TCP mid-stream). Narrow it with --service/--backend; no dry run.
    Flush(FlowSel),
}

/// `snapshot ...`
#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// The published snapshot: generation, tables per service and class, age, propagation.
    Show(JsonOpt),
}




pub(crate) fn mutate(socket: &Path, req: Request, opts: MutOpts) -> i32 {
    let json_out = opts.json;
    if opts.dry_run {
        return crate::dryrun::request(socket, req, json_out);
    }
    match client::request(socket, &req) {
        Ok(Response::Applied(a)) => {
            if json_out {
                return json(&a);
            }
            print!("{}", render_applied(&a));
            0
        }
        Ok(r) => unexpected(&r),
        Err(e) => crate::client::fail_as(e, json_out),
    }
}

/// Text of a mutation's answer.
pub fn render_applied(a: &Applied) -> String {
    let mut o = format!("applied: config generation {} (snapshot generation {})\n", a.generation, a.snapshot_generation);
    for c in &a.changes {
        let _ = writeln!(o, "  {c}");
    }
    o
}

pub(crate) fn fetch_config(socket: &Path) -> Result<(u64, Config), i32> {
    match client::request(socket, &Request::ConfigShow) {
        Ok(Response::Config { generation, toml, .. }) => match Config::from_toml(&toml) {
            Ok(c) => Ok((generation, c)),
            Err(e) => Err(client::error_out("spillwayctl", "protocol", 2, &format!("the daemon's config does not parse: {e}"))),
        },
        Ok(r) => Err(unexpected(&r)),
        Err(e) => Err(fail(e)),
    }
}

/// `config ...`
pub fn config(socket: &Path, cmd: &ConfigCmd) -> i32 {
    match cmd {
        ConfigCmd::Show(j) => match client::request(socket, &Request::ConfigShow) {
            Ok(Response::Config { generation, toml, path }) => {
                if j.json {
                    let cfg = Config::from_toml(&toml).ok();
                    return json(&serde_json::json!({ "generation": generation, "path": path, "config": cfg }));
                }
                println!("# config generation {generation}, persisted to {path}");
                print!("{toml}");
                0
            }
            Ok(r) => unexpected(&r),
            Err(e) => fail(e),
        },
        ConfigCmd::Apply { file, opts } => {
            // Read at most one message's worth: larger files cannot be sent anyway, and
            // /dev/zero must not exhaust memory.
            let limit = spillway_shared::proto::MAX_MESSAGE as u64 - 1024;
            let read = std::fs::File::open(file).and_then(|f| {
                use std::io::Read;
                let mut buf = Vec::new();
                f.take(limit + 1).read_to_end(&mut buf)?;
                Ok(buf)
            });
            let input = |m: String| crate::client::fail_as(crate::client::ClientError::Input(m), opts.json);
            let toml = match read {
                Ok(b) if b.len() as u64 > limit => {
                    return input(format!("{} is larger than {limit} bytes (the control protocol's message limit)", file.display()));
                }
                Ok(b) => match String::from_utf8(b) {
                    Ok(t) => t,
                    Err(_) => return input(format!("{} is not UTF-8 text", file.display())),
                },
                Err(e) => return input(format!("cannot read {}: {e}", file.display())),
            };
            // A file that is not TOML at all (a wrong path, a JSON file) is named here;
            // the daemon checks everything else and knows no file names.
            if let Err(e) = toml::from_str::<toml::Table>(&toml) {
                let msg = e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(": ");
                let at = e.span().map(|s| spillway_shared::config::line_col(&toml, s.start)).map(|(l, c)| format!(" (line {l}, column {c})")).unwrap_or_default();
                // A value the TOML parser refuses (an integer beyond 64 bits): the config's
                // own parser names its field and range (fresh-user QA: `weight =
                // 9223372036854775808` was "not a TOML document: number too large").
                if let Some(named) = spillway_shared::config::Config::from_toml(&toml).err().filter(|m| !m.starts_with("not a TOML document") && *m != format!("{msg}{at}")) {
                    return input(format!("{}: {named}", file.display()));
                }
                return input(format!("{} is not a TOML document: {msg}{at}", file.display()));
            }
            mutate(socket, Request::ConfigApply { toml, if_generation: opts.if_generation }, *opts)
        }
    }
}

/// The `service list` table. `enabled` counts the backends that are enabled as the daemon
/// has them: a group whose endpoints are all disabled is disabled, as `status` and `backend
/// list` show it (fresh-user QA: it was counted as enabled).
pub fn render_services(gen: u64, cfg: &Config) -> String {
    use crate::table::{Align::*, Table};
    let mut t = Table::new(&[("name", 14, Left), ("vip", 24, Left), ("zonal_affinity", 33, Left), ("mode", 8, Left), ("backends", 8, Right), ("enabled", 8, Right)]);
    for s in &cfg.services {
        let enabled = s.backends.iter().filter(|b| b.enabled && b.members().iter().any(|m| m.enabled)).count();
        t.row(vec![s.name.clone(), s.endpoint_label(), format!("{:?}", s.zonal_affinity), format!("{:?}", s.forwarding_mode), s.backends.len().to_string(), enabled.to_string()]);
    }
    let mut o = t.render("");
    let _ = writeln!(o, "(config generation {gen})");
    o
}

/// `service ...`
pub fn service(socket: &Path, cmd: &ServiceCmd) -> i32 {
    let req = match cmd {
        ServiceCmd::List(j) => {
            let (gen, cfg) = match fetch_config(socket) {
                Ok(x) => x,
                Err(c) => return c,
            };
            if j.json {
                return json(&serde_json::json!({ "generation": gen, "services": cfg.services }));
            }
            print!("{}", render_services(gen, &cfg));
            return 0;
        }
        ServiceCmd::Show { name, json: j } => {
            let (gen, svc, _) = match crate::service_read::fetch_service(socket, name) {
                Ok(x) => x,
                Err(c) => return c,
            };
            if j.json {
                return json(&serde_json::json!({ "generation": gen, "service": svc }));
            }
            let wrap = serde_json::json!({ "services": [svc] });
            let text = toml::to_string_pretty(&wrap).unwrap_or_default();
            println!("# config generation {gen}");
            print!("{text}");
            return 0;
        }
        ServiceCmd::Add { name, fields, opts } => {
            let example = "service add web vip=10.0.0.100 port=80";
            if let Err(c) = name_given("service", name, example) {
                return c;
            }
            match with_fields(fields, example, |f| Request::ServiceAdd { name: name.clone(), fields: f, if_generation: opts.if_generation }) {
                Ok(r) => return mutate(socket, r, *opts),
                Err(c) => return c,
            }
        }
        ServiceCmd::Remove { name, opts } => (Request::ServiceRemove { name: name.clone(), if_generation: opts.if_generation }, *opts),
        ServiceCmd::Set { name, fields, opts } => {
            let example = "service set web spillover_ratio=0.2";
            if let Err(c) = name_given("service", name, example).and_then(|()| fields_given(fields, example)) {
                return c;
            }
            match with_fields(fields, example, |f| Request::ServiceSet { name: name.clone(), fields: f, if_generation: opts.if_generation }) {
                Ok(r) => (r, *opts),
                Err(c) => return c,
            }
        }
    };
    mutate(socket, req.0, req.1)
}

/// `backend ...`
pub fn backend(socket: &Path, cmd: &BackendCmd) -> i32 {
    let (req, j) = match cmd {
        BackendCmd::List { service, json: j } => return crate::service_read::backend_read(socket, service, None, j.json),
        BackendCmd::Show { service, name, json: j } => return crate::service_read::backend_read(socket, service, Some(name), j.json),
        BackendCmd::Add { service, name, fields, opts } => {
            let example = "backend add web b3 address=10.0.1.3 zone=z1";
            if let Err(c) = name_given("backend", name, example) {
                return c;
            }
            match with_fields(fields, example, |f| Request::BackendAdd { service: service.clone(), name: name.clone(), fields: f, if_generation: opts.if_generation }) {
                Ok(r) => (r, *opts),
                Err(c) => return c,
            }
        }
        BackendCmd::Remove { service, name, opts } => {
            (Request::BackendRemove { service: service.clone(), name: name.clone(), if_generation: opts.if_generation }, *opts)
        }
        BackendCmd::Set { service, name, fields, opts } => {
            let example = "backend set web b1 weight=80";
            if let Err(c) = name_given("backend", name, example).and_then(|()| fields_given(fields, example)) {
                return c;
            }
            match with_fields(fields, example, |f| Request::BackendSet { service: service.clone(), name: name.clone(), fields: f, if_generation: opts.if_generation }) {
                Ok(r) => (r, *opts),
                Err(c) => return c,
            }
        }
    };
    mutate(socket, req, j)
}

/// `health show`
pub fn health(socket: &Path, cmd: &HealthCmd) -> i32 {
    let HealthCmd::Show(j) = cmd;
    match client::request(socket, &Request::HealthShow) {
        Ok(Response::Health(rows)) => {
            if j.json {
                return json(&rows);
            }
            print!("{}", render_health(&rows));
            0
        }
        Ok(r) => unexpected(&r),
        Err(e) => fail(e),
    }
}

/// `flows ...`
pub fn flows(socket: &Path, cmd: &FlowsCmd) -> i32 {
    let (op, sel) = match cmd {
        FlowsCmd::Count(s) => (FlowOp::Count, s),
        FlowsCmd::Show { sel, limit } => (FlowOp::Show { limit: *limit }, sel),
        FlowsCmd::Flush(s) => (FlowOp::Flush, s),
    };
    match client::request(socket, &Request::Flows { op, filter: sel.filter() }) {
        Ok(Response::Flows(r)) => {
            if sel.json {
                return json(&r);
            }
            // An unfiltered count reads the occupancy counters: entries held, expired ones
            // included until the sweep clears them (docs/ctl.md "flows count"); the others
            // walk the table and count live entries only.
            let what = match (op, sel.filter()) {
                (FlowOp::Flush, _) => "flushed",
                (FlowOp::Count, FlowFilter::All) => "entries held (expired until swept)",
                _ => "live flows",
            };
            let per: Vec<String> = r.per_worker.iter().enumerate().map(|(i, n)| format!("worker {i}: {n}")).collect();
            let mut o = format!("{what}: {} ({})\n", r.total, per.join(", "));
            if matches!(op, FlowOp::Show { .. }) {
                o += &render_flows(&r.entries);
            }
            print!("{o}");
            0
        }
        Ok(r) => unexpected(&r),
        Err(e) => fail(e),
    }
}

/// The `flows show` table: one line per entry; the client and VIP columns (22 characters,
/// an IPv4 `IP:port`) widen to the longest endpoint shown, a full IPv6 `[addr]:port`
/// included, as the name columns do for long names ([`crate::table`]).
pub fn render_flows(entries: &[spillway_shared::proto::FlowRow]) -> String {
    use crate::table::{Align::*, Table};
    let mut t = Table::new(&[("worker", 6, Left), ("client", 22, Left), ("vip", 22, Left), ("proto", 5, Right), ("service", 12, Left), ("backend", 12, Left), ("state", 12, Left), ("idle_ms", 9, Right)]);
    for e in entries {
        t.row(vec![e.worker.to_string(), e.client.clone(), e.vip.clone(), e.proto.to_string(), e.service.clone(), e.backend.clone(), e.state.clone(), e.idle_ms.to_string()]);
    }
    t.render("")
}

/// `stats`: counters per port, worker, backend and drop reason.
pub fn stats(socket: &Path, as_json: bool) -> i32 {
    let r = match client::request(socket, &Request::Status) {
        Ok(Response::Status(r)) => r,
        Ok(r) => return unexpected(&r),
        Err(e) => return fail(e),
    };
    if as_json {
        return json(&serde_json::json!({
            "generation": r.generation,
            "ports": r.ports,
            "workers": r.workers,
            "total": r.total,
            "backends": r.backends,
            "drops": r.total.drops.iter().map(|(k, v)| (k.clone(), *v)).collect::<std::collections::BTreeMap<_, _>>(),
        }));
    }
    print!("{}", render_stats(&r));
    0
}

/// The text of `stats`: PORTS, WORKERS, BACKENDS (columns as wide as their widest name)
/// and DROPS.
pub fn render_stats(r: &spillway_shared::proto::StatusReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "PORTS\n  {:<10} {:>12} {:>12} {:>8} {:>8} {:>8} {:>9}", "port", "ipackets", "opackets", "imissed", "ierrors", "oerrors", "rx_nombuf");
    for p in &r.ports {
        let _ = writeln!(o, "  {:<10} {:>12} {:>12} {:>8} {:>8} {:>8} {:>9}", p.name, p.ipackets, p.opackets, p.imissed, p.ierrors, p.oerrors, p.rx_nombuf);
    }
    let _ = writeln!(o, "WORKERS\n  {:<6} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>12}", "worker", "rx", "tx", "forwarded", "new_conns", "ct_hits", "ct_misses", "dropped", "idle_polls");
    for (i, w) in r.workers.iter().enumerate() {
        let _ = writeln!(o, "  {:<6} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>12}", i, w.rx, w.tx, w.forwarded, w.new_connections, w.ct_hits, w.ct_misses, w.dropped(), w.idle_polls);
    }
    let _ = writeln!(o, "BACKENDS");
    {
        // columns as wide as their widest name, as in `status`
        use crate::table::{Align::*, Table};
        let mut t = Table::new(&[("service", 12, Left), ("backend", 12, Left), ("new_conns", 10, Right), ("packets", 12, Right)]);
        for b in &r.backends {
            t.row(vec![b.service.clone(), b.backend.clone(), b.new_connections.to_string(), b.packets.to_string()]);
        }
        o += &t.render("  ");
    }
    let _ = writeln!(o, "DROPS");
    for (k, v) in &r.total.drops {
        let _ = writeln!(o, "  {k:<24} {v:>12}");
    }
    o
}

/// `snapshot show`
pub fn snapshot(socket: &Path, cmd: &SnapshotCmd) -> i32 {
    let SnapshotCmd::Show(j) = cmd;
    match client::request(socket, &Request::SnapshotShow) {
        Ok(Response::Snapshot(s)) => {
            if j.json {
                return json(&s);
            }
            let prop = s.last_propagation_us.map_or("-".into(), |u| format!("{u} µs"));
            let mut o = format!(
                "snapshot generation {} (config generation {}), age {} ms, workers at >= {}, last propagation {prop}, {} distinct tables\n",
                s.generation, s.config_generation, s.age_ms, s.workers_min_generation, s.distinct_tables
            );
            for svc in &s.services {
                let _ = writeln!(o, "service {}: {} distinct tables{}", svc.name, svc.distinct_tables, if svc.failed_over { " (failover pool active)" } else { "" });
                for (class, t, b) in &svc.classes {
                    match t {
                        Some(t) => {
                            let _ = writeln!(o, "  {class:<16} table {t}: [{}]", b.join(", "));
                        }
                        None => {
                            let _ = writeln!(o, "  {class:<16} DROP");
                        }
                    }
                }
            }
            print!("{o}");
            0
        }
        Ok(r) => unexpected(&r),
        Err(e) => fail(e),
    }
}

#[cfg(test)]
mod tests {
    use spillway_shared::proto::FlowRow;

    fn row(client: &str, vip: &str) -> FlowRow {
        FlowRow { worker: 1, client: client.into(), vip: vip.into(), proto: 6, service: "web".into(), backend: "b1".into(), state: "established".into(), idle_ms: 42 }
    }

    /// `service list` counts a group whose endpoints are all disabled as disabled, a
    /// disabled backend too, and the others as enabled.
    #[test]
    fn service_list_counts_a_group_of_disabled_endpoints_as_disabled() {
        let cfg = spillway_shared::config::Config::from_toml(
            "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\nmac = \"02:00:00:00:00:01\"\n\
             [[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\nprotocol = \"tcp\"\n\
             [[services.backends]]\nname = \"g\"\n\
             [[services.backends.endpoints]]\nname = \"e1\"\naddress = \"10.0.1.1\"\nmac = \"02:00:00:00:0b:01\"\nenabled = false\n\
             [[services.backends.endpoints]]\nname = \"e2\"\naddress = \"10.0.1.2\"\nmac = \"02:00:00:00:0b:02\"\nenabled = false\n\
             [[services.backends]]\nname = \"b3\"\naddress = \"10.0.1.3\"\nmac = \"02:00:00:00:0b:03\"\nenabled = false\n\
             [[services.backends]]\nname = \"b4\"\naddress = \"10.0.1.4\"\nmac = \"02:00:00:00:0b:04\"\n",
        )
        .unwrap();
        let t = super::render_services(7, &cfg);
        let row = t.lines().nth(1).unwrap();
        assert!(row.ends_with("       3        1"), "3 backends, 1 enabled:\n{t}");
    }

    /// `stats`' BACKENDS table widens for a 63-character name: the counters stay under
    /// their headers (fresh-user QA: they were pushed out of line).
    #[test]
    fn stats_backends_fit_long_names() {
        use spillway_shared::proto::{BackendStatus, StatusReport};
        let long = "a-very-long-service-name-that-is-sixty-three-characters-long-x1";
        let b = |s: &str, n: u64| BackendStatus { service: s.into(), backend: "b1".into(), new_connections: n, packets: 5, ..Default::default() };
        let r = StatusReport { backends: vec![b("web", 3), b(long, 4)], ..Default::default() };
        let t = super::render_stats(&r);
        let lines: Vec<&str> = t.lines().skip_while(|l| *l != "BACKENDS").skip(1).take(3).collect();
        let end = lines[0].find("new_conns").unwrap() + "new_conns".len();
        assert!(lines[1][..end].ends_with('3') && lines[2][..end].ends_with('4'), "{t}");
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{t}");
    }

    /// `flows show` keeps its IPv4 layout, and a full IPv6 endpoint widens the client and
    /// VIP columns so every later column still starts where its header does (fresh-user
    /// QA: IPv6 endpoints ran into the next column and the table went out of line).
    #[test]
    fn flows_show_columns_fit_ipv6_endpoints() {
        let v4 = super::render_flows(&[row("10.1.0.10:40000", "10.0.0.100:80")]);
        assert_eq!(
            v4,
            "worker client                 vip                    proto service      backend      state          idle_ms\n\
             1      10.1.0.10:40000        10.0.0.100:80              6 web          b1           established         42\n"
        );
        let long = "[fd01:0:0:5:1234:5678:9abc:def0]:40000";
        let text = super::render_flows(&[row("10.1.0.10:40000", "10.0.0.100:80"), row(long, "[fd00::100]:80")]);
        let lines: Vec<&str> = text.lines().collect();
        let col = |l: &str, field: &str| l.find(field).unwrap_or_else(|| panic!("{field} not in {l}"));
        assert_eq!(col(lines[2], long), col(lines[0], "client"), "{text}");
        for (header, cell) in [("vip", "[fd00::100]:80"), ("service", "web"), ("backend", "b1"), ("state", "established")] {
            assert_eq!(col(lines[2], cell), col(lines[0], header), "{header}:\n{text}");
            assert_eq!(col(lines[1], if header == "vip" { "10.0.0.100:80" } else { cell }), col(lines[0], header), "{header}:\n{text}");
        }
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "every line ends with idle_ms right-aligned:\n{text}");
    }
}
