//! `type = "http"`: `GET <path> HTTP/1.0` with a `Host` header; the status code must equal
//! `expected_status` (default 200) and, with `response`, the body must contain it within
//! the first [`HEALTH_MAX_BODY`] bytes read (spec/backend-selection.md "Health checks").
//! Responses are parsed with `httparse`. The request and the response rules are shared
//! with `type = "https"`.

use super::{shown, Exchange, Step};
use crate::health::Target;
use spillway_shared::config::HEALTH_MAX_BODY;

/// Headers parsed at most; a response with more fails.
const MAX_HEADERS: usize = 64;

/// Request and expectations of an HTTP(S) check.
#[derive(Debug)]
pub struct Plan {
    /// The request bytes.
    pub request: Vec<u8>,
    /// Expected status code.
    pub expected_status: u16,
    /// Substring the body must contain, if any.
    pub response: Option<Vec<u8>>,
}

impl Plan {
    /// The GET request of `target`; `default_port` is the scheme's port, on which the
    /// default `Host` header leaves the port out.
    pub fn new(target: &Target, default_port: u16) -> Plan {
        let c = &target.check;
        let a = target.probe_addr();
        let host = match &c.host {
            Some(h) => h.clone(),
            // RFC 3986 §3.2.2: an IPv6 literal in a Host header is bracketed.
            None if a.port() == default_port && a.is_ipv6() => format!("[{}]", a.ip()),
            None if a.port() == default_port => a.ip().to_string(),
            None => a.to_string(),
        };
        let path = if c.path().is_empty() { "/" } else { c.path() };
        let request =
            format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: spillway-health\r\nConnection: close\r\n\r\n").into_bytes();
        Plan { request, expected_status: c.expected_status(), response: c.response.clone().map(String::into_bytes) }
    }

    /// Judges the response bytes read so far (`eof`: the backend closed): `None` while more
    /// are needed. Succeeds as soon as the status matches when no `response` is expected
    /// (headers need not be complete), else once the body contains it.
    pub fn evaluate(&self, buf: &[u8], eof: bool) -> Option<Result<(), String>> {
        if buf.is_empty() {
            return eof.then(|| Err("connection closed without a response".into()));
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut headers);
        let body_at = match r.parse(buf) {
            Ok(httparse::Status::Complete(n)) => Some(n),
            Ok(httparse::Status::Partial) => None,
            Err(e) => return Some(Err(format!("bad HTTP response: {e} ({:?})", shown(buf)))),
        };
        // The code counts once its status line is complete (`reason` parsed).
        match r.code.filter(|_| r.reason.is_some()) {
            Some(code) if code != self.expected_status => {
                return Some(Err(format!("HTTP status {code} (expected {})", self.expected_status)))
            }
            Some(_) if self.response.is_none() => return Some(Ok(())),
            _ => {}
        }
        let Some(n) = body_at else {
            return if eof {
                Some(Err(format!("connection closed inside the HTTP headers ({:?})", shown(buf))))
            } else if buf.len() >= HEALTH_MAX_BODY {
                Some(Err(format!("HTTP headers longer than {HEALTH_MAX_BODY} bytes")))
            } else {
                None
            };
        };
        let want = self.response.as_deref().unwrap_or_default();
        let body = &buf[n..];
        if body.windows(want.len().max(1)).any(|w| w == want) {
            return Some(Ok(()));
        }
        let length = r
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok());
        if eof || buf.len() >= HEALTH_MAX_BODY || length.is_some_and(|l| body.len() >= l) {
            return Some(Err(format!("HTTP body does not contain {:?} (first {} bytes read)", shown(want), body.len())));
        }
        None
    }
}

