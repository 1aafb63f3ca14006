//! Snapshot publication and reclamation by quiescent states (the scheme of DPDK's RCU QSBR
//! library, `rte_rcu_qsbr`), and the rest of what the control plane shares with workers.
//!
//! * **Publish** (control side, any control thread): the new snapshot gets the next
//!   generation, is stored behind an `Arc` in the publication list and made current with one
//!   atomic pointer store (Release). The previous one is *retired*, stamped with the
//!   generation that replaced it.
//! * **Read** (worker): once per poll iteration the worker loads the pointer (Acquire) and
//!   uses the snapshot for the whole burst with no guard and no atomic read-modify-write.
//!   At the end of the iteration it reports the generation it used
//!   ([`WorkerStats::generation`]): its *quiescent state*. It holds no reference after that.
//! * **Reclaim** (control side only): a retired snapshot is dropped once every worker has
//!   reported a generation at least the one that replaced it; such a worker loaded its
//!   snapshot after the swap, so it can no longer hold the retired one. Dropping happens in
//!   [`Shared::reclaim`], called by `publish` and by the control loop's tick, so the
//!   thousands of strings and 128 KiB+ Maglev tables of an old snapshot are freed on the
//!   control thread, never on a worker core (tested: `dataplane/tests/snapshot_swap.rs`, no snapshot dropped on a worker thread).
//!
//! A worker that stops polling (stuck, or stopped at shutdown) holds reclamation back; the
//! retired list is bounded only by that, and [`Shared::retired`] shows its length.
//! Control-plane readers ([`Shared::with_snapshot`]) take an `Arc` of the current snapshot
//! under the publication mutex, so they never race reclamation either.

use super::mailbox::{FlowReply, FlowRequest, Mailbox};
use crate::control::snapshot::Snapshot;
use crate::fastpath::stats::WorkerStats;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The control side of publication: the current snapshot and the retired ones that some
/// worker may still use.
struct Publications {
    /// Owner of the snapshot [`Shared::current`] points at.
    current: Arc<Snapshot>,
    /// Retired snapshots with the generation that replaced each.
    retired: Vec<(u64, Arc<Snapshot>)>,
}

/// State shared between the control plane and the workers.
pub struct Shared {
    /// The current snapshot, as workers read it. Points into `publications.current` (or,
    /// for a moment after a swap, into a retired entry that reclamation keeps alive).
    current: AtomicPtr<Snapshot>,
    publications: Mutex<Publications>,
    /// Set to stop the workers.
    pub stop: AtomicBool,
    /// Per-worker counters; `generation` is each worker's quiescent-state report.
    pub stats: Vec<Arc<WorkerStats>>,
    /// Generation of the current snapshot.
    pub generation: AtomicU64,
    /// Per-worker control mailboxes (connection-table requests).
    pub mailboxes: Vec<Arc<Mailbox>>,
    /// Serialises control-side use of the mailboxes.
    pub mailbox_lock: std::sync::Mutex<u64>,
    /// Queues between the workers and the neighbour resolver ([`crate::neighbor`]).
    pub neighbors: Arc<crate::fastpath::neighbor_queues::NeighborQueues>,
    /// Queues to the fleet-sync thread, set once at start when `[sync]` is configured
    /// (before the workers start; [`crate::sync`]).
    pub sync: std::sync::OnceLock<Arc<crate::fastpath::sync_queues::SyncQueues>>,
    /// Rings of dropped frames for `capture drops` ([`crate::fastpath::capture`]).
    pub capture: Arc<crate::fastpath::capture::CaptureHub>,
}

impl Shared {
    /// Shared state with an initial snapshot and `workers` counter sets.
    pub fn new(mut initial: Snapshot, workers: usize) -> Shared {
        initial.seal();
        let generation = AtomicU64::new(initial.generation);
        let current = Arc::new(initial);
        Shared {
            current: AtomicPtr::new(Arc::as_ptr(&current) as *mut Snapshot),
            publications: Mutex::new(Publications { current, retired: Vec::new() }),
            stop: AtomicBool::new(false),
            stats: (0..workers).map(|_| Arc::new(WorkerStats::default())).collect(),
            generation,
            mailboxes: (0..workers).map(|_| Arc::new(Mailbox::default())).collect(),
            mailbox_lock: std::sync::Mutex::new(0),
            neighbors: Arc::new(crate::fastpath::neighbor_queues::NeighborQueues::new(workers)),
            sync: std::sync::OnceLock::new(),
            capture: Arc::new(crate::fastpath::capture::CaptureHub::new(workers)),
        }
    }

