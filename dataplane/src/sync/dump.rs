//! The dumps a host owes its starting peers (a child of [`super`], used by the `sync`
//! thread): one pass at a time over every worker's table, its requesters, those waiting
//! for the next pass and those served recently (docs/bgp.md "Flow-state sync", start-up).

use super::SyncQueues;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// A requester of a dump: its address and its sender id (a requester that restarted is
/// a new one, even at the same address).
pub(super) type Requester = (SocketAddr, u64);

/// One dump pass being sent: its epoch, its requesters, the workers whose end marker has
/// been popped, when it started.
pub(super) struct Pass {
    pub(super) epoch: u64,
    pub(super) to: Vec<Requester>,
    pub(super) ended: Vec<bool>,
    pub(super) started: Instant,
}

/// A pass that takes longer than this is given up (a worker that stopped polling would
/// hold every later dump): its requesters time out and announce without it.
pub(super) const PASS_TIMEOUT: Duration = Duration::from_secs(120);
/// A request from a requester served this recently is its late retry, not a new one.
const SERVED_MEMORY: Duration = Duration::from_secs(5);

/// The dumps this host owes: the pass being sent, the requesters waiting for the next,
/// and those served recently.
#[derive(Default)]
pub(super) struct Dumps {
    pub(super) current: Option<Pass>,
    pub(super) waiting: Vec<Requester>,
    pub(super) served: Vec<(Requester, Instant)>,
}

impl Dumps {
    /// A peer asks for a dump: nothing if it is a requester of the current pass, waiting,
    /// or just served (a retry); else it waits for the next pass.
    pub(super) fn request(&mut self, who: Requester) {
        self.served.retain(|(_, t)| t.elapsed() < SERVED_MEMORY);
        let known = self.current.as_ref().is_some_and(|p| p.to.contains(&who)) || self.waiting.contains(&who) || self.served.iter().any(|(r, _)| *r == who);
        if !known {
            self.waiting.push(who);
        }
    }

    /// Starts the next pass if none runs and someone waits.
    pub(super) fn start(&mut self, q: &SyncQueues) {
        if self.current.is_none() && !self.waiting.is_empty() {
            let epoch = q.dump_epoch.load(Relaxed) + 1;
            self.current = Some(Pass { epoch, to: std::mem::take(&mut self.waiting), ended: vec![false; q.dump.len()], started: Instant::now() });
            q.dump_epoch.store(epoch, Relaxed);
            tracing::info!(epoch, "flow-state dump pass started");
        }
    }

    /// The addresses of the current pass's requesters.
    pub(super) fn to(&self) -> Vec<SocketAddr> {
        self.current.as_ref().map(|p| p.to.iter().map(|r| r.0).collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(port: u16, sender: u64) -> Requester {
        (SocketAddr::from(([10, 0, 0, 1], port)), sender)
    }

    /// One pass at a time; a retry changes nothing; a requester that restarted (new
    /// sender id at the same address) is served by the next pass; a late retry of one just
    /// served starts no pass.
    #[test]
    fn dump_requests_are_deduplicated_by_address_and_sender() {
        let q = SyncQueues::new(2, 5_000);
        let mut d = Dumps::default();
        d.request(who(1, 7));
        d.start(&q);
        assert_eq!(q.dump_epoch.load(Relaxed), 1);
        d.request(who(1, 7));
        d.request(who(2, 8));
        d.request(who(1, 9));
        assert_eq!(d.waiting, vec![who(2, 8), who(1, 9)], "the retry is not queued; the restarted requester is");
        d.start(&q);
        assert_eq!(q.dump_epoch.load(Relaxed), 1, "one pass at a time");
        let p = d.current.take().unwrap();
        d.served.extend(p.to.into_iter().map(|r| (r, Instant::now())));
        d.request(who(1, 7));
        assert_eq!(d.waiting.len(), 2, "a late retry of a served requester");
        d.start(&q);
        assert_eq!((q.dump_epoch.load(Relaxed), d.to().len()), (2, 2));
    }
}
