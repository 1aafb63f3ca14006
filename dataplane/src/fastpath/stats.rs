//! Per-worker counters, written by their one worker and summed on read by the control
//! plane. Each counter is an `AtomicU64` updated with a relaxed load + store (single writer:
//! no locked instruction on the packet path).

use crate::wire::DropReason;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use strum::EnumCount;

/// Why a short-header packet of a QUIC-LB service took the 5-tuple path instead
/// (draft §4.1 "unroutable DCIDs", plus the service's eligibility rules). Names are the
/// counters' (`status`, metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::EnumCount, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
#[repr(u8)]
pub enum Fallback {
    /// The DCID's config rotation codepoint has no configuration here (7 included).
    UnknownCodepoint,
    /// The packet is shorter than the configuration's CID (or has no DCID at all).
    TooShort,
    /// The decoded server ID is no endpoint's.
    UnknownServerId,
    /// The endpoint is not eligible by the service's rules (removed, unhealthy without
    /// persistence, drain deadline passed, connections evicted).
    NotEligible,
}

impl Fallback {
    /// The counter's name (`unknown_codepoint`, ...).
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// Most backend slots over all services (slot ids are `u16`; 65,535 is reserved as empty).
/// Per-worker counters for them take 3 × 8 bytes × this = 1.5 MiB per worker.
pub const MAX_BACKEND_SLOTS: usize = 65_535;

/// A counter per backend slot id, every `u16` included (65,536 counters: the reserved id
/// too), so the packet path indexes it by a slot id without a bounds check.
pub type SlotCounters = Box<[AtomicU64; 1 << 16]>;

/// Adds `n` to a single-writer counter. The store is `Release`, so a reader that sees it
/// (an `Acquire` load) also sees every earlier bump of this worker: the read order of
/// `control::counters` rests on it (a plain `mov` on x86-64, as `Relaxed` is).
#[inline(always)]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), std::sync::atomic::Ordering::Release);
}

/// Counters of one worker.
pub struct WorkerStats {
    /// Frames received, all ports.
    pub rx: AtomicU64,
    /// Frames sent, all ports.
    pub tx: AtomicU64,
    /// Frames forwarded to a backend.
    pub forwarded: AtomicU64,
    /// Of `forwarded`, frames the vector fast path decided (established flows of L2 DSR
    /// services, fastpath/worker/vector.rs); the rest took the general path. Counted per
    /// burst.
    pub fast_path: AtomicU64,
    /// ARP replies sent.
    pub arp_replies: AtomicU64,
    /// ICMP errors forwarded to the backend of the quoted flow.
    pub icmp_forwarded: AtomicU64,
    /// ICMP "fragmentation needed" replies generated (encapsulation modes).
    pub icmp_frag_needed_sent: AtomicU64,
    /// Fragments routed, IPv4 and IPv6 (docs/semantics.md "Fragments": their flow's entry,
    /// their datagram's earlier fragments, else the 3-tuple).
    pub fragments: AtomicU64,
    /// Later IPv4 and IPv6 fragments held until their first fragment arrived or they expired
    /// (docs/semantics.md "Fragments").
    pub fragments_held: AtomicU64,
    /// Packets handed to the worker that owns their flow (ICMP errors quoting it, IPv4
    /// fragments of it: fastpath/worker/redirect.rs); that worker counts what it does with them.
    pub redirected: AtomicU64,
    /// New connections (connection-table misses that selected a backend).
    pub new_connections: AtomicU64,
    /// Connections moved to another backend (unhealthy without persistence, drain cut,
    /// backend removed).
    pub rebalanced: AtomicU64,
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [AtomicU64; DropReason::COUNT],
    /// New connections per backend slot.
    pub backend_new: SlotCounters,
    /// Packets per backend slot.
    pub backend_packets: SlotCounters,
    /// Connection table counters (mirrored each burst).
    pub ct_hits: AtomicU64,
    /// Misses.
    pub ct_misses: AtomicU64,
    /// SYN-only evictions.
    pub ct_evicted_syn_only: AtomicU64,
    /// Closing evictions.
    pub ct_evicted_closing: AtomicU64,
    /// New flows not tracked (both buckets full of established entries).
    pub ct_syn_not_tracked: AtomicU64,
    /// Connection-table entries held, by family and state, mirrored from the tables'
    /// occupancy counters at the end of every poll and after a flush
    /// (`conntrack::Occupancy`): index `family * 3 + state`, family 0 IPv4 / 1 IPv6, state
    /// 0 syn_only / 1 established / 2 closing ([`CT_STATES`]). What `flows count` and
    /// `/metrics` read: no table walk.
    pub ct_entries: [AtomicU64; 6],
    /// Entries moved to their other bucket to make room for a new one (relocation), both
    /// families (mirrored each poll; read by `/metrics` only).
    pub ct_relocated: AtomicU64,
    /// Insertions into two full buckets for which relocation found no room (an eviction
    /// or `syn_not_tracked` follows), both families.
    pub ct_relocation_failed: AtomicU64,
    /// Snapshot generation this worker last used.
    pub generation: AtomicU64,
    /// Poll loop iterations.
    pub polls: AtomicU64,
    /// Polls that received nothing.
    pub idle_polls: AtomicU64,
    /// ARP replies and Neighbor Advertisements handed to the neighbour resolver
    /// ([`crate::neighbor`]).
    pub arp_replies_seen: AtomicU64,
    /// Control frames (ARP requests, gratuitous ARP) sent for the control side.
    pub control_tx: AtomicU64,
    /// Control frames not sent (no mbuf, TX queue full, unknown port).
    pub control_tx_failed: AtomicU64,
    /// Bytes (whole frames as forwarded) per backend slot.
    pub backend_bytes: SlotCounters,
    /// Neighbor Advertisements sent (answers to solicitations for our IPv6 addresses).
    pub nd_advertisements: AtomicU64,
    /// Neighbor Solicitations for addresses that are not ours (dropped as `nd_ignored`).
    pub nd_not_ours: AtomicU64,
    /// QUIC-LB routing and fallbacks (`fastpath/worker/quic.rs`).
    pub quic: QuicCounters,
}

