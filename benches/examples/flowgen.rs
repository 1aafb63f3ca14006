//! `flowgen`: a DPDK traffic generator for the many-flows benchmark.
//!
//! Sends client → VIP TCP ACK frames of `--flows` distinct 5-tuples, one packet per flow per
//! round, flows in order, for `--seconds`, out of one port (in `benches/e2e.sh`: a
//! `net_memif` server that Spillway is the client of, so the generator runs on its own core
//! and costs Spillway's core nothing). The frames are those of `benches/gen_pcap.py`: flow
//! `i` is source `10.1.0.0 + i / 4096`, source port `1024 + i % 4096`, VIP:port
//! `10.0.0.100:80`, correct IPv4 and TCP checksums (RFC 791, RFC 793 with the RFC 1071
//! sum). Frames are built in the mbuf from a template, so the generator's own work does
//! not grow with the number of flows: unlike a replayed capture (net_pcap keeps one mbuf
//! per packet of it, which at 1 M packets makes the generator itself miss the cache),
//! 1 K and 1 M flows cost it the same.
//!
//! ```text
//! flowgen --device DEV [--flows N (1000)] [--seconds S (5)] [--size 60..=1514 (64)]
//!         [--vip A.B.C.D (10.0.0.100)] [--port P (80)] [--syn-random] -- EAL_ARGS...
//! ```
//!
//! `--syn-random`: every frame is a TCP SYN of a connection never sent before (the new
//! connection rate): frame `n` is flow `n × 0x9E3779B1 mod 2^32` (an odd multiplier, so a
//! bijection of `u32`: no 5-tuple repeats within 2^32 frames), i.e. sources spread at random
//! over 10.1.0.0 + 2^20 addresses (1,048,576) × 4,096 source ports; `--flows` is then only
//! printed.
//!
//! Counts from the moment the port's link is up (for net_memif: the receiver connected) and
//! stops after `--seconds`, on SIGINT/SIGTERM, or when the link goes down (the receiver
//! left); SIGUSR1 stops sending and counting but keeps the port open until the receiver
//! leaves (or SIGINT/SIGTERM/`--seconds`). Then it prints `flowgen flows=N sent=P unsent=U seconds=S mpps=X` over that window:
//! `sent` frames the port accepted, `unsent` the ones it refused (its ring full: the
//! receiver was slower than the generator; `mpps` is over the whole counting window, ramp-up
//! included, so it reads a little below a receiver's steady-state rate). Exits 1 with a
//! message on a bad argument, a DPDK error, or a link that never came up, and 2 (after the
//! line) when the link went down while sending: the receiver left mid-run.

use spillway_dataplane::dpdk::{Eal, EthPort, Mempool};
use spillway_dataplane::wire::checksum::{checksum, fold, sum_words};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dpdk_sys as sys;

/// Frames per TX burst.
const BURST: usize = 32;

/// Set by SIGINT/SIGTERM: stop sending and report.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set by SIGUSR1: stop sending and counting, keep the port open until the receiver leaves
/// (or SIGINT/SIGTERM), then report.
static PAUSE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGUSR1 {
        PAUSE.store(true, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
    }
}

struct Args {
    device: String,
    flows: u32,
    seconds: f64,
    size: usize,
    vip: Ipv4Addr,
    port: u16,
    syn_random: bool,
    eal: Vec<String>,
}

const USAGE: &str = "usage: flowgen --device DEV [--flows N (1000)] [--seconds S (5)] [--size 60..=1514 (64)] [--vip A.B.C.D (10.0.0.100)] [--port P (80)] [--syn-random] -- EAL_ARGS...";

fn usage(msg: &str) -> ! {
    eprintln!("flowgen: {msg}\n{USAGE}");
    std::process::exit(1)
}

