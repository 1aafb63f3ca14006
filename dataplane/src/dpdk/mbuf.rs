//! [`Mbuf`]: an owned packet buffer, the [`crate::fastpath::port::PacketBuf`] of DPDK ports.

use crate::fastpath::port::PacketBuf;
use dpdk_sys as sys;
use std::ptr::NonNull;

/// An owned mbuf; dropping it returns it to its pool (`rte_pktmbuf_free`).
#[derive(Debug)]
pub struct Mbuf(pub(super) NonNull<sys::rte_mbuf>);

// SAFETY: an mbuf is owned by exactly one Mbuf; freeing from another thread is supported by
// the MP/MC mempool (the cache of the freeing lcore is used, or none for unregistered
// threads).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf; `None` for null.
    ///
    /// # Safety
    /// `p` must be a valid mbuf that nobody else frees or uses afterwards.
    pub unsafe fn from_raw(p: *mut sys::rte_mbuf) -> Option<Mbuf> {
        NonNull::new(p).map(Mbuf)
    }

    /// Gives up ownership, returning the raw pointer (the caller must free or send it).
    pub fn into_raw(self) -> *mut sys::rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The raw pointer (still owned by self).
    pub fn as_ptr(&self) -> *mut sys::rte_mbuf {
        self.0.as_ptr()
    }

    /// Bytes in the first segment (`data_len`). Read from the struct directly (the field
    /// layout is checked by bindgen's layout tests), avoiding a non-inlinable shim call on
    /// the packet path.
    #[inline]
    pub fn len(&self) -> usize {
        // SAFETY: self owns a valid mbuf; plain field read.
        unsafe { usize::from((*self.0.as_ptr()).data_len) }
    }

    /// Start of the first segment's data: `buf_addr + data_off` (`rte_pktmbuf_mtod`).
    #[inline]
    fn data_ptr(&self) -> *mut u8 {
        // SAFETY: self owns a valid mbuf; buf_addr + data_off stays inside its buffer.
        unsafe {
            let m = &*self.0.as_ptr();
            (m.buf_addr as *mut u8).add(usize::from(m.data_off))
        }
    }

    /// True when the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total packet length over all segments (`pkt_len`), read from the struct like
    /// [`Mbuf::len`].
    #[inline]
    pub fn pkt_len(&self) -> usize {
        // SAFETY: self owns a valid mbuf; plain field read.
        unsafe { (*self.0.as_ptr()).pkt_len as usize }
    }

    /// Free bytes in front of the data.
    pub fn headroom(&self) -> usize {
        // SAFETY: self owns a valid mbuf.
        unsafe { sys::spw_pktmbuf_headroom(self.0.as_ptr()) as usize }
    }

    /// Free bytes after the data (last segment).
    pub fn tailroom(&self) -> usize {
        // SAFETY: self owns a valid mbuf.
        unsafe { sys::spw_pktmbuf_tailroom(self.0.as_ptr()) as usize }
    }

    /// Appends the chain `tail` after this packet's last segment (`rte_pktmbuf_chain`);
    /// `Err(tail)` (both unchanged) when the chain would exceed DPDK's segment limit.
    pub fn chain(&mut self, tail: Mbuf) -> std::result::Result<(), Mbuf> {
        let t = tail.into_raw();
        // SAFETY: both are valid owned mbufs; on success the head owns the tail's segments,
        // on failure (-EOVERFLOW) nothing changed and we take the tail back.
        if unsafe { sys::spw_pktmbuf_chain(self.0.as_ptr(), t) } == 0 {
            Ok(())
        } else {
            // SAFETY: t came from `into_raw` of a valid mbuf (non-null) that we still own.
            Err(Mbuf(unsafe { NonNull::new_unchecked(t) }))
        }
    }

    /// The whole packet, every segment in order (tests, diagnostics; allocates).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.pkt_len());
        let mut seg = self.0.as_ptr();
        while !seg.is_null() {
            // SAFETY: seg is a segment of the chain self owns; buf_addr + data_off holds
            // data_len initialised bytes; `next` is null after the last segment.
            unsafe {
                let m = &*seg;
                let p = (m.buf_addr as *const u8).add(usize::from(m.data_off));
                v.extend_from_slice(std::slice::from_raw_parts(p, usize::from(m.data_len)));
                seg = m.next;
            }
        }
        v
    }

    /// Removes `n` bytes from the front (`rte_pktmbuf_adj`); false if the packet is shorter.
    pub fn adj(&mut self, n: usize) -> bool {
        let Ok(n) = u16::try_from(n) else {
            return false;
        };
        // SAFETY: self owns a valid mbuf; adj returns null (unchanged) if n > data_len.
        !unsafe { sys::spw_pktmbuf_adj(self.0.as_ptr(), n) }.is_null()
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: self owns the mbuf and it is freed exactly once here.
        unsafe { sys::spw_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl PacketBuf for Mbuf {
    #[inline]
    fn segments(&self) -> u16 {
        // SAFETY: valid mbuf owned by self; plain field read.
        unsafe { (*self.0.as_ptr()).nb_segs }
    }

    #[inline]
    fn data(&self) -> &[u8] {
        // SAFETY: buf_addr + data_off points at data_len initialised bytes of the first
        // segment, owned by self and borrowed immutably for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), self.len()) }
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        // SAFETY: as in `data`, with exclusive access through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), len) }
    }

    fn prepend(&mut self, n: usize) -> bool {
        let Ok(n16) = u16::try_from(n) else {
            return false;
        };
        // SAFETY: self owns a valid mbuf; prepend returns null and leaves it unchanged when
        // headroom < n.
        !unsafe { sys::spw_pktmbuf_prepend(self.0.as_ptr(), n16) }.is_null()
    }

    fn truncate(&mut self, len: usize) {
        let cur = self.pkt_len();
        if len >= cur {
            return;
        }
        if self.segments() > 1 {
            // SAFETY: self owns a valid mbuf chain; len < pkt_len, so trim_to cuts the
            // segment holding byte `len` and frees the ones after it (never the first).
            unsafe {
                sys::spw_pktmbuf_trim_to(self.0.as_ptr(), len as u32);
            }
            return;
        }
        let Ok(cut) = u16::try_from(cur - len) else {
            return;
        };
        // SAFETY: self owns a valid single-segment mbuf; cut < data_len = pkt_len, so trim
        // succeeds.
        unsafe {
            sys::spw_pktmbuf_trim(self.0.as_ptr(), cut);
        }
    }

    #[inline]
    fn pkt_len(&self) -> usize {
        Mbuf::pkt_len(self)
    }

    fn for_each_segment<F: FnMut(&[u8])>(&self, mut f: F) {
        let mut seg = self.0.as_ptr();
        while !seg.is_null() {
            // SAFETY: as in `to_vec`: seg is a segment of the chain self owns, holding
            // data_len initialised bytes at buf_addr + data_off, borrowed for the call.
            unsafe {
                let m = &*seg;
                let p = (m.buf_addr as *const u8).add(usize::from(m.data_off));
                f(std::slice::from_raw_parts(p, usize::from(m.data_len)));
                seg = m.next;
            }
        }
    }

    fn pull_up(&mut self, len: usize) -> bool {
        if self.len() >= len.min(self.pkt_len()) {
            return true;
        }
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        // SAFETY: self owns a valid mbuf chain; pull_up moves bytes within it, frees only
        // segments it emptied (never the first), and leaves it unchanged on failure.
        unsafe { sys::spw_pktmbuf_pull_up(self.0.as_ptr(), len) == 0 }
    }

    fn append(&mut self, n: usize) -> bool {
        let Ok(n16) = u16::try_from(n) else {
            return false;
        };
        // SAFETY: self owns a valid mbuf; append returns null (unchanged) without tailroom.
        !unsafe { sys::spw_pktmbuf_append(self.0.as_ptr(), n16) }.is_null()
    }
}
