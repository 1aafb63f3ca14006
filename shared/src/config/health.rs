//! `health_check` of a service (and of a backend that overrides it): the probe, its
//! timers and payload limits, and its validation. spec/backend-selection.md "Health checks".

use super::error::ConfigError;
use super::ranged;
use serde::{Deserialize, Serialize};

/// Health check kind. spec/backend-selection.md "Health checks".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HealthCheckKind {
    /// TCP connect succeeds.
    #[default]
    Tcp,
    /// HTTP GET `path` answered with `expected_status`.
    Http,
    /// UDP request `udp_request` answered (with `udp_expect` as a prefix, when given).
    Udp,
    /// HTTPS (TLS via rustls) GET `path` answered with `expected_status`; the certificate
    /// is verified only with `verify = true` (spec/backend-selection.md "Health checks").
    Https,
}

/// `[services.health_check]`; times in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    /// Probe kind.
    #[serde(default, rename = "type")]
    pub kind: HealthCheckKind,
    /// Port probed; default the service port.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::hc_port")]
    pub port: Option<u16>,
    /// HTTP/HTTPS only: path (absent: `/`, see [`HealthCheck::path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// HTTP/HTTPS only: expected status (absent: 200, see [`HealthCheck::expected_status`]).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ranged::expected_status")]
    pub expected_status: Option<u16>,
    /// UDP only: request payload (absent: empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_request: Option<String>,
    /// UDP only: expected prefix of the response (absent or empty: any response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_expect: Option<String>,
    /// Probe interval (default 5 s; 0.1–300).
    #[serde(default = "d_five", skip_serializing_if = "is_five")]
    pub check_interval_sec: f64,
    /// Probe timeout (default 5 s, or `check_interval_sec` when smaller; must not exceed
    /// the interval).
    #[serde(default = "d_five", skip_serializing_if = "is_five")]
    pub timeout_sec: f64,
    /// Consecutive successes to become healthy (default 2; 1–10).
    #[serde(default = "d_two", skip_serializing_if = "is_two", deserialize_with = "ranged::healthy_threshold")]
    pub healthy_threshold: u32,
    /// Consecutive failures to become unhealthy (default 2; 1–10).
    #[serde(default = "d_two", skip_serializing_if = "is_two", deserialize_with = "ranged::unhealthy_threshold")]
    pub unhealthy_threshold: u32,
    /// HTTPS only: server name sent as TLS SNI and, with `verify`, matched against the
    /// certificate (default none: no SNI, and the probe IP is what `verify` matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// HTTPS only: verify the certificate chain and name against the system's root
    /// certificates (default false: not verified, as cloud load balancers' checks do).
    #[serde(default, skip_serializing_if = "is_false")]
    pub verify: bool,
    /// HTTP/HTTPS: `Host` header (default the probe address, `ip:port`, or `ip` on the
    /// kind's default port 80/443).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// HTTP/HTTPS: a substring the first [`HEALTH_MAX_BODY`] bytes of the body must
    /// contain. TCP: the bytes the backend sends first must start with it (after
    /// `request`, when set). At most [`HEALTH_MAX_PAYLOAD`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// TCP only: payload sent once the connection is up (at most [`HEALTH_MAX_PAYLOAD`]
    /// bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// Largest `request`/`response` of a health check, bytes (the cloud checks' limit).
pub const HEALTH_MAX_PAYLOAD: usize = 1024;
/// Bytes of an HTTP(S) health-check response read at most (headers and body); a
/// `response` substring must appear within them.
pub const HEALTH_MAX_BODY: usize = 64 * 1024;

fn is_false(b: &bool) -> bool {
    !*b
}

