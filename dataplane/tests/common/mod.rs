//! Helpers of the packet-case integration tests: a tiny pcap reader/writer (independent of
//! the dataplane), config generation, running the real `spillway` binary on `net_pcap`
//! with a timeout, and reading its `final_status_json` line.
//!
//! EAL starts once per process, so every run is a child process. Runs are serialised by a
//! process-wide lock: each daemon polls with pinned threads, and the test hosts are small.

#![allow(dead_code)]

use spillway_shared::proto::StatusReport;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The forwarder's MAC (the captures are addressed to it).
pub const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The VIP of the captures.
pub const VIP: [u8; 4] = [10, 0, 0, 100];
/// The port's own address (ARP, encapsulation source).
pub const PORT_ADDR: [u8; 4] = [10, 0, 0, 2];

/// MAC of backend `i` (0-based).
pub fn backend_mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0x0b, (i + 1) as u8]
}
/// Address of backend `i` (0-based).
pub fn backend_addr(i: usize) -> [u8; 4] {
    [10, 0, 11, (i + 1) as u8]
}
/// Backend index of a destination MAC.
pub fn backend_of_mac(mac: &[u8]) -> Option<usize> {
    (0..16).find(|i| backend_mac(*i)[..] == *mac)
}

// ---------------------------------------------------------------------------------------
// pcap (libpcap classic format: 24-byte global header, 16-byte record headers)
// ---------------------------------------------------------------------------------------

/// Reads every frame of a classic pcap file (either byte order, µs or ns timestamps).
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_pcap(&d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Parses pcap bytes.
pub fn parse_pcap(d: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if d.len() < 24 {
        return Err(format!("pcap shorter than its global header ({} bytes)", d.len()));
    }
    let magic = [d[0], d[1], d[2], d[3]];
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Err(format!("not a pcap file (magic {magic:02x?})")),
    };
    let u32at = |o: usize| {
        let b = [d[o], d[o + 1], d[o + 2], d[o + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let linktype = u32at(20);
    if linktype != 1 {
        return Err(format!("link type {linktype}, expected 1 (Ethernet)"));
    }
    let mut out = Vec::new();
    let mut o = 24;
    while o < d.len() {
        if o + 16 > d.len() {
            return Err(format!("truncated record header at {o}"));
        }
        let caplen = u32at(o + 8) as usize;
        o += 16;
        if o + caplen > d.len() {
            return Err(format!("truncated record at {o}: caplen {caplen}"));
        }
        out.push(d[o..o + caplen].to_vec());
        o += caplen;
    }
    Ok(out)
}

/// Writes frames as a little-endian µs pcap (Ethernet), 1 µs apart.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut d = Vec::with_capacity(24 + frames.iter().map(|f| f.len() + 16).sum::<usize>());
    d.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    d.extend_from_slice(&2u16.to_le_bytes());
    d.extend_from_slice(&4u16.to_le_bytes());
    d.extend_from_slice(&0i32.to_le_bytes());
    d.extend_from_slice(&0u32.to_le_bytes());
    d.extend_from_slice(&65535u32.to_le_bytes());
    d.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        d.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        d.extend_from_slice(&(i as u32 % 1_000_000).to_le_bytes());
        d.extend_from_slice(&(f.len() as u32).to_le_bytes());
        d.extend_from_slice(&(f.len() as u32).to_le_bytes());
        d.extend_from_slice(f);
    }
    std::fs::write(path, d).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// A capture of `tests/packets/` (repository root).
pub fn case_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("tests").join("packets").join(name)
}

// ---------------------------------------------------------------------------------------
// checksums (RFC 1071), written here again so the tests do not trust the dataplane's
// ---------------------------------------------------------------------------------------

/// Internet checksum of `data`; a header/message with a valid checksum field gives 0.
pub fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from(c[0]) << 8 };
        sum += u32::from(w);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

// ---------------------------------------------------------------------------------------
// configuration
// ---------------------------------------------------------------------------------------

