//! Probe kinds, one file each: what a probe sends, what it expects, and the non-blocking
//! state machine that gets there. A [`Plan`] is computed once per target (request bytes,
//! expectations, TLS config); a [`Probe`] is one attempt in flight, driven by readiness
//! events from the driver's `mio` poll. Probes never block and never sleep; the driver
//! enforces the timeout. May use: std, mio, socket2, httparse, rustls, the config types.
//!
//! Readiness is edge-triggered: on every event a probe reads and writes until the kernel
//! says `WouldBlock`, or until it has its answer.

pub mod http;
pub mod https;
pub mod tcp;
pub mod udp;

use super::Target;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use socket2::{Domain, Socket, Type};
use spillway_shared::config::HealthCheckKind;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// What one target's probes do; immutable while the target is unchanged.
#[derive(Debug)]
pub enum Plan {
    /// `type = "tcp"`.
    Tcp(tcp::Plan),
    /// `type = "http"`.
    Http(http::Plan),
    /// `type = "https"`.
    Https(https::Plan),
    /// `type = "udp"`.
    Udp(udp::Plan),
}

impl Plan {
    /// The plan of `target`; TLS configs come from `tls` (built once per checker).
    pub fn new(target: &Target, tls: &mut https::TlsConfigs) -> Plan {
        match target.check.kind {
            HealthCheckKind::Tcp => Plan::Tcp(tcp::Plan::new(&target.check)),
            HealthCheckKind::Http => Plan::Http(http::Plan::new(target, 80)),
            HealthCheckKind::Https => Plan::Https(https::Plan::new(target, tls)),
            HealthCheckKind::Udp => Plan::Udp(udp::Plan::new(&target.check)),
        }
    }
}

/// Where a probe stands after an event.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Waiting for more readiness.
    Pending,
    /// Finished: `Ok` = the success condition was met, `Err` = the failure reason.
    Done(Result<(), String>),
}

/// One probe in flight.
#[derive(Debug)]
pub enum Probe {
    /// TCP connect (and optional request/response).
    Tcp(Exchange),
    /// HTTP/1.0 GET.
    Http(Exchange),
    /// HTTP/1.0 GET over TLS.
    Https(Box<https::Probe>),
    /// UDP request/answer.
    Udp(udp::Probe),
}

impl Probe {
    /// Opens the socket (non-blocking), starts the connect (for UDP: sends the request)
    /// and registers it with `registry` under `token`. An error here is either a local
    /// shortage (see [`super::is_local_error`]) or the backend's failure.
    pub fn start(plan: &Plan, addr: SocketAddr, registry: &Registry, token: Token) -> io::Result<Probe> {
        Ok(match plan {
            Plan::Tcp(_) => Probe::Tcp(Exchange::start(addr, registry, token)?),
            Plan::Http(_) => Probe::Http(Exchange::start(addr, registry, token)?),
            Plan::Https(p) => Probe::Https(Box::new(https::Probe::start(p, addr, registry, token)?)),
            Plan::Udp(p) => Probe::Udp(udp::Probe::start(p, addr, registry, token)?),
        })
    }

    /// What the probe is waiting for, for timeout reasons (`"connecting"`, `"TLS
    /// handshake"`, `"waiting for the response"`, ...).
    pub fn stage(&self) -> String {
        match self {
            Probe::Tcp(p) | Probe::Http(p) => p.stage(),
            Probe::Https(p) => p.stage(),
            Probe::Udp(_) => "waiting for the answer".into(),
        }
    }

    /// Advances on a readiness event.
    pub fn ready(&mut self, plan: &Plan) -> Step {
        match (self, plan) {
            (Probe::Tcp(p), Plan::Tcp(plan)) => tcp::ready(p, plan),
            (Probe::Http(p), Plan::Http(plan)) => http::ready(p, plan),
            (Probe::Https(p), Plan::Https(plan)) => p.ready(plan),
            (Probe::Udp(p), Plan::Udp(plan)) => p.ready(plan),
            _ => Step::Done(Err("internal: probe and plan of different kinds".into())),
        }
    }
}

/// A plain TCP exchange, the part the `tcp` and `http` probes share: connect, send the
/// request, then read what the backend answers until the kind's rule (`judge`) decides.
#[derive(Debug)]
pub struct Exchange {
    stream: TcpStream,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    Connecting,
    Sending { off: usize },
    Reading { got: Vec<u8> },
}

