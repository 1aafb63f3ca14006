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
//! with prefetch as `Worker::poll` does); `established` (N packets spread over 1,000
//! established flows, bursts of 32 with prefetch). Prints the workload and the packet count;
//! divide the `process`-inclusive instruction count by N for instructions per packet.

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
    let cfg = bench_config(16);
    let snap = snapshot(&cfg);
    let ports = vec![PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 1, addr: 0 }, PortInfo { mac: [2, 0, 0, 0, 0, 2], forward_to: 1, addr: 0 }];
    let mut w = Worker::new(0, 1 << 20, 0xabcdef, Timeouts::default(), Arc::new(WorkerStats::default()), ports);
    let flags = if workload == "syn_new" { SYN } else { ACK };
    let flows = if workload == "syn_new" { n } else { 1000 };
    if workload != "syn_new" {
        let mut syn = MemBuf::new(&tcp_frame(0, 0, SYN));
        let mut ack = MemBuf::new(&tcp_frame(0, 0, ACK));
        for i in 0..flows {
            set_flow(syn.data_mut(), i);
            set_flow(ack.data_mut(), i);
            assert_eq!(w.process(&mut syn, 0, &snap, 0), Verdict::Forward);
            assert_eq!(w.process(&mut ack, 0, &snap, 1), Verdict::Forward);
        }
    }
    let template = tcp_frame(0, 0, flags);
    let mut burst: Vec<MemBuf> = (0..32).map(|_| MemBuf::new(&template)).collect();
    let mut forwarded = 0u32;
    let mut i = 0u32;
    while i < n {
        for b in burst.iter_mut() {
            set_flow(b.data_mut(), (i + 7) % flows);
            i += 1;
        }
        for b in burst.iter() {
            w.prefetch(b, &snap);
        }
        for b in burst.iter_mut() {
            if black_box(w.process(b, 0, &snap, 2)) == Verdict::Forward {
                forwarded += 1;
            }
        }
    }
    println!("workload={workload} packets={i} forwarded={forwarded}");
}
