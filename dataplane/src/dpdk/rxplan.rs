//! [`RxPlan`]: how a port receives and sends frames of its configured MTU (`[[ports]]
//! mtu`), decided from the device's capabilities (`rte_eth_dev_info`)
//! before its mbuf pool is created. Pure logic, tested without DPDK.
//!
//! - MTU 1500 (or any frame that fits the default 2,048-byte data room): one mbuf per
//!   frame, no offload asked (a scatter RX or multi-segment TX path can be slower).
//! - Larger, and the device reports `RTE_ETH_RX_OFFLOAD_SCATTER` and
//!   `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`: both are enabled and the pool keeps the default data
//!   room; a jumbo frame arrives in chained mbufs and leaves the same way.
//! - Otherwise: mbufs with a data room sized for the largest frame (headroom + MTU +
//!   Ethernet header + two VLAN tags), one mbuf per frame.
//! - An MTU outside the device's range, or a frame no single mbuf can hold on a device
//!   that cannot chain them: an error naming `ports[i].mtu`, the value and the range.

use dpdk_sys as sys;

/// Bytes of a frame around its IP packet in a receive buffer: the Ethernet header (14) and
/// two VLAN tags (QinQ, 8). The FCS is stripped by the device (DPDK's default).
pub const L2_MAX: u32 = 14 + 8;

/// The L2 overhead DPDK assumes when a driver reports no `max_mtu`: Ethernet header and
/// FCS (`RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN`, ethdev's `eth_dev_get_overhead_len`).
pub const DPDK_DEFAULT_OVERHEAD: u32 = 14 + 4;

/// The capabilities [`rx_plan`] reads, from `rte_eth_dev_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Smallest MTU the device accepts, bytes.
    pub min_mtu: u16,
    /// Largest MTU, bytes (`u16::MAX`: the driver reports none).
    pub max_mtu: u16,
    /// Largest frame the device receives, bytes (L2 overhead included).
    pub max_rx_pktlen: u32,
    /// RX offload capabilities (`RTE_ETH_RX_OFFLOAD_*` bits).
    pub rx_offload_capa: u64,
    /// TX offload capabilities (`RTE_ETH_TX_OFFLOAD_*` bits).
    pub tx_offload_capa: u64,
}

impl DeviceCaps {
    /// The capabilities of `info`.
    pub fn of(info: &sys::rte_eth_dev_info) -> DeviceCaps {
        DeviceCaps {
            min_mtu: info.min_mtu,
            max_mtu: info.max_mtu,
            max_rx_pktlen: info.max_rx_pktlen,
            rx_offload_capa: info.rx_offload_capa,
            tx_offload_capa: info.tx_offload_capa,
        }
    }

    /// Whether the device receives into chained mbufs and sends them.
    pub fn can_chain(&self) -> bool {
        self.rx_offload_capa & rx_scatter() != 0 && self.tx_offload_capa & tx_multi_segs() != 0
    }
}

/// `RTE_ETH_RX_OFFLOAD_SCATTER`.
pub fn rx_scatter() -> u64 {
    // SAFETY: a plain constant exported by the shim.
    unsafe { sys::SPW_RX_OFFLOAD_SCATTER }
}

/// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`.
pub fn tx_multi_segs() -> u64 {
    // SAFETY: a plain constant exported by the shim.
    unsafe { sys::SPW_TX_OFFLOAD_MULTI_SEGS }
}

/// How one port receives frames of its MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxPlan {
    /// The port MTU, bytes of IP packet (`rte_eth_conf.rxmode.mtu`).
    pub mtu: u16,
    /// Enable `RTE_ETH_RX_OFFLOAD_SCATTER` (frames larger than one mbuf arrive chained).
    pub rx_scatter: bool,
    /// Enable `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` (chained mbufs may be sent).
    pub tx_multi_seg: bool,
    /// Data room of each mbuf of the port's pool, bytes, headroom included
    /// (`rte_pktmbuf_pool_create`'s `data_room_size`).
    pub data_room: u16,
}

impl RxPlan {
    /// Bytes of EAL memory the pool's buffers take, roughly: `mbufs × (data room + 128-byte
    /// mbuf header + 64 bytes of mempool overhead)`, for the sizing advice of
    /// docs/operations.md.
    pub fn pool_bytes(&self, mbufs: u32) -> u64 {
        u64::from(mbufs) * (u64::from(self.data_room) + 192)
    }
}

