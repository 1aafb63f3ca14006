//! `type = "udp"`: `udp_request` is sent on a connected UDP socket; any datagram received
//! that starts with `udp_expect` succeeds (any datagram at all when `udp_expect` is
//! empty). An ICMP port unreachable (`ECONNREFUSED` on the connected socket) fails at once
//! (spec/backend-selection.md "Health checks").

use super::{shown, Step};
use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};
use socket2::{Domain, Socket, Type};
use spillway_shared::config::HealthCheck;
use std::io;
use std::net::SocketAddr;

/// Payloads of a UDP check.
#[derive(Debug)]
pub struct Plan {
    request: Vec<u8>,
    expect: Vec<u8>,
}

impl Plan {
    /// From `check.udp_request` / `check.udp_expect`.
    pub fn new(check: &HealthCheck) -> Plan {
        Plan { request: check.udp_request().as_bytes().to_vec(), expect: check.udp_expect().as_bytes().to_vec() }
    }
}

/// One UDP probe in flight.
#[derive(Debug)]
pub struct Probe {
    socket: UdpSocket,
}

impl Probe {
    /// Opens a non-blocking socket connected to `addr`, sends the request and registers
    /// for the answer.
    pub fn start(plan: &Plan, addr: SocketAddr, registry: &Registry, token: Token) -> io::Result<Probe> {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM.nonblocking(), None)?;
        s.connect(&addr.into())?;
        let mut socket = UdpSocket::from_std(std::net::UdpSocket::from(s));
        socket.send(&plan.request)?;
        registry.register(&mut socket, token, Interest::READABLE)?;
        Ok(Probe { socket })
    }

    /// Advances on readiness.
    pub fn ready(&mut self, plan: &Plan) -> Step {
        let mut b = [0u8; 2048];
        loop {
            return match self.socket.recv(&mut b) {
                Ok(n) if b[..n].starts_with(&plan.expect) => Step::Done(Ok(())),
                Ok(n) => Step::Done(Err(format!(
                    "UDP answer {:?} does not start with {:?}",
                    shown(&b[..n]),
                    String::from_utf8_lossy(&plan.expect)
                ))),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if super::would_block(&e) => Step::Pending,
                Err(e) => Step::Done(Err(format!("recv: {e}"))),
            };
        }
    }
}
