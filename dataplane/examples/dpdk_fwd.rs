//! pcap → null forwarding over DPDK virtual devices: shows the DPDK port layer end to end
//! and prints packets per second.
//!
//! ```text
//! cargo run --release -p spillway-dataplane --example dpdk_fwd -- [--pcap FILE] [--seconds N] [--keep-pcap]
//! ```
//! Without `--pcap`, writes 64 TCP frames of 64 bytes (64 flows) to a temporary pcap.
//! EAL: `--no-huge --no-shconf -m 512 --no-pci --vdev net_pcap0,rx_pcap=FILE,infinite_rx=1
//! --vdev net_null0`; one thread moves bursts from net_pcap0 queue 0 to net_null0 queue 0.
//! With `infinite_rx=1` the pcap PMD keeps a copy of every pcap packet in mbufs from the RX
//! pool for the whole run, so "mempool in use" after the run equals the packet count of the
//! pcap (64), not 0; they return to the pool when the port closes.

use spillway_dataplane::dpdk::{Eal, EthPort, Mempool};
use spillway_dataplane::fastpath::port::{Burst, Port};
use std::time::{Duration, Instant};

/// One 64-byte Ethernet/IPv4/TCP SYN frame from 10.0.0.1:`sport` to 10.0.0.100:80.
fn tcp_frame(sport: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]); // dst MAC
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]); // src MAC
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 100]);
    let csum = checksum(0, &f[ip_start..ip_start + 20]);
    f[ip_start + 10..ip_start + 12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&80u16.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]); // seq, ack, off, SYN, win, csum, urg
                                                                                        // TCP checksum over the pseudo-header (src, dst, proto 6, TCP length 20) and header.
    let tcp_start = ip_start + 20;
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&f[ip_start + 12..ip_start + 20]);
    pseudo[9] = 6;
    pseudo[11] = 20;
    let sum = checksum(!checksum(0, &pseudo) as u32, &f[tcp_start..tcp_start + 20]);
    f[tcp_start + 16..tcp_start + 18].copy_from_slice(&sum.to_be_bytes());
    f.resize(64, 0); // pad to 64 bytes
    f
}

/// Internet checksum of `data`, continuing a partial (un-complemented) sum `init`.
fn checksum(init: u32, data: &[u8]) -> u16 {
    let mut sum = init;
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes a classic pcap (LINKTYPE_ETHERNET) with `frames`.
fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) -> std::io::Result<()> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut pcap = None;
    let mut keep = false;
    let mut seconds = 2.0f64;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--pcap" => pcap = it.next(),
            "--keep-pcap" => keep = true,
            "--seconds" => seconds = it.next().ok_or("--seconds N")?.parse()?,
            _ => {
                return Err(format!(
                "unknown argument {a}; usage: dpdk_fwd [--pcap FILE] [--seconds N] [--keep-pcap]"
            )
                .into())
            }
        }
    }
    let generated = pcap.is_none();
    let pcap = match pcap {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let p = std::env::temp_dir().join(format!("spillway-fwd-{}.pcap", std::process::id()));
            let frames: Vec<_> = (0..64u16).map(|i| tcp_frame(10_000 + i)).collect();
            write_pcap(&p, &frames)?;
            p
        }
    };
    let pcap_vdev = format!("net_pcap0,rx_pcap={},infinite_rx=1", pcap.display());
    let args: Vec<String> = [
        "--no-huge",
        "--no-shconf",
        "-m",
        "512",
        "--no-pci",
        "--log-level=warning",
        "--vdev",
        &pcap_vdev,
        "--vdev",
        "net_null0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    let eal = Eal::init(&args)?;
    let pool = Mempool::new("fwd_pool", 8191, 256, -1)?;
    let mut rx_port = EthPort::by_name(&pcap_vdev)?;
    let mut tx_port = EthPort::by_name("net_null0")?;
    rx_port.configure(1, 1, 1024, &pool)?;
    tx_port.configure(1, 1, 1024, &pool)?;
    rx_port.start()?;
    tx_port.start()?;
    println!(
        "rx {} (driver {}), tx {} (driver {}), pcap {}",
        rx_port.name(),
        rx_port.driver_name()?,
        tx_port.name(),
        tx_port.driver_name()?,
        pcap.display()
    );

    let mut rxq = rx_port.queue(0);
    let mut txq = tx_port.queue(0);
    let (mut received, mut sent) = (0u64, 0u64);
    let mut burst: Burst<_> = Burst::new();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut loops = 0u64;
    loop {
        received += rxq.rx_burst(&mut burst) as u64;
        if !burst.is_empty() {
            sent += txq.tx_burst(&mut burst) as u64;
        }
        loops += 1;
        if loops & 1023 == 0 && Instant::now() >= deadline {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let rs = rx_port.stats()?;
    let ts = tx_port.stats()?;
    println!(
        "forwarded {sent} of {received} packets in {secs:.2} s: {:.0} pps ({:.2} Mpps)",
        sent as f64 / secs,
        sent as f64 / secs / 1e6
    );
    println!("rx stats {rs:?}");
    println!("tx stats {ts:?}");
    println!(
        "mempool in use after run: {} (avail {})",
        pool.in_use(),
        pool.avail()
    );

    rx_port.stop()?;
    tx_port.stop()?;
    drop(rx_port);
    drop(tx_port);
    drop(pool);
    eal.cleanup()?;
    if generated && !keep {
        let _ = std::fs::remove_file(&pcap);
    }
    Ok(())
}
