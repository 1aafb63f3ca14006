//! Fleet flow-state sync: the `[sync]` config section and the sans-IO wire protocol that
//! Spillway hosts use to share their connection entries (docs/bgp.md "Flow-state sync",
//! docs/decisions.md "Where synced entries live").
//!
//! Why: Maglev alone keeps a flow that ECMP moves to another host on its backend only while
//! the backend set is unchanged since the flow began (NSDI 2016 §3.4 moves ~1/N of keys for
//! a change of one of N backends). Hosts therefore tell each other which backend each
//! confirmed connection uses, and a host that receives a moved flow finds it in its table
//! before any Maglev pick.
//!
//! # Message layout (version 1, all integers big-endian)
//!
//! ```text
//!  0  magic "SPWS"                     4
//!  4  version = 1                      1
//!  5  kind (1 records, 2 dump request, 3 dump end)
//!  6  record count                     2   (0 for requests and ends; at most MAX_RECORDS)
//!  8  sender id                        8   (random per daemon start)
//! 16  sequence number                  8   (starts at the sender's wall clock in µs)
//! 24  sent at, Unix ms                 8
//! 32  routing-config digest            8   (drift detection, [`routing_digest`])
//! 40  records, RECORD_LEN bytes each
//!  …  HMAC-SHA-256 tag over everything before it (RFC 2104, FIPS 180-4)   32
//! ```
//!
//! A record:
//!
//! ```text
//!  0 op (1 upsert, 2 remove)   1 family (4, 6)   2 protocol   3 state (2 established, 3 closing)
//!  4 client port  6 VIP port (the tracking key's ports: 0 for a session entry's client port)
//!  8 remaining lifetime, ms (u32)   12 flags: bit 0 session entry, bit 1 IPv6 endpoint,
//!    bit 2 relayed (the sender holds it as another host's copy)   13..16 zero
//! 16 client address (16 bytes; IPv4 in the last 4)   32 VIP (16)
//! 48 endpoint address (16; its family is flag bit 1, which may differ from the key's:
//!    an IPv4 service with IPv6 endpoints over IPIP/GUE)
//! ```
//!
//! # Acceptance rules (in order; every refusal is counted by its [`Reject`] reason)
//! 1. length, magic, version, kind and count agree (`malformed`);
//! 2. the tag verifies under the fleet key, in constant time (`bad_tag`: forged or wrong key);
//! 3. the sender is not this host (`own`);
//! 4. it was sent at most `max_message_age_sec` ago and not more than that in the future
//!    (`stale`);
//! 5. its sequence number was not seen from that sender: a 64-message window above the
//!    highest seen, as the IPsec anti-replay window of RFC 4303 §3.4.3 (`replayed`);
//! 6. every record is well formed (a bad one is skipped and counted as `bad_record`; the
//!    others of the message are taken).
//!
//! Nothing here does I/O or reads a clock: callers pass the time.


use hmac::{Hmac, Mac};

use sha2::Sha256;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Magic at the start of every message.
pub const MAGIC: [u8; 4] = *b"SPWS";
/// Protocol version.
pub const VERSION: u8 = 1;
/// Header length, bytes.
pub const HEADER_LEN: usize = 40;
/// Record length, bytes.
pub const RECORD_LEN: usize = 64;
/// Tag length (HMAC-SHA-256), bytes.
pub const TAG_LEN: usize = 32;
/// Most records in one message: keeps a message (1,352 bytes) under a 1,500-byte MTU with
/// IPv6 and UDP headers, so it is never fragmented.
pub const MAX_RECORDS: usize = 20;
/// Longest valid message, bytes.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + MAX_RECORDS * RECORD_LEN + TAG_LEN;
/// Shortest key accepted from the key file, bytes (128 bits, RFC 2104 §3: at least the
/// hash output's half).
pub const MIN_KEY_LEN: usize = 16;
/// Width of the anti-replay window, messages.
pub const REPLAY_WINDOW: u64 = 64;
/// Largest gap in a sender's numbering counted as lost messages; a larger jump (which a
/// key holder could send) counts as none.
pub const MAX_COUNTED_GAP: u64 = 1 << 16;
/// Senders whose replay windows are kept (a restarted peer is a new sender); the
/// least recently heard is forgotten first.
pub const MAX_SENDERS: usize = 256;

