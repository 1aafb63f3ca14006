//! `[sync]`: flow-state sync with the other hosts of a fleet (docs/config.md "[sync]"); the
//! protocol itself is [`crate::sync`].

use super::error::ConfigError;
use crate::net::SourceAddr;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// `[sync]`: flow-state sync between the hosts of a fleet (docs/config.md "[sync]").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncConfig {
    /// `IP:PORT` (UDP) this host receives sync messages on: a management address, not a
    /// DPDK port. E.g. `"10.200.0.31:7946"`.
    pub listen: String,
    /// `IP:PORT` of every other host of the fleet (this host's own `listen` may be listed:
    /// it is skipped, so one list serves every host). At most 64.
    #[serde(default)]
    pub peers: Vec<String>,
    /// File holding the fleet's shared key (≥ 16 bytes, e.g. `openssl rand -hex 32`), mode
    /// 0600 or 0400: every host of the fleet uses the same key.
    pub key_file: String,
    /// Seconds between refreshes of a connection that carries traffic (1–600, default 5):
    /// a peer's copy of an entry lives as long as the origin's would, and each refresh
    /// carries the lifetime left, so a peer never expires a live connection.
    #[serde(default = "d_refresh")]
    pub refresh_interval_sec: u32,
    /// Seconds a starting host waits for its peers' dumps before it announces its VIPs
    /// anyway (0–120, default 5; 0: do not ask).
    #[serde(default = "d_startup")]
    pub startup_sync_timeout_sec: u32,
    /// Messages sent longer ago than this (by the sender's clock; hosts need NTP) are
    /// refused as stale (1–3600 s, default 30).
    #[serde(default = "d_age")]
    pub max_message_age_sec: u32,
}

fn d_refresh() -> u32 {
    5
}
fn d_startup() -> u32 {
    5
}
fn d_age() -> u32 {
    30
}

/// An address flow updates cannot be sent to or from: never unicast (0.0.0.0/8, multicast,
/// 240.0.0.0/4 with the broadcast address, `::`; RFC 1812 §5.3.7) but loopback (several
/// hosts on one machine, tests), or IPv4-mapped IPv6 (RFC 4291 §2.5.5.2: write the IPv4
/// address).
fn unusable(ip: IpAddr) -> bool {
    (ip.never_unicast() && !ip.is_loopback()) || ip.ipv4_mapped()
}

/// Most peers of `[sync]`.
pub const MAX_PEERS: usize = 64;

impl SyncConfig {
    /// The listen address.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen.parse().map_err(|_| ConfigError::new("sync.listen", format!("{:?}", self.listen), "must be IP:PORT, e.g. \"10.200.0.31:7946\""))
    }

    /// The peers without this host's own listen address.
    pub fn peer_addrs(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        let own = self.listen_addr()?;
        let mut out = Vec::new();
        for (i, p) in self.peers.iter().enumerate() {
            let a: SocketAddr = p.parse().map_err(|_| ConfigError::new(format!("sync.peers[{i}]"), format!("{p:?}"), "must be IP:PORT"))?;
            if unusable(a.ip()) || a.port() == 0 {
                return Err(ConfigError::new(format!("sync.peers[{i}]"), p, "must be a unicast address with a port (not 0.0.0.0/8, multicast, broadcast, 240.0.0.0/4 or IPv4-mapped ::ffff:a.b.c.d)"));
            }
            if a != own && !out.contains(&a) {
                out.push(a);
            }
        }
        Ok(out)
    }

    /// Checks every field's range (the key file itself is checked by the daemon at start).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = self.listen_addr()?;
        // The listen address is also the source of every message: unspecified is no source.
        if l.port() == 0 || l.ip().is_unspecified() || unusable(l.ip()) {
            return Err(ConfigError::new("sync.listen", &self.listen, "must be a unicast IP:PORT with a port other than 0 (not unspecified, 0.0.0.0/8, multicast, broadcast, 240.0.0.0/4 or IPv4-mapped)"));
        }
        let peers = self.peer_addrs()?;
        if peers.len() > MAX_PEERS {
            return Err(ConfigError::new("sync.peers", peers.len(), format!("at most {MAX_PEERS} peers besides this host")));
        }
        if let Some((i, p)) = self.peers.iter().enumerate().find(|(_, p)| p.parse::<SocketAddr>().is_ok_and(|a| a.is_ipv4() != l.is_ipv4())) {
            return Err(ConfigError::new(format!("sync.peers[{i}]"), p, "must be of the family of sync.listen (one socket sends to every peer)"));
        }
        if self.key_file.trim().is_empty() {
            return Err(ConfigError::new("sync.key_file", "\"\"", "must name the fleet's key file"));
        }
        let ranges = [
            ("sync.refresh_interval_sec", self.refresh_interval_sec, 1, 600),
            ("sync.startup_sync_timeout_sec", self.startup_sync_timeout_sec, 0, 120),
            ("sync.max_message_age_sec", self.max_message_age_sec, 1, 3600),
        ];
        for (path, v, lo, hi) in ranges {
            if !(lo..=hi).contains(&v) {
                return Err(ConfigError::new(path, v, format!("must be in {lo}..={hi} (seconds)")));
            }
        }
        Ok(())
    }
}
