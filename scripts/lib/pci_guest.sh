#!/usr/bin/env bash
# Runs INSIDE the QEMU guest of the e2e test `pci` (scripts/e2e/pci.sh), as root, started by
# `vng ... -e "bash scripts/lib/pci_guest.sh DIR"`. DIR is shared with the host (virtme-ng
# --rwdir, 9p) and holds guest.env, spillway.toml and the command queue.
#
# 1. Management NIC (kernel virtio-net, MAC $MGMT_MAC): $MGMT_ADDR/16, for health checks,
#    fleet sync and nothing else.
# 2. The operator's steps of docs/operations.md "Host preparation", the same commands:
#    bind the data NIC $PCI with dpdk-devbind.py (vfio-pci when the host can have it,
#    else uio_pci_generic; which case applies is written to DIR/driver), hugepages with
#    dpdk-hugepages.py after `mkdir -p /dev/hugepages`, `spillway --check`, then spillway.
# 3. Agent: runs each DIR/cmd/NAME.sh the host drops (bash, in name order), output to
#    DIR/out/NAME.out and exit status to DIR/out/NAME.rc, until DIR/stop appears; then
#    stops spillway with SIGTERM (its exit status to DIR/spillway.rc) and returns, which
#    powers the guest off.
set -u
DIR="$1"
exec >>"$DIR/guest.log" 2>&1
log() { printf '[guest %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
# shellcheck disable=SC1091
source "$DIR/guest.env"   # PCI SPILLWAY_BIN SPILLWAYCTL_BIN MGMT_MAC MGMT_ADDR SOCKET [SPILLWAY_ENV]
mkdir -p "$DIR/cmd" "$DIR/out" "$DIR/done"
log "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"

ip link set lo up
mgmt=""
for i in /sys/class/net/*; do
    [[ "$(cat "$i/address" 2>/dev/null)" == "$MGMT_MAC" ]] && mgmt="$(basename "$i")"
done
[[ -n "$mgmt" ]] || { log "no NIC with MAC $MGMT_MAC"; echo 1 >"$DIR/setup.rc"; exit 1; }
ip addr add "$MGMT_ADDR/16" dev "$mgmt" && ip link set "$mgmt" up
log "management NIC $mgmt: $MGMT_ADDR/16"

setup() {
    # --- docs/operations.md "Host preparation" 2-3: which driver, then bind -------------
    dpdk-devbind.py --status-dev net
    modprobe vfio-pci 2>/dev/null || true
    local drv
    if [[ -n "$(ls /sys/kernel/iommu_groups/ 2>/dev/null)" ]]; then
        drv=vfio-pci; log "IOMMU groups present: vfio-pci"
    elif [[ -e /sys/module/vfio/parameters/enable_unsafe_noiommu_mode ]]; then
        drv=vfio-pci; echo 1 >/sys/module/vfio/parameters/enable_unsafe_noiommu_mode
        log "no IOMMU, kernel has no-IOMMU mode: vfio-pci unsafe no-IOMMU mode"
    else
        drv=uio_pci_generic; modprobe uio_pci_generic
        log "no IOMMU groups and no /sys/module/vfio/parameters/enable_unsafe_noiommu_mode: uio_pci_generic"
    fi
    echo "$drv" >"$DIR/driver"
    local ifn
    ifn="$(ls "/sys/bus/pci/devices/$PCI/net/" 2>/dev/null | head -n1)"
    [[ -z "$ifn" ]] || ip link set "$ifn" down
    dpdk-devbind.py --bind="$drv" "$PCI" || return 1
    dpdk-devbind.py --status-dev net
    # --- 4: hugepages -------------------------------------------------------------------
    mkdir -p /dev/hugepages
    dpdk-hugepages.py --setup 512M || return 1
    dpdk-hugepages.py --show
    grep -q ' /dev/hugepages hugetlbfs ' /proc/mounts || { log "hugetlbfs not mounted on /dev/hugepages"; return 1; }
}
if setup; then echo 0 >"$DIR/setup.rc"; else echo 1 >"$DIR/setup.rc"; log "setup failed"; fi

# --- docs/operations.md "Checking a config", then run -----------------------------------
rc=0
"$SPILLWAY_BIN" --config "$DIR/spillway.toml" --check >"$DIR/check.out" 2>&1 || rc=$?
echo "$rc" >"$DIR/check.rc"
log "spillway --check: exit $rc"
spw_pid=""
start_spillway() {
    rm -f "$SOCKET"
    # shellcheck disable=SC2086  # SPILLWAY_ENV: NAME=VALUE words (fault injection)
    env ${SPILLWAY_ENV:-} "$SPILLWAY_BIN" --config "$DIR/spillway.toml" --socket "$SOCKET" >>"$DIR/spillway.log" 2>&1 &
    spw_pid=$!
    echo "$spw_pid" >"$DIR/spillway.pid"
    log "spillway started (pid $spw_pid, env ${SPILLWAY_ENV:-none})"
}
# SIGTERM, then its exit status in DIR/spillway.rc. A daemon the host restarted
# (pci_restart_guest_daemon in scripts/e2e/pci.sh) is not our child: the subshell that
# started it writes DIR/spillway.rc when it exits (waited for up to 60 s).
stop_spillway() {
    local pid rc=0 i
    pid="$(cat "$DIR/spillway.pid" 2>/dev/null)"
    [[ -n "$pid" ]] || return 0
    kill -TERM "$pid" 2>/dev/null
    if [[ "$pid" == "$spw_pid" ]]; then
        wait "$pid" || rc=$?
        echo "$rc" >"$DIR/spillway.rc"
    else
        for ((i = 0; i < 600; i++)); do [[ -s "$DIR/spillway.rc" ]] && break; sleep 0.1; done
        rc="$(cat "$DIR/spillway.rc" 2>/dev/null || echo still-running)"
    fi
    log "spillway stopped: exit $rc"
}
start_spillway
touch "$DIR/started"

# --- agent ------------------------------------------------------------------------------
while [[ ! -e "$DIR/stop" ]]; do
    ran=0
    for f in "$DIR"/cmd/*.sh; do
        [[ -e "$f" ]] || continue
        n="$(basename "$f" .sh)"
        rc=0
        bash "$f" >"$DIR/out/$n.out" 2>&1 || rc=$?
        mv "$f" "$DIR/done/"
        echo "$rc" >"$DIR/out/$n.rc.tmp" && mv "$DIR/out/$n.rc.tmp" "$DIR/out/$n.rc"
        ran=1
    done
    ((ran)) || sleep 0.3
done
stop_spillway
log "agent: stop"
sync
