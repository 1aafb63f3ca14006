//! The `/metrics` HTTP endpoint of [`super`]: hyper's HTTP/1 server on a current-thread
//! tokio runtime confined to the metrics thread (one task per connection), the admission
//! of connections (at most [`MAX_CONNECTIONS`]; one still waiting for its request head is
//! closed to make room for a new one), the request routing, and the body cache, rendered
//! on a thread of its own. A child of [`super`]. Why hyper: docs/decisions.md.

use super::{to_prometheus_text, CONTENT_TYPE, CONTENT_TYPE_TEXT};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};

/// Binds the metrics listener (before the daemon reports ready, so a bad address fails the
/// start with the field named).
pub fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("metrics.listen = \"{addr}\": cannot listen: {e}"))?;
    l.set_nonblocking(true).map_err(|e| format!("metrics.listen: {e}"))?;
    Ok(l)
}

/// Time a connection has from accept to send its whole request head (hyper's
/// `header_read_timeout`: bytes trickling in do not extend it), and then the longest the
/// answer may stall (no byte taken by the peer: a `tokio-io-timeout` write timeout); past
/// either it is closed, unanswered in the first case (while it waits for its head it may
/// also be closed sooner, to make room for a new connection: [`MAX_CONNECTIONS`]). An
/// answer that keeps flowing is sent whole if the peer takes it within [`ANSWER_DEADLINE`].
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Longest time a whole answer may take from the moment it is ready, however it keeps
/// flowing: 10 s, Prometheus's default `scrape_timeout`, after which the scraper has given
/// up on it anyway. So a client that takes the answer a few bytes at a time, never
/// stalling for [`REQUEST_DEADLINE`], holds a connection (one of [`MAX_CONNECTIONS`],
/// none of which is closed to make room once answering) for 10 s at most.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(10);
/// Connections open at once. A connection accepted while all are taken takes the place of
/// one waiting for its complete request head (closed unanswered; one whose request bytes
/// have arrived but are not read yet is not taken: [`Conns::admit`]); only when there is
/// none, every one having sent its request head and being answered, is it answered
/// `503 Service Unavailable` at once and closed ([`serve`]).
pub const MAX_CONNECTIONS: usize = 16;
/// Largest request head, bytes (hyper's `max_buf_size`, at its least): a larger one is
/// answered `431 Request Header Fields Too Large`.
const MAX_HEAD: usize = 8192;
/// Most header fields in a request head: more are answered `431` (hyper's `max_headers`).
const MAX_HEADERS: usize = 32;
/// Most bytes of an answer queued in a connection's socket and not sent yet, bytes
/// (`TCP_NOTSENT_LOWAT`, tcp(7)): a write waits for the peer once this much is queued, and
/// goes on once it has taken half of it, which measures a stall ([`REQUEST_DEADLINE`]) in
/// 64 KiB of progress, not in the send buffer's megabytes. Bytes in flight do not count,
/// so it does not slow a fast scraper.
const UNSENT_AT_MOST: u32 = 128 << 10;
/// How often the accept loop looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// Least time between two warnings about refused connections (and between two about
/// connections closed to make room).
const REFUSED_WARN_EVERY: Duration = Duration::from_secs(10);

/// What [`serve`] did with the connections it accepted, counted from its start to its stop
/// (each is also logged: refusals and closings to make room as warnings, at most one of
/// each kind every 10 s, with the count so far; deadlines at debug level).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// Connections answered `503` at once: all [`MAX_CONNECTIONS`] were answering.
    pub refused: u64,
    /// Connections closed unanswered, while waiting for their request head, to make room
    /// for a new one.
    pub closed_for_room: u64,
    /// Connections closed at a deadline: no complete request head within
    /// [`REQUEST_DEADLINE`] of accept, or an answer that stalled that long or was not
    /// taken within [`ANSWER_DEADLINE`].
    pub timed_out: u64,
}

/// A request for the exposition (OpenMetrics or not) and where to send it.
type Render = (bool, oneshot::Sender<Arc<str>>);

