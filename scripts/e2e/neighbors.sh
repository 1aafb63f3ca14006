# shellcheck shell=bash
# Next-hop resolution e2e test (docs/operations.md "Next hops"), sourced by scripts/e2e.sh:
# ARP and Neighbor Discovery of backends without a configured MAC, and a MAC change.

## neighbors: no backend MAC in the config, IPv4 and IPv6 services: Spillway resolves them with ARP and Neighbor Discovery and serves real traffic; a backend whose MAC changes (replaced VM) is followed within neighbors.refresh_sec on both families
# neighbor_macs: "address=mac ..." of `spillwayctl status --json` (unresolved: mac empty)
neighbor_macs() {
    spillwayctl_cmd status --json 2>/dev/null | "$SPW_PYTHON" -c "
import json, sys
r = json.load(sys.stdin)
print(' '.join(f'{a}={m}' for a, m, _ in r.get('neighbors', {}).get('entries', [])))" 2>/dev/null || true
}
# _resolved_as ADDR MAC: the daemon has ADDR at MAC
_resolved_as() { [[ " $(neighbor_macs) " == *" $1=$2 "* ]]; }
_all_resolved() {
    local b
    for b in "${SPW_BACKENDS[@]}"; do
        _resolved_as "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}" && _resolved_as "${SPW_ADDR6[$b]}" "${SPW_MAC[$b]}" || return 1
    done
}
# _clients6 N: run_clients over IPv6 to [VIP6]:80 (connect timeout 3 s: a client's first
# connection waits for Neighbor Discovery of the VIP, as in test `ipv6`)
_clients6() { SPW_CLIENT_URL="http://[$SPW_VIP6]:$SPW_VIP_PORT/" SPW_CURL_FAMILY=-6 SPW_CURL_CONNECT_TIMEOUT=3 run_clients "$@"; }
e2e_neighbors() {
    local refresh=2 b t0 ms new_mac=02:00:00:00:aa:01 before6
    # No health checks: they run from the host stack (mgmt0), whose own ARP/ND cache keeps
    # b1's old MAC for a while and would mark it down; here only next-hop resolution decides.
    SPW_HEALTH_CHECK=0
    topo_up
    # IPv6 as in test `ipv6` (DAD off, lb0 without kernel IPv6, fd00:200::2 on the port):
    # service web6 on [fd00:200::100]:80 over the same backends, resolved with Neighbor
    # Discovery.
    ipv6_topology_up
    ipv6_write_config "$SPW_CONFIG"
    # web6's health check too (see above).
    sed -i '/^\[services.health_check\]$/,/^unhealthy_threshold = /d' "$SPW_CONFIG"
    # No backend MAC at all: drop every backend's `mac = ...` line (the port keeps its own).
    for b in "${SPW_BACKENDS[@]}"; do sed -i "/^mac = \"${SPW_MAC[$b]}\"$/d" "$SPW_CONFIG"; done
    printf '\n[neighbors]\nrefresh_sec = %s\nexpiry_sec = 10\nretry_ms = 500\n' "$refresh" >>"$SPW_CONFIG"
    e2e_check "the config names no backend MAC" _eq "$(grep -c '^mac = ' "$SPW_CONFIG")" 1
    e2e_check "the config has no health check" _eq "$(grep -c '^\[services.health_check\]' "$SPW_CONFIG")" 0
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    topo_wait_for 10 _all_resolved || e2e_fail "backends not resolved within 10 s: $(neighbor_macs)"
    echo "  resolved: $(neighbor_macs)"
    e2e_check "every backend resolved to its real MAC, IPv4 (ARP) and IPv6 (Neighbor Discovery)" _all_resolved
    run_clients 120 || true
    e2e_check "all 120 requests answered without configured MACs ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    for b in "${SPW_BACKENDS[@]}"; do
        e2e_check "backend $b served ($(req_backend_count "$b") requests)" _gt0 "$(req_backend_count "$b")"
    done
    : >"$SPW_REQUESTS"
    _clients6 120 || true
    e2e_check "120 IPv6 requests made" _eq "$(req_count new)" 120
    e2e_check "all 120 IPv6 requests answered without configured MACs ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    for b in "${SPW_BACKENDS[@]}"; do
        e2e_check "backend $b served on [$SPW_VIP6] ($(ipv6_served "$b") requests)" _gt0 "$(ipv6_served "$b")"
    done

    # Replace b1's VM: same address, new MAC. Frames to the old MAC are lost from now on.
    t0=$(date +%s%N)
    nsx b1 ip link set dev eth0 address "$new_mac"
    topo_wait_for $((refresh + 5)) _resolved_as "${SPW_ADDR[b1]}" "$new_mac" || e2e_fail "b1's new MAC not learned: $(neighbor_macs)"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "  b1's new MAC $new_mac learned after ${ms} ms (refresh_sec = $refresh s)"
    e2e_check "the new MAC was followed within refresh_sec + 1 s (${ms} ms)" _ge $((refresh * 1000 + 1000)) "$ms"
    topo_wait_for $((refresh + 5)) _resolved_as "${SPW_ADDR6[b1]}" "$new_mac" || e2e_fail "b1's new MAC not learned for ${SPW_ADDR6[b1]}: $(neighbor_macs)"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "  ... and for ${SPW_ADDR6[b1]} after ${ms} ms"
    e2e_check "the new MAC was followed over Neighbor Discovery within refresh_sec + 1 s (${ms} ms)" _ge $((refresh * 1000 + 1000)) "$ms"
    : >"$SPW_REQUESTS"
    run_clients 120 || true
    e2e_check "all requests answered after the MAC change ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "b1 serves again at its new MAC ($(req_backend_count b1) requests)" _gt0 "$(req_backend_count b1)"
    before6="$(ipv6_served b1)"
    : >"$SPW_REQUESTS"
    _clients6 120 || true
    e2e_check "all IPv6 requests answered after the MAC change ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "b1 serves IPv6 again at its new MAC ($(( $(ipv6_served b1) - before6 )) requests)" _gt0 "$(( $(ipv6_served b1) - before6 ))"
    echo "  spillwayctl status:"; spillwayctl_cmd status | sed -n '/NEXT HOPS/,$p' | sed 's/^/    /' || true
    local changed
    changed="$(status_field neighbors | "$SPW_PYTHON" -c "import ast,sys; print(ast.literal_eval(sys.stdin.read())['changed'])")"
    e2e_check "status counts the MAC changes of both families (changed = $changed)" _ge "$changed" 2
    e2e_done
}