impl Default for WorkerStats {
    fn default() -> Self {
        let slots = || -> SlotCounters { (0..1 << 16).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into_boxed_slice().try_into().expect("65,536 counters") };
        WorkerStats {
            rx: AtomicU64::new(0),
            tx: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            fast_path: AtomicU64::new(0),
            arp_replies: AtomicU64::new(0),
            icmp_forwarded: AtomicU64::new(0),
            icmp_frag_needed_sent: AtomicU64::new(0),
            fragments: AtomicU64::new(0),
            fragments_held: AtomicU64::new(0),
            redirected: AtomicU64::new(0),
            new_connections: AtomicU64::new(0),
            rebalanced: AtomicU64::new(0),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
            backend_new: slots(),
            backend_packets: slots(),
            ct_hits: AtomicU64::new(0),
            ct_misses: AtomicU64::new(0),
            ct_evicted_syn_only: AtomicU64::new(0),
            ct_evicted_closing: AtomicU64::new(0),
            ct_syn_not_tracked: AtomicU64::new(0),
            ct_entries: Default::default(),
            ct_relocated: AtomicU64::new(0),
            ct_relocation_failed: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            idle_polls: AtomicU64::new(0),
            arp_replies_seen: AtomicU64::new(0),
            control_tx: AtomicU64::new(0),
            control_tx_failed: AtomicU64::new(0),
            backend_bytes: slots(),
            nd_advertisements: AtomicU64::new(0),
            nd_not_ours: AtomicU64::new(0),
            quic: Default::default(),
        }
    }
}

/// State names of [`WorkerStats::ct_entries`], in index order within a family.
pub const CT_STATES: [&str; 3] = ["syn_only", "established", "closing"];

/// Family names of [`WorkerStats::ct_entries`], in index order.
pub const CT_FAMILIES: [&str; 2] = ["ipv4", "ipv6"];

/// Connection-table entries held by one worker, both families and all states
/// ([`WorkerStats::ct_entries`]).
pub fn ct_entries(w: &WorkerStats) -> u64 {
    w.ct_entries.iter().map(|n| n.load(Relaxed)).sum()
}

/// QUIC-LB counters of one worker (single writer, summed on read).
#[derive(Default)]
pub struct QuicCounters {
    /// Short-header packets routed by their DCID's server ID.
    pub routed: AtomicU64,
    /// Long-header packets of QUIC-LB services (routed by the 5-tuple, as the draft says).
    pub long_header: AtomicU64,
    /// Short-header packets that took the 5-tuple path, by [`Fallback`] reason.
    pub fallback: [AtomicU64; <Fallback as strum::EnumCount>::COUNT],
}

impl QuicCounters {
    /// `(name, count)` pairs in a fixed order: `routed`, `long_header`, then
    /// `fallback_<reason>` for every `Fallback`.
    pub fn read(&self) -> Vec<(String, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        use strum::IntoEnumIterator;
        let mut out = vec![("routed".to_string(), self.routed.load(Relaxed)), ("long_header".to_string(), self.long_header.load(Relaxed))];
        out.extend(Fallback::iter().map(|f| (format!("fallback_{}", f.name()), self.fallback[f as usize].load(Relaxed))));
        out
    }
}