/// Serves `GET /metrics` (and `GET /` with a pointer to it; `HEAD` of both) until `stop` is
/// set, then returns the counts of [`Served`]. The HTTP/1 side is hyper's, one request per
/// connection (`Connection: close`), every connection a task of a current-thread tokio
/// runtime on this thread, so a slow, idle or half-open client does not delay another's
/// scrape: each has [`REQUEST_DEADLINE`] from accept for its request head (at most
/// 8 KiB and 32 header fields, else `431`; an unparsable one gets `400`), and the answer
/// may stall no longer, nor take longer than [`ANSWER_DEADLINE`], then it is closed. At
/// most [`MAX_CONNECTIONS`] are open: a connection accepted while all are open takes the
/// place of one waiting for its complete request head ([`Conns::admit`]: the client
/// address with the most such connections, the longest waiting; closed unanswered), so
/// idle connections cannot lock scrapes out. Only when every open connection is being
/// answered is a new one answered `503` at once. Both are counted and logged (each at most
/// every 10 s). A connection closed to make room ends before the next accept. On `stop`
/// the open connections are dropped and this returns within about [`POLL`] (and the end
/// of a rendering under way). `body` gives the OpenMetrics exposition; it runs on a
/// thread of its own (`metrics-render`), one call at a time and at most once per
/// [`CACHE_FOR`] ([`BodyCache`]: it reads the daemon's state, and concurrent scrapers
/// share one rendering); a client whose `Accept` does not name
/// `application/openmetrics-text` gets it converted to the Prometheus text format 0.0.4
/// ([`to_prometheus_text`]).
pub fn serve(listener: TcpListener, stop: &AtomicBool, body: impl Fn() -> String + Sync) -> Served {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "metrics: cannot start the HTTP server's runtime; no metrics served");
            return Served::default();
        }
    };
    let cache = BodyCache::new(CACHE_FOR);
    let (renders, wanted) = mpsc::channel::<Render>();
    std::thread::scope(|scope| {
        let (cache, body) = (&cache, &body);
        let renderer = std::thread::Builder::new().name("metrics-render".into()).spawn_scoped(scope, move || {
            // (nothing is rendered for a connection that has ended meanwhile)
            for (openmetrics, reply) in wanted.iter().filter(|(_, reply)| !reply.is_closed()) {
                let _ = reply.send(cache.get(openmetrics, body));
            }
        });
        if let Err(e) = renderer {
            tracing::error!(error = %e, "metrics: cannot start the render thread; no metrics served");
            return Served::default();
        }
        let served = runtime.block_on(accept(listener, stop, renders));
        // Ends every connection task, closing its socket and dropping its sender of
        // `renders`: the render thread then ends too.
        drop(runtime);
        served
    })
}

/// The accept loop of [`serve`]: admits each connection ([`Conns::admit`]) and spawns its
/// task ([`connection`]), or answers it `503`; returns the counts once `stop` is set.
async fn accept(listener: TcpListener, stop: &AtomicBool, renders: mpsc::Sender<Render>) -> Served {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "metrics: cannot register the listener; no metrics served");
            return Served::default();
        }
    };
    let conns = Arc::new(Mutex::new(Conns::default()));
    let (mut warned_refused, mut warned_closed) = (None::<Instant>, None::<Instant>);
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::SeqCst) {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = tick.tick() => continue,
        };
        let accepted = Instant::now();
        let (close, closed) = oneshot::channel();
        let (admitted, served) = {
            let mut c = lock(&conns);
            (c.admit(peer, accepted, stream.as_raw_fd(), close), c.served)
        };
        let id = match admitted {
            Admitted::Free(id) => id,
            Admitted::InPlaceOf(id, victim, waited) => {
                if warned_closed.is_none_or(|t: Instant| t.elapsed() >= REFUSED_WARN_EVERY) {
                    warned_closed = Some(accepted);
                    tracing::warn!(%peer, closed = %victim, waited_ms = waited.as_millis() as u64, closed_total = served.closed_for_room, max = MAX_CONNECTIONS, "metrics: all connection slots taken; closed the connection waiting longest for its request head to admit a new one");
                }
                id
            }
            Admitted::No => {
                if warned_refused.is_none_or(|t: Instant| t.elapsed() >= REFUSED_WARN_EVERY) {
                    warned_refused = Some(accepted);
                    tracing::warn!(%peer, refused_total = served.refused, max = MAX_CONNECTIONS, "metrics: every connection slot busy answering a request; answered 503");
                }
                refuse(&stream);
                continue;
            }
        };
        tokio::spawn(connection(stream, peer, Tracked { id, conns: conns.clone() }, closed, renders.clone()));
        // A connection closed to make room ends (its task wakes and drops its socket)
        // before the next accept, so closed ones never pile up.
        tokio::task::yield_now().await;
    }
    let served = lock(&conns).served;
    served
}

