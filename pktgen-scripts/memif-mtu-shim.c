/*
 * LD_PRELOAD shim that lets Pktgen-DPDK 23.03 start on net_memif ports (local.sh, memif form).
 *
 * Pktgen calls rte_eth_dev_set_mtu(port, 1500) on every port and panics when it fails.
 * DPDK 22.11's net_memif has no MTU operation, so the call returns -ENOTSUP and Pktgen
 * aborts ("Cannot set MTU 1500 on port 0, (95)Operation not supported"). memif has no MTU to
 * set: a frame is copied into ring buffers of `bsize` bytes (default 2048) and chained over
 * several buffers when longer, so a 1500-byte MTU (1514-byte frames) needs no setting.
 *
 * This shim forwards the call to DPDK and turns -ENOTSUP into success only for a port
 * whose device name starts with "net_memif" and an MTU of at most SHIM_MAX_MTU. Every other
 * result, and every other device, is returned unchanged. Pktgen itself is not modified.
 *
 * Built by local.sh: cc -shared -fPIC -O2 -o memif-mtu-shim.so memif-mtu-shim.c -ldl
 * (no DPDK headers: the two DPDK functions used are declared here with 22.11's signatures).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The largest MTU accepted without a driver operation: memif chains ring buffers, so any
 * frame Pktgen builds (at most a 9000-byte jumbo MTU with -j) fits. */
#define SHIM_MAX_MTU 9000

typedef int (*set_mtu_fn)(uint16_t port_id, uint16_t mtu);

/* rte_ethdev.h (DPDK 22.11): the name buffer holds RTE_ETH_NAME_MAX_LEN (64) bytes. */
int rte_eth_dev_get_name_by_port(uint16_t port_id, char *name);

static int is_memif(uint16_t port_id)
{
    char name[64] = {0};
    return rte_eth_dev_get_name_by_port(port_id, name) == 0 && strncmp(name, "net_memif", 9) == 0;
}

int rte_eth_dev_set_mtu(uint16_t port_id, uint16_t mtu)
{
    static set_mtu_fn real;
    if (real == NULL) {
        real = (set_mtu_fn)dlsym(RTLD_NEXT, "rte_eth_dev_set_mtu");
        if (real == NULL) {
            fprintf(stderr, "memif-mtu-shim: rte_eth_dev_set_mtu not found: %s\n", dlerror());
            return -ENOSYS;
        }
    }
    int ret = real(port_id, mtu);
    if (ret == -ENOTSUP && mtu <= SHIM_MAX_MTU && is_memif(port_id)) {
        fprintf(stderr, "memif-mtu-shim: port %u has no MTU operation; MTU %u taken as set\n",
                port_id, mtu);
        return 0;
    }
    return ret;
}
