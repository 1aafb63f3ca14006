//! [`Mempool`]: an mbuf pool (`rte_pktmbuf_pool_create`).

use super::error::*;
use super::*;
use crate::fastpath::port::PacketBuf;
use dpdk_sys as sys;
use std::ffi::CString;
use std::ptr::NonNull;

/// A packet mbuf pool (`rte_pktmbuf_pool_create`; default data room, or one sized for
/// jumbo frames). Freed on drop: drop
/// every mbuf and port using it first.
#[derive(Debug)]
pub struct Mempool {
    ptr: NonNull<sys::rte_mempool>,
    name: String,
}

// SAFETY: the default mempool ops (ring_mp_mc) are multi-producer/multi-consumer safe, and
// the handle is only a pointer into shared EAL memory.
unsafe impl Send for Mempool {}
// SAFETY: as above; `avail`/`in_use`/`alloc` are thread-safe DPDK calls.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `n_mbufs` mbufs (`RTE_MBUF_DEFAULT_BUF_SIZE` each) with a per-lcore
    /// cache of `cache` on `socket_id` (negative = [`SOCKET_ID_ANY`](sys::SOCKET_ID_ANY):
    /// the calling thread's socket, else 0). `name` must be unique.
    pub fn new(name: &str, n_mbufs: u32, cache: u32, socket_id: i32) -> Result<Mempool> {
        Mempool::with_data_room(name, n_mbufs, cache, sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16, socket_id)
    }

    /// Like [`Mempool::new`] with `data_room` bytes of buffer per mbuf (headroom
    /// included, as `rte_pktmbuf_pool_create`'s `data_room_size`): mbufs sized for a jumbo
    /// frame when the device cannot receive into chained mbufs ([`super::RxPlan`]).
    pub fn with_data_room(name: &str, n_mbufs: u32, cache: u32, data_room: u16, socket_id: i32) -> Result<Mempool> {
        let cname = CString::new(name).map_err(|_| DpdkError {
            call: "rte_pktmbuf_pool_create",
            errno: libc::EINVAL,
            message: format!("pool name {name:?} contains a NUL byte"),
            hint: None,
        })?;
        let socket = pick_socket(socket_id, current_socket());
        // SAFETY: cname is a valid C string; DPDK copies the name; returns null + rte_errno
        // on failure.
        let p = unsafe {
            sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                n_mbufs,
                cache,
                0,
                data_room,
                socket,
            )
        };
        match NonNull::new(p) {
            Some(ptr) => Ok(Mempool {
                ptr,
                name: name.to_owned(),
            }),
            None => {
                let e = DpdkError::from_rte_errno(
                    "rte_pktmbuf_pool_create",
                    format!("pool {name:?}, {n_mbufs} mbufs of {data_room} bytes, cache {cache}, socket {socket}"),
                );
                let hint = match e.errno {
                    libc::ENOMEM => Some("not enough EAL memory: raise -m or use fewer mbufs (jumbo mbufs need mbufs × data room; see docs/operations.md \"Jumbo frames\")"),
                    libc::EEXIST => Some("a mempool with this name exists"),
                    libc::EINVAL => Some("cache must be ≤ 512 and ≤ n_mbufs / 1.5"),
                    _ => None,
                };
                Err(match hint {
                    Some(h) => e.with_hint(h),
                    None => e,
                })
            }
        }
    }

    /// The pool name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Free mbufs (including those in per-lcore caches).
    pub fn avail(&self) -> u32 {
        // SAFETY: ptr is a live mempool owned by self.
        unsafe { sys::rte_mempool_avail_count(self.ptr.as_ptr()) }
    }

    /// Mbufs taken from the pool (by the application or sitting in device rings).
    pub fn in_use(&self) -> u32 {
        // SAFETY: ptr is a live mempool owned by self.
        unsafe { sys::rte_mempool_in_use_count(self.ptr.as_ptr()) }
    }

    /// Allocates one mbuf (empty, default headroom).
    pub fn alloc(&self) -> Result<Mbuf> {
        // SAFETY: ptr is a live mempool; returns null when empty.
        let p = unsafe { sys::spw_pktmbuf_alloc(self.ptr.as_ptr()) };
        NonNull::new(p).map(Mbuf).ok_or_else(|| {
            DpdkError::new(
                "rte_pktmbuf_alloc",
                libc::ENOBUFS,
                format!("mempool {:?} is empty", self.name),
            )
        })
    }

    /// Allocates one mbuf holding a copy of `frame`.
    pub fn alloc_frame(&self, frame: &[u8]) -> Result<Mbuf> {
        let mut m = self.alloc()?;
        if !m.append(frame.len()) {
            return Err(DpdkError::new(
                "rte_pktmbuf_append",
                libc::EMSGSIZE,
                format!("frame of {} bytes does not fit an mbuf", frame.len()),
            ));
        }
        m.data_mut().copy_from_slice(frame);
        Ok(m)
    }

    /// Allocates a chain of mbufs holding `frame` split into segments of `seg_lens` bytes
    /// (the last takes the rest; zero lengths skipped), as a device with RX scatter
    /// delivers a jumbo frame: the model of [`crate::fastpath::port::MemBuf::segmented`]
    /// on real mbufs (tests).
    pub fn alloc_segmented(&self, frame: &[u8], seg_lens: &[usize]) -> Result<Mbuf> {
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        for &n in seg_lens {
            let end = (at + n).min(frame.len());
            if end > at {
                parts.push(&frame[at..end]);
                at = end;
            }
        }
        if at < frame.len() || parts.is_empty() {
            parts.push(&frame[at..]);
        }
        let mut head = self.alloc_frame(parts[0])?;
        for p in &parts[1..] {
            let seg = self.alloc_frame(p)?;
            head.chain(seg).map_err(|_| DpdkError::new("rte_pktmbuf_chain", libc::EOVERFLOW, format!("{} segments", parts.len())))?;
        }
        Ok(head)
    }

    /// The raw pool pointer (for queue setup).
    pub fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.ptr.as_ptr()
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // SAFETY: the pool is owned by self and no longer used (documented contract).
        unsafe { sys::rte_mempool_free(self.ptr.as_ptr()) }
    }
}
