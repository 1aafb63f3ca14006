//! `spillway --check` against the real binary (no DPDK): its output to a reader that went
//! away ends it quietly like `spillwayctl` (SIGPIPE, exit status 141 in a shell), never
//! with a panic; and a port whose device opens a kernel interface that does not exist is
//! refused with the interface named.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A config with one port of `device`, written to its own temporary directory.
fn config(name: &str, device: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("spw-check-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        "[dataplane]\nworkers = 1\nsocket = \"{}\"\n\n[[ports]]\nname = \"p0\"\ndevice = \"{device}\"\naddress = \"10.0.0.1\"\n\n\
         [[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = 80\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.0.11\"\nmac = \"02:00:00:00:00:11\"\n",
        dir.join("ctl.sock").display()
    );
    let path = dir.join("spillway.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// A pipe whose read end is already closed: every write to the other end fails (EPIPE).
fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created by pipe(2) and are owned here only.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

fn check(path: &PathBuf, stdout: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway")).arg("--config").arg(path).arg("--check").stdout(stdout).stderr(Stdio::piped()).output().unwrap()
}

#[test]
fn check_output_to_a_closed_pipe_ends_quietly() {
    let (dir, path) = config("pipe", "net_null0");
    // The same config to a reader that stays: it passes.
    let o = check(&path, Stdio::piped());
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("configuration OK (1 service, 1 port)"), "{o:?}");

    let o = check(&path, Stdio::from(closed_pipe()));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "panicked on a broken pipe: {stderr}");
    assert_ne!(o.status.code(), Some(134), "aborted: {stderr}");
    assert_ne!(o.status.signal(), Some(libc::SIGABRT), "aborted: {stderr}");
    // Like spillwayctl: killed by SIGPIPE (a shell shows 141), or exit 141.
    assert!(o.status.signal() == Some(libc::SIGPIPE) || o.status.code() == Some(141), "{:?}: {stderr}", o.status);
    assert!(stderr.is_empty(), "not quiet: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_refuses_an_interface_that_does_not_exist() {
    let (dir, path) = config("iface", "net_af_packet0,iface=doesnotexist0");
    let o = check(&path, Stdio::piped());
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains(": ports[0].device: interface \"doesnotexist0\" does not exist (no /sys/class/net/doesnotexist0)"), "{out}");
    assert!(!out.contains("configuration OK"), "{out}");
    // An interface that exists passes (`lo` is in every network namespace).
    let (dir2, path) = config("lo", "net_af_packet0,iface=lo");
    let o = check(&path, Stdio::piped());
    assert!(o.status.success(), "{o:?}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}
