//! `spillwayctl top` in a real terminal (a pseudo-terminal from util-linux `script`):
//! Ctrl-C quits the live view. In its raw mode Ctrl-C is a key, not SIGINT (fresh-user QA:
//! it cleared the filter and top went on; only `q` or Esc quit).

mod common;

use common::{ctl_bin, null_example, Daemon};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Waits up to `secs` for `child` to exit; kills it when it does not.
fn exited_within(child: &mut std::process::Child, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

#[test]
fn ctrl_c_quits_the_live_view() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux) to give top a terminal");
        return;
    }
    let d = Daemon::start("top-ctrl-c", &null_example());
    let cmd = format!("{} --socket {} top --interval 0.2", ctl_bin().display(), d.socket.display());
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run script");
    let mut keys = child.stdin.take().unwrap();
    // the live view is up once a sample or two have been drawn
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "top ended before any key");
    keys.write_all(b"\x03").unwrap();
    keys.flush().unwrap();
    let quit = exited_within(&mut child, 5);
    drop(keys);
    assert!(quit, "top still runs 5 s after Ctrl-C");
}