# _garp NS IFACE ADDR MAC: sends a gratuitous ARP reply "ADDR is at MAC" (RFC 5227 §3 in
# reply form, as `arping -A`; sender = target = ADDR, broadcast) from IFACE in namespace NS.
_garp() {
    nsx "$1" "$SPW_PYTHON" - "$2" "$3" "$4" <<'PY'
import socket, struct, sys
iface, addr, mac = sys.argv[1], socket.inet_aton(sys.argv[2]), bytes.fromhex(sys.argv[3].replace(":", ""))
frame = b"\xff" * 6 + mac + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + mac + addr + b"\xff" * 6 + addr
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
s.send(frame.ljust(60, b"\0"))
PY
}

## neighbors_rejoin: a backend recreated with its address and a new MAC that announces itself with a gratuitous ARP is followed at once: Spillway uses the new MAC within 1 s of the announcement (refresh_sec = 60, so no refresh helps) and every request after it is answered
e2e_neighbors_rejoin() {
    local b t0 ms new_mac=02:00:00:00:aa:02
    SPW_HEALTH_CHECK=0   # as in `neighbors`: only next-hop resolution decides
    topo_up
    write_config "$SPW_CONFIG"
    for b in "${SPW_BACKENDS[@]}"; do sed -i "/^mac = \"${SPW_MAC[$b]}\"$/d" "$SPW_CONFIG"; done
    printf '\n[neighbors]\nrefresh_sec = 60\nexpiry_sec = 120\nretry_ms = 500\n' >>"$SPW_CONFIG"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    topo_wait_for 10 _resolved_as "${SPW_ADDR[b1]}" "${SPW_MAC[b1]}" || e2e_fail "b1 not resolved within 10 s: $(neighbor_macs)"
    run_clients 60 || true
    e2e_check "all 60 requests answered before ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    # b1 goes away and comes back 2 s later with the same address and a new MAC, announcing it
    nsx b1 ip link set dev eth0 down
    sleep 2
    nsx b1 ip link set dev eth0 address "$new_mac"
    nsx b1 ip link set dev eth0 up
    t0=$(date +%s%N)
    _garp b1 eth0 "${SPW_ADDR[b1]}" "$new_mac"
    topo_wait_for 5 _resolved_as "${SPW_ADDR[b1]}" "$new_mac" || e2e_fail "b1's new MAC not followed within 5 s: $(neighbor_macs)"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "  FIGURE: b1's new MAC $new_mac in use ${ms} ms after its gratuitous ARP (refresh_sec = 60 s)"
    e2e_check "the new MAC is in use within 1 s of the announcement (${ms} ms)" _ge 1000 "$ms"
    : >"$SPW_REQUESTS"
    run_clients 120 || true
    e2e_check "every request after it answered ($(req_failed new) of 120 failed)" _eq "$(req_failed new)" 0
    e2e_check "b1 serves at its new MAC ($(req_backend_count b1) requests)" _gt0 "$(req_backend_count b1)"
    e2e_done
}
