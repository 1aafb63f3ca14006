//! The control-socket server: a Unix stream socket speaking the framed, versioned postcard
//! protocol of [`spillway_shared::proto`].
//!
//! Security: the socket's directory is created 0750 and the socket 0660, both given to the
//! configured `socket_group` (so its members can reach the socket and nobody else can);
//! every connection's peer credentials (SO_PEERCRED, read with `nix`) are checked against
//! root or that group, and refused connections are logged and counted. Robustness: a bad
//! frame (truncated, over the size limit, a wrong version or garbage) gets a typed reply
//! ([`Response::BadFrame`]) and is counted ([`ServerStats::bad_frames`]); after a frame read
//! whole (wrong version, garbage) the connection keeps being served, after a truncated or
//! oversized one (framing lost) that connection only is closed. Each connection has a read
//! timeout; the daemon never panics on client input.

use spillway_shared::proto::{self, FrameError, Request, Response};
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Answers requests (implemented by the daemon).
pub trait Handler: Send + Sync + 'static {
    /// Handles one decoded request.
    fn handle(&self, req: Request) -> Response;
}

/// Counters of the server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections refused by the credential check.
    pub refused: AtomicU64,
    /// Frames that could not be read or decoded (truncated, too large, wrong version,
    /// garbage); each was answered with [`Response::BadFrame`] when the peer was still there.
    pub bad_frames: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Requests read whole but not served because their client had closed the connection
    /// by then (it gave up waiting; [`peer_gone`]).
    pub abandoned: AtomicU64,
    /// Request bytes buffered now, over all connections (at most [`MAX_INFLIGHT`]).
    pub inflight: std::sync::atomic::AtomicUsize,
}

impl ServerStats {
    /// The counters as `spillwayctl status` reports them.
    pub fn report(&self) -> spillway_shared::proto::ControlSocketStatus {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        spillway_shared::proto::ControlSocketStatus { accepted: l(&self.accepted), refused: l(&self.refused), bad_frames: l(&self.bad_frames), requests: l(&self.requests) }
    }
}

/// Peer credentials of a Unix socket connection (SO_PEERCRED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Reads SO_PEERCRED of a connected socket (the peer's credentials when it connected;
/// unix(7)), through `nix`.
pub fn peer_cred(s: &UnixStream) -> std::io::Result<PeerCred> {
    let c = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(PeerCred { pid: c.pid(), uid: c.uid(), gid: c.gid() })
}

/// Resolves a group name to its gid through the system's group database (NSS:
/// `/etc/group`, LDAP, ...), via `nix` (`getgrnam_r` with a buffer that grows on ERANGE,
/// so groups with many members resolve too). `Ok(None)`: no such group.
pub fn group_gid(name: &str) -> std::io::Result<Option<u32>> {
    Ok(nix::unistd::Group::from_name(name)?.map(|g| g.gid.as_raw()))
}

/// Whether a peer may use the socket: root, or the configured group as the peer's primary
/// gid (SO_PEERCRED). See [`authorised_peer`] for supplementary groups.
pub fn authorised(c: &PeerCred, group: Option<u32>) -> bool {
    c.uid == 0 || group.is_some_and(|g| c.gid == g)
}

/// Supplementary groups of a process (`Groups:` of `/proc/PID/status`, proc(5)); empty
/// when unknown. These are the groups the kernel checked against the socket's and its
/// directory's modes on connect. Linux has SO_PEERGROUPS for this, but neither `nix` nor
/// `rustix` wraps it, and the group database (`getgrouplist`) would answer a different
/// question: which groups the user could have, not which ones the process has.
pub fn process_groups(pid: i32) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return Vec::new() };
    text.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

/// [`authorised`], or the configured group among the peer process's supplementary groups
/// (`groups`, from [`process_groups`]): what the socket's file mode (0660, group-owned)
/// also allows.
pub fn authorised_peer(c: &PeerCred, groups: &[u32], group: Option<u32>) -> bool {
    authorised(c, group) || group.is_some_and(|g| groups.contains(&g))
}

/// A running server.
pub struct Server {
    /// Socket path.
    pub path: PathBuf,
    /// Counters.
    pub stats: Arc<ServerStats>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// A server whose accept loop runs in `thread` (`socket::Bound::serve`; binding and
    /// `Server::start` are in `socket.rs`, which this module does not import).
    pub(super) fn running(path: PathBuf, stats: Arc<ServerStats>, stop: Arc<AtomicBool>, thread: std::thread::JoinHandle<()>) -> Server {
        Server { path, stats, stop, thread: Some(thread) }
    }