/// Serves one connection with hyper until it is answered, a deadline passes
/// ([`REQUEST_DEADLINE`], [`ANSWER_DEADLINE`]) or it is closed to make room (`closed`:
/// its sender dropped by [`Conns::admit`]).
async fn connection(stream: tokio::net::TcpStream, peer: SocketAddr, tracked: Tracked, closed: oneshot::Receiver<()>, renders: mpsc::Sender<Render>) {
    // The answer may stall for REQUEST_DEADLINE at most: no write may wait that long for
    // room. Room is signalled once the bytes not sent yet fall to half of UNSENT_AT_MOST,
    // rather than a third of the send buffer (megabytes): so the peer taking 64 KiB
    // resets the wait, and a slow but steady reader is not taken for a stalled one.
    if let Err(e) = socket2::SockRef::from(&stream).set_tcp_notsent_lowat(UNSENT_AT_MOST) {
        tracing::debug!(%peer, error = %e, "metrics: cannot set TCP_NOTSENT_LOWAT");
    }
    let mut io = tokio_io_timeout::TimeoutWriter::new(stream);
    io.set_timeout(Some(REQUEST_DEADLINE));
    let answered = Notify::new();
    let service = hyper::service::service_fn(|request| {
        // Its request head is in: the connection keeps its slot until answered.
        tracked.claim();
        respond(request, &renders, &answered)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_DEADLINE)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD)
        .max_headers(MAX_HEADERS)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(Box::pin(io)), service);
    let answer_deadline = async {
        answered.notified().await;
        tokio::time::sleep(ANSWER_DEADLINE).await;
    };
    tokio::select! {
        biased;
        _ = closed => {} // closed to make room (counted and logged by the accept loop)
        _ = answer_deadline => {
            tracked.timed_out();
            tracing::debug!(%peer, "metrics answer not taken within 10 s; closed");
        }
        done = conn => if let Err(e) = done {
            if is_timeout(&e) {
                tracked.timed_out();
            }
            tracing::debug!(%peer, error = %e, "metrics request failed");
        }
    }
}

/// Whether hyper ended a connection at a deadline: its header read timeout, or the write
/// timeout of the connection's stream.
fn is_timeout(e: &hyper::Error) -> bool {
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    e.is_timeout() || io.is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

/// The answer to one request: the exposition for `GET /metrics` (OpenMetrics when the
/// `Accept` header names it, else the Prometheus text format 0.0.4), a pointer to it for
/// `GET /`, `404` for any other path, `405` (naming `GET, HEAD`, RFC 9110 §15.5.6) for
/// any other method. A `HEAD` gets its `GET`'s status and headers, and hyper sends no
/// content (RFC 9110 §9.3.2). `answered` is notified once the answer is ready (the start
/// of [`ANSWER_DEADLINE`]).
async fn respond(request: Request<Incoming>, renders: &mpsc::Sender<Render>, answered: &Notify) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let openmetrics = request.headers().get_all(ACCEPT).iter().any(|v| String::from_utf8_lossy(v.as_bytes()).contains("application/openmetrics-text"));
    let (status, content_type, content) = match route(request.method(), request.uri().path()) {
        Page::Metrics => match render(renders, openmetrics).await {
            Some(body) => (StatusCode::OK, if openmetrics { CONTENT_TYPE } else { CONTENT_TYPE_TEXT }, Bytes::from_owner(Exposition(body))),
            None => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", Bytes::from_static(b"metrics not available: the daemon is stopping\n")),
        },
        Page::Text(status, text) => (status, "text/plain", Bytes::from(text)),
    };
    let mut answer = Response::new(Full::new(content));
    *answer.status_mut() = status;
    answer.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        answer.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    answered.notify_one();
    Ok(answer)
}

/// What a request asks for ([`route`]).
enum Page {
    /// The exposition.
    Metrics,
    /// A fixed text answer with this status.
    Text(StatusCode, String),
}

/// The page for `method` on `path` (without its query string): `/metrics` and `/` for GET
/// and HEAD, `404` for another path, `405` for another method.
fn route(method: &Method, path: &str) -> Page {
    match (method == Method::GET || method == Method::HEAD, path) {
        (true, "/metrics") => Page::Metrics,
        (true, "/") => Page::Text(StatusCode::OK, "spillway: metrics at /metrics\n".into()),
        (true, _) => Page::Text(StatusCode::NOT_FOUND, format!("no page {path}; metrics are at /metrics\n")),
        (false, _) => Page::Text(StatusCode::METHOD_NOT_ALLOWED, format!("method {method} not allowed; use GET (or HEAD) /metrics\n")),
    }
}

