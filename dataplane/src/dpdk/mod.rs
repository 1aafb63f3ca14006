//! Safe layer over DPDK (`dpdk-sys`), in the style of capsule: every null pointer or negative
//! return of a DPDK call becomes a [`DpdkError`] naming the call and carrying DPDK's error
//! text (`rte_strerror`).
//!
//! Objects and their order:
//! - [`Eal`] — the environment abstraction layer; starts **once per process**.
//! - [`Mempool`] — an mbuf pool; create it after [`Eal::init`], drop it after every
//!   [`Mbuf`] taken from it and every [`EthPort`] whose RX queues use it.
//! - [`EthPort`] — an ethdev port found by device name; configure, start, read stats.
//! - [`DpdkQueue`] — one RX + one TX queue of a started port, implementing
//!   [`crate::fastpath::port::Port`] for a worker.
//! - [`Mbuf`] — an owned packet buffer implementing [`crate::fastpath::port::PacketBuf`].
//!
//! Drop order matters because DPDK objects live in EAL memory: mbufs → ports → mempools →
//! `Eal` (whose `Drop` calls `rte_eal_cleanup`).
//!
//! Mbufs are treated as single-segment (Spillway never enables RX scatter): `data()` is the
//! first segment.

use crate::fastpath::port::{Burst, PacketBuf, Port, BURST};
use dpdk_sys as sys;
use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};

