//! The worker's side of fleet flow sync ([`crate::sync`]): records of this worker's
//! confirmed connections go to the `sync` thread through a bounded lock-free queue, and
//! peers' entries come back through another, installed between two receive bursts. A child
//! of [`super`]. Nothing here locks, allocates or makes a syscall; with sync off the packet
//! path pays one well-predicted branch per state change and one per poll iteration.

use super::{Family, Worker};
use crate::control::snapshot::Snapshot;
use crate::fastpath::conntrack::{ConnTable, CtKey, Entry, Hit, State, SyncWalk, Synced, Timeouts};
use crate::fastpath::sync_queues::{bump, DumpItem, SyncOut, WorkerSyncCounters, INSTALL_PER_POLL, QUEUE_CAPACITY, REMOVALS_PER_POLL, WALK_MAX_PER_POLL};
use crossbeam_queue::ArrayQueue;
use spillway_shared::flow::FlowAddr;
use spillway_shared::sync::{Op, Record, SyncState};
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;

/// The address as the sync records carry it (IPv4 in the low 32 bits) and its family.
#[inline]
pub(super) fn wide<A: FlowAddr>(a: A) -> (u128, bool) {
    match a.ip() {
        IpAddr::V4(v) => (u128::from(u32::from(v)), false),
        IpAddr::V6(v) => (u128::from(v), true),
    }
}

/// The address of the endpoint in slot `backend` if it still holds incarnation
/// `incarnation`, in the slot's own family (it may differ from the key's: IPIP/GUE).
fn endpoint_of(snap: &Snapshot, backend: u16, incarnation: u16) -> Option<IpAddr> {
    let b = snap.backends.get(usize::from(backend)).filter(|b| b.present && b.incarnation == incarnation)?;
    Some(if b.addr6 != 0 { IpAddr::V6(b.addr6.into()) } else { IpAddr::V4(b.addr.into()) })
}

/// What a record says of a connection besides its key.
struct Fields {
    op: Op,
    closing: bool,
    backend: u16,
    incarnation: u16,
    remaining_ms: u32,
    relayed: bool,
}

/// The wire record of `key`, or `None` (counted in `stale_slot`) when the slot no longer
/// holds the endpoint the entry names or the snapshot has no service of the entry's
/// number. Peers get the whole 5-tuple: the service number is this host's, so it is
/// translated to the service's VIP, port and protocol here.
fn record<A: FlowAddr>(snap: &Snapshot, c: &WorkerSyncCounters, key: &CtKey<A>, f: Fields) -> Option<Record> {
    let Fields { op, closing, backend, incarnation, remaining_ms, relayed } = f;
    let (Some(endpoint), Some((_, svc))) = (endpoint_of(snap, backend, incarnation), snap.service_by_number(key.service)) else {
        bump(&c.stale_slot, 1);
        return None;
    };
    let (src, ipv6) = wide(key.src);
    Some(Record {
        op,
        ipv6,
        src,
        dst: if svc.ipv6 { svc.vip6 } else { u128::from(svc.vip) },
        sport: key.sport,
        dport: svc.port,
        proto: svc.proto,
        session: key.sport == 0,
        state: if closing { SyncState::Closing } else { SyncState::Established },
        remaining_ms,
        endpoint,
        relayed,
    })
}

fn entry_record<A: FlowAddr>(snap: &Snapshot, c: &WorkerSyncCounters, e: &Entry<A>, op: Op, now: u32) -> Option<Record> {
    let f = Fields { op, closing: e.state() == State::Closing, backend: e.backend, incarnation: e.incarnation, remaining_ms: e.remaining_ms(now), relayed: e.is_remote() };
    record(snap, c, &e.key(), f)
}

/// Queues `r`, counting a full queue.
#[inline]
fn offer(out: &ArrayQueue<SyncOut>, c: &WorkerSyncCounters, r: SyncOut) -> bool {
    if out.push(r).is_ok() {
        bump(&c.queued, 1);
        true
    } else {
        bump(&c.queue_full, 1);
        false
    }
}

