//! `capture drops` against a real daemon: a `--vip` that is no configured VIP is warned
//! about on stderr in the words of `vip drain`'s refusal, and the capture still runs (drops
//! to any address can be captured); a configured VIP gets no warning (fresh-user QA: a
//! mistyped VIP was accepted silently and captured nothing).

mod common;

use common::{ctl_bin, null_example, Daemon};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `capture drops ARGS -w /dev/null` for a moment, ends it with SIGINT as a user
/// would: (exit code, stderr).
fn capture_briefly(d: &Daemon, args: &[&str]) -> (i32, String) {
    let child = Command::new(ctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .args(["capture", "drops"])
        .args(args)
        .args(["-w", "/dev/null"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run spillwayctl");
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: plain kill(2) of our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).to_string())
}

#[test]
fn a_vip_filter_that_is_no_vip_is_warned_about_and_captured() {
    let d = Daemon::start("capture-vip", &null_example());
    // the warning compares with `vip show`'s rows: wait for the first evaluation
    for _ in 0..100 {
        if !d.ok(&["vip", "show"]).contains("has not evaluated its VIPs yet") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, err) = capture_briefly(&d, &["--vip", "10.9.9.9"]);
    assert_eq!(code, 0, "{err}");
    let mut lines = err.lines();
    assert_eq!(
        lines.next(),
        Some("spillwayctl: warning: --vip 10.9.9.9: not a configured VIP (configured: 10.0.0.100); capturing the drops sent to 10.9.9.9 all the same (e.g. not_for_vip)"),
        "{err}"
    );
    assert_eq!(lines.next(), Some("spillwayctl: capturing drops (every reason), snaplen 512"), "{err}");
    // the same words as `vip drain`'s refusal
    let drain = d.expect(&["vip", "drain", "10.9.9.9"], 1);
    assert!(drain.contains("vip 10.9.9.9: not a configured VIP (configured: 10.0.0.100)"), "{drain}");
    let (code, err) = capture_briefly(&d, &["--vip", "10.0.0.100"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(err.starts_with("spillwayctl: capturing drops (every reason), snaplen 512\n"), "{err}");
}

/// A refused capture (a snaplen out of range, an unknown reason, another capture already
/// running) leaves an existing `-w` file as it was (fresh-user QA: it was emptied before
/// the daemon was asked).
#[test]
fn a_refused_capture_leaves_the_output_file_alone() {
    let d = Daemon::start("capture-refused", &null_example());
    let file = d.dir.join("keep.pcapng");
    let refused = |args: &[&str]| {
        std::fs::write(&file, "important\n").unwrap();
        let o = Command::new(ctl_bin()).arg("--socket").arg(&d.socket).args(["capture", "drops"]).args(args).arg("-w").arg(&file).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "important\n", "{args:?}: {err}");
        err
    };
    refused(&["--snaplen", "0"]);
    let err = refused(&["--reason", "nope"]);
    assert!(err.contains("nope"), "{err}");
    // another capture running: this one is refused too
    let mut first = Command::new(ctl_bin()).arg("--socket").arg(&d.socket).args(["capture", "drops", "-w", "/dev/null"]).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let err = refused(&[]);
    // SAFETY: plain kill(2) of our own child process.
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    let _ = first.wait();
    assert!(err.contains("already"), "{err}");
    // a file that cannot be written is reported before the daemon is asked
    let o = Command::new(ctl_bin()).arg("--socket").arg(&d.socket).args(["capture", "drops", "-w"]).arg(d.dir.join("no/such/dir/x.pcapng")).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("spillwayctl: cannot write "), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `capture drops -w -` ends when the reader of its output goes away, even when no frame
/// is dropped (nothing to write, so no EPIPE), and frees the daemon's one capture at once:
/// the next capture is accepted (fresh-user QA: `capture drops -w - | head -c 10` on a
/// quiet daemon ran until killed, and every other capture was refused meanwhile).
#[test]
fn a_capture_to_a_reader_that_went_away_ends() {
    use std::io::Read;
    let d = Daemon::start("capture-reader-gone", &null_example());
    let mut child = Command::new(ctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .args(["capture", "drops", "-w", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run spillwayctl");
    // the pcapng section header block: the capture runs
    let mut out = child.stdout.take().unwrap();
    let mut shb = [0u8; 4];
    out.read_exact(&mut shb).unwrap();
    assert_eq!(shb, [0x0a, 0x0d, 0x0d, 0x0a]);
    drop(out);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if status.is_none() {
        let _ = child.kill();
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(status.is_some(), "still capturing 5 s after its reader went away: {err}");
    assert!(err.contains("the reader of the capture went away"), "{err}");
    // the daemon's capture is free now, not after its 2 s lease
    let o = Command::new(ctl_bin()).arg("--socket").arg(&d.socket).args(["capture", "drops", "--count", "1", "-w", "/dev/null", "--timeout", "3"]).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: plain kill(2) of our own child process.
    unsafe { libc::kill(o.id() as i32, libc::SIGINT) };
    let o = o.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.starts_with("spillwayctl: capturing drops"), "{err}");
}
