//! `spillwayctl capture drops`: the frames the daemon drops, written as pcapng (one
//! Ethernet interface, nanosecond timestamps), each frame carrying a comment `reason=R
//! worker=W` (pcapng `opt_comment`; Wireshark shows it as the packet comment, `tshark -T
//! fields -e frame.comment` prints it). `-w -` streams to stdout, flushed after every
//! poll, so `spillwayctl capture drops -w - | tcpdump -r -` works.
//!
//! The capture polls the daemon every 100 ms (a capture not polled for 2 s ends in the
//! daemon: killing the client ends it), ends after `--count` frames, on SIGINT/SIGTERM, or
//! when the reader of stdout goes away (checked at every poll, frames or not). Exit codes: 0, 1 refused (another capture runs, an
//! unknown reason), 2 usage, file or no daemon. The `-w` file is created (or truncated)
//! only after the daemon accepted the capture: a refused capture leaves an existing file
//! as it was.

use crate::client;
use clap::Subcommand;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{InterfaceDescriptionBlock, InterfaceDescriptionOption};
use pcap_file::pcapng::PcapNgWriter;
use spillway_shared::capture::{CaptureFilter, CapturedFrame};
use spillway_shared::proto::{Request, Response, VipRow};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `capture ...`
#[derive(Subcommand, Debug)]
pub enum CaptureCmd {
    /// Capture the frames the daemon drops, with their drop reason and worker, as pcapng.
    Drops {
        /// Only this drop reason (repeatable; names as in `stats`); default every reason.
        #[arg(long = "reason", value_name = "R")]
        reasons: Vec<String>,
        /// Only frames to this destination address (IPv4 or IPv6): a VIP, or any other
        /// address (warned about: `not_for_vip` drops go to such addresses).
        #[arg(long, value_name = "V")]
        vip: Option<std::net::IpAddr>,
        /// Stop after N frames (N >= 1; without it, on SIGINT/SIGTERM).
        #[arg(long, value_name = "N", value_parser = parse_count)]
        count: Option<u64>,
        /// Bytes kept per frame (1-512).
        #[arg(long, value_name = "S", default_value_t = 512)]
        snaplen: u32,
        /// Output file, or `-` for stdout.
        #[arg(short = 'w', value_name = "FILE|-")]
        write: PathBuf,
    },
}

/// `--count N`: a number of frames, at least 1 (0 would end the capture before it began;
/// leave `--count` out to capture until SIGINT/SIGTERM).
fn parse_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1 (leave --count out to capture until SIGINT/SIGTERM)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("must be a number of frames >= 1".into()),
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// The pcapng comment of a frame.
pub fn comment(f: &CapturedFrame) -> String {
    format!("reason={} worker={}", f.reason, f.worker)
}

/// Writes `frames` as Enhanced Packet Blocks of interface 0.
fn write_frames<W: Write>(w: &mut PcapNgWriter<W>, frames: &[CapturedFrame]) -> Result<(), String> {
    for f in frames {
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_nanos(f.unix_ns),
            original_len: f.orig_len,
            data: std::borrow::Cow::Borrowed(&f.data),
            options: vec![EnhancedPacketOption::Comment(comment(f).into())],
        };
        w.write_pcapng_block(epb).map_err(|e| e.to_string())?;
    }
    w.get_mut().flush().map_err(|e| e.to_string())
}

/// A pcapng writer with its section header and the one Ethernet interface.
fn writer<W: Write>(out: W, snaplen: u32) -> Result<PcapNgWriter<W>, String> {
    let mut w = PcapNgWriter::new(out).map_err(|e| e.to_string())?;
    let idb = InterfaceDescriptionBlock {
        linktype: pcap_file::DataLink::ETHERNET,
        snaplen,
        options: vec![InterfaceDescriptionOption::IfName("spillway-drops".into()), InterfaceDescriptionOption::IfTsResol(9)],
    };
    w.write_pcapng_block(idb).map_err(|e| e.to_string())?;
    Ok(w)
}

/// The warning for `--vip V` when V is none of the daemon's VIPs (`rows`, from `vip
/// show`), in the words of `vip drain`'s refusal; `None` when it is one, or when the
/// daemon has no rows yet. Such a V is not refused: the drops sent to any address (e.g.
/// `not_for_vip`) can be captured this way, but a mistyped VIP would capture nothing,
/// silently (fresh-user QA).
fn vip_warning(v: std::net::IpAddr, rows: &[VipRow]) -> Option<String> {
    if rows.is_empty() || rows.iter().any(|r| r.vip.parse::<std::net::IpAddr>() == Ok(v)) {
        return None;
    }
    let known: Vec<&str> = rows.iter().map(|r| r.vip.as_str()).collect();
    Some(format!("--vip {v}: not a configured VIP (configured: {}); capturing the drops sent to {v} all the same (e.g. not_for_vip)", known.join(", ")))
}

