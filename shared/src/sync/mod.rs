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
//! # Message layout (version 2, all integers big-endian)
//!
//! ```text
//!  0  magic "SPWS"                     4
//!  4  version = 2                      1
//!  5  kind (1 records, 2 dump request, 3 dump end)
//!  6  record count                     2   (0 for requests and ends; at most MAX_RECORDS)
//!  8  sender id                        8   (random per daemon start)
//! 16  sequence number                  8   (per recipient; starts at the sender's wall clock in µs)
//! 24  sent at, Unix ms                 8
//! 32  routing-config digest            8   (drift detection, [`routing_digest`])
//! 40  sender address                  16   (its `sync.listen`; IPv4 in the last 4)
//! 56  recipient address               16   (the `sync.peers` entry it was sent to)
//! 72  sender port   2     74  recipient port   2
//! 76  address family (4, 6)   1      77..80 zero
//! 80  request                          8   (DumpEnd: the sender id of the requester it
//!                                           answers; 0 for every other kind)
//! 88  records, RECORD_LEN bytes each
//!  …  HMAC-SHA-256 tag over everything before it (RFC 2104, FIPS 180-4)   32
//! ```
//!
//! Version 2 added the addresses and the request (a copy of a message to one peer,
//! relayed to another, was taken there); a version-1 peer's messages are refused as
//! `version` (and a version-1 host refuses ours as malformed): a fleet upgrades from 1 to 2
//! with sync off between hosts of different versions during the roll.
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
//! 1. length, magic, kind, count and addresses agree (`malformed`); another version is
//!    `version` (a peer not upgraded yet);
//! 2. the tag verifies under the fleet key, in constant time (`bad_tag`: forged or wrong key);
//! 3. the sender is not this host (`own`);
//! 4. the datagram's source is one of `sync.peers` (`unknown_peer`), and is the sender
//!    address the message names (`wrong_source`): a sender id is tied to its address, so a
//!    copy re-sent from another peer's address is never taken as that peer's;
//! 5. the recipient it names is this host's `sync.listen` (`wrong_recipient`): a copy of a
//!    message to another peer, relayed here, is refused whatever its source;
//! 6. it was sent at most `max_message_age_sec` ago and not more than that in the future
//!    (`stale`);
//! 7. a DumpEnd names this run of this host as its requester (`other_request`: the end of
//!    a pass asked for by this host's previous run, which restarted since);
//! 8. its sequence number was not seen from that sender: a 64-message window above the
//!    highest seen, as the IPsec anti-replay window of RFC 4303 §3.4.3 (`replayed`);
//! 9. every record is well formed (a bad one is skipped and counted as `bad_record`; the
//!    others of the message are taken).
//!
//! Rules 1–7 change no state: a refused message moves no replay window. So a message is
//! accepted at most once (rule 8), by the host it was sent to (rule 5), from the address of
//! the host that sent it (rule 4), and a relay or replay from anywhere else silences no peer.
//!
//! Nothing here does I/O or reads a clock: callers pass the time.


use hmac::{Hmac, Mac};

use sha2::Sha256;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Magic at the start of every message.
pub const MAGIC: [u8; 4] = *b"SPWS";
/// Protocol version (2: sender and recipient addresses and the request in the header).
pub const VERSION: u8 = 2;
/// Header length, bytes.
pub const HEADER_LEN: usize = 88;
/// Record length, bytes.
pub const RECORD_LEN: usize = 64;
/// Tag length (HMAC-SHA-256), bytes.
pub const TAG_LEN: usize = 32;
/// Most records in one message: keeps a message (1,400 bytes) under a 1,500-byte MTU with
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
    /// The sender's address (its `sync.listen`, the source of its datagrams).
    pub from: SocketAddr,
    /// The recipient's address (the `sync.peers` entry the message was sent to).
    pub to: SocketAddr,
    /// DumpEnd: the sender id of the requester whose dump it ends; 0 for other kinds.
    pub request: u64,
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
    /// Wrong length, magic, kind, count or address fields.
    Malformed,
    /// Another protocol version (a peer not upgraded yet, or one already upgraded): its
    /// layout is not ours, so nothing of it is read.
    Version,
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
    /// From a peer's address, but the message names another sender address: a copy
    /// re-sent from an address that did not send it.
    WrongSource,
    /// Addressed to another host (a copy of a message to another peer, relayed here).
    WrongRecipient,
    /// A DumpEnd that answers another requester (this host's previous run).
    OtherRequest,
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

