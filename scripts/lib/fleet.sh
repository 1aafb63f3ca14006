# shellcheck shell=bash
# Fleet topology of the e2e tests `ecmp` and `vip-drain` (docs/bgp.md): a router
# running BIRD 2 with ECMP, two Spillway hosts each peering with it through their own BIRD,
# clients behind the router, backends on the L2 segment (L2 DSR). Source after
# scripts/lib/topology.sh (it reuses ns/nsx/_topo_ns_add/_topo_attach/backend_start and
# topo_down, which removes these namespaces too: same prefix).
#
#   c1:eth0 10.201.0.10/24 --- rt:cl0 10.201.0.1/24     (client side, gw = router)
#                              rt:lan0 10.200.0.1/16 ---+ sw:br0 (the L2 segment)
#   lb1:lb0 (Spillway af_packet, port address 10.200.0.21, no kernel address, arp off) --+
#   lb1:mgmt0 10.200.0.31/16 (kernel: BIRD, health checks) -----------------------------+
#   lb2:lb0 10.200.0.22 / lb2:mgmt0 10.200.0.32 (same) ---------------------------------+
#   b1..b4 10.200.11.1, .11.2, .12.3, .12.4 (VIP on lo, default route via 10.200.0.1) --+
#
# BGP: rt (AS 65000) peers with lb1 and lb2 (AS 65001) from lan0, with BFD. Each host's
# BIRD exports the VIP /32s on spw-vip0 (Spillway's announcement interface) with next hop
# = its Spillway port address; rt installs them as one multipath route
# (fib_multipath_hash_policy=1: L4 hash).
#
# FLEET_IPV6=1 (test `ecmp`) adds an IPv6 VIP announced through BIRD as docs/bgp.md "IPv6
# and link-local peering" says: service web6 on $FLEET_VIP6 (backend b1 by MAC, no health
# check), each host's lb0 port at FLEET_PORT_ADDR6, and a second BGP session per host over
# IPv6 link-local addresses (rt lan0 fe80::1, host mgmt0 its EUI-64 one; `neighbor fe80::1%mgmt0`),
# whose ipv6 channel exports the /128s with next hop = the host's port address; rt's lan0
# has fd00:200::1/64 so that next hop is on-link.

FLEET_HOSTS=(${FLEET_HOSTS_OVERRIDE:-lb1 lb2})   # FLEET_HOSTS_OVERRIDE="lb1 lb2 lb3": a third host (scale-out)
FLEET_RT_LAN=10.200.0.1
FLEET_RT_CL=10.201.0.1
FLEET_CLIENT=c1
FLEET_CLIENT_ADDR=10.201.0.10
declare -gA FLEET_PORT_ADDR=([lb1]=10.200.0.21 [lb2]=10.200.0.22 [lb3]=10.200.0.23)
declare -gA FLEET_PORT_MAC=([lb1]=02:00:00:00:00:21 [lb2]=02:00:00:00:00:22 [lb3]=02:00:00:00:00:23)
declare -gA FLEET_MGMT_ADDR=([lb1]=10.200.0.31 [lb2]=10.200.0.32 [lb3]=10.200.0.33)
declare -gA FLEET_MGMT_MAC=([lb1]=02:00:00:00:00:31 [lb2]=02:00:00:00:00:32 [lb3]=02:00:00:00:00:33)
FLEET_SYNC="${FLEET_SYNC:-1}"          # [sync] between the hosts (docs/bgp.md "Flow-state sync")
FLEET_SYNC_PORT=7946
# FLEET_BACKENDS: the backends in the config files (default: all of SPW_BACKENDS);
# FLEET_WEIGHT_<name> / FLEET_DISABLED_<name>: their weight / disabled state.
fleet_sync_key() { printf '%s/sync.key' "$SPW_RUN_DIR"; }
FLEET_BFD_MS="${FLEET_BFD_MS:-100}"   # BFD interval; detection = 3 x this
FLEET_IPV6="${FLEET_IPV6:-0}"          # 1: the IPv6 VIP and BGP sessions above
FLEET_VIP6=fd00:200::100
FLEET_RT_LAN6=fd00:200::1
FLEET_B1_ADDR6=fd00:200::11
declare -gA FLEET_PORT_ADDR6=([lb1]=fd00:200::21 [lb2]=fd00:200::22 [lb3]=fd00:200::23)
# mgmt0's link-local address: the kernel's own (EUI-64 of FLEET_MGMT_MAC), one per host
declare -gA FLEET_MGMT_LL=([lb1]=fe80::ff:fe00:31 [lb2]=fe80::ff:fe00:32 [lb3]=fe80::ff:fe00:33)

