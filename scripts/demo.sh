#!/usr/bin/env bash
# shellcheck disable=SC2119  # functions with optional arguments called without them
# Spillway demo: real HTTP clients -> Spillway (DPDK net_af_packet on a veth, L2 DSR)
# -> four real HTTP backends, all in network namespaces on this host.
#
#   sudo scripts/demo.sh [--no-install] [--no-build] [--requests N]
#
# As root on Debian 12: installs missing packages (apt-get), builds the release
# binaries (cargo; rustup's cargo must already be installed), brings the topology of
# docs/demo.md up, starts spillway in its namespace (socket /run/spillway-demo/ctl.sock),
# makes N (default 200) HTTP requests on new connections plus keep-alive connections with
# zonal affinity on, then N/2 over IPv6 to the IPv6 VIP (a second service, both families
# through the same port), then stops one backend (failover: health checks mark it down, its
# zone's clients spill over) and starts it again (recovery), printing per phase which
# backends each client reached; at the end how many requests each backend served (from
# the servers' own logs) next to `spillwayctl status`. Removes everything on exit,
# failure or Ctrl-C.
#
# Environment: SPILLWAY_BIN, SPILLWAYCTL_BIN (default target/release/...), SPW_SKIP_INSTALL=1,
# SPW_SKIP_BUILD=1, SPW_DEMO_REQUESTS, SPW_READY_TIMEOUT (s, default 30); the rest in
# scripts/lib/topology.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SPW_TOPO="${SPW_TOPO:-demo}"
# shellcheck source-path=SCRIPTDIR source=lib/topology.sh
source "$HERE/lib/topology.sh"
source "$HERE/lib/ipv6.sh"

REQUESTS="${SPW_DEMO_REQUESTS:-200}"
KA_CONNS=5      # keep-alive connections per client
KA_REQS=20      # requests per keep-alive connection
while (($#)); do
    case "$1" in
        --no-install) SPW_SKIP_INSTALL=1 ;;
        --no-build) SPW_SKIP_BUILD=1 ;;
        --requests) REQUESTS="${2:?--requests N}"; shift ;;
        -h | --help) sed -n '3,17p' "$0"; exit 0 ;;
        *) topo_die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done
[[ "$REQUESTS" =~ ^[0-9]+$ ]] || topo_die "--requests must be a number"

topo_require_root
# One demo at a time, from the start: the lock is taken before installing and building, so
# a second run waits for (or gives up on) this one instead of building beside it, and a
# run inside an outer `flock` holds no other lock than its own while it builds. apt-get and
# cargo start with fd 9 closed (as every child does: scripts/lib/topology.sh), so a demo
# killed while it builds leaves no lock behind.
topo_lock

# ------------------------------------------------------------------ packages -
PACKAGES=(libdpdk-dev dpdk clang libclang-dev pkg-config iproute2 ethtool curl python3 tcpdump util-linux)
if [[ "${SPW_SKIP_INSTALL:-0}" != 1 ]]; then
    missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]})); then
        topo_log "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        timeout 600 apt-get update -q 9>&- || topo_die "apt-get update failed"
        timeout 1200 apt-get install -y -q --no-install-recommends "${missing[@]}" 9>&- || topo_die "apt-get install failed"
    else
        topo_log "packages present: ${PACKAGES[*]}"
    fi
fi

# --------------------------------------------------------------------- build -
if [[ "${SPW_SKIP_BUILD:-0}" != 1 ]]; then
    CARGO="$(command -v cargo || true)"
    [[ -z "$CARGO" && -x "${HOME:-/root}/.cargo/bin/cargo" ]] && CARGO="${HOME:-/root}/.cargo/bin/cargo"
    [[ -n "$CARGO" ]] || topo_die "cargo not found: install Rust with rustup (https://rustup.rs) and re-run, or pass --no-build with SPILLWAY_BIN/SPILLWAYCTL_BIN"
    topo_log "building: cargo build --release -p spillway-dataplane -p spillway-ctl"
    (cd "$SPW_REPO_ROOT" && "$CARGO" build --release -p spillway-dataplane -p spillway-ctl 9>&-) || topo_die "cargo build failed"
fi
[[ -x "$SPILLWAY_BIN" ]] || topo_die "no daemon at $SPILLWAY_BIN (build it or set SPILLWAY_BIN)"
[[ -x "$SPILLWAYCTL_BIN" ]] || topo_die "no spillwayctl at $SPILLWAYCTL_BIN (build it or set SPILLWAYCTL_BIN)"