    /// Stops accepting, joins the thread and removes the socket file.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        use std::os::unix::fs::FileTypeExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Most connections served at once; more are answered with an error and closed.
pub const MAX_CONNECTIONS: usize = 64;
/// A connection idle this long between frames is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A frame must be complete this long after its first byte.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(5);

/// A reader that replays one already-read byte, then reads with a per-call timeout that
/// shrinks to an overall deadline.
struct DeadlineReader<'a> {
    inner: &'a mut UnixStream,
    deadline: std::time::Instant,
    first: Option<u8>,
}

impl std::io::Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some(b) = self.first.take() {
            buf[0] = b;
            return Ok(1);
        }
        let left = self.deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "frame not complete within the deadline"));
        }
        self.inner.set_read_timeout(Some(left))?;
        std::io::Read::read(self.inner, buf)
    }
}

/// Open connections, for making room when all [`MAX_CONNECTIONS`] slots are taken: the
/// connection idle longest (waiting for its next frame) is closed to admit a new one, so
/// idle or slow clients can never lock `spillwayctl` out.
#[derive(Default)]
struct Registry {
    next: u64,
    conns: std::collections::HashMap<u64, (UnixStream, Option<std::time::Instant>)>,
}

/// A connection's entry in the [`Registry`].
struct Tracked {
    id: u64,
    registry: Arc<std::sync::Mutex<Registry>>,
}