/// The address of `a`'s family from its 16 wire bytes, or `None` for an IPv4 one with bits
/// above its 32.
fn u128_to_ip(a: u128, v6: bool) -> Option<IpAddr> {
    if v6 {
        Some(IpAddr::V6(Ipv6Addr::from(a)))
    } else {
        u32::try_from(a).ok().map(|v| IpAddr::V4(Ipv4Addr::from(v)))
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
    out[40..56].copy_from_slice(&ip_to_u128(h.from.ip()).to_be_bytes());
    out[56..72].copy_from_slice(&ip_to_u128(h.to.ip()).to_be_bytes());
    out[72..74].copy_from_slice(&h.from.port().to_be_bytes());
    out[74..76].copy_from_slice(&h.to.port().to_be_bytes());
    out[76] = if h.from.is_ipv6() { 6 } else { 4 };
    out[80..88].copy_from_slice(&h.request.to_be_bytes());
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

/// The version byte of a datagram that starts with [`MAGIC`] (whatever its length), to
/// name a peer on another version in the log; `None` for anything else.
pub fn version_of(buf: &[u8]) -> Option<u8> {
    (buf.get(0..4) == Some(&MAGIC[..])).then(|| buf.get(4).copied()).flatten()
}

/// Checks a message's framing and tag and returns its header (rules 1 and 2 of the module
/// docs). Never panics on any input.
pub fn verify(buf: &[u8], key: &SyncKey) -> Result<Header, Reject> {
    if version_of(buf).is_some_and(|v| v != VERSION) {
        return Err(Reject::Version);
    }
    if buf.len() < HEADER_LEN + TAG_LEN || buf.len() > MAX_MESSAGE_LEN || buf[0..4] != MAGIC {
        return Err(Reject::Malformed);
    }
    let v6 = match buf[76] {
        4 => false,
        6 => true,
        _ => return Err(Reject::Malformed),
    };
    let (Some(from), Some(to)) = (u128_to_ip(be128(&buf[40..56]), v6), u128_to_ip(be128(&buf[56..72]), v6)) else {
        return Err(Reject::Malformed);
    };
    if buf[77..80] != [0, 0, 0] {
        return Err(Reject::Malformed);
    }
    let kind = match buf[5] {
        1 => Kind::Records,
        2 => Kind::DumpRequest,
        3 => Kind::DumpEnd,
        _ => return Err(Reject::Malformed),
    };
    let count = usize::from(be16(buf, 6));
    if count > MAX_RECORDS || buf.len() != HEADER_LEN + count * RECORD_LEN + TAG_LEN || (kind != Kind::Records && count != 0) || (kind != Kind::DumpEnd && be64(buf, 80) != 0) {
        return Err(Reject::Malformed);
    }
    let (body, tag) = buf.split_at(buf.len() - TAG_LEN);
    let mut mac = key.mac();
    mac.update(body);
    // Constant-time comparison (hmac's verify_slice).
    mac.verify_slice(tag).map_err(|_| Reject::BadTag)?;
    Ok(Header {
        kind,
        sender: be64(buf, 8),
        seq: be64(buf, 16),
        sent_ms: be64(buf, 24),
        digest: be64(buf, 32),
        from: SocketAddr::new(from, be16(buf, 72)),
        to: SocketAddr::new(to, be16(buf, 74)),
        request: be64(buf, 80),
    })
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

mod peers;
mod status;
pub use peers::{Outgoing, Receiver, Sender};
pub use status::{SyncPeerStatus, SyncStatus};

#[cfg(test)]
mod tests;
