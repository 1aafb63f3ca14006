//! The config file on disk, for the write-back of live edits ([`super::persist`]): where it
//! is ([`resolve`], at every write), how it is replaced ([`write_atomic`]: owner, group and
//! mode kept; the rename is the commit point) and the last good text kept beside it
//! ([`keep_last_good`], `FILE.bak`, for recovering from a file broken by hand).
//!
//! Kept apart from the document merge in `persist.rs`: this is the part that talks to the
//! file system, and its failure cases (a re-pointed symlink, a failed directory fsync, a
//! file of another group) are tested here on their own.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Most symlinks followed by [`resolve`] (Linux's own limit, `MAXSYMLINKS`, path_resolution(7)).
pub const MAX_SYMLINKS: usize = 40;

/// Mode of a config file the daemon creates anew (`config apply` of a file that was
/// deleted) when there is no `FILE.bak` to take it from ([`write_atomic`]); an existing
/// file keeps its own. The same as the install step of docs/operations.md
/// (`/etc/spillway/spillway.toml`, 0640).
pub const NEW_FILE_MODE: u32 = 0o640;

/// Whether a replaced file is on stable storage, as far as the daemon could make it.
#[derive(Debug)]
pub enum Durable {
    /// The file and its directory were fsynced.
    Yes,
    /// The file was fsynced and renamed into place (it holds the new text), but fsyncing
    /// its directory failed: after a power failure the old file may come back.
    DirectoryNotSynced(std::io::Error),
}

/// The file that `path` names now: symlinks of the last component followed (relative
/// targets from the link's directory), up to [`MAX_SYMLINKS`]. Resolved at every write, so
/// a `--config` symlink re-pointed while the daemon runs is written through to its new
/// target (the link itself stays a link). A dangling link resolves to its missing target.
///
/// Errors: a link that cannot be read, or more than [`MAX_SYMLINKS`] links (a loop).
pub fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..=MAX_SYMLINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            Ok(_) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!("{}: more than {MAX_SYMLINKS} symbolic links (a loop?)", path.display())))
}

/// `FILE.bak` beside `real` (a resolved config path, [`resolve`]).
pub fn backup_path(real: &Path) -> PathBuf {
    let name = real.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "config".into());
    real.with_file_name(format!("{name}.bak"))
}

/// Writes `text` to `path` atomically: a temporary file in the same directory, given the
/// old file's owner, group and mode (fchown, fchmod) before anything is written to it,
/// written and fsynced, renamed over `path`, then the directory fsynced. A file created
/// anew (the old one deleted) gets the owner, group and mode of its last good copy
/// `FILE.bak` ([`backup_path`]), which has those of the file it copied ([`keep_last_good`]),
/// so a deleted 0644 file comes back 0644 and a private 0600 one stays private
/// (docs/ctl.md "A broken or missing file"); without a backup, [`NEW_FILE_MODE`] and the
/// daemon's owner.
///
/// Errors (nothing changed, the temporary file removed): creating or writing the
/// temporary file, keeping the owner or group (a daemon that may not give the file its
/// group refuses rather than drop it), the rename. After the rename the file holds `text`:
/// a failing directory fsync is then [`Durable::DirectoryNotSynced`], not an error.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<Durable> {
    let bak = backup_path(path);
    let like = match std::fs::metadata(path) {
        Ok(m) => Some((m, path.to_path_buf())),
        Err(_) => std::fs::metadata(&bak).ok().map(|m| (m, bak)),
    };
    write_atomic_like(path, text, like.as_ref().map(|(m, from)| (m, from.as_path())))
}

