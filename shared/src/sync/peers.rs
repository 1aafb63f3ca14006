//! Both ends of the sync protocol between peers (a child of [`super`]): the receiver's
//! acceptance rules 3–8 with its per-sender replay windows, and the sender's numbering
//! per recipient and addressing (module docs of [`super`], "Acceptance rules").

use super::{encode, Header, Kind, Record, Reject, SyncKey, MAX_COUNTED_GAP, MAX_SENDERS, REPLAY_WINDOW};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Per-sender anti-replay state (RFC 4303 §3.4.3's sliding window).
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    highest: u64,
    /// Bit i: `highest - i` was seen.
    bits: u64,
    last_heard: u64,
}

impl Window {
    /// Whether `seq` is new; records it if so.
    fn check_and_set(&mut self, seq: u64) -> bool {
        if self.bits == 0 {
            self.highest = seq;
            self.bits = 1;
            return true;
        }
        if seq > self.highest {
            let shift = seq - self.highest;
            self.bits = if shift >= REPLAY_WINDOW { 1 } else { (self.bits << shift) | 1 };
            self.highest = seq;
            return true;
        }
        let back = self.highest - seq;
        if back >= REPLAY_WINDOW || self.bits & (1 << back) != 0 {
            return false;
        }
        self.bits |= 1 << back;
        true
    }
}

/// The receiving side's checks of rules 3–8, per sender.
#[derive(Debug)]
pub struct Receiver {
    own: u64,
    addr: SocketAddr,
    peers: Vec<SocketAddr>,
    max_age_ms: u64,
    not_before_ms: u64,
    windows: std::collections::HashMap<u64, Window>,
}

impl Receiver {
    /// A receiver for the host whose sender id is `own`, listening on `addr` (its
    /// `sync.listen`), taking messages from `peers` only (`sync.peers` without `addr`),
    /// refusing messages older than `max_age_ms`.
    pub fn new(own: u64, addr: SocketAddr, peers: &[SocketAddr], max_age_ms: u64) -> Receiver {
        Receiver { own, addr, peers: peers.to_vec(), max_age_ms, not_before_ms: 0, windows: std::collections::HashMap::new() }
    }

    /// Refuses, as stale, messages sent before `start_ms` − 1 s (Unix ms): a receiver that
    /// just started has no replay windows, so without this a capture younger than
    /// `max_message_age_sec` could be replayed to it once.
    pub fn not_before(mut self, start_ms: u64) -> Receiver {
        self.not_before_ms = start_ms.saturating_sub(1_000);
        self
    }

    /// Applies rules 3–8 to a verified header that arrived from `from` at `now_ms` (Unix
    /// ms). Every check that can refuse comes before the replay window, so a refused
    /// message changes nothing here. On success the sequence number is recorded, so the
    /// same message is refused next time, and the number of sequence numbers skipped since
    /// the sender's highest is returned (messages lost or still in flight: senders number
    /// each recipient's messages on their own ([`Sender`]), so a gap means loss or
    /// reordering).
    pub fn accept(&mut self, h: &Header, from: SocketAddr, now_ms: u64) -> Result<u64, Reject> {
        if h.sender == self.own {
            return Err(Reject::Own);
        }
        if !self.peers.contains(&from) {
            return Err(Reject::UnknownPeer);
        }
        if h.from != from {
            return Err(Reject::WrongSource);
        }
        if h.to != self.addr {
            return Err(Reject::WrongRecipient);
        }
        if now_ms.abs_diff(h.sent_ms) > self.max_age_ms || h.sent_ms < self.not_before_ms {
            return Err(Reject::Stale);
        }
        if h.kind == Kind::DumpEnd && h.request != self.own {
            return Err(Reject::OtherRequest);
        }
        if !self.windows.contains_key(&h.sender) && self.windows.len() >= MAX_SENDERS {
            if let Some(oldest) = self.windows.iter().min_by_key(|(_, w)| w.last_heard).map(|(k, _)| *k) {
                self.windows.remove(&oldest);
            }
        }
        let w = self.windows.entry(h.sender).or_default();
        // A jump past MAX_COUNTED_GAP is a resynchronisation, not that many losses.
        let gap = if w.bits != 0 && h.seq > w.highest { h.seq - w.highest - 1 } else { 0 };
        let gap = if gap > MAX_COUNTED_GAP { 0 } else { gap };
        if !w.check_and_set(h.seq) {
            return Err(Reject::Replayed);
        }
        w.last_heard = now_ms;
        Ok(gap)
    }

    /// Senders heard from (replay windows kept).
    pub fn senders(&self) -> usize {
        self.windows.len()
    }
}

/// The sending side: this host's sender id and address, and one sequence number per peer
/// (each recipient's messages are numbered on their own, so a gap at a receiver is a lost
/// message). Shared by reference: the numbers are atomics.
#[derive(Debug)]
pub struct Sender {
    id: u64,
    addr: SocketAddr,
    seqs: Vec<(SocketAddr, AtomicU64)>,
}

/// What a message says besides its records ([`Sender::message`]).
#[derive(Clone, Copy, Debug)]
pub struct Outgoing {
    /// Message kind.
    pub kind: Kind,
    /// DumpEnd: the requester's sender id; 0 for other kinds.
    pub request: u64,
    /// Send time, Unix ms.
    pub sent_ms: u64,
    /// This host's [`routing_digest`].
    pub digest: u64,
}

impl Sender {
    /// The sender `id` at `addr` (its `sync.listen`) for `peers`, numbering each peer's
    /// messages from `first_seq` (the daemon uses its start time in µs, so a restarted host
    /// never reuses a number).
    pub fn new(id: u64, addr: SocketAddr, peers: &[SocketAddr], first_seq: u64) -> Sender {
        Sender { id, addr, seqs: peers.iter().map(|p| (*p, AtomicU64::new(first_seq))).collect() }
    }

    /// This host's sender id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The next message to peer `to`, encoded and tagged with `key` (records beyond
    /// [`MAX_RECORDS`] are not sent), naming this host as its sender and `to` as its
    /// recipient; `None` if `to` is not a peer.
    pub fn message(&self, to: SocketAddr, m: Outgoing, records: &[Record], key: &SyncKey) -> Option<Vec<u8>> {
        let (_, n) = self.seqs.iter().find(|(p, _)| *p == to)?;
        let seq = n.fetch_add(1, Relaxed);
        let h = Header { kind: m.kind, sender: self.id, seq, sent_ms: m.sent_ms, digest: m.digest, from: self.addr, to, request: m.request };
        Some(encode(&h, records, key))
    }
}

impl Reject {
    /// What a refusal most likely means, for the operator's log ("" when the reason's name
    /// says it all).
    pub fn hint(self) -> &'static str {
        match self {
            Reject::Version => "another protocol version: upgrade every host of the fleet (hosts of different versions do not sync)",
            Reject::WrongRecipient => "a copy of a message to another host, relayed here",
            Reject::WrongSource => "a peer's message re-sent from another address",
            Reject::UnknownPeer => "from an address that is not in sync.peers",
            Reject::OtherRequest => "the end of a dump this host asked for before it restarted",
            _ => "",
        }
    }
}
