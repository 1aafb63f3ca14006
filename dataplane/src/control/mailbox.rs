//! Per-worker control mailboxes: how the control plane asks a worker to count, list or
//! flush entries of its own connection table without sharing it. The worker checks one
//! atomic flag per poll iteration; the mutexes are taken only when a request waits.

use std::sync::atomic::{AtomicBool, Ordering};

/// Most entries one worker lists for a `Show` request (the answer must fit a 1 MiB frame).
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

/// A worker's control mailbox. The worker checks `pending` once per poll iteration (one
/// relaxed-cost atomic load); only when it is set does it take the mutexes, run the
/// request on its own connection table, store the reply and clear `pending`. With no
/// request pending the packet path takes no lock.
#[derive(Debug, Default)]
pub struct Mailbox {
    /// A request is waiting.
    pub pending: AtomicBool,
    /// The request.
    pub request: std::sync::Mutex<Option<FlowRequest>>,
    /// The reply.
    pub reply: std::sync::Mutex<Option<FlowReply>>,
}

impl Mailbox {
    /// Worker side: if a request is pending, runs `f` on it and posts the reply.
    #[inline]
    pub fn serve(&self, f: impl FnOnce(&FlowRequest) -> FlowReply) {
        if !self.pending.load(Ordering::Acquire) {
            return;
        }
        self.serve_slow(f);
    }

    #[cold]
    fn serve_slow(&self, f: impl FnOnce(&FlowRequest) -> FlowReply) {
        let req = self.request.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(req) = req {
            let reply = f(&req);
            *self.reply.lock().unwrap_or_else(|e| e.into_inner()) = Some(reply);
        }
        self.pending.store(false, Ordering::Release);
    }
}
