# shellcheck shell=bash
# Spillway demo / e2e topology: network namespaces + veths + one Linux bridge.
#
# Source this file from a bash script that runs as root with `set -euo pipefail`:
#
#     source scripts/lib/topology.sh
#     topo_lock                 # one run per SPW_TOPO at a time (flock)
#     topo_trap                 # topo_down on EXIT / INT / TERM
#     topo_up                   # also removes a stale topology of a killed run
#     write_config "$SPW_CONFIG"
#     spillway_start && spillway_wait_ready
#     run_clients 200; run_keepalive_clients 5 20
#     backend_counts; spillwayctl_cmd status
#
# Everything lives in namespaces named "${SPW_NS_PREFIX}<role>" (default
# spw-demo-sw, spw-demo-lb, spw-demo-c1, spw-demo-c2, spw-demo-b1..b4). Veths are
# created directly inside the namespaces, so the root namespace never gets a
# link; deleting the namespaces (after killing every process inside them,
# found with `ip netns pids`) removes everything. See docs/demo.md.
#
#                       spw-demo-sw (br0, no IP)
#   spw-demo-lb:lb0 ----+ (02:00:00:00:00:01, no kernel IP, arp off; Spillway
#                       |  answers ARP for 10.200.0.2 and the VIP 10.200.0.100)
#   spw-demo-lb:mgmt0 --+ 10.200.0.3/16 (host stack: health checks)
#   spw-demo-c1:eth0 ---+ 10.200.1.10/16  zone z1
#   spw-demo-c2:eth0 ---+ 10.200.2.10/16  zone z2
#   spw-demo-b1..b4 ----+ 10.200.11.1, .11.2 (z1), 10.200.12.3, .12.4 (z2)
#                         VIP on lo, arp_ignore=1, arp_announce=2, rp_filter=0
#
# Environment (all optional):
#   SPW_TOPO        topology id (default "demo"): namespace prefix spw-$SPW_TOPO-,
#                   run dir /run/spillway-$SPW_TOPO. Different ids can run side by side.
#   SPW_RUN_DIR     run dir (config, pids, socket); default /run/spillway-$SPW_TOPO
#   SPW_LOG_DIR     logs (kept after topo_down); default $SPW_RUN_DIR/logs
#   SPW_SOCKET      control socket; default $SPW_RUN_DIR/ctl.sock
#   SPW_CONFIG      config file written by the scripts; default $SPW_RUN_DIR/spillway.toml
#   SPILLWAY_BIN    daemon;  default ${CARGO_TARGET_DIR:-<repo>/target}/release/spillway
#   SPILLWAYCTL_BIN ctl;     default ${CARGO_TARGET_DIR:-<repo>/target}/release/spillwayctl
#   SPW_HEALTH_CHECK  1 (default) writes an HTTP [services.health_check]; 0 leaves it out
#   SPW_BACKEND_KEEPALIVE 1 (default): backends keep connections open; 0: close after each response
#   SPW_CURL_CONNECT_TIMEOUT / SPW_CURL_MAX_TIME  per-request curl timeouts (1 s / 3 s)
#   SPW_DEBUG=1     trace commands

# ---------------------------------------------------------------- settings ---
SPW_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SPW_REPO_ROOT="$(cd "$SPW_LIB_DIR/../.." && pwd)"
SPW_TOPO="${SPW_TOPO:-demo}"
SPW_NS_PREFIX="spw-${SPW_TOPO}-"
SPW_RUN_DIR="${SPW_RUN_DIR:-/run/spillway-${SPW_TOPO}}"
SPW_LOG_DIR="${SPW_LOG_DIR:-$SPW_RUN_DIR/logs}"
SPW_SOCKET="${SPW_SOCKET:-$SPW_RUN_DIR/ctl.sock}"
SPW_CONFIG="${SPW_CONFIG:-$SPW_RUN_DIR/spillway.toml}"
SPW_LOCK_FILE="${SPW_LOCK_FILE:-/run/spillway-${SPW_TOPO}.lock}"
SPW_PID_DIR="$SPW_RUN_DIR/pids"
SPW_REQUESTS="$SPW_LOG_DIR/requests.tsv"   # one record per client request (see run_clients)
SPILLWAY_BIN="${SPILLWAY_BIN:-${CARGO_TARGET_DIR:-$SPW_REPO_ROOT/target}/release/spillway}"
SPILLWAYCTL_BIN="${SPILLWAYCTL_BIN:-${CARGO_TARGET_DIR:-$SPW_REPO_ROOT/target}/release/spillwayctl}"
SPW_HEALTH_CHECK="${SPW_HEALTH_CHECK:-1}"
SPW_BACKEND_KEEPALIVE="${SPW_BACKEND_KEEPALIVE:-1}"
SPW_CURL_CONNECT_TIMEOUT="${SPW_CURL_CONNECT_TIMEOUT:-1}"
SPW_CURL_MAX_TIME="${SPW_CURL_MAX_TIME:-3}"
SPW_KA_INTERVAL="${SPW_KA_INTERVAL:-0}"        # seconds between keep-alive requests
SPW_IDLE_SLEEP_US="${SPW_IDLE_SLEEP_US:-20}"   # dataplane.idle_sleep_us (share the core)
SPW_SERVICE_EXTRA="${SPW_SERVICE_EXTRA:-}"     # extra TOML lines for the service
declare -gA SPW_BACKEND_EXTRA=()               # extra TOML lines per backend
if [[ -z "${SPW_PYTHON:-}" ]]; then
    if [[ -x /usr/bin/python3 ]]; then SPW_PYTHON=/usr/bin/python3; else SPW_PYTHON="$(command -v python3 || echo python3)"; fi