impl HealthCheck {
    /// The HTTP(S) path probed (`/` when absent).
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or("/")
    }
    /// The HTTP(S) status expected (200 when absent).
    pub fn expected_status(&self) -> u16 {
        self.expected_status.unwrap_or(200)
    }
    /// The UDP request payload (empty when absent).
    pub fn udp_request(&self) -> &str {
        self.udp_request.as_deref().unwrap_or("")
    }
    /// The UDP response prefix expected (empty, any response, when absent).
    pub fn udp_expect(&self) -> &str {
        self.udp_expect.as_deref().unwrap_or("")
    }
    /// Validates the probe-specific fields (`path`, `expected_status`, `udp_request`,
    /// `udp_expect`, `host`, `sni`, `verify`, `request`, `response`) against the kind: a
    /// field given for a kind that does not use it is refused, naming it. `hp("field")`
    /// gives a field's full path.
    pub(super) fn validate_probe(&self, hp: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        use HealthCheckKind::{Http, Https, Tcp};
        let kind = match self.kind {
            Tcp => "tcp",
            Http => "http",
            Https => "https",
            HealthCheckKind::Udp => "udp",
        };
        let only = |field: &str, value: &str, kinds: &str| {
            Err(ConfigError::new(hp(field), value, format!("only allowed with type = {kinds} (type is \"{kind}\")")))
        };
        let web = matches!(self.kind, Http | Https);
        // Exactly the defaults (`path = "/"`, `expected_status = 200`, `udp_request = ""`,
        // `udp_expect = ""`) are let through for any kind: daemons before this rule wrote
        // them into every live-edited health check, and such a file must still load after
        // an upgrade. Any other value for a kind that does not use it is refused.
        if let Some(path) = self.path.as_ref().filter(|p| web || p.as_str() != "/") {
            if !web {
                return only("path", path, "\"http\" or \"https\"");
            }
            if !path.starts_with('/') || path.bytes().any(|c| c <= b' ' || c == 0x7f) {
                return Err(ConfigError::new(hp("path"), path, "must start with '/' and contain no spaces or control characters"));
            }
        }
        if let Some(st) = self.expected_status.filter(|s| web || *s != 200) {
            if !web {
                return only("expected_status", &st.to_string(), "\"http\" or \"https\"");
            }
        }
        let udp = self.kind == HealthCheckKind::Udp;
        if let (Some(r), false) = (self.udp_request.as_ref().filter(|r| !r.is_empty()), udp) {
            return only("udp_request", r, "\"udp\" (tcp uses request)");
        }
        if let (Some(r), false) = (self.udp_expect.as_ref().filter(|r| !r.is_empty()), udp) {
            return only("udp_expect", r, "\"udp\" (tcp, http and https use response)");
        }
        if let Some(h) = &self.host {
            if !web {
                return only("host", h, "\"http\" or \"https\"");
            }
            if h.is_empty() || h.len() > 255 || h.bytes().any(|c| c <= b' ' || c == 0x7f) {
                return Err(ConfigError::new(hp("host"), h, "must be 1 to 255 characters without spaces or control characters"));
            }
        }
        if let Some(n) = &self.sni {
            if self.kind != Https {
                return only("sni", n, "\"https\"");
            }
            let label_ok = |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
            if n.len() > 253 || !n.split('.').all(label_ok) {
                return Err(ConfigError::new(hp("sni"), n, "must be a DNS name (letters, digits, '-' and '.', at most 253 characters)"));
            }
        }
        if self.verify && self.kind != Https {
            return only("verify", "true", "\"https\"");
        }
        if let Some(r) = &self.request {
            if self.kind != Tcp {
                return only("request", r, "\"tcp\" (udp uses udp_request)");
            }
            if r.is_empty() || r.len() > HEALTH_MAX_PAYLOAD {
                return Err(ConfigError::new(hp("request"), format!("{r:?} ({} bytes)", r.len()), format!("must be in 1..={HEALTH_MAX_PAYLOAD} (length in bytes)")));
            }
        }
        if let Some(r) = &self.response {
            if self.kind == HealthCheckKind::Udp {
                return only("response", r, "\"tcp\", \"http\" or \"https\" (udp uses udp_expect)");
            }
            if r.is_empty() || r.len() > HEALTH_MAX_PAYLOAD {
                return Err(ConfigError::new(hp("response"), format!("{r:?} ({} bytes)", r.len()), format!("must be in 1..={HEALTH_MAX_PAYLOAD} (length in bytes)")));
            }
        }
        Ok(())
    }
}
fn d_five() -> f64 {
    5.0
}
fn d_two() -> u32 {
    2
}
// The write-back leaves out what equals the default (a timeout of 5 s is only written
// when the interval is 5 s or more, where omitting it gives 5 s again).
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_five(v: &f64) -> bool {
    *v == 5.0
}
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_two(v: &u32) -> bool {
    *v == 2
}
impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            kind: HealthCheckKind::Tcp,
            port: None,
            path: None,
            expected_status: None,
            udp_request: None,
            udp_expect: None,
            check_interval_sec: 5.0,
            timeout_sec: 5.0,
            healthy_threshold: 2,
            unhealthy_threshold: 2,
            sni: None,
            verify: false,
            host: None,
            response: None,
            request: None,
        }
    }
}

/// `health_check`: a table whose `timeout_sec`, when absent, follows the interval (5 s, or
/// `check_interval_sec` when smaller), so a short interval alone is valid and no error ever
/// names a timeout the file does not contain. An error inside the table is returned as
/// `.FIELD = VALUE: RULE`, which [`super::Config::from_toml`] appends to the table's path.
pub(super) fn health_check_following_interval<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<HealthCheck>, D::Error> {
    use serde::de::Error;
    let t = toml::Table::deserialize(d)?;
    let given = t.contains_key("timeout_sec");
    let value = toml::Value::Table(t.clone());
    let mut h: HealthCheck = serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let msg = e.into_inner().message().to_string();
        match t.get(&field) {
            Some(v) => D::Error::custom(format!(".{field} = {v}: {msg}")),
            None if field.is_empty() || field == "." => D::Error::custom(format!(": {msg}")),
            None => D::Error::custom(format!(".{field}: {msg}")),
        }
    })?;
    if !given {
        h.timeout_sec = h.timeout_sec.min(h.check_interval_sec);
    }
    Ok(Some(h))
}
