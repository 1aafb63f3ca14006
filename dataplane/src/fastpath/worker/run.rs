//! The worker thread: the loop that reads the clock, loads the snapshot, polls the ports,
//! serves control requests and reports its quiescent state, until the daemon stops. A
//! child of [`super`].

use super::{PollBuffers, Port, Worker};

pub use crate::threads::on_worker_thread;

/// Parameters of [`run_loop`].
#[derive(Clone, Copy, Debug)]
pub struct LoopParams {
    /// Worker index (its counters, mailbox and quiescent-state slot in `Shared`).
    pub index: usize,
    /// Start of the worker clock (ms since then are the connection table's time).
    pub epoch: std::time::Instant,
    /// Sleep after an iteration that received nothing (0: busy polling).
    pub idle_sleep: std::time::Duration,
}

/// The worker thread's loop, until `shared.stop`: each iteration reads the clock once, loads
/// the current snapshot (no guard, no atomic read-modify-write), polls every port, reports
/// its quiescent state (the generation it used, in [`Worker::poll`]), then serves a pending
/// control request. Snapshots are never dropped here: reclamation runs on the control side.
/// `redirect`: every worker's redirect ring (worker/redirect.rs), shared by the workers.
pub fn run_loop<P: Port>(worker: &mut Worker, queues: &mut [P], shared: &crate::control::publish::Shared, params: LoopParams, redirect: Option<std::sync::Arc<super::RedirectRings<P::Buf>>>) {
    crate::threads::set_worker_thread(true);
    let mut bufs = PollBuffers::new(queues.len()).with_redirect(redirect);
    let Some(mailbox) = shared.mailboxes.get(params.index).cloned() else { return };
    worker.neighbors = Some(shared.neighbors.clone());
    worker.sync = shared.sync.get().cloned();
    worker.capture = shared.capture.take_tap(params.index);
    let outbox = if params.index == 0 { Some(shared.neighbors.clone()) } else { None };
    while !shared.stop.load(std::sync::atomic::Ordering::Relaxed) {
        let now = params.epoch.elapsed().as_millis() as u32;
        // SAFETY: this worker (index `params.index`) reports its quiescent state at the end
        // of `poll` and does not keep `snap` past this iteration.
        let snap = unsafe { shared.worker_snapshot() };
        if let Some(t) = &mut worker.capture {
            t.refresh();
        }
        let n = worker.poll(queues, &mut bufs, snap, now);
        if let Some(o) = &outbox {
            worker.send_control_frames(queues, &o.outbox);
        }
        mailbox.serve(|req| worker.control(req, snap, now));
        if n == 0 && !params.idle_sleep.is_zero() {
            std::thread::sleep(params.idle_sleep);
        }
    }
    crate::threads::set_worker_thread(false);
}

