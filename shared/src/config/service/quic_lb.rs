//! `[[services.quic_lb]]`: a UDP service's QUIC-LB configurations (one per config
//! rotation codepoint, draft-ietf-quic-load-balancers-19 §3.1 and §5.3), and the rules
//! that tie them to the endpoints' `server_id`s.
//!
//! ```toml
//! [[services.quic_lb]]
//! config_rotation = 0          # 0–6, unique within the service
//! server_id_length = 2         # octets, 1–15; the same in every configuration
//! nonce_length = 6             # octets, 4–18; server_id_length + nonce_length ≤ 19
//! algorithm = "encrypted"      # or "plaintext" (no key)
//! key_file = "/etc/spillway/quic-lb-0.key"   # 32 hex digits, mode 0600 or 0400
//! ```
//! Each endpoint of the service then carries `server_id = "0a01"` (hex, exactly
//! `server_id_length` octets, unique within the service). Server IDs are shared by every
//! configuration of the service (§5.1 allows a common allocation for equal lengths), so a
//! key rotation adds a configuration at a free codepoint with the same server IDs.
//! The key file's contents and mode are checked by the daemon (`--check`, start, every
//! live edit), not here: this crate does no I/O.

use super::Service;
use crate::config::error::ConfigError;
use crate::config::policy::Protocol;
use crate::quic_lb::{QuicLbConfig, ServerId, KEY_LEN};
use serde::{Deserialize, Serialize};

/// How the server ID is written in the CID (draft §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuicLbAlgorithm {
    /// No key: the server ID is readable by anyone (draft §9: only for the first CID).
    Plaintext,
    /// AES-128-ECB: single pass for 16 octets of server ID + nonce, four-pass otherwise.
    #[default]
    Encrypted,
}

/// One `[[services.quic_lb]]` table: a configuration at one config rotation codepoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuicLbEntry {
    /// Config rotation codepoint, 0–6 (draft §3.1; 7 marks unroutable CIDs).
    pub config_rotation: u8,
    /// Server ID length in octets, 1–15 (draft §5.3).
    pub server_id_length: u8,
    /// Nonce length in octets, 4–18; with the server ID at most 19 (draft §5.3).
    pub nonce_length: u8,
    /// `encrypted` (default) or `plaintext`.
    #[serde(default)]
    pub algorithm: QuicLbAlgorithm,
    /// The AES-128 key: a file of 32 hex digits (`openssl rand -hex 16`), mode 0600 or
    /// 0400. Required with `encrypted`, refused with `plaintext`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
}

impl QuicLbEntry {
    /// The codec of this entry with `key` (ignored for `plaintext`). Errors as
    /// [`QuicLbConfig::new`].
    pub fn codec(&self, key: Option<[u8; KEY_LEN]>) -> Result<QuicLbConfig, String> {
        let key = if self.algorithm == QuicLbAlgorithm::Encrypted { key } else { None };
        QuicLbConfig::new(self.config_rotation, self.server_id_length, self.nonce_length, key)
    }
}

/// The key from a key file's contents: 32 hex digits, surrounding whitespace ignored.
pub fn key_from_file_contents(bytes: &[u8]) -> Result<[u8; KEY_LEN], String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not text: the key file holds 32 hex digits (openssl rand -hex 16)".to_string())?;
    let key = crate::quic_lb::parse_hex(text)?;
    key.try_into().map_err(|k: Vec<u8>| format!("{} octets: an AES-128 key has 16 (32 hex digits, openssl rand -hex 16)", k.len()))
}

/// The server ID of each endpoint of `svc`, in `backends[].members()` order, with the
/// TOML path of its field; `None` for an endpoint without one.
pub fn endpoint_server_ids<'a>(svc: &'a Service, path: &str) -> Vec<(String, Option<&'a str>)> {
    let mut out = Vec::new();
    for (i, b) in svc.backends.iter().enumerate() {
        if b.is_group() {
            for (k, e) in b.endpoints.iter().enumerate() {
                out.push((format!("{path}.backends[{i}].endpoints[{k}].server_id"), e.server_id.as_deref()));
            }
        } else {
            out.push((format!("{path}.backends[{i}].server_id"), b.server_id.as_deref()));
        }
    }
    out
}

