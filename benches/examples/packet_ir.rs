//! A fixed, deterministic packet workload for instruction counting with callgrind
//! (`valgrind --tool=callgrind`): instruction counts do not depend on the machine's load,
//! so two builds can be compared exactly (docs/benchmarks.md, "Instruction budget").
//!
//!     cargo build --release -p spillway-benches --example packet_ir
//!     valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!         target/release/examples/packet_ir syn_new 100000
//!     callgrind_annotate /tmp/cg.out | head -40
//!
//! Workloads (argument 1), each over N packets (argument 2) after a set-up that is the same
//! for every build: `syn_new` (a new flow per packet, SYN, 1 M-entry table, bursts of 32
//! through the vector path's stages as `Worker::poll` runs them); `established` (N packets spread over 1,000
//! established flows, bursts of 32 with prefetch); `syn_full` (a new flow per packet, SYN,
//! into a 65,536-entry table first filled with twice as many other flows' SYNs: every
//! insertion finds both buckets full of SYN-only entries, tries relocation and evicts, as
//! in a SYN flood or `benches/e2e.sh`'s `spillway_syn64_random` run). Prints the workload
//! and the packet count; `established6` (as `established`, over IPv6: 1,000 flows from
//! fd01::/64 to [fd00::100]:80, 78-byte frames with one 802.1Q tag);
//! `PACKET_IR_GENERAL=1` sends every packet through the general path instead (the same
//! decisions: the counts side by side). The established workloads cycle through prebuilt
//! frames, one per flow, as a NIC's RX ring hands over frames (the harness restores only
//! the destination MAC the fast path rewrote); the SYN workloads write each new flow into
//! a burst of 32 frames;
//! instructions per packet are the difference of two runs' counts (N and 3 N packets)
//! divided by 2 N, which cancels the set-up (docs/benchmarks.md, "Instruction budget").

use spillway_benches::{bench_config, set_flow, snapshot, tcp_frame};
use spillway_dataplane::fastpath::conntrack::Timeouts;
use spillway_dataplane::fastpath::port::{MemBuf, PacketBuf};
use spillway_dataplane::fastpath::stats::WorkerStats;
use spillway_dataplane::fastpath::worker::{PortInfo, Verdict, Worker};
use std::hint::black_box;
use std::sync::Arc;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workload = args.get(1).map(String::as_str).unwrap_or("syn_new");
    let n: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let six = workload == "established6";
    let cfg = if six { config6(16) } else { bench_config(16) };
    let snap = snapshot(&cfg);
    let ports = vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 1, addr: 0 }, PortInfo { mac: [2, 0, 0, 0, 0, 2], forward_to: 1, addr: 0 }];
    let full = workload == "syn_full";
    let mut w = Worker::new(0, if full { 1 << 16 } else { 1 << 20 }, 0xabcdef, Timeouts::default(), Arc::new(WorkerStats::default()), ports).with_ipv6_capacity(1 << 20, 0x1234)
        // PACKET_IR_GENERAL=1: every packet through the general path (side-by-side counts)
        .with_vector_path(std::env::var_os("PACKET_IR_GENERAL").is_none());
    let syn_run = workload == "syn_new" || full;
    let flags = if syn_run { SYN } else { ACK };
    let flows = if syn_run { n } else { 1000 };
    if full {
        // other flows (ids from 2^24 up) fill the table with SYN-only entries
        let mut syn = MemBuf::new(&tcp_frame(0, 0, SYN));
        for i in 0..1u32 << 17 {
            set_flow(syn.data_mut(), (1 << 24) + i);
            assert_eq!(w.process(&mut syn, 0, &snap, 1), Verdict::Forward);
        }
    }
    if !syn_run {
        let mut syn = MemBuf::new(&frame(six, SYN));
        let mut ack = MemBuf::new(&frame(six, ACK));
        for i in 0..flows {
            set(six, syn.data_mut(), i);
            set(six, ack.data_mut(), i);
            assert_eq!(w.process(&mut syn, 0, &snap, 0), Verdict::Forward);
            assert_eq!(w.process(&mut ack, 0, &snap, 1), Verdict::Forward);
        }
    }
    let template = frame(six, flags);
    let mut forwarded = 0u32;
    let mut i = 0u32;
    // as `Worker::poll`: the vector path's stages over the burst, then each packet decided
    // in order with its buckets prefetched PREFETCH_DISTANCE packets ahead
    let mut decide = |w: &mut Worker, burst: &mut [MemBuf]| {
        w.plan_burst(burst, 0, &snap, 2);
        for (j, b) in burst.iter_mut().enumerate() {
            if black_box(w.decide_planned(j, b, 0, &snap)) == Verdict::Forward {
                forwarded += 1;
            }
        }
    };
    if syn_run {
        // a new flow per packet, written into a burst of 32 frames
        let mut burst: Vec<MemBuf> = (0..32).map(|_| MemBuf::new(&template)).collect();
        while i < n {
            for b in burst.iter_mut() {
                set(six, b.data_mut(), (i + 7) % flows);
                i += 1;
            }
            decide(&mut w, &mut burst);
        }
    } else {
        // prebuilt frames, one per flow, cycled as a NIC's RX ring hands over received
        // frames: `ring[p]` is flow `(p + 7) % flows`, its first 32 frames repeated at the
        // end so that every burst is one slice; only the destination MAC the previous pass
        // rewrote is put back
        let mut ring: Vec<MemBuf> = (0..flows + 32)
            .map(|p| {
                let mut b = MemBuf::new(&template);
                set(six, b.data_mut(), (p + 7) % flows);
                b
            })
            .collect();
        while i < n {
            let start = (i % flows) as usize;
            i += 32;
            let burst = &mut ring[start..start + 32];
            for b in burst.iter_mut() {
                spillway_benches::readdress(b.data_mut());
            }
            decide(&mut w, burst);
        }
    }
    println!("workload={workload} packets={i} forwarded={forwarded}");
}

