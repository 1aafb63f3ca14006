/* See shim.h. */
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include "shim.h"

uint16_t spw_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port_id, queue_id, pkts, n);
}

uint16_t spw_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port_id, queue_id, pkts, n);
}

struct rte_mbuf *spw_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int spw_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, n);
}

void spw_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

void spw_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned int n)
{
	rte_pktmbuf_free_bulk(mbufs, n);
}

void *spw_pktmbuf_mtod(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, void *);
}

uint16_t spw_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

uint32_t spw_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_pkt_len(m);
}

uint16_t spw_pktmbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

char *spw_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_prepend(m, len);
}

char *spw_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

char *spw_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len);
}

int spw_pktmbuf_trim(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_trim(m, len);
}

uint16_t spw_pktmbuf_headroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_headroom(m);
}

uint16_t spw_pktmbuf_tailroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_tailroom(m);
}

int spw_errno(void)
{
	return rte_errno;
}

unsigned int spw_lcore_id(void)
{
	return rte_lcore_id();
}

const uint64_t SPW_RSS_IP = RTE_ETH_RSS_IP;
const uint64_t SPW_RSS_TCP = RTE_ETH_RSS_TCP;
const uint64_t SPW_RSS_UDP = RTE_ETH_RSS_UDP;
