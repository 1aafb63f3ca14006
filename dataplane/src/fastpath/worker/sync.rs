//! The worker's side of fleet flow sync ([`crate::sync`]): records of this worker's
//! confirmed connections go to the `sync` thread through a bounded lock-free queue, and
//! peers' entries come back through another, installed between two receive bursts. A child
//! of [`super`]. Nothing here locks, allocates or makes a syscall; with sync off the packet
//! path pays one well-predicted branch per state change and one per poll iteration.

use super::{Family, Worker};
use crate::control::snapshot::Snapshot;
use crate::fastpath::conntrack::{ConnTable, CtKey, Entry, Hit, State, SyncWalk, Synced, Timeouts};
use crate::sync::{bump, DumpItem, SyncOut, SyncQueues, WorkerSyncCounters, INSTALL_PER_POLL, WALK_MAX_PER_POLL};
use crossbeam_queue::ArrayQueue;
use spillway_shared::flow::FlowAddr;
use spillway_shared::sync::{Op, Record, SyncState};
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;

/// The address as the sync records carry it (IPv4 in the low 32 bits) and its family.
#[inline]
fn wide<A: FlowAddr>(a: A) -> (u128, bool) {
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
/// covers the table once per `refresh_ms`. While a dump pass runs, the walk offers every
/// entry to the dump queue instead, as fast as the `sync` thread takes them (a full dump
/// queue pauses the pass where it is).
#[allow(clippy::too_many_arguments)]
fn walk<A: FlowAddr>(ct: &mut ConnTable<A>, w: &mut SyncWalk, snap: &Snapshot, base: Timeouts, q: (&ArrayQueue<SyncOut>, &ArrayQueue<DumpItem>), c: &WorkerSyncCounters, now: u32, refresh_ms: u32) {
    let (out, dump) = q;
    let elapsed = u64::from(now.wrapping_sub(w.last_ms).min(1_000));
    w.last_ms = now;
    let n_buckets = ct.buckets_len() as u64;
    w.credit = (w.credit + elapsed * n_buckets * 1024 / u64::from(refresh_ms.max(1))).min(n_buckets * 1024);
    let all = w.full_pass_left > 0;
    ct.set_dump_pass_left(w.full_pass_left);
    let budget = if all { WALK_MAX_PER_POLL } else { ((w.credit / 1024) as usize).min(WALK_MAX_PER_POLL) };
    if budget == 0 {
        return;
    }
    let visited = ct.sync_walk(now, budget, refresh_ms, all, &snap.timeouts(base), |e| match entry_record(snap, c, e, Op::Upsert, now) {
        Some(rec) if all => dump.push(DumpItem::Entry(SyncOut { rec, at_ms: now })).is_ok(),
        Some(rec) => offer(out, c, SyncOut { rec, at_ms: now }),
        None => true,
    });
    w.credit = w.credit.saturating_sub(visited as u64 * 1024);
    w.full_pass_left = w.full_pass_left.saturating_sub(visited);
    ct.set_dump_pass_left(w.full_pass_left);
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

    /// Queues a removal for a flushed entry of this host (peers drop their copies).
    pub(super) fn sync_removed<A: FlowAddr>(q: &SyncQueues, id: usize, snap: &Snapshot, e: &Entry<A>, now: u32) {
        if e.is_remote() || e.state() == State::SynOnly {
            return;
        }
        if let (Some(out), Some(c)) = (q.out.get(id), q.counters.get(id)) {
            if let Some(rec) = entry_record(snap, c, e, Op::Remove, now) {
                offer(out, c, SyncOut { rec, at_ms: now });
            }
        }
    }

    /// Once per poll iteration with sync on: install up to [`INSTALL_PER_POLL`] peers'
    /// entries, take one refresh-walk step per table, run a dump pass when the `sync`
    /// thread started one (ending it with a [`DumpItem::End`] marker), and publish the
    /// counters.
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