fleet_sock() { printf '%s/%s.sock' "$SPW_RUN_DIR" "$1"; }
fleet_ctl() { local h="$1"; shift; timeout 10 "$SPILLWAYCTL_BIN" --socket "$(fleet_sock "$h")" "$@"; }
fleet_birdc() { local h="$1"; shift; nsx "$h" birdc -s "$SPW_RUN_DIR/bird-$h.ctl" "$@"; }

# fleet_route [VIP]: the router's kernel route to the VIP ($SPW_VIP, or an IPv6 one: /128),
# one line ("" when none).
fleet_route() {
    local v="${1:-$SPW_VIP}"
    if [[ "$v" == *:* ]]; then
        nsx rt ip -o -6 route show "$v/128" 2>/dev/null | tr -s ' ' | tr '\\' ' '
    else
        nsx rt ip -o route show "$v/32" 2>/dev/null | tr -s ' ' | tr '\\' ' '
    fi
}
# fleet_nexthops [VIP]: number of next hops of that route (0, 1, 2).
fleet_nexthops() {
    local r; r="$(fleet_route "${1:-}")"
    if [[ -z "$r" ]]; then echo 0; elif [[ "$r" == *nexthop* ]]; then grep -o 'nexthop' <<<"$r" | wc -l; else echo 1; fi
}
_fleet_nexthops_is() { [[ "$(fleet_nexthops "${2:-}")" == "$1" ]]; }
# fleet_wait_nexthops N TIMEOUT_S [VIP]: until the router's VIP route has N next hops;
# prints ms.
fleet_wait_nexthops() {
    local start; start=$(date +%s%N)
    while (( ($(date +%s%N) - start) / 1000000 < ${2%.*} * 1000 )); do
        if _fleet_nexthops_is "$1" "${3:-}"; then echo $(( ($(date +%s%N) - start) / 1000000 )); return 0; fi
        sleep 0.02
    done
    return 1
}

fleet_up() {
    topo_require_root
    topo_require_tools
    command -v bird >/dev/null && command -v birdc >/dev/null || topo_die "bird2 not installed (apt-get install bird2)"
    topo_down || topo_die "cannot remove the stale topology"
    mkdir -p "$SPW_RUN_DIR" "$SPW_LOG_DIR" "$SPW_PID_DIR"
    # Host configs of an earlier test (edits are written back to them) and its fleet key.
    for h in lb1 lb2 lb3; do rm -f "$SPW_RUN_DIR/$h.toml"; done
    rm -f "$(fleet_sync_key)"
    local r h
    for r in sw rt "$FLEET_CLIENT" "${FLEET_HOSTS[@]}" "${SPW_BACKENDS[@]}"; do _topo_ns_add "$r"; done
    nsx sw ip link add br0 type bridge stp_state 0 forward_delay 0
    nsx sw ip link set br0 up

    # router
    _topo_attach rt lan0 02:00:00:00:00:0f
    nsx rt ip addr add "$FLEET_RT_LAN/16" dev lan0
    if [[ "$FLEET_IPV6" == 1 ]]; then
        # fe80::1 as the router's only link-local address (addr_gen_mode 1: no EUI-64 one), so
        # its BGP connections come from the address the hosts name
        nssysctl rt net.ipv6.conf.lan0.addr_gen_mode=1 net.ipv6.conf.lan0.accept_dad=0 net.ipv6.conf.lan0.disable_ipv6=0
        nsx rt ip -6 addr add fe80::1/64 dev lan0 nodad
        nsx rt ip -6 addr add "$FLEET_RT_LAN6/64" dev lan0 nodad
    fi
    nsx rt ip link set lan0 up
    ip link add cl0 netns "$(ns rt)" address 02:00:00:00:01:0f type veth peer name eth0 netns "$(ns "$FLEET_CLIENT")" address 02:00:00:00:01:10
    nsx rt ip addr add "$FLEET_RT_CL/24" dev cl0
    nsx rt ip link set cl0 up
    nssysctl rt net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 net.ipv4.conf.lan0.rp_filter=0 net.ipv4.conf.cl0.rp_filter=0
    nsx "$FLEET_CLIENT" ip addr add "$FLEET_CLIENT_ADDR/24" dev eth0
    nsx "$FLEET_CLIENT" ip link set eth0 up
    nsx "$FLEET_CLIENT" ip route add default via "$FLEET_RT_CL"

    # Spillway hosts: lb0 for DPDK (no kernel address, ARP off), mgmt0 for the kernel.
    for h in "${FLEET_HOSTS[@]}"; do
        _topo_attach "$h" lb0 "${FLEET_PORT_MAC[$h]}"
        _topo_attach "$h" mgmt0 "${FLEET_MGMT_MAC[$h]}"
        nsx "$h" ip link set lb0 arp off
        nssysctl "$h" net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.lb0.arp_ignore=8 \
            net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.all.rp_filter=0 net.ipv4.ip_forward=0
        nsx "$h" ip addr add "${FLEET_MGMT_ADDR[$h]}/16" dev mgmt0
        if [[ "$FLEET_IPV6" == 1 ]]; then
            # IPv6 on by default (Spillway's spw-vip0, created later, needs it for the /128
            # peers) and on mgmt0; never on lb0, which only Spillway speaks on.
            nssysctl "$h" net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
                net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
                net.ipv6.conf.mgmt0.accept_dad=0 net.ipv6.conf.mgmt0.disable_ipv6=0 net.ipv6.conf.lb0.disable_ipv6=1
        fi
        nsx "$h" ip link set lb0 up
        nsx "$h" ip link set mgmt0 up
    done

    # backends: L2 DSR (VIP on lo), replies to clients through the router
    for r in "${SPW_BACKENDS[@]}"; do
        _topo_attach "$r" eth0 "${SPW_MAC[$r]}"
        nsx "$r" ip addr add "${SPW_ADDR[$r]}/$SPW_SUBNET_LEN" dev eth0
        nsx "$r" ip addr add "$SPW_VIP/32" dev lo
        nssysctl "$r" net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.eth0.arp_ignore=1 \
            net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.eth0.arp_announce=2 \
            net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
            net.ipv4.conf.eth0.rp_filter=0 net.ipv4.conf.lo.rp_filter=0
        nsx "$r" ip link set eth0 up
        nsx "$r" ip route add default via "$FLEET_RT_LAN"
    done
    for r in "${SPW_BACKENDS[@]}"; do backend_start "$r"; done
    fleet_bird_start
    topo_log "fleet topology up: router rt, hosts ${FLEET_HOSTS[*]}, client $FLEET_CLIENT, backends ${SPW_BACKENDS[*]}"
}

