//! The worker's side of the control plane's flow requests (`spillwayctl flows`): count,
//! show or flush connection-table entries, run on the worker between two polls (never
//! concurrently with packet processing, so no lock). A child of [`super`].

use super::Worker;

impl Worker {
    /// Runs a control request on this worker's connection table (see
    /// [`crate::control::Mailbox`]); called from the poll loop only when one is pending,
    /// with the snapshot of that iteration (flushed connections' endpoints are named from
    /// it for the peers).
    pub fn control(&mut self, req: &crate::control::mailbox::FlowRequest, snap: &crate::control::snapshot::Snapshot, now_ms: u32) -> crate::control::mailbox::FlowReply {
        use spillway_shared::proto::FlowOp;
        let matches = |backend: u16, incarnation: u16| req.slots.as_ref().is_none_or(|s| s.contains(&(backend, incarnation)));
        let mut reply = crate::control::mailbox::FlowReply { seq: req.seq, ..Default::default() };
        match req.op {
            FlowOp::Count => {
                // A filtered count walks the tables (the daemon answers an unfiltered one
                // from the occupancy counters, `Daemon::flows`).
                self.ct.for_each_live(now_ms, |e| reply.count += u64::from(matches(e.backend, e.incarnation)));
                self.ct6.for_each_live(now_ms, |e| reply.count += u64::from(matches(e.backend, e.incarnation)));
            }
            FlowOp::Show { limit } => {
                let max = (limit as usize).min(crate::control::mailbox::MAX_SHOW_PER_WORKER);
                // The idle time is derived from the deadline and the service's timeouts.
                use crate::fastpath::conntrack::ServiceTimeouts;
                let t = snap.timeouts(self.timeouts);
                self.ct.for_each_live(now_ms, |e| {
                    if matches(e.backend, e.incarnation) {
                        reply.count += 1;
                        if reply.entries.len() < max {
                            reply.entries.push((*e, e.idle_ms(now_ms, &t.of(e.service))));
                        }
                    }
                });
                self.ct6.for_each_live(now_ms, |e| {
                    if matches(e.backend, e.incarnation) {
                        reply.count += 1;
                        if reply.entries.len() + reply.entries6.len() < max {
                            reply.entries6.push((*e, e.idle_ms(now_ms, &t.of(e.service))));
                        }
                    }
                });
            }
            FlowOp::Flush => {
                // Flushed connections of this host end on the peers too (fleet sync): the
                // tables keep their removals, queued over the next polls (`sync_poll`).
                let sync = self.sync.is_some();
                reply.count = self.ct.flush(now_ms, sync, |e| matches(e.backend, e.incarnation)) as u64;
                reply.count += self.ct6.flush(now_ms, sync, |e| matches(e.backend, e.incarnation)) as u64;
                // Before the reply: a `flows count` right after the flush reads the new figures.
                self.publish_occupancy();
            }
        }
        reply
    }

    /// Mirrors both tables' occupancy counters into [`crate::fastpath::stats::WorkerStats::ct_entries`],
    /// and their relocation counters (eight relaxed stores; no table walk).
    pub(crate) fn publish_occupancy(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let (c, c6) = (&self.ct.counters, &self.ct6.counters);
        self.stats.ct_relocated.store(c.relocated + c6.relocated, Relaxed);
        self.stats.ct_relocation_failed.store(c.relocation_failed + c6.relocation_failed, Relaxed);
        for (f, o) in [self.ct.occupancy(), self.ct6.occupancy()].into_iter().enumerate() {
            for (s, n) in [o.syn_only, o.established, o.closing].into_iter().enumerate() {
                self.stats.ct_entries[f * 3 + s].store(n, Relaxed);
            }
        }
    }
}
