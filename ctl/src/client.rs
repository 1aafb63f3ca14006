//! Client side of the control socket: connect, send one request, read the response, and
//! the exit codes and JSON output every command shares.
//! Errors are plain sentences; "no daemon" is distinguished so the CLI can exit 2 with a
//! useful message.

use spillway_shared::proto::{self, FrameError, Request, Response};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket.
    #[error("no spillway daemon is listening on {path} ({reason}); start it with `spillway --config FILE` or pass --socket PATH")]
    NoDaemon {
        /// Socket path.
        path: String,
        /// OS reason.
        reason: String,
    },
    /// The path exists but is no socket (a directory, a regular file): nothing listens there.
    #[error("{path} is {what}, not a socket: no spillway daemon can listen there; pass --socket with the daemon's control socket (dataplane.socket in its config; default {default})", default = spillway_shared::config::DEFAULT_SOCKET)]
    NotASocket {
        /// The path given.
        path: String,
        /// What it is instead (`a directory`).
        what: &'static str,
    },
    /// The socket exists but this user may not open it.
    #[error("permission denied on {path}: the control socket is for root and the configured dataplane.socket_group")]
    Denied {
        /// Socket path.
        path: String,
    },
    /// Connected, but the exchange failed.
    #[error("control socket {path}: {source}")]
    Frame {
        /// Socket path.
        path: String,
        /// What went wrong.
        source: FrameError,
    },
    /// No answer within the timeout (`--timeout`, default [`DEFAULT_TIMEOUT_SEC`]): the
    /// daemon is stopped, stuck or very busy. The request may still be applied when the
    /// daemon gets to it (it drops the request of a client that has gone, unless it was
    /// already being applied), so the message says how to check.
    #[error("no answer from the daemon on {path} within {secs} s (--timeout); the request may still be applied: check `spillwayctl config show` (its generation) or `status` before retrying")]
    Timeout {
        /// Socket path.
        path: String,
        /// The timeout, seconds.
        secs: u64,
    },
    /// The daemon took the whole request and closed the connection without answering
    /// (EOF or a reset): it stopped, crashed or was restarted meanwhile. An edit may be
    /// applied all the same (the file is written before the answer; docs/ctl.md "Crash
    /// safety"), so the message says how to check, as [`ClientError::Timeout`]'s does.
    #[error("control socket {path}: the daemon closed the connection without answering (it stopped, crashed or restarted: {reason}); the request may have been applied: check `spillwayctl config show` (its generation) or `status` before retrying")]
    Closed {
        /// Socket path.
        path: String,
        /// The OS's word for it (`Connection reset by peer`, `end of stream`).
        reason: String,
    },
    /// The daemon answered with an error.
    #[error("daemon refused: {0}")]
    Refused(String),
    /// A local input the request is built from could not be used (`config apply FILE`:
    /// unreadable, larger than a message, not UTF-8); nothing was sent.
    #[error("{0}")]
    Input(String),
    /// The daemon could not read our request frame ([`Response::BadFrame`]).
    #[error("control socket {path}: the daemon could not read the request ({kind:?}): {message}")]
    BadFrame {
        /// Socket path.
        path: String,
        /// What was wrong with the frame.
        kind: proto::BadFrameKind,
        /// The daemon's reason.
        message: String,
    },
}

impl ClientError {
    /// Exit code for this error: 1 when the daemon refused the request (validation, stale
    /// generation, unknown name), 3 when it did not answer within the timeout (the request
    /// may have been applied), 2 when it could not be reached or the exchange failed.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClientError::Refused(_) => 1,
            ClientError::Timeout { .. } => 3,
            _ => 2,
        }
    }
}

