//! `spillwayctl replay` on captures written here (pcap-file, etherparse): the flows it says
//! move are those `explain --config` and a live daemon's `--dry-run` predict; fragments
//! and ICMP errors stay with their flows; a pcapng as `capture drops` writes it replays
//! with its own timestamps; malformed captures are refused (exit 2) with the reason.

mod common;

use common::{ctl_bin, null_example, Daemon};
use etherparse::{IpNumber, Ipv4Header, PacketBuilder};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::PcapNgWriter;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LB: [u8; 6] = [2, 0, 0, 0, 0, 1];
const CLIENT: [u8; 6] = [2, 0, 0, 0, 0x10, 5];
const ROUTER: [u8; 6] = [2, 0, 0, 0, 0x20, 1];
const VIP: [u8; 4] = [10, 0, 0, 100];

/// A temporary directory, removed on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("spw-replay-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }
    fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
    fn write(&self, f: &str, text: &str) -> PathBuf {
        let p = self.path(f);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A temporary directory holding the null example as `old.toml`: (it, the example's
/// text, that file).
fn baseline(name: &str) -> (Tmp, String, PathBuf) {
    let t = Tmp::new(name);
    let base = null_example();
    let old = t.write("old.toml", &base);
    (t, base, old)
}

/// The null example with backend `name` of its first service disabled.
fn disabled(cfg: &str, name: &str) -> String {
    let line = format!("name = \"{name}\"\n");
    assert!(cfg.contains(&line));
    cfg.replacen(&line, &format!("{line}enabled = false\n"), 1)
}

/// The config without backend `name`.
fn removed(cfg: &str, name: &str) -> String {
    let at = cfg.find(&format!("[[services.backends]]\nname = \"{name}\"\n")).unwrap();
    let end = cfg[at + 10..].find("[[").map_or(cfg.len(), |e| at + 10 + e);
    format!("{}{}", &cfg[..at], &cfg[end..])
}

fn client(i: usize) -> [u8; 4] {
    [10, 1 + (i % 2) as u8, (i / 200) as u8, (10 + i % 200) as u8]
}

/// A TCP frame from client `i` (port 40000 + i) to the VIP's port 80.
fn tcp(i: usize, syn: bool, fin: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(CLIENT, LB).ipv4(client(i), VIP, 64);
    let b = if syn { b.tcp(40000 + i as u16, 80, 1, 1024).syn() } else { b.tcp(40000 + i as u16, 80, 2, 1024).ack(1) };
    let b = if fin { b.fin() } else { b };
    let mut out = Vec::new();
    b.write(&mut out, if syn { b"" } else { b"GET /" }).unwrap();
    out
}

/// A UDP datagram of 2,000 octets from `src`:`sport` to the VIP's port 53, as two IPv4
/// fragments (identification `id`).
fn fragmented_dns(src: [u8; 4], sport: u16, id: u16) -> Vec<Vec<u8>> {
    let mut whole = Vec::new();
    PacketBuilder::ethernet2(CLIENT, LB).ipv4(src, VIP, 64).udp(sport, 53).write(&mut whole, &[7u8; 2000]).unwrap();
    let l4 = &whole[34..];
    let (a, b) = l4.split_at(1480);
    [(a, true, 0u16), (b, false, 185)]
        .iter()
        .map(|(data, more, off)| {
            let mut h = Ipv4Header::new(data.len() as u16, 64, IpNumber::UDP, src, VIP).unwrap();
            h.identification = id;
            h.more_fragments = *more;
            h.fragment_offset = etherparse::IpFragOffset::try_new(*off).unwrap();
            h.header_checksum = h.calc_header_checksum();
            let mut f = whole[..14].to_vec();
            f.extend_from_slice(&h.to_bytes());
            f.extend_from_slice(data);
            f
        })
        .collect()
}

/// An ICMP fragmentation-needed error from a router to the VIP about the VIP's packet to
/// client `i` (RFC 792: the quoted IPv4 header and first 8 octets).
fn icmp_error(i: usize) -> Vec<u8> {
    let mut quoted = Vec::new();
    PacketBuilder::ipv4(VIP, client(i), 64).tcp(80, 40000 + i as u16, 1, 1024).write(&mut quoted, b"").unwrap();
    quoted.truncate(28);
    let t = etherparse::Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 });
    let mut out = Vec::new();
    PacketBuilder::ethernet2(ROUTER, LB).ipv4([192, 0, 2, 1], VIP, 64).icmpv4(t).write(&mut out, &quoted).unwrap();
    out
}

