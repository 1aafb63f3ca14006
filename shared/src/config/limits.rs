//! The one source of truth for configuration ranges: [`LIMITS`], a table of
//! (field path, range, default, unit, source).
//!
//! - [`crate::config::Config::validate`] checks values with these rows;
//! - integer fields deserialise through `i64` (module `ranged`), so a
//!   negative or oversized value (`weight = -1`, `port = 65536`) is refused with the row's
//!   range instead of a bare TOML type error;
//! - the range table of `docs/config.md` is [`markdown_table`], and a test fails when the
//!   doc differs (run `SPILLWAY_BLESS=1 cargo test -p spillway-shared --lib limits` to
//!   rewrite it);
//! - a test sets every row's boundary values in a config and checks that the inside ones
//!   load and the outside ones are refused naming path, value and range.
//!
//! Paths use `[]` for "any index" (`services[].backends[].weight`) and `<zone>` for a key.

use std::fmt::Write;

/// The allowed values of a field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Range {
    /// An integer in `lo..=hi`.
    Int(i64, i64),
    /// A finite float in `[lo, hi]`.
    Float(f64, f64),
    /// `0.0`, or a float in `[lo, hi]`.
    ZeroOrFloat(f64, f64),
    /// A prime in `lo..=hi`.
    Prime(i64, i64),
    /// An integer in `tcp` for TCP services, in `udp` for UDP services.
    ByProtocol {
        /// TCP range.
        tcp: (i64, i64),
        /// UDP range.
        udp: (i64, i64),
    },
    /// A float in `[lo, <sibling field>]`.
    FloatUpTo(f64, &'static str),
    /// One of these names.
    OneOf(&'static [&'static str]),
    /// A rule in words.
    Rule(&'static str),
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// TOML path; `[]` = any index, `<zone>` = any key.
    pub path: &'static str,
    /// Allowed values.
    pub range: Range,
    /// Default when absent (words).
    pub default: &'static str,
    /// Unit or meaning of the number.
    pub unit: &'static str,
    /// Where the rule comes from (spec section, paper, or this project).
    pub source: &'static str,
}