/// One TCP/80 service on [fd00::100] with `backends` backends (the IPv6 twin of
/// `bench_config`), clients in fd01::/64.
fn config6(backends: usize) -> spillway_shared::config::Config {
    let mut t = String::from(
        "[[ports]]\nname = \"in\"\ndevice = \"net_null0\"\nforward_to = \"out\"\nmac = \"02:00:00:00:00:01\"\n\
         [[ports]]\nname = \"out\"\ndevice = \"net_null1\"\nmac = \"02:00:00:00:00:02\"\n\
         [[zones]]\nzone = \"z1\"\nregion = \"r1\"\n[[client_zones]]\nprefix = \"fd01::/64\"\nzone = \"z1\"\n\
         [[services]]\nname = \"web6\"\nvip = \"fd00::100\"\nport = 80\nprotocol = \"tcp\"\n",
    );
    for b in 0..backends {
        t.push_str(&format!("[[services.backends]]\nname = \"v{b}\"\naddress = \"fd00:10::{:x}\"\nmac = \"02:00:00:01:00:{:02x}\"\nzone = \"z1\"\n", b + 1, b));
    }
    spillway_shared::config::Config::from_toml(&t).expect("IPv6 bench config")
}

/// The workload's frame: `tcp_frame` (IPv4), or its IPv6 twin (802.1Q tag, IPv6, TCP to
/// [fd00::100]:80; 78 bytes).
fn frame(six: bool, flags: u8) -> Vec<u8> {
    if !six {
        return tcp_frame(0, 0, flags);
    }
    let mut f = tcp_frame(0, 0, flags)[..18].to_vec();
    f[16..18].copy_from_slice(&0x86ddu16.to_be_bytes());
    let mut ip = [0u8; 40];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&20u16.to_be_bytes());
    ip[6] = 6;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&0xfd01_0000_0000_0000_0000_0000_0000_0000u128.to_be_bytes());
    ip[24..40].copy_from_slice(&0xfd00_0000_0000_0000_0000_0000_0000_0100u128.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = flags;
    f.extend_from_slice(&tcp);
    f
}

/// Writes flow `i`'s source address and port into a [`frame`] in place.
fn set(six: bool, f: &mut [u8], i: u32) {
    if !six {
        return set_flow(f, i);
    }
    spillway_benches::readdress(f);
    let (src, sport) = spillway_benches::flow_of(i);
    f[18 + 20..18 + 24].copy_from_slice(&src.to_be_bytes());
    f[58..60].copy_from_slice(&sport.to_be_bytes());
}