/// The exposition from the render thread of [`serve`]; `None` when it has ended (the
/// server is stopping).
async fn render(renders: &mpsc::Sender<Render>, openmetrics: bool) -> Option<Arc<str>> {
    let (reply, rendered) = oneshot::channel();
    renders.send((openmetrics, reply)).ok()?;
    rendered.await.ok()
}

/// A cached exposition as an answer's content, shared, not copied ([`BodyCache`]).
struct Exposition(Arc<str>);

impl AsRef<[u8]> for Exposition {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Answers a connection for which there is no room (every slot answering a request, see
/// [`serve`]) `503` without waiting for its request: what it sent so far is read (closing
/// on unread data would reset the connection before the answer is read), then one
/// non-blocking write; dropping it closes it.
fn refuse(stream: &tokio::net::TcpStream) {
    let text = "too many metrics connections open at once; retry\n";
    let head = format!("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{text}", text.len());
    let _ = stream.try_read(&mut [0u8; MAX_HEAD]);
    let _ = stream.try_write(head.as_bytes());
}

/// The open connections and the counts of [`Served`], shared by the accept loop and the
/// connection tasks (all on the metrics thread).
#[derive(Default)]
struct Conns {
    next: u64,
    open: Vec<Open>,
    served: Served,
}

/// One open connection of [`Conns`].
struct Open {
    id: u64,
    peer: SocketAddr,
    accepted: Instant,
    phase: Phase,
    /// The connection's socket, to see whether request bytes wait unread in it: valid
    /// while the entry is there (its task removes it as it drops the socket).
    fd: RawFd,
    /// Dropping it ends the connection's task (closing it to make room).
    close: Option<oneshot::Sender<()>>,
}

/// Where an [`Open`] connection is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Waiting for its request head (none or part of it read): may be closed to make room.
    Head,
    /// Its request head is read; being answered: keeps its slot until done.
    Answering,
    /// Closed to make room; its task is ending. Holds no slot.
    Closed,
}

/// What [`Conns::admit`] did with a new connection.
enum Admitted {
    /// Registered under this id in a free slot.
    Free(u64),
    /// Registered under this id in the place of the connection of this peer, closed after
    /// waiting this long since accept without a complete request head.
    InPlaceOf(u64, SocketAddr, Duration),
    /// Not registered (counted as refused): every slot is answering a request.
    No,
}

impl Conns {
    /// Registers a new connection (`fd`: its socket; `close`: dropped to close it) when
    /// there is room: a free slot, or the slot of a connection waiting for its request
    /// head, which is then closed: one of the client address with the most connections
    /// waiting for their head, the longest waiting. A connection whose request bytes have
    /// arrived but are not read yet is not closed: its task is about to read them.
    fn admit(&mut self, peer: SocketAddr, accepted: Instant, fd: RawFd, close: oneshot::Sender<()>) -> Admitted {
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
            let Some(c) = waiting.into_iter().find(|c| !unread_bytes(c.fd)) else {
                self.served.refused += 1;
                return Admitted::No;
            };
            c.close = None;
            c.phase = Phase::Closed;
            victim = Some((c.peer, accepted.saturating_duration_since(c.accepted)));
            self.served.closed_for_room += 1;
        }
        self.next += 1;
        let id = self.next;
        self.open.push(Open { id, peer, accepted, phase: Phase::Head, fd, close: Some(close) });
        match victim {
            Some((p, waited)) => Admitted::InPlaceOf(id, p, waited),
            None => Admitted::Free(id),
        }
    }
}

/// Whether socket `fd` has received bytes not read yet (end of stream and errors are not).
fn unread_bytes(fd: RawFd) -> bool {
    use nix::sys::socket::{recv, MsgFlags};
    matches!(recv(fd, &mut [0u8; 1], MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT), Ok(n) if n > 0)
}

/// `conns` locked (a panic while it was held cannot leave it half-changed: every change
/// is one step).
fn lock(conns: &Mutex<Conns>) -> MutexGuard<'_, Conns> {
    conns.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection task's entry in [`Conns`], removed when dropped (as the task ends, also
/// when it is dropped unfinished).
struct Tracked {
    id: u64,
    conns: Arc<Mutex<Conns>>,
}

impl Tracked {
    /// Marks the connection's request head read: it keeps its slot until answered.
    fn claim(&self) {
        if let Some(c) = lock(&self.conns).open.iter_mut().find(|c| c.id == self.id && c.phase == Phase::Head) {
            c.phase = Phase::Answering;
        }
    }

    /// Counts the connection as closed at a deadline.
    fn timed_out(&self) {
        lock(&self.conns).served.timed_out += 1;
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        lock(&self.conns).open.retain(|c| c.id != self.id);
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
