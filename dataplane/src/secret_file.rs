//! Reading a secret from a key file (the fleet sync key, QUIC-LB keys): the file must be a
//! regular file readable by its owner only (mode 0600 or 0400), so a key is never taken
//! from a file other users can read. One rule for every key the daemon reads.

/// The bytes of key file `path`, named `field` in errors (e.g. `sync.key_file`). `why`
/// says what a reader of the key could do (it ends the mode error). Errors: the file is
/// missing or unreadable, not a regular file, or readable or writable by group or others.
pub fn read(field: &str, path: &str, why: &str) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{field} = {path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{field} = {path}: not a regular file"));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!("{field} = {path}: mode {mode:04o}: must be 0600 or 0400 ({why}; chmod 600 {path})"));
    }
    std::fs::read(path).map_err(|e| format!("{field} = {path}: {e}"))
}