/// The plan for `mtu` on a device with `caps`; `port` is the config path of the port
/// (`ports[0]`) for the error. The default data room (`RTE_MBUF_DEFAULT_BUF_SIZE`, 2,048
/// bytes + 128 of headroom) and headroom (`RTE_PKTMBUF_HEADROOM`) are DPDK's.
pub fn rx_plan(port: &str, mtu: u16, caps: &DeviceCaps) -> Result<RxPlan, String> {
    let default_room = sys::RTE_MBUF_DEFAULT_BUF_SIZE;
    let headroom = sys::RTE_PKTMBUF_HEADROOM;
    // ethdev's own check (eth_dev_validate_mtu): min_mtu ≤ mtu ≤ max_mtu and
    // mtu + overhead ≤ max_rx_pktlen.
    let overhead = if caps.max_mtu != u16::MAX && caps.max_rx_pktlen > u32::from(caps.max_mtu) {
        caps.max_rx_pktlen - u32::from(caps.max_mtu)
    } else {
        DPDK_DEFAULT_OVERHEAD
    };
    let hi = u32::from(caps.max_mtu).min(caps.max_rx_pktlen.saturating_sub(overhead));
    if u32::from(mtu) < u32::from(caps.min_mtu) || u32::from(mtu) > hi {
        return Err(format!(
            "{port}.mtu = {mtu}: must be in {}..={hi} for this device (its largest frame is {} bytes)",
            caps.min_mtu, caps.max_rx_pktlen
        ));
    }
    let frame = u32::from(mtu) + L2_MAX;
    if frame + headroom <= default_room {
        return Ok(RxPlan { mtu, rx_scatter: false, tx_multi_seg: false, data_room: default_room as u16 });
    }
    if caps.can_chain() {
        return Ok(RxPlan { mtu, rx_scatter: true, tx_multi_seg: true, data_room: default_room as u16 });
    }
    // One mbuf per frame: round the room up to a cache line.
    let room = (frame + headroom).div_ceil(64) * 64;
    match u16::try_from(room) {
        Ok(data_room) => Ok(RxPlan { mtu, rx_scatter: false, tx_multi_seg: false, data_room }),
        Err(_) => Err(format!(
            "{port}.mtu = {mtu}: the device can neither chain mbufs (RX scatter and multi-segment TX) \
             nor take mbufs of {room} bytes (at most 65,535); lower the MTU"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(rx: u64, tx: u64) -> DeviceCaps {
        DeviceCaps { min_mtu: 68, max_mtu: u16::MAX, max_rx_pktlen: u32::MAX, rx_offload_capa: rx, tx_offload_capa: tx }
    }

    #[test]
    fn default_mtu_needs_nothing() {
        let p = rx_plan("ports[0]", 1500, &caps(u64::MAX, u64::MAX)).unwrap();
        assert_eq!(p, RxPlan { mtu: 1500, rx_scatter: false, tx_multi_seg: false, data_room: 2048 + 128 });
    }

    #[test]
    fn jumbo_chains_when_the_device_can() {
        let p = rx_plan("ports[0]", 9000, &caps(rx_scatter(), tx_multi_segs())).unwrap();
        assert!(p.rx_scatter && p.tx_multi_seg);
        assert_eq!(p.data_room, 2048 + 128);
    }

    #[test]
    fn jumbo_without_chaining_gets_big_mbufs() {
        for (rx, tx) in [(0, 0), (rx_scatter(), 0), (0, tx_multi_segs())] {
            let p = rx_plan("ports[0]", 9000, &caps(rx, tx)).unwrap();
            assert!(!p.rx_scatter && !p.tx_multi_seg);
            // headroom + 9000 + 22, rounded up to 64
            assert_eq!(p.data_room, 9152);
            assert!(u32::from(p.data_room) >= 128 + 9000 + L2_MAX);
        }
        // up to 2,048 bytes of frame fit the default room (2,176 with its 128 of headroom)
        let p = rx_plan("ports[0]", 2048 - 22, &caps(0, 0)).unwrap();
        assert_eq!((p.data_room, p.rx_scatter), (2176, false));
        let p = rx_plan("ports[0]", 2048 - 21, &caps(0, 0)).unwrap();
        assert_eq!(p.data_room, 2240);
    }

    #[test]
    fn device_limits_are_named() {
        let small = DeviceCaps { min_mtu: 68, max_mtu: 1500, max_rx_pktlen: 1518, rx_offload_capa: 0, tx_offload_capa: 0 };
        let e = rx_plan("ports[1]", 9000, &small).unwrap_err();
        assert!(e.contains("ports[1].mtu = 9000") && e.contains("68..=1500") && e.contains("1518"), "{e}");
        assert!(rx_plan("ports[1]", 1500, &small).is_ok());
        // no max_mtu: the frame limit with DPDK's default overhead
        let c = DeviceCaps { max_rx_pktlen: 9018, ..caps(0, 0) };
        assert!(rx_plan("p", 9000, &c).is_ok());
        let e = rx_plan("p", 9001, &c).unwrap_err();
        assert!(e.contains("p.mtu = 9001") && e.contains("68..=9000"), "{e}");
        let c = DeviceCaps { min_mtu: 1500, ..caps(0, 0) };
        assert!(rx_plan("p", 1280, &c).unwrap_err().contains("1500..="));
    }

    #[test]
    fn pool_memory() {
        let p = rx_plan("p", 9000, &caps(0, 0)).unwrap();
        assert_eq!(p.pool_bytes(8191), 8191 * (9152 + 192));
    }
}
