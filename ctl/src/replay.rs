//! `spillwayctl replay --config NEW.toml --baseline OLD.toml FILE.pcap[ng]`: what a config
//! change would do to a real capture. Every frame goes, in order and with its timestamp as
//! the worker clock, through the daemon's own worker under each config
//! ([`spillway_dataplane::replay`]); the report lists the flows that change. Offline: no
//! daemon, no DPDK, no root.
//!
//! The capture is read as a stream (pcap-file: classic pcap in either byte order with µs or
//! ns timestamps, and pcapng with any `if_tsresol`, its packet blocks parsed here: dpdk-dumpcap
//! ends their options without opt_endofopt), one frame at a time: memory is bounded by the
//! connection-table size, not by the capture. pcapng frames marked outbound (`epb_flags`,
//! a port's TX as dpdk-dumpcap records it) are counted, not replayed. Ethernet link type only. Exit codes:
//! 0 the replay ran, 2 a usage, config, health-file or capture error (a capture that is
//! not pcap/pcapng, truncated or of another link type is refused with the frame it
//! stopped at).

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::{PcapNgReader, PcapNgWriter};
use pcap_file::DataLink;
use spillway_dataplane::replay::{HealthOverrides, Replay};
use spillway_shared::config::Config;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `spillwayctl replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The config to try (TOML, as the daemon reads it).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The config the capture is compared against (TOML): usually the running one's file.
    #[arg(long, value_name = "FILE", required_unless_present = "live", conflicts_with = "live")]
    pub baseline: Option<PathBuf>,
    /// Compare against the running daemon's current config (over --socket) and its
    /// endpoints' current health; both runs still start from an empty connection table.
    #[arg(long)]
    pub live: bool,
    /// Endpoint health for both configs, a JSON object: "BACKEND", "BACKEND/ENDPOINT" or
    /// "SERVICE/BACKEND/ENDPOINT" -> "up" | "down" (or true | false). Without it every
    /// endpoint is up (with --live: as the daemon has it; the file's entries win).
    #[arg(long, value_name = "FILE")]
    pub health: Option<PathBuf>,
    /// Write the frames whose fate changes to this pcapng file, each with a comment
    /// `replay: before X; after Y`.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Most changed flows and mid-flow changes listed (the counts are complete).
    #[arg(long, value_name = "N", default_value_t = spillway_dataplane::replay::DEFAULT_LIST_LIMIT)]
    pub limit: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The capture: pcap or pcapng (tcpdump, dpdk-dumpcap, `spillwayctl capture drops`).
    #[arg(value_name = "FILE.pcap[ng]")]
    pub capture: PathBuf,
}

/// Runs the command; returns the exit code.
pub fn run(args: &ReplayArgs, socket: &Path) -> i32 {
    let (old, live_health) = match &args.baseline {
        Some(p) => match load(p) {
            Ok(c) => (c, HealthOverrides::new()),
            Err(e) => return crate::client::error_out("spillwayctl replay", "input", 2, &e),
        },
        None => match live(socket) {
            Ok(x) => x,
            Err(code) => return code,
        },
    };
    match replay(args, old, live_health) {
        Ok(()) => 0,
        Err(e) => crate::client::error_out("spillwayctl replay", "input", 2, &e),
    }
}

/// `--live`: the daemon's config and endpoint health (`SERVICE/BACKEND/ENDPOINT` -> up).
/// Errors are printed; the exit code is returned.
fn live(socket: &Path) -> Result<(Config, HealthOverrides), i32> {
    use spillway_shared::proto::{Request, Response};
    let (_, cfg) = crate::live::fetch_config(socket)?;
    let rows = match crate::client::request(socket, &Request::HealthShow) {
        Ok(Response::Health(rows)) => rows,
        Ok(r) => return Err(crate::client::unexpected(&r)),
        Err(e) => return Err(crate::client::fail_from("spillwayctl replay", e)),
    };
    let health = rows
        .into_iter()
        .map(|r| {
            let ep = if r.endpoint.is_empty() { r.backend.clone() } else { r.endpoint };
            (format!("{}/{}/{ep}", r.service, r.backend), r.healthy)
        })
        .collect();
    Ok((cfg, health))
}

fn load(path: &Path) -> Result<Config, String> {
    let cfg = Config::load(&path.to_string_lossy()).map_err(|e| e.to_string())?;
    cfg.validate().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(cfg)
}

/// Reads the `--health` file.
fn health(path: Option<&PathBuf>) -> Result<HealthOverrides, String> {
    let Some(path) = path else { return Ok(HealthOverrides::new()) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let map: std::collections::BTreeMap<String, serde_json::Value> = serde_json::from_str(&text).map_err(|e| format!("{}: {e} (expected a JSON object: \"BACKEND\" or \"BACKEND/ENDPOINT\" -> \"up\" or \"down\")", path.display()))?;
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::Bool(b) => Ok((k, b)),
            serde_json::Value::String(s) if s == "up" || s == "down" => Ok((k, s == "up")),
            other => Err(format!("{}: {k}: {other} is not \"up\" or \"down\"", path.display())),
        })
        .collect()
}

/// A frame as read: timestamp (ns since the epoch) and bytes.
type Frame<'a> = (u128, std::borrow::Cow<'a, [u8]>);

/// A streaming reader of either format.
enum Capture<R: Read> {
    Pcap(PcapReader<R>),
    /// With the count of outbound frames skipped.
    PcapNg(PcapNgReader<R>, u64),
}

impl<R: BufRead> Capture<R> {
    /// Opens a capture, telling the formats apart by their magic number.
    fn open(mut r: R) -> Result<Capture<R>, String> {
        let head = r.fill_buf().map_err(|e| e.to_string())?;
        if head.is_empty() {
            return Err("empty file: not a pcap or pcapng capture".into());
        }
        if head.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
            let rd = PcapNgReader::new(r).map_err(|e| format!("not a valid pcapng capture: {e}"))?;
            return Ok(Capture::PcapNg(rd, 0));
        }
        let rd = PcapReader::new(r).map_err(|e| format!("not a pcap or pcapng capture: {e}"))?;
        let link = rd.header().datalink;
        if link != DataLink::ETHERNET {
            return Err(format!("link type {link:?}: only Ethernet captures can be replayed (capture on the load balancer's port, e.g. tcpdump -i IF -w FILE)"));
        }
        Ok(Capture::Pcap(rd))
    }

    /// The next frame, `None` at the end; an error names what is wrong.
    fn next(&mut self) -> Option<Result<Frame<'_>, String>> {
        match self {
            Capture::Pcap(r) => r.next_packet().map(|p| p.map(|p| (p.timestamp.as_nanos(), p.data)).map_err(|e| e.to_string())),
            Capture::PcapNg(r, outbound) => loop {
                // raw blocks: pcap-file's typed EPB refuses an option list without
                // opt_endofopt, which dpdk-dumpcap (DPDK 22.11) writes; section and
                // interface blocks are still parsed (and checked) by the reader
                let (ty, body) = match r.next_raw_block()? {
                    Ok(b) => (b.type_, b.body.into_owned()),
                    Err(e) => return Some(Err(e.to_string())),
                };
                match ty {
                    IDB => {
                        let link = r.interfaces().last().map(|i| i.linktype);
                        if let Some(l) = link.filter(|l| *l != DataLink::ETHERNET) {
                            return Some(Err(format!("interface with link type {l:?}: only Ethernet captures can be replayed")));
                        }
                    }
                    EPB => {
                        let big = r.section().endianness == pcap_file::Endianness::Big;
                        let p = match Epb::parse(&body, big) {
                            Ok(p) => p,
                            Err(e) => return Some(Err(e)),
                        };
                        // a frame the port sent (epb_flags bits 0-1 = 2, outbound: pcapng
                        // draft 4.3.1; dpdk-dumpcap captures a port's TX so) never reached
                        // the worker's RX: not replayed, counted
                        if p.flags & 3 == 2 {
                            *outbound += 1;
                            continue;
                        }
                        // the raw timestamp is in the interface's if_tsresol units (pcapng
                        // draft 4.2: 10^-6 s when absent)
                        let res = r.interfaces().get(p.interface as usize).and_then(|i| i.options.iter().find_map(|o| if let InterfaceDescriptionOption::IfTsResol(v) = o { Some(*v) } else { None })).unwrap_or(6);
                        let mut frame = body;
                        frame.truncate(p.data.end);
                        frame.drain(..p.data.start);
                        return Some(Ok((to_ns(u128::from(p.ts), res), std::borrow::Cow::Owned(frame))));
                    }
                    SPB if body.len() >= 4 => {
                        let mut frame = body;
                        frame.drain(..4);
                        return Some(Ok((0, std::borrow::Cow::Owned(frame))));
                    }
                    _ => continue,
                }
            },
        }
    }
}

/// pcapng block types (draft 4.1): interface description, enhanced and simple packet.
const IDB: u32 = 1;
const EPB: u32 = 6;
const SPB: u32 = 3;

/// The fields of an Enhanced Packet Block the replay reads (pcapng draft 4.3).
struct Epb {
    interface: u32,
    /// Timestamp in the interface's `if_tsresol` units.
    ts: u64,
    /// The frame's bytes in the block body.
    data: std::ops::Range<usize>,
    /// `epb_flags` (0 when absent).
    flags: u32,
}

impl Epb {
    /// Parses an EPB body (`big`: a big-endian section). Its options end at the body's end
    /// or at opt_endofopt. Errors: a body shorter than its header or its captured length.
    fn parse(b: &[u8], big: bool) -> Result<Epb, String> {
        let u32_at = |i: usize| -> Option<u32> {
            let w: [u8; 4] = b.get(i..i + 4)?.try_into().ok()?;
            Some(if big { u32::from_be_bytes(w) } else { u32::from_le_bytes(w) })
        };
        let u16_at = |i: usize| -> Option<u16> {
            let w: [u8; 2] = b.get(i..i + 2)?.try_into().ok()?;
            Some(if big { u16::from_be_bytes(w) } else { u16::from_le_bytes(w) })
        };
        let short = || "enhanced packet block shorter than its header".to_string();
        let (interface, hi, lo, cap) = (u32_at(0).ok_or_else(short)?, u32_at(4).ok_or_else(short)?, u32_at(8).ok_or_else(short)?, u32_at(12).ok_or_else(short)? as usize);
        let data = 20..20 + cap;
        if b.len() < data.end {
            return Err(format!("enhanced packet block: captured length {cap} beyond its block"));
        }
        let mut flags = 0;
        let mut o = 20 + cap.div_ceil(4) * 4;
        while let (Some(code), Some(len)) = (u16_at(o), u16_at(o + 2)) {
            match (code, len) {
                (0, _) => break,
                (2, 4) => flags = u32_at(o + 4).unwrap_or(0),
                _ => {}
            }
            o += 4 + usize::from(len).div_ceil(4) * 4;
        }
        Ok(Epb { interface, ts: (u64::from(hi) << 32) | u64::from(lo), data, flags })
    }
}

/// A pcapng timestamp of `raw` units of resolution `res` (`if_tsresol`: 10^-res s, or
/// 2^-(res & 0x7f) s with the high bit set) in ns.
fn to_ns(raw: u128, res: u8) -> u128 {
    if res & 0x80 != 0 {
        let shift = u32::from(res & 0x7f).min(120);
        return raw.saturating_mul(1_000_000_000) >> shift;
    }
    match res {
        0..=9 => raw.saturating_mul(10u128.pow(9 - u32::from(res))),
        _ => raw / 10u128.pow(u32::from(res).min(38) - 9),
    }
}

/// The `--out` writer: the changed frames, annotated.
fn out_writer(path: &Path) -> Result<PcapNgWriter<BufWriter<std::fs::File>>, String> {
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = PcapNgWriter::new(BufWriter::new(f)).map_err(|e| e.to_string())?;
    let idb = InterfaceDescriptionBlock { linktype: DataLink::ETHERNET, snaplen: 0, options: vec![InterfaceDescriptionOption::IfName("spillway-replay".into()), InterfaceDescriptionOption::IfTsResol(9)] };
    w.write_pcapng_block(idb).map_err(|e| e.to_string())?;
    Ok(w)
}

fn replay(args: &ReplayArgs, old: Config, mut health: HealthOverrides) -> Result<(), String> {
    let new = load(&args.config)?;
    health.extend(self::health(args.health.as_ref())?);
    let file = std::fs::File::open(&args.capture).map_err(|e| format!("{}: {e}", args.capture.display()))?;
    let mut cap = Capture::open(BufReader::with_capacity(1 << 16, file)).map_err(|e| format!("{}: {e}", args.capture.display()))?;
    let mut rp = Replay::new(old, new, &health, args.limit)?;
    if args.live {
        let down = health.values().filter(|up| !**up).count();
        rp.report.health = format!("as the daemon has it ({down} endpoints down{})", if args.health.is_some() { ", with --health's entries" } else { "" });
    }
    let mut out = args.out.as_deref().map(out_writer).transpose()?;
    let started = std::time::Instant::now();
    let mut n = 0u64;
    while let Some(frame) = cap.next() {
        n += 1;
        let (ts, data) = frame.map_err(|e| format!("{}: frame {n}: {e} (a truncated or malformed capture)", args.capture.display()))?;
        let o = rp.frame(ts, &data);
        if let (Some(w), true) = (out.as_mut(), o.changed) {
            let epb = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_nanos(u64::try_from(ts).unwrap_or(u64::MAX)),
                original_len: data.len() as u32,
                data: std::borrow::Cow::Borrowed(&data),
                options: vec![EnhancedPacketOption::Comment(format!("replay: frame {n}: before {}; after {}", o.before, o.after).into())],
            };
            w.write_pcapng_block(epb).map_err(|e| format!("--out: {e}"))?;
        }
    }
    if let Some(mut w) = out {
        w.get_mut().flush().map_err(|e| format!("--out: {e}"))?;
    }
    let secs = started.elapsed().as_secs_f64();
    if let Capture::PcapNg(_, outbound) = cap {
        rp.report.frames_outbound = outbound;
    }
    let report = rp.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", report.render());
    }
    let rate = if secs > 0.0 { n as f64 / secs } else { 0.0 };
    eprintln!("spillwayctl replay: {n} frames in {secs:.2} s ({rate:.0} packets/s per config pair)");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// pcapng timestamps in the interface's resolution become ns.
    #[test]
    fn timestamps_follow_the_interface_resolution() {
        assert_eq!(super::to_ns(1_500_000, 6), 1_500_000_000);
        assert_eq!(super::to_ns(7, 9), 7);
        assert_eq!(super::to_ns(3, 0), 3_000_000_000);
        assert_eq!(super::to_ns(1 << 10, 0x80 | 10), 1_000_000_000);
    }
}