# BIRD: the router (ECMP into the kernel) and one per Spillway host (docs/bird-spillway.conf).
fleet_bird_start() {
    local h f bfd
    bfd="protocol bfd { interface \"*\" { min rx interval $FLEET_BFD_MS ms; min tx interval $FLEET_BFD_MS ms; multiplier 3; }; }"
    f="$SPW_RUN_DIR/bird-rt.conf"
    {
        echo "router id $FLEET_RT_LAN;"
        echo "protocol device { scan time 10; }"
        echo "protocol kernel { ipv4 { import none; export all; }; merge paths on limit 8; }"
        echo "$bfd"
        for h in "${FLEET_HOSTS[@]}"; do
            echo "protocol bgp $h { local $FLEET_RT_LAN as 65000; neighbor ${FLEET_MGMT_ADDR[$h]} as 65001; hold time 9; connect retry time 1; bfd on; ipv4 { import all; export none; }; }"
        done
        if [[ "$FLEET_IPV6" == 1 ]]; then
            echo "protocol kernel { ipv6 { import none; export all; }; merge paths on limit 8; }"
            for h in "${FLEET_HOSTS[@]}"; do
                echo "protocol bgp ${h}_6 { local as 65000; neighbor ${FLEET_MGMT_LL[$h]}%lan0 as 65001; hold time 9; connect retry time 1; bfd on; ipv6 { import all; export none; }; }"
            done
        fi
    } >"$f"
    topo_spawn rt "$SPW_LOG_DIR/bird-rt.log" "$SPW_PID_DIR/bird-rt.pid" bird -f -c "$f" -s "$SPW_RUN_DIR/bird-rt.ctl"
    for h in "${FLEET_HOSTS[@]}"; do
        f="$SPW_RUN_DIR/bird-$h.conf"
        cat >"$f" <<EOF
router id ${FLEET_MGMT_ADDR[$h]};
protocol device { scan time 10; }
protocol direct spillway_vips { ipv4 { import all; }; ipv6 { import all; }; interface "spw-vip*"; }
$bfd
filter spillway_export { if proto = "spillway_vips" && net.len = 32 then accept; reject; }
filter spillway_export6 { if proto = "spillway_vips" && net.len = 128 then accept; reject; }
protocol bgp upstream {
    local ${FLEET_MGMT_ADDR[$h]} as 65001;
    neighbor $FLEET_RT_LAN as 65000;
    hold time 9; connect retry time 1;
    bfd on;
    ipv4 { import none; export filter spillway_export; next hop address ${FLEET_PORT_ADDR[$h]}; };
}
$(if [[ "$FLEET_IPV6" == 1 ]]; then cat <<EOF6
protocol bgp upstream6 {
    local as 65001;
    neighbor fe80::1%mgmt0 as 65000;
    hold time 9; connect retry time 1;
    bfd on;
    ipv6 { import none; export filter spillway_export6; next hop address ${FLEET_PORT_ADDR6[$h]}; };
}
EOF6
fi)
EOF
        topo_spawn "$h" "$SPW_LOG_DIR/bird-$h.log" "$SPW_PID_DIR/bird-$h.pid" bird -f -c "$f" -s "$SPW_RUN_DIR/bird-$h.ctl"
    done
}