impl Exchange {
    /// Starts the non-blocking connect.
    pub(crate) fn start(addr: SocketAddr, registry: &Registry, token: Token) -> io::Result<Exchange> {
        Ok(Exchange { stream: connect_tcp(addr, registry, token)?, phase: Phase::Connecting })
    }

    /// What the exchange waits for (see [`Probe::stage`]).
    pub(crate) fn stage(&self) -> String {
        match &self.phase {
            Phase::Connecting => "connecting".into(),
            Phase::Sending { .. } => "sending the request".into(),
            Phase::Reading { got } => reading_stage(got.len()),
        }
    }

    /// Advances on readiness: connects, sends `request` (done right after it when
    /// `done_after_send`), then reads at most `read_limit` bytes and asks `judge(got, eof)`,
    /// which returns the result once it can tell (`None`: read more).
    pub(crate) fn ready(&mut self, request: &[u8], done_after_send: bool, read_limit: usize, mut judge: impl FnMut(&[u8], bool) -> Option<Result<(), String>>) -> Step {
        loop {
            match &mut self.phase {
                Phase::Connecting => match connect_done(&self.stream) {
                    Ok(true) => self.phase = Phase::Sending { off: 0 },
                    Ok(false) => return Step::Pending,
                    Err(reason) => return Step::Done(Err(reason)),
                },
                Phase::Sending { off } => match write_some(&mut self.stream, request, off) {
                    Ok(true) if done_after_send => return Step::Done(Ok(())),
                    Ok(true) => self.phase = Phase::Reading { got: Vec::new() },
                    Ok(false) => return Step::Pending,
                    Err(reason) => return Step::Done(Err(reason)),
                },
                Phase::Reading { got } => {
                    let eof = match read_some(&mut self.stream, got, read_limit) {
                        Ok(eof) => eof,
                        Err(reason) => return Step::Done(Err(reason)),
                    };
                    return match judge(got, eof) {
                        Some(r) => Step::Done(r),
                        None => Step::Pending,
                    };
                }
            }
        }
    }
}

/// A non-blocking TCP socket with `SO_LINGER` 0 (its close sends a RST, so probing
/// leaves no `TIME_WAIT` behind) and a connect in progress, registered for both
/// directions.
pub(crate) fn connect_tcp(addr: SocketAddr, registry: &Registry, token: Token) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking(), None)?;
    s.set_linger(Some(Duration::ZERO))?;
    match s.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let mut stream = TcpStream::from_std(std::net::TcpStream::from(s));
    registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
    Ok(stream)
}

/// Whether the connect of `s` completed: `Ok(true)` connected, `Ok(false)` still in
/// progress, `Err` with the reason (e.g. `connect: Connection refused (os error 111)`).
pub(crate) fn connect_done(s: &TcpStream) -> Result<bool, String> {
    match s.take_error() {
        Ok(Some(e)) | Err(e) => return Err(format!("connect: {e}")),
        Ok(None) => {}
    }
    match s.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(format!("connect: {e}")),
    }
}

/// Writes `buf[*off..]` until done or `WouldBlock`: `Ok(true)` when all was written.
pub(crate) fn write_some(w: &mut impl Write, buf: &[u8], off: &mut usize) -> Result<bool, String> {
    while *off < buf.len() {
        match w.write(&buf[*off..]) {
            Ok(0) => return Err("send: connection closed".into()),
            Ok(n) => *off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) => return Err(format!("send: {e}")),
        }
    }
    Ok(true)
}

/// Reads into `out` until `WouldBlock`, EOF or `limit` bytes in `out`: returns whether
/// EOF was seen.
pub(crate) fn read_some(r: &mut impl Read, out: &mut Vec<u8>, limit: usize) -> Result<bool, String> {
    let mut b = [0u8; 4096];
    while out.len() < limit {
        let want = (limit - out.len()).min(b.len());
        match r.read(&mut b[..want]) {
            Ok(0) => return Ok(true),
            Ok(n) => out.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) => return Err(format!("recv: {e}")),
        }
    }
    Ok(false)
}

/// `WouldBlock`: nothing more until the next readiness event.
pub(crate) fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// "waiting for the response", or how much of it came, for timeout reasons.
pub(crate) fn reading_stage(got: usize) -> String {
    if got == 0 {
        "waiting for the response".into()
    } else {
        format!("reading the response, {got} bytes so far")
    }
}

/// Up to 64 bytes of `b`, for failure reasons.
pub(crate) fn shown(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned()
}
