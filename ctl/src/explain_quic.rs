//! `spillwayctl explain --quic-dcid HEX`: the QUIC-LB decode of a short-header packet's
//! DCID and the routing decision (draft-ietf-quic-load-balancers-19): offline from the
//! config file (its key files are read), or as the daemon's workers decide it.

use spillway_shared::config::{Persistence, Service};
use spillway_shared::proto::QuicExplain;
use spillway_shared::quic_lb::{codepoint, parse_hex, DecodeError, ServerId};
use spillway_shared::config::service::quic_lb::{key_from_file_contents, QuicLbAlgorithm};

/// The offline decision for `dcid_hex` in `svc`; `up[backend][endpoint]` is the health of
/// each endpoint (the `--health` file). A UDP service keeps a connection on an unhealthy
/// endpoint only with `ALWAYS_PERSIST` (or when every endpoint is unhealthy).
pub fn offline(svc: &Service, up: &[Vec<bool>], dcid_hex: &str) -> Result<QuicExplain, String> {
    let dcid = parse_hex(dcid_hex).map_err(|e| format!("--quic-dcid {dcid_hex:?}: {e}"))?;
    let mut out = QuicExplain { dcid: dcid_hex.to_string(), codepoint: codepoint(&dcid), ..Default::default() };
    if svc.quic_lb.is_empty() {
        out.fallback = Some("no_quic_lb".into());
        out.notes.push("the service has no [[services.quic_lb]]: every packet takes the 5-tuple path".into());
        return Ok(out);
    }
    let Some(entry) = out.codepoint.and_then(|c| svc.quic_lb.iter().find(|q| q.config_rotation == c)) else {
        out.fallback = Some(if dcid.is_empty() { "too_short" } else { "unknown_codepoint" }.into());
        return Ok(out);
    };
    let key = match (&entry.algorithm, &entry.key_file) {
        (QuicLbAlgorithm::Encrypted, Some(path)) => {
            let bytes = std::fs::read(path).map_err(|e| format!("key_file = {path}: {e}"))?;
            Some(key_from_file_contents(&bytes).map_err(|e| format!("key_file = {path}: {e}"))?)
        }
        _ => None,
    };
    let cfg = entry.codec(key)?;
    out.config = Some(format!("config_rotation {}: server_id_length {}, nonce_length {}, {}", cfg.codepoint(), cfg.server_id_len(), cfg.nonce_len(), cfg.algorithm()));
    let sid = match cfg.decode(&dcid) {
        Ok(s) => s,
        Err(DecodeError::TooShort { need, got }) => {
            out.fallback = Some("too_short".into());
            out.notes.push(format!("the DCID has {got} octets, the configuration needs {need}"));
            return Ok(out);
        }
        Err(DecodeError::OtherCodepoint(_)) => {
            out.fallback = Some("unknown_codepoint".into());
            return Ok(out);
        }
    };
    out.server_id = Some(sid.to_string());
    let found = svc.backends.iter().enumerate().find_map(|(bi, b)| {
        b.members().into_iter().enumerate().find(|(_, m)| m.server_id.as_deref().and_then(|h| ServerId::from_hex(h).ok()) == Some(sid)).map(|(ei, m)| (bi, ei, b.name.clone(), m.name))
    });
    let Some((bi, ei, backend, endpoint)) = found else {
        out.fallback = Some("unknown_server_id".into());
        return Ok(out);
    };
    out.backend = Some(backend);
    out.endpoint = Some(endpoint);
    let healthy = up.get(bi).and_then(|r| r.get(ei)).copied().unwrap_or(true);
    let all_down = up.iter().flatten().all(|u| !u);
    if !healthy {
        if svc.connection_persistence_on_unhealthy_backends == Persistence::ALWAYS_PERSIST || all_down {
            out.notes.push("the endpoint is unhealthy; kept (ALWAYS_PERSIST, or every endpoint is unhealthy: last resort)".into());
        } else {
            out.notes.push("the endpoint is unhealthy and the service does not persist on unhealthy backends (UDP default)".into());
            out.fallback = Some("not_eligible".into());
        }
    }
    Ok(out)
}

/// The text block of a QUIC-LB decision.
pub fn render(q: &QuicExplain) -> String {
    let mut o = format!("quic-lb: dcid {}", q.dcid);
    if let Some(c) = q.codepoint {
        o += &format!(" codepoint {c}");
    }
    o.push('\n');
    if let Some(c) = &q.config {
        o += &format!("  config: {c}\n");
    }
    if let Some(s) = &q.server_id {
        o += &format!("  server ID: {s}\n");
    }
    for n in &q.notes {
        o += &format!("  - {n}\n");
    }
    let to = match (&q.backend, &q.endpoint) {
        (Some(b), Some(e)) if b != e => format!("backend {b} endpoint {e}"),
        (Some(b), _) => format!("backend {b}"),
        _ => String::new(),
    };
    match &q.fallback {
        None => o += &format!("  short-header packets -> {to} (routed by the server ID; long-header packets take the 5-tuple path below)\n"),
        Some(r) => o += &format!("  short-header packets -> 5-tuple path (fallback: {r}); see the pick below\n"),
    }
    o
}