fn parse_args() -> Args {
    let mut a = Args { device: String::new(), flows: 1000, seconds: 5.0, size: 64, vip: Ipv4Addr::new(10, 0, 0, 100), port: 80, syn_random: false, eal: Vec::new() };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--" {
            a.eal = it.by_ref().collect();
            break;
        }
        if k == "-h" || k == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if k == "--syn-random" {
            a.syn_random = true;
            continue;
        }
        let v = it.next().unwrap_or_else(|| usage(&format!("{k} needs a value")));
        let bad = |what: &str| -> ! { usage(&format!("{k} {v:?}: {what}")) };
        match k.as_str() {
            "--device" => a.device = v.clone(),
            "--flows" => a.flows = v.parse().ok().filter(|n| (1..=(1 << 28)).contains(n)).unwrap_or_else(|| bad("must be 1..=268435456")),
            "--seconds" => a.seconds = v.parse().ok().filter(|s: &f64| *s > 0.0 && *s <= 3600.0).unwrap_or_else(|| bad("must be in (0, 3600]")),
            "--size" => a.size = v.parse().ok().filter(|s| (60..=1514).contains(s)).unwrap_or_else(|| bad("must be 60..=1514 bytes")),
            "--vip" => a.vip = v.parse().unwrap_or_else(|_| bad("must be an IPv4 address")),
            "--port" => a.port = v.parse().unwrap_or_else(|_| bad("must be 0..=65535")),
            _ => usage(&format!("unknown argument {k}")),
        }
    }
    if a.device.is_empty() {
        usage("--device is required");
    }
    a
}

/// The frame of `gen_pcap.py --flags ack` for source address 0 and source port 0, with
/// both checksums zero: [`write_flow`] fills in the flow's fields and checksums.
fn template(size: usize, vip: Ipv4Addr, port: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(size);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x99, 0x08, 0x00]);
    let ip_len = (size - 14).max(40) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 0, 0, 0, 0]);
    f.extend_from_slice(&vip.octets());
    // TCP: ports, seq 0, ack 1, data offset 5, ACK, window 65535, checksum 0, urgent 0
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x10, 0xFF, 0xFF, 0, 0, 0, 0]);
    for i in 0..usize::from(ip_len) - 40 {
        f.push((i * 7) as u8);
    }
    f.resize(size, 0);
    f
}

/// Writes flow `i`'s source address and port into `frame` (a copy of [`template`]) and its
/// IPv4 header checksum (RFC 791) and TCP checksum (RFC 793 §3.1, pseudo-header).
fn write_flow(frame: &mut [u8], i: u32) {
    let src = (0x0A01_0000u32 + (i >> 12)).to_be_bytes();
    let sport = (1024 + (i & 0xFFF) as u16).to_be_bytes();
    frame[26..30].copy_from_slice(&src);
    frame[34..36].copy_from_slice(&sport);
    let ip_len = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let ip_csum = checksum(&frame[14..34]);
    frame[24..26].copy_from_slice(&ip_csum.to_be_bytes());
    let tcp_len = ip_len - 20;
    // pseudo-header: source and destination addresses, protocol 6, TCP length
    let pseudo = sum_words(&frame[26..34], 6 + tcp_len as u64);
    let tcp_csum = !fold(sum_words(&frame[34..34 + tcp_len], pseudo));
    frame[50..52].copy_from_slice(&tcp_csum.to_be_bytes());
}