fi
[[ "${SPW_DEBUG:-0}" == 1 ]] && set -x

# Addressing plan (one L2 subnet).
SPW_SUBNET_LEN=16
SPW_VIP=10.200.0.100
SPW_VIP_PORT=80
SPW_PORT_ADDR=10.200.0.2          # Spillway's port address (answered by Spillway, not the kernel)
SPW_LB_MAC=02:00:00:00:00:01      # lb0
SPW_MGMT_ADDR=10.200.0.3          # mgmt0 in the Spillway namespace (kernel stack)
SPW_MGMT_MAC=02:00:00:00:00:03
SPW_CLIENTS=(c1 c2)
SPW_BACKENDS=(b1 b2 b3 b4)
declare -gA SPW_ADDR=([c1]=10.200.1.10 [c2]=10.200.2.10
    [b1]=10.200.11.1 [b2]=10.200.11.2 [b3]=10.200.12.3 [b4]=10.200.12.4)
declare -gA SPW_MAC=([c1]=02:00:00:00:01:10 [c2]=02:00:00:00:02:10
    [b1]=02:00:00:00:11:01 [b2]=02:00:00:00:11:02 [b3]=02:00:00:00:12:03 [b4]=02:00:00:00:12:04)
declare -gA SPW_ZONE=([c1]=z1 [c2]=z2 [b1]=z1 [b2]=z1 [b3]=z2 [b4]=z2)