/// One refresh-walk step over `ct` (see [`ConnTable::sync_walk`]), paced so the walk
/// covers the table once per `refresh_ms`, offering active entries to every peer. While a
/// dump pass runs, a pass step follows with its own cursor, offering every entry to the
/// dump queue as fast as the `sync` thread takes them (a full dump queue pauses the pass
/// where it is); the refreshes go on meanwhile (before, a long pass let peers' copies of
/// active UDP flows expire).
#[allow(clippy::too_many_arguments)]
fn walk<A: FlowAddr>(ct: &mut ConnTable<A>, w: &mut SyncWalk, snap: &Snapshot, base: Timeouts, q: (&ArrayQueue<SyncOut>, &ArrayQueue<DumpItem>), c: &WorkerSyncCounters, now: u32, refresh_ms: u32) {
    let (out, dump) = q;
    let elapsed = u64::from(now.wrapping_sub(w.last_ms).min(1_000));
    w.last_ms = now;
    let n_buckets = ct.buckets_len() as u64;
    w.credit = (w.credit + elapsed * n_buckets * 1024 / u64::from(refresh_ms.max(1))).min(n_buckets * 1024);
    let t = snap.timeouts(base);
    let budget = ((w.credit / 1024) as usize).min(WALK_MAX_PER_POLL);
    if budget > 0 {
        let visited = ct.sync_walk(now, budget, refresh_ms, false, &t, |e| match entry_record(snap, c, e, Op::Upsert, now) {
            Some(rec) => offer(out, c, SyncOut { rec, at_ms: now }),
            None => true,
        });
        w.credit = w.credit.saturating_sub(visited as u64 * 1024);
    }
    if w.full_pass_left > 0 {
        ct.set_dump_pass_left(w.full_pass_left);
        let visited = ct.sync_walk(now, WALK_MAX_PER_POLL, refresh_ms, true, &t, |e| match entry_record(snap, c, e, Op::Upsert, now) {
            Some(rec) => dump.push(DumpItem::Entry(SyncOut { rec, at_ms: now })).is_ok(),
            None => true,
        });
        w.full_pass_left = w.full_pass_left.saturating_sub(visited);
        ct.set_dump_pass_left(w.full_pass_left);
    }
}

/// Queues up to [`REMOVALS_PER_POLL`] removals a flush left in `ct` ([`ConnTable::flush`]),
/// while the outbound queue is less than half full: the rest of the queue stays for the
/// confirmations and refreshes of live connections, and the removals wait in the table for
/// the next poll (none is dropped). Each names its endpoint from this poll's snapshot (a
/// slot reused since the flush is counted in `stale_slot`).
fn queue_removals<A: FlowAddr>(ct: &mut ConnTable<A>, snap: &Snapshot, out: &ArrayQueue<SyncOut>, c: &WorkerSyncCounters, now: u32) {
    for _ in 0..REMOVALS_PER_POLL {
        if out.len() >= QUEUE_CAPACITY / 2 {
            return;
        }
        let Some(e) = ct.next_removal() else { return };
        if let Some(rec) = entry_record(snap, c, &e, Op::Remove, now) {
            offer(out, c, SyncOut { rec, at_ms: now });
        }
    }
}

impl Worker {
    /// The entry of `ct_key` changed state on this packet (`hit`): a confirmed or closing
    /// connection is told to the peers. Out of line: once or twice per connection.
    #[cold]
    #[inline(never)]
    pub(super) fn sync_state_change<A: Family>(&mut self, snap: &Snapshot, ct_key: &CtKey<A>, hit: &Hit, t: &Timeouts, now: u32) {
        let Some(q) = self.sync.as_ref() else { return };
        // `t` is the service's (`Timeouts::for_service`): the idle timeout when established
        let remaining_ms = match hit.after {
            State::Established => t.tcp_ms,
            State::Closing => t.closing_ms,
            _ => return,
        };
        let (Some(out), Some(c)) = (q.out.get(self.id), q.counters.get(self.id)) else { return };
        let f = Fields { op: Op::Upsert, closing: hit.after == State::Closing, backend: hit.backend, incarnation: hit.incarnation, remaining_ms, relayed: false };
        if let Some(rec) = record(snap, c, ct_key, f) {
            offer(out, c, SyncOut { rec, at_ms: now });
        }
    }

