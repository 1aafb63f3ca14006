//! What `spillwayctl status` shows of flow-state sync (a child of [`super`], kept apart
//! from the protocol).

use serde::{Deserialize, Serialize};

/// Flow-state sync as `spillwayctl status` shows it (docs/bgp.md "Flow-state sync").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncStatus {
    /// `[sync]` is configured.
    pub enabled: bool,
    /// Listen address.
    pub listen: String,
    /// This host's sender id (hex).
    pub sender: String,
    /// This host's routing-config digest (hex, [`super::routing_digest`]).
    pub digest: String,
    /// Start-up state: `done`, `waiting for N peer dumps`, `timed out waiting for …`.
    pub startup: String,
    /// Whether the start-up sync is over (VIPs may be announced).
    pub startup_done: bool,
    /// Messages and records sent, bytes sent, send errors.
    pub sent_messages: u64,
    /// Records sent.
    pub sent_records: u64,
    /// Bytes sent (UDP payload).
    pub sent_bytes: u64,
    /// `sendto` failures.
    pub send_errors: u64,
    /// Messages accepted.
    pub received_messages: u64,
    /// Records in accepted messages.
    pub received_records: u64,
    /// Messages refused, by [`super::Reject`] name.
    pub rejected: Vec<(String, u64)>,
    /// Records not installed: no service of this VIP, port and protocol here.
    pub unknown_service: u64,
    /// Records not installed: the service has no endpoint of that address here.
    pub unknown_endpoint: u64,
    /// Records of this host not sent: the endpoint slot no longer held the entry's endpoint.
    pub stale_slot: u64,
    /// Records skipped in accepted messages (bad fields).
    pub bad_records: u64,
    /// Messages of peers' numbering that never arrived (gaps: loss or reordering).
    pub lost_messages: u64,
    /// Peers' relayed copies not installed over a copy from the connection's own host.
    pub older: u64,
    /// Records this host's workers could not queue (outbound queue full).
    pub outbound_queue_full: u64,
    /// Records not handed to a worker (inbound queue full).
    pub inbound_queue_full: u64,
    /// Peers' entries installed, updated, refused for a live local entry, refused for want
    /// of room, removed, and used by a flow that moved here (adopted).
    pub installed: u64,
    /// See `installed`.
    pub updated: u64,
    /// See `installed`.
    pub conflicts: u64,
    /// See `installed`.
    pub no_room: u64,
    /// See `installed`.
    pub removed: u64,
    /// See `installed`.
    pub adopted: u64,
    /// Dumps sent to starting peers.
    pub dumps_sent: u64,
    /// Sync lag of the last accepted record message: receive time − send time, ms.
    pub lag_ms_last: u64,
    /// Largest sync lag seen, ms.
    pub lag_ms_max: u64,
    /// Per configured peer.
    pub peers: Vec<SyncPeerStatus>,
}

/// One peer in [`SyncStatus::peers`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SyncPeerStatus {
    /// `IP:PORT`.
    pub address: String,
    /// Seconds since its last accepted message (`None`: never heard).
    pub last_heard_sec: Option<f64>,
    /// Its routing-config digest (hex), once heard.
    pub digest: Option<String>,
    /// Its digest differs from ours: the configs differ, so Maglev picks may differ.
    pub drift: bool,
    /// Its dump for our start-up was received.
    pub dump_received: bool,
    /// Messages of its numbering that never arrived (a dump with losses is incomplete).
    pub lost_messages: u64,
}

