//! Capture of dropped packets (`spillwayctl capture drops`): what no port capture can show,
//! the frames Spillway itself drops, each with its drop reason and worker.
//!
//! Each worker owns the producer end of a bounded single-producer single-consumer ring
//! ([`rtrb`], preallocated at start: [`RING_SLOTS`] slots of [`SNAP_MAX`] bytes); the
//! control side owns the consumer ends ([`CaptureHub`]). While no capture runs, a worker
//! pays one relaxed atomic load per loop iteration ([`CaptureHub::active`], read into
//! [`Tap::on`]) and one predictable branch per dropped frame. While one runs, a dropped
//! frame whose reason is in the capture's reason mask is copied (at most the snap length)
//! into the ring; when the ring is full the frame is not copied and counted
//! (`capture_ring_full`). No lock, allocation or syscall on the worker.

use crate::wire::DropReason;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Most bytes of a frame kept per captured drop.
pub const SNAP_MAX: usize = 512;
/// Slots of each worker's ring.
pub const RING_SLOTS: usize = 1024;

/// One captured drop.
#[derive(Clone, Copy)]
pub struct Captured {
    /// Worker clock at the drop, ms since the workers' epoch.
    pub now_ms: u32,
    /// Drop reason (`DropReason as u8`).
    pub reason: u8,
    /// Worker index.
    pub worker: u16,
    /// Length of the whole frame, bytes.
    pub orig_len: u32,
    /// Bytes of `data` in use (≤ snap length).
    pub len: u16,
    /// The first `len` bytes of the frame.
    pub data: [u8; SNAP_MAX],
}

impl Default for Captured {
    fn default() -> Self {
        Captured { now_ms: 0, reason: 0, worker: 0, orig_len: 0, len: 0, data: [0; SNAP_MAX] }
    }
}

/// The control side of drop capture: whether a capture runs, its reason mask and snap
/// length, the rings' consumer ends, and the producer ends until the workers take them.
pub struct CaptureHub {
    /// A capture runs (workers read it once per loop iteration).
    pub active: AtomicBool,
    /// Bit `r` set: reason `r` is captured.
    pub reasons: AtomicU64,
    /// Bytes kept per frame (1..=[`SNAP_MAX`]).
    pub snaplen: AtomicU64,
    /// Frames not copied because a worker's ring was full, per worker.
    pub ring_full: Vec<AtomicU64>,
    /// Consumer ends, by worker (control side only).
    pub consumers: Mutex<Vec<rtrb::Consumer<Captured>>>,
    producers: Mutex<Vec<Option<rtrb::Producer<Captured>>>>,
}

impl CaptureHub {
    /// Rings for `workers` workers.
    pub fn new(workers: usize) -> CaptureHub {
        let (producers, consumers): (Vec<_>, Vec<_>) = (0..workers).map(|_| {
            let (p, c) = rtrb::RingBuffer::new(RING_SLOTS);
            (Some(p), c)
        }).unzip();
        CaptureHub {
            active: AtomicBool::new(false),
            reasons: AtomicU64::new(0),
            snaplen: AtomicU64::new(SNAP_MAX as u64),
            ring_full: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            consumers: Mutex::new(consumers),
            producers: Mutex::new(producers),
        }
    }

    /// Worker `index`'s tap (taken once, when its loop starts; `None` when already taken
    /// or out of range).
    pub fn take_tap(self: &std::sync::Arc<Self>, index: usize) -> Option<Tap> {
        let p = self.producers.lock().unwrap_or_else(|e| e.into_inner()).get_mut(index)?.take()?;
        Some(Tap { on: false, worker: index as u16, hub: self.clone(), producer: std::cell::RefCell::new(p) })
    }