# fleet_config HOST FILE: the Spillway config of HOST. Services and backends are the same
# on every host (same Maglev tables); only the port, EAL file prefix and socket differ.
fleet_config() {
    local h="$1" f="$2" b p peers="" w en
    if [[ "$FLEET_SYNC" == 1 && ! -f "$(fleet_sync_key)" ]]; then
        (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$(fleet_sync_key)")
    fi
    for p in "${FLEET_HOSTS[@]}"; do peers+="\"${FLEET_MGMT_ADDR[$p]}:$FLEET_SYNC_PORT\", "; done
    {
        cat <<EOF
# Fleet e2e host $h (scripts/lib/fleet.sh).
[dataplane]
eal_args = ["--no-huge", "--no-shconf", "-m", "256", "--no-pci", "--file-prefix=spw-e2e-$h"]
workers = 1
idle_sleep_us = $SPW_IDLE_SLEEP_US
socket = "$(fleet_sock "$h")"

[[ports]]
name = "lb0"
device = "net_af_packet0,iface=lb0"
address = "${FLEET_PORT_ADDR[$h]}"
mac = "${FLEET_PORT_MAC[$h]}"
$(if [[ "$FLEET_IPV6" == 1 ]]; then printf 'address6 = "%s"\n' "${FLEET_PORT_ADDR6[$h]}"; fi)

[metrics]
listen = "${FLEET_MGMT_ADDR[$h]}:9101"

[announce]
interface = "spw-vip0"
$(if [[ "$FLEET_SYNC" == 1 ]]; then printf '\n[sync]\nlisten = "%s:%s"\npeers = [%s]\nkey_file = "%s"\nstartup_sync_timeout_sec = 3\nrefresh_interval_sec = 2\n' "${FLEET_MGMT_ADDR[$h]}" "$FLEET_SYNC_PORT" "${peers%, }" "$(fleet_sync_key)"; fi)

[[services]]
name = "web"
vip = "$SPW_VIP"
port = $SPW_VIP_PORT
protocol = "tcp"

[services.health_check]
type = "http"
path = "/healthz"
check_interval_sec = 1.0
timeout_sec = 0.5
healthy_threshold = 1
unhealthy_threshold = 2
EOF
        for b in ${FLEET_BACKENDS:-${SPW_BACKENDS[*]}}; do
            w="FLEET_WEIGHT_$b"; en="FLEET_DISABLED_$b"
            printf '\n[[services.backends]]\nname = "%s"\naddress = "%s"\nmac = "%s"\nweight = %s\n' "$b" "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}" "${!w:-50}"
            # an `if`, not `[[ ]] && printf`: that returns 1 when the last backend is
            # enabled, and a `set -e` caller dies
            if [[ "${!en:-0}" == 1 ]]; then printf 'enabled = false\n'; fi
        done
        if [[ "$FLEET_IPV6" == 1 ]]; then
            printf '\n[[services]]\nname = "web6"\nvip = "%s"\nport = %s\nprotocol = "tcp"\n' "$FLEET_VIP6" "$SPW_VIP_PORT"
            printf '\n[[services.backends]]\nname = "b1"\naddress = "%s"\nmac = "%s"\n' "$FLEET_B1_ADDR6" "${SPW_MAC[b1]}"
        fi
    } >"$f"
}

# fleet_start HOST: starts Spillway on HOST (config written once) and waits for its socket.
fleet_start() {
    local h="$1" cfg="$SPW_RUN_DIR/$1.toml" i
    [[ -f "$cfg" ]] || fleet_config "$h" "$cfg"
    rm -f "$(fleet_sock "$h")"
    topo_spawn "$h" "$SPW_LOG_DIR/spillway-$h.log" "$SPW_PID_DIR/spillway-$h.pid" \
        "$SPILLWAY_BIN" --config "$cfg" --socket "$(fleet_sock "$h")"
    disown "$!" 2>/dev/null || true   # a SIGKILL of it (ecmp) is the test's, not news for bash
    for ((i = 0; i < 150; i++)); do
        if fleet_ctl "$h" status >/dev/null 2>&1; then return 0; fi
        kill -0 "$(cat "$SPW_PID_DIR/spillway-$h.pid")" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 30 "$SPW_LOG_DIR/spillway-$h.log" >&2 || true
    topo_die "spillway on $h did not start"
}
fleet_pid() { cat "$SPW_PID_DIR/spillway-$1.pid" 2>/dev/null; }

# fleet_new_connections HOST: the daemon's total new connections.
fleet_new_connections() {
    fleet_ctl "$1" status --json | "$SPW_PYTHON" -c "import json,sys; print(json.load(sys.stdin)['total']['new_connections'])"
}
# fleet_flow_ports HOST: client ports of the connections HOST carries itself (one per line;
# a peer's synced entry that has seen no packet there is not one of them).
fleet_flow_ports() {
    fleet_ctl "$1" flows show --limit 100000 --json | "$SPW_PYTHON" -c "
import json, sys
for e in json.load(sys.stdin)['entries']:
    if e['state'] != 'synced':
        print(e['client'].rsplit(':', 1)[1])" | sort -u
}
# fleet_sync HOST KEY: a field of HOST's status.sync (JSON); KEY "rejected.bad_tag" reads a
# rejection count.
fleet_sync() {
    fleet_ctl "$1" status --json | "$SPW_PYTHON" -c "
import json, sys
s = json.load(sys.stdin)['sync']
k = sys.argv[1]
if k.startswith('rejected.'):
    print(dict(s['rejected']).get(k.split('.', 1)[1], 0))
else:
    print(s[k])" "$2"
}
# fleet_explain HOST PORT: the backend HOST's live Maglev table picks for client PORT.
fleet_explain() {
    fleet_ctl "$1" explain --vip "$SPW_VIP:$SPW_VIP_PORT/tcp" --client "$FLEET_CLIENT_ADDR" --client-port "$2" --json | "$SPW_PYTHON" -c "import json,sys; print(json.load(sys.stdin).get('backend'))"
}
# fleet_ka_start CONNS DURATION OUT: parallel keep-alive connections from the client in
# the background (pid in FLEET_KA_PID); returns once every connection is open.
fleet_ka_start() {
    local err="$3.err"
    ip netns exec "$(ns "$FLEET_CLIENT")" "$SPW_PYTHON" "$SPW_LIB_DIR/ka_parallel.py" --client "$FLEET_CLIENT" \
        --host "$SPW_VIP" --port "$SPW_VIP_PORT" --conns "$1" --duration "$2" --interval 0.2 --timeout 5 >"$3" 2>"$err" 9>&- &
    FLEET_KA_PID=$!
    topo_wait_for 15 grep -q ready "$err" || { cat "$err" >&2; topo_die "keep-alive clients did not open"; }
}
# fleet_new_requests N: N new-connection requests from the client (records to $SPW_REQUESTS).
fleet_new_requests() {
    local saved=("${SPW_CLIENTS[@]}")
    SPW_CLIENTS=("$FLEET_CLIENT")
    run_clients "$1" "$FLEET_CLIENT" >/dev/null || true
    SPW_CLIENTS=("${saved[@]}")
}

# ports are listed in PORTS_FILE, prints "survived total": a connection survived when every
# request succeeded, on one backend, and it still made requests 2 s after KILL_TIME.
fleet_ka_report() {
    "$SPW_PYTHON" - "$1" "$2" "$3" <<'PY'
import sys
recs, t, ports = sys.argv[1], float(sys.argv[2]), set(open(sys.argv[3]).read().split())
conns = {}
for line in open(recs):
    f = line.rstrip("\n").split("\t")
    if len(f) < 9 or f[6] not in ports:
        continue
    c = conns.setdefault(f[6], {"bad": False, "backends": set(), "last": 0.0})
    if f[4] != "200":
        c["bad"] = True
    else:
        c["backends"].add(f[5])
        c["last"] = max(c["last"], float(f[8]))
ok = sum(1 for c in conns.values() if not c["bad"] and len(c["backends"]) == 1 and c["last"] > t + 2)
print(ok, len(conns))
PY
}