/// What a test's daemon serves.
#[derive(Clone, Debug)]
pub struct Setup {
    /// `forwarding_mode` of the services.
    pub mode: &'static str,
    /// `encap_mtu` of the services.
    pub encap_mtu: u16,
    /// `[conntrack] capacity_per_worker`.
    pub ct_capacity: Option<u32>,
    /// Also serve UDP/53 on the VIP.
    pub udp53: bool,
    /// Also serve UDP/5353 on the VIP, with backends of its own (indices `backends..2 ×
    /// backends`).
    pub udp5353: bool,
    /// Backends per service.
    pub backends: usize,
    /// The port's own address.
    pub port_address: bool,
    /// Also the IPv6 services of `cases/packets/README.md` on fd00::100: TCP/80 on backends
    /// 8–11 and UDP/53 on backends 12–13 (addresses `fd00:21::N` / `fd00:22::N`), and the
    /// client zone fd01::/64; with `udp5353`, UDP/5353 on backends 14–15 (`fd00:23::N`).
    pub ipv6: bool,
    /// `[[ports]] mtu` (absent: the default 1500).
    pub mtu: Option<u16>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup { mode: "L2_DSR", encap_mtu: 1500, ct_capacity: None, udp53: false, udp5353: false, backends: 4, port_address: true, ipv6: false, mtu: None }
    }
}

fn ip(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}
fn mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl Setup {
    /// The daemon config for a net_pcap port replaying `rx` into `tx`.
    pub fn config(&self, rx: &Path, tx: &Path) -> String {
        let mut s = String::new();
        s += "[dataplane]\n";
        s += "eal_args = [\"--no-huge\", \"--no-shconf\", \"-m\", \"512\", \"--no-pci\", \"--log-level=warning\"]\n";
        s += "workers = 1\nidle_sleep_us = 200\nmbufs_per_port = 8191\n\n";
        // The output capture holds exactly what the replayed frames caused: no gratuitous
        // ARP at start (every backend has a mac, so no ARP request either).
        s += "[neighbors]\ngratuitous_arp = false\n\n";
        if let Some(c) = self.ct_capacity {
            s += &format!("[conntrack]\ncapacity_per_worker = {c}\n\n");
        }
        s += "[[ports]]\nname = \"p0\"\n";
        s += &format!("device = \"net_pcap0,rx_pcap={},tx_pcap={}\"\n", rx.display(), tx.display());
        s += &format!("mac = \"{}\"\n", mac(LB_MAC));
        if self.port_address {
            s += &format!("address = \"{}\"\n", ip(PORT_ADDR));
        }
        if let Some(m) = self.mtu {
            s += &format!("mtu = {m}\n");
        }
        s += "\n";
        let mut svcs = vec![("web", 80u16, "tcp", 0usize)];
        if self.udp53 {
            svcs.push(("dns", 53, "udp", 0));
        }
        if self.udp5353 {
            svcs.push(("mdns", 5353, "udp", self.backends));
        }
        if self.ipv6 {
            s += "[[client_zones]]\nprefix = \"fd01::/64\"\nzone = \"z1\"\n\n";
            let mdns6 = [("mdns6", 5353u16, "udp", 14usize, 2usize, 23)];
            let extra = if self.udp5353 { &mdns6[..] } else { &[] };
            for (name, port, proto, first, n, net) in [("web6", 80u16, "tcp", 8usize, 4usize, 21), ("dns6", 53, "udp", 12, 2, 22)].iter().chain(extra).copied() {
                s += &format!("[[services]]\nname = \"{name}\"\nvip = \"fd00::100\"\nport = {port}\nprotocol = \"{proto}\"\n");
                s += &format!("forwarding_mode = \"{}\"\nencap_mtu = {}\n\n", self.mode, self.encap_mtu);
                for i in first..first + n {
                    s += &format!("[[services.backends]]\nname = \"b{}\"\naddress = \"fd00:{net}::{}\"\nmac = \"{}\"\nzone = \"z1\"\n\n", i + 1, i - first + 1, mac(backend_mac(i)));
                }
            }
        }
        for (name, port, proto, first) in svcs {
            s += &format!("[[services]]\nname = \"{name}\"\nvip = \"{}\"\nport = {port}\nprotocol = \"{proto}\"\n", ip(VIP));
            s += &format!("forwarding_mode = \"{}\"\nencap_mtu = {}\n\n", self.mode, self.encap_mtu);
            for i in first..first + self.backends {
                s += &format!(
                    "[[services.backends]]\nname = \"b{}\"\naddress = \"{}\"\nmac = \"{}\"\n\n",
                    i + 1,
                    ip(backend_addr(i)),
                    mac(backend_mac(i))
                );
            }
        }
        s
    }
}

// ---------------------------------------------------------------------------------------
// running the daemon
// ---------------------------------------------------------------------------------------

/// What one daemon run left behind.
pub struct Run {
    /// Frames the daemon sent (the tx pcap), in order.
    pub out: Vec<Vec<u8>>,
    /// The final status report.
    pub status: StatusReport,
    /// Exit status.
    pub success: bool,
    /// stdout (final counters).
    pub stdout: String,
    /// stderr (logs).
    pub stderr: String,
}