/// Whether `path` can be written without changing it: an existing file is opened for
/// writing (no truncation, no create), a new one needs its directory to exist. Errors: the
/// OS reason (`Permission denied`, `No such file or directory`, `Is a directory`).
fn check_writable(path: &Path) -> std::io::Result<()> {
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if std::fs::metadata(dir)?.is_dir() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!("{} is not a directory", dir.display())))
            }
        }
        Err(e) => Err(e),
    }
}

/// Whether the reader of `fd` is gone: a pipe whose read end is closed (`| head -c 100`,
/// a `tcpdump -c 1` that ended) or a socket whose peer hung up, as poll(2) reports them
/// (`POLLERR`, `POLLHUP`) without writing. A quiet capture writes nothing, so without this
/// it never found out and held the daemon's one capture until it was killed (fresh-user
/// QA). A file or terminal is never "gone".
fn reader_gone(fd: libc::c_int) -> bool {
    let mut p = libc::pollfd { fd, events: 0, revents: 0 };
    // SAFETY: poll(2) on one pollfd we own, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// Runs `capture drops`.
pub fn run(socket: &Path, cmd: &CaptureCmd) -> i32 {
    let CaptureCmd::Drops { reasons, vip, count, snaplen, write } = cmd;
    let to_stdout = write.as_os_str() == "-";
    // A file that could not be written is reported before asking the daemon, without
    // touching it: an existing file is opened, not truncated (fresh-user QA: a refused
    // capture emptied the `-w` file).
    if !to_stdout {
        if let Err(e) = check_writable(write) {
            eprintln!("spillwayctl: cannot write {}: {e}", write.display());
            return 2;
        }
    }
    if let Some(v) = vip {
        // a daemon that cannot answer is reported by the start request below
        if let Some(w) = client::request(socket, &Request::VipShow).ok().and_then(|r| if let Response::Vips(rows) = r { vip_warning(*v, &rows) } else { None }) {
            eprintln!("spillwayctl: warning: {w}");
        }
    }
    let filter = CaptureFilter { reasons: reasons.clone(), vip: *vip, snaplen: *snaplen };
    let started = match client::request(socket, &Request::CaptureStart(filter)) {
        Ok(Response::CaptureStarted(s)) => s,
        Ok(r) => {
            eprintln!("spillwayctl: unexpected response from the daemon: {r:?}");
            return 2;
        }
        Err(e) => {
            eprintln!("spillwayctl: {e}");
            return e.exit_code();
        }
    };
    // SAFETY: installing async-signal-safe handlers (they only store to an atomic).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    if to_stdout {
        // A reader that goes away (`| head`) must end the capture at the daemon at once:
        // with SIGPIPE's default action (main.rs) a write to its pipe would kill us and
        // leave the daemon's one capture to its lease. Ignored here, the write fails with
        // EPIPE and the loop below stops the capture.
        // SAFETY: signal(2) with SIG_IGN, no handler code.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    }
    // Only now, the daemon having accepted the capture, is the file created (or truncated).
    let out: Box<dyn Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        match std::fs::File::create(write) {
            Ok(f) => Box::new(std::io::BufWriter::new(f)),
            Err(e) => {
                eprintln!("spillwayctl: cannot create {}: {e}", write.display());
                let _ = client::request(socket, &Request::CaptureStop { session: started.session });
                return 2;
            }
        }
    };
    eprintln!("spillwayctl: capturing drops ({}), snaplen {}", if reasons.is_empty() { "every reason".to_string() } else { started.reasons.join(", ") }, started.snaplen);
    let mut w = match writer(out, started.snaplen) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("spillwayctl: {e}");
            let _ = client::request(socket, &Request::CaptureStop { session: started.session });
            return 2;
        }
    };
    let mut written = 0u64;
    let mut ring_full = 0;
    let code = loop {
        if to_stdout && reader_gone(libc::STDOUT_FILENO) {
            // Nothing more can be delivered: end the capture now, so the daemon's one
            // capture is free at once, not only at the next dropped frame's write.
            let _ = client::request(socket, &Request::CaptureStop { session: started.session });
            eprintln!("spillwayctl: the reader of the capture went away");
            break 0;
        }
        let stop = STOP.load(Ordering::Relaxed) || count.is_some_and(|n| written >= n);
        let req = if stop { Request::CaptureStop { session: started.session } } else { Request::CapturePoll { session: started.session } };
        match client::request(socket, &req) {
            Ok(Response::CaptureBatch(b)) => {
                ring_full = b.ring_full;
                let take = count.map_or(b.frames.len(), |n| (n - written).min(b.frames.len() as u64) as usize);
                if let Err(e) = write_frames(&mut w, &b.frames[..take]) {
                    // the reader went away (`| head`) or the disk is full
                    if to_stdout && reader_gone(libc::STDOUT_FILENO) {
                        eprintln!("spillwayctl: the reader of the capture went away");
                    } else {
                        eprintln!("spillwayctl: writing the capture: {e}");
                    }
                    let _ = client::request(socket, &Request::CaptureStop { session: started.session });
                    break 0;
                }
                written += take as u64;
                if stop {
                    break 0;
                }
            }
            Ok(r) => {
                eprintln!("spillwayctl: unexpected response from the daemon: {r:?}");
                break 2;
            }
            Err(e) => {
                eprintln!("spillwayctl: {e}");
                break e.exit_code();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("spillwayctl: {written} dropped frames captured{}", if ring_full > 0 { format!(", {ring_full} not captured (a worker's capture ring was full)") } else { String::new() });
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file reads back with pcap-file's own parser: one interface, the frames, and the
    /// comment of each.
    /// A `--vip` that is no VIP is warned about, as `vip drain` would refuse it, and still
    /// captured (drops to other addresses); a VIP, or no rows yet, is not.
    #[test]
    fn a_vip_filter_that_is_no_vip_is_warned_about() {
        let row = |v: &str| VipRow { vip: v.into(), services: vec!["web".into()], ready: true, drained: false, announced: false, not_ready_because: Vec::new() };
        let rows = [row("10.0.0.100"), row("fd00::100")];
        assert_eq!(
            vip_warning("10.9.9.9".parse().unwrap(), &rows).as_deref(),
            Some("--vip 10.9.9.9: not a configured VIP (configured: 10.0.0.100, fd00::100); capturing the drops sent to 10.9.9.9 all the same (e.g. not_for_vip)")
        );
        assert_eq!(vip_warning("fd00::100".parse().unwrap(), &rows), None);
        assert_eq!(vip_warning("10.0.0.100".parse().unwrap(), &rows), None);
        assert_eq!(vip_warning("10.9.9.9".parse().unwrap(), &[]), None);
    }

    /// A pipe whose read end is closed is "gone"; while it is open, it is not.
    #[test]
    fn a_closed_pipe_reader_is_gone() {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) into a local array; both ends closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        assert!(!reader_gone(fds[1]));
        // SAFETY: closing the descriptors pipe(2) gave us.
        unsafe { libc::close(fds[0]) };
        assert!(reader_gone(fds[1]));
        // SAFETY: as above.
        unsafe { libc::close(fds[1]) };
    }

    /// `--count 0` is a usage error (fresh-user QA: it captured nothing and exited 0).
    #[test]
    fn count_is_at_least_one() {
        assert_eq!(parse_count("3"), Ok(3));
        assert!(parse_count("0").unwrap_err().contains("must be at least 1"));
        assert!(parse_count("-1").unwrap_err().contains(">= 1"));
    }

    #[test]
    fn pcapng_reads_back_with_the_comments() {
        let frames = vec![
            CapturedFrame { unix_ns: 1_700_000_000_123_000_000, worker: 1, reason: "not_for_vip".into(), orig_len: 60, data: vec![7; 42] },
            CapturedFrame { unix_ns: 1_700_000_000_456_000_000, worker: 0, reason: "malformed_ipv4".into(), orig_len: 34, data: vec![9; 34] },
        ];
        let mut w = writer(Vec::new(), 512).unwrap();
        write_frames(&mut w, &frames).unwrap();
        let bytes = w.into_inner();
        let mut r = pcap_file::pcapng::PcapNgReader::new(&bytes[..]).unwrap();
        let mut got = Vec::new();
        while let Some(b) = r.next_block() {
            if let pcap_file::pcapng::Block::EnhancedPacket(p) = b.unwrap() {
                let c = p.options.iter().find_map(|o| if let EnhancedPacketOption::Comment(c) = o { Some(c.to_string()) } else { None });
                got.push((p.data.len(), p.original_len, p.timestamp.as_nanos() as u64, c));
            }
        }
        assert_eq!(
            got,
            vec![
                (42, 60, 1_700_000_000_123_000_000, Some("reason=not_for_vip worker=1".into())),
                (34, 34, 1_700_000_000_456_000_000, Some("reason=malformed_ipv4 worker=0".into())),
            ]
        );
    }
}
