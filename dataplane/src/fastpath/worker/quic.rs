//! QUIC-LB routing of short-header (1-RTT) packets, for both families: a UDP datagram to
//! a service with QUIC-LB whose payload starts with a short header (first bit 0, RFC 8999
//! §5.2) goes to the endpoint whose server ID its DCID decodes to
//! (draft-ietf-quic-load-balancers-19 §4.2 step 1), while that endpoint is eligible by
//! the service's rules ([`super::keeps_backend`], as for a tracked connection). Anything
//! else takes the 5-tuple path (connection table, else Maglev), counted by reason.
//!
//! The connection table is neither read nor written for a QUIC-routed packet: it never
//! evicts or rewrites another flow's entry, and a migrated connection needs no state.
//! A child of [`super`]; same packet-path rules (no allocation, syscall or panic).
//!
//! Decoding an encrypted CID costs one AES-128 block (single pass) or three or four
//! dependent ones (four-pass), more than a connection-table hit (`benches/e2e.sh quic`:
//! single pass decoded per packet ran at 0.76 × the UDP 5-tuple rate); a QUIC connection
//! sends many packets with one DCID, so each worker keeps the endpoint slots of the
//! encrypted CIDs it decoded last in a [`CidCache`] and decodes a CID again only when it
//! is not there. Plaintext server IDs are read directly.

use super::v6::Family;
use super::Worker;
use crate::control::quic_lb::{Fallback, QuicLbTable};
use crate::control::snapshot::{ServiceSnap, Snapshot};
use crate::fastpath::stats::bump;
use crate::wire;
pub use crate::fastpath::stats::QuicCounters;
use spillway_shared::quic_lb::{Algorithm, QuicLbConfig};

/// UDP header length (RFC 768).
const UDP_HEADER: usize = 8;

impl Worker {
    /// The endpoint slot for a packet of `svc` by QUIC-LB, or `None` for the 5-tuple path.
    /// `frame[l4..end]` is the UDP datagram (header included) as the IP header bounds it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quic_route<A: Family>(&mut self, frame: &[u8], l4: usize, end: usize, svc: &ServiceSnap, svc_idx: u16, snap: &Snapshot, src: A, now: u32) -> Option<u16> {
        let table = svc.quic_lb.as_deref()?;
        // a source that is never unicast takes the 5-tuple path, where it is dropped as
        // `martian_source` (shared/src/martian.rs)
        if svc.proto != wire::PROTO_UDP || spillway_shared::martian::SourceAddr::never_a_source(src) {
            return None;
        }
        let q = &self.stats.quic;
        let payload = frame.get(l4 + UDP_HEADER..end.min(frame.len())).unwrap_or(&[]);
        let fallback = |f: Fallback| {
            bump(&q.fallback[f as usize], 1);
            None
        };
        let Some((&first, dcid)) = payload.split_first() else {
            return fallback(Fallback::TooShort);
        };
        if first & 0x80 != 0 {
            bump(&q.long_header, 1);
            return None;
        }
        let slot = match self.quic_cache.lookup(table, dcid) {
            Ok(slot) => slot,
            Err(f) => return fallback(f),
        };
        let incarnation = snap.backends.get(usize::from(slot)).map_or(0, |b| b.incarnation);
        if !super::keeps_backend(snap, svc, svc_idx, slot, incarnation, src, now) {
            return fallback(Fallback::NotEligible);
        }
        bump(&q.routed, 1);
        Some(slot)
    }
}

/// Buckets of a [`CidCache`] (a power of two): 1024 × 4 ways × 32 bytes = 128 KiB per
/// worker. Four ways rather than two: replayed in turn, three CIDs of one two-way bucket
/// evict each other on every packet (about 7 % of 1,000 connections missed every time
/// in the `benches/e2e.sh quic` profile, each miss a full decode).
const CID_CACHE_BUCKETS: usize = 1024;
/// Entries of a [`CidCache`] bucket.
const CID_CACHE_WAYS: usize = 4;

/// One cached decode: the CID's first `cid_len` octets (zero-padded to 24) and
/// `table id << 16 | endpoint slot`.
#[derive(Clone, Copy, Default)]
struct CidEntry {
    key: [u64; 3],
    tag: u64,
}

/// Four entries in two 64-byte cache lines (one 128-byte aligned block); way 0 is the most
/// recently inserted.
#[derive(Clone, Copy, Default)]
#[repr(C, align(128))]
struct CidBucket([CidEntry; CID_CACHE_WAYS]);

