//! Fleet flow-state sync, the daemon's side (docs/bgp.md "Flow-state sync",
//! docs/decisions.md "Where synced entries live"; the wire protocol is
//! [`spillway_shared::sync`]).
//!
//! ```text
//!  worker i ── SyncOut (confirmations, FIN/RST, refresh walk, flushes) ──► out[i] ─┐
//!                                                                                   │ `sync` thread:
//!  worker i ◄── SyncIn (install / remove) ◄── in[i] ◄── RSS placement ◄─ resolve ◄──┤ batch, HMAC,
//!                                                                                   │ kernel UDP on
//!                                          peers ◄──────── UDP (management) ────────┘ the management
//! ```                                                                                 address
//!
//! Workers and the `sync` thread share only the bounded lock-free queues of
//! [`SyncQueues`] (crossbeam `ArrayQueue`): a worker never waits, locks or makes a syscall
//! for sync; a full queue is counted (`outbound_queue_full`, `inbound_queue_full`) and the
//! record is dropped (the next refresh sends it again).
//!
//! What is sent: every connection entry that is *confirmed* (a packet after the first: a
//! SYN flood or one-datagram UDP flows never reach the peers, which is our
//! `sync_threshold`), when it is confirmed, when it closes (FIN/RST), when it is flushed,
//! and then once per `refresh_interval_sec` while it carries traffic, with the lifetime it
//! has left. Endpoints travel as addresses, never as slot indices.

mod placement;
mod thread;

pub use placement::Placement;
pub use thread::{run, SyncRuntime};

use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

/// Places in each worker's outbound and inbound queue (48-byte records: 3 MiB per worker
/// and direction). At 100,000 new connections per second per worker the `sync` thread,
/// which drains every millisecond, needs ~100 places.
pub const QUEUE_CAPACITY: usize = 65_536;

/// Inbound records a worker installs per poll iteration at most (bounded work between
/// two receive bursts).
pub const INSTALL_PER_POLL: usize = 256;

/// Buckets the refresh walk visits per poll iteration at most (two cache lines each).
pub const WALK_MAX_PER_POLL: usize = 256;

/// A connection entry a worker tells the `sync` thread about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncOut {
    /// Upsert (created, confirmed, closing, refreshed) or remove (flushed).
    pub op: spillway_shared::sync::Op,
    /// IPv6 key.
    pub ipv6: bool,
    /// Tracking key: client address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Tracking key: VIP.
    pub dst: u128,
    /// Tracking key: client port (0 in a session entry).
    pub sport: u16,
    /// Tracking key: VIP port.
    pub dport: u16,
    /// Tracking key: protocol.
    pub proto: u8,
    /// Entry state (established or closing).
    pub closing: bool,
    /// Endpoint slot in the worker's snapshot.
    pub backend: u16,
    /// That slot's incarnation (a removed endpoint's entry is not sent).
    pub incarnation: u16,
    /// Lifetime left, ms.
    pub remaining_ms: u32,
}

/// A peer's entry the `sync` thread hands to the worker that owns the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncIn {
    /// Install (upsert) or remove.
    pub op: spillway_shared::sync::Op,
    /// IPv6 key.
    pub ipv6: bool,
    /// Tracking key: client address.
    pub src: u128,
    /// Tracking key: VIP.
    pub dst: u128,
    /// Tracking key: client port.
    pub sport: u16,
    /// Tracking key: VIP port.
    pub dport: u16,
    /// Tracking key: protocol.
    pub proto: u8,
    /// Closing (else established).
    pub closing: bool,
    /// Endpoint slot in this host's snapshot.
    pub backend: u16,
    /// Its incarnation.
    pub incarnation: u16,
    /// Service index in this host's snapshot.
    pub service: u16,
    /// Lifetime left, ms.
    pub remaining_ms: u32,
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
    /// Dump passes completed (the last requested epoch this worker finished).
    pub dump_done: AtomicU64,
}

/// The queues and flags shared by the workers and the `sync` thread.
#[derive(Debug)]
pub struct SyncQueues {
    /// Per worker: records to send.
    pub out: Vec<ArrayQueue<SyncOut>>,
    /// Per worker: peers' records to install.
    pub inbound: Vec<ArrayQueue<SyncIn>>,
    /// Per worker counters.
    pub counters: Vec<WorkerSyncCounters>,
    /// Refresh interval, ms (the walk covers the table once per interval).
    pub refresh_ms: AtomicU32,
    /// Bumped by the `sync` thread when a peer asks for a dump: each worker then walks its
    /// whole table once, offering every live confirmed entry, and stores the epoch in
    /// [`WorkerSyncCounters::dump_done`].
    pub dump_epoch: AtomicU64,
    /// Sync is configured (workers skip everything otherwise).
    pub enabled: AtomicBool,
}

impl SyncQueues {
    /// Queues for `workers` workers, refreshing every `refresh_ms`.
    pub fn new(workers: usize, refresh_ms: u32) -> SyncQueues {
        SyncQueues {
            out: (0..workers).map(|_| ArrayQueue::new(QUEUE_CAPACITY)).collect(),
            inbound: (0..workers).map(|_| ArrayQueue::new(QUEUE_CAPACITY)).collect(),
            counters: (0..workers).map(|_| WorkerSyncCounters::default()).collect(),
            refresh_ms: AtomicU32::new(refresh_ms.max(1)),
            dump_epoch: AtomicU64::new(0),
            enabled: AtomicBool::new(true),
        }
    }

    /// Sums a worker counter over the workers.
    pub fn sum(&self, f: impl Fn(&WorkerSyncCounters) -> &AtomicU64) -> u64 {
        self.counters.iter().map(|c| f(c).load(Relaxed)).sum()
    }

    /// Whether every worker has finished the dump pass of `epoch`.
    pub fn dump_finished(&self, epoch: u64) -> bool {
        self.counters.iter().all(|c| c.dump_done.load(Relaxed) >= epoch)
    }
}

/// Bumps a single-writer counter (the worker's own): relaxed load + store, no RMW.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}