/// Sends until told to stop; `(sent, unsent, seconds, lost)`, `lost`: the link went down
/// while sending (the receiver left before the generator was paused or stopped).
fn run(a: &Args) -> Result<(u64, u64, f64, bool), String> {
    let mut eal_args = a.eal.clone();
    eal_args.push(format!("--vdev={}", a.device));
    let _eal = Eal::init(&eal_args).map_err(|e| e.to_string())?;
    let name = spillway_dataplane::dpdk::vdev_device_name(&a.device).to_string();
    let mut port = EthPort::by_name(&name).map_err(|e| e.to_string())?;
    let pool = Mempool::new("flowgen", 16383, 256, port.socket_id()).map_err(|e| e.to_string())?;
    port.configure(1, 1, 1024, &pool).map_err(|e| e.to_string())?;
    port.start().map_err(|e| e.to_string())?;
    eprintln!("flowgen: {} started, sending {} flows", a.device, a.flows);
    let mut tmpl = template(a.size, a.vip, a.port);
    if a.syn_random {
        tmpl[47] = 0x02; // TCP flags: SYN only
    }
    let mut n_frame = 0u32;
    let (mut sent, mut unsent, mut flow) = (0u64, 0u64, 0u32);
    let mut mbufs: [*mut sys::rte_mbuf; BURST] = [std::ptr::null_mut(); BURST];
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    // Count only while the peer is there: memif's TX refuses everything while the link is
    // down (before the receiver connects, after it leaves), which is not "receiver slower".
    let link_up = |port: &EthPort| port.link().map(|l| l.up).unwrap_or(false);
    while !link_up(&port) {
        if Instant::now() >= deadline || STOP.load(Ordering::Relaxed) {
            return Err("the link never came up (no receiver connected)".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("flowgen: link up, counting");
    let start = Instant::now();
    let mut n_iter = 0u32;
    let mut lost = false;
    loop {
        n_iter = n_iter.wrapping_add(1);
        if n_iter % 1024 == 0 {
            if Instant::now() >= deadline || STOP.load(Ordering::Relaxed) || PAUSE.load(Ordering::Relaxed) {
                break;
            }
            if !link_up(&port) {
                lost = true;
                break;
            }
        }
        // SAFETY: the pool is live; on success BURST valid mbufs are written to `mbufs`.
        if unsafe { sys::spw_pktmbuf_alloc_bulk(pool.as_ptr(), mbufs.as_mut_ptr(), BURST as u32) } != 0 {
            continue;
        }
        for &m in &mbufs {
            // SAFETY: `m` is a fresh mbuf of the default data room (2,048 bytes > size):
            // append returns a pointer to `size` writable bytes of its data.
            let data = unsafe { sys::spw_pktmbuf_append(m, a.size as u16) } as *mut u8;
            if data.is_null() {
                return Err("rte_pktmbuf_append failed".into());
            }
            // SAFETY: see above: `size` bytes at `data` belong to this mbuf only.
            let out = unsafe { std::slice::from_raw_parts_mut(data, a.size) };
            out.copy_from_slice(&tmpl);
            if a.syn_random {
                write_flow(out, n_frame.wrapping_mul(0x9E37_79B1));
                n_frame = n_frame.wrapping_add(1);
            } else {
                write_flow(out, flow);
            }
            flow += 1;
            if flow == a.flows {
                flow = 0;
            }
        }
        // SAFETY: port/queue 0 are configured and started; the mbufs are ours.
        let n = usize::from(unsafe { sys::spw_tx_burst(port.port_id(), 0, mbufs.as_mut_ptr(), BURST as u16) });
        sent += n as u64;
        if n < BURST {
            unsent += (BURST - n) as u64;
            // SAFETY: the frames the port refused are still ours.
            unsafe { sys::spw_pktmbuf_free_bulk(mbufs.as_mut_ptr().add(n), (BURST - n) as u32) };
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // Paused: nothing is sent any more; close only after the receiver left. DPDK 22.11's
    // memif can crash the side still polling or sending while its peer disconnects, so
    // the harness pauses the generator, lets the receiver exit, then stops the generator.
    while PAUSE.load(Ordering::Relaxed) && !STOP.load(Ordering::Relaxed) && Instant::now() < deadline && link_up(&port) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = port.stop();
    // the port's queues use the pool: close the port first
    drop(port);
    drop(pool);
    Ok((sent, unsent, secs, lost))
}

fn main() {
    let a = parse_args();
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
    match run(&a) {
        Ok((sent, unsent, secs, lost)) => {
            println!("flowgen flows={} sent={sent} unsent={unsent} seconds={secs:.2} mpps={:.3}", a.flows, sent as f64 / secs / 1e6);
            if lost {
                eprintln!("flowgen: the link went down while sending (the receiver left): the run was cut short");
                std::process::exit(2);
            }
        }
        Err(e) => {
            eprintln!("flowgen: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_match_gen_pcap_layout_and_checksums() {
        let mut f = template(64, Ipv4Addr::new(10, 0, 0, 100), 80);
        write_flow(&mut f, 4096 * 3 + 5);
        assert_eq!(f.len(), 64);
        assert_eq!(&f[26..30], &[10, 1, 0, 3]);
        assert_eq!(u16::from_be_bytes([f[34], f[35]]), 1029);
        // a valid checksum sums to 0xFFFF (RFC 1071)
        assert_eq!(checksum(&f[14..34]), 0);
        // byte for byte the frame benches/gen_pcap.py writes for this flow
        // (`gen_pcap.frame(0x0A010003, 0x0A000064, 1029, 80, 0x10, 64, None, 0).hex()`)
        let want = "020000000001020000000099080045000032000040004006265f0a0100030a0000640405005000000000000000015010ffff0a5e000000070e151c232a31383f";
        let have: String = f.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(have, want);
        let pseudo = sum_words(&f[26..34], 6 + 30);
        assert_eq!(!fold(sum_words(&f[34..64], pseudo)), 0);
    }
}