/// [`write_atomic`] with the owner, group and mode of `like` (the metadata and the file it
/// is of, for an error), else a new file's.
fn write_atomic_like(path: &Path, text: &str, like: Option<(&std::fs::Metadata, &Path)>) -> std::io::Result<Durable> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "config".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    // A temporary file left by a crash of this pid's predecessor is ours to replace.
    let _ = std::fs::remove_file(&tmp);
    let res = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        match like {
            Some((m, from)) => {
                std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid())).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot give {} the owner and group of {} (uid {}, gid {}): {e}", path.display(), from.display(), m.uid(), m.gid()))
                })?;
                f.set_permissions(m.permissions())?;
            }
            None => {
                use std::os::unix::fs::PermissionsExt;
                f.set_permissions(std::fs::Permissions::from_mode(NEW_FILE_MODE))?;
            }
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        test_hooks::before_rename();
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    match test_hooks::dir_sync(&dir) {
        Ok(()) => Ok(Durable::Yes),
        Err(e) => Ok(Durable::DirectoryNotSynced(e)),
    }
}

/// Keeps `text`, a config file the daemon started from or wrote, as the last good file
/// `FILE.bak` beside `real` (a resolved path), with the owner, group and mode of `real`
/// (docs/ctl.md "The last good file": a backup of a config that holds secrets is never
/// more readable than the config; QA: after `chmod 600` the backup stayed 0644), else,
/// with `real` missing, of the existing backup. Does nothing when the backup already holds
/// `text` with that owner, group and mode; failures are logged (warning), never fatal:
/// the backup is for recovery by hand (docs/operations.md "Config file recovery").
pub fn keep_last_good(real: &Path, text: &str) {
    let bak = backup_path(real);
    let like = match std::fs::metadata(real) {
        Ok(m) => Some((m, real.to_path_buf())),
        Err(_) => std::fs::metadata(&bak).ok().map(|m| (m, bak.clone())),
    };
    let same_text = std::fs::read(&bak).is_ok_and(|b| b == text.as_bytes());
    let same_meta = match (std::fs::metadata(&bak), &like) {
        (Ok(b), Some((m, _))) => (b.uid(), b.gid(), b.mode()) == (m.uid(), m.gid(), m.mode()),
        _ => true,
    };
    if same_text && same_meta {
        return;
    }
    match write_atomic_like(&bak, text, like.as_ref().map(|(m, from)| (m, from.as_path()))) {
        Ok(Durable::Yes) => {}
        Ok(Durable::DirectoryNotSynced(e)) => tracing::warn!(path = %bak.display(), error = %e, "last good config kept, but its directory could not be fsynced"),
        Err(e) => tracing::warn!(path = %bak.display(), error = %e, "cannot keep the last good config"),
    }
}

/// Fault injection for the unit tests, per thread (a test's edits run on its own thread);
/// in other builds the plain operations.
mod test_hooks {
    use std::path::Path;

    #[cfg(test)]
    thread_local! {
        static HOOKS: std::cell::RefCell<Hooks> = std::cell::RefCell::new(Hooks::default());
    }

    /// What a test makes the file writes of its thread do.
    #[cfg(test)]
    #[derive(Default)]
    pub struct Hooks {
        /// Runs after the temporary file is fsynced, before the rename.
        pub before_rename: Option<Box<dyn FnMut()>>,
        /// The directory fsync fails with this error (raw OS error number).
        pub dir_sync_error: Option<i32>,
    }

    /// Sets the hooks of this thread.
    #[cfg(test)]
    pub fn set(h: Hooks) {
        HOOKS.with(|x| *x.borrow_mut() = h);
    }

    pub fn before_rename() {
        #[cfg(test)]
        {
            let f = HOOKS.with(|x| x.borrow_mut().before_rename.take());
            if let Some(mut f) = f {
                f();
                HOOKS.with(|x| x.borrow_mut().before_rename = Some(f));
            }
        }
    }

    pub fn dir_sync(dir: &Path) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(errno) = HOOKS.with(|x| x.borrow().dir_sync_error) {
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        std::fs::File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
pub(crate) use test_hooks::{set as set_test_hooks, Hooks as TestHooks};

#[cfg(test)]
mod tests;