    /// Once per poll iteration with sync on: install up to [`INSTALL_PER_POLL`] peers'
    /// entries, queue removals a flush left, take one refresh-walk step per table, run a
    /// dump pass when the `sync` thread started one (ending it with a [`DumpItem::End`]
    /// marker), and publish the counters.
    #[inline(never)]
    pub(super) fn sync_poll(&mut self, snap: &Snapshot, now: u32) {
        let Some(q) = self.sync.take() else { return };
        let id = self.id;
        if let (Some(inbound), Some(c)) = (q.inbound.get(id), q.counters.get(id)) {
            for _ in 0..INSTALL_PER_POLL {
                let Some(r) = inbound.pop() else { break };
                let rec = &r.rec;
                let x = Synced {
                    backend: r.backend,
                    incarnation: r.incarnation,
                    state: if rec.state == SyncState::Closing { State::Closing } else { State::Established },
                    remaining_ms: rec.remaining_ms,
                    relayed: rec.relayed,
                };
                let removed = if rec.ipv6 {
                    self.ipv6_seen = true;
                    let k = CtKey { src: rec.src, sport: rec.sport, service: r.number };
                    match rec.op {
                        Op::Upsert => {
                            self.ct6.install(&k, x, now, &snap.timeouts(self.timeouts));
                            false
                        }
                        Op::Remove => self.ct6.remove_synced(&k),
                    }
                } else {
                    let k = CtKey { src: rec.src as u32, sport: rec.sport, service: r.number };
                    match rec.op {
                        Op::Upsert => {
                            self.ct.install(&k, x, now, &snap.timeouts(self.timeouts));
                            false
                        }
                        Op::Remove => self.ct.remove_synced(&k),
                    }
                };
                if removed {
                    bump(&c.removed, 1);
                }
            }
        }
        if let (Some(out), Some(dump), Some(c)) = (q.out.get(id), q.dump.get(id), q.counters.get(id)) {
            let epoch = q.dump_epoch.load(Relaxed);
            if epoch != self.sync_epoch {
                self.sync_epoch = epoch;
                self.sync_pass_end = Some(epoch);
                self.sync_walk.full_pass_left = self.ct.buckets_len();
                self.sync_walk6.full_pass_left = if self.ipv6_seen { self.ct6.buckets_len() } else { 0 };
            }
            queue_removals(&mut self.ct, snap, out, c, now);
            queue_removals(&mut self.ct6, snap, out, c, now);
            let refresh_ms = q.refresh_ms.load(Relaxed);
            walk(&mut self.ct, &mut self.sync_walk, snap, self.timeouts, (out, dump), c, now, refresh_ms);
            if self.ipv6_seen {
                walk(&mut self.ct6, &mut self.sync_walk6, snap, self.timeouts, (out, dump), c, now, refresh_ms);
            }
            if let Some(e) = self.sync_pass_end {
                if self.sync_walk.full_pass_left == 0 && self.sync_walk6.full_pass_left == 0 && dump.push(DumpItem::End { epoch: e }).is_ok() {
                    self.sync_pass_end = None;
                }
            }
            let (a, b) = (&self.ct.counters, &self.ct6.counters);
            c.installed.store(a.sync_installed + b.sync_installed, Relaxed);
            c.updated.store(a.sync_updated + b.sync_updated, Relaxed);
            c.conflicts.store(a.sync_conflicts + b.sync_conflicts, Relaxed);
            c.no_room.store(a.sync_no_room + b.sync_no_room, Relaxed);
            c.adopted.store(a.sync_adopted + b.sync_adopted, Relaxed);
            c.older.store(a.sync_older + b.sync_older, Relaxed);
        }
        self.sync = Some(q);
    }
}

#[cfg(test)]
mod tests {
    use super::super::PortInfo;
    use super::*;
    use crate::control::FlowRequest;
    use crate::fastpath::stats::WorkerStats;
    use crate::fastpath::sync_queues::{SyncQueues, DUMP_QUEUE_CAPACITY};
    use spillway_shared::proto::FlowOp;
    use std::collections::HashSet;
    use std::sync::Arc;

    const ACK: u8 = 0x10;

