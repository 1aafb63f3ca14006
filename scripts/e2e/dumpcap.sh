# shellcheck shell=bash
# Port capture e2e (docs/operations.md "Port capture with dpdk-dumpcap"), sourced by
# scripts/e2e.sh: a running Spillway started with dataplane.packet_capture = true on
# hugepages (a secondary process cannot map --no-huge memory) is captured by DPDK's own
# dpdk-dumpcap (Debian package `dpdk`), a DPDK secondary process, and the capture is read
# back with tcpdump.
#
# The test reserves DUMPCAP_HUGEPAGES 2 MiB hugepages on top of the host's own, mounts a
# private hugetlbfs for them, and gives both back when it ends (failure and interruption
# included). It fails, with the reason, when the pages cannot be had (after compacting
# memory and asking again, five times).

DUMPCAP_HUGEPAGES="${DUMPCAP_HUGEPAGES:-64}"    # 128 MiB: the daemon's mbuf pool and dumpcap's
DUMPCAP_PREFIX=spw-e2e-dumpcap                   # EAL --file-prefix of daemon and dumpcap
_dumpcap_nr=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
_dumpcap_dir() { printf '%s/dumpcap-huge' "$SPW_RUN_DIR"; }
_dumpcap_saved() { printf '%s/dumpcap-hugepages.saved' "$SPW_RUN_DIR"; }

# dumpcap_hugepages_release: unmount the private hugetlbfs and give the reserved pages
# back (the count saved before the reservation). Also undoes what a killed run left.
dumpcap_hugepages_release() {
    local dir saved
    dir="$(_dumpcap_dir)"; saved="$(_dumpcap_saved)"
    if mountpoint -q "$dir" 2>/dev/null; then
        umount "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null || topo_log "warning: cannot unmount $dir"
    fi
    rmdir "$dir" 2>/dev/null || true
    rm -rf "/var/run/dpdk/$DUMPCAP_PREFIX" 2>/dev/null || true
    if [[ -s "$saved" ]]; then
        echo "$(cat "$saved")" >"$_dumpcap_nr" 2>/dev/null || topo_log "warning: cannot restore $_dumpcap_nr to $(cat "$saved")"
        rm -f "$saved"
    fi
}

# dumpcap_hugepages_reserve: DUMPCAP_HUGEPAGES more 2 MiB pages, on a private hugetlbfs
# mount (so the daemon's pages are files nothing else uses); fails the test when the
# kernel gives fewer.
dumpcap_hugepages_reserve() {
    local before want got dir
    dumpcap_hugepages_release
    [[ -w "$_dumpcap_nr" ]] || e2e_fail "cannot reserve hugepages: $_dumpcap_nr is not writable (root, and /sys writable, are needed: dpdk-dumpcap needs the daemon on hugepages)"
    before="$(cat "$_dumpcap_nr" 2>/dev/null)" || true
    [[ "$before" =~ ^[0-9]+$ ]] || e2e_fail "cannot reserve hugepages: cannot read the count in $_dumpcap_nr (got '$before')"
    want=$((before + DUMPCAP_HUGEPAGES))
    echo "$before" >"$(_dumpcap_saved)"
    # The kernel allocates what it can at each write; on a host whose memory is fragmented
    # (page cache), compacting it and asking again usually gets the rest.
    local try
    for ((try = 1; try <= 5; try++)); do
        echo "$want" 2>/dev/null >"$_dumpcap_nr" || true
        got="$(cat "$_dumpcap_nr" 2>/dev/null)" || true
        [[ "$got" =~ ^[0-9]+$ ]] || got="$before"
        ((got < want)) || break
        echo 1 2>/dev/null >/proc/sys/vm/compact_memory || true
        sleep 1
    done
    if ((got < want)); then
        e2e_fail "cannot reserve $DUMPCAP_HUGEPAGES 2 MiB hugepages: the kernel gave $((got - before)) (memory too fragmented or too small; free memory, or run on a host with $((DUMPCAP_HUGEPAGES * 2)) MiB to spare): dpdk-dumpcap needs the daemon on hugepages"
    fi
    dir="$(_dumpcap_dir)"
    mkdir -p "$dir"
    mount -t hugetlbfs -o "pagesize=2M,size=$((DUMPCAP_HUGEPAGES * 2))M" nodev "$dir" ||
        e2e_fail "cannot mount a hugetlbfs on $dir"
    echo "  reserved $DUMPCAP_HUGEPAGES hugepages of 2 MiB ($before -> $got), hugetlbfs on $dir"
}

# dumpcap_config FILE: the demo config on hugepages with the capture framework on.
dumpcap_config() {
    write_config "$1"
    sed -i "s|^eal_args = .*|eal_args = [\"--no-pci\", \"--huge-dir=$(_dumpcap_dir)\", \"--file-prefix=$DUMPCAP_PREFIX\"]\npacket_capture = true|" "$1"
    grep -q '^packet_capture = true' "$1" || e2e_fail "cannot write the packet_capture config"
}

