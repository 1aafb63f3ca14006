# shellcheck shell=bash
# The bare-metal path on a PCI NIC, in a QEMU TCG guest, sourced by scripts/e2e.sh.
#
# Host: the e2e topology (scripts/lib/topology.sh: clients c1/c2, L2 DSR backends b1..b4,
# bridge br0 in namespace sw) plus two taps on br0 that QEMU (run inside namespace sw) opens:
#   vtap0  multi-queue, the guest's data NIC: virtio-net-pci at 0000:00:1e.0, mq, RSS + hash
#   vmgmt0 the guest's management NIC (kernel driver): health checks and fleet sync
# Guest: virtme-ng boots Debian's linux-image-amd64 over the host's root (9p) with TCG and
# runs scripts/lib/pci_guest.sh: the operator's steps of docs/operations.md (dpdk-devbind.py,
# hugepages, spillway --check), spillway with workers = 2 on the PCI address, then the
# host's commands (pci_guest) through the shared directory.
# Namespace lb holds a second Spillway (net_af_packet on lb0): the fleet-sync peer.
# Installs what it needs (apt-get: qemu-system-x86 linux-image-amd64 busybox-static
# python3-scapy; pip: virtme-ng). Skips (not fails) only where QEMU cannot run at all.

PCI_DEV=0000:00:1e.0
PCI_MAC=02:00:00:00:00:20        # the guest's data NIC (DPDK port)
PCI_PORT_ADDR=10.200.0.20        # its port address (answered by the guest's Spillway)
PCI_MGMT_MAC=02:00:00:00:00:05   # the guest's management NIC (kernel)
PCI_MGMT_ADDR=10.200.0.5
PCI_SYNC_PORT=7946
PCI_BOOT_TIMEOUT="${PCI_BOOT_TIMEOUT:-900}"   # s: boot, setup, --check, daemon start (TCG, shared cores)
PCI_CMD_TIMEOUT="${PCI_CMD_TIMEOUT:-180}"     # s per guest command
PCI_FAULTS="${PCI_FAULTS:-1}"                 # 1: also show the sync placement check failing on a wrong placement

# pci_guest CMD...: runs CMD (bash) in the guest through its agent; prints its output and
# returns its exit status (124: no answer within PCI_CMD_TIMEOUT; 125: the VM is gone).
pci_guest() {
    local n d=$PCI_VMDIR
    n="$(date +%s%N)-$RANDOM"
    printf '%s\n' "$*" >"$d/cmd/.$n.tmp" && mv "$d/cmd/.$n.tmp" "$d/cmd/$n.sh"
    local deadline=$((SECONDS + PCI_CMD_TIMEOUT))
    while [[ ! -e "$d/out/$n.rc" ]]; do
        ((SECONDS < deadline)) || { echo "pci_guest: no answer within ${PCI_CMD_TIMEOUT} s: $*" >&2; return 124; }
        kill -0 "$PCI_VM_PID" 2>/dev/null || { echo "pci_guest: the VM is gone" >&2; return 125; }
        sleep 0.3
    done
    cat "$d/out/$n.out"
    return "$(cat "$d/out/$n.rc")"
}
pci_ctl() { pci_guest "timeout 60 $SPILLWAYCTL_BIN --socket $PCI_SOCKET $*"; }
# pci_qmp CMD-JSON: one QMP command to the guest's QEMU (after qmp_capabilities).
pci_qmp() {
    "$SPW_PYTHON" - "$PCI_VMDIR/qmp.sock" "$1" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect(sys.argv[1]); f = s.makefile("rw")
f.readline()
for c in ('{"execute":"qmp_capabilities"}', sys.argv[2]):
    f.write(c + "\n"); f.flush()
    while True:
        r = json.loads(f.readline())
        if "return" in r or "error" in r:
            break
    if "error" in r:
        sys.exit("QMP error: %s" % r["error"])
print(json.dumps(r["return"]))
PY
}
# pci_status_py PYEXPR: prints PYEXPR evaluated over the guest's `status --json` (as r).
pci_status_py() { pci_ctl status --json | "$SPW_PYTHON" -c "import json,sys; r=json.load(sys.stdin); print($1)"; }
# pci_vip_ready: the guest's VIP is ready (`vip show --json`).
pci_vip_ready() { pci_ctl vip show --json | "$SPW_PYTHON" -c "import json,sys; r=json.load(sys.stdin); sys.exit(0 if r and all(v['ready'] for v in r) else 1)"; }

