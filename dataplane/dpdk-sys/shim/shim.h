/*
 * spillway dpdk-sys shim: out-of-line wrappers for DPDK's `static inline` fast-path
 * functions and macros, which bindgen cannot bind (they have no exported symbol).
 * Every function here is a one-line forward (except the two multi-segment helpers,
 * commented in shim.c); see shim.c.
 */
#ifndef SPILLWAY_DPDK_SHIM_H
#define SPILLWAY_DPDK_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

/* rte_eth_rx_burst / rte_eth_tx_burst */
uint16_t spw_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t n);
uint16_t spw_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t n);

/* mbuf alloc / free */
struct rte_mbuf *spw_pktmbuf_alloc(struct rte_mempool *mp);
int spw_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n);
void spw_pktmbuf_free(struct rte_mbuf *m);
void spw_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int n);

/* mbuf data access (first segment) */
void *spw_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t spw_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t spw_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t spw_pktmbuf_nb_segs(const struct rte_mbuf *m);
char *spw_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *spw_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *spw_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int spw_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
uint16_t spw_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t spw_pktmbuf_tailroom(const struct rte_mbuf *m);

/* multi-segment packets (jumbo frames in chained mbufs): not one-line forwards, so
 * commented in shim.c */
int spw_pktmbuf_trim_to(struct rte_mbuf *m, uint32_t len);
int spw_pktmbuf_pull_up(struct rte_mbuf *m, uint32_t len);
int spw_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);

/* per-lcore TLS: rte_errno, rte_lcore_id() */
int spw_errno(void);
unsigned int spw_lcore_id(void);

/* RTE_ETH_RSS_* are built from RTE_BIT64(), which bindgen's macro evaluator cannot
 * always expand; export the ones we use as constants. */
extern const uint64_t SPW_RSS_IP;
extern const uint64_t SPW_RSS_TCP;
extern const uint64_t SPW_RSS_UDP;
/* RTE_ETH_RX_OFFLOAD_SCATTER / RTE_ETH_TX_OFFLOAD_MULTI_SEGS, RTE_BIT64() as well. */
extern const uint64_t SPW_RX_OFFLOAD_SCATTER;
extern const uint64_t SPW_TX_OFFLOAD_MULTI_SEGS;

#endif
