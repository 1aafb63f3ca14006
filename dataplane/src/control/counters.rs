//! Reading one worker's counters ([`WorkerStats`]) into the protocol's [`Counters`]: what
//! `status`, `top`, `stats` and `/metrics` show.
//!
//! # Read order
//!
//! Every counter has one writer, its worker, and only grows. The worker bumps `rx` for a
//! whole burst when it receives it, then one outcome counter per frame as it carries the
//! burst out (`forwarded`, a drop reason, a reply, a hand-over to the next-hop resolver),
//! and `tx` when it sends. A reader that loaded `rx` first and the outcomes later could
//! count outcomes of frames received after its `rx` load: fresh-user QA saw a worker with
//! `dropped` above `rx` under load. [`read`] therefore loads every outcome counter first,
//! then `tx`, then `rx` last, so a read always has `rx >= forwarded + dropped` (more
//! exactly: `rx >= forwarded + replies + arp_replies_seen + dropped - tx_full`, since
//! `tx_full` counts frames already counted as forwarded or replies), `tx >= control_tx`
//! and `polls >= idle_polls`.
//!
//! The outcome loads are `Acquire` and the worker's stores `Release`
//! ([`crate::fastpath::stats::bump`]): an outcome load that sees a bump also sees every
//! bump the worker made before it (its `rx` of that frame's burst included), and the later
//! `rx` load cannot move above it (no compiler or CPU reordering, on any architecture; on
//! x86-64 both are plain moves).

use crate::fastpath::stats::WorkerStats;
use crate::wire::DropReason;
use spillway_shared::proto::Counters;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use strum::IntoEnumIterator;

