//! Binding the control socket, before the daemon starts DPDK ([`Bound`]): the socket's
//! directory, a stale socket replaced, a live daemon on the path refused, mode and group.
//! Kept apart from `server.rs` (serving connections): this is what a start checks and
//! holds before it touches any port.

use super::server::{accept_loop, Handler, Server, ServerStats};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The control socket path the daemon binds: `--socket` (`arg`) when given, else the
/// config's `dataplane.socket`, checked with
/// [`spillway_shared::config::check_socket_path`] (1 to 107 bytes, no NUL). Only that path
/// is checked: `--socket` makes an unusable `dataplane.socket` irrelevant. The error names
/// `--socket`, or the config file `config_path` and `dataplane.socket`.
pub fn effective_path(arg: Option<&Path>, cfg: &spillway_shared::config::Config, config_path: &str) -> Result<PathBuf, String> {
    use std::os::unix::ffi::OsStrExt;
    match arg {
        Some(p) => spillway_shared::config::check_socket_path("--socket", p.as_os_str().as_bytes()).map(|()| p.to_path_buf()).map_err(|e| e.to_string()),
        None => spillway_shared::config::check_socket_path("dataplane.socket", cfg.dataplane.socket.as_bytes())
            .map(|()| PathBuf::from(&cfg.dataplane.socket))
            .map_err(|e| format!("{config_path}: {e}")),
    }
}

/// A control socket bound but not served yet: the daemon binds it before it starts DPDK,
/// so that a second daemon on the same path is refused before it touches any port, and no
/// other start can take the path in between (the socket is held from the check on).
/// Clients that connect meanwhile wait in the listen backlog until [`Bound::serve`].
/// Dropped without being served (a failed start), it removes its socket file.
pub struct Bound {
    path: PathBuf,
    group: Option<u32>,
    listener: Option<UnixListener>,
}

impl Bound {
    /// Binds `path` (creating its directory 0750, replacing a stale socket), mode 0660,
    /// group-owned by `group` (the gid allowed besides root). Errors as [`Server::start`]:
    /// the path exists and is not a socket (never removed), a live daemon already answers
    /// on it (`AddrInUse`, "... is in use by a running daemon"), or its parent's parent
    /// does not exist.
    pub fn bind(path: &Path, group: Option<u32>) -> std::io::Result<Bound> {
        use std::os::unix::fs::FileTypeExt;
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                create_socket_dir(dir, group)?;
            } else if let (Some(g), Ok(m)) = (group, std::fs::metadata(dir)) {
                use std::os::unix::fs::MetadataExt;
                if !dir.as_os_str().is_empty() && m.mode() & 0o001 == 0 && !(m.gid() == g && m.mode() & 0o010 != 0) {
                    tracing::warn!(dir = %dir.display(), mode = format!("{:o}", m.mode() & 0o7777), gid = m.gid(), socket_group = g,
                        "the existing socket directory is not searchable by the socket group: its members cannot connect");
                }
            }
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_socket() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket; refusing to replace it", path.display()),
                ));
            }
            Ok(_) => {
                // A live daemon on this path? Refuse to steal its socket.
                if UnixStream::connect(path).is_ok() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::AddrInUse,
                        format!("{} is in use by a running daemon", path.display()),
                    ));
                }
                std::fs::remove_file(path)?;
            }
            Err(_) => {}
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
        if let Some(g) = group {
            std::os::unix::fs::chown(path, None, Some(g))
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot give the socket to dataplane.socket_group (gid {g}): {e}")))?;
        }
        Ok(Bound { path: path.to_path_buf(), group, listener: Some(listener) })
    }

    /// Serves the bound socket in a thread, counting into `stats`.
    pub fn serve(mut self, handler: Arc<dyn Handler>, stats: Arc<ServerStats>) -> std::io::Result<Server> {
        let Some(listener) = self.listener.take() else { return Err(std::io::Error::other("control socket already served")) };
        let group = self.group;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (st, stp) = (stats.clone(), stop.clone());
        let thread = std::thread::Builder::new().name("ctl-server".into()).spawn(move || {
            accept_loop(listener, group, handler, st, stp);
        })?;
        Ok(Server::running(self.path.clone(), stats, stop, thread))
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        use std::os::unix::fs::FileTypeExt;
        if self.listener.take().is_some() && std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Server {
    /// Binds `path` (creating its directory 0750, replacing a stale socket) and serves in a
    /// thread. `group`: the gid allowed besides root (the socket is chowned to it).
    ///
    /// Errors: the path exists and is not a socket (never removed), a live daemon already
    /// answers on it, or its parent's parent does not exist (only the last directory level
    /// is created, e.g. `/run/spillway`).
    pub fn start(path: &Path, group: Option<u32>, handler: Arc<dyn Handler>) -> std::io::Result<Server> {
        Server::start_with_stats(path, group, handler, Arc::default())
    }

    /// [`Server::start`], counting into `stats` (the daemon's, so `status` can show them).
    pub fn start_with_stats(path: &Path, group: Option<u32>, handler: Arc<dyn Handler>, stats: Arc<ServerStats>) -> std::io::Result<Server> {
        Bound::bind(path, group)?.serve(handler, stats)
    }
}

/// Creates the socket's directory (the last level only): mode 0750, and with a socket
/// group, group-owned by it, so that members can reach the socket (0750 gives them search,
/// which `connect` needs, but not the right to create or remove files; path_resolution(7)).
/// Without a group it stays root-only in effect (owner plus the daemon's own group).
fn create_socket_dir(dir: &Path, group: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir(dir).map_err(|e| std::io::Error::new(e.kind(), format!("cannot create the socket directory {}: {e}", dir.display())))?;
    if let Some(g) = group {
        std::os::unix::fs::chown(dir, None, Some(g)).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot give the socket directory {} to dataplane.socket_group (gid {g}): {e}", dir.display()))
        })?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
}