# ------------------------------------------------------------------ topology -
# on failure: show why before everything is removed
_demo_child=
topo_before_down() {
    # stop the traffic phases (their own process group: clients, waits) at once
    if [[ -n "$_demo_child" ]]; then
        kill -TERM -- "-$_demo_child" 2>/dev/null || true
        sleep 0.2
        kill -KILL -- "-$_demo_child" 2>/dev/null || true
    fi
    if [[ "$1" != 0 && "$1" != 130 && "$1" != 143 && -f "$SPW_LOG_DIR/spillway.log" ]]; then
        topo_log "last lines of $SPW_LOG_DIR/spillway.log:"
        tail -n 20 "$SPW_LOG_DIR/spillway.log" >&2 || true
    fi
    topo_log "removing the demo topology"
}
topo_trap
topo_up
# both families: the backends serve IPv4 and IPv6 (dual stack), the IPv6 VIP on their lo
ipv6_topology_up
export SPW_BACKEND_BIND=::
SPW_ZONE_GROUPS=1 SPW_SERVICE_EXTRA="$SPW_DEMO_SERVICE_EXTRA" ipv6_write_config "$SPW_CONFIG"
spillway_start
spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"

# The traffic phases and the report run in a background job with its own process group
# (set -m), and this shell waits for it: Ctrl-C reaches this shell's trap at once (a
# foreground command would delay it), and the trap stops the whole job and cleans up.
demo_body() {
# ------------------------------------------------------------------- traffic -
    echo
    echo "== 1. zonal affinity: $REQUESTS HTTP requests to http://$SPW_VIP/ from c1 (zone z1) and c2 (zone z2),"
    echo "      one TCP connection each; SPILL_CROSS_ZONE keeps each client in its zone (c1 -> b1/b2, c2 -> b3/b4)"
    run_clients "$REQUESTS" || true
    echo
    echo "== keep-alive: per client $KA_CONNS connections x $KA_REQS requests on one TCP connection"
    run_keepalive_clients "$KA_CONNS" "$KA_REQS" || true

    echo
    echo "== IPv6: $((REQUESTS / 2)) requests to http://[$SPW_VIP6]/ from c1 (${SPW_ADDR6[c1]}) and c2 (${SPW_ADDR6[c2]})"
    echo "      through the same Spillway port (service web6, L2 DSR over IPv6, Neighbor Discovery answered by Spillway)"
    SPW_CLIENT_URL="http://[$SPW_VIP6]:$SPW_VIP_PORT/" SPW_CURL_FAMILY=-6 run_clients $((REQUESTS / 2)) || true

    echo
    echo "== 2. failover: stopping b1's HTTP server; health checks (1 s interval, 2 failures) mark it down"
    backend_stop b1
    if ms="$(spillway_wait_health b1 false 15)"; then
        echo "   b1 marked unhealthy ${ms} ms after it stopped"
    else
        topo_log "warning: b1 was not marked unhealthy within 15 s"
    fi
    echo "   zone z1 now has 1 of 2 backends healthy (0.5 < spillover_ratio 0.8): c1 spills to every healthy backend"
    run_clients $((REQUESTS / 2)) || true

    echo
    echo "== 3. recovery: starting b1 again; c1 returns to zone z1"
    backend_start b1
    if ms="$(spillway_wait_health b1 true 15)"; then
        echo "   b1 healthy again after ${ms} ms"
    else
        topo_log "warning: b1 was not marked healthy within 15 s"
    fi
    # The same server answers web6's IPv6 health checks (b1v6), probed on their own
    # schedule: wait for it too (a few seconds at most), so the final status agrees.
    if ms="$(spillway_wait_health b1v6 true 5)"; then
        echo "   b1v6 (service web6, IPv6) healthy again ${ms} ms later"
    else
        topo_log "warning: b1v6 was not marked healthy within 5 s after b1"
    fi
    run_clients $((REQUESTS / 2)) || true

    # -------------------------------------------------------------------- report -
    echo
    echo "== served per backend (from the backends' own request logs; other = direct/health checks)"
    backend_counts
    echo
    echo "== spillwayctl --socket $SPW_SOCKET status"
    spillwayctl_cmd status || topo_log "warning: spillwayctl status failed"
    echo
    echo "== all requests (new + keep-alive)"
    clients_summary "$SPW_REQUESTS"
    failed="$(awk -F'\t' '$5 != "200"' "$SPW_REQUESTS" | wc -l)"
    echo
    if ((failed)); then
        topo_log "demo finished: $failed requests failed (records: $SPW_REQUESTS, logs: $SPW_LOG_DIR)"
        exit 1
    fi
    topo_log "demo finished: all requests answered (logs kept in $SPW_LOG_DIR)"
}
set -m
demo_body &
_demo_child=$!
set +m
rc=0
wait "$_demo_child" || rc=$?
_demo_child=
exit "$rc"