# shellcheck source-path=SCRIPTDIR source=groups.sh
source "$SPW_LIB_DIR/groups.sh"   # zone_groups_write_backends (SPW_ZONE_GROUPS=1)
# ----------------------------------------------------------------- helpers ---
topo_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
topo_die() { printf '[%s] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }
ns() { printf '%s%s' "$SPW_NS_PREFIX" "$1"; }                 # ns c1 -> spw-demo-c1
nsx() { local n; n="$(ns "$1")"; shift; ip netns exec "$n" "$@"; }  # run in a role's namespace
# set a sysctl inside a namespace; missing keys (e.g. IPv6 disabled in the kernel) are ignored
nssysctl() { local n="$1"; shift; local kv; for kv in "$@"; do nsx "$n" sysctl -qw "$kv" >/dev/null 2>&1 || true; done; }

topo_require_root() { [[ $EUID -eq 0 ]] || topo_die "must run as root (network namespaces)"; }

topo_require_tools() {
    local t missing=()
    for t in ip ethtool curl timeout flock ss awk "$SPW_PYTHON"; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    ((${#missing[@]} == 0)) || topo_die "missing tools: ${missing[*]}"
}

# Only one run per SPW_TOPO: holds an flock on fd 9 for the life of the calling shell.
# Children are started with fd 9 closed, so a killed run never leaves the lock held.
topo_lock() {
    mkdir -p "$(dirname "$SPW_LOCK_FILE")"
    exec 9>"$SPW_LOCK_FILE"
    flock -w "${1:-10}" 9 || topo_die "another run of topology '$SPW_TOPO' holds $SPW_LOCK_FILE"
}

# Installs topo_down as the trap on EXIT, INT and TERM (runs once; keeps the exit status).
_topo_trap_done=0
_topo_on_exit() {
    local rc=$?
    if ((_topo_trap_done == 0)); then
        _topo_trap_done=1
        set +e
        if declare -F topo_before_down >/dev/null; then topo_before_down "$rc"; fi  # optional hook
        topo_down
    fi
    exit "$rc"
}
topo_trap() {
    trap '_topo_on_exit' EXIT
    trap 'echo >&2; topo_log "interrupted"; exit 130' INT
    trap 'topo_log "terminated"; exit 143' TERM
}

# Namespaces of this topology that exist now.
topo_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${SPW_NS_PREFIX}" || true; }

# Starts "$@" in role $1's namespace in the background, stdout/stderr to $2, pid to $3.
topo_spawn() {
    local role="$1" log="$2" pidfile="$3"; shift 3
    ip netns exec "$(ns "$role")" "$@" </dev/null >>"$log" 2>&1 9>&- &
    echo $! >"$pidfile"
}

# Waits up to $1 seconds (fractional ok) for "${@:2}" to succeed; 0 if it did.
topo_wait_for() {
    local deadline=$((SECONDS + ${1%.*} + 1)); shift
    while ((SECONDS < deadline)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    "$@" >/dev/null 2>&1
}

# Kills a pid: TERM, up to $2 s (default 3), then KILL.
topo_kill_pid() {
    local pid="$1" grace="${2:-3}" i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# topo_set_log_dir DIR: put this run's logs and request records under DIR (e.g. per e2e test).
topo_set_log_dir() { SPW_LOG_DIR="$1"; SPW_REQUESTS="$SPW_LOG_DIR/requests.tsv"; }

# ------------------------------------------------------------------ down -----
# Removes every namespace (and so every veth and the bridge) of this topology and
# every process inside them. Idempotent; safe when nothing exists. Logs are kept.
topo_down() {
    local n pid pids=() i
    # Every process we start (backends, daemon, clients) runs inside one of our namespaces,
    # so `ip netns pids` finds them all. Pid files are NOT used here: after a killed run
    # their pids may belong to unrelated processes.
    for n in $(topo_namespaces); do
        for pid in $(ip netns pids "$n" 2>/dev/null || true); do pids+=("$pid"); done
    done
    if ((${#pids[@]})); then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        for ((i = 0; i < 30; i++)); do              # up to 3 s for a clean exit
            local alive=0
            for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1 && break; done
            ((alive)) || break
            sleep 0.1
        done
        kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    for n in $(topo_namespaces); do
        # a process may have appeared after the sweep above
        for pid in $(ip netns pids "$n" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns del "$n" 2>/dev/null || topo_log "warning: cannot delete namespace $n"
    done
    rm -rf "$SPW_PID_DIR" 2>/dev/null || true
    rm -f "$SPW_SOCKET" 2>/dev/null || true
    local left; left="$(topo_namespaces)"
    [[ -z "$left" ]] || { topo_log "warning: namespaces left: $left"; return 1; }
    return 0
}

# ------------------------------------------------------------------- up ------
_topo_ns_add() {
    local role="$1" n; n="$(ns "$role")"
    ip netns add "$n"
    nsx "$role" ip link set lo up
    nssysctl "$role" net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}

# veth: $1 role, $2 interface name in that namespace, $3 MAC; the peer "p-$1-$2"
# (max 15 chars) goes into the switch namespace as a bridge port.
_topo_attach() {
    local role="$1" ifn="$2" mac="$3" peer="p-${1}-${2}"
    peer="${peer:0:15}"
    ip link add "$ifn" netns "$(ns "$role")" address "$mac" type veth peer name "$peer" netns "$(ns sw)"
    # veth TX checksum offload hands AF_PACKET frames with unfinished checksums: off on both ends
    nsx "$role" ethtool -K "$ifn" tx off >/dev/null
    nsx sw ethtool -K "$peer" tx off >/dev/null
    nssysctl "$role" "net.ipv6.conf.$ifn.disable_ipv6=1"
    nssysctl sw "net.ipv6.conf.$peer.disable_ipv6=1"
    nsx sw ip link set "$peer" master br0 up
}

topo_up() {
    topo_require_root
    topo_require_tools
    local stale; stale="$(topo_namespaces)"
    if [[ -n "$stale" ]]; then
        topo_log "removing stale topology: $(tr "\n" " " <<<"$stale")"
    fi
    topo_down || topo_die "cannot remove the stale topology"
    mkdir -p "$SPW_RUN_DIR" "$SPW_LOG_DIR" "$SPW_PID_DIR"
    rm -f "$SPW_LOG_DIR"/*.log "$SPW_REQUESTS"
    topo_log "creating topology ${SPW_NS_PREFIX}* (VIP $SPW_VIP:$SPW_VIP_PORT)"

    local r
    for r in sw lb "${SPW_CLIENTS[@]}" "${SPW_BACKENDS[@]}"; do _topo_ns_add "$r"; done

    # the switch: a plain learning bridge, no STP, no address
    nsx sw ip link add br0 type bridge stp_state 0 forward_delay 0
    nssysctl sw net.ipv6.conf.br0.disable_ipv6=1
    nsx sw ip link set br0 up

    # Spillway namespace: lb0 has NO kernel address and ARP off, so only Spillway
    # (DPDK net_af_packet on lb0) answers ARP for the port address and the VIP;
    # mgmt0 carries the kernel stack's address (health checks).
    _topo_attach lb lb0 "$SPW_LB_MAC"
    _topo_attach lb mgmt0 "$SPW_MGMT_MAC"
    nsx lb ip link set lb0 arp off
    nssysctl lb net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.lb0.arp_ignore=8 \
        net.ipv4.conf.mgmt0.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.lb0.rp_filter=0 net.ipv4.conf.mgmt0.rp_filter=0 \
        net.ipv4.ip_forward=0
    nsx lb ip addr add "$SPW_MGMT_ADDR/$SPW_SUBNET_LEN" dev mgmt0
    nsx lb ip link set lb0 up
    nsx lb ip link set mgmt0 up

    for r in "${SPW_CLIENTS[@]}"; do
        _topo_attach "$r" eth0 "${SPW_MAC[$r]}"
        nsx "$r" ip addr add "${SPW_ADDR[$r]}/$SPW_SUBNET_LEN" dev eth0
        nsx "$r" ip link set eth0 up
    done

    for r in "${SPW_BACKENDS[@]}"; do
        _topo_attach "$r" eth0 "${SPW_MAC[$r]}"
        nsx "$r" ip addr add "${SPW_ADDR[$r]}/$SPW_SUBNET_LEN" dev eth0
        # L2 DSR backend: VIP on lo; never answer ARP for it, never announce it
        nsx "$r" ip addr add "$SPW_VIP/32" dev lo
        nssysctl "$r" net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.eth0.arp_ignore=1 \
            net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.eth0.arp_announce=2 \
            net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
            net.ipv4.conf.eth0.rp_filter=0 net.ipv4.conf.lo.rp_filter=0
        nsx "$r" ip link set eth0 up
    done

    for r in "${SPW_BACKENDS[@]}"; do backend_start "$r"; done
    topo_log "topology up: $(topo_namespaces | wc -l) namespaces, backends ${SPW_BACKENDS[*]} listening on :$SPW_VIP_PORT"
}

# --------------------------------------------------------------- backends ----
backend_log() { printf '%s/%s.http.log' "$SPW_LOG_DIR" "$1"; }   # per-request log of a backend
_backend_pidfile() { printf '%s/backend-%s.pid' "$SPW_PID_DIR" "$1"; }
_backend_listening() { [[ -n "$(nsx "$1" ss -Hltn "sport = :$SPW_VIP_PORT" 2>/dev/null)" ]]; }

# backend_start NAME: starts the HTTP server of backend NAME (b1..b4) in its namespace.
backend_start() {
    local b="$1" pidfile ka=()
    [[ -n "${SPW_ADDR[$b]:-}" && " ${SPW_BACKENDS[*]} " == *" $b "* ]] || topo_die "backend_start: unknown backend '$b'"
    pidfile="$(_backend_pidfile "$b")"
    if [[ -s "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        topo_log "backend $b already running (pid $(cat "$pidfile"))"; return 0
    fi
    [[ "$SPW_BACKEND_KEEPALIVE" == 1 ]] || ka=(--no-keepalive)
    mkdir -p "$SPW_PID_DIR" "$SPW_LOG_DIR"
    topo_spawn "$b" "$SPW_LOG_DIR/$b.stderr.log" "$pidfile" \
        "$SPW_PYTHON" "$SPW_LIB_DIR/backend_http.py" --name "$b" --bind "${SPW_BACKEND_BIND:-0.0.0.0}" --port "$SPW_VIP_PORT" \
        --log "$(backend_log "$b")" "${ka[@]}"
    topo_wait_for 5 _backend_listening "$b" ||
        { cat "$SPW_LOG_DIR/$b.stderr.log" >&2 || true; topo_die "backend $b did not start listening within 5 s"; }
}

# backend_stop NAME: stops it (TERM, then KILL after 3 s) and waits until the port is closed.
backend_stop() {
    local b="$1" pidfile
    pidfile="$(_backend_pidfile "$b")"
    if [[ -s "$pidfile" ]]; then topo_kill_pid "$(cat "$pidfile")" 3; fi
    rm -f "$pidfile"
    topo_wait_for 3 bash -c "! ip netns exec '$(ns "$b")' ss -Hltn 'sport = :$SPW_VIP_PORT' | grep -q ." ||
        topo_die "backend $b still listening after stop"
}

backend_pid() { cat "$(_backend_pidfile "$1")" 2>/dev/null; }

# ------------------------------------------------------------------ config ---
# write_config FILE: the Spillway TOML for this topology (examples/demo.toml is the
# output for the default environment).
write_config() {
    local f="$1" b
    mkdir -p "$(dirname "$f")"
    {
        cat <<EOF
# Spillway demo configuration: one-armed L2 DSR load balancer on a veth.
# Generated by write_config in scripts/lib/topology.sh (topology: docs/demo.md).
# Clients 10.200.1.10 (zone z1) and 10.200.2.10 (zone z2) reach the VIP
# $SPW_VIP:$SPW_VIP_PORT; Spillway answers ARP for the VIP and for its port address
# $SPW_PORT_ADDR on lb0, rewrites the destination MAC to the chosen backend's MAC and sends
# the frame back out of lb0. Backends hold the VIP on lo and answer clients directly.

[dataplane]
# No hugepages, no shared config, no PCI scan: runs in a container / namespace.
# The port's virtual device (--vdev) comes from ports[].device; the daemon adds it.
eal_args = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci"]
workers = 1
# Sleep this long (µs) after an empty poll, so the worker shares a core on this small
# host; production uses 0 (pure busy polling).
idle_sleep_us = $SPW_IDLE_SLEEP_US
# The demo passes --socket too; this is the same path.
socket = "$SPW_SOCKET"

[[ports]]
# DPDK af_packet PMD bound to the veth lb0 inside namespace ${SPW_NS_PREFIX}lb.
name = "lb0"
device = "net_af_packet0,iface=lb0"
# Answered in ARP by Spillway; the kernel has no address on lb0.
address = "$SPW_PORT_ADDR"
# lb0's MAC: source MAC of the frames sent to backends.
mac = "$SPW_LB_MAC"

[[zones]]
zone = "z1"
region = "r1"

[[zones]]
zone = "z2"
region = "r1"

# Client zones (longest prefix match): c1 is in z1, c2 in z2.
[[client_zones]]
prefix = "10.200.1.0/24"
zone = "z1"

[[client_zones]]
prefix = "10.200.2.0/24"
zone = "z2"

[[services]]
name = "web"
vip = "$SPW_VIP"
port = $SPW_VIP_PORT
protocol = "tcp"
# L2 DSR (the default): destination MAC = backend MAC, same port out.
forwarding_mode = "L2_DSR"
EOF
        [[ -z "$SPW_SERVICE_EXTRA" ]] || printf '%s\n' "$SPW_SERVICE_EXTRA"
        if [[ "$SPW_HEALTH_CHECK" == 1 ]]; then
            cat <<EOF

# Probed from the host stack of ${SPW_NS_PREFIX}lb (mgmt0, $SPW_MGMT_ADDR) to each backend's
# own address. Backends log these as path /healthz; the demo counts only path "/".
[services.health_check]
type = "http"
path = "/healthz"
expected_status = 200
check_interval_sec = 1.0
timeout_sec = 0.5
healthy_threshold = 1
unhealthy_threshold = 2
EOF
        fi
        # SPW_WRITE_BACKENDS, when set, names a function that writes the backends (groups)
        if [[ -n "${SPW_WRITE_BACKENDS:-}" ]]; then "$SPW_WRITE_BACKENDS"
        elif [[ "${SPW_ZONE_GROUPS:-0}" == 1 ]]; then zone_groups_write_backends; else
        for b in "${SPW_BACKENDS[@]}"; do
            cat <<EOF

[[services.backends]]
name = "$b"
address = "${SPW_ADDR[$b]}"
mac = "${SPW_MAC[$b]}"
zone = "${SPW_ZONE[$b]}"
EOF
            [[ -z "${SPW_BACKEND_EXTRA[$b]:-}" ]] || printf '%s\n' "${SPW_BACKEND_EXTRA[$b]}"
        done; fi
    } >"$f.tmp.$$"
    mv -f "$f.tmp.$$" "$f"
}

# ---------------------------------------------------------------- daemon -----
# spillway_start [EXTRA_ARGS...]: starts $SPILLWAY_BIN in the lb namespace in the background:
#   spillway --config $SPW_CONFIG --socket $SPW_SOCKET EXTRA_ARGS...
# stdout+stderr -> $SPW_LOG_DIR/spillway.log, pid -> $SPW_PID_DIR/spillway.pid.
spillway_start() {
    [[ -x "$SPILLWAY_BIN" ]] || topo_die "spillway binary not found or not executable: $SPILLWAY_BIN (build it, or set SPILLWAY_BIN)"
    [[ -f "$SPW_CONFIG" ]] || write_config "$SPW_CONFIG"
    mkdir -p "$(dirname "$SPW_SOCKET")"
    rm -f "$SPW_SOCKET"
    topo_log "starting $SPILLWAY_BIN --config $SPW_CONFIG --socket $SPW_SOCKET $* (namespace $(ns lb), log $SPW_LOG_DIR/spillway.log)"
    topo_spawn lb "$SPW_LOG_DIR/spillway.log" "$SPW_PID_DIR/spillway.pid" \
        "$SPILLWAY_BIN" --config "$SPW_CONFIG" --socket "$SPW_SOCKET" "$@"
}
spillway_pid() { cat "$SPW_PID_DIR/spillway.pid" 2>/dev/null; }
spillway_alive() { local p; p="$(spillway_pid)" && [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; }

# spillwayctl_cmd ARGS...: $SPILLWAYCTL_BIN --socket $SPW_SOCKET ARGS... (10 s timeout).
spillwayctl_cmd() { timeout 10 "$SPILLWAYCTL_BIN" --socket "$SPW_SOCKET" "$@"; }
# backend_health NAME: true/false/unknown as the daemon sees it (spillwayctl status --json);
# NAME is a backend or an endpoint of a group
backend_health() {
    spillwayctl_cmd status --json 2>/dev/null | "$SPW_PYTHON" -c "
import json, sys
r = json.load(sys.stdin)
print(next((str(x['healthy']).lower() for b in r['backends'] for x in [b] + b.get('members', []) if x.get('backend', x.get('name')) == '$1'), 'unknown'))" 2>/dev/null || echo unknown
}
# spillway_wait_health NAME true|false [TIMEOUT_S]: waits until the daemon sees that
# state; prints the milliseconds it took; non-zero on timeout.
spillway_wait_health() {
    local start; start=$(date +%s%N)
    while (( ($(date +%s%N) - start) / 1000000000 < ${3:-15} )); do
        if [[ "$(backend_health "$1")" == "$2" ]]; then
            echo $(( ($(date +%s%N) - start) / 1000000 )); return 0
        fi
        sleep 0.1
    done
    return 1
}
# The demo's service policy: zonal affinity that spills across zones when fewer than 80 %
# of the client zone's backends are healthy (spec/zonal-affinity.md).
SPW_DEMO_SERVICE_EXTRA=$'# Zonal affinity: keep clients in their zone while >= 80 % of its endpoints are healthy.\nzonal_affinity = "ZONAL_AFFINITY_SPILL_CROSS_ZONE"\nspillover_ratio = 0.8'

# spillway_wait_ready [TIMEOUT=30]: until `spillwayctl status` answers; fails early
# (with the daemon log's tail) if the daemon exits.
spillway_wait_ready() {
    local t="${1:-30}" deadline
    [[ -x "$SPILLWAYCTL_BIN" ]] || topo_die "spillwayctl not found or not executable: $SPILLWAYCTL_BIN (set SPILLWAYCTL_BIN)"
    deadline=$((SECONDS + t))
    while ((SECONDS < deadline)); do
        if ! spillway_alive; then
            tail -n 40 "$SPW_LOG_DIR/spillway.log" >&2 2>/dev/null || true
            topo_die "spillway exited before becoming ready (log: $SPW_LOG_DIR/spillway.log)"
        fi
        if [[ -S "$SPW_SOCKET" ]] && timeout 3 "$SPILLWAYCTL_BIN" --socket "$SPW_SOCKET" status >/dev/null 2>&1; then
            topo_log "spillway ready (pid $(spillway_pid), socket $SPW_SOCKET)"
            return 0
        fi
        sleep 0.3
    done
    tail -n 40 "$SPW_LOG_DIR/spillway.log" >&2 2>/dev/null || true
    topo_die "spillwayctl status did not answer within ${t}s (socket $SPW_SOCKET)"
}

# spillway_stop: TERM, then KILL after 5 s.
spillway_stop() { local p; p="$(spillway_pid)" && topo_kill_pid "$p" 5; rm -f "$SPW_PID_DIR/spillway.pid"; }

# ---------------------------------------------------------------- clients ----
# Request records ($SPW_REQUESTS, TSV, appended):
#   mode  client  conn-id  seq  status  backend  local-port  error
# mode "new" (one TCP connection per request, curl) or "keepalive" (many requests per
# connection); status 000 = failed; backend from the body's "backend=" line, "-" if none.

# _client_loop CLIENT COUNT URL [CURL_FAMILY]: runs inside the client namespace; curl per
# request (CURL_FAMILY: e.g. -6). Stops early (records the rest as "aborted") after 10
# consecutive failures.
_client_loop() {
    local c="$1" n="$2" url="$3" fam="${4:-}" i out rc code lport be fails=0
    for ((i = 1; i <= n; i++)); do
        if ((fails >= 10)); then
            printf 'new\t%s\t%s-n%d\t%d\t000\t-\t-\taborted-after-10-failures\n' "$c" "$c" "$i" 1
            continue
        fi
        rc=0
        # shellcheck disable=SC2086  # $fam is one option or nothing
        out="$(curl $fam -sS -H 'Connection: close' --connect-timeout "$SPW_CURL_CONNECT_TIMEOUT" \
            --max-time "$SPW_CURL_MAX_TIME" -w '\n@@ %{http_code} %{local_port}\n' "$url" 2>/dev/null)" || rc=$?
        code="$(sed -n 's/^@@ \([0-9]*\) .*/\1/p' <<<"$out")"; code="${code:-000}"
        lport="$(sed -n 's/^@@ [0-9]* \([0-9]*\)$/\1/p' <<<"$out")"; lport="${lport:--}"
        be="$(sed -n 's/^backend=//p' <<<"$out" | head -n1)"; be="${be:--}"
        if ((rc != 0)) || [[ "$code" != 200 ]]; then
            fails=$((fails + 1))
            printf 'new\t%s\t%s-n%d\t1\t%s\t%s\t%s\tcurl-rc-%d\n' "$c" "$c" "$i" "$code" "$be" "$lport" "$rc"
        else
            fails=0
            printf 'new\t%s\t%s-n%d\t1\t%s\t%s\t%s\t-\n' "$c" "$c" "$i" "$code" "$be" "$lport"
        fi
    done
}

# run_clients N [CLIENT...]: N HTTP GETs of http://VIP/ (or $SPW_CLIENT_URL, with curl
# option $SPW_CURL_FAMILY, e.g. http://[VIP6]:80/ and -6) in total, split evenly over the
# clients (default c1 c2, running in parallel), each on a NEW TCP connection (curl,
# Connection: close, connect timeout $SPW_CURL_CONNECT_TIMEOUT s, max $SPW_CURL_MAX_TIME s).
# Appends records to $SPW_REQUESTS and prints a summary of this batch.
run_clients() {
    local n="$1"; shift
    local clients=("$@") k i c share pids=() tmp
    [[ "$n" =~ ^[0-9]+$ ]] || topo_die "run_clients: N must be a number"
    ((${#clients[@]})) || clients=("${SPW_CLIENTS[@]}")
    k="${#clients[@]}"
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/spw-clients.XXXXXX")"
    for i in "${!clients[@]}"; do
        c="${clients[$i]}"
        share=$((n / k + (i < n % k ? 1 : 0)))
        ip netns exec "$(ns "$c")" bash -c "$(declare -f _client_loop); SPW_CURL_CONNECT_TIMEOUT=$SPW_CURL_CONNECT_TIMEOUT SPW_CURL_MAX_TIME=$SPW_CURL_MAX_TIME _client_loop '$c' $share '${SPW_CLIENT_URL:-http://$SPW_VIP:$SPW_VIP_PORT/}' '${SPW_CURL_FAMILY:-}'" \
            >"$tmp/$c.tsv" 2>"$tmp/$c.err" 9>&- &
        pids+=($!)
    done
    local rc=0
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    cat "$tmp"/*.tsv >>"$SPW_REQUESTS"
    topo_log "run_clients: $n new-connection requests from ${clients[*]}"
    cat "$tmp"/*.tsv | clients_summary /dev/stdin
    rm -rf "$tmp"
    return "$rc"
}

# run_keepalive_clients CONNS REQS [CLIENT...]: per client, CONNS connections one after
# another, each making REQS requests on the same TCP connection (python raw socket).
run_keepalive_clients() {
    local conns="$1" reqs="$2"; shift 2
    local clients=("$@") c pids=() tmp i rc=0
    ((${#clients[@]})) || clients=("${SPW_CLIENTS[@]}")
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/spw-ka.XXXXXX")"
    for c in "${clients[@]}"; do
        ip netns exec "$(ns "$c")" timeout $((conns * reqs * (4 + ${SPW_KA_INTERVAL%.*}) + 10)) "$SPW_PYTHON" "$SPW_LIB_DIR/keepalive_client.py" \
            --client "$c" --host "$SPW_VIP" --port "$SPW_VIP_PORT" --conns "$conns" --requests "$reqs" \
            --interval "$SPW_KA_INTERVAL" --timeout "$SPW_CURL_MAX_TIME" >"$tmp/$c.tsv" 2>"$tmp/$c.err" 9>&- &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    cat "$tmp"/*.err >&2 2>/dev/null || true
    cat "$tmp"/*.tsv >>"$SPW_REQUESTS"
    topo_log "run_keepalive_clients: ${#clients[@]} clients x $conns connections x $reqs requests"
    cat "$tmp"/*.tsv | clients_summary /dev/stdin
    rm -rf "$tmp"
    return "$rc"
}

# clients_summary [FILE]: summary of request records (stdin or FILE): per client ok/failed,
# per backend, per client x backend, keep-alive connections that saw >1 backend.
clients_summary() {
    awk -F'\t' '
    { total++; key = $1 "/" $2
      if ($5 == "200") { ok[key]++; okall++; be[$6]++; cb[$2 " -> " $6]++ } else { bad[key]++; badall++; err[$8]++ }
      clients[key] = 1
      if ($1 == "keepalive") { if (!(($3, $6) in seen)) { seen[$3, $6] = 1; nb[$3]++ } ; kac[$3] = 1 } }
    END {
      printf "1 requests: %d ok, %d failed (of %d)\n", okall, badall, total
      for (k in clients) printf "2 %-16s ok %5d  failed %5d\n", k, ok[k], bad[k]
      for (b in be) printf "3 served by %-6s %5d\n", b, be[b]
      for (x in cb) printf "4 %-14s %5d\n", x, cb[x]
      for (e in err) printf "5 error %-30s %5d\n", e, err[e]
      nk = 0; moved = 0
      for (c in kac) { nk++; if (nb[c] > 1) { moved++; printf "6 keep-alive connection %s saw %d backends\n", c, nb[c] } }
      if (nk) printf "7 keep-alive connections: %d, on one backend: %d\n", nk, nk - moved
    }' "${1:-/dev/stdin}" | sort -k1,1n -k2 | sed 's/^[0-9] /  /'
}

# backend_counts: requests per backend from the servers' own logs: load-balanced ones
# (arrived on the VIP or, once IPv6 is up, the IPv6 VIP; path "/") and others (own
# address, health checks).
backend_counts() {
    local b f vip other
    printf '  %-8s %-14s %-6s %8s %8s\n' backend address zone via-VIP other
    for b in "${SPW_BACKENDS[@]}"; do
        f="$(backend_log "$b")"
        vip=0; other=0
        if [[ -f "$f" ]]; then
            vip="$(backend_served "$b")"
            other=$(($(wc -l < "$f") - vip))
        fi
        printf '  %-8s %-14s %-6s %8d %8d\n' "$b" "${SPW_ADDR[$b]}" "${SPW_ZONE[$b]}" "$vip" "$other"
    done
}
# backend_served NAME: number of load-balanced requests (VIP, path /) NAME logged.
backend_served() {
    local f; f="$(backend_log "$1")"
    [[ -f "$f" ]] || { echo 0; return; }
    awk -F'\t' -v v="$SPW_VIP" -v v6="${SPW_VIP6:-}" '($5 == v || ($5 == v6 && v6 != "")) && $7 == "/" {n++} END {print n + 0}' "$f"
}