fn group(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

impl Range {
    /// The range in words for docs/config.md.
    pub fn doc(&self) -> String {
        match *self {
            Range::Int(lo, hi) => format!("{}–{}", group(lo), group(hi)),
            Range::Float(lo, hi) => format!("[{lo:?}, {hi:?}]"),
            Range::ZeroOrFloat(lo, hi) => format!("0.0 or [{lo:?}, {hi:?}]"),
            Range::Prime(lo, hi) => format!("prime, {}–{}", group(lo), group(hi)),
            Range::ByProtocol { tcp, udp } => {
                format!("TCP {}–{}; UDP {}–{}", group(tcp.0), group(tcp.1), group(udp.0), group(udp.1))
            }
            Range::FloatUpTo(lo, f) => format!("[{lo:?}, `{f}`]"),
            Range::OneOf(names) => names.join(" \\| "),
            Range::Rule(r) => r.to_string(),
        }
    }
}

impl Limit {
    /// The field name (last path component).
    pub fn field(&self) -> &'static str {
        self.path.rsplit('.').next().unwrap_or(self.path)
    }

    /// The rule as error messages state it: `must be in 1..=1000 (spec/origin-routing.md)`.
    pub fn allowed(&self) -> String {
        let what = match self.range {
            Range::Int(lo, hi) => format!("must be in {lo}..={hi}"),
            Range::Float(lo, hi) => format!("must be in [{lo:?}, {hi:?}]"),
            Range::ZeroOrFloat(lo, hi) => format!("must be 0.0 or in [{lo:?}, {hi:?}]"),
            Range::Prime(lo, hi) => format!("must be a prime in {lo}..={hi}"),
            Range::ByProtocol { tcp, udp } => format!("must be in {}..={} for TCP, {}..={} for UDP", tcp.0, tcp.1, udp.0, udp.1),
            Range::FloatUpTo(lo, f) => format!("must be in [{lo:?}, {f}]"),
            Range::OneOf(names) => format!("must be one of {}", names.join(", ")),
            Range::Rule(r) => format!("must {r}"),
        };
        let notes: Vec<&str> = [self.unit, self.source].into_iter().filter(|s| !s.is_empty()).collect();
        if notes.is_empty() {
            what
        } else {
            format!("{what} ({})", notes.join("; "))
        }
    }

    /// Like [`allowed`](Self::allowed) with the upper bound of [`Range::FloatUpTo`] filled
    /// in, e.g. `must be in [0.01, 1.0] (…; at most check_interval_sec)`.
    fn allowed_up_to(&self, hi: f64) -> String {
        match self.range {
            Range::FloatUpTo(lo, f) => {
                format!("must be in [{lo:?}, {hi:?}] ({}; at most {f} = {hi:?}; {})", self.unit, self.source)
            }
            _ => self.allowed(),
        }
    }

    /// Checks an integer; `path` is the concrete path (`services[0].backends[2].weight`).
    pub fn check_int(&self, path: &str, v: i64) -> Result<(), super::error::ConfigError> {
        let ok = match self.range {
            Range::Int(lo, hi) => (lo..=hi).contains(&v),
            Range::Prime(lo, hi) => (lo..=hi).contains(&v) && u32::try_from(v).is_ok_and(super::error::is_prime),
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(super::error::ConfigError::new(path, v, self.allowed()))
        }
    }

    /// Checks an integer of a [`Range::ByProtocol`] row.
    pub fn check_by_protocol(&self, path: &str, v: i64, udp: bool) -> Result<(), super::error::ConfigError> {
        if let Range::ByProtocol { tcp, udp: u } = self.range {
            let (lo, hi) = if udp { u } else { tcp };
            if !(lo..=hi).contains(&v) {
                return Err(super::error::ConfigError::new(path, v, self.allowed()));
            }
        }
        Ok(())
    }

    /// Checks a float (`hi` fills the upper bound of [`Range::FloatUpTo`]).
    pub fn check_f(&self, path: &str, v: f64, hi_field: f64) -> Result<(), super::error::ConfigError> {
        let (ok, msg) = match self.range {
            Range::Float(lo, hi) => (v.is_finite() && v >= lo && v <= hi, None),
            Range::ZeroOrFloat(lo, hi) => (v == 0.0 || (v.is_finite() && v >= lo && v <= hi), None),
            Range::FloatUpTo(lo, _) => (v.is_finite() && v >= lo && v <= hi_field, Some(self.allowed_up_to(hi_field))),
            _ => (true, None),
        };
        if ok {
            Ok(())
        } else {
            // `-0.0` as written (Display drops the fraction of negative zero: "-0")
            let echo = if v == 0.0 && v.is_sign_negative() { "-0.0".to_string() } else { v.to_string() };
            Err(super::error::ConfigError::new(path, echo, msg.unwrap_or_else(|| self.allowed())))
        }
    }
}

/// The row for a concrete or pattern path (indices are ignored:
/// `services[0].backends[2].weight` finds `services[].backends[].weight`).
pub fn find(path: &str) -> Option<&'static Limit> {
    let mut pat = String::with_capacity(path.len());
    let mut skip = false;
    for c in path.chars() {
        match c {
            '[' => {
                pat.push('[');
                skip = true;
            }
            ']' => {
                pat.push(']');
                skip = false;
            }
            _ if skip => {}
            _ => pat.push(c),
        }
    }
    if let Some(l) = LIMITS.iter().find(|l| l.path == pat) {
        return Some(l);
    }
    if pat.starts_with("rtt_ms.") {
        return LIMITS.iter().find(|l| l.path.starts_with("rtt_ms."));
    }
    None
}

/// Looks a row up by its exact pattern path; panics on a typo (paths are constants of
/// this crate, checked by the tests).
pub fn get(path: &str) -> &'static Limit {
    LIMITS.iter().find(|l| l.path == path).unwrap_or_else(|| panic!("no limit row {path}"))
}

