//! Unit tests of the config file's side of the write-back ([`super`]).

use super::*;
use std::os::unix::fs::PermissionsExt;

fn dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("spw-pfile-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Owner, group and mode survive the replace (a `root:spillway 0640` file stays so).
/// Needs root to give the file another owner; skipped otherwise.
#[test]
fn atomic_write_keeps_owner_group_and_mode() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("SKIP needs root to chown the test file");
        return;
    }
    let d = dir("owner");
    let p = d.join("c.toml");
    std::fs::write(&p, "old").unwrap();
    std::os::unix::fs::chown(&p, Some(4343), Some(4242)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(matches!(write_atomic(&p, "new").unwrap(), Durable::Yes));
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (4343, 4242, 0o640), "owner, group and mode kept");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "no temporary file left");
    let _ = std::fs::remove_dir_all(&d);
}

/// A new file (none before) gets NEW_FILE_MODE, whatever the umask.
#[test]
fn a_new_file_gets_the_documented_mode() {
    let d = dir("new");
    let p = d.join("c.toml");
    write_atomic(&p, "x").unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, NEW_FILE_MODE);
    let _ = std::fs::remove_dir_all(&d);
}

/// The rename is the commit point: a failing directory fsync after it is reported as
/// not durable, not as a failed write (the file holds the new text).
#[test]
fn a_failed_directory_fsync_after_the_rename_is_not_a_failed_write() {
    let d = dir("dirsync");
    let p = d.join("c.toml");
    std::fs::write(&p, "old").unwrap();
    set_test_hooks(TestHooks { dir_sync_error: Some(libc::EIO), ..TestHooks::default() });
    let r = write_atomic(&p, "new");
    set_test_hooks(TestHooks::default());
    match r {
        Ok(Durable::DirectoryNotSynced(e)) => assert_eq!(e.raw_os_error(), Some(libc::EIO)),
        other => panic!("expected DirectoryNotSynced, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn resolve_follows_links_at_every_call() {
    let d = dir("resolve");
    std::fs::write(d.join("a.toml"), "a").unwrap();
    std::fs::write(d.join("b.toml"), "b").unwrap();
    let link = d.join("spillway.toml");
    std::os::unix::fs::symlink("a.toml", &link).unwrap();
    assert_eq!(resolve(&link).unwrap(), d.join("a.toml"), "relative target, from the link's directory");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(d.join("b.toml"), &link).unwrap();
    assert_eq!(resolve(&link).unwrap(), d.join("b.toml"), "re-pointed: the new target");
    let chain = d.join("chain.toml");
    std::os::unix::fs::symlink("spillway.toml", &chain).unwrap();
    assert_eq!(resolve(&chain).unwrap(), d.join("b.toml"), "links to links");
    std::os::unix::fs::symlink("gone.toml", d.join("dangling.toml")).unwrap();
    assert_eq!(resolve(&d.join("dangling.toml")).unwrap(), d.join("gone.toml"), "a dangling link names its missing target");
    assert_eq!(resolve(&d.join("plain.toml")).unwrap(), d.join("plain.toml"), "a missing plain path is itself");
    std::os::unix::fs::symlink("loop2", d.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", d.join("loop2")).unwrap();
    assert!(resolve(&d.join("loop1")).unwrap_err().to_string().contains("symbolic links"));
    let _ = std::fs::remove_dir_all(&d);
}

/// Writes `good` to the config file `p` with `mode`, keeps it as the last good file and
/// returns the backup's path.
fn kept_with_mode(p: &Path, mode: u32) -> PathBuf {
    std::fs::write(p, "good").unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    keep_last_good(p, "good");
    backup_path(p)
}

#[test]
fn the_last_good_file_is_kept_beside_the_target() {
    let d = dir("bak");
    let p = d.join("c.toml");
    let bak = kept_with_mode(&p, 0o600);
    assert_eq!(bak, d.join("c.toml.bak"));
    assert_eq!(std::fs::read_to_string(&bak).unwrap(), "good");
    assert_eq!(std::fs::metadata(&bak).unwrap().mode() & 0o7777, 0o600, "the backup is as private as the file");
    let before = std::fs::metadata(&bak).unwrap().modified().unwrap();
    keep_last_good(&p, "good");
    assert_eq!(std::fs::metadata(&bak).unwrap().modified().unwrap(), before, "unchanged text: not rewritten");
    keep_last_good(&p, "better");
    assert_eq!(std::fs::read_to_string(&bak).unwrap(), "better");
    let _ = std::fs::remove_dir_all(&d);
}

/// The backup takes the config file's owner, group and mode at every refresh, also over an
/// older backup that had others (QA: after `chmod 600` and an edit, `FILE.bak` stayed
/// 0644, readable by everyone), and even when its text is already the same.
#[test]
fn the_backup_follows_the_files_mode_and_owner() {
    let d = dir("bakmode");
    let p = d.join("c.toml");
    let bak = kept_with_mode(&p, 0o644);
    let mode = |f: &Path| std::fs::metadata(f).unwrap().mode() & 0o7777;
    assert_eq!(mode(&bak), 0o644);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    keep_last_good(&p, "better");
    assert_eq!((std::fs::read_to_string(&bak).unwrap().as_str(), mode(&bak)), ("better", 0o600), "new text: the file's mode");
    std::fs::set_permissions(&bak, std::fs::Permissions::from_mode(0o644)).unwrap();
    keep_last_good(&p, "better");
    assert_eq!(mode(&bak), 0o600, "same text, other mode: the file's mode");
    if nix::unistd::Uid::effective().is_root() {
        std::os::unix::fs::chown(&p, Some(4343), Some(4242)).unwrap();
        keep_last_good(&p, "best");
        let m = std::fs::metadata(&bak).unwrap();
        assert_eq!((m.uid(), m.gid()), (4343, 4242), "the file's owner and group");
    } else {
        eprintln!("SKIP (owner part) needs root to chown the test file");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A config file written anew after it was deleted takes the mode (and owner, group) of
/// its backup, which are the deleted file's (QA: a 0644 file came back 0640).
#[test]
fn a_recreated_file_gets_the_backups_mode() {
    let d = dir("recreate");
    let p = d.join("c.toml");
    for want in [0o644, 0o600] {
        kept_with_mode(&p, want);
        std::fs::remove_file(&p).unwrap();
        write_atomic(&p, "again").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, want, "recreated with the mode of {}", backup_path(&p).display());
    }
    if nix::unistd::Uid::effective().is_root() {
        std::os::unix::fs::chown(backup_path(&p), Some(4343), Some(4242)).unwrap();
        std::fs::remove_file(&p).unwrap();
        write_atomic(&p, "again").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid()), (4343, 4242), "the backup's owner and group");
    }
    let _ = std::fs::remove_dir_all(&d);
}
