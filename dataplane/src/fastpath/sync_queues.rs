//! The queues between the workers and the `sync` thread (fleet flow-state sync, docs/bgp.md
//! "Flow-state sync"): what a worker tells the thread ([`SyncOut`], [`DumpItem`]), what the
//! thread hands a worker ([`SyncIn`]), and the per-worker counters. Defined on the packet
//! side, below both users: the worker's side is [`crate::fastpath::worker`] (its `sync.rs`)
//! and the thread is [`crate::sync`], which re-exports these.
//!
//! Workers and the `sync` thread share only the bounded lock-free queues of
//! [`SyncQueues`] (crossbeam `ArrayQueue`): a worker never waits, locks or makes a syscall
//! for sync; a full queue is counted (`outbound_queue_full`, `inbound_queue_full`) and the
//! record is dropped (the next refresh sends it again).

use crossbeam_queue::ArrayQueue;
use spillway_shared::sync::Record;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Places in each worker's outbound and inbound queue (~80-byte records: ~5 MiB per worker
/// and direction). At 100,000 new connections per second per worker the `sync` thread,
/// which drains every millisecond, needs ~100 places.
pub const QUEUE_CAPACITY: usize = 65_536;

/// Places in each worker's dump queue: a few hundred dump messages' worth, refilled as
/// the `sync` thread sends them.
pub const DUMP_QUEUE_CAPACITY: usize = 8_192;

/// Inbound records a worker installs per poll iteration at most (bounded work between
/// two receive bursts).
pub const INSTALL_PER_POLL: usize = 256;

/// Buckets the refresh walk visits per poll iteration at most (two cache lines each).
pub const WALK_MAX_PER_POLL: usize = 256;

/// Removals of flushed entries a worker queues per poll iteration at most (`flows flush`
/// of more entries than the outbound queue holds is queued over several polls, none lost).
pub const REMOVALS_PER_POLL: usize = 1_024;

/// A connection record a worker tells the `sync` thread about, its endpoint resolved by
/// the worker from the snapshot it used (so a record of an endpoint removed meanwhile still
/// names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncOut {
    /// The record as it goes on the wire (its lifetime as of `at_ms`).
    pub rec: Record,
    /// Worker clock when the record was made, ms (the `sync` thread takes the time it
    /// waited off the lifetime).
    pub at_ms: u32,
}

/// What a worker's dump pass queues ([`SyncQueues::dump`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpItem {
    /// An entry of the pass.
    Entry(SyncOut),
    /// This worker's pass of `epoch` is over: every entry of it is ahead in the queue.
    End {
        /// The dump epoch ([`SyncQueues::dump_epoch`]).
        epoch: u64,
    },
}

/// A peer's record the `sync` thread hands to the worker that owns the flow, resolved to
/// this host's service index and endpoint slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncIn {
    /// The record as received.
    pub rec: Record,
    /// Endpoint slot in this host's snapshot.
    pub backend: u16,
    /// Its incarnation.
    pub incarnation: u16,
    /// Service index in this host's snapshot.
    pub service: u16,
    /// The service's number here (`ServiceSnap::id`): the worker keys the entry by it.
    pub number: u16,
}

/// One worker's sync counters (written by that worker only, relaxed load + store; summed
/// on read like every worker counter).
#[derive(Debug, Default)]
pub struct WorkerSyncCounters {
    /// Records queued for the `sync` thread.
    pub queued: AtomicU64,
    /// Records dropped because the outbound queue was full.
    pub queue_full: AtomicU64,
    /// Peers' entries installed.
    pub installed: AtomicU64,
    /// Peers' entries that replaced an older copy.
    pub updated: AtomicU64,
    /// Peers' entries refused: this host has a live entry of its own for the key.
    pub conflicts: AtomicU64,
    /// Peers' entries refused: no room without evicting an established entry.
    pub no_room: AtomicU64,
    /// Flows that arrived here and found a peer's entry (kept their backend through sync).
    pub adopted: AtomicU64,
    /// Peers' entries removed on their request.
    pub removed: AtomicU64,
    /// Peers' relayed copies not installed over a copy from the connection's own host.
    pub older: AtomicU64,
    /// Records not sent: the endpoint slot no longer holds the endpoint the entry names.
    pub stale_slot: AtomicU64,
}

/// The queues and flags shared by the workers and the `sync` thread.
#[derive(Debug)]
pub struct SyncQueues {
    /// Per worker: records due to every peer (confirmations, closes, flushes, refreshes).
    pub out: Vec<ArrayQueue<SyncOut>>,
    /// Per worker: the entries of a dump pass, for the dump's requesters, and the pass's
    /// end marker. Apart from `out` so that a dump, paced by the `sync` thread, never holds
    /// up the records every peer needs; a full queue pauses the pass (nothing is lost).
    pub dump: Vec<ArrayQueue<DumpItem>>,
    /// Per worker: peers' records to install.
    pub inbound: Vec<ArrayQueue<SyncIn>>,
    /// Per worker counters.
    pub counters: Vec<WorkerSyncCounters>,
    /// Refresh interval, ms (the walk covers the table once per interval).
    pub refresh_ms: AtomicU32,
    /// Bumped by the `sync` thread when it starts a dump for starting peers (one pass at a
    /// time): each worker then walks its whole table once, queueing every live confirmed
    /// entry in its dump queue, and ends with a [`DumpItem::End`] marker of the epoch.
    pub dump_epoch: AtomicU64,
}

impl SyncQueues {
    /// Queues for `workers` workers, refreshing every `refresh_ms`.
    pub fn new(workers: usize, refresh_ms: u32) -> SyncQueues {
        SyncQueues {
            out: (0..workers).map(|_| ArrayQueue::new(QUEUE_CAPACITY)).collect(),
            dump: (0..workers).map(|_| ArrayQueue::new(DUMP_QUEUE_CAPACITY)).collect(),
            inbound: (0..workers).map(|_| ArrayQueue::new(QUEUE_CAPACITY)).collect(),
            counters: (0..workers).map(|_| WorkerSyncCounters::default()).collect(),
            refresh_ms: AtomicU32::new(refresh_ms.max(1)),
            dump_epoch: AtomicU64::new(0),
        }
    }

    /// Sums a worker counter over the workers.
    pub fn sum(&self, f: impl Fn(&WorkerSyncCounters) -> &AtomicU64) -> u64 {
        self.counters.iter().map(|c| f(c).load(Relaxed)).sum()
    }
}

/// Bumps a single-writer counter (the worker's own): relaxed load + store, no RMW.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}