/// Reads one worker's counters: outcomes first, `tx`, then `rx` (module docs, "Read order").
pub fn read(w: &WorkerStats) -> Counters {
    let out = |c: &AtomicU64| c.load(Acquire);
    // Outcomes of received frames, and what the worker counts while carrying them out.
    let drops = DropReason::iter().map(|r| (r.name().to_string(), out(&w.drops[r as usize]))).collect();
    let forwarded = out(&w.forwarded);
    let fast_path = out(&w.fast_path);
    let arp_replies = out(&w.arp_replies);
    let nd_advertisements = out(&w.nd_advertisements);
    let nd_not_ours = out(&w.nd_not_ours);
    let icmp_forwarded = out(&w.icmp_forwarded);
    let icmp_frag_needed_sent = out(&w.icmp_frag_needed_sent);
    let fragments = out(&w.fragments);
    let fragments_held = out(&w.fragments_held);
    let redirected = out(&w.redirected);
    let new_connections = out(&w.new_connections);
    let rebalanced = out(&w.rebalanced);
    let arp_replies_seen = out(&w.arp_replies_seen);
    let quic_lb = w.quic.read();
    // Mirrored from the connection tables at the end of a poll (after its `rx`).
    let ct_hits = out(&w.ct_hits);
    let ct_misses = out(&w.ct_misses);
    let ct_evicted_syn_only = out(&w.ct_evicted_syn_only);
    let ct_evicted_closing = out(&w.ct_evicted_closing);
    let ct_syn_not_tracked = out(&w.ct_syn_not_tracked);
    let ct_relocated = out(&w.ct_relocated);
    let ct_relocation_failed = out(&w.ct_relocation_failed);
    // Control frames: counted after `tx` when sent.
    let control_tx = out(&w.control_tx);
    let control_tx_failed = out(&w.control_tx_failed);
    // `idle_polls` is bumped at the end of a poll, `polls` at its start.
    let idle_polls = out(&w.idle_polls);
    let polls = out(&w.polls);
    let tx = out(&w.tx);
    let rx = w.rx.load(Relaxed);
    Counters {
        rx,
        tx,
        forwarded,
        arp_replies,
        icmp_forwarded,
        icmp_frag_needed_sent,
        fragments,
        fragments_held,
        new_connections,
        rebalanced,
        drops,
        ct_hits,
        ct_misses,
        ct_evicted_syn_only,
        ct_evicted_closing,
        ct_syn_not_tracked,
        generation: w.generation.load(Relaxed),
        polls,
        idle_polls,
        arp_replies_seen,
        control_tx,
        control_tx_failed,
        nd_advertisements,
        nd_not_ours,
        quic_lb,
        ct_relocated,
        ct_relocation_failed,
        fast_path,
        redirected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastpath::stats::bump;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// The frames of a read accounted for by outcome (module docs): never more than `rx`.
    fn accounted(c: &Counters) -> u64 {
        let tx_full = c.drops.iter().find(|d| d.0 == DropReason::TxFull.name()).map_or(0, |d| d.1);
        c.forwarded + c.arp_replies + c.nd_advertisements + c.icmp_frag_needed_sent + c.arp_replies_seen + c.dropped() - tx_full
    }

    /// One thread bumps the counters in the worker's order (`rx` for a burst, then one
    /// outcome per frame, `tx` when it sends, some sends refused as `tx_full`) while this
    /// one reads: every read has `rx` at least the frames accounted for, `dropped <= rx`,
    /// `tx >= control_tx` and `polls >= idle_polls` (fresh-user QA: `dropped` above `rx`
    /// under load, when `rx` was read first).
    #[test]
    fn a_read_never_has_more_outcomes_than_frames_received() {
        let w = Arc::new(WorkerStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (w, stop) = (w.clone(), stop.clone());
            std::thread::spawn(move || {
                let reasons: Vec<DropReason> = DropReason::iter().filter(|r| *r != DropReason::TxFull).collect();
                let (mut i, mut burst) = (0u64, 0u64);
                while !stop.load(Relaxed) {
                    burst += 1;
                    bump(&w.polls, 1);
                    if burst % 5 == 0 {
                        bump(&w.idle_polls, 1);
                        continue;
                    }
                    let n = 1 + burst * 7 % 32;
                    bump(&w.rx, n);
                    let mut sent = 0;
                    for _ in 0..n {
                        i += 1;
                        match i % 7 {
                            0..=2 => {
                                bump(&w.forwarded, 1);
                                sent += 1;
                            }
                            3 => bump(&w.drops[reasons[(i % reasons.len() as u64) as usize] as usize], 1),
                            4 => {
                                bump(&w.arp_replies, 1);
                                sent += 1;
                            }
                            5 => bump(&w.arp_replies_seen, 1),
                            _ => {
                                bump(&w.nd_advertisements, 1);
                                sent += 1;
                            }
                        }
                    }
                    // the TX ring takes all but one frame of every fourth burst
                    let refused = u64::from(burst % 4 == 0 && sent > 0);
                    bump(&w.tx, sent - refused);
                    bump(&w.drops[DropReason::TxFull as usize], refused);
                    if burst % 3 == 0 {
                        bump(&w.tx, 1);
                        bump(&w.control_tx, 1);
                    }
                }
            })
        };
        let mut reads = 0u64;
        let mut moving = 0u64;
        let mut last_rx = 0;
        while reads < 200_000 || moving < 1_000 {
            let c = read(&w);
            assert!(c.rx >= accounted(&c), "read {reads}: rx {} < frames accounted for {} ({c:?})", c.rx, accounted(&c));
            assert!(c.dropped() <= c.rx, "read {reads}: dropped {} > rx {}", c.dropped(), c.rx);
            assert!(c.tx >= c.control_tx && c.polls >= c.idle_polls, "read {reads}: {c:?}");
            moving += u64::from(c.rx != last_rx);
            last_rx = c.rx;
            reads += 1;
            if reads > 20_000_000 {
                break;
            }
        }
        stop.store(true, Relaxed);
        writer.join().unwrap();
        assert!(moving >= 1_000, "the writer ran during the reads ({moving} reads saw rx move)");
        let c = read(&w);
        assert_eq!(c.rx, accounted(&c), "at rest every frame is accounted for exactly once: {c:?}");
    }
}