/// A worker's cache of encrypted (single-pass and four-pass) QUIC-LB decodes (four-way set-associative, keyed by the
/// CID's octets and the [`QuicLbTable::id`] of the table that decoded them): a hit costs a
/// hash and one cache line instead of three or four AES blocks. Only successful lookups
/// are stored, so a CID that falls back is decoded (and counted) every time, as without
/// the cache; an entry is only used with the table that stored it, so a new snapshot (new
/// key, server IDs or endpoints) never gets an old answer. Plaintext CIDs are read
/// directly (a masked load, cheaper than this lookup). Allocated once with its worker.
pub struct CidCache {
    buckets: Box<[CidBucket]>,
}

impl Default for CidCache {
    fn default() -> Self {
        CidCache { buckets: vec![CidBucket::default(); CID_CACHE_BUCKETS].into_boxed_slice() }
    }
}

impl CidCache {
    /// [`QuicLbTable::lookup`]'s endpoint slot for `dcid` (the bytes after the short
    /// header's first octet), from the cache when `table` stored it there (encrypted
    /// CIDs only; a plaintext one is read directly, [`QuicLbTable::slot_with`]: a masked
    /// 16-octet load, no dearer than this cache's probe). Same results and errors as the
    /// table's; no allocation; cannot panic.
    #[inline]
    pub fn lookup(&mut self, table: &QuicLbTable, dcid: &[u8]) -> Result<u16, Fallback> {
        let cfg = table.config_of(dcid)?;
        let id = table.id();
        let Some((key, b)) = cached_key(table, cfg, dcid) else {
            return table.slot_with(cfg, dcid);
        };
        let Some(bucket) = self.buckets.get_mut(b) else {
            return table.slot_with(cfg, dcid);
        };
        for e in &bucket.0 {
            // word by word in registers (an array compare goes through the stack, where a
            // wide load of narrower stores stalls on store forwarding)
            if (e.key[0] ^ key[0]) | (e.key[1] ^ key[1]) | (e.key[2] ^ key[2]) | ((e.tag >> 16) ^ id) == 0 {
                return Ok(e.tag as u16);
            }
        }
        let slot = table.slot_with(cfg, dcid)?;
        bucket.0.copy_within(..CID_CACHE_WAYS - 1, 1);
        bucket.0[0] = CidEntry { key, tag: id << 16 | u64::from(slot) };
        Ok(slot)
    }
}

impl CidCache {
    /// Starts loading the bucket [`lookup`](Self::lookup) will read for `dcid` under
    /// `table` (encrypted CIDs only: plaintext ones are not cached). A hint: it reads
    /// nothing and changes nothing. The bucket is two of the 128 KiB cache's lines, too
    /// many to stay in L1 between a connection's packets; [`super::Worker::poll`]'s
    /// prefetch pass issues it a burst's processing ahead.
    #[inline]
    pub fn prefetch(&self, table: &QuicLbTable, dcid: &[u8]) {
        let Ok(cfg) = table.config_of(dcid) else { return };
        if let Some(bucket) = cached_key(table, cfg, dcid).and_then(|(_, b)| self.buckets.get(b)) {
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let p = bucket as *const CidBucket as *const i8;
                // SAFETY: PREFETCHT0 is a hint: it never faults and has no architectural
                // effect; both lines lie inside this bucket.
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(p);
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = bucket;
        }
    }
}

/// The cache key and bucket index of `dcid` under `cfg` (its codepoint's configuration
/// in `table`), or `None` when it is not cached: plaintext, a `Default` table, or
/// shorter than the CID (the table's lookup says why).
#[inline(always)]
fn cached_key(table: &QuicLbTable, cfg: &QuicLbConfig, dcid: &[u8]) -> Option<([u64; 3], usize)> {
    let len = cfg.cid_len();
    if cfg.algorithm() == Algorithm::Plaintext || table.id() == 0 || dcid.len() < len {
        return None;
    }
    let key = cid_words(dcid, len);
    let h = (key[0] ^ key[1].rotate_left(21) ^ key[2].rotate_left(42)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    Some((key, (h >> (64 - CID_CACHE_BUCKETS.trailing_zeros())) as usize))
}

/// The cache key of a CID: its first `len` (≤ 24) octets as three little-endian words,
/// zero past `len`. Read with whole-word loads and masked (a byte copy into a buffer read
/// back as words would stall on store forwarding); octet by octet only where fewer than
/// eight octets are left in `dcid`.
#[inline(always)]
fn cid_words(dcid: &[u8], len: usize) -> [u64; 3] {
    let mut out = [0u64; 3];
    for (i, w) in out.iter_mut().enumerate() {
        let off = i * 8;
        if off >= len {
            break;
        }
        let n = (len - off).min(8);
        let raw = match dcid.get(off..).and_then(|b| b.first_chunk::<8>()) {
            Some(c) => u64::from_le_bytes(*c),
            None => dcid.get(off..off + n).unwrap_or(&[]).iter().rev().fold(0u64, |a, &b| a << 8 | u64::from(b)),
        };
        *w = if n == 8 { raw } else { raw & ((1u64 << (8 * n)) - 1) };
    }
    out
}
