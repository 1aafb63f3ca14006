//! IPv6 next-hop resolution with Neighbor Discovery (RFC 4861) against the
//! real `spillway` binary: its port is `net_af_packet` on one end of a veth pair, this test
//! is the segment on the other end (an `AF_PACKET` socket; IPv6 is off on both ends so the
//! kernel adds nothing). The backend of an IPv6 service has no `mac`: the daemon must send
//! a Neighbor Solicitation for it, learn its MAC from the (crafted) Neighbor Advertisement
//! answering it, not from an unsolicited one sent before, and then forward a client's SYN
//! to the IPv6 VIP to that MAC.
//!
//! Needs root (veth, raw sockets, DPDK); skipped with a message otherwise.

use etherparse::{Icmpv6Header, Icmpv6Slice, Icmpv6Type, Ipv6HeaderSlice, PacketBuilder, SlicedPacket, TransportSlice};
use spillway_shared::proto::StatusReport;
use std::io::Read;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B1_MAC: [u8; 6] = [2, 0, 0, 0, 0x21, 0x01];
const IMPOSTOR_MAC: [u8; 6] = [2, 0, 0, 0, 0x66, 0x66];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 0x05];

fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// A veth pair, deleted on drop.
struct Veth {
    a: String,
    b: String,
}

impl Veth {
    fn new() -> Result<Veth, String> {
        let tag = std::process::id() % 100_000;
        let v = Veth { a: format!("spnd{tag}a"), b: format!("spnd{tag}b") };
        let _ = Command::new("ip").args(["link", "del", &v.a]).stderr(Stdio::null()).status();
        let ip = |args: &[&str]| -> Result<(), String> {
            let o = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
            o.status.success().then_some(()).ok_or_else(|| format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr)))
        };
        ip(&["link", "add", &v.a, "type", "veth", "peer", "name", &v.b])?;
        for i in [&v.a, &v.b] {
            // No kernel IPv6 on either end: no DAD, router solicitations, MLD or ND answers.
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6"), "1").map_err(|e| format!("disable_ipv6 on {i}: {e}"))?;
            ip(&["link", "set", i, "up"])?;
        }
        Ok(v)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.a]).status();
    }
}

/// An `AF_PACKET` socket bound to one interface (all protocols), 50 ms receive timeout.
struct Raw(OwnedFd);

impl Raw {
    fn open(ifname: &str) -> Raw {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2)/bind(2)/setsockopt(2) calls with initialised arguments;
        // the fd is owned from here on.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto));
            assert!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
            let fd = OwnedFd::from_raw_fd(fd);
            let name = std::ffi::CString::new(ifname).unwrap();
            let ifindex = libc::if_nametoindex(name.as_ptr());
            assert!(ifindex > 0, "no interface {ifname}");
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = ifindex as i32;
            let r = libc::bind(fd.as_raw_fd(), (&sll as *const libc::sockaddr_ll).cast(), std::mem::size_of::<libc::sockaddr_ll>() as u32);
            assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
            let tv = libc::timeval { tv_sec: 0, tv_usec: 50_000 };
            let r = libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&tv as *const libc::timeval).cast(), std::mem::size_of::<libc::timeval>() as u32);
            assert_eq!(r, 0);
            Raw(fd)
        }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is a valid buffer of its length.
        let n = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(n, frame.len() as isize, "send: {}", std::io::Error::last_os_error());
    }

    /// The next frame received (not one this socket sent), or `None` after the timeout.
    fn recv(&self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 2048];
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        // SAFETY: buffers valid for their lengths.
        let n = unsafe { libc::recvfrom(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0, (&mut from as *mut libc::sockaddr_ll).cast(), &mut len) };
        if n <= 0 {
            return None;
        }
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            return Some(Vec::new());
        }
        buf.truncate(n as usize);
        Some(buf)
    }
}

/// A Neighbor Advertisement for fd00::11 at `mac` to the port's fd00::2 with `flags`
/// (Solicited 0x40, Override 0x20) and a Target Link-Layer Address option.
fn advertisement(mac: [u8; 6], flags: u8) -> Vec<u8> {
    let mut body = a6("fd00::11").octets().to_vec();
    body.extend_from_slice(&[2, 1]);
    body.extend_from_slice(&mac);
    let ty = Icmpv6Type::Unknown { type_u8: 136, code_u8: 0, bytes5to8: [flags, 0, 0, 0] };
    let mut out = Vec::new();
    PacketBuilder::ethernet2(mac, LB_MAC).ipv6(a6("fd00::11").octets(), a6("fd00::2").octets(), 255).icmpv6(ty).write(&mut out, &body).unwrap();
    let h = Icmpv6Header::with_checksum(ty, a6("fd00::11").octets(), a6("fd00::2").octets(), &body).unwrap();
    assert!(Icmpv6Slice::from_slice(&out[54..]).unwrap().is_checksum_valid(a6("fd00::11").octets(), a6("fd00::2").octets()) && h.checksum != 0);
    out
}

fn syn(sport: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC).ipv6(a6("fd01::5").octets(), a6("fd00::100").octets(), 64).tcp(sport, 80, 1, 1000).syn().write(&mut out, &[]).unwrap();
    out
}