const SBS: &str = "spec/backend-selection.md";
const SZA: &str = "spec/zonal-affinity.md";
const SLB: &str = "spec/service-lb-policy.md";
const SOR: &str = "spec/origin-routing.md";
const HERE: &str = "this project";
const QLB: &str = "draft-ietf-quic-load-balancers-19 §3, §5";

/// Every range of the configuration, in file order.
pub const LIMITS: &[Limit] = &[
    Limit { path: "dataplane.workers", range: Range::Int(1, 64), default: "1", unit: "poll-mode workers", source: HERE },
    Limit { path: "dataplane.worker_cores[]", range: Range::Rule("name a usable core of this host"), default: "cores 1, 2, …", unit: "CPU core ids", source: "checked by --check and at start" },
    Limit { path: "dataplane.mbufs_per_port", range: Range::Int(1023, 1_048_575), default: "8191", unit: "mbufs; 2^n − 1 is best", source: "DPDK mempool" },
    Limit { path: "dataplane.descriptors", range: Range::Int(64, 4096), default: "1024", unit: "descriptors per queue, clamped to the device", source: HERE },
    Limit { path: "dataplane.idle_sleep_us", range: Range::Int(0, 10_000), default: "0 (busy polling)", unit: "microseconds", source: HERE },
    Limit { path: "dataplane.icmp_errors_per_sec", range: Range::Int(0, 1_000_000), default: "1000", unit: "ICMP errors (fragmentation needed, Packet Too Big) per second per worker, bursts of 50; 0 = none", source: "RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)" },
    Limit { path: "dataplane.socket_group", range: Range::Rule("name an existing group"), default: "absent (root only)", unit: "group name", source: "checked by --check and at start" },
    Limit { path: "neighbors.refresh_sec", range: Range::Int(1, 3600), default: "30", unit: "seconds from a reply to the next request (less a per-address jitter of up to a quarter); a changed MAC is followed within it", source: "RFC 826, RFC 4861 §7.3 (REACHABLE time)" },
    Limit { path: "neighbors.expiry_sec", range: Range::Int(2, 86_400), default: "120", unit: "seconds from the last reply until the entry expires; more than refresh_sec", source: HERE },
    Limit { path: "neighbors.retry_ms", range: Range::Int(100, 60_000), default: "1000", unit: "milliseconds an ARP request or Neighbor Solicitation waits before it is a timeout and is sent again", source: "RFC 1122 §2.3.2.1 (at most one ARP request per second per address: the default), RFC 4861 §10 (RetransTimer 1,000 ms); lower values for tests only" },
    Limit { path: "ports[].mtu", range: Range::Int(1280, 9216), default: "1500", unit: "bytes of IP packet (L3 MTU; Ethernet header, tags and FCS excluded); above 1500 needs RX scatter or large mbufs", source: "RFC 894; RFC 8200 §5 (1280); 9216: common switch jumbo limit" },
    Limit { path: "rtt_ms.<zone>.<zone>", range: Range::Float(0.0, 1e6), default: "absent (unknown distance)", unit: "milliseconds; both zones in [[zones]]", source: SLB },
    Limit { path: "conntrack.capacity_per_worker", range: Range::Int(1024, 1 << 26), default: "1048576", unit: "entries, rounded up to a power of two; 16 bytes each (32 for IPv6)", source: HERE },
    Limit { path: "conntrack.tcp_idle_timeout_sec", range: Range::Int(600, 57_600), default: "600", unit: "seconds", source: SBS },
    Limit { path: "conntrack.tcp_syn_timeout_sec", range: Range::Int(1, 600), default: "5", unit: "seconds", source: HERE },
    Limit { path: "conntrack.tcp_closing_timeout_sec", range: Range::Int(1, 600), default: "10", unit: "seconds", source: HERE },
    Limit { path: "conntrack.udp_idle_timeout_sec", range: Range::Int(1, 57_600), default: "30", unit: "seconds", source: HERE },
    Limit { path: "services[].port", range: Range::Int(1, 65_535), default: "required", unit: "TCP/UDP port", source: "RFC 793, RFC 768" },
    Limit { path: "services[].idle_timeout_sec", range: Range::ByProtocol { tcp: (600, 57_600), udp: (1, 57_600) }, default: "the [conntrack] timeout", unit: "seconds", source: SBS },
    Limit { path: "services[].zonal_affinity", range: Range::OneOf(&["ZONAL_AFFINITY_DISABLED", "ZONAL_AFFINITY_STAY_WITHIN_ZONE", "ZONAL_AFFINITY_SPILL_CROSS_ZONE"]), default: "ZONAL_AFFINITY_DISABLED", unit: "also without the ZONAL_AFFINITY_ prefix", source: SZA },
    Limit { path: "services[].spillover_ratio", range: Range::Float(0.0, 1.0), default: "0.0 with SPILL_CROSS_ZONE", unit: "ratio", source: SZA },
    Limit { path: "services[].failover_ratio", range: Range::Float(0.0, 1.0), default: "absent (no failover policy)", unit: "ratio", source: SBS },
    Limit { path: "services[].connection_drain_timeout_sec", range: Range::Int(0, 3600), default: "600", unit: "seconds", source: SBS },
    Limit { path: "services[].load_balancing_algorithm", range: Range::OneOf(&["WATERFALL_BY_REGION", "SPRAY_TO_REGION", "WATERFALL_BY_ZONE"]), default: "WATERFALL_BY_REGION", unit: "", source: SLB },
    Limit { path: "services[].failover_health_threshold", range: Range::Int(1, 99), default: "70", unit: "percent", source: SLB },
    Limit { path: "services[].latency_sensitivity_ms", range: Range::Float(0.0, 1e6), default: "absent (stage off)", unit: "milliseconds", source: SOR },
    Limit { path: "services[].encap_mtu", range: Range::Int(576, 9216), default: "1500", unit: "bytes, path MTU towards backends (IPIP/GUE)", source: "RFC 791, RFC 2003" },
    Limit { path: "services[].maglev_table_size", range: Range::Prime(251, 1_048_573), default: "65537", unit: "entries; ≥ 100 × backends recommended (warned)", source: "Maglev, NSDI 2016" },
    Limit { path: "services[].backends", range: Range::Int(0, 4096), default: "none", unit: "backends per service", source: HERE },
    Limit { path: "services[].health_check.port", range: Range::Int(1, 65_535), default: "the service port", unit: "TCP/UDP port", source: HERE },
    Limit { path: "services[].health_check.path", range: Range::Rule("start with '/'"), default: "/", unit: "HTTP path", source: "RFC 9110" },
    Limit { path: "services[].health_check.expected_status", range: Range::Int(100, 599), default: "200", unit: "HTTP status", source: "RFC 9110" },
    Limit { path: "services[].health_check.check_interval_sec", range: Range::Float(0.1, 300.0), default: "5.0", unit: "seconds", source: SBS },
    Limit { path: "services[].health_check.timeout_sec", range: Range::FloatUpTo(0.01, "check_interval_sec"), default: "5.0, or check_interval_sec when smaller", unit: "seconds", source: SBS },
    Limit { path: "services[].health_check.healthy_threshold", range: Range::Int(1, 10), default: "2", unit: "consecutive successes", source: SBS },
    Limit { path: "services[].health_check.unhealthy_threshold", range: Range::Int(1, 10), default: "2", unit: "consecutive failures", source: SBS },
    Limit { path: "services[].quic_lb[].config_rotation", range: Range::Rule("0–6, unique within the service (7 marks unroutable CIDs)"), default: "required", unit: "config rotation codepoint: the CID's first 3 bits", source: QLB },
    Limit { path: "services[].quic_lb[].server_id_length", range: Range::Rule("1–15, equal in every configuration of the service"), default: "required", unit: "octets", source: QLB },
    Limit { path: "services[].quic_lb[].nonce_length", range: Range::Rule("4–18, and server_id_length + nonce_length ≤ 19"), default: "required", unit: "octets", source: QLB },
    Limit { path: "services[].quic_lb[].algorithm", range: Range::OneOf(&["encrypted", "plaintext"]), default: "encrypted", unit: "AES-128-ECB: single pass when server ID + nonce = 16 octets, four-pass otherwise", source: QLB },
    Limit { path: "services[].quic_lb[].key_file", range: Range::Rule("a file of 32 hex digits, mode 0600 or 0400; required with encrypted, refused with plaintext"), default: "absent", unit: "AES-128 key", source: "checked by --check, at start and by every live edit" },
    Limit { path: "services[].backends[].server_id", range: Range::Rule("hex of server_id_length octets, unique within the service; required on every endpoint of a QUIC-LB service (unused without one)"), default: "absent", unit: "QUIC-LB server ID (also services[].backends[].endpoints[].server_id)", source: QLB },
    Limit { path: "services[].backends[].weight", range: Range::Int(1, 1000), default: "50", unit: "relative weight", source: SOR },
    Limit { path: "services[].backends[].endpoints[].weight", range: Range::Int(1, 1000), default: "50", unit: "relative weight within the backend", source: "docs/semantics.md \"Backend groups\"" },
    Limit { path: "services[].backends[].priority", range: Range::Int(1, 5), default: "1", unit: "1 is the highest", source: SOR },
    Limit { path: "services[].backends[].capacity_cps", range: Range::Float(0.0, 1e12), default: "absent (unlimited)", unit: "new connections per second", source: SLB },
    Limit { path: "services[].backends[].capacity_scaler", range: Range::ZeroOrFloat(0.1, 1.0), default: "1.0", unit: "factor", source: SLB },
    Limit { path: "services[].backends[].latency_ms", range: Range::Float(0.0, 1e6), default: "absent (measured by probes)", unit: "milliseconds", source: SOR },
];