/// What a message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Connection entries created, refreshed or ended.
    Records = 1,
    /// "Send me every entry you hold" (a starting host).
    DumpRequest = 2,
    /// "Every entry of the dump you asked for has been sent."
    DumpEnd = 3,
}

/// The header of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message kind.
    pub kind: Kind,
    /// Sender id (random per daemon start).
    pub sender: u64,
    /// Sequence number, strictly increasing per sender.
    pub seq: u64,
    /// Send time, Unix ms (sender's clock).
    pub sent_ms: u64,
    /// The sender's [`routing_digest`].
    pub digest: u64,
}

/// Operation of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Install or refresh this entry.
    Upsert = 1,
    /// The connection ended (flushed): remove a synced copy.
    Remove = 2,
}

/// State of a synced entry (only confirmed connections are synced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SyncState {
    /// Traffic beyond the first packet was seen.
    Established = 2,
    /// FIN or RST seen.
    Closing = 3,
}

/// One connection entry as sent between hosts. Addresses are IPv4 or IPv6 by `ipv6`;
/// the endpoint is identified by its address (stable across hosts and edits, never a slot
/// index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Upsert or remove.
    pub op: Op,
    /// IPv6 key and endpoint (else IPv4).
    pub ipv6: bool,
    /// Tracking key: client address (host-order integer; IPv4 in the low 32 bits).
    pub src: u128,
    /// Tracking key: VIP.
    pub dst: u128,
    /// Tracking key: client port (0 in a session entry).
    pub sport: u16,
    /// Tracking key: VIP port.
    pub dport: u16,
    /// Tracking key: IP protocol (6 TCP, 17 UDP).
    pub proto: u8,
    /// A session-affinity entry (`PER_SESSION` tracking with a reduced affinity).
    pub session: bool,
    /// Entry state.
    pub state: SyncState,
    /// Lifetime left if no packet arrives, ms.
    pub remaining_ms: u32,
    /// Address of the endpoint the connection uses (of either family).
    pub endpoint: IpAddr,
    /// The sender holds the entry as another host's copy (a dump relays those): such a
    /// record never replaces a copy that came from the connection's own host.
    pub relayed: bool,
}

/// Why a message (or record) was refused. The names are the metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::EnumIter, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Reject {
    /// Wrong length, magic, version, kind or count.
    Malformed,
    /// The tag does not verify (forged, corrupted, or another key).
    BadTag,
    /// Sent by this host (a loop in the peer list).
    Own,
    /// Sent longer ago than `max_message_age_sec` (or that far in the future).
    Stale,
    /// A sequence number already seen, or below the window.
    Replayed,
    /// From an address that is not one of `sync.peers` (checked after the tag).
    UnknownPeer,
}

/// The fleet key (from `sync.key_file`).
#[derive(Clone)]
pub struct SyncKey(Vec<u8>);

impl std::fmt::Debug for SyncKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SyncKey({} bytes)", self.0.len())
    }
}

impl SyncKey {
    /// The key from the key file's contents: its bytes without surrounding ASCII
    /// whitespace (so `openssl rand -hex 32 > key` works). Errors below [`MIN_KEY_LEN`].
    pub fn from_file_contents(bytes: &[u8]) -> Result<SyncKey, String> {
        let t = bytes.trim_ascii();
        if t.len() < MIN_KEY_LEN {
            return Err(format!("the key has {} bytes: at least {MIN_KEY_LEN} are needed (e.g. `openssl rand -hex 32`)", t.len()));
        }
        Ok(SyncKey(t.to_vec()))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length (RFC 2104 §2): this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
    }
}

fn put_addr(out: &mut [u8], ipv6: bool, a: u128) {
    let bytes = if ipv6 { a.to_be_bytes() } else { (a & 0xffff_ffff).to_be_bytes() };
    out.copy_from_slice(&bytes);
}

fn ip_to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

