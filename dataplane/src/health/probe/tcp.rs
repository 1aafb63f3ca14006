//! `type = "tcp"`: the TCP connect completes; with `request`, it is sent once connected;
//! with `response`, the first bytes the backend sends must start with it (spec/
//! backend-selection.md "Health checks"; the payload options follow the cloud TCP checks).
//! The socket is closed with a RST (`SO_LINGER` 0).

use super::{shown, Exchange, Step};
use spillway_shared::config::HealthCheck;

/// Payloads of a TCP check.
#[derive(Debug, Default)]
pub struct Plan {
    request: Vec<u8>,
    response: Vec<u8>,
}

impl Plan {
    /// From `check.request` / `check.response` (both optional).
    pub fn new(check: &HealthCheck) -> Plan {
        Plan {
            request: check.request.clone().unwrap_or_default().into_bytes(),
            response: check.response.clone().unwrap_or_default().into_bytes(),
        }
    }
}

/// Advances on readiness: done once connected and `request` sent, or once the answer
/// starts with `response` when one is expected.
pub fn ready(ex: &mut Exchange, plan: &Plan) -> Step {
    let want = &plan.response;
    ex.ready(&plan.request, want.is_empty(), want.len(), |got, eof| {
        if !want.starts_with(got) {
            return Some(Err(format!("TCP answer {:?} does not start with {:?}", shown(got), shown(want))));
        }
        if got.len() == want.len() {
            return Some(Ok(()));
        }
        eof.then(|| Err(format!("connection closed after {} bytes; expected an answer starting with {:?}", got.len(), shown(want))))
    })
}