/// Sends `req` and returns the daemon's response (an error response becomes
/// [`ClientError::Refused`]).
pub fn request(socket: &Path, req: &Request) -> Result<Response, ClientError> {
    let path = socket.display().to_string();
    let mut s = UnixStream::connect(socket).map_err(|e| match (e.kind(), not_a_socket(socket)) {
        (_, Some(what)) => ClientError::NotASocket { path: path.clone(), what },
        (std::io::ErrorKind::PermissionDenied, None) => ClientError::Denied { path: path.clone() },
        _ => ClientError::NoDaemon { path: path.clone(), reason: e.to_string() },
    })?;
    let secs = TIMEOUT_SEC.load(Ordering::Relaxed).max(1);
    let _ = s.set_read_timeout(Some(Duration::from_secs(secs)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(secs)));
    let fe = |source| if timed_out(&source) { ClientError::Timeout { path: path.clone(), secs } } else { ClientError::Frame { path: path.clone(), source } };
    // A daemon that refuses the peer answers and closes at once, possibly before our
    // request is written (EPIPE): its answer is still readable, so read before giving up.
    let written = proto::write_frame(&mut s, &proto::encode_request(req));
    // The request was sent whole and the daemon hung up before its answer: it may have
    // applied the request (fresh-user QA: a daemon killed mid-edit gave "i/o: Connection
    // reset by peer", which reads as "nothing happened").
    let closed = |reason: String| ClientError::Closed { path: path.clone(), reason };
    let body = match (proto::read_frame(&mut s), written) {
        (Ok(Some(body)), _) => body,
        (_, Err(e)) => return Err(fe(e)),
        (Ok(None), Ok(())) => return Err(closed("end of stream".into())),
        (Err(FrameError::Io(io)), Ok(())) if hung_up(&io) => return Err(closed(io.to_string())),
        (Err(e), Ok(())) => return Err(fe(e)),
    };
    match proto::decode_response(&body).map_err(fe)? {
        Response::Error { message } => Err(ClientError::Refused(message)),
        Response::BadFrame { kind, message } => Err(ClientError::BadFrame { path, kind, message }),
        r => Ok(r),
    }
}

/// The answer timeout when `--timeout` is not given, seconds.
pub const DEFAULT_TIMEOUT_SEC: u64 = 30;

/// The answer timeout of every request of this process, seconds (`--timeout`).
static TIMEOUT_SEC: AtomicU64 = AtomicU64::new(DEFAULT_TIMEOUT_SEC);

/// Sets how long every later request waits for the daemon's answer (and for its request
/// to be taken), seconds (at least 1; `--timeout`, set once by `main`).
pub fn set_timeout(secs: u64) {
    TIMEOUT_SEC.store(secs.max(1), Ordering::Relaxed);
}

/// Whether a failed exchange is the socket timeout running out (`EAGAIN` of a socket read
/// or write timeout, socket(7) `SO_RCVTIMEO`), not a broken exchange.
fn timed_out(e: &FrameError) -> bool {
    matches!(e, FrameError::Io(io) if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

/// Whether a read error means the peer hung up: end of stream inside a frame, or a reset.
fn hung_up(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted)
}

/// What `path` is when it exists but is no socket (`a directory`), after a failed connect:
/// "connection refused" would send the user looking for a daemon that cannot be there.
fn not_a_socket(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::metadata(path).ok()?.file_type();
    Some(if t.is_socket() {
        return None;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "an unusual file"
    })
}

/// Whether the command line asked for `--json` (set once by `main` after parsing): every
/// error is then the JSON error object on stdout ([`error_json`]), whichever command.
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

/// Makes every later error of this process print as the JSON error object (`--json`).
pub fn set_json_errors(on: bool) {
    JSON_ERRORS.store(on, Ordering::Relaxed);
}

/// Whether errors print as JSON ([`set_json_errors`]).
pub fn json_errors() -> bool {
    JSON_ERRORS.load(Ordering::Relaxed)
}

/// Prints a failed request's reason and returns its exit code ([`ClientError::exit_code`]):
/// the text line on stderr, or under `--json` the JSON error object on stdout.
pub fn fail(e: ClientError) -> i32 {
    fail_as(e, false)
}

/// [`fail`] with another name in front of the text line (`spillwayctl explain: ...`).
pub fn fail_from(who: &str, e: ClientError) -> i32 {
    if json_errors() {
        return fail(e);
    }
    eprintln!("{who}: {e}");
    e.exit_code()
}

/// Prints an error found on this side (not a failed request) and returns `code`:
/// `WHO: MESSAGE` on stderr (`who` is `spillwayctl`, or `spillwayctl explain`), or under
/// `--json` the JSON error object `{"error": kind, "exit_code": code, "message": MESSAGE}`
/// on stdout, with the kinds of [`ClientError::kind`] (plus `usage`).
pub fn error_out(who: &str, kind: &str, code: i32, message: &str) -> i32 {
    if json_errors() {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "error": kind, "message": message, "exit_code": code })).unwrap_or_default());
    } else {
        eprintln!("{who}: {message}");
    }
    code
}

