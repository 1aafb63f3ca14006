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
///
/// A packet may span several buffer segments (a jumbo frame received into chained mbufs
/// with RX scatter): `data()` is then the first segment only, `pkt_len()`
/// the whole packet, and the worker reads headers from the first segment after
/// [`PacketBuf::pull_up`]. Lengths passed to `truncate` are whole-packet lengths.
pub trait PacketBuf {
    /// The bytes of the first segment, starting at the Ethernet header (the whole packet
    /// when `segments() == 1`).
    fn data(&self) -> &[u8];
    /// Mutable bytes of the first segment.
    fn data_mut(&mut self) -> &mut [u8];
    /// Grows the packet by `n` bytes at the front (first segment); returns false
    /// (unchanged) without headroom.
    fn prepend(&mut self, n: usize) -> bool;
    /// Shrinks the whole packet to `len` bytes, dropping segments past it (no-op when
    /// `len` ≥ `pkt_len()`).
    fn truncate(&mut self, len: usize);
    /// Grows the packet by `n` bytes at the back (last segment; contents unspecified,
    /// zeroed for MemBuf); returns false (unchanged) without tailroom.
    fn append(&mut self, n: usize) -> bool;
    /// Number of buffer segments; `data()` covers only the first. Jumbo frames received
    /// into chained mbufs have more than one.
    #[inline]
    fn segments(&self) -> u16 {
        1
    }
    /// Length of the whole packet over all segments, bytes (`pkt_len` of an mbuf).
    #[inline]
    fn pkt_len(&self) -> usize {
        self.data().len()
    }
    /// Makes the first `len` bytes of the packet (at most `pkt_len()`) contiguous in the
    /// first segment, moving bytes from the following segments into its tailroom. Returns
    /// false (the packet unchanged or still valid, just not pulled up) when the first
    /// segment has no room for them. Never changes the packet's bytes or length.
    #[inline]
    fn pull_up(&mut self, len: usize) -> bool {
        self.data().len() >= len.min(self.pkt_len())
    }
    /// Calls `f` with the bytes of each segment, first (`data()`) to last; no allocation.
    /// For checksums over a whole multi-segment packet
    /// ([`crate::fastpath::segments::sum_words_from`]).
    #[inline]
    fn for_each_segment<F: FnMut(&[u8])>(&self, mut f: F) {
        f(self.data())
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

    /// Whether `tx_burst` may be given multi-segment packets (the device was configured
    /// with `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`). The worker drops a multi-segment packet bound
    /// for a port without it as `multi_segment`.
    #[inline]
    fn tx_multi_seg(&self) -> bool {
        true
    }
}

/// Headroom of [`MemBuf`], as DPDK's default `RTE_PKTMBUF_HEADROOM`.
pub const MEM_HEADROOM: usize = 128;

/// An in-memory packet buffer (tests, benchmarks), one segment by default or several
/// ([`MemBuf::segmented`]) to model a jumbo frame received into chained mbufs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemBuf {
    /// First segment: headroom, then data from `start`.
    buf: Vec<u8>,
    start: usize,
    /// The following segments, in order (each non-empty).
    rest: Vec<Vec<u8>>,
    /// Most bytes the first segment's data may hold after [`PacketBuf::pull_up`] (as an
    /// mbuf's data room); `usize::MAX` = unlimited.
    first_room: usize,
}

impl MemBuf {
    /// A buffer holding `frame`, with [`MEM_HEADROOM`] bytes of headroom.
    pub fn new(frame: &[u8]) -> Self {
        let mut buf = vec![0u8; MEM_HEADROOM];
        buf.extend_from_slice(frame);
        MemBuf { buf, start: MEM_HEADROOM, rest: Vec::new(), first_room: usize::MAX }
    }

    /// `frame` split into segments of the given lengths (the last one takes the rest; zero
    /// lengths are skipped), the first with [`MEM_HEADROOM`] of headroom; the first
    /// segment's data never grows past `first_room` bytes in [`PacketBuf::pull_up`].
    pub fn segmented(frame: &[u8], seg_lens: &[usize], first_room: usize) -> Self {
        let mut segs: Vec<Vec<u8>> = Vec::new();
        let mut at = 0;
        for &n in seg_lens {
            let end = (at + n).min(frame.len());
            if end > at {
                segs.push(frame[at..end].to_vec());
                at = end;
            }
        }
        if at < frame.len() || segs.is_empty() {
            segs.push(frame[at..].to_vec());
        }
        let mut m = MemBuf::new(&segs.remove(0));
        m.rest = segs;
        m.first_room = first_room;
        m
    }

    /// The whole packet, every segment in order (what a device sends).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = self.data().to_vec();
        for s in &self.rest {
            v.extend_from_slice(s);
        }
        v
    }

    /// Lengths of the segments, first to last.
    pub fn segment_lens(&self) -> Vec<usize> {
        std::iter::once(self.data().len()).chain(self.rest.iter().map(Vec::len)).collect()
    }
}

impl PacketBuf for MemBuf {
    #[inline]
    fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }
    #[inline]
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
        let first = self.buf.len() - self.start;
        if len <= first {
            self.buf.truncate(self.start + len);
            self.rest.clear();
            return;
        }
        let mut left = len - first;
        let mut keep = 0;
        for s in &mut self.rest {
            if left == 0 {
                break;
            }
            if s.len() > left {
                s.truncate(left);
            }
            left -= s.len();
            keep += 1;
        }
        self.rest.truncate(keep);
    }
    fn append(&mut self, n: usize) -> bool {
        let last = self.rest.last_mut().unwrap_or(&mut self.buf);
        last.resize(last.len() + n, 0);
        true
    }
    #[inline]
    fn segments(&self) -> u16 {
        u16::try_from(1 + self.rest.len()).unwrap_or(u16::MAX)
    }
    fn for_each_segment<F: FnMut(&[u8])>(&self, mut f: F) {
        f(self.data());
        self.rest.iter().for_each(|s| f(s));
    }
    #[inline]
    fn pkt_len(&self) -> usize {
        self.data().len() + self.rest.iter().map(Vec::len).sum::<usize>()
    }
    fn pull_up(&mut self, len: usize) -> bool {
        let want = len.min(self.pkt_len());
        let have = self.data().len();
        if have >= want {
            return true;
        }
        if want > self.first_room {
            return false;
        }
        let mut need = want - have;
        while need > 0 && !self.rest.is_empty() {
            let take = need.min(self.rest[0].len());
            self.buf.extend(self.rest[0].drain(..take));
            need -= take;
            if self.rest[0].is_empty() {
                self.rest.remove(0);
            }
        }
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
    /// The modelled device cannot send multi-segment packets (no
    /// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`); default false: it can.
    pub tx_single_segment_only: bool,
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

    fn tx_multi_seg(&self) -> bool {
        !self.tx_single_segment_only
    }
}