impl Run {
    /// Total drops of one reason (by its counter name).
    pub fn drops(&self, reason: &str) -> u64 {
        self.status.total.drops.iter().find(|(n, _)| n == reason).map(|d| d.1).unwrap_or_else(|| panic!("no drop reason named {reason}: {:?}", self.status.total.drops))
    }
    /// Sum of all drops.
    pub fn total_drops(&self) -> u64 {
        self.status.total.drops.iter().map(|d| d.1).sum()
    }
    /// Drop reasons with a non-zero count.
    pub fn nonzero_drops(&self) -> Vec<(String, u64)> {
        self.status.total.drops.iter().filter(|d| d.1 > 0).cloned().collect()
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

fn scratch_dir(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let d = std::env::temp_dir().join(format!("spw-pcap-{}-{name}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Replays `frames` through the real `spillway` binary for `duration_sec` seconds and
/// returns what it sent and its final counters. Panics (with the daemon's output) when the
/// daemon does not finish within a generous timeout or prints no final status.
pub fn run_frames(name: &str, setup: &Setup, frames: &[Vec<u8>], duration_sec: f64) -> Run {
    let dir = scratch_dir(name);
    let rx = dir.join("in.pcap");
    write_pcap(&rx, frames);
    run_in(&dir, name, setup, &rx, duration_sec)
}

/// Like [`run_frames`], replaying a capture file as it is.
pub fn run_capture(name: &str, setup: &Setup, capture: &Path, duration_sec: f64) -> Run {
    let dir = scratch_dir(name);
    run_in(&dir, name, setup, capture, duration_sec)
}

fn run_in(dir: &Path, name: &str, setup: &Setup, rx: &Path, duration_sec: f64) -> Run {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tx = dir.join("out.pcap");
    let cfg_path = dir.join("spillway.toml");
    std::fs::write(&cfg_path, setup.config(rx, &tx)).expect("write config");
    let socket = dir.join("ctl.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("--config")
        .arg(&cfg_path)
        .arg("--socket")
        .arg(&socket)
        .arg("--duration")
        .arg(duration_sec.to_string())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spillway");
    // Drain the pipes on threads so a chatty daemon never blocks on a full pipe.
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs_f64(duration_sec + 60.0);
    let status = loop {
        match child.try_wait().expect("wait") {
            Some(st) => break Some(st),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let stdout = to.join().unwrap_or_default();
    let stderr = te.join().unwrap_or_default();
    let Some(status) = status else {
        panic!("[{name}] spillway did not stop within {duration_sec} s + 60 s\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    let json = stdout
        .lines()
        .find_map(|l| l.strip_prefix("final_status_json "))
        .unwrap_or_else(|| panic!("[{name}] no final_status_json line (exit {status})\nstdout:\n{stdout}\nstderr:\n{stderr}"));
    let report: StatusReport = serde_json::from_str(json).unwrap_or_else(|e| panic!("[{name}] final_status_json: {e}\n{json}"));
    let out = if tx.exists() { read_pcap(&tx) } else { Vec::new() };
    eprintln!("[{name}] {} frames in → {} out; exit {status}\n{stdout}", report.total.rx, out.len());
    let _ = std::fs::remove_dir_all(dir);
    Run { out, status: report, success: status.success(), stdout, stderr }
}

// ---------------------------------------------------------------------------------------
// frame builders (etherparse)
// ---------------------------------------------------------------------------------------

/// The client-side MAC used by generated frames.
pub const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 0x05];

/// A TCP segment client → VIP:80 with the given flags (SYN when `syn`, else ACK).
pub fn tcp_frame(src: [u8; 4], sport: u16, syn: bool) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC).ipv4(src, VIP, 64);
    let mut out = Vec::new();
    if syn {
        b.tcp(sport, 80, 1000, 8192).syn().write(&mut out, &[]).expect("build");
    } else {
        b.tcp(sport, 80, 1001, 8192).ack(1).write(&mut out, b"hello").expect("build");
    }
    out
}

/// An ARP request (or reply when `oper` = 2) from `spa` asking for `tpa`.
pub fn arp_frame(oper: u16, sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&sha);
    f.extend_from_slice(&0x0806u16.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    f.extend_from_slice(&oper.to_be_bytes());
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tpa);
    f.resize(60, 0); // Ethernet minimum (without FCS)
    f
}