/// Validates `svc.quic_lb` and the endpoints' `server_id`s; `path` is the service's
/// prefix (`services[0]`). Refuses: QUIC-LB on a TCP service; a codepoint, length or sum
/// out of range; two configurations at one codepoint; server ID lengths that differ
/// between configurations; `encrypted` without `key_file` or `plaintext` with one; an
/// endpoint without a server ID, a server ID that is not hex of `server_id_length` octets
/// (of 1–15 octets on a service without QUIC-LB, where it is unused), and two endpoints
/// with one server ID.
pub fn validate(svc: &Service, path: &str) -> Result<(), ConfigError> {
    let ids = endpoint_server_ids(svc, path);
    if svc.quic_lb.is_empty() {
        // Unused until the service gets QUIC-LB (so a live edit can give the endpoints
        // their server IDs first), but still a server ID.
        for (at, id) in &ids {
            if let Some(text) = id {
                ServerId::from_hex(text).map_err(|e| ConfigError::new(at, format!("{text:?}"), e))?;
            }
        }
        return Ok(());
    }
    if svc.protocol != Protocol::Udp {
        return Err(ConfigError::new(format!("{path}.quic_lb"), format!("{} configurations", svc.quic_lb.len()), "QUIC runs over UDP: only a protocol = \"udp\" service may carry QUIC-LB"));
    }
    let sid_len = svc.quic_lb[0].server_id_length;
    for (i, q) in svc.quic_lb.iter().enumerate() {
        let qp = |f: &str| format!("{path}.quic_lb[{i}].{f}");
        if let Err(rule) = q.codec(None) {
            let (field, value) = if q.config_rotation > crate::quic_lb::MAX_CODEPOINT {
                ("config_rotation", q.config_rotation)
            } else if !(crate::quic_lb::SERVER_ID_LEN_MIN..=crate::quic_lb::SERVER_ID_LEN_MAX).contains(&q.server_id_length) {
                ("server_id_length", q.server_id_length)
            } else {
                ("nonce_length", q.nonce_length)
            };
            return Err(ConfigError::new(qp(field), value, rule));
        }
        if let Some(j) = svc.quic_lb[..i].iter().position(|o| o.config_rotation == q.config_rotation) {
            return Err(ConfigError::new(qp("config_rotation"), q.config_rotation, format!("must be unique within the service (also at {path}.quic_lb[{j}])")));
        }
        if q.server_id_length != sid_len {
            return Err(ConfigError::new(qp("server_id_length"), q.server_id_length, format!(
                "must equal {path}.quic_lb[0].server_id_length = {sid_len}: the endpoints' server IDs are shared by every configuration of the service")));
        }
        match (q.algorithm, &q.key_file) {
            (QuicLbAlgorithm::Encrypted, None) => {
                return Err(ConfigError::new(qp("key_file"), "absent", "required with algorithm = \"encrypted\" (a file of 32 hex digits, mode 0600; or algorithm = \"plaintext\")"))
            }
            (QuicLbAlgorithm::Encrypted, Some(f)) if f.trim().is_empty() => return Err(ConfigError::new(qp("key_file"), "\"\"", "must name the key file")),
            (QuicLbAlgorithm::Plaintext, Some(f)) => {
                return Err(ConfigError::new(qp("key_file"), format!("{f:?}"), "a plaintext configuration has no key: remove key_file or set algorithm = \"encrypted\""))
            }
            _ => {}
        }
    }
    let mut seen: Vec<(ServerId, &str)> = Vec::new();
    for (at, id) in &ids {
        let Some(text) = id else {
            return Err(ConfigError::new(at, "absent", format!("required: every endpoint of a QUIC-LB service has a server ID of {sid_len} octets ({} hex digits), unique within the service", 2 * sid_len)));
        };
        let sid = ServerId::from_hex(text).map_err(|e| ConfigError::new(at, format!("{text:?}"), e))?;
        if sid.len() != usize::from(sid_len) {
            return Err(ConfigError::new(at, format!("{text:?}"), format!("{} octets: must be server_id_length = {sid_len} octets ({} hex digits)", sid.len(), 2 * sid_len)));
        }
        if let Some((_, first)) = seen.iter().find(|(s, _)| *s == sid) {
            return Err(ConfigError::new(at, format!("{text:?}"), format!("must be unique within the service (also at {first})")));
        }
        seen.push((sid, at));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const BASE: &str = r#"
[[ports]]
name = "p0"
device = "net_null0"

[[services]]
name = "quic"
vip = "10.0.0.100"
port = 443
protocol = "udp"

[[services.quic_lb]]
config_rotation = 0
server_id_length = 2
nonce_length = 6
key_file = "/etc/spillway/quic-lb.key"

[[services.backends]]
name = "b1"
address = "10.0.1.1"
server_id = "0a01"

[[services.backends]]
name = "g"

[[services.backends.endpoints]]
name = "e1"
address = "10.0.1.2"
server_id = "0a02"
"#;

    fn load(text: &str) -> Result<Config, String> {
        let c = Config::from_toml(text)?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn a_valid_section_loads_and_round_trips() {
        let c = load(BASE).unwrap();
        let s = &c.services[0];
        assert_eq!(s.quic_lb[0].algorithm, QuicLbAlgorithm::Encrypted);
        assert_eq!(s.backends[1].endpoints[0].server_id.as_deref(), Some("0a02"));
        let again = load(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);
    }

    #[track_caller]
    fn refused(text: &str, path: &str, rule: &str) {
        let e = load(text).unwrap_err();
        assert!(e.starts_with(path) && e.contains(rule), "{e}");
    }

    #[test]
    fn every_rule_is_refused_with_its_path() {
        refused(&BASE.replace("config_rotation = 0", "config_rotation = 7"), "services[0].quic_lb[0].config_rotation = 7", "0–6");
        refused(&BASE.replace("server_id_length = 2", "server_id_length = 0"), "services[0].quic_lb[0].server_id_length = 0", "1–15");
        refused(&BASE.replace("nonce_length = 6", "nonce_length = 3"), "services[0].quic_lb[0].nonce_length = 3", "4–18");
        refused(&BASE.replace("nonce_length = 6", "nonce_length = 18"), "services[0].quic_lb[0].nonce_length = 18", "at most 19");
        refused(&BASE.replace("protocol = \"udp\"", "protocol = \"tcp\""), "services[0].quic_lb", "UDP");
        refused(&BASE.replace("key_file = \"/etc/spillway/quic-lb.key\"\n", ""), "services[0].quic_lb[0].key_file = absent", "required");
        refused(&BASE.replace("key_file", "algorithm = \"plaintext\"\nkey_file"), "services[0].quic_lb[0].key_file", "no key");
        refused(&BASE.replace("server_id = \"0a02\"", "server_id = \"0a01\""), "services[0].backends[1].endpoints[0].server_id = \"0a01\"", "unique within the service (also at services[0].backends[0].server_id)");
        refused(&BASE.replace("server_id = \"0a02\"", "server_id = \"0a0203\""), "services[0].backends[1].endpoints[0].server_id", "server_id_length = 2");
        refused(&BASE.replace("server_id = \"0a02\"", "server_id = \"zz02\""), "services[0].backends[1].endpoints[0].server_id", "hex digit");
        refused(&BASE.replace("server_id = \"0a02\"\n", ""), "services[0].backends[1].endpoints[0].server_id = absent", "required");
        let two = BASE.replace("[[services.backends]]\nname = \"b1\"", "[[services.quic_lb]]\nconfig_rotation = 0\nserver_id_length = 2\nnonce_length = 8\nalgorithm = \"plaintext\"\n\n[[services.backends]]\nname = \"b1\"");
        refused(&two, "services[0].quic_lb[1].config_rotation = 0", "unique within the service");
        let other_len = two.replace("config_rotation = 0\nserver_id_length = 2\nnonce_length = 8", "config_rotation = 1\nserver_id_length = 3\nnonce_length = 8");
        refused(&other_len, "services[0].quic_lb[1].server_id_length = 3", "must equal");
        load(&two.replace("config_rotation = 0\nserver_id_length = 2\nnonce_length = 8", "config_rotation = 1\nserver_id_length = 2\nnonce_length = 8")).unwrap();
        let no_section = BASE.replace("[[services.quic_lb]]\nconfig_rotation = 0\nserver_id_length = 2\nnonce_length = 6\nkey_file = \"/etc/spillway/quic-lb.key\"\n", "");
        load(&no_section).unwrap();
        refused(&no_section.replace("0a02", "0a0"), "services[0].backends[1].endpoints[0].server_id", "even");
    }

    #[test]
    fn key_file_contents() {
        assert_eq!(key_from_file_contents(b"8f95f09245765f80256934e50c66207f\n").unwrap()[0], 0x8f);
        assert!(key_from_file_contents(b"8f95").unwrap_err().contains("2 octets"));
        assert!(key_from_file_contents(b"\xff\xfe").unwrap_err().contains("not text"));
    }
}
