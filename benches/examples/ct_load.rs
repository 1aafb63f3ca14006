//! Lookups in an 8 Mi-entry connection table (128 MiB: every bucket read is a DRAM miss),
//! timed with the wall clock, with and without prefetching the key's buckets first:
//! what `conntrack/hit/8m` and `miss/8m` measure (a lone lookup, nothing loaded ahead)
//! against what the worker does (the prefetch pass loads each packet's buckets
//! `PREFETCH_DISTANCE` packets ahead). docs/benchmarks.md "8 M lookups, lone and
//! prefetched".
//!
//!     ct_load [FILL]        # FILL: keys inserted per slot, 0.1..=1.0 (default 1.0)
//!
//! Prints, in ns per lookup: the host's DRAM latency (a dependent pointer chase over
//! 128 MiB) and independent random reads of the same array (how many misses the core
//! overlaps), then hits and misses: lone (`hit`, `miss`), with both buckets prefetched
//! just before the same lookup (`hit_pf0`, `miss_pf0`), with both prefetched 8 lookups
//! ahead (`hit_pf8`, `miss_pf8`: the worker's order), and read-only (`hit_peek`,
//! `miss_peek`: no entry or counter written).

use spillway_benches::{key_of, xorshift};
use spillway_dataplane::fastpath::conntrack::{ConnTable, CtKey, Timeouts};
use std::hint::black_box;
use std::time::Instant;

const ACK: u8 = 0x10;
const ENTRIES: usize = 8 << 20;
const LOOKUPS: usize = 20_000_000;
/// Hits are drawn from this many present keys (a shuffled list read in order).
const PRESENT: usize = 1 << 20;

fn ct_key(i: u32) -> CtKey {
    CtKey::of(&key_of(i), 1)
}

/// ns per step of a dependent chase through a random cycle over 128 MiB, and per read of
/// independent random reads of the same array.
fn dram() -> (f64, f64) {
    let len = 16usize << 20;
    let mut next: Vec<u64> = (0..len as u64).collect();
    let mut s = 3u64;
    // Sattolo: one cycle through every slot
    for j in (1..len).rev() {
        next.swap(j, (xorshift(&mut s) % j as u64) as usize);
    }
    let (steps, st) = (5_000_000, Instant::now());
    let mut p = 0u64;
    for _ in 0..steps {
        p = next[p as usize];
    }
    let chase = st.elapsed().as_nanos() as f64 / steps as f64;
    black_box(p);
    let st = Instant::now();
    let mut acc = 0u64;
    for _ in 0..LOOKUPS {
        acc = acc.wrapping_add(next[xorshift(&mut s) as usize % len]);
    }
    black_box(acc);
    (chase, st.elapsed().as_nanos() as f64 / LOOKUPS as f64)
}

fn main() {
    let fill = match std::env::args().nth(1).map(|a| a.parse::<f64>()) {
        None => 1.0,
        Some(Ok(f)) if (0.1..=1.0).contains(&f) => f,
        Some(_) => {
            eprintln!("usage: ct_load [FILL (0.1..=1.0)]");
            std::process::exit(2);
        }
    };
    let (chase, parallel) = dram();
    println!("dram: dependent chase {chase:.1} ns, independent random reads {parallel:.1} ns");
    let t = Timeouts::default();
    let mut ct = ConnTable::new(ENTRIES, 0xfeed);
    let m = (ENTRIES as f64 * fill) as usize;
    for i in 0..m as u32 {
        ct.insert(&ct_key(i), (i % 64) as u16, 1, 0, &t);
    }
    let mut present: Vec<u32> = Vec::with_capacity(PRESENT);
    let mut s = 7u64;
    while present.len() < PRESENT {
        let i = (xorshift(&mut s) % m as u64) as u32;
        if ct.lookup(&ct_key(i), ACK, 1, &t).is_some() {
            present.push(i);
        }
    }
    let mut s = 11u64;
    for j in (1..present.len()).rev() {
        present.swap(j, (xorshift(&mut s) % (j as u64 + 1)) as usize);
    }
    println!("table: {ENTRIES} entries, {:.1} % live", 100.0 * ct.live(1) as f64 / ENTRIES as f64);
    for mode in ["hit", "miss", "hit_pf0", "miss_pf0", "hit_pf8", "miss_pf8", "hit_peek", "miss_peek"] {
        let hit = mode.starts_with("hit");
        // the key of lookup r: a present one, or one of another service (never present)
        let key = |r: usize, s: &mut u64| if hit { ct_key(present[r % PRESENT]) } else { CtKey { service: 2, ..ct_key(xorshift(s) as u32) } };
        let (mut s, mut ahead) = (0x51u64, 0x51u64);
        let ahead_by = if mode.ends_with("pf8") { 8 } else { 0 };
        for r in 0..ahead_by {
            ct.prefetch_target(&key(r, &mut ahead), true).issue();
        }
        let (st, mut found) = (Instant::now(), 0usize);
        for r in 0..LOOKUPS {
            if ahead_by > 0 {
                ct.prefetch_target(&key(r + ahead_by, &mut ahead), true).issue();
            }
            let k = key(r, &mut s);
            if mode.ends_with("pf0") {
                ct.prefetch_target(&k, true).issue();
            }
            let got = if mode.ends_with("peek") { ct.peek(black_box(&k), 2) } else { ct.lookup(black_box(&k), ACK, 2, &t) };
            found += usize::from(got.is_some());
        }
        println!("{mode}: {:.1} ns per lookup ({found} found)", st.elapsed().as_nanos() as f64 / LOOKUPS as f64);
    }
}