    /// Starts a capture of the reasons in `mask` (bit per `DropReason as u8`), `snaplen`
    /// bytes per frame; empties the rings of an earlier one first.
    pub fn start(&self, mask: u64, snaplen: usize) {
        self.active.store(false, Relaxed);
        self.drain(|_| {});
        self.reasons.store(mask, Relaxed);
        self.snaplen.store(snaplen.clamp(1, SNAP_MAX) as u64, Relaxed);
        self.active.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Stops the capture (workers stop copying at their next loop iteration).
    pub fn stop(&self) {
        self.active.store(false, Relaxed);
    }

    /// Hands every captured drop waiting in the rings to `f`, worker by worker.
    pub fn drain(&self, mut f: impl FnMut(&Captured)) {
        let mut cs = self.consumers.lock().unwrap_or_else(|e| e.into_inner());
        for c in cs.iter_mut() {
            while let Ok(x) = c.pop() {
                f(&x);
            }
        }
    }
}

/// A worker's end of its capture ring.
pub struct Tap {
    /// A capture runs (refreshed once per loop iteration from [`CaptureHub::active`]).
    pub on: bool,
    worker: u16,
    hub: std::sync::Arc<CaptureHub>,
    // `dispatch` takes the worker by shared reference; the cell is only ever borrowed
    // there, one frame at a time, so `try_borrow_mut` always succeeds.
    producer: std::cell::RefCell<rtrb::Producer<Captured>>,
}

impl Tap {
    /// Refreshes [`Tap::on`] (once per loop iteration).
    #[inline(always)]
    pub fn refresh(&mut self) {
        self.on = self.hub.active.load(Relaxed);
    }

    /// Copies a dropped frame into the ring when its reason is captured; counts it in
    /// the hub's `ring_full` when the ring is full. Called only when [`Tap::on`].
    #[cold]
    pub fn offer(&self, reason: DropReason, frame: &[u8], orig_len: usize, now_ms: u32) {
        let hub = &*self.hub;
        if hub.reasons.load(Relaxed) & (1u64 << (reason as u8 as u32 & 63)) == 0 {
            return;
        }
        let Ok(mut p) = self.producer.try_borrow_mut() else { return };
        let snap = (hub.snaplen.load(Relaxed) as usize).min(SNAP_MAX).min(frame.len());
        if p.is_full() {
            if let Some(n) = hub.ring_full.get(usize::from(self.worker)) {
                n.fetch_add(1, Relaxed);
            }
            return;
        }
        let mut c = Captured { now_ms, reason: reason as u8, worker: self.worker, orig_len: orig_len as u32, len: snap as u16, data: [0; SNAP_MAX] };
        c.data[..snap].copy_from_slice(&frame[..snap]);
        match p.push(c) {
            Ok(()) => {}
            Err(_) => {
                if let Some(n) = hub.ring_full.get(usize::from(self.worker)) {
                    n.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_only_while_on_and_only_the_masked_reasons_and_counts_a_full_ring() {
        let hub = std::sync::Arc::new(CaptureHub::new(1));
        let tap = hub.take_tap(0).unwrap();
        assert!(hub.take_tap(0).is_none(), "one tap per worker");
        hub.start(1u64 << DropReason::NotForVip as u8, 4);
        tap.offer(DropReason::NotForVip, &[1, 2, 3, 4, 5, 6], 6, 7);
        tap.offer(DropReason::MalformedIpv4, &[9; 10], 10, 8);
        let mut got = Vec::new();
        hub.drain(|c| got.push((c.reason, c.len, c.orig_len, c.data[..usize::from(c.len)].to_vec(), c.now_ms)));
        assert_eq!(got, vec![(DropReason::NotForVip as u8, 4, 6, vec![1, 2, 3, 4], 7)]);
        for _ in 0..RING_SLOTS + 5 {
            tap.offer(DropReason::NotForVip, &[0; 64], 64, 0);
        }
        assert_eq!(hub.ring_full[0].load(Relaxed), 5);
        let mut n = 0;
        hub.drain(|_| n += 1);
        assert_eq!(n, RING_SLOTS);
    }
}
