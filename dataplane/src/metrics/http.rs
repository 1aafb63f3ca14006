//! The `/metrics` HTTP endpoint of [`super`]: the listener, one short-lived thread per
//! connection, the connection registry that closes idle connections to admit new ones,
//! and the request routing. A child of [`super`].

use super::{to_prometheus_text, CONTENT_TYPE, CONTENT_TYPE_TEXT};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Binds the metrics listener (before the daemon reports ready, so a bad address fails the
/// start with the field named).
pub fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("metrics.listen = \"{addr}\": cannot listen: {e}"))?;
    l.set_nonblocking(true).map_err(|e| format!("metrics.listen: {e}"))?;
    Ok(l)
}

/// Time a connection has from accept to send its request head, and then the longest the
/// answer may stall (no byte taken by the peer); past either it is closed, however it
/// trickles (while it waits for its head it may also be closed sooner, to make room for a
/// new connection: [`MAX_CONNECTIONS`]). An answer that keeps flowing is sent whole if the
/// peer takes it within [`ANSWER_DEADLINE`].
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Longest time a whole answer may take from its request head, however it keeps flowing:
/// 10 s, Prometheus's default `scrape_timeout`, after which the scraper has given up on it
/// anyway. So a client that takes the answer a few bytes at a time, never stalling for
/// [`REQUEST_DEADLINE`], holds a connection (one of [`MAX_CONNECTIONS`], none of which is
/// closed to make room once answering) for 10 s at most.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(10);
/// Connections answered at once (a thread each). A connection accepted while all are taken
/// takes the place of the one that has waited longest since accept without sending a
/// complete request head (which is closed unanswered; one whose request bytes have arrived
/// but are not read yet is not taken); only when there is none, every one having sent its
/// request head and being answered, is it answered `503 Service Unavailable` at once and
/// closed ([`serve`]).
pub const MAX_CONNECTIONS: usize = 16;
/// Most connection threads at once: those of the [`MAX_CONNECTIONS`] connections plus those
/// of connections closed to make room that have not ended yet (they end at once). While
/// there are this many, no connection is accepted (new ones wait in the listen backlog)
/// until one has ended.
const MAX_THREADS: usize = 2 * MAX_CONNECTIONS;
/// Longest a connection thread blocks on its peer before it looks at its deadline and the
/// stop flag again (so a stop ends it within this).
const POLL: Duration = Duration::from_millis(100);
/// Least time between two warnings about refused connections (and between two about
/// connections closed to make room).
const REFUSED_WARN_EVERY: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` (and `GET /` with a pointer to it) until `stop` is set. One
/// request per connection, each answered on its own thread, at most [`MAX_CONNECTIONS`] at
/// once, so a slow, idle or half-open client does not delay another's scrape: each has
/// [`REQUEST_DEADLINE`] from accept for its request head, and the answer may stall no
/// longer, then it is closed; and a connection accepted while all [`MAX_CONNECTIONS`] are
/// open takes the place of the one that has waited longest since accept without sending a
/// complete request head (closed unanswered; a connection whose request bytes have arrived
/// but are not read yet is not taken), so idle connections cannot lock scrapes out. Only
/// when every open connection has sent its request head and is being answered is a new one
/// answered `503` at once. Both are counted and logged (each at most every 10 s). Threads
/// of connections closed to make room end at once; while 2 × [`MAX_CONNECTIONS`]
/// connection threads run, accepting waits for one to end. On `stop` the open connections
/// are dropped and this returns within about [`POLL`]. `body` gives the
/// OpenMetrics exposition, called one at a time and at most once per [`CACHE_FOR`]
/// ([`BodyCache`]: it reads the daemon's state, and concurrent scrapers share one
/// rendering); a client whose `Accept` does
/// not name `application/openmetrics-text` gets it converted to the Prometheus text format
/// 0.0.4 ([`to_prometheus_text`]).
pub fn serve(listener: TcpListener, stop: &AtomicBool, body: impl Fn() -> String + Sync) {
    let registry = ConnRegistry::default();
    let (mut refused, mut warned) = (0u64, None::<Instant>);
    let (mut evicted, mut warned_evicted) = (0u64, None::<Instant>);
    let cache = BodyCache::new(CACHE_FOR);
    let body = |openmetrics: bool| cache.get(openmetrics, &body);
    std::thread::scope(|scope| {
        while !stop.load(Ordering::SeqCst) {
            {
                let conns = registry.conns.lock().unwrap_or_else(|e| e.into_inner());
                if conns.open.len() >= MAX_THREADS {
                    // Threads of connections closed to make room are still ending: accept
                    // once one has (new connections wait in the listen backlog meanwhile).
                    let _ = registry.ended.wait_timeout(conns, POLL);
                    continue;
                }
            }
            match listener.accept() {
                Ok((conn, peer)) => {
                    let accepted = Instant::now();
                    let handle = match conn.try_clone() {
                        Ok(h) => h,
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "metrics: cannot track a connection; answered 503");
                            refuse(conn);
                            continue;
                        }
                    };
                    let admitted = registry.conns.lock().unwrap_or_else(|e| e.into_inner()).admit(peer, accepted, handle);
                    let id = match admitted {
                        Admitted::Free(id) => id,
                        Admitted::InPlaceOf(id, victim, waited) => {
                            evicted += 1;
                            if warned_evicted.is_none_or(|t| t.elapsed() >= REFUSED_WARN_EVERY) {
                                warned_evicted = Some(accepted);
                                tracing::warn!(%peer, closed = %victim, waited_ms = waited.as_millis() as u64, closed_total = evicted, max = MAX_CONNECTIONS, "metrics: all connection slots taken; closed the connection waiting longest for its request head to admit a new one");
                            }
                            id
                        }
                        Admitted::No => {
                            refused += 1;
                            if warned.is_none_or(|t| t.elapsed() >= REFUSED_WARN_EVERY) {
                                warned = Some(accepted);
                                tracing::warn!(%peer, refused_total = refused, max = MAX_CONNECTIONS, "metrics: every connection slot busy answering a request; answered 503");
                            }
                            refuse(conn);
                            continue;
                        }
                    };
                    let tracked = Tracked { id, registry: &registry };
                    let body = &body;
                    let spawned = std::thread::Builder::new().name("metrics-conn".into()).spawn_scoped(scope, move || {
                        if let Err(e) = answer(conn, body, accepted + REQUEST_DEADLINE, stop, || tracked.claim()) {
                            tracing::debug!(%peer, error = %e, "metrics request failed");
                        }
                    });
                    if let Err(e) = spawned {
                        tracing::warn!(%peer, error = %e, "metrics: cannot start a connection thread");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    });
}

/// The open connections, and a signal each time a connection's thread ends.
#[derive(Default)]
struct ConnRegistry {
    conns: Mutex<Conns>,
    ended: std::sync::Condvar,
}

/// The open connections (a thread each), so that a new connection can take the place of
/// one that is only waiting for its request head.
#[derive(Default)]
struct Conns {
    next: u64,
    open: Vec<Open>,
}

/// One open connection of [`Conns`].
struct Open {
    id: u64,
    peer: SocketAddr,
    accepted: Instant,
    phase: Phase,
    /// A handle on the connection's socket: shutting it down ends the thread's wait for the
    /// request head at once.
    socket: TcpStream,
}

/// Where an [`Open`] connection is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Waiting for its request head (none or part of it read): may be closed to make room.
    Head,
    /// Its request head is read; being answered: keeps its slot until done.
    Answering,
    /// Closed to make room; its thread is ending. Holds no slot, but its thread counts in
    /// [`MAX_THREADS`].
    Closed,
}

/// What [`Conns::admit`] did with a new connection.
enum Admitted {
    /// Registered under this id in a free slot.
    Free(u64),
    /// Registered under this id in the place of the connection of this peer, closed after
    /// waiting this long since accept without a complete request head.
    InPlaceOf(u64, SocketAddr, Duration),
    /// Not registered: every slot is answering a request (or, which [`serve`] does not let
    /// happen, [`MAX_THREADS`] threads run).
    No,
}

impl Conns {
    /// Registers a new connection (`socket`: a handle on it) when there is room: a free
    /// slot, or the slot of a connection waiting for its request head, which is then
    /// closed: one of the client address with the most connections waiting for their head,
    /// the longest waiting. A connection whose request bytes have arrived but are not read
    /// yet is not closed: its thread is about to read them.
    fn admit(&mut self, peer: SocketAddr, accepted: Instant, socket: TcpStream) -> Admitted {
        if self.open.len() >= MAX_THREADS {
            return Admitted::No;
        }
        let mut victim = None;
        if self.open.iter().filter(|c| c.phase != Phase::Closed).count() >= MAX_CONNECTIONS {
            // Connections waiting for their head per client address: the victim comes from
            // the address with the most (a flood of idle connections from one host closes
            // its own, not a slow scraper's from another host: fresh-user QA), the longest
            // waiting among them. Connections being answered do not count: a host running
            // several scrapes at once is no flood (review).
            let mut held: std::collections::HashMap<std::net::IpAddr, usize> = std::collections::HashMap::new();
            for c in self.open.iter().filter(|c| c.phase == Phase::Head) {
                *held.entry(c.peer.ip()).or_default() += 1;
            }
            let mut waiting: Vec<&mut Open> = self.open.iter_mut().filter(|c| c.phase == Phase::Head).collect();
            waiting.sort_by_key(|c| (std::cmp::Reverse(held.get(&c.peer.ip()).copied().unwrap_or(0)), c.accepted));
            let Some(c) = waiting.into_iter().find(|c| !unread_bytes(&c.socket)) else { return Admitted::No };
            let _ = c.socket.shutdown(Shutdown::Both);
            c.phase = Phase::Closed;
            victim = Some((c.peer, accepted.saturating_duration_since(c.accepted)));
        }
        self.next += 1;
        let id = self.next;
        self.open.push(Open { id, peer, accepted, phase: Phase::Head, socket });
        match victim {
            Some((p, waited)) => Admitted::InPlaceOf(id, p, waited),
            None => Admitted::Free(id),
        }
    }
}

/// Whether `socket` has received bytes not read yet (end of stream and errors are not).
fn unread_bytes(socket: &TcpStream) -> bool {
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    matches!(recv(socket.as_raw_fd(), &mut [0u8; 1], MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT), Ok(n) if n > 0)
}

/// A connection thread's entry in [`Conns`], removed when dropped (also when the thread
/// could not start or panicked).
struct Tracked<'a> {
    id: u64,
    registry: &'a ConnRegistry,
}

impl Tracked<'_> {
    /// Marks the connection's request head read (it keeps its slot until answered); false
    /// when it was closed to make room.
    fn claim(&self) -> bool {
        let mut conns = self.registry.conns.lock().unwrap_or_else(|e| e.into_inner());
        match conns.open.iter_mut().find(|c| c.id == self.id) {
            Some(c) if c.phase == Phase::Head => {
                c.phase = Phase::Answering;
                true
            }
            _ => false,
        }
    }
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.registry.conns.lock().unwrap_or_else(|e| e.into_inner()).open.retain(|c| c.id != self.id);
        self.registry.ended.notify_all();
    }
}

/// Answers a connection for which there is no room (every slot answering a request, see
/// [`serve`]) `503` without waiting for it: what it sent so far is read (closing on unread
/// data would reset the connection before the answer is read), then one non-blocking
/// write, then close.
fn refuse(mut conn: TcpStream) {
    let text = "too many metrics connections open at once; retry\n";
    let head = format!("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{text}", text.len());
    if conn.set_nonblocking(true).is_ok() {
        let _ = conn.read(&mut [0u8; MAX_HEAD]);
        let _ = conn.write(head.as_bytes());
    }
}

/// Largest request head read, bytes.
const MAX_HEAD: usize = 8192;

/// Reads one request head from `conn` (by `deadline`) and answers it. Once the head is in
/// (whole, or found bad or too large), `claim` is called: false means the connection was
/// closed meanwhile to make room for another ([`serve`]), and it is left unanswered. The
/// bytes that complete the head are only peeked at until then, so [`Conns::admit`] sees
/// them unread and does not take the connection for one waiting for its head.
fn answer(mut conn: TcpStream, body: &impl Fn(bool) -> Arc<str>, deadline: Instant, stop: &AtomicBool, claim: impl FnOnce() -> bool) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    // (Ok((method, path, whether OpenMetrics is accepted)) or the error answer, bytes
    // peeked at and not read yet).
    let (head, peeked) = loop {
        let n = peek_by(&conn, &mut buf[len..], deadline, stop)?;
        if n == 0 {
            return Ok(());
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len + n]) {
            Ok(httparse::Status::Complete(_)) => {
                let om = req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("accept") && String::from_utf8_lossy(h.value).contains("application/openmetrics-text"));
                break (Ok((req.method.unwrap_or("").to_string(), req.path.unwrap_or("").to_string(), om)), n);
            }
            Ok(httparse::Status::Partial) if len + n < MAX_HEAD => {
                // Part of a head: read it (the connection still waits for its head).
                conn.read_exact(&mut buf[len..len + n])?;
                len += n;
            }
            Ok(httparse::Status::Partial) => break (Err(("431 Request Header Fields Too Large", "text/plain", Arc::<str>::from("request head over 8 KiB\n"))), n),
            Err(e) => break (Err(("400 Bad Request", "text/plain", Arc::<str>::from(format!("bad request: {e}\n")))), n),
        }
    };
    if !claim() {
        return Ok(());
    }
    // Read what was peeked at (closing with unread bytes would reset the connection).
    conn.read_exact(&mut buf[len..len + peeked])?;
    let (head_only, (status, ctype, text)) = match head {
        Ok((method, path, om)) => {
            // HEAD: GET's status and headers without its content (RFC 9110 §9.3.2).
            let head_only = method == "HEAD";
            (head_only, route(if head_only { "GET" } else { &method }, &path, om, body))
        }
        Err(error) => (false, error),
    };
    // A 405 names the methods there are (RFC 9110 §15.5.6).
    let allow = if status.starts_with("405") { "Allow: GET, HEAD\r\n" } else { "" };
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n", text.len());
    let until = Instant::now() + ANSWER_DEADLINE;
    write_all_by(&mut conn, head.as_bytes(), stop, until)?;
    if !head_only {
        write_all_by(&mut conn, text.as_bytes(), stop, until)?;
    }
    Ok(())
}

/// Before each blocking read or write on `conn`: an error once `deadline` passed (saying
/// `late`) or `stop` is set, else the socket timeout `set` (read or write) is set to what is left, at most
/// [`POLL`].
fn next_wait(conn: &TcpStream, deadline: Instant, stop: &AtomicBool, set: fn(&TcpStream, Option<Duration>) -> std::io::Result<()>, late: &str) -> std::io::Result<()> {
    if stop.load(Ordering::SeqCst) {
        return Err(std::io::Error::other("the daemon is stopping"));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, late.to_string()));
    }
    set(conn, Some(left.min(POLL)))
}

/// Whether an I/O error is a socket timeout (or an interruption): wait again.
fn again(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted)
}

/// `conn.peek(buf)` (what has arrived, left unread), waiting at most until `deadline` (and
/// no longer than a stop).
fn peek_by(conn: &TcpStream, buf: &mut [u8], deadline: Instant, stop: &AtomicBool) -> std::io::Result<usize> {
    loop {
        next_wait(conn, deadline, stop, TcpStream::set_read_timeout, "request head not in within 2 s of accept")?;
        match conn.peek(buf) {
            Err(e) if again(&e) => continue,
            r => return r,
        }
    }
}

/// `conn.write_all(data)`, or an error once the peer took nothing for [`REQUEST_DEADLINE`],
/// at `until` (the answer's [`ANSWER_DEADLINE`]) or on a stop.
fn write_all_by(conn: &mut TcpStream, mut data: &[u8], stop: &AtomicBool, until: Instant) -> std::io::Result<()> {
    let mut deadline = (Instant::now() + REQUEST_DEADLINE).min(until);
    while !data.is_empty() {
        next_wait(conn, deadline, stop, TcpStream::set_write_timeout, "answer stalled for 2 s, or not taken within 10 s")?;
        match conn.write(data) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                data = &data[n..];
                deadline = (Instant::now() + REQUEST_DEADLINE).min(until);
            }
            Err(e) if again(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Status, content type and content of the answer to `method` (GET; a HEAD is routed as
/// a GET and sent without content) on `path` (a query string is ignored).
fn route(method: &str, path: &str, openmetrics: bool, body: &impl Fn(bool) -> Arc<str>) -> (&'static str, &'static str, Arc<str>) {
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") if openmetrics => ("200 OK", CONTENT_TYPE, body(true)),
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE_TEXT, body(false)),
        ("GET", "/") => ("200 OK", "text/plain", "spillway: metrics at /metrics\n".into()),
        ("GET", _) => ("404 Not Found", "text/plain", format!("no page {path}; metrics are at /metrics\n").into()),
        _ => ("405 Method Not Allowed", "text/plain", format!("method {method} not allowed; use GET (or HEAD) /metrics\n").into()),
    }
}

/// How long a rendered exposition is served to every scraper before the next scrape
/// renders it again: 1 s, under any scrape interval worth having, so no scraper reads
/// data older than a second, and any number of concurrent scrapers cost one rendering.
pub const CACHE_FOR: Duration = Duration::from_secs(1);

/// The last rendered exposition, in both formats (the Prometheus text converted on first
/// demand), shared by every connection for [`CACHE_FOR`]: a scrape renders at most once
/// per interval whatever the number of scrapers, one scraper waiting for another's
/// rendering rather than rendering again; and the memory held is one exposition (plus the
/// copies connections still send, at most [`MAX_CONNECTIONS`]), whatever the number of
/// scrapes.
pub struct BodyCache {
    ttl: Duration,
    cached: Mutex<Option<Cached>>,
}

struct Cached {
    at: Instant,
    openmetrics: Arc<str>,
    text: Option<Arc<str>>,
}

impl BodyCache {
    /// A cache that keeps a rendered exposition for `ttl` (the server's: [`CACHE_FOR`]).
    pub fn new(ttl: Duration) -> BodyCache {
        BodyCache { ttl, cached: Mutex::new(None) }
    }

    /// The exposition (OpenMetrics, or converted to the Prometheus text format 0.0.4
    /// unless `openmetrics`), rendered by `render` unless one rendered within
    /// [`CACHE_FOR`] is kept.
    pub fn get(&self, openmetrics: bool, render: &impl Fn() -> String) -> Arc<str> {
        let mut c = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = c.as_ref().is_some_and(|c| c.at.elapsed() < self.ttl);
        if !fresh {
            *c = None; // the old body is freed before the new one is rendered
            let body: Arc<str> = render().into();
            *c = Some(Cached { at: Instant::now(), openmetrics: body, text: None });
        }
        let c = c.as_mut().expect("filled above");
        if openmetrics {
            return c.openmetrics.clone();
        }
        c.text.get_or_insert_with(|| to_prometheus_text(&c.openmetrics).into()).clone()
    }
}
