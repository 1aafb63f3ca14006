//! `capture drops` sessions on the control side: starts and stops the workers' copying of
//! dropped frames ([`crate::fastpath::capture`]), drains their rings on each poll, filters
//! by destination address and turns worker-clock times into wall-clock times. One session
//! at a time; a session not polled for [`LEASE_MS`] ends ([`Daemon::capture_expire`], from
//! the control loop), so a client that goes away stops the capture.

use super::session::Session;
use crate::daemon::Daemon;
use crate::fastpath::capture::SNAP_MAX;
use crate::wire::DropReason;
use spillway_shared::capture::{CaptureBatch, CaptureFilter, CaptureStarted, CapturedFrame, LEASE_MS, MAX_PER_POLL};
use spillway_shared::proto::Response;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use strum::IntoEnumIterator;

/// The destination address of an Ethernet frame (after up to two VLAN tags), if IPv4/IPv6.
fn destination(frame: &[u8]) -> Option<std::net::IpAddr> {
    let mut off = 12;
    let mut et = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
    while et == 0x8100 || et == 0x88a8 {
        off += 4;
        et = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
    }
    let ip = off + 2;
    match et {
        0x0800 => {
            let b: [u8; 4] = frame.get(ip + 16..ip + 20)?.try_into().ok()?;
            Some(std::net::Ipv4Addr::from(b).into())
        }
        0x86dd => {
            let b: [u8; 16] = frame.get(ip + 24..ip + 40)?.try_into().ok()?;
            Some(std::net::Ipv6Addr::from(b).into())
        }
        _ => None,
    }
}

impl Daemon {
    fn ring_full_total(&self) -> u64 {
        self.shared.capture.ring_full.iter().map(|n| n.load(Relaxed)).sum()
    }

    /// `Request::CaptureStart`: refused while another capture runs, or for an unknown
    /// reason or a snap length outside 1–512.
    pub fn capture_start(&self, f: &CaptureFilter) -> Response {
        self.capture_expire();
        let mut guard = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_some() {
            return Response::Error { message: "a drop capture is already running (one at a time); try again when it ends".into() };
        }
        if f.snaplen == 0 || f.snaplen as usize > SNAP_MAX {
            return Response::Error { message: format!("--snaplen {}: must be in 1..={SNAP_MAX} bytes", f.snaplen) };
        }
        let mut mask = 0u64;
        let mut names = Vec::new();
        for r in DropReason::iter() {
            if f.reasons.is_empty() || f.reasons.iter().any(|n| n == r.name()) {
                mask |= 1u64 << (r as u8 as u32 & 63);
                names.push(r.name().to_string());
            }
        }
        if let Some(bad) = f.reasons.iter().find(|n| !DropReason::iter().any(|r| r.name() == n.as_str())) {
            let known: Vec<&str> = DropReason::iter().map(|r| r.name()).collect();
            return Response::Error { message: format!("--reason {bad}: not a drop reason (known: {})", known.join(", ")) };
        }
        self.shared.capture.start(mask, f.snaplen as usize);
        let id = self.started.elapsed().as_nanos() as u64 | 1;
        *guard = Some(Session { id, last_poll: Instant::now(), vip: f.vip, full_base: self.ring_full_total(), pending: Default::default() });
        tracing::info!(session = id, reasons = names.len(), vip = ?f.vip, snaplen = f.snaplen, "drop capture started");
        Response::CaptureStarted(CaptureStarted { session: id, reasons: names, snaplen: f.snaplen })
    }

    /// `Request::CapturePoll` / `CaptureStop` (`stop`): the frames captured since the last
    /// poll; an unknown or ended session is an error.
    pub fn capture_poll(&self, session: u64, stop: bool) -> Response {
        let mut guard = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = guard.as_mut().filter(|s| s.id == session) else {
            return Response::Error { message: format!("no drop capture {session} (it ended: not polled for {LEASE_MS} ms, or stopped)") };
        };
        s.last_poll = Instant::now();
        // worker clock (ms since `started`) -> Unix time
        let wall_at_start = std::time::SystemTime::now().checked_sub(self.started.elapsed()).unwrap_or(std::time::UNIX_EPOCH);
        let start_ns = wall_at_start.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
        let vip = s.vip;
        let pending = &mut s.pending;
        self.shared.capture.drain(|c| {
            let data = &c.data[..usize::from(c.len)];
            if vip.is_some_and(|v| destination(data) != Some(v)) {
                return;
            }
            let reason = DropReason::iter().nth(usize::from(c.reason)).map_or("unknown", |r| r.name());
            pending.push_back(CapturedFrame {
                unix_ns: start_ns + u64::from(c.now_ms) * 1_000_000,
                worker: c.worker,
                reason: reason.to_string(),
                orig_len: c.orig_len,
                data: data.to_vec(),
            });
        });
        let n = s.pending.len().min(MAX_PER_POLL);
        let frames: Vec<CapturedFrame> = s.pending.drain(..n).collect();
        let ring_full = self.ring_full_total().saturating_sub(s.full_base);
        if stop {
            *guard = None;
            self.shared.capture.stop();
            tracing::info!(session, "drop capture stopped");
        }
        Response::CaptureBatch(CaptureBatch { frames, ring_full })
    }

    /// Ends a capture not polled for [`LEASE_MS`] (its client went away).
    pub fn capture_expire(&self) {
        let mut guard = self.capture.lock().unwrap_or_else(|e| e.into_inner());
        if guard.as_ref().is_some_and(|s| s.last_poll.elapsed() > Duration::from_millis(LEASE_MS)) {
            let id = guard.as_ref().map_or(0, |s| s.id);
            *guard = None;
            self.shared.capture.stop();
            tracing::info!(session = id, "drop capture ended: its client stopped polling");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_of_ipv4_ipv6_and_tagged_frames() {
        let mut f = vec![0u8; 14 + 20];
        f[12] = 0x08;
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 0, 9]);
        assert_eq!(destination(&f), Some("10.0.0.9".parse().unwrap()));
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0, 0, 5]);
        t.extend_from_slice(&f[12..]);
        assert_eq!(destination(&t), Some("10.0.0.9".parse().unwrap()));
        let mut v6 = vec![0u8; 14 + 40];
        v6[12] = 0x86;
        v6[13] = 0xdd;
        v6[14 + 39] = 1;
        assert_eq!(destination(&v6), Some("::1".parse().unwrap()));
        assert_eq!(destination(&f[..20]), None, "truncated");
    }
}
