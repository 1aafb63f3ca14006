/* See shim.h. */
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <string.h>

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

/*
 * Shrinks a (possibly multi-segment) packet to `len` bytes in all: the segment holding
 * byte `len` is cut there and the segments after it are freed. rte_pktmbuf_trim only
 * trims the last segment. Returns 0, or -1 (unchanged) when len > pkt_len.
 */
int spw_pktmbuf_trim_to(struct rte_mbuf *m, uint32_t len)
{
	struct rte_mbuf *seg = m, *rest;
	uint32_t left = len;
	uint16_t nb = 1;

	if (len > m->pkt_len)
		return -1;
	while (seg->data_len < left && seg->next != NULL) {
		left -= seg->data_len;
		seg = seg->next;
		nb++;
	}
	seg->data_len = (uint16_t)left;
	rest = seg->next;
	seg->next = NULL;
	m->nb_segs = nb;
	m->pkt_len = len;
	if (rest != NULL)
		rte_pktmbuf_free(rest);
	return 0;
}

/*
 * Makes the first `len` bytes (at most pkt_len) contiguous in the first segment: bytes are
 * moved from the following segments into the first one's tailroom, and segments emptied
 * that way are freed. The packet's bytes and pkt_len are unchanged. Returns 0, or -1
 * (unchanged) when the first segment lacks the tailroom.
 */
int spw_pktmbuf_pull_up(struct rte_mbuf *m, uint32_t len)
{
	uint8_t *dst;
	uint32_t need;

	if (len > m->pkt_len)
		len = m->pkt_len;
	if (m->data_len >= len)
		return 0;
	need = len - m->data_len;
	if (rte_pktmbuf_tailroom(m) < need)
		return -1;
	dst = rte_pktmbuf_mtod_offset(m, uint8_t *, m->data_len);
	while (need > 0 && m->next != NULL) {
		struct rte_mbuf *s = m->next;
		uint16_t take = s->data_len < need ? s->data_len : (uint16_t)need;

		memcpy(dst, rte_pktmbuf_mtod(s, uint8_t *), take);
		dst += take;
		m->data_len += take;
		need -= take;
		s->data_off += take;
		s->data_len -= take;
		if (s->data_len == 0) {
			m->next = s->next;
			s->next = NULL;
			m->nb_segs--;
			rte_pktmbuf_free_seg(s);
		}
	}
	return 0;
}

int spw_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail)
{
	return rte_pktmbuf_chain(head, tail);
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
const uint64_t SPW_RX_OFFLOAD_SCATTER = RTE_ETH_RX_OFFLOAD_SCATTER;
const uint64_t SPW_TX_OFFLOAD_MULTI_SEGS = RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