/// A failed DPDK call: which call, the (positive) errno, DPDK's text for it and, for common
/// set-up mistakes, a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function (or safe-layer operation) that failed.
    pub call: &'static str,
    /// Positive errno / `rte_errno` value (0 when DPDK gave none).
    pub errno: i32,
    /// DPDK's error text (`rte_strerror`) plus context.
    pub message: String,
    /// What to try, for known causes.
    pub hint: Option<String>,
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.message)?;
        if self.errno != 0 {
            write!(f, " (errno {})", self.errno)?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DpdkError {}

impl DpdkError {
    /// An error for `call` with positive `errno`, text from `rte_strerror` plus `context`.
    fn new(call: &'static str, errno: i32, context: impl Into<String>) -> Self {
        let errno = errno.abs();
        let context = context.into();
        let text = strerror(errno);
        let message = if context.is_empty() {
            text
        } else {
            format!("{context}: {text}")
        };
        DpdkError {
            call,
            errno,
            message,
            hint: None,
        }
    }

    /// An error for `call` using the calling thread's `rte_errno`.
    fn from_rte_errno(call: &'static str, context: impl Into<String>) -> Self {
        Self::new(call, rte_errno(), context)
    }

    fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Result alias of this module.
pub type Result<T, E = DpdkError> = std::result::Result<T, E>;

/// DPDK's text for `errno` (`rte_strerror`, which knows DPDK's own codes too).
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any int and returns a pointer to a static or per-lcore
    // NUL-terminated string (never null); we copy it out immediately.
    unsafe {
        let p = sys::rte_strerror(errno.abs());
        if p.is_null() {
            return format!("error {errno}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The calling thread's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int; valid on any thread.
    unsafe { sys::spw_errno() }
}

/// Maps a DPDK int return (negative errno on failure) to a `Result`.
fn check(call: &'static str, ret: i32, context: impl FnOnce() -> String) -> Result<i32> {
    if ret < 0 {
        Err(DpdkError::new(call, -ret, context()))
    } else {
        Ok(ret)
    }
}

// ---------------------------------------------------------------------------------------------
// EAL
// ---------------------------------------------------------------------------------------------

/// Set while an [`Eal`] exists or after it was cleaned up (EAL cannot restart).
static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// Program name put in front of the EAL arguments (`argv[0]`).
pub const PROGRAM_NAME: &str = "spillway";

/// The initialised DPDK environment. Dropping it calls `rte_eal_cleanup`.
#[derive(Debug)]
pub struct Eal {
    cleaned: bool,
}

impl Eal {
    /// Initialises EAL with `args` (without program name, e.g.
    /// `["--no-huge", "--no-shconf", "-m", "512", "--no-pci", "--vdev=net_null0"]`).
    ///
    /// Fails with a hint for common causes (no hugepages, bad arguments, second init).
    /// EAL can be initialised only once per process; a failed argument parse may be retried.
    pub fn init(args: &[String]) -> Result<Eal> {
        if EAL_STARTED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError {
                call: "rte_eal_init",
                errno: libc::EALREADY,
                message: "EAL is already initialised in this process".into(),
                hint: Some(
                    "EAL can start only once per process: share one Eal, or run DPDK tests \
                     in separate processes"
                        .into(),
                ),
            });
        }
        let argv = match build_argv(args) {
            Ok(a) => a,
            Err(e) => {
                EAL_STARTED.store(false, Ordering::SeqCst);
                return Err(e);
            }
        };
        // EAL may keep pointers into argv (and permutes the array), so the strings live for
        // the rest of the process.
        let strings: &'static mut [CString] = Box::leak(argv.into_boxed_slice());
        let mut ptrs: Vec<*mut c_char> = strings
            .iter_mut()
            .map(|s| s.as_ptr() as *mut c_char)
            .collect();
        ptrs.push(ptr::null_mut());
        let ptrs: &'static mut [*mut c_char] = Box::leak(ptrs.into_boxed_slice());
        let argc = (ptrs.len() - 1) as i32;
        // SAFETY: argv is a NULL-terminated array of `argc` valid, NUL-terminated, leaked
        // (hence 'static) strings; EAL may reorder the array, which we never read again.
        let ret = unsafe { sys::rte_eal_init(argc, ptrs.as_mut_ptr()) };
        if ret < 0 {
            let errno = rte_errno();
            // DPDK clears its own run-once flag on argument errors, so allow a retry; any
            // other failure makes DPDK itself answer EALREADY next time.
            EAL_STARTED.store(false, Ordering::SeqCst);
            let mut e = DpdkError::new("rte_eal_init", errno, format!("EAL args {args:?}"));
            e.hint = eal_hint(errno, args);
            return Err(e);
        }
        Ok(Eal { cleaned: false })
    }

    /// Number of ethdev ports EAL probed (`rte_eth_dev_count_avail`).
    pub fn port_count(&self) -> u16 {
        // SAFETY: EAL is initialised (self exists); pure query.
        unsafe { sys::rte_eth_dev_count_avail() }
    }

    /// Names of all probed ports, by port id.
    pub fn port_names(&self) -> Vec<(u16, String)> {
        port_names()
    }

    /// Number of EAL lcores (`rte_lcore_count`).
    pub fn lcore_count(&self) -> u32 {
        // SAFETY: EAL is initialised; pure query.
        unsafe { sys::rte_lcore_count() }
    }

    /// Releases EAL resources (`rte_eal_cleanup`) now, reporting failure. Drop every mbuf,
    /// port and mempool first. EAL cannot be initialised again in this process.
    pub fn cleanup(mut self) -> Result<()> {
        self.cleaned = true;
        // SAFETY: EAL was initialised by this object, which is consumed; the caller dropped
        // the DPDK objects that live in EAL memory.
        let ret = unsafe { sys::rte_eal_cleanup() };
        check("rte_eal_cleanup", ret, String::new).map(|_| ())
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        if !self.cleaned {
            self.cleaned = true;
            // SAFETY: as in `cleanup`; errors are ignored in drop.
            unsafe {
                sys::rte_eal_cleanup();
            }
        }
    }
}

/// `argv` for `rte_eal_init`: the program name, then `args`.
fn build_argv(args: &[String]) -> Result<Vec<CString>> {
    std::iter::once(PROGRAM_NAME)
        .chain(args.iter().map(String::as_str))
        .map(|a| {
            CString::new(a).map_err(|_| DpdkError {
                call: "rte_eal_init",
                errno: libc::EINVAL,
                message: format!("EAL argument {a:?} contains a NUL byte"),
                hint: None,
            })
        })
        .collect()
}

/// A hint for an `rte_eal_init` failure with `errno` and `args`.
fn eal_hint(errno: i32, args: &[String]) -> Option<String> {
    let no_huge = args.iter().any(|a| a == "--no-huge");
    match errno {
        libc::EACCES | libc::ENOMEM if !no_huge => Some(
            "no hugepages (or no permission to them)? try --no-huge -m 512 for tests, or \
             reserve hugepages with dpdk-hugepages.py and run as root"
                .into(),
        ),
        libc::ENOMEM => Some("not enough memory: raise -m (e.g. -m 512)".into()),
        libc::EINVAL => Some(
            "invalid EAL arguments: check the option spelling and --vdev strings \
             (e.g. --vdev=net_pcap0,rx_pcap=in.pcap); see `dpdk-testpmd --help`"
                .into(),
        ),
        libc::EALREADY => Some("EAL can start only once per process".into()),
        libc::ENODEV => Some(
            "no devices: add --vdev=net_null0 for a virtual port, or bind a NIC with \
             dpdk-devbind.py --bind=vfio-pci"
                .into(),
        ),
        libc::ENOTSUP | libc::EPROTO => Some(
            "a driver or bus failed to probe: check --vdev arguments and the driver \
             directory (RTE_EAL_PMD_PATH)"
                .into(),
        ),
        _ => None,
    }
}

/// The device name of a `--vdev` string: the part before the first comma
/// (`net_pcap0,rx_pcap=x.pcap` → `net_pcap0`).
pub fn vdev_device_name(vdev: &str) -> &str {
    vdev.split(',').next().unwrap_or(vdev).trim()
}

/// Names of all probed ports, by port id.
pub fn port_names() -> Vec<(u16, String)> {
    let mut out = Vec::new();
    for id in 0..sys::RTE_MAX_ETHPORTS as u16 {
        let mut buf = [0 as c_char; 64];
        // SAFETY: buf is 64 bytes ≥ RTE_ETH_NAME_MAX_LEN; DPDK writes a NUL-terminated
        // name on success and returns <0 for unused ids.
        let ret = unsafe { sys::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
        if ret == 0 {
            // SAFETY: NUL-terminated by DPDK on success.
            let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
            out.push((id, name.to_string_lossy().into_owned()));
        }
    }
    out
}

/// Registers the calling non-EAL thread with EAL (`rte_thread_register`) so it gets an lcore
/// id (per-lcore mempool caches, `rte_errno` and `rte_lcore_id()` work). Returns the lcore
/// id; on an EAL thread (or one already registered) returns its id unchanged.
pub fn register_thread() -> Result<u32> {
    let id = lcore_id();
    if id != sys::LCORE_ID_ANY {
        return Ok(id);
    }
    // SAFETY: EAL must be initialised; rte_thread_register returns -1 with rte_errno set
    // (e.g. ENOMEM when all RTE_MAX_LCORE ids are taken) otherwise.
    let ret = unsafe { sys::rte_thread_register() };
    if ret < 0 {
        return Err(
            DpdkError::from_rte_errno("rte_thread_register", "").with_hint(
                "EAL must be initialised and a free lcore id must remain (RTE_MAX_LCORE); \
             EAL's own lcores count against it",
            ),
        );
    }
    Ok(lcore_id())
}

/// Releases the lcore id taken by [`register_thread`] (`rte_thread_unregister`).
pub fn unregister_thread() {
    // SAFETY: a no-op for threads that did not register.
    unsafe { sys::rte_thread_unregister() }
}

/// The calling thread's lcore id (`rte_lcore_id()`), `LCORE_ID_ANY` (u32::MAX) for
/// unregistered threads.
pub fn lcore_id() -> u32 {
    // SAFETY: reads a thread-local; valid on any thread.
    unsafe { sys::spw_lcore_id() }
}

/// The calling thread's NUMA socket (`rte_socket_id`), `None` when unknown.
pub fn current_socket() -> Option<u32> {
    // SAFETY: reads a thread-local; valid on any thread.
    let s = unsafe { sys::rte_socket_id() };
    (s as i32 != sys::SOCKET_ID_ANY).then_some(s)
}

/// Chooses a concrete socket: `requested` if ≥ 0, else the caller's socket, else 0.
pub fn pick_socket(requested: i32, current: Option<u32>) -> i32 {
    if requested >= 0 {
        requested
    } else {
        current.map(|s| s as i32).filter(|s| *s >= 0).unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// Mempool
// ---------------------------------------------------------------------------------------------

/// A packet mbuf pool (`rte_pktmbuf_pool_create`, default data room). Freed on drop: drop
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
                sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
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
                    format!("pool {name:?}, {n_mbufs} mbufs, cache {cache}, socket {socket}"),
                );
                let hint = match e.errno {
                    libc::ENOMEM => Some("not enough EAL memory: raise -m or use fewer mbufs"),
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

// ---------------------------------------------------------------------------------------------
// Mbuf
// ---------------------------------------------------------------------------------------------

/// An owned mbuf; dropping it returns it to its pool (`rte_pktmbuf_free`).
#[derive(Debug)]
pub struct Mbuf(NonNull<sys::rte_mbuf>);

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

    /// Total packet length over all segments (`pkt_len`).
    pub fn pkt_len(&self) -> usize {
        // SAFETY: self owns a valid mbuf.
        unsafe { sys::spw_pktmbuf_pkt_len(self.0.as_ptr()) as usize }
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
        let Ok(cut) = u16::try_from(cur - len) else {
            return;
        };
        // SAFETY: self owns a valid mbuf; trim fails (unchanged) only when the last segment
        // is shorter than `cut`, impossible for the single-segment mbufs we use.
        unsafe {
            sys::spw_pktmbuf_trim(self.0.as_ptr(), cut);
        }
    }

    fn append(&mut self, n: usize) -> bool {
        let Ok(n16) = u16::try_from(n) else {
            return false;
        };
        // SAFETY: self owns a valid mbuf; append returns null (unchanged) without tailroom.
        !unsafe { sys::spw_pktmbuf_append(self.0.as_ptr(), n16) }.is_null()
    }
}

// ---------------------------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------------------------

/// Port counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets dropped by the device because RX queues were full.
    pub imissed: u64,
    /// Receive errors.
    pub ierrors: u64,
    /// Transmit errors.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// Counters of port `port_id` (`rte_eth_stats_get`); callable from any thread (the
/// control socket reads them while workers run).
pub fn port_stats(port_id: u16) -> Result<PortStats> {
    let mut s = sys::rte_eth_stats::default();
    // SAFETY: s is a valid out-pointer; an invalid port id is reported as an error.
    let ret = unsafe { sys::rte_eth_stats_get(port_id, &mut s) };
    check("rte_eth_stats_get", ret, || format!("port id {port_id}"))?;
    Ok(PortStats {
        ipackets: s.ipackets,
        opackets: s.opackets,
        ibytes: s.ibytes,
        obytes: s.obytes,
        imissed: s.imissed,
        ierrors: s.ierrors,
        oerrors: s.oerrors,
        rx_nombuf: s.rx_nombuf,
    })
}

/// Link state (`rte_eth_link_get_nowait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Link up.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
}

/// RSS hash functions Spillway asks for: IPv4/IPv6 plus TCP/UDP ports (the 5-tuple).
pub fn rss_5tuple() -> u64 {
    // SAFETY: plain constants exported by the shim.
    unsafe { sys::SPW_RSS_IP | sys::SPW_RSS_TCP | sys::SPW_RSS_UDP }
}

/// The hash functions to request: `wanted` masked by what the device supports.
pub fn rss_mask(wanted: u64, supported: u64) -> u64 {
    wanted & supported
}

/// Clamps a descriptor count to a device's limits (`max` 0 = no limit) and alignment.
pub fn clamp_descriptors(requested: u16, min: u16, max: u16, align: u16) -> u16 {
    let max = if max == 0 { u16::MAX } else { max };
    let mut n = requested.clamp(min.min(max), max);
    if align > 1 {
        n = (n / align) * align;
        if n < min {
            n = n.saturating_add(align);
        }
    }
    n.max(1)
}

/// An ethdev port. Dropping it stops (if started) and closes the port.
#[derive(Debug)]
pub struct EthPort {
    port_id: u16,
    name: String,
    started: bool,
}

impl EthPort {
    /// Finds a probed port by device name: a vdev's name (the part of `--vdev` before the
    /// first comma, e.g. `net_pcap0`; a whole `--vdev` string is accepted) or a PCI address.
    pub fn by_name(device_name: &str) -> Result<EthPort> {
        let name = vdev_device_name(device_name);
        let cname = CString::new(name).map_err(|_| DpdkError {
            call: "rte_eth_dev_get_port_by_name",
            errno: libc::EINVAL,
            message: format!("port name {name:?} contains a NUL byte"),
            hint: None,
        })?;
        let mut id = 0u16;
        // SAFETY: cname is a valid C string, id a valid out-pointer.
        let ret = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret < 0 {
            let known = port_names();
            let e = DpdkError::new(
                "rte_eth_dev_get_port_by_name",
                -ret,
                format!("no port named {name:?}"),
            );
            let hint = if known.is_empty() {
                "no ports: EAL probed no device; add --vdev=net_null0 (or net_pcap0,rx_pcap=F) \
                 or bind a NIC with dpdk-devbind.py --bind=vfio-pci"
                    .to_string()
            } else {
                let names: Vec<&str> = known.iter().map(|(_, n)| n.as_str()).collect();
                format!("known ports: {}", names.join(", "))
            };
            return Err(e.with_hint(hint));
        }
        Ok(EthPort {
            port_id: id,
            name: name.to_owned(),
            started: false,
        })
    }

    /// The port id.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Device capabilities (`rte_eth_dev_info_get`).
    pub fn info(&self) -> Result<sys::rte_eth_dev_info> {
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: info is a valid, writable rte_eth_dev_info.
        let ret = unsafe { sys::rte_eth_dev_info_get(self.port_id, &mut info) };
        check("rte_eth_dev_info_get", ret, || {
            format!("port {}", self.name)
        })?;
        Ok(info)
    }

    /// Driver name (e.g. `net_pcap`).
    pub fn driver_name(&self) -> Result<String> {
        let info = self.info()?;
        if info.driver_name.is_null() {
            return Ok(String::new());
        }
        // SAFETY: driver_name points at the driver's static NUL-terminated name.
        Ok(unsafe { CStr::from_ptr(info.driver_name) }
            .to_string_lossy()
            .into_owned())
    }

    /// Most RX queues the device supports.
    pub fn max_rx_queues(&self) -> Result<u16> {
        Ok(self.info()?.max_rx_queues)
    }

    /// Configures `rx_queues` RX and `tx_queues` TX queues with `descriptors` descriptors
    /// each (clamped to the device limits), RX buffers from `pool`. With more than one RX
    /// queue, enables RSS over the 5-tuple, masked by the device's supported hash functions
    /// (none supported → a single RSS-less spread, logged).
    pub fn configure(
        &mut self,
        rx_queues: u16,
        tx_queues: u16,
        descriptors: u16,
        pool: &Mempool,
    ) -> Result<()> {
        let info = self.info()?;
        if rx_queues == 0
            || rx_queues > info.max_rx_queues
            || tx_queues == 0
            || tx_queues > info.max_tx_queues
        {
            return Err(DpdkError::new(
                "rte_eth_dev_configure",
                libc::EINVAL,
                format!(
                    "port {}: asked {rx_queues} rx / {tx_queues} tx queues, device allows 1..={} rx / 1..={} tx",
                    self.name, info.max_rx_queues, info.max_tx_queues
                ),
            ));
        }
        let mut conf = sys::rte_eth_conf::default();
        if rx_queues > 1 {
            let hf = rss_mask(rss_5tuple(), info.flow_type_rss_offloads);
            if hf != 0 {
                conf.rxmode.mq_mode = sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
                conf.rx_adv_conf.rss_conf.rss_key = ptr::null_mut();
                conf.rx_adv_conf.rss_conf.rss_hf = hf;
            } else {
                tracing::warn!(port = %self.name, "device supports no 5-tuple RSS hash; RX queues are not hashed");
            }
        }
        // SAFETY: conf is a fully initialised rte_eth_conf that DPDK copies.
        let ret = unsafe { sys::rte_eth_dev_configure(self.port_id, rx_queues, tx_queues, &conf) };
        check("rte_eth_dev_configure", ret, || {
            format!("port {}", self.name)
        })?;

        let socket = self.socket_id() as u32;
        let nb_rxd = clamp_descriptors(
            descriptors,
            info.rx_desc_lim.nb_min,
            info.rx_desc_lim.nb_max,
            info.rx_desc_lim.nb_align,
        );
        let nb_txd = clamp_descriptors(
            descriptors,
            info.tx_desc_lim.nb_min,
            info.tx_desc_lim.nb_max,
            info.tx_desc_lim.nb_align,
        );
        for q in 0..rx_queues {
            // SAFETY: port configured; null rxconf = driver defaults; pool outlives the port
            // (documented contract).
            let ret = unsafe {
                sys::rte_eth_rx_queue_setup(
                    self.port_id,
                    q,
                    nb_rxd,
                    socket,
                    ptr::null(),
                    pool.as_ptr(),
                )
            };
            check("rte_eth_rx_queue_setup", ret, || {
                format!("port {} queue {q}, {nb_rxd} descriptors", self.name)
            })?;
        }
        for q in 0..tx_queues {
            // SAFETY: port configured; null txconf = driver defaults.
            let ret = unsafe {
                sys::rte_eth_tx_queue_setup(self.port_id, q, nb_txd, socket, ptr::null())
            };
            check("rte_eth_tx_queue_setup", ret, || {
                format!("port {} queue {q}, {nb_txd} descriptors", self.name)
            })?;
        }
        Ok(())
    }

    /// Starts the port (`rte_eth_dev_start`).
    pub fn start(&mut self) -> Result<()> {
        // SAFETY: valid port id; DPDK checks the configuration state.
        let ret = unsafe { sys::rte_eth_dev_start(self.port_id) };
        check("rte_eth_dev_start", ret, || format!("port {}", self.name))?;
        self.started = true;
        Ok(())
    }

    /// Stops the port (`rte_eth_dev_stop`).
    pub fn stop(&mut self) -> Result<()> {
        // SAFETY: valid port id.
        let ret = unsafe { sys::rte_eth_dev_stop(self.port_id) };
        self.started = false;
        check("rte_eth_dev_stop", ret, || format!("port {}", self.name)).map(|_| ())
    }

    /// The port MAC address (zeros if the driver cannot report one).
    pub fn mac(&self) -> [u8; 6] {
        let mut addr = sys::rte_ether_addr::default();
        // SAFETY: addr is a valid out-pointer.
        let ret = unsafe { sys::rte_eth_macaddr_get(self.port_id, &mut addr) };
        if ret < 0 {
            return [0; 6];
        }
        addr.addr_bytes
    }

    /// The port's NUMA socket; when the device reports none (`SOCKET_ID_ANY`, virtual
    /// devices), the caller's socket or 0.
    pub fn socket_id(&self) -> i32 {
        // SAFETY: pure query; returns -1 for unknown / invalid.
        let s = unsafe { sys::rte_eth_dev_socket_id(self.port_id) };
        pick_socket(s, current_socket())
    }

    /// Enables or disables promiscuous mode.
    pub fn promiscuous(&mut self, on: bool) -> Result<()> {
        // SAFETY: valid port id.
        let (call, ret) = unsafe {
            if on {
                (
                    "rte_eth_promiscuous_enable",
                    sys::rte_eth_promiscuous_enable(self.port_id),
                )
            } else {
                (
                    "rte_eth_promiscuous_disable",
                    sys::rte_eth_promiscuous_disable(self.port_id),
                )
            }
        };
        check(call, ret, || format!("port {}", self.name)).map(|_| ())
    }

    /// Port counters.
    pub fn stats(&self) -> Result<PortStats> {
        port_stats(self.port_id)
    }

    /// Link state without waiting.
    pub fn link(&self) -> Result<LinkStatus> {
        let mut l = sys::rte_eth_link::default();
        // SAFETY: l is a valid out-pointer.
        let ret = unsafe { sys::rte_eth_link_get_nowait(self.port_id, &mut l) };
        check("rte_eth_link_get_nowait", ret, || {
            format!("port {}", self.name)
        })?;
        Ok(LinkStatus {
            up: l.link_status() != 0,
            speed_mbps: l.link_speed,
        })
    }

    /// A worker handle for RX/TX queue `queue_id` (configure and start the port first).
    pub fn queue(&self, queue_id: u16) -> DpdkQueue {
        DpdkQueue {
            port_id: self.port_id,
            queue_id,
            mac: self.mac(),
        }
    }
}

impl Drop for EthPort {
    fn drop(&mut self) {
        // SAFETY: valid port id; errors are ignored in drop.
        unsafe {
            if self.started {
                sys::rte_eth_dev_stop(self.port_id);
            }
            sys::rte_eth_dev_close(self.port_id);
        }
    }
}

/// One RX queue and one TX queue (same index) of a started port, driven by one worker.
/// Only one thread may use a given queue at a time (DPDK queues are not thread-safe), so
/// this handle is deliberately neither `Copy` nor `Clone`: take one per queue from
/// [`EthPort::queue`] and move it to its worker.
#[derive(Debug, PartialEq, Eq)]
pub struct DpdkQueue {
    /// Port id.
    pub port_id: u16,
    /// RX and TX queue index.
    pub queue_id: u16,
    /// The port MAC.
    pub mac: [u8; 6],
}

impl Port for DpdkQueue {
    type Buf = Mbuf;

    fn rx_burst(&mut self, out: &mut Burst<Mbuf>) -> usize {
        let room = out.remaining_capacity();
        if room == 0 {
            return 0;
        }
        let mut raw: [*mut sys::rte_mbuf; BURST] = [ptr::null_mut(); BURST];
        // SAFETY: raw has room ≥ `room` slots; the PMD writes up to `room` owned mbufs.
        let n = unsafe {
            sys::spw_rx_burst(self.port_id, self.queue_id, raw.as_mut_ptr(), room as u16)
        } as usize;
        let n = n.min(room);
        for &p in &raw[..n] {
            // SAFETY: the PMD handed us ownership of n valid mbufs.
            if let Some(m) = unsafe { Mbuf::from_raw(p) } {
                // n ≤ room, so this cannot fail; if it did, the mbuf is dropped (freed).
                let _ = out.try_push(m);
            }
        }
        n
    }

    fn tx_burst(&mut self, bufs: &mut Burst<Mbuf>) -> usize {
        let mut raw: [*mut sys::rte_mbuf; BURST] = [ptr::null_mut(); BURST];
        let mut n = 0;
        for (slot, m) in raw.iter_mut().zip(bufs.drain(..)) {
            *slot = m.into_raw();
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        // SAFETY: raw[..n] are owned mbufs; the PMD takes ownership of the first `sent`.
        let sent =
            unsafe { sys::spw_tx_burst(self.port_id, self.queue_id, raw.as_mut_ptr(), n as u16) }
                as usize;
        let sent = sent.min(n);
        if sent < n {
            // SAFETY: raw[sent..n] are still owned by us and freed exactly once here.
            unsafe { sys::spw_pktmbuf_free_bulk(raw.as_mut_ptr().add(sent), (n - sent) as u32) };
        }
        sent
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vdev_names() {
        assert_eq!(
            vdev_device_name("net_pcap0,rx_pcap=a.pcap,infinite_rx=1"),
            "net_pcap0"
        );
        assert_eq!(vdev_device_name("net_null0"), "net_null0");
        assert_eq!(vdev_device_name("0000:03:00.0"), "0000:03:00.0");
    }

    #[test]
    fn socket_fallback() {
        assert_eq!(pick_socket(1, Some(0)), 1);
        assert_eq!(pick_socket(-1, Some(2)), 2);
        assert_eq!(pick_socket(-1, None), 0);
    }

    #[test]
    fn rss_masking() {
        let want = rss_5tuple();
        assert_ne!(want, 0);
        assert_eq!(rss_mask(want, 0), 0);
        assert_eq!(rss_mask(want, u64::MAX), want);
        assert_eq!(rss_mask(0b1010, 0b0110), 0b0010);
    }

    #[test]
    fn descriptors() {
        assert_eq!(clamp_descriptors(1024, 0, 0, 0), 1024);
        assert_eq!(clamp_descriptors(8192, 64, 4096, 32), 4096);
        assert_eq!(clamp_descriptors(10, 64, 4096, 32), 64);
        assert_eq!(clamp_descriptors(1000, 64, 4096, 32), 992);
        assert_eq!(clamp_descriptors(0, 0, 0, 1), 1);
    }

    #[test]
    fn argv_and_hints() {
        let a = build_argv(&["--no-huge".into()]).unwrap();
        assert_eq!(a[0].to_str().unwrap(), PROGRAM_NAME);
        assert!(build_argv(&["a\0b".into()]).is_err());
        assert!(eal_hint(libc::EACCES, &[])
            .unwrap()
            .contains("--no-huge -m 512"));
        assert!(eal_hint(libc::EINVAL, &[]).is_some());
    }

    #[test]
    fn error_text() {
        let e = DpdkError::new("rte_eth_dev_start", -libc::EINVAL, "port x").with_hint("h");
        let s = e.to_string();
        assert!(s.starts_with("rte_eth_dev_start failed: port x: "), "{s}");
        assert!(s.contains("Invalid argument"), "{s}");
        assert!(s.contains("hint: h"));
    }
}
