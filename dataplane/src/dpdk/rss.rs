//! A started port's RSS as the device reports it ([`EthPort::rss_conf`]): hash functions,
//! Toeplitz key and redirection table (RETA), and the names of the hash functions
//! ([`rss_hash_names`]) that `status` and the metrics show.

use super::*;
use dpdk_sys as sys;

/// A port's RSS as its device reports it after start ([`EthPort::rss_conf`]; empty fields where it
/// reports nothing: virtual devices, one queue, RSS off): the input of [`crate::sync::Placement::choose`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RssConf {
    /// Port name (config).
    pub name: String,
    /// Hash functions the device hashes on (`rss_hf`, DPDK's `RTE_ETH_RSS_*` bits).
    pub hash_functions: u64,
    /// Toeplitz key (empty when the device reports none).
    pub key: Vec<u8>,
    /// Redirection table, queue per entry (empty when the device reports none).
    pub reta: Vec<u16>,
}


/// DPDK's names of the `RTE_ETH_RSS_*` bits 2..=17 (rte_ethdev.h; the names testpmd's
/// `show port N rss-hash` prints), bit 2 first.
const NAMES: [&str; 16] = [
    "ipv4", "ipv4-frag", "ipv4-tcp", "ipv4-udp", "ipv4-sctp", "ipv4-other", "ipv6", "ipv6-frag", "ipv6-tcp", "ipv6-udp", "ipv6-sctp", "ipv6-other", "l2-payload",
    "ipv6-ex", "ipv6-tcp-ex", "ipv6-udp-ex",
];

/// The names of the hash functions set in `rss_hf`, lowest bit first: DPDK's names for bits
/// 2..=17 (`ipv4`, `ipv4-tcp`, ...), `bit N` for any other.
pub fn rss_hash_names(rss_hf: u64) -> Vec<String> {
    (0u32..64)
        .filter(|b| rss_hf >> b & 1 == 1)
        .map(|b| NAMES.get(b.wrapping_sub(2) as usize).filter(|_| b >= 2).map_or_else(|| format!("bit {b}"), |n| n.to_string()))
        .collect()
}

impl EthPort {
    /// The port's RSS hash functions, key and redirection table as the device reports them
    /// (named by the device; the caller renames it as the config does)
    /// after [`start`](Self::start) (`rte_eth_dev_rss_hash_conf_get`,
    /// `rte_eth_dev_rss_reta_query`). A field the device does not report stays empty; a
    /// RETA whose size is not a multiple of 64 (DPDK's group size) is not read.
    pub fn rss_conf(&self) -> RssConf {
        let Ok(info) = self.info() else { return RssConf::default() };
        let (key_len, reta_len) = (usize::from(info.hash_key_size), usize::from(info.reta_size));
        let mut out = RssConf { name: self.name().to_string(), ..RssConf::default() };
        let mut key = vec![0u8; key_len.max(1)];
        let mut conf = sys::rte_eth_rss_conf { rss_key: if key_len > 0 { key.as_mut_ptr() } else { std::ptr::null_mut() }, rss_key_len: info.hash_key_size, rss_hf: 0 };
        // SAFETY: conf points at a key buffer of rss_key_len bytes (or null with length 0)
        // that outlives the call.
        let ret = unsafe { sys::rte_eth_dev_rss_hash_conf_get(self.port_id(), &mut conf) };
        if ret != 0 {
            return out;
        }
        out.hash_functions = conf.rss_hf;
        if key_len > 0 {
            key.truncate(key_len);
            out.key = key;
        }
        if reta_len == 0 || reta_len % 64 != 0 {
            return out;
        }
        let mut groups: Vec<sys::rte_eth_rss_reta_entry64> = (0..reta_len / 64).map(|_| sys::rte_eth_rss_reta_entry64 { mask: u64::MAX, reta: [0; 64] }).collect();
        // SAFETY: groups holds reta_len / 64 entries, as reta_size = reta_len requires.
        let ret = unsafe { sys::rte_eth_dev_rss_reta_query(self.port_id(), groups.as_mut_ptr(), info.reta_size) };
        if ret == 0 {
            out.reta = groups.iter().flat_map(|g| g.reta).collect();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_function_names_follow_dpdk() {
        // virtio-net's set: IPv4/IPv6 with TCP/UDP and the IPv6 extension-header variants
        let hf = 1 << 2 | 1 << 4 | 1 << 5 | 1 << 8 | 1 << 10 | 1 << 11 | 1 << 15 | 1 << 16 | 1 << 17;
        assert_eq!(rss_hash_names(hf), ["ipv4", "ipv4-tcp", "ipv4-udp", "ipv6", "ipv6-tcp", "ipv6-udp", "ipv6-ex", "ipv6-tcp-ex", "ipv6-udp-ex"]);
        assert_eq!(rss_hash_names(1 << 3 | 1 << 14), ["ipv4-frag", "l2-payload"]);
        assert_eq!(rss_hash_names(1 | 1 << 18 | 1 << 63), ["bit 0", "bit 18", "bit 63"]);
        assert!(rss_hash_names(0).is_empty());
    }
}
