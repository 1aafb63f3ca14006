//! The `Port` abstraction the worker loop runs over: a DPDK port queue in production
//! ([`crate::dpdk::DpdkQueue`]), an in-memory queue in tests ([`MemPort`]).
//!
//! Bursts are fixed-capacity [`Burst`]s (no allocation). Buffers own their packet memory:
//! dropping a buffer frees it (for DPDK, `rte_pktmbuf_free`), so every packet is either sent
//! or freed exactly once.

use arrayvec::ArrayVec;
use std::collections::VecDeque;

/// Packets per RX/TX burst.
pub const BURST: usize = 32;

/// A fixed-capacity burst of buffers.
pub type Burst<B> = ArrayVec<B, BURST>;

/// A packet buffer with headroom: the view `data()` can grow at the front (encapsulation)
/// and shrink at the back.
pub trait PacketBuf {
    /// The packet bytes, starting at the Ethernet header.
    fn data(&self) -> &[u8];
    /// Mutable packet bytes.
    fn data_mut(&mut self) -> &mut [u8];
    /// Grows the packet by `n` bytes at the front; returns false (unchanged) without headroom.
    fn prepend(&mut self, n: usize) -> bool;
    /// Shrinks the packet to `len` bytes (no-op when `len` ≥ current length).
    fn truncate(&mut self, len: usize);
    /// Grows the packet by `n` bytes at the back (contents unspecified, zeroed for MemBuf);
    /// returns false (unchanged) without tailroom.
    fn append(&mut self, n: usize) -> bool;
    /// Number of buffer segments; `data()` covers only the first. Jumbo frames received
    /// into chained mbufs have more than one.
    fn segments(&self) -> u16 {
        1
    }
}

/// One RX queue + one TX queue of a port, owned by one worker.
pub trait Port {
    /// Buffer type of this port.
    type Buf: PacketBuf;
    /// Receives up to `out.remaining_capacity()` packets into `out`; returns how many.
    fn rx_burst(&mut self, out: &mut Burst<Self::Buf>) -> usize;
    /// Sends the packets in `bufs` (emptying it); packets the device did not take are freed.
    /// Returns how many were sent.
    fn tx_burst(&mut self, bufs: &mut Burst<Self::Buf>) -> usize;
    /// The port's MAC address.
    fn mac(&self) -> [u8; 6];
    /// A new buffer holding a copy of `frame`, for frames the worker originates (the
    /// neighbour resolver's ARP requests); `None` when no buffer is free or the port
    /// cannot allocate. Must not lock, allocate from the heap or make a syscall (DPDK: an
    /// mbuf from the port's pool).
    fn alloc_tx(&mut self, frame: &[u8]) -> Option<Self::Buf> {
        let _ = frame;
        None
    }
}

/// Headroom of [`MemBuf`], as DPDK's default `RTE_PKTMBUF_HEADROOM`.
pub const MEM_HEADROOM: usize = 128;

/// An in-memory packet buffer (tests, benchmarks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemBuf {
    buf: Vec<u8>,
    start: usize,
}

impl MemBuf {
    /// A buffer holding `frame`, with [`MEM_HEADROOM`] bytes of headroom.
    pub fn new(frame: &[u8]) -> Self {
        let mut buf = vec![0u8; MEM_HEADROOM];
        buf.extend_from_slice(frame);
        MemBuf { buf, start: MEM_HEADROOM }
    }
}

impl PacketBuf for MemBuf {
    fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }
    fn prepend(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    fn truncate(&mut self, len: usize) {
        self.buf.truncate(self.start + len);
    }
    fn append(&mut self, n: usize) -> bool {
        self.buf.resize(self.buf.len() + n, 0);
        true
    }
}

/// An in-memory port: `rx` is what the worker will receive, `tx` what it sent.
#[derive(Debug, Default)]
pub struct MemPort {
    /// Frames waiting to be received.
    pub rx: VecDeque<MemBuf>,
    /// Frames sent, in order.
    pub tx: Vec<MemBuf>,
    /// The port MAC.
    pub mac: [u8; 6],
    /// Most packets `tx_burst` accepts per call (to test the unsent tail); default all.
    pub tx_limit: Option<usize>,
    /// Buffers dropped because `tx_limit` refused them.
    pub tx_refused: u64,
}

impl MemPort {
    /// A port with this MAC and nothing queued.
    pub fn new(mac: [u8; 6]) -> Self {
        MemPort { mac, ..Default::default() }
    }
}

impl Port for MemPort {
    type Buf = MemBuf;
    fn rx_burst(&mut self, out: &mut Burst<MemBuf>) -> usize {
        let mut n = 0;
        while !out.is_full() {
            match self.rx.pop_front() {
                Some(b) => {
                    out.push(b);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
    fn tx_burst(&mut self, bufs: &mut Burst<MemBuf>) -> usize {
        let limit = self.tx_limit.unwrap_or(usize::MAX);
        let mut sent = 0;
        for b in bufs.drain(..) {
            if sent < limit {
                self.tx.push(b);
                sent += 1;
            } else {
                self.tx_refused += 1;
            }
        }
        sent
    }
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn alloc_tx(&mut self, frame: &[u8]) -> Option<MemBuf> {
        Some(MemBuf::new(frame))
    }
}