/// Whether `f` is a Neighbor Solicitation for fd00::11, checked field by field (panics on
/// a wrong one).
fn is_solicitation_for_b1(f: &[u8]) -> bool {
    if f.len() < 86 || f[12..14] != [0x86, 0xdd] || f[20] != 58 || f[54] != 135 {
        return false;
    }
    let ip = Ipv6HeaderSlice::from_slice(&f[14..]).unwrap();
    let icmp = Icmpv6Slice::from_slice(&f[54..14 + 40 + usize::from(ip.payload_length())]).unwrap();
    assert_eq!(&icmp.payload()[..16], &a6("fd00::11").octets(), "the only IPv6 next hop is fd00::11");
    assert_eq!((&f[0..6], &f[6..12]), (&[0x33, 0x33, 0xff, 0, 0, 0x11][..], &LB_MAC[..]), "to the solicited-node group's MAC, from ours");
    assert_eq!((ip.source_addr(), ip.destination_addr(), ip.hop_limit()), (a6("fd00::2"), a6("ff02::1:ff00:11"), 255));
    assert!(icmp.is_checksum_valid(ip.source(), ip.destination()), "NS checksum");
    assert_eq!((&icmp.payload()[16..18], &icmp.payload()[18..24]), (&[1u8, 1][..], &LB_MAC[..]), "Source Link-Layer Address option");
    true
}

/// `f` is the client's SYN forwarded (L2 DSR) to `mac`.
fn forwarded_syn_to(f: &[u8], mac: [u8; 6]) -> bool {
    let Ok(p) = SlicedPacket::from_ethernet(f) else { return false };
    let to_vip = matches!(&p.net, Some(etherparse::NetSlice::Ipv6(ip)) if ip.header().destination_addr() == a6("fd00::100"));
    let tcp80 = matches!(&p.transport, Some(TransportSlice::Tcp(t)) if t.destination_port() == 80 && t.syn());
    to_vip && tcp80 && f[0..6] == mac
}

fn config(iface: &str) -> String {
    format!(
        r#"[dataplane]
eal_args = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--log-level=warning"]
workers = 1
idle_sleep_us = 200

[neighbors]
gratuitous_arp = false
refresh_sec = 30
retry_ms = 1000

[[ports]]
name = "p0"
device = "net_af_packet0,iface={iface}"
mac = "02:00:00:00:00:01"
address = "10.0.0.2"
address6 = "fd00::2"

[[services]]
name = "web6"
vip = "fd00::100"
port = 80
protocol = "tcp"

[[services.backends]]
name = "b1"
address = "fd00::11"
"#
    )
}

#[test]
fn an_ipv6_backend_without_mac_is_solicited_learned_and_served() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("not root: skipping (needs veth, AF_PACKET and DPDK)");
        return;
    }
    let veth = Veth::new().unwrap_or_else(|e| panic!("veth pair: {e}"));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("spw-nd-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("spillway.toml"), config(&veth.a)).unwrap();
    let seg = Raw::open(&veth.b);
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("--config")
        .arg(dir.join("spillway.toml"))
        .arg("--socket")
        .arg(dir.join("ctl.sock"))
        .args(["--duration", "12"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spillway");
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
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

    // 1. The daemon solicits fd00::11; an unsolicited NA from an impostor comes first and
    //    must not be learned; the solicited answer right after it is.
    let t0 = Instant::now();
    let mut solicitations = 0;
    while t0.elapsed() < Duration::from_secs(8) && solicitations == 0 {
        if let Some(f) = seg.recv() {
            if is_solicitation_for_b1(&f) {
                solicitations += 1;
            }
        }
    }
    let waited = t0.elapsed();
    seg.send(&advertisement(IMPOSTOR_MAC, 0x20));
    seg.send(&advertisement(B1_MAC, 0x60));

    // 2. Client SYNs (a new source port each time) until one comes out towards b1's MAC.
    let mut forwarded_to = None;
    let t1 = Instant::now();
    let mut sport = 40_000;
    while solicitations > 0 && forwarded_to.is_none() && t1.elapsed() < Duration::from_secs(4) {
        seg.send(&syn(sport));
        sport += 1;
        let until = Instant::now() + Duration::from_millis(100);
        while Instant::now() < until {
            match seg.recv() {
                Some(f) if forwarded_syn_to(&f, B1_MAC) => forwarded_to = Some(B1_MAC),
                Some(f) if forwarded_syn_to(&f, IMPOSTOR_MAC) => forwarded_to = Some(IMPOSTOR_MAC),
                _ => {}
            }
        }
    }
    let _ = child.wait();
    let stdout = to.join().unwrap_or_default();
    let stderr = te.join().unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let show = || format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(solicitations > 0, "no Neighbor Solicitation for fd00::11 within {waited:?}\n{}", show());
    assert_eq!(forwarded_to, Some(B1_MAC), "the SYN must reach the MAC of the solicited answer\n{}", show());
    let json = stdout.lines().find_map(|l| l.strip_prefix("final_status_json ")).unwrap_or_else(|| panic!("no final status\n{}", show()));
    let st: StatusReport = serde_json::from_str(json).unwrap();
    assert_eq!(st.neighbors.entries, vec![("fd00::11".to_string(), "02:00:00:00:21:01".to_string(), st.neighbors.entries[0].2)], "{:?}", st.neighbors);
    assert!(st.neighbors.replies >= 1 && st.neighbors.ignored >= 1, "the solicited NA learned, the unsolicited one ignored: {:?}", st.neighbors);
    assert!(st.total.arp_replies_seen >= 2, "both NAs handed over by the worker: {}", st.total.arp_replies_seen);
    assert!(st.neighbors.requests >= 1);
}