## dumpcap: dpdk-dumpcap (a DPDK secondary process) attaches to Spillway started with dataplane.packet_capture = true on hugepages and captures a port: the known frames sent on a veth (RX) and a request forwarded to a backend (TX), read back with tcpdump
e2e_dumpcap() {
    command -v dpdk-dumpcap >/dev/null || e2e_fail "dpdk-dumpcap not found (Debian package dpdk)"
    trap 'set +e; [[ -n "${_dumpcap_pid:-}" ]] && kill -KILL "$_dumpcap_pid" 2>/dev/null; p="$(spillway_pid)"; [[ -n "$p" ]] && topo_kill_pid "$p" 3; dumpcap_hugepages_release' EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    dumpcap_hugepages_reserve
    topo_up
    dumpcap_config "$SPW_CONFIG"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    e2e_check "the daemon initialised the capture framework (that dumpcap attaches below shows the workers run on EAL lcores: a registered thread disables multi-process)" \
        grep -q "packet capture framework initialised" "$SPW_LOG_DIR/spillway.log"
    local file="$SPW_RUN_DIR/port.pcapng" err="$SPW_LOG_DIR/dumpcap.err" out i
    rm -f "$file"
    timeout 20 dpdk-dumpcap --file-prefix="$DUMPCAP_PREFIX" -D >"$SPW_LOG_DIR/dumpcap-D.txt" 2>&1 ||
        e2e_fail "dpdk-dumpcap -D failed: $(tail -5 "$SPW_LOG_DIR/dumpcap-D.txt")"
    e2e_check "dpdk-dumpcap -D lists the daemon's port: $(grep -m1 net_af_packet0 "$SPW_LOG_DIR/dumpcap-D.txt")" \
        grep -q '^0\. net_af_packet0' "$SPW_LOG_DIR/dumpcap-D.txt"

    timeout 40 dpdk-dumpcap --file-prefix="$DUMPCAP_PREFIX" -i net_af_packet0 -w "$file" >"$err" 2>&1 &
    _dumpcap_pid=$!
    for ((i = 0; i < 200; i++)); do   # up to 20 s for the secondary's EAL and the capture to start
        grep -q "Packets captured" "$err" 2>/dev/null && break
        kill -0 "$_dumpcap_pid" 2>/dev/null || break
        sleep 0.1
    done
    grep -q "Packets captured" "$err" || e2e_fail "dpdk-dumpcap did not start capturing: $(tail -5 "$err")"
    capture_send_frames
    nsx c1 curl -s -m 5 -o /dev/null "http://$SPW_VIP:$SPW_VIP_PORT/?dumpcap" || e2e_fail "a request to the VIP failed during the capture"
    sleep 1
    echo "  hugepages in use by the daemon and dumpcap: $(awk '/HugePages_Total/ {t = $2} /HugePages_Free/ {f = $2} END {print t - f}' /proc/meminfo) of 2 MiB"
    kill -INT "$_dumpcap_pid"; wait "$_dumpcap_pid" || e2e_fail "dpdk-dumpcap exited non-zero: $(tail -5 "$err")"
    _dumpcap_pid=
    sed 's/^/    /' "$err"
    local txt="$SPW_LOG_DIR/dumpcap-tcpdump.txt" backends
    tcpdump -nn -e -r "$file" >"$txt" 2>&1 || e2e_fail "tcpdump cannot read $file: $(tail -3 "$txt")"
    echo "  tcpdump -nn -e -r (frames of the test, of $(grep -c . "$txt") lines):"
    grep -E "10\.200\.0\.77|$SPW_VIP\.$SPW_VIP_PORT: Flags \[S\]" "$txt" | sed 's/^/    /' | head -10 || true
    e2e_check "the UDP datagram to 10.200.0.77 sent on c1's veth was captured (RX)" \
        grep -q "10.200.1.10.40000 > 10.200.0.77.9: UDP" "$txt"
    e2e_check "the frame's marker is in the capture" bash -c "tcpdump -nn -A -r '$file' 2>/dev/null | grep -q SPWCAPTURE-not-for-vip"
    e2e_check "the request's SYN was captured as received, to the port's MAC $SPW_LB_MAC (RX)" \
        grep -qE "> $SPW_LB_MAC, .*> $SPW_VIP\.$SPW_VIP_PORT: Flags \[S\]" "$txt"
    backends="$(for b in "${SPW_BACKENDS[@]}"; do printf '%s|' "${SPW_MAC[$b]}"; done)"
    e2e_check "and as sent on to a backend's MAC (TX, L2 DSR)" \
        grep -qE "> (${backends%|}), .*> $SPW_VIP\.$SPW_VIP_PORT: Flags \[S\]" "$txt"
    e2e_done
}