/// Writes a µs pcap, frames `step_us` apart.
fn write_pcap(path: &Path, frames: &[Vec<u8>], step_us: u64) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::with_header(f, PcapHeader::default()).unwrap();
    for (k, fr) in frames.iter().enumerate() {
        let ts = Duration::from_secs(1_700_000_000) + Duration::from_micros(step_us * k as u64);
        w.write_packet(&PcapPacket::new(ts, fr.len() as u32, fr)).unwrap();
    }
}

fn run(args: &[&Path]) -> (Option<i32>, String, String) {
    let o = Command::new(ctl_bin()).arg("replay").args(args).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

/// `replay --baseline OLD --config NEW CAPTURE --json`, which must succeed.
fn replay(old: &Path, new: &Path, cap: &Path) -> Value {
    let (code, out, err) = run(&[Path::new("--baseline"), old, Path::new("--config"), new, cap, Path::new("--json")]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    serde_json::from_str(&out).unwrap()
}

/// `flow -> (before, after)` of the changed flows with `change`.
fn changed(r: &Value, change: &str) -> BTreeSet<(String, String, String)> {
    r["changed"].as_array().unwrap().iter().filter(|c| c["change"] == change).map(|c| (c["flow"].as_str().unwrap().into(), c["before"].as_str().unwrap().into(), c["after"].as_str().unwrap().into())).collect()
}

fn backend_row(r: &Value, svc: &str, b: &str) -> Value {
    r["backends"].as_array().unwrap().iter().find(|x| x["service"] == svc && x["backend"] == b).cloned().unwrap_or(Value::Null)
}

/// `explain --config CFG` for client `i`'s flow: its backend.
fn explain(cfg: &Path, i: usize) -> String {
    let c = client(i);
    let ip = format!("{}.{}.{}.{}", c[0], c[1], c[2], c[3]);
    let port = (40000 + i).to_string();
    let o = Command::new(ctl_bin()).args(["explain", "--config"]).arg(cfg).args(["--client", &ip, "--client-port", &port, "--vip", "10.0.0.100:80/tcp", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["backend"].as_str().unwrap_or("none").to_string()
}

/// Disabling b2: the flows replay moves are exactly those whose backend `explain` gives
/// differently under the two configs, all from b2, each attributed to the availability
/// stage; they land only on backends whose share `--dry-run` (a live daemon) says grows,
/// in the client classes it says move. Disabled endpoints keep their connections, so no
/// tracked connection moves mid-flow; removing b2 instead moves every open one of its
/// connections mid-flow.
#[test]
fn disabling_a_backend_moves_the_flows_explain_and_dry_run_predict() {
    let (t, base, old) = baseline("disable");
    let off = t.write("b2-off.toml", &disabled(&base, "b2"));
    let gone = t.write("b2-gone.toml", &removed(&base, "b2"));
    let n = 120;
    // every flow opens; those of i / 2 even close, the others stay open (both zones)
    let mut frames = Vec::new();
    for i in 0..n {
        frames.push(tcp(i, true, false));
        frames.push(tcp(i, false, false));
    }
    for i in (0..n).filter(|i| (i / 2) % 2 == 0) {
        frames.push(tcp(i, false, true));
    }
    let cap = t.path("web.pcap");
    write_pcap(&cap, &frames, 100);
    let r = replay(&old, &off, &cap);
    assert_eq!(r["flows"], n);
    assert_eq!(r["frames"], frames.len());
    let moved = changed(&r, "moved");
    let predicted: BTreeSet<(String, String, String)> = (0..n)
        .filter_map(|i| {
            let (b, a) = (explain(&old, i), explain(&off, i));
            let c = client(i);
            (b != a).then(|| (format!("{}.{}.{}.{}:{} -> 10.0.0.100:80/tcp", c[0], c[1], c[2], c[3], 40000 + i), format!("web/{b}"), format!("web/{a}")))
        })
        .collect();
    assert!(!predicted.is_empty());
    assert_eq!(moved, predicted);
    assert_eq!(r["moved"], moved.len());
    assert!(moved.iter().all(|(_, b, _)| b == "web/b2"));
    assert!(r["changed"].as_array().unwrap().iter().all(|c| c["stage"] == "availability"), "{r}");
    let b2 = backend_row(&r, "web", "b2");
    assert_eq!(b2["flows_before"], moved.len());
    assert_eq!(b2["flows_after"], 0);
    assert_eq!(r["mid_flow"], 0, "a disabled backend keeps its connections");

    // the live daemon's dry run of the same edit
    let d = Daemon::start("replay", &base);
    let dry: Value = serde_json::from_str(&d.ok(&["backend", "set", "web", "b2", "enabled=false", "--dry-run", "--json"])).unwrap();
    let svc = dry["services"].as_array().unwrap().iter().find(|s| s["service"] == "web").unwrap().clone();
    let zone = |c: &str| if c.starts_with("10.1.") { "z1" } else { "z2" };
    for (flow, _, after) in &moved {
        let class = svc["classes"].as_array().unwrap().iter().find(|c| c["class"] == zone(flow)).unwrap_or_else(|| panic!("{flow}: its class moves in the dry run: {dry}"));
        assert!(class["backend_moved_share"].as_f64().unwrap() > 0.0);
        let to = after.trim_start_matches("web/");
        let share = class["shares"].as_array().unwrap().iter().find(|s| s["backend"] == to).unwrap();
        assert!(share["after"].as_f64().unwrap() > share["before"].as_f64().unwrap(), "{flow} -> {to}: {dry}");
    }
    drop(d);

    let r = replay(&old, &gone, &cap);
    assert_eq!(changed(&r, "moved").len(), moved.len());
    let open_on_b2: BTreeSet<String> = moved.iter().map(|m| m.0.clone()).filter(|f| f.split(':').nth(1).and_then(|p| p.split(' ').next()).and_then(|p| p.parse::<usize>().ok()).is_some_and(|p| ((p - 40000) / 2) % 2 == 1)).collect();
    let mid: BTreeSet<String> = r["mid_flow_changes"].as_array().unwrap().iter().map(|m| m["flow"].as_str().unwrap().to_string()).collect();
    assert!(!open_on_b2.is_empty());
    assert_eq!(mid, open_on_b2);
    assert!(r["mid_flow_changes"].as_array().unwrap().iter().all(|m| m["before"] == "web/b2"));
}

/// Fragments follow their first fragment and ICMP errors their flow: no extra flows, every
/// fragment counted on its datagram's backend before and after, and disabling d1 moves
/// exactly the datagrams (both fragments of each) that were on d1. Removing the dns
/// service drops them all by reason (no_service); putting it back undrops them.
#[test]
fn fragments_and_icmp_errors_stay_with_their_flows() {
    let (t, base, old) = baseline("frag");
    let new = t.write("d1-off.toml", &disabled(&base, "d1"));
    let mut frames = Vec::new();
    let dns = 12;
    for k in 0..dns {
        frames.extend(fragmented_dns([10, 1, 5, k as u8 + 1], 5000 + k as u16, 300 + k as u16));
    }
    for i in 0..6 {
        frames.push(tcp(i, true, false));
        frames.push(tcp(i, false, false));
        frames.push(icmp_error(i));
    }
    let cap = t.path("mix.pcap");
    write_pcap(&cap, &frames, 1000);
    let r = replay(&old, &new, &cap);
    assert_eq!(r["flows"], dns + 6, "{r}");
    let pk = |svc: &str, b: &str, k: &str| backend_row(&r, svc, b)[k].as_u64().unwrap_or(0);
    assert_eq!(pk("dns", "d1", "packets_before") + pk("dns", "d2", "packets_before"), 2 * dns as u64);
    assert_eq!(pk("dns", "d1", "packets_before"), 2 * pk("dns", "d1", "flows_before"));
    assert_eq!(pk("dns", "d2", "packets_after"), 2 * dns as u64);
    let web: u64 = ["b1", "b2", "b3", "b4"].iter().map(|b| pk("web", b, "packets_before")).sum();
    assert_eq!(web, 18, "the ICMP errors are forwarded with their flows: {r}");
    let moved = changed(&r, "moved");
    assert_eq!(moved.len() as u64, pk("dns", "d1", "flows_before"));
    assert!(moved.iter().all(|(f, b, a)| f.ends_with(":53/udp") && b == "dns/d1" && a == "dns/d2"), "{moved:?}");
    assert_eq!(r["frames_changed"].as_u64().unwrap(), 2 * moved.len() as u64);

    // without the dns service its datagrams are dropped (no_service), each whole datagram
    // one flow; with it back they no longer are; its open flows would break mid-flow
    let at = base.find("[[services]]\nname = \"dns\"").unwrap();
    let end = base[at + 1..].find("[[services]]").map_or(base.len(), |e| at + 1 + e);
    let no_dns = t.write("no-dns.toml", &format!("{}{}", &base[..at], &base[end..]));
    let r = replay(&old, &no_dns, &cap);
    assert_eq!(r["newly_dropped"], serde_json::json!({ "no_service": dns }), "{r}");
    assert_eq!(r["no_longer_dropped"], serde_json::json!({}));
    assert_eq!(r["mid_flow"], dns);
    assert!(r["mid_flow_changes"].as_array().unwrap().iter().all(|m| m["after"] == "drop: no_service"));
    let r = replay(&no_dns, &old, &cap);
    assert_eq!(r["no_longer_dropped"], serde_json::json!({ "no_service": dns }), "{r}");
    assert_eq!(r["newly_dropped"], serde_json::json!({}));
    assert_eq!(r["frames_changed"].as_u64().unwrap(), 2 * dns as u64);
}

/// [`baseline`] with `b2-off.toml` (b2 disabled) and the path of capture `file` in it:
/// (the directory, old, new, capture).
fn b2_off(name: &str, file: &str) -> (Tmp, PathBuf, PathBuf, PathBuf) {
    let (t, base, old) = baseline(name);
    let off = t.write("b2-off.toml", &disabled(&base, "b2"));
    let cap = t.path(file);
    (t, old, off, cap)
}

/// A pcapng file at `path` with one Ethernet interface `name` of ns timestamps.
fn pcapng_ns(path: &Path, name: &str) -> PcapNgWriter<std::fs::File> {
    let mut w = PcapNgWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    let idb = InterfaceDescriptionBlock { linktype: pcap_file::DataLink::ETHERNET, snaplen: 65535, options: vec![InterfaceDescriptionOption::IfName(name.to_string().into()), InterfaceDescriptionOption::IfTsResol(9)] };
    w.write_pcapng_block(idb).unwrap();
    w
}

/// A pcapng as `capture drops` writes it (one Ethernet interface, ns timestamps, a comment
/// per frame) replays with its own clock; `--out` writes the changed frames annotated.
#[test]
fn a_capture_drops_pcapng_replays() {
    let (t, old, off, cap) = b2_off("pcapng", "drops.pcapng");
    let n = 40;
    {
        let mut w = pcapng_ns(&cap, "spillway-drops");
        for i in 0..n {
            let f = tcp(i, true, false);
            let epb = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_nanos(1_700_000_000_000_000_000 + 5_000_000 * i as u64),
                original_len: f.len() as u32,
                data: std::borrow::Cow::Borrowed(&f),
                options: vec![EnhancedPacketOption::Comment("reason=no_backend worker=0".into())],
            };
            w.write_pcapng_block(epb).unwrap();
        }
    }
    let out = t.path("changed.pcapng");
    let (code, text, err) = run(&[Path::new("--baseline"), &old, Path::new("--config"), &off, &cap, Path::new("--json"), Path::new("--out"), &out]);
    assert_eq!(code, Some(0), "{err}");
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["flows"], n);
    assert_eq!(r["duration_ms"], 5 * (n - 1) as u64, "ns timestamps (if_tsresol 9)");
    let moved = r["moved"].as_u64().unwrap();
    assert!(moved > 0);
    let mut rd = pcap_file::pcapng::PcapNgReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut comments = Vec::new();
    while let Some(b) = rd.next_block() {
        if let pcap_file::pcapng::Block::EnhancedPacket(p) = b.unwrap() {
            comments.extend(p.options.iter().filter_map(|o| if let EnhancedPacketOption::Comment(c) = o { Some(c.to_string()) } else { None }));
        }
    }
    assert_eq!(comments.len() as u64, moved);
    assert!(comments.iter().all(|c| c.starts_with("replay: frame ") && c.contains("before web/b2; after web/")), "{comments:?}");
}

/// An Enhanced Packet Block as dpdk-dumpcap (DPDK 22.11) writes one, little-endian: ns
/// timestamp, `epb_flags` direction (1 inbound, 2 outbound) and `epb_queue` options, and
/// no opt_endofopt after them (pcap-file's own reader refuses such a block).
fn dumpcap_epb(ts_ns: u64, frame: &[u8], direction: u32) -> Vec<u8> {
    let mut body = Vec::new();
    for v in [0u32, (ts_ns >> 32) as u32, ts_ns as u32, frame.len() as u32, frame.len() as u32] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(frame);
    body.resize(body.len().div_ceil(4) * 4, 0);
    for (code, v) in [(2u16, direction), (6, 0)] {
        body.extend_from_slice(&code.to_le_bytes());
        body.extend_from_slice(&4u16.to_le_bytes());
        body.extend_from_slice(&v.to_le_bytes());
    }
    let len = (body.len() + 12) as u32;
    [6u32.to_le_bytes().as_slice(), &len.to_le_bytes(), &body, &len.to_le_bytes()].concat()
}

/// A pcapng as dpdk-dumpcap writes a port's capture ([`dumpcap_epb`]): each received
/// frame (inbound) followed by the frame the port sent for it (outbound, to a backend's
/// MAC, the same IP packet). It is read, and only what the port received is replayed:
/// every flow's packets count once, and the sent frames are counted apart (they were
/// replayed as a second packet of each flow, doubling every backend's packets; and
/// before that, such a file was refused as `Invalid option`).
#[test]
fn a_dumpcap_pcapng_replays_what_the_port_received() {
    let (_dir, old, off, cap) = b2_off("dumpcap", "port.pcapng");
    let n = 30;
    {
        let mut f = pcapng_ns(&cap, "net_af_packet0").into_inner();
        for i in 0..n {
            let rx = tcp(i, true, false);
            let mut tx = rx.clone();
            tx[0..6].copy_from_slice(&[2, 0, 0, 0, 0x0b, 1]);
            tx[6..12].copy_from_slice(&LB);
            let ts = 1_700_000_000_000_000_000 + 2_000_000 * i as u64;
            std::io::Write::write_all(&mut f, &dumpcap_epb(ts, &rx, 1)).unwrap();
            std::io::Write::write_all(&mut f, &dumpcap_epb(ts + 1_000_000, &tx, 2)).unwrap();
        }
    }
    let r = replay(&old, &off, &cap);
    assert_eq!((r["flows"].as_u64(), r["frames"].as_u64(), r["frames_outbound"].as_u64()), (Some(n as u64), Some(n as u64), Some(n as u64)), "{r:#}");
    let packets: u64 = r["backends"].as_array().unwrap().iter().map(|b| b["packets_before"].as_u64().unwrap()).sum();
    assert_eq!(packets, n as u64, "each flow's SYN once: {r:#}");
    assert!(r["moved"].as_u64().unwrap() > 0);
    assert_eq!(r["duration_ms"], 2 * (n - 1) as u64, "the inbound frames' ns timestamps");
    let (code, text, err) = run(&[Path::new("--baseline"), &old, Path::new("--config"), &off, &cap]);
    assert_eq!(code, Some(0), "{err}");
    assert!(text.contains(&format!("{n} frames the capturing port sent (pcapng direction outbound) not replayed")), "{text}");
}

/// Not a capture, a truncated one, another link type: exit 2 and the reason.
#[test]
fn malformed_captures_are_refused() {
    let (t, _, old) = baseline("bad");
    let frames: Vec<Vec<u8>> = (0..5).map(|i| tcp(i, true, false)).collect();
    let good = t.path("good.pcap");
    write_pcap(&good, &frames, 10);
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("junk", b"this is not a capture at all, just text\n".to_vec(), "not a pcap or pcapng capture"),
        ("empty", Vec::new(), "empty file"),
        ("cut", bytes[..bytes.len() - 7].to_vec(), "frame 5: "),
        ("cut-header", bytes[..30].to_vec(), "frame 1: "),
        ("raw-ip", { let mut b = bytes.clone(); b[20] = 101; b }, "only Ethernet captures"),
    ];
    for (name, data, says) in cases {
        let p = t.path(name);
        std::fs::write(&p, data).unwrap();
        let (code, out, err) = run(&[Path::new("--baseline"), &old, Path::new("--config"), &old, &p]);
        assert_eq!(code, Some(2), "{name}: {out}{err}");
        assert!(err.starts_with("spillwayctl replay: ") && err.contains(says), "{name}: {err}");
        assert!(out.is_empty(), "{name}: no report: {out}");
    }
}

/// `--live` compares against the daemon's current config and health: with the daemon on
/// the baseline file, the report is that of `--baseline FILE`; after a live edit disabling
/// b1, replaying the file's config shows flows moving to b1, none leaving it.
#[test]
fn live_takes_the_daemons_config_and_health() {
    let (t, base, old) = baseline("live");
    let off = t.write("b2-off.toml", &disabled(&base, "b2"));
    let frames: Vec<Vec<u8>> = (0..60).map(|i| tcp(i, true, false)).collect();
    let cap = t.path("web.pcap");
    write_pcap(&cap, &frames, 100);
    let d = Daemon::start("replaylive", &base);
    let live = |cfg: &Path| {
        let o = d.ctl(&["replay", "--live", "--config", cfg.to_str().unwrap(), cap.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["health"] = Value::Null;
        v
    };
    let mut file = replay(&old, &off, &cap);
    file["health"] = Value::Null;
    assert_eq!(live(&off), file);
    d.ok(&["backend", "set", "web", "b1", "enabled=false"]);
    let r = live(&old);
    let b1 = backend_row(&r, "web", "b1");
    assert_eq!(b1["flows_before"], 0, "{r}");
    assert!(b1["flows_after"].as_u64().unwrap() > 0);
    assert!(changed(&r, "moved").iter().all(|(_, _, a)| a == "web/b1"));
}
