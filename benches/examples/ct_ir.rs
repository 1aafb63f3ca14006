//! Connection-table lookups for instruction counting with callgrind: the bodies of the
//! criterion bench's `conntrack/miss/1k` and `conntrack/hit/1k` (`benches/conntrack.rs`)
//! in a plain loop, so two runs of different lengths give the exact instructions per
//! lookup on any host, however loaded (docs/benchmarks.md, "Criterion").
//!
//!     ct_ir miss|hit N
//!
//! A 1 Ki-entry table is filled with the keys of flows 0..1024 (`key_of`, service 1);
//! `miss` looks up N random keys of service 2 (never present), `hit` N random flows of
//! the 1,024 (present unless their insertion was refused). Prints the workload, N and the
//! hits. Per lookup, the loop's own work (one xorshift, building the key) is included.

use spillway_benches::{key_of, xorshift};
use spillway_dataplane::fastpath::conntrack::{ConnTable, CtKey, Timeouts};
use std::hint::black_box;

/// TCP flags of an established flow's packet.
const ACK: u8 = 0x10;

/// The table key of flow `i` of [`key_of`] for service number `service`.
fn ct_key(i: u32, service: u16) -> CtKey {
    CtKey::of(&key_of(i), service)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(what), Some(Ok(n))) = (args.get(1).map(String::as_str), args.get(2).map(|a| a.parse::<u64>())) else {
        eprintln!("usage: ct_ir miss|hit N");
        std::process::exit(2);
    };
    if what != "miss" && what != "hit" {
        eprintln!("ct_ir: unknown workload {what:?} (miss or hit)");
        std::process::exit(2);
    }
    let t = Timeouts::default();
    let cap = 1u32 << 10;
    let mut ct = ConnTable::new(cap as usize, 0xfeed);
    for i in 0..cap {
        ct.insert(&ct_key(i, 1), (i % 64) as u16, 1, 0, &t);
    }
    let (mut s, mut hits) = (0x51u64, 0u64);
    for _ in 0..n {
        let i = xorshift(&mut s) as u32;
        let k = if what == "miss" { ct_key(i, 2) } else { ct_key(i % cap, 1) };
        if ct.lookup(black_box(&k), ACK, 2, &t).is_some() {
            hits += 1;
        }
    }
    println!("{what} {n} hits {hits}");
}
