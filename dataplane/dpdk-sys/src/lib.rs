//! Raw bindings to the system DPDK 22.11 (found with pkg-config `libdpdk`, linked as shared
//! libraries) plus a small C shim.
//!
//! What is bound, and why:
//! - **bindgen** (`shim/wrapper.h`, narrow allowlist in `build.rs`): the exported control-path
//!   functions Spillway needs — EAL init/cleanup, `rte_strerror`, `rte_thread_register`,
//!   `rte_socket_id`, `rte_lcore_count`, the lcore launch calls (`rte_eal_remote_launch`,
//!   `rte_eal_mp_wait_lcore`, `rte_eal_get_lcore_state`, `rte_get_next_lcore`,
//!   `rte_get_main_lcore`); mbuf pool create/free and mempool counters;
//!   ethdev lookup/info/configure/queue setup/start/stop/close/MAC/socket/promiscuous/stats/link;
//!   `rte_pktmbuf_free_bulk` — and the structs and constants they take (`rte_eth_conf`,
//!   `rte_eth_dev_info`, `rte_eth_stats`, `rte_ether_addr`, `rte_eth_rxconf`/`txconf`,
//!   `rte_mbuf`, `RTE_MAX_ETHPORTS`, `SOCKET_ID_ANY`, `RTE_MBUF_DEFAULT_BUF_SIZE`,
//!   `RTE_ETH_RSS_*`, `rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS`, ...).
//! - **C shim** (`shim/shim.c`, `spw_*`): DPDK's fast path is `static inline` in headers
//!   (`rte_eth_rx_burst`, `rte_eth_tx_burst`, `rte_pktmbuf_alloc`/`free`, `rte_pktmbuf_mtod`,
//!   `prepend`/`append`/`adj`/`trim`, head/tailroom) or a TLS macro (`rte_errno`,
//!   `rte_lcore_id()`), so it has no symbol to bind; the shim gives each one an exported
//!   one-line wrapper, compiled with pkg-config's cflags (same `-march` and `rte_config.h`).
//!   `SPW_RSS_IP`/`TCP`/`UDP` export the composite `RTE_ETH_RSS_*` masks.
//!
//! Poll-mode drivers (`librte_net_*`) are not linked: Debian's EAL loads every PMD from its
//! driver directory at `rte_eal_init`. Use the safe layer in `spillway_dataplane::dpdk`.
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all)]
#![allow(missing_docs, rustdoc::all)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