/// The range table of docs/config.md (Markdown), generated from [`LIMITS`].
pub fn markdown_table() -> String {
    let mut o = String::from("| field | range | default | unit | source |\n|---|---|---|---|---|\n");
    for l in LIMITS {
        let _ = writeln!(o, "| `{}` | {} | {} | {} | {} |", l.path, l.range.doc(), l.default, l.unit, l.source);
    }
    o
}

/// Marker lines around the generated table in docs/config.md.
pub const DOC_BEGIN: &str = "<!-- ranges: generated from shared/src/config/limits.rs; do not edit -->";
/// End marker.
pub const DOC_END: &str = "<!-- ranges: end -->";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_config_md_range_table_is_the_code_table() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/config.md");
        let doc = std::fs::read_to_string(&path).expect("docs/config.md");
        let (Some(b), Some(e)) = (doc.find(DOC_BEGIN), doc.find(DOC_END)) else {
            panic!("docs/config.md lacks the markers {DOC_BEGIN} ... {DOC_END}");
        };
        let have = doc[b + DOC_BEGIN.len()..e].trim();
        let want = markdown_table();
        if have != want.trim() {
            if std::env::var_os("SPILLWAY_BLESS").is_some() {
                let new = format!("{}{DOC_BEGIN}\n{want}{}", &doc[..b], &doc[e..]);
                std::fs::write(&path, new).unwrap();
                return;
            }
            panic!("docs/config.md's range table is stale; rerun with SPILLWAY_BLESS=1 to rewrite it. Expected:\n{want}");
        }
    }

    #[test]
    fn rows_are_unique_and_found_by_concrete_paths() {
        for (i, l) in LIMITS.iter().enumerate() {
            assert!(LIMITS[..i].iter().all(|m| m.path != l.path), "duplicate row {}", l.path);
        }
        assert_eq!(find("services[3].backends[12].weight").map(|l| l.path), Some("services[].backends[].weight"));
        assert_eq!(find("rtt_ms.z1.z2").map(|l| l.path), Some("rtt_ms.<zone>.<zone>"));
        assert!(find("services[0].nope").is_none());
        assert_eq!(group(1_048_573), "1,048,573");
        assert_eq!(group(-5), "-5");
    }
}
