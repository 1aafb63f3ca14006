//! `type = "tcp"`: the TCP connect completes; with `request`, it is sent once connected;
//! with `response`, the first bytes the backend sends must start with it (spec/
//! backend-selection.md "Health checks"; the payload options follow the cloud TCP checks).
//! The socket is closed with a RST (`SO_LINGER` 0).

use super::{connect_done, connect_tcp, read_some, shown, write_some, Step};
use mio::net::TcpStream;
use mio::{Registry, Token};
use spillway_shared::config::HealthCheck;
use std::io;
use std::net::SocketAddrV4;

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

#[derive(Debug)]
enum Phase {
    Connecting,
    Sending { off: usize },
    Reading { got: Vec<u8> },
}

/// One TCP probe in flight.
#[derive(Debug)]
pub struct Probe {
    stream: TcpStream,
    phase: Phase,
}

impl Probe {
    /// Starts the non-blocking connect.
    pub fn start(addr: SocketAddrV4, registry: &Registry, token: Token) -> io::Result<Probe> {
        Ok(Probe { stream: connect_tcp(addr, registry, token)?, phase: Phase::Connecting })
    }

    /// What the probe waits for (see [`super::Probe::stage`]).
    pub fn stage(&self) -> String {
        match &self.phase {
            Phase::Connecting => "connecting".into(),
            Phase::Sending { .. } => "sending the request".into(),
            Phase::Reading { got } => super::reading_stage(got.len()),
        }
    }

    /// Advances on readiness.
    pub fn ready(&mut self, plan: &Plan) -> Step {
        match self.advance(plan) {
            Ok(true) => Step::Done(Ok(())),
            Ok(false) => Step::Pending,
            Err(reason) => Step::Done(Err(reason)),
        }
    }

    fn advance(&mut self, plan: &Plan) -> Result<bool, String> {
        loop {
            match &mut self.phase {
                Phase::Connecting => {
                    if !connect_done(&self.stream)? {
                        return Ok(false);
                    }
                    self.phase = Phase::Sending { off: 0 };
                }
                Phase::Sending { off } => {
                    if !write_some(&mut self.stream, &plan.request, off)? {
                        return Ok(false);
                    }
                    if plan.response.is_empty() {
                        return Ok(true);
                    }
                    self.phase = Phase::Reading { got: Vec::new() };
                }
                Phase::Reading { got } => {
                    let eof = read_some(&mut self.stream, got, plan.response.len())?;
                    if !plan.response.starts_with(got) {
                        return Err(format!("TCP answer {:?} does not start with {:?}", shown(got), shown(&plan.response)));
                    }
                    if got.len() == plan.response.len() {
                        return Ok(true);
                    }
                    if eof {
                        return Err(format!(
                            "connection closed after {} bytes; expected an answer starting with {:?}",
                            got.len(),
                            shown(&plan.response)
                        ));
                    }
                    return Ok(false);
                }
            }
        }
    }
}