/// Encodes one message. `records` beyond [`MAX_RECORDS`] are not sent (callers batch).
pub fn encode(h: &Header, records: &[Record], key: &SyncKey) -> Vec<u8> {
    let records = &records[..records.len().min(MAX_RECORDS)];
    let mut out = vec![0u8; HEADER_LEN + records.len() * RECORD_LEN];
    out[0..4].copy_from_slice(&MAGIC);
    out[4] = VERSION;
    out[5] = h.kind as u8;
    out[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
    out[8..16].copy_from_slice(&h.sender.to_be_bytes());
    out[16..24].copy_from_slice(&h.seq.to_be_bytes());
    out[24..32].copy_from_slice(&h.sent_ms.to_be_bytes());
    out[32..40].copy_from_slice(&h.digest.to_be_bytes());
    for (i, r) in records.iter().enumerate() {
        let o = &mut out[HEADER_LEN + i * RECORD_LEN..HEADER_LEN + (i + 1) * RECORD_LEN];
        o[0] = r.op as u8;
        o[1] = if r.ipv6 { 6 } else { 4 };
        o[2] = r.proto;
        o[3] = r.state as u8;
        o[4..6].copy_from_slice(&r.sport.to_be_bytes());
        o[6..8].copy_from_slice(&r.dport.to_be_bytes());
        o[8..12].copy_from_slice(&r.remaining_ms.to_be_bytes());
        o[12] = u8::from(r.session) | u8::from(r.endpoint.is_ipv6()) << 1 | u8::from(r.relayed) << 2;
        put_addr(&mut o[16..32], r.ipv6, r.src);
        put_addr(&mut o[32..48], r.ipv6, r.dst);
        put_addr(&mut o[48..64], r.endpoint.is_ipv6(), ip_to_u128(r.endpoint));
    }
    let mut mac = key.mac();
    mac.update(&out);
    out.extend_from_slice(&mac.finalize().into_bytes());
    out
}

fn be16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2).map_or(0, |s| u16::from_be_bytes([s[0], s[1]]))
}
fn be32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}
fn be64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).and_then(|s| <[u8; 8]>::try_from(s).ok()).map_or(0, u64::from_be_bytes)
}
fn be128(b: &[u8]) -> u128 {
    <[u8; 16]>::try_from(b).map_or(0, u128::from_be_bytes)
}

/// Checks a message's framing and tag and returns its header (rules 1 and 2 of the module
/// docs). Never panics on any input.
pub fn verify(buf: &[u8], key: &SyncKey) -> Result<Header, Reject> {
    if buf.len() < HEADER_LEN + TAG_LEN || buf.len() > MAX_MESSAGE_LEN || buf[0..4] != MAGIC || buf[4] != VERSION {
        return Err(Reject::Malformed);
    }
    let kind = match buf[5] {
        1 => Kind::Records,
        2 => Kind::DumpRequest,
        3 => Kind::DumpEnd,
        _ => return Err(Reject::Malformed),
    };
    let count = usize::from(be16(buf, 6));
    if count > MAX_RECORDS || buf.len() != HEADER_LEN + count * RECORD_LEN + TAG_LEN || (kind != Kind::Records && count != 0) {
        return Err(Reject::Malformed);
    }
    let (body, tag) = buf.split_at(buf.len() - TAG_LEN);
    let mut mac = key.mac();
    mac.update(body);
    // Constant-time comparison (hmac's verify_slice).
    mac.verify_slice(tag).map_err(|_| Reject::BadTag)?;
    Ok(Header { kind, sender: be64(buf, 8), seq: be64(buf, 16), sent_ms: be64(buf, 24), digest: be64(buf, 32) })
}

/// Decodes the records of a verified message (rule 6): the well-formed ones, and how many
/// were not (skipped). Never panics on any input; bytes past the buffer are not records.
pub fn records(buf: &[u8]) -> (Vec<Record>, usize) {
    let count = usize::from(be16(buf, 6)).min(MAX_RECORDS);
    let mut out = Vec::with_capacity(count);
    let mut bad = 0;
    for i in 0..count {
        match buf.get(HEADER_LEN + i * RECORD_LEN..HEADER_LEN + (i + 1) * RECORD_LEN).and_then(record) {
            Some(r) => out.push(r),
            None => bad += 1,
        }
    }
    (out, bad)
}

