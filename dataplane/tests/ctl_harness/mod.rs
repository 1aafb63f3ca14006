//! The harness of the `spillwayctl` end-to-end tests (`ctl_live.rs`, `ctl_access.rs`): the
//! real `spillway` daemon as a child process on DPDK virtual devices (EAL starts once per
//! process), `spillwayctl` runs against its socket, and raw frames.
//!
//! `spillwayctl` is taken from the same target directory as `spillway`; build both first
//! (`cargo test -p spillway-ctl -p spillway-dataplane` does).

#![allow(dead_code)]

use spillway_shared::config::Config;
use spillway_shared::proto::{self, Request, Response, StatusReport};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn ctl_bin() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_spillway")).with_file_name("spillwayctl");
    assert!(p.exists(), "{} not built: run `cargo build -p spillway-ctl` (or test both packages together)", p.display());
    p
}

pub fn example() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/null.toml")).expect("examples/null.toml")
}

pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub config: PathBuf,
}

impl Daemon {
    /// Starts `spillway` on `cfg_text` and waits (30 s at most) until the socket answers
    /// `status`.
    pub fn start(name: &str, cfg_text: &str) -> Daemon {
        Daemon::start_within(name, cfg_text, Duration::from_secs(30))
    }

    /// [`Daemon::start`] with a longer wait for `status`, for large configs.
    pub fn start_within(name: &str, cfg_text: &str, wait: Duration) -> Daemon {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("spw-ctl-{}-{name}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("spillway.toml");
        std::fs::write(&config, cfg_text).unwrap();
        let socket = dir.join("run").join("ctl.sock");
        let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_spillway"))
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
        let mut d = Daemon { child, dir, socket, config };
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if d.try_status().is_some() {
                return d;
            }
            // a daemon that refused its config or died is not waited for
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("daemon exited ({status}) before answering; log:\n{}", d.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("daemon did not answer within {wait:?}; log:\n{}", d.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn try_status(&self) -> Option<StatusReport> {
        match raw_request(&self.socket, &Request::Status) {
            Ok(Response::Status(s)) => Some(s),
            _ => None,
        }
    }

    pub fn status(&self) -> StatusReport {
        self.try_status().unwrap_or_else(|| panic!("status failed; log:\n{}", self.log()))
    }

    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(ctl_bin()).arg("--socket").arg(&self.socket).args(args).output().expect("run spillwayctl")
    }

    /// Runs spillwayctl, expects exit `code`, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.expect(args, 0)
    }

    pub fn expect(&self, args: &[&str], code: i32) -> String {
        let o = self.ctl(args);
        let (out, err) = (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
        assert_eq!(o.status.code(), Some(code), "spillwayctl {args:?}: exit {:?}\nstdout:\n{out}\nstderr:\n{err}\ndaemon log:\n{}", o.status, self.log());
        eprintln!("$ spillwayctl {}\n{out}{err}", args.join(" "));
        if code == 0 {
            out
        } else {
            err
        }
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("spillwayctl {args:?} --json: {e}\n{out}"))
    }

    pub fn file_config(&self) -> Config {
        Config::from_toml(&std::fs::read_to_string(&self.config).unwrap()).expect("persisted config parses")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) of our own child.
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

pub fn raw_request(socket: &Path, req: &Request) -> Result<Response, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    proto::write_frame(&mut s, &proto::encode_request(req)).map_err(|e| e.to_string())?;
    let body = proto::read_frame(&mut s).map_err(|e| e.to_string())?.ok_or("eof")?;
    proto::decode_response(&body).map_err(|e| e.to_string())
}

/// Sends raw bytes, half-closes, returns the daemon's error reply (if any).
pub fn raw_bytes(socket: &Path, bytes: &[u8]) -> Option<String> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    if out.len() < 4 {
        return None;
    }
    match proto::decode_response(&out[4..]) {
        Ok(Response::Error { message }) => Some(message),
        other => Some(format!("{other:?}")),
    }
}