    /// Worker side: the current snapshot. The reference is valid until the caller reports
    /// a quiescent state for a later generation (`stats[w].generation`), which the worker
    /// loop does at the end of each iteration; workers must not keep it longer.
    ///
    /// # Safety
    /// Only a registered worker (one of `stats`) may call this, and it must report its
    /// quiescent state ([`Shared::quiescent`]) before it loads again, never holding the
    /// reference across that report.
    #[inline]
    pub unsafe fn worker_snapshot(&self) -> &Snapshot {
        // SAFETY: the pointer always names a live snapshot: the current one is owned by
        // `publications.current`; a replaced one stays in `retired` until every worker
        // has reported a generation ≥ its successor's, which (by the caller's contract)
        // this worker does only after it stopped using the reference.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// Worker side: reports that worker `w` is done with every snapshot older than
    /// `generation` (the generation of the snapshot it just used).
    #[inline]
    pub fn quiescent(&self, w: usize, generation: u64) {
        if let Some(s) = self.stats.get(w) {
            s.generation.store(generation, Ordering::Release);
        }
    }

    /// Control side: posts `op` to every worker's mailbox and waits up to `timeout` for all
    /// replies. Errors name the workers that did not answer in time (stopped or stuck). A
    /// worker still running a request that timed out answers the next one afterwards: the
    /// replies are matched by sequence number ([`Mailbox`]).
    pub fn ask_workers(
        &self,
        op: spillway_shared::proto::FlowOp,
        slots: Option<Vec<(u16, u16)>>,
        timeout: std::time::Duration,
    ) -> Result<Vec<FlowReply>, String> {
        let mut seq = self.mailbox_lock.lock().unwrap_or_else(|e| e.into_inner());
        *seq += 1;
        let seq = *seq;
        for mb in &self.mailboxes {
            mb.post(FlowRequest { seq, op, slots: slots.clone() });
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut out: Vec<Option<FlowReply>> = vec![None; self.mailboxes.len()];
        loop {
            for (i, mb) in self.mailboxes.iter().enumerate() {
                if out[i].is_none() {
                    out[i] = mb.take_reply(seq);
                }
            }
            if out.iter().all(Option::is_some) {
                return Ok(out.into_iter().flatten().collect());
            }
            if std::time::Instant::now() >= deadline || self.stop.load(Ordering::Relaxed) {
                let missing: Vec<String> = out.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i.to_string()).collect();
                return Err(format!("worker(s) {} did not answer within {} ms", missing.join(", "), timeout.as_millis()));
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// Publishes `snap` and reclaims what no worker can use any more. Generations must
    /// increase: a snapshot whose generation is not above the current one gets the next
    /// number (the daemon always numbers them increasingly; this keeps tests honest).
    pub fn publish(&self, mut snap: Snapshot) {
        snap.seal();
        let mut p = self.publications.lock().unwrap_or_else(|e| e.into_inner());
        if snap.generation <= p.current.generation {
            snap.generation = p.current.generation + 1;
        }
        let g = snap.generation;
        let new = Arc::new(snap);
        self.current.store(Arc::as_ptr(&new) as *mut Snapshot, Ordering::Release);
        let old = std::mem::replace(&mut p.current, new);
        p.retired.push((g, old));
        self.generation.store(g, Ordering::Release);
        let dead = Self::take_reclaimable(&mut p, &self.stats);
        drop(p);
        drop(dead);
    }

    /// Drops retired snapshots that every worker has moved past; returns how many. Called
    /// on the control side only (the control loop calls it every tick).
    pub fn reclaim(&self) -> usize {
        let mut p = self.publications.lock().unwrap_or_else(|e| e.into_inner());
        let dead = Self::take_reclaimable(&mut p, &self.stats);
        drop(p);
        dead.len()
    }

    fn take_reclaimable(p: &mut Publications, stats: &[Arc<WorkerStats>]) -> Vec<Arc<Snapshot>> {
        let seen = stats.iter().map(|s| s.generation.load(Ordering::Acquire)).min().unwrap_or(u64::MAX);
        let mut dead = Vec::new();
        p.retired.retain(|(replaced_by, s)| {
            if *replaced_by <= seen {
                dead.push(s.clone());
                false
            } else {
                true
            }
        });
        dead
    }

    /// Number of retired snapshots still waiting for a worker to move past them.
    pub fn retired(&self) -> usize {
        self.publications.lock().unwrap_or_else(|e| e.into_inner()).retired.len()
    }

    /// The current snapshot (control side): the one a publication that replaces only some
    /// services starts from ([`crate::control::incremental`]).
    pub fn current(&self) -> Arc<Snapshot> {
        self.publications.lock().unwrap_or_else(|e| e.into_inner()).current.clone()
    }

    /// Runs `f` with the current snapshot (control side).
    pub fn with_snapshot<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> Option<R> {
        let s = self.publications.lock().unwrap_or_else(|e| e.into_inner()).current.clone();
        Some(f(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::snapshot::Snapshot;
    use crate::fastpath::conntrack::Timeouts;
    use crate::fastpath::worker::Worker;
    use spillway_shared::proto::FlowOp;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    /// Two workers with their own tables serve mailbox requests from their poll loops.
    #[test]
    fn mailbox_requests_reach_every_worker() {
        let shared = Arc::new(Shared::new(Snapshot::default(), 2));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for w in 0..2usize {
            let (sh, stop) = (shared.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut worker = Worker::new(w, 1024, 7 + w as u64, Timeouts::default(), sh.stats[w].clone(), Vec::new());
                for i in 0..10u16 {
                    let k = crate::fastpath::conntrack::CtKey { src: u32::from(Ipv4Addr::new(10, 1, w as u8, i as u8)), sport: 1000 + i, service: 0 };
                    // slots 0 (incarnation 1) and 1 (incarnation 1); slot 1 with a stale incarnation 0 for i == 9
                    let (slot, inc) = if i == 9 { (1, 0) } else { (i % 2, 1) };
                    worker.ct.insert(&k, slot, inc, 5, &Timeouts::default());
                }
                while !stop.load(Ordering::Relaxed) {
                    sh.mailboxes[w].serve(|req| worker.control(req, &Snapshot::default(), 10));
                    std::thread::sleep(Duration::from_micros(100));
                }
            }));
        }
        let t = Duration::from_secs(5);
        let all = shared.ask_workers(FlowOp::Count, None, t).unwrap();
        assert_eq!(all.iter().map(|r| r.count).collect::<Vec<_>>(), vec![10, 10]);
        let s1 = shared.ask_workers(FlowOp::Count, Some(vec![(1, 1)]), t).unwrap();
        assert_eq!(s1.iter().map(|r| r.count).sum::<u64>(), 8, "the stale incarnation does not match");
        let shown = shared.ask_workers(FlowOp::Show { limit: 3 }, Some(vec![(0, 1)]), t).unwrap();
        assert!(shown.iter().all(|r| r.entries.len() == 3 && r.count == 5));
        let fl = shared.ask_workers(FlowOp::Flush, Some(vec![(0, 1)]), t).unwrap();
        assert_eq!(fl.iter().map(|r| r.count).sum::<u64>(), 10);
        let left = shared.ask_workers(FlowOp::Count, None, t).unwrap();
        assert_eq!(left.iter().map(|r| r.count).sum::<u64>(), 10);
        stop.store(true, Ordering::Relaxed);
        for th in threads {
            th.join().unwrap();
        }
        // nobody serving: a timeout naming the workers, not a hang
        let e = shared.ask_workers(FlowOp::Count, None, Duration::from_millis(50)).unwrap_err();
        assert!(e.contains("worker(s) 0, 1 did not answer"), "{e}");
    }

    /// A worker still busy with a request the control side gave up on (timeout) must serve
    /// the next request once it is done, and its late reply must not be taken for it.
    #[test]
    fn a_slow_worker_answers_the_request_after_a_timeout() {
        let shared = Arc::new(Shared::new(Snapshot::default(), 1));
        let stop = Arc::new(AtomicBool::new(false));
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (sh, st) = (shared.clone(), stop.clone());
        let worker = std::thread::spawn(move || {
            let mut served = Vec::new();
            while !st.load(Ordering::Relaxed) {
                sh.mailboxes[0].serve(|req| {
                    served.push(req.seq);
                    if req.seq == 1 {
                        // slow: still running after the control side's timeout
                        let _ = release_rx.recv();
                    }
                    FlowReply { seq: req.seq, count: 100 + req.seq, ..FlowReply::default() }
                });
                std::thread::sleep(Duration::from_micros(100));
            }
            served
        });
        let e = shared.ask_workers(FlowOp::Count, None, Duration::from_millis(50)).unwrap_err();
        assert!(e.contains("worker(s) 0 did not answer"), "{e}");
        // The worker finishes request 1 while request 2 waits.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let _ = release_tx.send(());
        });
        let r = shared.ask_workers(FlowOp::Count, None, Duration::from_secs(5)).expect("request 2 answered after the slow request 1");
        assert_eq!(r.iter().map(|r| (r.seq, r.count)).collect::<Vec<_>>(), [(2, 102)], "the reply to request 2, not the late one to 1");
        let r = shared.ask_workers(FlowOp::Count, None, Duration::from_secs(5)).unwrap();
        assert_eq!(r[0].count, 103);
        releaser.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(worker.join().unwrap(), [1, 2, 3], "every request served once, in order");
    }
}