fn record(o: &[u8]) -> Option<Record> {
    let op = match o.first()? {
        1 => Op::Upsert,
        2 => Op::Remove,
        _ => return None,
    };
    let ipv6 = match o.get(1)? {
        4 => false,
        6 => true,
        _ => return None,
    };
    let proto = *o.get(2)?;
    if proto != 6 && proto != 17 {
        return None;
    }
    let state = match o.get(3)? {
        2 => SyncState::Established,
        3 => SyncState::Closing,
        _ => return None,
    };
    let flags = *o.get(12)?;
    if flags > 7 || o.get(13..16)? != [0, 0, 0] {
        return None;
    }
    let (session, ep_v6, relayed) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
    let addr = |r: std::ops::Range<usize>, v6: bool| -> Option<u128> {
        let a = be128(o.get(r)?);
        (v6 || a <= u128::from(u32::MAX)).then_some(a)
    };
    let (src, dst, ep) = (addr(16..32, ipv6)?, addr(32..48, ipv6)?, addr(48..64, ep_v6)?);
    let endpoint = if ep_v6 { IpAddr::V6(Ipv6Addr::from(ep)) } else { IpAddr::V4(Ipv4Addr::from(ep as u32)) };
    let (sport, dport) = (be16(o, 4), be16(o, 6));
    if dst == 0 || src == 0 || ep == 0 || dport == 0 || (!session && sport == 0) {
        return None;
    }
    Some(Record { op, ipv6, src, dst, sport, dport, proto, session, state, remaining_ms: be32(o, 8), endpoint, relayed })
}

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

/// The receiving side's checks of rules 3–5, per sender.
#[derive(Debug)]
pub struct Receiver {
    own: u64,
    max_age_ms: u64,
    not_before_ms: u64,
    windows: std::collections::HashMap<u64, Window>,
}

impl Receiver {
    /// A receiver for the host whose sender id is `own`, refusing messages older than
    /// `max_age_ms`.
    pub fn new(own: u64, max_age_ms: u64) -> Receiver {
        Receiver { own, max_age_ms, not_before_ms: 0, windows: std::collections::HashMap::new() }
    }

    /// Refuses, as stale, messages sent before `start_ms` − 1 s (Unix ms): a receiver that
    /// just started has no replay windows, so without this a capture younger than
    /// `max_message_age_sec` could be replayed to it once.
    pub fn not_before(mut self, start_ms: u64) -> Receiver {
        self.not_before_ms = start_ms.saturating_sub(1_000);
        self
    }

    /// Applies rules 3–5 to a verified header at `now_ms` (Unix ms); on success the
    /// sequence number is recorded, so the same message is refused next time, and the
    /// number of sequence numbers skipped since the sender's highest is returned (messages
    /// lost or still in flight: senders number each peer's messages on their own, so a gap
    /// means loss or reordering).
    pub fn accept(&mut self, h: &Header, now_ms: u64) -> Result<u64, Reject> {
        if h.sender == self.own {
            return Err(Reject::Own);
        }
        if now_ms.abs_diff(h.sent_ms) > self.max_age_ms || h.sent_ms < self.not_before_ms {
            return Err(Reject::Stale);
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

/// A 64-bit digest of the routing-relevant config: every service with its VIP, policy and
/// backends, each backend's endpoints in their one canonical form (a one-address backend is
/// its one endpoint named like it, [`crate::config::Backend::members`]), services and
/// backends in name order. Two hosts whose configs say the same thing, however they were
/// written or edited, have the same digest; peers compare it to report drift.
pub fn routing_digest(cfg: &crate::config::Config) -> u64 {
    use sha2::Digest;
    let mut services: Vec<serde_json::Value> = Vec::new();
    let mut sorted: Vec<&crate::config::Service> = cfg.services.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for s in sorted {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        let mut backends: Vec<&crate::config::Backend> = s.backends.iter().collect();
        backends.sort_by(|a, b| a.name.cmp(&b.name));
        let canon: Vec<serde_json::Value> = backends
            .into_iter()
            .map(|b| {
                let mut bv = serde_json::to_value(b).unwrap_or_default();
                if let Some(o) = bv.as_object_mut() {
                    o.remove("address");
                    o.remove("mac");
                    o.remove("endpoints");
                    let members: Vec<serde_json::Value> = b
                        .members()
                        .into_iter()
                        .map(|m| serde_json::json!([m.name, m.address.to_string(), m.mac.map(|x| x.to_string()), m.weight, m.enabled]))
                        .collect();
                    o.insert("members".into(), serde_json::Value::Array(members));
                }
                bv
            })
            .collect();
        if let Some(o) = v.as_object_mut() {
            o.insert("backends".into(), serde_json::Value::Array(canon));
        }
        services.push(v);
    }
    let text = serde_json::to_string(&services).unwrap_or_default();
    let d = Sha256::digest(text.as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

#[path = "sync_status.rs"]
mod status;
pub use status::{SyncPeerStatus, SyncStatus};

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
