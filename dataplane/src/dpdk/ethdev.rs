//! [`EthPort`] (an ethdev port: configure, start, stats, link) and [`DpdkQueue`] (one
//! RX + TX queue pair, the [`crate::fastpath::port::Port`] of a worker).

use super::error::*;
use super::*;
use crate::fastpath::port::{Burst, Port, BURST};
use dpdk_sys as sys;
use std::ffi::{CStr, CString};
use std::ptr;

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
    /// Configured with `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` ([`RxPlan::tx_multi_seg`]).
    tx_multi_seg: bool,
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
            // A kernel interface the device names is missing: the probe failed for that.
            let iface = check_interfaces(device_name, std::path::Path::new(SYS_CLASS_NET));
            let hint = if let Err(missing) = iface {
                missing
            } else if known.is_empty() && device_name.contains(',') {
                format!(
                    "the device {device_name:?} did not probe: DPDK's log lines above say why \
                     (a device argument the driver does not know, a file or interface it cannot open)"
                )
            } else if known.is_empty() {
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
            tx_multi_seg: false,
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
    /// (none supported → a single RSS-less spread, logged). MTU 1500, no RX scatter (see
    /// [`EthPort::configure_plan`]).
    pub fn configure(
        &mut self,
        rx_queues: u16,
        tx_queues: u16,
        descriptors: u16,
        pool: &Mempool,
    ) -> Result<()> {
        let plan = RxPlan { mtu: 1500, rx_scatter: false, tx_multi_seg: false, data_room: sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16 };
        self.configure_plan(rx_queues, tx_queues, descriptors, pool, &plan)
    }

    /// The [`RxPlan`] of this device for `mtu`; `path` names the port in
    /// the error (`ports[0]`). Decide it before creating the port's pool: the pool's data
    /// room comes from it.
    pub fn rx_plan(&self, path: &str, mtu: u16) -> Result<RxPlan> {
        let info = self.info()?;
        rx_plan(path, mtu, &DeviceCaps::of(&info)).map_err(|m| DpdkError::new("rte_eth_dev_configure", libc::EINVAL, m))
    }

    /// [`EthPort::configure`] with the MTU and offloads of `plan`: `rxmode.mtu`, and
    /// `RTE_ETH_RX_OFFLOAD_SCATTER` / `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` when it asks for them.
    /// `pool` must have the plan's data room.
    pub fn configure_plan(
        &mut self,
        rx_queues: u16,
        tx_queues: u16,
        descriptors: u16,
        pool: &Mempool,
        plan: &RxPlan,
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
        conf.rxmode.mtu = u32::from(plan.mtu);
        if plan.rx_scatter {
            conf.rxmode.offloads |= rx_scatter();
        }
        if plan.tx_multi_seg {
            conf.txmode.offloads |= tx_multi_segs();
        }
        // SAFETY: conf is a fully initialised rte_eth_conf that DPDK copies.
        let ret = unsafe { sys::rte_eth_dev_configure(self.port_id, rx_queues, tx_queues, &conf) };
        check("rte_eth_dev_configure", ret, || {
            format!("port {}, MTU {}, RX scatter {}, multi-segment TX {}", self.name, plan.mtu, plan.rx_scatter, plan.tx_multi_seg)
        })?;
        self.tx_multi_seg = plan.tx_multi_seg;

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
        port_link(self.port_id)
    }

    /// Whether the port was configured to send chained mbufs
    /// (`RTE_ETH_TX_OFFLOAD_MULTI_SEGS`, [`RxPlan::tx_multi_seg`]).
    pub fn tx_multi_seg(&self) -> bool {
        self.tx_multi_seg
    }

    /// A worker handle for RX/TX queue `queue_id` (configure and start the port first).
    pub fn queue(&self, queue_id: u16) -> DpdkQueue {
        DpdkQueue {
            port_id: self.port_id,
            queue_id,
            mac: self.mac(),
            pool: None,
            tx_multi_seg: self.tx_multi_seg,
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
    /// The port sends chained mbufs (configured with `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`).
    pub tx_multi_seg: bool,
    /// Pool of [`Port::alloc_tx`] (frames the worker originates); `None`: it answers `None`.
    pub pool: Option<std::ptr::NonNull<sys::rte_mempool>>,
}

// SAFETY: the pool pointer is only used for `rte_pktmbuf_alloc`, which is thread-safe, and
// the pool outlives every queue (main drops pools after joining the workers).
unsafe impl Send for DpdkQueue {}

impl DpdkQueue {
    /// Lets [`Port::alloc_tx`] take mbufs from `pool`, which must outlive this queue.
    pub fn with_pool(mut self, pool: &super::Mempool) -> DpdkQueue {
        self.pool = std::ptr::NonNull::new(pool.as_ptr());
        self
    }
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

    fn alloc_tx(&mut self, frame: &[u8]) -> Option<Mbuf> {
        let pool = self.pool?;
        // SAFETY: a live pool (`with_pool`); returns null when empty. No error string is
        // built here: this runs on a worker.
        let p = unsafe { sys::spw_pktmbuf_alloc(pool.as_ptr()) };
        // SAFETY: a fresh mbuf we own.
        let mut m = unsafe { Mbuf::from_raw(p) }?;
        if !crate::fastpath::port::PacketBuf::append(&mut m, frame.len()) {
            return None;
        }
        crate::fastpath::port::PacketBuf::data_mut(&mut m).copy_from_slice(frame);
        Some(m)
    }

    fn tx_multi_seg(&self) -> bool {
        self.tx_multi_seg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