/// Advances on readiness: sends the GET, then judges the response ([`Plan::evaluate`]).
pub fn ready(ex: &mut Exchange, plan: &Plan) -> Step {
    ex.ready(&plan.request, false, HEALTH_MAX_BODY, |got, eof| plan.evaluate(got, eof))
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_shared::config::{HealthCheck, HealthCheckKind};
    use std::net::{Ipv4Addr, SocketAddr};

    fn plan(f: impl FnOnce(&mut HealthCheck)) -> Plan {
        let mut check = HealthCheck { kind: HealthCheckKind::Http, ..HealthCheck::default() };
        f(&mut check);
        let t = Target { service: "s".into(), backend: "b".into(), endpoint: "b".into(), addr: SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 8080)), check };
        Plan::new(&t, 80)
    }

    #[test]
    fn request_has_path_and_host() {
        let p = plan(|c| c.path = Some("/healthz".into()));
        assert_eq!(
            String::from_utf8(p.request).unwrap(),
            "GET /healthz HTTP/1.0\r\nHost: 10.0.0.1:8080\r\nUser-Agent: spillway-health\r\nConnection: close\r\n\r\n"
        );
        let p = plan(|c| c.host = Some("web.example".into()));
        assert!(String::from_utf8(p.request).unwrap().contains("\r\nHost: web.example\r\n"));
        let p = plan(|c| c.port = Some(80));
        assert!(String::from_utf8(p.request).unwrap().contains("\r\nHost: 10.0.0.1\r\n"));
    }

    #[test]
    fn status_rules() {
        let p = plan(|_| {});
        assert_eq!(p.evaluate(b"HTTP/1.1 200 OK\r\n", false), Some(Ok(())), "status line is enough");
        assert_eq!(p.evaluate(b"HTTP/1.0 200", false), None, "code without its line end: wait");
        assert_eq!(p.evaluate(b"HTTP/1.0 500 Oops\r\n\r\n", false), Some(Err("HTTP status 500 (expected 200)".into())));
        assert_eq!(p.evaluate(b"", true), Some(Err("connection closed without a response".into())));
        assert_eq!(p.evaluate(b"", false), None);
        let e = p.evaluate(b"SSH-2.0-OpenSSH_9.6\r\n", false).unwrap().unwrap_err();
        assert!(e.starts_with("bad HTTP response: "), "{e}");
        let e = p.evaluate(b"HTTP/1.1 2000 OK\r\n", false).unwrap().unwrap_err();
        assert!(e.starts_with("bad HTTP response: "), "{e}");
        let e = p.evaluate(b"HTTP/1.1", true).unwrap().unwrap_err();
        assert!(e.starts_with("connection closed inside the HTTP headers"), "{e}");
        let p204 = plan(|c| c.expected_status = Some(204));
        assert_eq!(p204.evaluate(b"HTTP/1.1 200 OK\r\n\r\n", true), Some(Err("HTTP status 200 (expected 204)".into())));
    }

    #[test]
    fn body_substring_rules() {
        let p = plan(|c| c.response = Some("\"status\":\"ok\"".into()));
        let head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n";
        assert_eq!(p.evaluate(b"HTTP/1.0 200 OK\r\n", false), None, "headers not complete: wait for the body");
        assert_eq!(p.evaluate(head, false), None);
        let ok = [&head[..], br#"{"status":"ok"}"#].concat();
        assert_eq!(p.evaluate(&ok, false), Some(Ok(())));
        let bad = [&head[..], br#"{"status":"degraded"}"#].concat();
        assert_eq!(p.evaluate(&bad, false), None, "more may come");
        let e = p.evaluate(&bad, true).unwrap().unwrap_err();
        assert_eq!(e, "HTTP body does not contain \"\\\"status\\\":\\\"ok\\\"\" (first 21 bytes read)");
        // Content-Length reached: judged without waiting for the close.
        let sized = [&b"HTTP/1.0 200 OK\r\nContent-Length: 21\r\n\r\n"[..], br#"{"status":"degraded"}"#].concat();
        assert!(p.evaluate(&sized, false).unwrap().is_err());
        // Bounded: a body that never contains it fails at the limit.
        let mut huge = head.to_vec();
        huge.resize(HEALTH_MAX_BODY, b'x');
        assert!(p.evaluate(&huge, false).unwrap().unwrap_err().starts_with("HTTP body does not contain"));
        // A wrong status fails before the body.
        assert!(p.evaluate(b"HTTP/1.0 503 Busy\r\n", false).unwrap().is_err());
    }
}
