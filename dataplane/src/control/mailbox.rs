//! Per-worker control mailboxes: how the control plane asks a worker to count, list or
//! flush entries of its own connection table without sharing it. The worker checks one
//! atomic counter per poll iteration; the mutexes are taken only when a request waits.
//!
//! Requests and replies are matched by sequence number, not by a "pending" flag: the
//! control side may give up on a request (timeout) while the worker is still running it,
//! and post the next one. A flag cleared by the late worker would then also clear the new
//! request, which would never be served. With sequence numbers the worker serves whatever
//! request is newer than the last it answered, and the control side takes only the reply
//! that carries its own request's number.

use std::sync::atomic::{AtomicU64, Ordering};

/// Most entries one worker lists for a `Show` request (bounds the answer: 5,000 rows × workers).
pub const MAX_SHOW_PER_WORKER: usize = 5000;

/// A connection-table request to one worker.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowRequest {
    /// Sequence number, echoed in the reply.
    pub seq: u64,
    /// What to do.
    pub op: spillway_shared::proto::FlowOp,
    /// Entries whose (backend slot, incarnation) is listed match; `None` = every entry.
    pub slots: Option<Vec<(u16, u16)>>,
}

/// A worker's answer to a [`FlowRequest`].
#[derive(Clone, Debug, Default)]
pub struct FlowReply {
    /// Sequence number of the request.
    pub seq: u64,
    /// Matching live entries (for `Flush`: entries removed).
    pub count: u64,
    /// Up to `limit` entries (for `Show`), with their idle time in ms.
    pub entries: Vec<(crate::fastpath::conntrack::Entry, u32)>,
    /// Up to `limit` entries of the IPv6 table (for `Show`; `limit` covers both tables).
    pub entries6: Vec<(crate::fastpath::conntrack::Entry<u128>, u32)>,
}

/// A worker's control mailbox. The worker compares `posted` with `answered` once per poll
/// iteration (two loads of one cache line, no read-modify-write); only when a newer request
/// was posted does it take the mutexes, run the request on its own connection table, store
/// the reply and publish its number in `answered`. With no request waiting the packet path
/// takes no lock.
///
/// Sequence numbers start at 1 and increase; the control side posts one request at a time
/// per mailbox (callers serialise, see `Shared::ask_workers`).
#[derive(Debug, Default)]
pub struct Mailbox {
    /// Sequence number of the latest request posted (0: none yet). Written by the control
    /// side after the request is in `request`.
    posted: AtomicU64,
    /// Sequence number of the latest request the worker answered. Written by the worker
    /// only, after the reply is in `reply`.
    answered: AtomicU64,
    /// The request.
    request: std::sync::Mutex<Option<FlowRequest>>,
    /// The reply to the request numbered `answered`.
    reply: std::sync::Mutex<Option<FlowReply>>,
}

impl Mailbox {
    /// Worker side: if a request newer than the last one answered was posted, runs `f` on
    /// it and posts the reply.
    #[inline]
    pub fn serve(&self, f: impl FnOnce(&FlowRequest) -> FlowReply) {
        let posted = self.posted.load(Ordering::Acquire);
        if posted == self.answered.load(Ordering::Relaxed) {
            return;
        }
        self.serve_slow(posted, f);
    }

    #[cold]
    fn serve_slow(&self, posted: u64, f: impl FnOnce(&FlowRequest) -> FlowReply) {
        let req = self.request.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(req) = req else {
            // Nothing to run (cannot happen: a number is posted only after its request).
            self.answered.store(posted, Ordering::Release);
            return;
        };
        let mut reply = f(&req);
        reply.seq = req.seq;
        *self.reply.lock().unwrap_or_else(|e| e.into_inner()) = Some(reply);
        self.answered.store(req.seq, Ordering::Release);
    }

    /// Sequence number of the latest request posted (0: none yet).
    pub fn posted(&self) -> u64 {
        self.posted.load(Ordering::Acquire)
    }

    /// Control side: posts `req` (whose `seq` must be above every earlier one of this
    /// mailbox), replacing a request the worker has not picked up yet.
    pub fn post(&self, req: FlowRequest) {
        let seq = req.seq;
        *self.request.lock().unwrap_or_else(|e| e.into_inner()) = Some(req);
        self.posted.store(seq, Ordering::Release);
    }

    /// Control side: the reply to request `seq`, once the worker has answered it; `None`
    /// while it has not (a reply to an older request, late after a timeout, is left alone
    /// and never returned for `seq`).
    pub fn take_reply(&self, seq: u64) -> Option<FlowReply> {
        if self.answered.load(Ordering::Acquire) < seq {
            return None;
        }
        let mut slot = self.reply.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|r| r.seq == seq) {
            slot.take()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_shared::proto::FlowOp;

    fn req(seq: u64) -> FlowRequest {
        FlowRequest { seq, op: FlowOp::Count, slots: None }
    }

    /// The control side gave up on request 1 while the worker was still running it, and
    /// posted request 2: the late worker's reply to 1 must neither answer 2 nor swallow it.
    #[test]
    fn a_late_reply_does_not_swallow_the_next_request() {
        let mb = Mailbox::default();
        mb.post(req(1));
        // The worker picks request 1 up; while it runs, the control side times out and
        // posts request 2.
        mb.serve(|r| {
            assert_eq!(r.seq, 1);
            mb.post(req(2));
            FlowReply { count: 11, ..FlowReply::default() }
        });
        assert!(mb.take_reply(2).is_none(), "the reply to 1 is not the reply to 2");
        // Next poll iteration: request 2 is still waiting and gets served.
        let mut served = Vec::new();
        mb.serve(|r| {
            served.push(r.seq);
            FlowReply { count: 22, ..FlowReply::default() }
        });
        assert_eq!(served, [2]);
        assert_eq!(mb.take_reply(2).map(|r| (r.seq, r.count)), Some((2, 22)));
        // Nothing more to do, and the reply is taken once.
        mb.serve(|_| panic!("no request waits"));
        assert!(mb.take_reply(2).is_none());
    }
}
