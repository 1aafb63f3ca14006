//! Messages of `spillwayctl capture drops` ([`crate::proto::Request::CaptureStart`],
//! [`crate::proto::Request::CapturePoll`], [`crate::proto::Request::CaptureStop`]): the
//! frames the daemon drops, with their drop reason and worker.
//!
//! A capture is a lease: the client polls at least every [`LEASE_MS`] ms, and a capture not
//! polled for that long ends (its client went away), so the workers stop copying.

use serde::{Deserialize, Serialize};

/// A capture not polled for this long ends, ms.
pub const LEASE_MS: u64 = 2000;
/// Most frames one poll answers (a frame of at most 512 bytes each fits the frame limit).
pub const MAX_PER_POLL: usize = 1024;

/// What a capture takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureFilter {
    /// Drop reasons to capture (their snake_case names); empty = every reason.
    pub reasons: Vec<String>,
    /// Only frames whose IPv4/IPv6 destination is this address; `None` = any.
    pub vip: Option<std::net::IpAddr>,
    /// Bytes kept per frame (1–512).
    pub snaplen: u32,
}

/// Answer to a started capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureStarted {
    /// Session id to poll and stop.
    pub session: u64,
    /// The reasons captured (all names when the filter named none).
    pub reasons: Vec<String>,
    /// Bytes kept per frame.
    pub snaplen: u32,
}

/// One dropped frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedFrame {
    /// Wall-clock time of the drop, ns since the Unix epoch (ms resolution: the workers'
    /// clock).
    pub unix_ns: u64,
    /// Worker that dropped it.
    pub worker: u16,
    /// Drop reason (snake_case name).
    pub reason: String,
    /// Length of the whole frame, bytes.
    pub orig_len: u32,
    /// Its first `snaplen` bytes, from the Ethernet header.
    pub data: Vec<u8>,
}

/// Answer to a poll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureBatch {
    /// Frames dropped since the last poll (at most [`MAX_PER_POLL`]), oldest first per
    /// worker.
    pub frames: Vec<CapturedFrame>,
    /// Frames not captured because a worker's ring was full, since the capture started.
    pub ring_full: u64,
}