# Installs QEMU, the kernel, busybox, scapy and virtme-ng when missing.
pci_install() {
    local pk=() p
    for p in qemu-system-x86 linux-image-amd64 busybox-static python3-scapy; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || pk+=("$p")
    done
    if ((${#pk[@]})); then
        topo_log "pci: installing ${pk[*]}"
        export DEBIAN_FRONTEND=noninteractive
        timeout 900 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${pk[@]}" >"$SPW_LOG_DIR/apt.log" 2>&1 9>&- ||
            { timeout 600 apt-get update -q >>"$SPW_LOG_DIR/apt.log" 2>&1 9>&- &&
              timeout 900 apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${pk[@]}" >>"$SPW_LOG_DIR/apt.log" 2>&1 9>&-; } || true
    fi
    if ! command -v vng >/dev/null; then
        topo_log "pci: installing virtme-ng (pip)"
        timeout 600 "$SPW_PYTHON" -m pip install -q --break-system-packages virtme-ng >"$SPW_LOG_DIR/pip.log" 2>&1 9>&- || true
    fi
}
# Prints why QEMU cannot run here and succeeds; fails when it can.
pci_cannot_run() {
    [[ "$(uname -m)" == x86_64 ]] || { echo "not an x86_64 host ($(uname -m))"; return 0; }
    [[ -c /dev/net/tun ]] || { echo "no /dev/net/tun (taps for the guest's NICs)"; return 0; }
    command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 missing and apt-get could not install qemu-system-x86 (log: $SPW_LOG_DIR/apt.log)"; return 0; }
    command -v vng >/dev/null || { echo "vng missing and pip could not install virtme-ng (log: $SPW_LOG_DIR/pip.log)"; return 0; }
    compgen -G '/boot/vmlinuz-*' >/dev/null || { echo "no kernel in /boot and apt-get could not install linux-image-amd64"; return 0; }
    return 1
}

# pci_config FILE ROLE: the Spillway config of the guest (ROLE guest: the PCI port,
# 2 workers, hugepages) or of the sync peer (ROLE peer: net_af_packet on lb0, 1 worker).
# Same services on both (fleet sync requires equal routing).
pci_config() {
    local f="$1" role="$2" b
    {
        if [[ "$role" == guest ]]; then
            printf '%s\n' "# The guest's Spillway: the PCI NIC bound to a DPDK driver, hugepages (no --no-huge)." \
                "[dataplane]" "eal_args = []" "workers = 2" "idle_sleep_us = 20" "socket = \"$PCI_SOCKET\"" "" \
                "[[ports]]" 'name = "pci0"' "device = \"$PCI_DEV\"" "address = \"$PCI_PORT_ADDR\"" "" \
                "[metrics]" 'listen = "127.0.0.1:9101"' "" \
                "[sync]" "listen = \"$PCI_MGMT_ADDR:$PCI_SYNC_PORT\"" "peers = [\"$SPW_MGMT_ADDR:$PCI_SYNC_PORT\"]"
        else
            printf '%s\n' "# The fleet-sync peer: a host namespace on net_af_packet." \
                "[dataplane]" 'eal_args = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci"]' "workers = 1" "idle_sleep_us = 20" "socket = \"$SPW_SOCKET\"" "" \
                "[[ports]]" 'name = "lb0"' 'device = "net_af_packet0,iface=lb0"' "address = \"$SPW_PORT_ADDR\"" "mac = \"$SPW_LB_MAC\"" "" \
                "[sync]" "listen = \"$SPW_MGMT_ADDR:$PCI_SYNC_PORT\"" "peers = [\"$PCI_MGMT_ADDR:$PCI_SYNC_PORT\"]"
        fi
        printf '%s\n' "key_file = \"$PCI_VMDIR/sync.key\"" "startup_sync_timeout_sec = 3" "" \
            "[conntrack]" "# closed connections stay listed long enough for the placement checks" "tcp_closing_timeout_sec = 300" "" \
            "[[services]]" 'name = "web"' "vip = \"$SPW_VIP\"" "port = $SPW_VIP_PORT" 'protocol = "tcp"' "" \
            "[services.health_check]" 'type = "http"' 'path = "/healthz"' "check_interval_sec = 2.0" "timeout_sec = 1.0" \
            "healthy_threshold = 1" "unhealthy_threshold = 3"
        for b in "${SPW_BACKENDS[@]}"; do
            printf '\n[[services.backends]]\nname = "%s"\naddress = "%s"\nmac = "%s"\n' "$b" "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}"
        done
    } >"$f"
}

# Boots the guest in namespace sw (its taps on br0); waits until its daemon was started.
pci_boot() {
    local d=$PCI_VMDIR t kernel qemu
    nsx sw ip tuntap add vtap0 mode tap multi_queue
    nsx sw ip tuntap add vmgmt0 mode tap
    for t in vtap0 vmgmt0; do
        nssysctl sw "net.ipv6.conf.$t.disable_ipv6=1"
        nsx sw ip link set "$t" master br0 up
    done
    kernel="$(ls /boot/vmlinuz-* | sort -V | tail -n1)"
    topo_log "pci: booting $kernel with TCG (log $d/vm.log)"
    qemu="-cpu max -netdev tap,id=d0,ifname=vtap0,script=no,downscript=no,queues=2,vhost=off"
    qemu+=" -device virtio-net-pci,netdev=d0,mq=on,vectors=6,rss=on,hash=on,addr=0x1e,mac=$PCI_MAC"
    qemu+=" -netdev tap,id=m0,ifname=vmgmt0,script=no,downscript=no,vhost=off -device virtio-net-pci,netdev=m0,mac=$PCI_MGMT_MAC"
    qemu+=" -qmp unix:$d/qmp.sock,server=on,wait=off"
    ip netns exec "$(ns sw)" setsid vng -r "$kernel" --disable-kvm --disable-microvm --cpus 2 --memory 2G --force-9p \
        --rwdir="$d" --qemu-opts="$qemu" -e "bash $SPW_LIB_DIR/pci_guest.sh $d" </dev/null >"$d/vm.log" 2>&1 9>&- &
    PCI_VM_PID=$!
    local deadline=$((SECONDS + PCI_BOOT_TIMEOUT))
    while [[ ! -e "$d/started" ]]; do
        if ((SECONDS >= deadline)) || ! kill -0 "$PCI_VM_PID" 2>/dev/null; then
            tail -n 30 "$d/vm.log" "$d/guest.log" 2>/dev/null | sed 's/^/    /'
            e2e_fail "the guest did not reach its daemon start within ${PCI_BOOT_TIMEOUT} s (or QEMU exited)"
        fi
        sleep 1
    done
    topo_log "pci: guest up after $((SECONDS - PCI_T0)) s (setup exit $(cat "$d/setup.rc"), --check exit $(cat "$d/check.rc"), driver $(cat "$d/driver" 2>/dev/null))"
}
# Stops the guest's daemon and the VM (the guest powers off when its agent returns).
pci_shutdown() {
    [[ -n "${PCI_VM_PID:-}" ]] || return 0
    touch "$PCI_VMDIR/stop"
    local i
    for ((i = 0; i < 1200; i++)); do kill -0 "$PCI_VM_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$PCI_VM_PID" 2>/dev/null; then
        topo_log "pci: the VM did not power off within 120 s; killing it"
        kill -TERM -- "-$PCI_VM_PID" 2>/dev/null || true; sleep 1; kill -KILL -- "-$PCI_VM_PID" 2>/dev/null || true
    fi
    PCI_VM_PID=""
}

# _n_of_n "N M": N == M > 0.
_n_of_n() { local n m; read -r n m <<<"$1"; [[ -n "$m" && "$m" -gt 0 && "$n" == "$m" ]]; }
# pci_wait TIMEOUT CMD...: until CMD succeeds (1 s apart).
pci_wait() {
    local deadline=$((SECONDS + $1)); shift
    while ((SECONDS < deadline)); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
    return 1
}
pci_status_true() { [[ "$(pci_status_py "$1")" == True ]]; }
# pci_snapshot PREFIX: the guest's status --json and flows show --json to PREFIX.*.json.
pci_snapshot() {
    pci_ctl status --json >"$1.status.json"
    pci_ctl flows show --json --limit 5000 >"$1.flows.json"
}
pci_placement() { "$SPW_PYTHON" "$SPW_LIB_DIR/rss_predict.py" --status "$1.status.json" --flows "$1.flows.json" "${@:2}"; }
# pci_sync_round NAME: the guest's table flushed, new connections through the peer, then
# the guest's status and flows to $SPW_LOG_DIR/NAME.*.json.
pci_sync_round() {
    pci_ctl flows flush >/dev/null || true
    run_clients "${PCI_SYNC_REQUESTS:-60}" >/dev/null || true
    sleep 3   # the peer's batches (at most 2 ms) and the guest's sync thread
    pci_snapshot "$SPW_LOG_DIR/$1"
}
# pci_restart_guest_daemon ENV: the guest's spillway restarted with ENV (NAME=VALUE or "").
pci_restart_guest_daemon() {
    local d=$PCI_VMDIR
    pci_guest "kill -TERM \$(cat $d/spillway.pid); while kill -0 \$(cat $d/spillway.pid) 2>/dev/null; do sleep 0.2; done
        rm -f $d/spillway.rc; (env $1 $SPILLWAY_BIN --config $d/spillway.toml --socket $PCI_SOCKET >>$d/spillway.log 2>&1 </dev/null & echo \$! >$d/spillway.pid; wait \$!; echo \$? >$d/spillway.rc) >/dev/null 2>&1 &" >/dev/null
    pci_wait 300 pci_ctl status || e2e_fail "the guest's daemon ($1) did not answer within 300 s"
}

## pci: the bare-metal path in a QEMU TCG guest: virtio-net-pci bound with dpdk-devbind (uio_pci_generic without IOMMU), hugepages, spillway --check, 2 workers on RSS queues; requests answered, keep-alive on one backend, both workers busy, every flow on the worker the device's key and RETA give it, link down/up logged/counted/shown and withdrawing readiness, ICMP errors and fragments of tracked flows at their flow's backend (redirected to the owning worker), synced entries placed by the RETA (and the check failing on a wrong placement)
e2e_pci() {
    PCI_T0=$SECONDS
    pci_install
    local why
    if why="$(pci_cannot_run)"; then e2e_skip "QEMU cannot run here: $why"; fi
    PCI_VMDIR="$(mktemp -d /tmp/spw-e2e-pci.XXXXXX)"
    mkdir -p "$PCI_VMDIR/cmd" "$PCI_VMDIR/out"
    PCI_SOCKET=/run/spillway-pci-guest.sock
    PCI_VM_PID=""
    # the VM goes before the topology (its taps are in namespace sw); the logs are kept
    trap 'pci_shutdown; cp -a "$PCI_VMDIR"/{guest.log,spillway.log,vm.log,check.out} "$SPW_LOG_DIR/" 2>/dev/null; rm -rf "$PCI_VMDIR"' EXIT
    SPW_CURL_CONNECT_TIMEOUT=5 SPW_CURL_MAX_TIME=15
    topo_up
    head -c 32 /dev/urandom >"$PCI_VMDIR/sync.key"; chmod 0600 "$PCI_VMDIR/sync.key"
    pci_config "$PCI_VMDIR/spillway.toml" guest
    printf '%s\n' "PCI=$PCI_DEV" "SPILLWAY_BIN=$SPILLWAY_BIN" "SPILLWAYCTL_BIN=$SPILLWAYCTL_BIN" \
        "MGMT_MAC=$PCI_MGMT_MAC" "MGMT_ADDR=$PCI_MGMT_ADDR" "SOCKET=$PCI_SOCKET" >"$PCI_VMDIR/guest.env"
    pci_boot
    local d=$PCI_VMDIR L=$SPW_LOG_DIR line s0 rx total failed c fault t
    echo "  guest driver: $(cat "$d/driver" 2>/dev/null)"
    e2e_check "operator setup in the guest (dpdk-devbind.py, hugepages) succeeded" _eq "$(cat "$d/setup.rc")" 0
    e2e_check "spillway --check passes on the PCI config" _eq "$(cat "$d/check.rc")" 0
    pci_wait 300 pci_ctl status || { tail -n 30 "$d/spillway.log" | sed 's/^/    /'; e2e_fail "the guest's spillway did not answer status within 300 s"; }
    topo_log "pci: guest daemon ready after $((SECONDS - PCI_T0)) s"
    pci_wait 120 pci_status_true "all(b['healthy'] for b in r['backends'])" || e2e_fail "backends not healthy in the guest within 120 s"

    # --- the device as status and /metrics show it --------------------------------------
    pci_ctl status >"$L/status0.txt"
    sed -n '/^PORTS/,/^$/p' "$L/status0.txt" | sed 's/^/    /'
    s0="$(pci_status_py "r['ports'][0]['rss']['rx_queues'], len(r['ports'][0]['rss']['key'])//2, len(r['ports'][0]['rss']['reta']), r['ports'][0]['rss']['sync_placement'], r['ports'][0]['link_speed_mbps']")"
    e2e_check "status --json: 2 queues, 40-byte key, 128-entry RETA, placement rss, speed 0 = unknown: $s0" _eq "$s0" "2 40 128 rss 0"
    e2e_check "status text shows link, RSS hash types, key, RETA and placement" grep -q "pci0: link up, speed unknown, 0 link changes; 2 RX queues, RSS ipv4 .*ipv4-tcp.*, key 40 bytes (driver default), RETA 128 entries; sync placement: rss" "$L/status0.txt"
    pci_guest "curl -s http://127.0.0.1:9101/metrics" >"$L/metrics0.txt" || true
    e2e_check "/metrics: port_rss_info with sync_placement rss" grep -q 'spillway_port_rss_info{port="pci0",hash_types="ipv4,.*sync_placement="rss"} 1' "$L/metrics0.txt"
    e2e_check "/metrics: port_rss_reta_size 128" grep -q 'spillway_port_rss_reta_size{port="pci0"} 128' "$L/metrics0.txt"
    e2e_check "the start log names the RSS and the placement" grep -q 'RSS.*reta_size=128.*sync_placement=rss' "$d/spillway.log"
    e2e_check "no raw unknown speed (4294967295) in the log" bash -c "! grep -q 4294967295 '$d/spillway.log'"

    # --- traffic through the PCI port -----------------------------------------------------
    t=$SECONDS
    run_clients "${PCI_REQUESTS:-200}" || true
    run_keepalive_clients 4 10 || true
    topo_log "pci: traffic phase $((SECONDS - t)) s"
    total="$(wc -l <"$SPW_REQUESTS")"; failed="$(awk -F'\t' '$5 != "200"' "$SPW_REQUESTS" | wc -l)"
    e2e_check "every request answered: $((total - failed)) of $total" _eq "$failed" 0
    e2e_check "keep-alive connections stay on one backend ($(ka_split_connections | wc -l) split)" _eq "$(ka_split_connections | wc -l)" 0
    e2e_check "requests spread over the backends: $(all_backends)" _eq "$(all_backends)" "b1 b2 b3 b4"
    pci_snapshot "$L/traffic"
    rx="$("$SPW_PYTHON" -c "import json; print(' '.join(str(w['rx']) for w in json.load(open('$L/traffic.status.json'))['workers']))")"
    e2e_check "both workers receive traffic (rx per worker: $rx)" "$SPW_PYTHON" -c "import sys; v = [int(x) for x in '$rx'.split()]; sys.exit(0 if len(v) == 2 and all(x > 50 for x in v) else 1)"
    line="$(pci_placement "$L/traffic")"; echo "  $line"
    e2e_check "every flow on the worker the device's key and RETA give it" pci_placement "$L/traffic" --require-all >/dev/null
    # one entry per 5-tuple: a client port that a later connection reused (the kernel may
    # pick it again once the first is closed) is one entry for both
    local conns tuples
    conns="$(awk -F'\t' '{print $3}' "$SPW_REQUESTS" | sort -u | wc -l)"
    tuples="$(awk -F'\t' '{print $2, $7}' "$SPW_REQUESTS" | sort -u | wc -l)"
    e2e_check "the tables hold every 5-tuple used: $tuples (of $conns connections)" grep -q " of $tuples entries" <<<"$line"

    # --- ICMP errors and fragments that RSS gives the wrong worker -----------------------
    # A router's "fragmentation needed" quoting a tracked flow lands on the queue of the
    # router's address, a fragment on the queue of its 2-tuple: the worker that gets one
    # for a flow it does not own hands it to the owner through its redirect ring
    # (fastpath/worker/redirect.rs). b1's weight goes up first, so a worker without the
    # flow's entry would send most of them to b1 (the new Maglev pick, the 3-tuple hash);
    # they must reach the flow's own backend (scripts/lib/pci_icmp_frag.py, captures on
    # the backends), n of n.
    pci_ctl backend set web b1 weight=1000 >/dev/null || e2e_fail "backend set web b1 weight=1000 failed"
    local b pids=() counted n_icmp n_frag
    for b in "${SPW_BACKENDS[@]}"; do
        ip netns exec "$(ns "$b")" timeout 120 tcpdump -i eth0 -n -U -w "$L/icmpfrag-$b.pcap" 'icmp or (ip[6:2] & 0x3fff != 0)' >/dev/null 2>&1 9>&- &
        pids+=($!)
    done
    sleep 2
    nsx c1 "$SPW_PYTHON" "$SPW_LIB_DIR/pci_icmp_frag.py" send --flows "$L/traffic.flows.json" --iface eth0 \
        --src-mac "${SPW_MAC[c1]}" --dst-mac "$PCI_MAC" --max 16 >"$L/icmpfrag-sent.json" || true
    sleep 8
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    counted="$("$SPW_PYTHON" "$SPW_LIB_DIR/pci_icmp_frag.py" count --sent "$L/icmpfrag-sent.json" \
        $(for b in "${SPW_BACKENDS[@]}"; do printf -- '--pcap %s=%s ' "$b" "$L/icmpfrag-$b.pcap"; done) 2>&1)" || true
    sed 's/^/  /' <<<"$counted"
    pci_ctl status --json >"$L/icmpfrag.status.json" || true
    pci_ctl backend set web b1 weight=50 >/dev/null || e2e_fail "backend set web b1 weight=50 failed"
    n_icmp="$(sed -n 's/^icmp: \([0-9]*\) of \([0-9]*\) .*/\1 \2/p' <<<"$counted")"
    n_frag="$(sed -n 's/^fragments: \([0-9]*\) of \([0-9]*\) .*/\1 \2/p' <<<"$counted")"
    e2e_check "ICMP errors quoting tracked flows reach the flow's backend: ${n_icmp/ / of }" _n_of_n "$n_icmp"
    e2e_check "fragmented segments of tracked flows complete at the flow's backend: ${n_frag/ / of }" _n_of_n "$n_frag"
    line="$("$SPW_PYTHON" -c "import json; w=json.load(open('$L/icmpfrag.status.json'))['workers']; print(' '.join(str(x.get('redirected', 0)) for x in w), sum(dict(x['drops']).get('redirect_ring_full', 0) for x in w))")"
    echo "  redirected per worker, redirect_ring_full: $line"
    e2e_check "packets were handed to their flow's worker (redirected per worker, ring-full drops: $line)" \
        "$SPW_PYTHON" -c "import sys; v=[int(x) for x in '$line'.split()]; sys.exit(0 if sum(v[:-1]) > 0 and v[-1] == 0 else 1)"

    # --- link down and up (QEMU monitor set_link) -----------------------------------------
    pci_qmp '{"execute":"set_link","arguments":{"name":"d0","up":false}}' >/dev/null || e2e_fail "QMP set_link off failed"
    e2e_check "status --json: link down, 1 change (within 30 s)" pci_wait 30 pci_status_true "r['ports'][0]['link_up'] is False and r['ports'][0]['link_changes'] == 1"
    pci_ctl status >"$L/status-down.txt" || true
    pci_wait 15 bash -c "! $(declare -f pci_guest pci_ctl pci_vip_ready); PCI_VMDIR=$d PCI_VM_PID=$PCI_VM_PID PCI_CMD_TIMEOUT=$PCI_CMD_TIMEOUT SPILLWAYCTL_BIN=$SPILLWAYCTL_BIN PCI_SOCKET=$PCI_SOCKET SPW_PYTHON=$SPW_PYTHON pci_vip_ready" || true
    pci_ctl vip show >"$L/vip-down.txt" || true
    e2e_check "status text: link down, 1 link change" grep -q "pci0: link down, .*1 link changes" "$L/status-down.txt"
    e2e_check "the daemon logged the link down" grep -q 'link down' "$d/spillway.log"
    e2e_check "readiness on link loss: the VIP is not ready (port pci0: link down)" grep -q "port pci0: link down" "$L/vip-down.txt"
    pci_qmp '{"execute":"set_link","arguments":{"name":"d0","up":true}}' >/dev/null || e2e_fail "QMP set_link on failed"
    e2e_check "status --json: link up, 2 changes (within 30 s)" pci_wait 30 pci_status_true "r['ports'][0]['link_up'] is True and r['ports'][0]['link_changes'] == 2"
    e2e_check "the daemon logged the link up" grep -q 'link up' "$d/spillway.log"
    pci_guest "curl -s http://127.0.0.1:9101/metrics" >"$L/metrics1.txt" || true
    e2e_check "/metrics: port_link_changes_total 2" grep -q 'spillway_port_link_changes_total{port="pci0"} 2' "$L/metrics1.txt"
    e2e_check "the VIP is ready again once the link is up" pci_wait 30 pci_vip_ready
    SPW_REQUESTS="$L/after-link.tsv" run_clients 20 || true
    e2e_check "requests after the link came back answered: $(awk -F'\t' '$5 == "200"' "$L/after-link.tsv" | wc -l) of 20" _eq "$(awk -F'\t' '$5 == "200"' "$L/after-link.tsv" | wc -l)" 20

    # --- fleet sync: a second Spillway (namespace lb, net_af_packet) as the peer ---------
    pci_config "$SPW_CONFIG" peer
    spillway_start
    spillway_wait_ready 60
    # clients now reach the VIP through the peer (its MAC, static): the guest only syncs
    for c in "${SPW_CLIENTS[@]}"; do nsx "$c" ip neigh replace "$SPW_VIP" lladdr "$SPW_LB_MAC" dev eth0 nud permanent; done
    SPW_REQUESTS="$L/sync.tsv" pci_sync_round sync
    line="$(pci_placement "$L/sync" --state synced)"; echo "  synced entries: $line"
    e2e_check "the guest received synced entries" bash -c "! grep -q ' of 0 entries' <<<'$line'"
    e2e_check "synced entries land only on the worker RSS gives the flow" pci_placement "$L/sync" --state synced --require-all >/dev/null
    if [[ "$PCI_FAULTS" == 1 ]]; then
        for fault in broadcast shifted-reta; do
            pci_restart_guest_daemon "SPILLWAY_FAULT_SYNC_PLACEMENT=$fault"
            SPW_REQUESTS="$L/sync-$fault.tsv" pci_sync_round "sync-$fault"
            line="$(pci_placement "$L/sync-$fault" --state synced)"; echo "  synced, placement forced to $fault: $line"
            e2e_check "the placement check FAILS with the placement forced to $fault" bash -c "! $SPW_PYTHON $SPW_LIB_DIR/rss_predict.py --status $L/sync-$fault.status.json --flows $L/sync-$fault.flows.json --state synced --require-all >/dev/null"
        done
    fi
    spillway_stop
    for c in "${SPW_CLIENTS[@]}"; do nsx "$c" ip neigh del "$SPW_VIP" dev eth0 2>/dev/null || true; done

    pci_shutdown
    e2e_check "the guest's spillway stopped cleanly on SIGTERM (exit $(cat "$d/spillway.rc" 2>/dev/null))" grep -qx 0 "$d/spillway.rc"
    echo "  pci: total $((SECONDS - PCI_T0)) s"
    e2e_done
}
