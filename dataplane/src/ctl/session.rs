//! The state of the running `capture drops` session, which [`crate::daemon::Daemon`] keeps;
//! [`super::capture`] starts, polls and ends it. Stands alone so that the daemon can hold
//! it without importing the code that takes the daemon (no import cycle).

use spillway_shared::capture::CapturedFrame;
use std::time::Instant;

/// A running capture.
pub struct Session {
    pub(super) id: u64,
    pub(super) last_poll: Instant,
    pub(super) vip: Option<std::net::IpAddr>,
    /// `ring_full` totals when it started.
    pub(super) full_base: u64,
    /// Frames drained but not yet answered (a poll answers at most [`MAX_PER_POLL`]).
    pub(super) pending: std::collections::VecDeque<CapturedFrame>,
}