    /// A worker with sync on (refresh every `refresh_ms`) holding `n` confirmed entries of
    /// its own, last seen at 1 ms, on the one endpoint of service `web`; its queues, its
    /// snapshot and the entries' keys.
    fn worker_with(n: u32, refresh_ms: u32) -> (Worker, Arc<SyncQueues>, Snapshot, Vec<CtKey<u32>>) {
        let s = crate::fastpath::tests::snap(&[("web", 80, "02:00:00:00:0b:01")], 1);
        let (slot, b) = s.backends.iter().enumerate().find(|(_, b)| b.present).unwrap();
        let port = PortInfo { mac: [2, 0, 0, 0, 0, 1], forward_to: 0, addr: 0 };
        let mut w = Worker::new(0, (n as usize * 2).next_power_of_two(), 9, Timeouts::default(), Arc::new(WorkerStats::default()), vec![port]);
        let q = Arc::new(SyncQueues::new(1, refresh_ms));
        w.sync = Some(q.clone());
        let t = Timeouts::default();
        let keys: Vec<CtKey<u32>> = (0..n).map(|i| CtKey { src: 0x0a01_0000 + i, sport: 40_000, service: s.services[0].id }).collect();
        for k in &keys {
            assert!(w.ct.insert(k, slot as u16, b.incarnation, 0, &t));
            assert!(w.ct.lookup(k, ACK, 1, &t).is_some());
        }
        (w, q, s, keys)
    }

    /// A `flows flush` of more entries than the outbound queue holds (65,536)
    /// tells the peers of every one; before, the removals past the queue's room were
    /// dropped (`outbound_queue_full`) and never sent again.
    #[test]
    fn a_flush_larger_than_the_outbound_queue_loses_no_removal() {
        let n = QUEUE_CAPACITY as u32 + 4_464;
        let (mut w, q, s, keys) = worker_with(n, 5_000);
        let req = FlowRequest { seq: 1, op: FlowOp::Flush, slots: None };
        assert_eq!(w.control(&req, &s, 2).count, u64::from(n));
        // the `sync` thread takes what the worker queued, as the worker polls
        let mut removed = HashSet::new();
        for now in 3..1_000 {
            w.sync_poll(&s, now);
            while let Some(o) = q.out[0].pop() {
                assert_eq!(o.rec.op, Op::Remove);
                removed.insert(o.rec.src as u32);
            }
        }
        assert_eq!(q.counters[0].queue_full.load(Relaxed), 0, "no removal dropped");
        assert_eq!(removed.len(), keys.len(), "every flushed connection's removal was sent");
        assert_eq!(w.ct.removals_pending(), 0);
    }

    /// While a dump pass for a starting peer runs (here held by its full dump
    /// queue, as a slow pass over a large table is), active entries are still refreshed to
    /// every peer; the pass, resumed, still sends every entry. Before, a pass stopped every
    /// refresh until it ended.
    #[test]
    fn refreshes_go_on_while_a_dump_pass_runs() {
        let n = 2 * DUMP_QUEUE_CAPACITY as u32;
        let (mut w, q, s, keys) = worker_with(n, 1_000);
        let t = Timeouts::default();
        while q.out[0].pop().is_some() {}
        q.dump_epoch.store(1, Relaxed);
        let mut refreshed = HashSet::new();
        for now in 2..=2_000 {
            if now % 250 == 0 {
                // the connections carry traffic
                for k in &keys {
                    w.ct.lookup(k, ACK, now, &t);
                }
            }
            w.sync_poll(&s, now);
            while let Some(o) = q.out[0].pop() {
                refreshed.insert(o.rec.src as u32);
            }
        }
        assert_eq!(q.dump[0].len(), DUMP_QUEUE_CAPACITY, "the pass is held by its full queue");
        assert!(w.sync_walk.full_pass_left > 0, "the pass is still running");
        assert_eq!(refreshed.len(), keys.len(), "every active connection refreshed to every peer during the pass");
        // the pass resumes as its queue is emptied, and misses nothing
        let mut dumped = HashSet::new();
        let mut ended = false;
        for now in 2_001..4_000 {
            w.sync_poll(&s, now);
            while let Some(item) = q.dump[0].pop() {
                match item {
                    DumpItem::Entry(o) => {
                        dumped.insert(o.rec.src as u32);
                    }
                    DumpItem::End { epoch } => ended = epoch == 1,
                }
            }
            if ended {
                break;
            }
        }
        assert!(ended, "the pass ended");
        assert_eq!(dumped.len(), keys.len(), "the pass sent every entry");
    }
}
