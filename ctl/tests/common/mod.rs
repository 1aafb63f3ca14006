//! A real `spillway` daemon for `spillwayctl` tests: started as a child process on a copy of
//! `examples/null.toml` (DPDK null device, no NIC or hugepages; needs root for EAL) in its
//! own temporary directory, with its own control socket.
//!
//! `spillway` is taken from the target directory of this test's `spillwayctl`; build it
//! first (`cargo build -p spillway-dataplane`, or test the workspace: `cargo test --workspace`
//! builds every binary before running any test).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `spillwayctl` under test.
pub fn ctl_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_spillwayctl"))
}

/// The `spillway` daemon next to it.
pub fn daemon_bin() -> PathBuf {
    let p = ctl_bin().with_file_name("spillway");
    assert!(p.exists(), "{} not built: run `cargo build -p spillway-dataplane` first (or `cargo test --workspace`)", p.display());
    p
}

/// Repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tracked `examples/null.toml` (read only; the daemon runs on a copy).
pub fn null_example() -> String {
    std::fs::read_to_string(repo().join("examples/null.toml")).expect("examples/null.toml")
}

/// A running daemon; stopped (SIGTERM) and its directory removed on drop.
pub struct Daemon {
    child: Child,
    /// Temporary directory holding config, socket and log.
    pub dir: PathBuf,
    /// Control socket.
    pub socket: PathBuf,
    /// Config file the daemon runs on (and persists live edits to).
    pub config: PathBuf,
}

impl Daemon {
    /// Starts `spillway` on `cfg_text` (written to `<tmp>/spillway.toml`) and waits until
    /// `spillwayctl status` answers.
    pub fn start(name: &str, cfg_text: &str) -> Daemon {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("spw-ctltest-{}-{name}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("spw.toml");
        std::fs::write(&config, cfg_text).unwrap();
        let socket = dir.join("spw.sock");
        let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
        let child = Command::new(daemon_bin())
            .arg("--config")
            .arg(&config)
            .arg("--socket")
            .arg(&socket)
            .arg("--duration")
            .arg("600")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn spillway");
        let d = Daemon { child, dir, socket, config };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if d.ctl(&["status"]).status.success() {
                return d;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("daemon did not answer within 60 s; log:\n{}", d.log());
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// Runs `spillwayctl --socket SOCKET ARGS...`.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(ctl_bin()).arg("--socket").arg(&self.socket).args(args).output().expect("run spillwayctl")
    }

    /// Runs spillwayctl, expects exit `code`; returns stdout (code 0) or stderr.
    pub fn expect(&self, args: &[&str], code: i32) -> String {
        let o = self.ctl(args);
        let (out, err) = (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
        assert_eq!(o.status.code(), Some(code), "spillwayctl {args:?}: exit {:?}\nstdout:\n{out}\nstderr:\n{err}\ndaemon log:\n{}", o.status, self.log());
        if code == 0 {
            out
        } else {
            err
        }
    }

    /// Runs spillwayctl, expects success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.expect(args, 0)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) of our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