impl ClientError {
    /// The `error` of the JSON error object ([`error_json`]): `refused` (the daemon
    /// refused the request), `no_daemon`, `permission_denied`, `protocol` (the exchange
    /// failed or the daemon could not read the request), `timeout` (no answer within
    /// `--timeout`; the request may still be applied, exit 3), `input` (a local file the
    /// request is built from could not be used; nothing was sent). Errors found before any
    /// request ([`error_out`]) also use `usage` (a command-line error, exit 2).
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::Refused(_) => "refused",
            ClientError::Input(_) => "input",
            ClientError::NoDaemon { .. } | ClientError::NotASocket { .. } => "no_daemon",
            ClientError::Denied { .. } => "permission_denied",
            ClientError::Timeout { .. } => "timeout",
            ClientError::Frame { .. } | ClientError::BadFrame { .. } | ClientError::Closed { .. } => "protocol",
        }
    }

    /// The reason in words: the daemon's own message for a refusal
    /// (`services[0].backends[0].weight = 0: must be in 1..=1000 ...`), the text line's
    /// otherwise.
    pub fn message(&self) -> String {
        match self {
            ClientError::Refused(m) => m.clone(),
            e => e.to_string(),
        }
    }
}

/// The JSON error object a `--json` command prints on stdout when its request fails:
/// `{"error": KIND, "exit_code": N, "message": TEXT}` (keys sorted) with KIND from
/// [`ClientError::kind`] and N from [`ClientError::exit_code`] (docs/ctl.md "Exit codes").
pub fn error_json(e: &ClientError) -> serde_json::Value {
    serde_json::json!({ "error": e.kind(), "message": e.message(), "exit_code": e.exit_code() })
}

/// [`fail`], or with `json` (or `--json` on the command line) the JSON error object
/// ([`error_json`]) on stdout instead of the text line on stderr; the exit code is the same.
pub fn fail_as(e: ClientError, json: bool) -> i32 {
    if !json && !json_errors() {
        eprintln!("spillwayctl: {e}");
        return e.exit_code();
    }
    println!("{}", serde_json::to_string_pretty(&error_json(&e)).unwrap_or_default());
    e.exit_code()
}

/// Prints an answer of the wrong kind (a daemon of another build) and returns exit code 2
/// (under `--json`: the JSON error object, kind `protocol`).
pub fn unexpected(r: &Response) -> i32 {
    error_out("spillwayctl", "protocol", 2, &format!("unexpected response from the daemon: {r:?}"))
}

/// Prints `v` as pretty JSON (the `--json` output of every command) and returns exit code 0.
pub fn json<T: serde::Serialize>(v: &T) -> i32 {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket of this test in a directory of its own: (directory, socket path, listener).
    fn listening(name: &str) -> (std::path::PathBuf, std::path::PathBuf, std::os::unix::net::UnixListener) {
        let dir = std::env::temp_dir().join(format!("spw-ctl-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        (dir, path, listener)
    }

    /// A daemon that reads the whole request and hangs up without answering (killed or
    /// crashed mid-edit): the error says the request may have been applied and how to
    /// check, exit 2, kind `protocol` (fresh-user QA: `i/o: Connection reset by peer (os
    /// error 104)` after `kill -9` of the daemon during a `backend set`).
    #[test]
    fn a_daemon_that_hangs_up_without_answering_may_have_applied_it() {
        let (dir, path, listener) = listening("closed");
        let taken = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let req = proto::read_frame(&mut s).unwrap();
            drop(s);
            req.is_some()
        });
        let e = request(&path, &Request::Status).unwrap_err();
        assert!(taken.join().unwrap(), "the request arrived whole");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!((e.exit_code(), e.kind()), (2, "protocol"));
        let m = e.to_string();
        assert!(m.contains("the daemon closed the connection without answering") && m.contains("the request may have been applied: check `spillwayctl config show`"), "{m}");
    }

    /// A daemon that takes the request and never answers (stopped with SIGSTOP): past the
    /// timeout the error says so, that the request may still be applied and how to check,
    /// with its own exit code and JSON kind (fresh-user QA: `i/o: Resource temporarily
    /// unavailable (os error 11)`, kind `protocol`, exit 2).
    #[test]
    fn no_answer_within_the_timeout_is_a_timeout() {
        let (dir, path, listener) = listening("timeout");
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        set_timeout(1);
        let e = request(&path, &Request::Status).unwrap_err();
        set_timeout(DEFAULT_TIMEOUT_SEC);
        drop(held.join());
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(e, ClientError::Timeout { secs: 1, .. }), "{e:?}");
        assert_eq!((e.exit_code(), e.kind()), (3, "timeout"));
        let m = e.to_string();
        assert!(m.starts_with("no answer from the daemon on ") && m.contains("within 1 s (--timeout); the request may still be applied: check `spillwayctl config show`"), "{m}");
    }
}