impl Tracked {
    fn set_idle(&self, idle: bool) {
        if let Ok(mut r) = self.registry.lock() {
            if let Some(e) = r.conns.get_mut(&self.id) {
                e.1 = idle.then(std::time::Instant::now);
            }
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Ok(mut r) = self.registry.lock() {
            r.conns.remove(&self.id);
        }
    }
}

/// Closes the connection idle longest; false when every connection is busy.
fn evict_idlest(registry: &std::sync::Mutex<Registry>) -> bool {
    let Ok(mut r) = registry.lock() else { return false };
    let victim = r.conns.iter().filter_map(|(id, (_, since))| since.map(|s| (*id, s))).min_by_key(|(_, s)| *s).map(|(id, _)| id);
    match victim.and_then(|id| r.conns.remove(&id)) {
        Some((stream, _)) => {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            true
        }
        None => false,
    }
}

pub(super) fn accept_loop(listener: UnixListener, group: Option<u32>, handler: Arc<dyn Handler>, stats: Arc<ServerStats>, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicU64::new(0));
    let registry = Arc::new(std::sync::Mutex::new(Registry::default()));
    // Connection threads are scoped: this function (and so `Server::shutdown`) returns only
    // after every one has ended, so no request can run after the daemon tears down ports,
    // pools and the EAL.
    std::thread::scope(|scope| {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.set_nonblocking(false);
                    match peer_cred(&stream) {
                        Ok(c) if authorised(&c, group) || (group.is_some() && authorised_peer(&c, &process_groups(c.pid), group)) => {}
                        Ok(c) => {
                            stats.refused.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(pid = c.pid, uid = c.uid, gid = c.gid, "control socket: refused peer (not root or the configured group)");
                            reply_error(stream, "permission denied: the control socket is for root and the configured socket_group");
                            continue;
                        }
                        Err(e) => {
                            stats.refused.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(error = %e, "control socket: cannot read peer credentials");
                            continue;
                        }
                    }
                    if active.load(Ordering::Relaxed) as usize >= MAX_CONNECTIONS && !evict_idlest(&registry) {
                        reply_error(stream, "too many control connections busy with requests; try again");
                        continue;
                    }
                    let tracked = match stream.try_clone() {
                        Ok(clone) => {
                            let mut r = registry.lock().unwrap_or_else(|e| e.into_inner());
                            r.next += 1;
                            let id = r.next;
                            r.conns.insert(id, (clone, None));
                            Some(Tracked { id, registry: registry.clone() })
                        }
                        Err(_) => None,
                    };
                    active.fetch_add(1, Ordering::Relaxed);
                    let (h, st, act) = (handler.clone(), stats.clone(), active.clone());
                    let spawned = std::thread::Builder::new().name("ctl-conn".into()).spawn_scoped(scope, move || {
                        serve_conn_tracked(stream, h.as_ref(), &st, tracked.as_ref());
                        drop(tracked);
                        act.fetch_sub(1, Ordering::Relaxed);
                    });
                    if spawned.is_err() {
                        active.fetch_sub(1, Ordering::Relaxed);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait_readable(&listener, 100),
                Err(e) => {
                    tracing::warn!(error = %e, "control socket accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        // Stopping: wake every open connection (a blocked read returns at once) so the scope
        // can join them; one in the middle of a request finishes it first.
        for (conn, _) in registry.lock().unwrap_or_else(|e| e.into_inner()).conns.values() {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    });
}

/// Waits until `listener` has a connection to accept, at most `ms` milliseconds (so the
/// stop flag is still checked regularly, without adding latency to each accept).
fn wait_readable(listener: &UnixListener, ms: u16) {
    use nix::poll::{poll, PollFd, PollFlags};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
    if poll(&mut fds, ms).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn reply_error(mut stream: UnixStream, message: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let body = proto::encode_response(&Response::Error { message: message.into() });
    let _ = proto::write_frame(&mut stream, &body);
}

/// Bytes all connections may buffer for requests at once: four full-size messages. A
/// request over it waits for nobody: it is refused (`Busy`) and may be retried.
pub const MAX_INFLIGHT: usize = 4 * proto::MAX_MESSAGE;

/// One request's share of [`MAX_INFLIGHT`] (in [`ServerStats::inflight`]), returned when
/// dropped.
struct Reserved<'a> {
    stats: &'a ServerStats,
    bytes: std::cell::Cell<usize>,
}

impl Reserved<'_> {
    fn take(&self, n: usize) -> bool {
        let was = self.stats.inflight.fetch_add(n, Ordering::AcqRel);
        if was + n > MAX_INFLIGHT {
            self.stats.inflight.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        self.bytes.set(self.bytes.get() + n);
        true
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.stats.inflight.fetch_sub(self.bytes.get(), Ordering::AcqRel);
    }
}

/// Counts a bad frame and answers it with [`Response::BadFrame`] (when there is a kind to
/// answer with); returns whether the connection can carry further frames.
fn answer_bad_frame(stream: &mut UnixStream, e: &FrameError, stats: &ServerStats) -> bool {
    let Some(kind) = e.kind() else { return false };
    stats.bad_frames.fetch_add(1, Ordering::Relaxed);
    let message = match (kind, e) {
        (proto::BadFrameKind::Truncated, FrameError::Io(io)) if io.kind() != std::io::ErrorKind::UnexpectedEof => {
            format!("truncated frame: not complete within {} s of its first byte", FRAME_DEADLINE.as_secs())
        }
        (proto::BadFrameKind::Truncated, _) => "truncated frame: the connection ended inside a frame (length prefix or body)".to_string(),
        _ => e.to_string(),
    };
    tracing::info!(?kind, error = %message, "control socket: bad frame");
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let body = proto::encode_response(&Response::BadFrame { kind, message });
    let sent = proto::write_frame(stream, &body).is_ok();
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    sent && kind.keeps_connection()
}

/// Whether the peer of `stream` has closed its end (`POLLHUP`: unix(7) sets both shutdown
/// directions on the survivor when the peer closes), checked without waiting. A request
/// read from such a connection was left by a client that stopped waiting for the answer.
fn peer_gone(stream: &UnixStream) -> bool {
    use nix::poll::{poll, PollFd, PollFlags};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(stream.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, 0u16), Ok(n) if n > 0) && fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLHUP))
}

/// Serves one connection: frames in, frames out, until EOF or a bad frame. A request whose
/// client has already closed the connection when it is read is not served ([`peer_gone`],
/// counted in [`ServerStats::abandoned`]).
///
/// Timeouts: a connection idle for [`IDLE_TIMEOUT`] between messages is closed, and a
/// message (all its frames, up to [`proto::MAX_MESSAGE`]) must arrive whole within
/// [`FRAME_DEADLINE`] of its first byte (a slow trickle cannot hold a connection slot).
pub fn serve_conn(stream: UnixStream, handler: &dyn Handler, stats: &ServerStats) {
    serve_conn_tracked(stream, handler, stats, None)
}

fn serve_conn_tracked(mut stream: UnixStream, handler: &dyn Handler, stats: &ServerStats, tracked: Option<&Tracked>) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    loop {
        let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
        let mut first = [0u8; 1];
        if let Some(t) = tracked {
            t.set_idle(true);
        }
        let got = std::io::Read::read(&mut stream, &mut first);
        if let Some(t) = tracked {
            t.set_idle(false);
        }
        match got {
            Ok(1) => {}
            _ => return,
        }
        let mut deadline = DeadlineReader { inner: &mut stream, deadline: std::time::Instant::now() + FRAME_DEADLINE, first: Some(first[0]) };
        // Bytes buffered for this request, taken from the budget all connections share.
        let reserved = Reserved { stats, bytes: std::cell::Cell::new(0) };
        let read = proto::read_frame_within(&mut deadline, |n| reserved.take(n));
        let body = match read {
            Ok(Some(b)) => b,
            Ok(None) => return,
            Err(e) => {
                // truncated, stalled or oversized: the stream cannot be framed any more
                answer_bad_frame(&mut stream, &e, stats);
                return;
            }
        };
        let decoded = proto::decode_request(&body);
        drop(body); // a request of up to MAX_MESSAGE bytes is not kept while it is served
        drop(reserved);
        let resp = match decoded {
            Ok(_) if peer_gone(&stream) => {
                // The client gave up (its timeout ran out while this daemon was stopped
                // or busy) and was told the request failed: applying it now would make
                // that a lie (fresh-user QA: an edit reported failed was applied later).
                stats.abandoned.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("control socket: request not applied: its client closed the connection before it was served (the client's timeout ran out)");
                return;
            }
            Ok(req) => {
                stats.requests.fetch_add(1, Ordering::Relaxed);
                handler.handle(req)
            }
            Err(e) => {
                // read whole: the next frame starts right after it
                if answer_bad_frame(&mut stream, &e, stats) {
                    continue;
                }
                return;
            }
        };
        let mut body = proto::encode_response(&resp);
        if body.len() > proto::MAX_MESSAGE {
            body = proto::encode_response(&Response::Error {
                message: format!("the answer ({} bytes) exceeds the message limit of {} bytes", body.len(), proto::MAX_MESSAGE),
            });
        }
        if proto::write_frame(&mut stream, &body).is_err() {
            return;
        }
        let _ = stream.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_root_and_the_group_are_authorised() {
        let root = PeerCred { pid: 1, uid: 0, gid: 0 };
        let nobody = PeerCred { pid: 1, uid: 65534, gid: 65534 };
        let member = PeerCred { pid: 1, uid: 1000, gid: 4242 };
        assert!(authorised(&root, None));
        assert!(authorised(&root, Some(4242)));
        assert!(!authorised(&nobody, None));
        assert!(!authorised(&nobody, Some(4242)));
        assert!(authorised(&member, Some(4242)));
        assert!(!authorised(&member, None), "no group configured: root only");
        assert!(authorised_peer(&nobody, &[10, 4242], Some(4242)), "supplementary group");
        assert!(!authorised_peer(&nobody, &[10, 4242], None));
        assert!(!authorised_peer(&nobody, &[10], Some(4242)));
    }

    #[test]
    fn groups_of_this_process_are_read() {
        // Whatever they are, reading them works and does not panic; a missing pid is empty.
        let _ = process_groups(std::process::id() as i32);
        assert!(process_groups(-5).is_empty());
    }

    #[test]
    fn groups_resolve_by_name() {
        assert_eq!(group_gid("root").unwrap(), Some(0));
        assert_eq!(group_gid("no-such-group-spillway").unwrap(), None);
    }

    #[test]
    fn the_socket_directory_and_socket_go_to_the_group() {
        use std::os::unix::fs::MetadataExt;
        // root may give files to any group; anyone else to their own
        let g = if nix::unistd::Uid::effective().is_root() { 65534 } else { nix::unistd::getegid().as_raw() };
        let dir = std::env::temp_dir().join(format!("spw-grp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run").join("ctl.sock");
        let srv = Server::start(&path, Some(g), Arc::new(Echo)).unwrap();
        let run = std::fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!((run.gid(), run.mode() & 0o7777), (g, 0o750), "the created directory lets the group search it");
        let sock = std::fs::metadata(&path).unwrap();
        assert_eq!((sock.gid(), sock.mode() & 0o777), (g, 0o660));
        srv.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    struct Echo;
    impl Handler for Echo {
        fn handle(&self, req: Request) -> Response {
            Response::Error { message: format!("{req:?}") }
        }
    }

    /// Counts the requests it serves.
    #[derive(Default)]
    struct Counting(AtomicU64);
    impl Handler for Counting {
        fn handle(&self, _: Request) -> Response {
            self.0.fetch_add(1, Ordering::Relaxed);
            Response::Error { message: "served".into() }
        }
    }

    /// A request whose client has closed the connection before the daemon reads it (the
    /// client's timeout ran out while the daemon was stopped) is not served: the client
    /// reported it failed (fresh-user QA: `kill -STOP`, an edit timed out, `kill -CONT`
    /// applied it). A client still there is served.
    #[test]
    fn a_request_whose_client_has_gone_is_not_served() {
        let (h, stats) = (Counting::default(), ServerStats::default());
        let (mut client, server) = UnixStream::pair().unwrap();
        proto::write_frame(&mut client, &proto::encode_request(&Request::Status)).unwrap();
        drop(client);
        serve_conn(server, &h, &stats);
        assert_eq!((h.0.load(Ordering::Relaxed), stats.abandoned.load(Ordering::Relaxed), stats.requests.load(Ordering::Relaxed)), (0, 1, 0));
        let (mut client, server) = UnixStream::pair().unwrap();
        proto::write_frame(&mut client, &proto::encode_request(&Request::Status)).unwrap();
        std::thread::scope(|sc| {
            sc.spawn(|| serve_conn(server, &h, &stats));
            assert_eq!(proto::decode_response(&proto::read_frame(&mut client).unwrap().unwrap()).unwrap(), Response::Error { message: "served".into() });
            drop(client);
        });
        assert_eq!((h.0.load(Ordering::Relaxed), stats.abandoned.load(Ordering::Relaxed)), (1, 1));
    }

    #[test]
    fn idle_connections_cannot_lock_clients_out() {
        let dir = std::env::temp_dir().join(format!("spw-idle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let srv = Server::start(&path, None, Arc::new(Echo)).unwrap();
        // fill every slot with connections that never send anything
        let idle: Vec<UnixStream> = (0..MAX_CONNECTIONS + 5).map(|_| UnixStream::connect(&path).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(300));
        // a real client still gets an answer (the idlest connection made room)
        for _ in 0..3 {
            let mut c = UnixStream::connect(&path).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            proto::write_frame(&mut c, &proto::encode_request(&Request::Status)).unwrap();
            let body = proto::read_frame(&mut c).unwrap().unwrap();
            let r = proto::decode_response(&body).unwrap();
            assert_eq!(r, Response::Error { message: "Status".into() }, "the echo handler answered");
        }
        drop(idle);
        srv.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn server_answers_and_survives_bad_frames() {
        let dir = std::env::temp_dir().join(format!("spw-srv-{}", std::process::id()));
        let path = dir.join("sub").join("ctl.sock");
        // only the last directory level is created
        assert!(Server::start(&path, None, Arc::new(Echo)).is_err());
        std::fs::create_dir_all(&dir).unwrap();
        // an existing regular file is never replaced
        let file = dir.join("not-a-socket");
        std::fs::write(&file, b"keep me").unwrap();
        let e = Server::start(&file, None, Arc::new(Echo)).err().expect("refused");
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
        let srv = Server::start(&path, None, Arc::new(Echo)).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o660);
        assert_eq!(mode(path.parent().unwrap()), 0o750);
        // a second server on a live socket is refused
        assert!(Server::start(&path, None, Arc::new(Echo)).is_err());
        use proto::BadFrameKind as K;
        for (bad, want) in [(vec![0xffu8, 0xff, 0xff, 0xff], K::TooLarge), (vec![0, 0, 0, 2, 99, 0], K::Version), (vec![0, 0, 0, 3, proto::PROTOCOL_VERSION as u8, 0xff, 0xff], K::Malformed)] {
            let mut s = UnixStream::connect(&path).unwrap();
            s.write_all(&bad).unwrap();
            let body = proto::read_frame(&mut s).unwrap().unwrap();
            let r = proto::decode_response(&body).unwrap();
            assert!(matches!(&r, Response::BadFrame { kind, .. } if *kind == want), "{bad:?}: {r:?}");
            // a frame read whole leaves the connection usable
            if want.keeps_connection() {
                proto::write_frame(&mut s, &proto::encode_request(&Request::Status)).unwrap();
                let body = proto::read_frame(&mut s).unwrap().unwrap();
                assert_eq!(proto::decode_response(&body).unwrap(), Response::Error { message: "Status".into() }, "served after {want:?}");
            }
        }
        // truncated: the length prefix or the body ends early (the client half-closes): a
        // typed answer, not a silent close
        for bad in [vec![0u8, 0], vec![0, 0, 0, 100, 1, 2, 3]] {
            let mut s = UnixStream::connect(&path).unwrap();
            s.write_all(&bad).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let body = proto::read_frame(&mut s).unwrap().expect("an answer to a truncated frame");
            let r = proto::decode_response(&body).unwrap();
            assert!(matches!(&r, Response::BadFrame { kind: K::Truncated, message } if message.contains("truncated")), "{bad:?}: {r:?}");
        }
        let mut s = UnixStream::connect(&path).unwrap();
        proto::write_frame(&mut s, &proto::encode_request(&Request::Status)).unwrap();
        let body = proto::read_frame(&mut s).unwrap().unwrap();
        assert_eq!(proto::decode_response(&body).unwrap(), Response::Error { message: "Status".into() });
        assert_eq!(srv.stats.bad_frames.load(Ordering::Relaxed), 5);
        assert_eq!(srv.stats.report().bad_frames, 5);
        // a request and an answer of several frames (3 MiB each way) travel whole
        let big = Request::ConfigApply { toml: "x".repeat(3 * proto::MAX_FRAME), if_generation: None };
        proto::write_frame(&mut s, &proto::encode_request(&big)).unwrap();
        let body = proto::read_frame(&mut s).unwrap().unwrap();
        let Response::Error { message } = proto::decode_response(&body).unwrap() else { panic!() };
        assert!(message.len() > 3 * proto::MAX_FRAME && message.starts_with("ConfigApply"), "{}", &message[..40]);
        // a message over the message limit is refused before it is buffered
        let mut s = UnixStream::connect(&path).unwrap();
        for _ in 0..proto::MAX_MESSAGE / proto::MAX_FRAME {
            s.write_all(&(proto::MAX_FRAME as u32 | 1 << 31).to_be_bytes()).unwrap();
            s.write_all(&vec![0u8; proto::MAX_FRAME]).unwrap();
        }
        s.write_all(&(1u32).to_be_bytes()).unwrap();
        let _ = s.write_all(&[0]);
        let body = proto::read_frame(&mut s).unwrap().unwrap();
        assert!(matches!(proto::decode_response(&body).unwrap(), Response::BadFrame { kind: K::TooLarge, .. }));
        srv.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The shared budget: a request that would take the buffered total over
    /// [`MAX_INFLIGHT`] is refused, and what a request reserved is returned when it ends.
    #[test]
    fn buffered_request_bytes_are_bounded_over_all_connections() {
        let stats = ServerStats::default();
        let a = Reserved { stats: &stats, bytes: std::cell::Cell::new(0) };
        for _ in 0..3 {
            assert!(a.take(proto::MAX_MESSAGE));
        }
        let b = Reserved { stats: &stats, bytes: std::cell::Cell::new(0) };
        assert!(b.take(proto::MAX_MESSAGE - 1));
        assert!(!b.take(2), "over the budget");
        assert_eq!(stats.inflight.load(Ordering::Relaxed), MAX_INFLIGHT - 1);
        drop(a);
        assert!(b.take(2), "room again once another request ended");
        drop(b);
        assert_eq!(stats.inflight.load(Ordering::Relaxed), 0);
        // the reader asks before buffering each frame, and names the refusal
        let mut wire = Vec::new();
        proto::write_frame(&mut wire, &vec![7u8; 3 * proto::MAX_FRAME]).unwrap();
        let mut asked = Vec::new();
        let r = proto::read_frame_within(&mut wire.as_slice(), |n| {
            asked.push(n);
            asked.len() < 2
        });
        assert!(matches!(r, Err(FrameError::Busy(_))), "{r:?}");
        assert_eq!(asked, vec![proto::MAX_FRAME, proto::MAX_FRAME]);
    }
}
