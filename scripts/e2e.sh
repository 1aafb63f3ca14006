#!/usr/bin/env bash
# shellcheck disable=SC2119  # functions with optional arguments called without them
# End-to-end tests of Spillway on the demo topology (docs/demo.md), real TCP traffic.
#
#   sudo scripts/e2e.sh basic          # one test
#   sudo scripts/e2e.sh basic config   # several
#   sudo scripts/e2e.sh all            # every e2e_<name> function below, in file order
#   scripts/e2e.sh list                # names
#
# Needs built binaries (no build here): SPILLWAY_BIN / SPILLWAYCTL_BIN, default
# target/release/{spillway,spillwayctl}. Topology id "e2e" (namespaces spw-e2e-*,
# socket /run/spillway-e2e/ctl.sock); logs of test T in /run/spillway-e2e/logs/T/.
# Exit status: 0 if every test passed, 1 otherwise (each failure printed as FAIL: ...).
#
# Adding a test: write a function `e2e_<name>` (runs in a subshell, set -e; the
# topology is NOT up when it starts and is torn down after it). Use e2e_setup to get
# topology + config + daemon, the library's run_clients / run_keepalive_clients /
# backend_stop / backend_start / spillwayctl_cmd, and e2e_check / e2e_fail to assert;
# end with e2e_done. A one-line description goes in a comment "## <name>: text".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SPW_TOPO="${SPW_TOPO:-e2e}"
# shellcheck source-path=SCRIPTDIR source=lib/topology.sh
source "$HERE/lib/topology.sh"
# shellcheck source-path=SCRIPTDIR source=lib/fleet.sh
source "$HERE/lib/fleet.sh"   # ecmp / vip-drain / prometheus topology
# shellcheck source-path=SCRIPTDIR source=lib/ipv6.sh
source "$HERE/lib/ipv6.sh"    # IPv6 addressing of test `ipv6`
# Tests by topic (scripts/e2e/*.sh): run after the tests of this file, in file order.
E2E_TOPIC_FILES=("$HERE"/e2e/*.sh)
for _f in "${E2E_TOPIC_FILES[@]}"; do
    # shellcheck disable=SC1090
    source "$_f"
done
E2E_LOG_ROOT="$SPW_RUN_DIR/logs"
_e2e_child=

# ---------------------------------------------------------------- helpers ----
_e2e_errors=()
# e2e_check CMD...: records a failure (with the command) if CMD fails; carries on.
e2e_check() {
    local msg="$1"; shift
    if "$@"; then printf '  ok    %s\n' "$msg"; else printf '  FAIL: %s\n' "$msg"; _e2e_errors+=("$msg"); fi
}
# e2e_fail MSG: stops the test now.
e2e_fail() { printf '  FAIL: %s\n' "$*"; exit 1; }
# e2e_done: ends a test; non-zero if any e2e_check failed.
e2e_done() {
    if [[ -f "$SPW_PID_DIR/spillway.pid" ]]; then
        e2e_check "spillway still running at the end" spillway_alive
    fi
    if ((${#_e2e_errors[@]})); then
        printf '  %d check(s) failed\n' "${#_e2e_errors[@]}"; exit 1
    fi
}
# e2e_setup: topology up, config written, daemon started and answering.
e2e_setup() {
    topo_up
    write_config "$SPW_CONFIG"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
}
# Record queries over $SPW_REQUESTS (mode client conn seq status backend lport error).
req_count() { awk -F'\t' -v m="$1" '$1 == m' "$SPW_REQUESTS" | wc -l; }
req_failed() { awk -F'\t' -v m="$1" '$1 == m && $5 != "200"' "$SPW_REQUESTS" | wc -l; }
req_backend_count() { awk -F'\t' -v b="$1" '$5 == "200" && $6 == b' "$SPW_REQUESTS" | wc -l; }
# keep-alive connections that saw more than one backend (or a failure), one per line
ka_split_connections() {
    awk -F'\t' '$1 == "keepalive" { if ($5 != "200") bad[$3] = 1; else if (!(($3, $6) in s)) { s[$3, $6] = 1; n[$3]++ } ; c[$3] = 1 }
        END { for (k in c) if (n[k] > 1 || bad[k]) print k, n[k] + 0, (bad[k] ? "with failures" : "") }' "$SPW_REQUESTS"
}
_gt0() { (($1 > 0)); }
_eq() { [[ "$1" == "$2" ]]; }
_ge() { (($1 >= $2)); }
# backends (sorted, space-separated) that answered requests of client $1 / of everyone
client_backends() { awk -F'\t' -v c="$1" '$2 == c && $5 == "200" {print $6}' "$SPW_REQUESTS" | sort -u | tr '\n' ' ' | sed 's/ $//'; }
all_backends() { awk -F'\t' '$5 == "200" {print $6}' "$SPW_REQUESTS" | sort -u | tr '\n' ' ' | sed 's/ $//'; }
# status_field KEY: a top-level field of `spillwayctl status --json`
status_field() { spillwayctl_cmd status --json | "$SPW_PYTHON" -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
# wait_health NAME true|false [TIMEOUT_S]: waits until the daemon sees that state
wait_health() {
    spillway_wait_health "$1" "$2" "${3:-15}" >/dev/null || e2e_fail "$1 did not become healthy=$2 within ${3:-15} s"
}

# ------------------------------------------------------------------ tests ----
## basic: 200+ new-connection requests and keep-alive connections through the VIP; all answered, every backend serves, keep-alive connections stay on one backend
e2e_basic() {
    local n="${E2E_BASIC_REQUESTS:-240}" b total served_sum ok_total
    e2e_setup
    run_clients "$n" || true
    run_keepalive_clients 5 20 || true
    echo "  spillwayctl status:"; spillwayctl_cmd status | sed 's/^/    /' || true
    backend_counts

    total="$(req_count new)"
    e2e_check "made $total >= 200 new-connection requests" _ge "$total" 200
    e2e_check "all new-connection requests answered 200 ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "all keep-alive requests answered 200 ($(req_failed keepalive) failed)" _eq "$(req_failed keepalive)" 0
    for b in "${SPW_BACKENDS[@]}"; do
        e2e_check "backend $b served some requests (its log: $(backend_served "$b"), clients saw: $(req_backend_count "$b"))" \
            _gt0 "$(backend_served "$b")"
    done
    served_sum=0
    for b in "${SPW_BACKENDS[@]}"; do served_sum=$((served_sum + $(backend_served "$b"))); done
    ok_total="$(awk -F'\t' '$5 == "200"' "$SPW_REQUESTS" | wc -l)"
    e2e_check "backends logged exactly the $ok_total answered requests (logged $served_sum)" _eq "$served_sum" "$ok_total"
    local split; split="$(ka_split_connections)"
    [[ -z "$split" ]] || printf '    %s\n' "$split"
    e2e_check "every keep-alive TCP connection stayed on one backend" _eq "$split" ""
    e2e_check "spillway still running" spillway_alive
    e2e_done
}

## health_failover: a stopped backend is marked unhealthy within interval x unhealthy_threshold + one interval; new connections avoid it; restarted, it serves again
e2e_health_failover() {
    e2e_setup
    run_clients 40 >/dev/null || true
    e2e_check "all requests answered before the failure ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_stop b2
    local t0=$SECONDS ok=0 ms
    local start; start=$(date +%s%N)
    while (( SECONDS - t0 < 15 )); do
        if [[ "$(backend_health b2)" == false ]]; then ok=1; break; fi
        sleep 0.1
    done
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "  b2 marked unhealthy after ${ms} ms (limit: 1 s interval x 2 + 1 s = 3000 ms)"
    e2e_check "b2 marked unhealthy" _eq "$ok" 1
    e2e_check "detected within 3000 ms (+500 ms polling slack): ${ms} ms" _ge 3500 "$ms"
    : >"$SPW_REQUESTS"
    run_clients 100 >/dev/null || true
    e2e_check "100 requests made after b2 was marked unhealthy" _eq "$(req_count new)" 100
    e2e_check "none of them failed, i.e. none was sent to the dead b2 ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_start b2
    t0=$SECONDS; ok=0
    while (( SECONDS - t0 < 15 )); do
        if [[ "$(backend_health b2)" == true ]]; then ok=1; break; fi
        sleep 0.1
    done
    e2e_check "b2 healthy again after restart" _eq "$ok" 1
    : >"$SPW_REQUESTS"
    run_clients 100 >/dev/null || true
    e2e_check "all requests answered after the restart ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "b2 serves again ($(req_backend_count b2) requests)" _gt0 "$(req_backend_count b2)"
    e2e_done
}

## ipv6: curl -6 clients reach [VIP6]:80 over L2 DSR (VIP6 on the backends' lo, DAD off), every backend serves; a stopped backend is found unhealthy over IPv6 and avoided, then serves again
e2e_ipv6() {
    topo_up
    ipv6_topology_up
    ipv6_write_config "$SPW_CONFIG"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    wait_health b1v6 true
    local b ms
    export SPW_CLIENT_URL="http://[$SPW_VIP6]:$SPW_VIP_PORT/" SPW_CURL_FAMILY=-6
    # A client's first connection waits for Neighbor Discovery of the VIP (and the
    # backend's of the client); a lost first solicitation is retransmitted after 1 s
    # (RFC 4861 RetransTimer), so give IPv6 connects 3 s instead of the IPv4 tests' 1 s.
    export SPW_CURL_CONNECT_TIMEOUT=3
    run_clients 120 || true
    e2e_check "120 IPv6 requests made" _eq "$(req_count new)" 120
    e2e_check "all IPv6 requests answered 200 ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    for b in "${SPW_BACKENDS[@]}"; do
        e2e_check "backend $b served on [$SPW_VIP6] ($(ipv6_served "$b") requests)" _gt0 "$(ipv6_served "$b")"
    done
    echo "  spillwayctl status:"; spillwayctl_cmd status | sed 's/^/    /' || true
    e2e_check "status shows the IPv6 endpoints" _contains "$(spillwayctl_cmd status)" "${SPW_ADDR6[b1]}"
    e2e_check "explain takes an IPv6 client" _contains "$(spillwayctl_cmd explain --client "${SPW_ADDR6[c1]}" --vip "[$SPW_VIP6]:80/tcp")" "-> backend b"
    e2e_check "Spillway answered Neighbor Solicitations" _gt0 "$(status_counter nd_advertisements)"
    # health failover over IPv6
    backend_stop b2
    ms="$(spillway_wait_health b2v6 false 15)" || e2e_fail "b2v6 not marked unhealthy within 15 s"
    echo "  b2v6 marked unhealthy after ${ms} ms"
    : >"$SPW_REQUESTS"
    run_clients 60 >/dev/null || true
    e2e_check "60 IPv6 requests after the failure, none failed ($(req_failed new) failed)" _eq "$(req_failed new)/$(req_count new)" "0/60"
    SPW_BACKEND_BIND=:: backend_start b2
    wait_health b2v6 true
    : >"$SPW_REQUESTS"
    run_clients 80 >/dev/null || true
    e2e_check "all requests answered after the restart ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "b2 serves IPv6 again ($(req_backend_count b2) requests)" _gt0 "$(req_backend_count b2)"
    e2e_done
}

## zonal_stay: ZONAL_AFFINITY_STAY_WITHIN_ZONE: z1 clients reach only z1 backends, z2 clients only z2 backends
e2e_zonal_stay() {
    SPW_SERVICE_EXTRA='zonal_affinity = "ZONAL_AFFINITY_STAY_WITHIN_ZONE"'
    e2e_setup
    run_clients 200 >/dev/null || true
    clients_summary "$SPW_REQUESTS"
    e2e_check "all requests answered ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "c1 (z1) reached only z1 backends" _eq "$(client_backends c1)" "b1 b2"
    e2e_check "c2 (z2) reached only z2 backends" _eq "$(client_backends c2)" "b3 b4"
    e2e_done
}

## zonal_spill: SPILL_CROSS_ZONE ratio 0.8, three z1 backends: two stopped -> z1 clients spill to all healthy backends; restarted -> back to z1
e2e_zonal_spill() {
    SPW_ZONE[b3]=z1
    SPW_SERVICE_EXTRA=$'zonal_affinity = "ZONAL_AFFINITY_SPILL_CROSS_ZONE"\nspillover_ratio = 0.8'
    e2e_setup
    run_clients 150 c1 >/dev/null || true
    e2e_check "all healthy: c1 stays in z1 (b1 b2 b3)" _eq "$(client_backends c1)" "b1 b2 b3"
    backend_stop b1; backend_stop b2
    wait_health b1 false; wait_health b2 false
    : >"$SPW_REQUESTS"
    run_clients 150 c1 >/dev/null || true
    e2e_check "two of three z1 down (1/3 < 0.8): c1 spills to every healthy backend (b3 b4)" _eq "$(client_backends c1)" "b3 b4"
    e2e_check "no request failed while spilled ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_start b1; backend_start b2
    wait_health b1 true; wait_health b2 true
    : >"$SPW_REQUESTS"
    run_clients 150 c1 >/dev/null || true
    e2e_check "restarted: c1 back in z1 (b1 b2 b3)" _eq "$(client_backends c1)" "b1 b2 b3"
    e2e_done
}

## failover_policy: b3 b4 failover backends, failover_ratio 0.5: primaries serve; h = 0.5 stays on primaries; both down -> failover; back -> failback
e2e_failover_policy() {
    SPW_BACKEND_EXTRA[b3]='failover = true'
    SPW_BACKEND_EXTRA[b4]='failover = true'
    SPW_SERVICE_EXTRA=$'failover_ratio = 0.5\nconnection_drain_timeout_sec = 5'
    e2e_setup
    run_clients 100 >/dev/null || true
    e2e_check "primaries serve: only b1 b2" _eq "$(all_backends)" "b1 b2"
    backend_stop b1; wait_health b1 false
    : >"$SPW_REQUESTS"
    run_clients 60 >/dev/null || true
    e2e_check "h = 1/2 is not < 0.5: stay on the healthy primary b2" _eq "$(all_backends)" "b2"
    backend_stop b2; wait_health b2 false
    : >"$SPW_REQUESTS"
    run_clients 100 >/dev/null || true
    e2e_check "no primary healthy: failover backends b3 b4 serve" _eq "$(all_backends)" "b3 b4"
    e2e_check "no request failed after failover ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_start b1; backend_start b2
    wait_health b1 true; wait_health b2 true
    : >"$SPW_REQUESTS"
    run_clients 100 >/dev/null || true
    e2e_check "failback: primaries b1 b2 serve again" _eq "$(all_backends)" "b1 b2"
    e2e_done
}

## long_lived: one keep-alive TCP connection stays on its backend across zonal-affinity changes and several snapshot swaps
e2e_long_lived() {
    SPW_SERVICE_EXTRA=$'zonal_affinity = "ZONAL_AFFINITY_SPILL_CROSS_ZONE"\nspillover_ratio = 0.8'
    e2e_setup
    local gen0 gen1 pid
    gen0="$(status_field generation)"
    # one connection from c1, a request every 0.25 s for ~12 s
    SPW_KA_INTERVAL=0.25 run_keepalive_clients 1 48 c1 >/dev/null &
    pid=$!
    sleep 1
    # the backend whose own log shows c1's keep-alive connection (request number >= 2)
    local served="" cand
    for cand in "${SPW_BACKENDS[@]}"; do
        if awk -F'\t' -v c="${SPW_ADDR[c1]}" '$3 == c && $9 >= 2 {f = 1} END {exit !f}' "$(backend_log "$cand")" 2>/dev/null; then
            served="$cand"
        fi
    done
    [[ -n "$served" ]] || e2e_fail "the keep-alive connection got no answer in its first second"
    echo "  long-lived connection from c1 is on $served"
    # Swap snapshots repeatedly without touching the connection's own backend: stopping
    # the other z1 backend drops c1's zone below the spillover ratio (1/2 < 0.8, zonal
    # affinity changes to "spill to all"), restarting it brings affinity back; z2
    # backends add more swaps.
    local other
    for other in "${SPW_BACKENDS[@]}"; do
        [[ "$other" == "$served" ]] && continue
        backend_stop "$other"; wait_health "$other" false
        backend_start "$other"; wait_health "$other" true
    done
    wait "$pid" || true
    gen1="$(status_field generation)"
    clients_summary "$SPW_REQUESTS"
    echo "  snapshot generation $gen0 -> $gen1"
    e2e_check "at least 4 snapshot swaps during the connection ($gen0 -> $gen1)" _ge "$gen1" $((gen0 + 4))
    local split; split="$(ka_split_connections)"
    e2e_check "the long-lived connection stayed on one backend and every request succeeded" _eq "$split" ""
    e2e_check "48 requests answered on it" _eq "$(awk -F'\t' '$1 == "keepalive" && $5 == "200"' "$SPW_REQUESTS" | wc -l)" 48
    e2e_done
}

## restart: a long download through Spillway survives SIGKILL and restart of the daemon (same backends: the new process's Maglev choice equals the old one's; L2 DSR: the backend answers the client directly)
e2e_restart() {
    local secs="${E2E_RESTART_DOWNLOAD_SEC:-15}" lport=45123 before after pid0 out rc served be
    e2e_setup
    local body="$SPW_LOG_DIR/download.bin" meta="$SPW_LOG_DIR/download.meta"
    before="$(spillwayctl_cmd explain --client "${SPW_ADDR[c1]}" --client-port "$lport" --vip "$SPW_VIP:$SPW_VIP_PORT/tcp" | sed -n 's/.*-> backend \(.*\)$/\1/p')"
    [[ -n "$before" ]] || e2e_fail "explain named no backend before the restart"
    echo "  the old daemon's Maglev choice for c1:$lport is $before"
    # The download: ${secs} s, from a fixed client port so that explain can name its flow.
    (nsx c1 curl -sS --local-port "$lport" --connect-timeout 2 --max-time $((secs + 40)) \
        -o "$body" -w '%{http_code} %{size_download}\n' "http://$SPW_VIP:$SPW_VIP_PORT/slow/$secs" >"$meta" 2>&1
     echo "rc=$?" >>"$meta") &
    local dl=$!
    sleep 4
    pid0="$(spillway_pid)"
    kill -KILL "$pid0"
    wait "$pid0" 2>/dev/null || true   # our child: reap it
    rm -f "$SPW_PID_DIR/spillway.pid"
    echo "  killed spillway (pid $pid0) with SIGKILL 4 s into the download; restarting"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    after="$(spillwayctl_cmd explain --client "${SPW_ADDR[c1]}" --client-port "$lport" --vip "$SPW_VIP:$SPW_VIP_PORT/tcp" | sed -n 's/.*-> backend \(.*\)$/\1/p')"
    echo "  the new daemon's Maglev choice for c1:$lport is $after"
    wait "$dl" || true
    out="$(head -n1 "$meta")"; rc="$(sed -n 's/^rc=//p' "$meta")"
    be="$(head -c 100 "$body" 2>/dev/null | sed -n '1s/^backend=//p')"
    # the backend logs the answer after its last chunk's pause
    topo_wait_for 3 grep -q "/slow/$secs" "$(backend_log "${be:-none}")" || true
    served="$(awk -F'\t' -v p="/slow/$secs" '$7 == p' "$(backend_log "${be:-none}")" 2>/dev/null | tail -n1 | cut -f8)"
    local pkts; pkts="$(spillwayctl_cmd status --json | "$SPW_PYTHON" -c "import json,sys; print(next(b['packets'] for b in json.load(sys.stdin)['backends'] if b['backend'] == '${be:-none}'))" 2>/dev/null || echo 0)"
    echo "  curl: '$out' rc=$rc; served by ${be:-?} (its log: status ${served:-none})"
    e2e_check "the new daemon chooses the same backend as the old one ($before)" _eq "$after" "$before"
    e2e_check "the download completed: curl exit 0 (rc=$rc)" _eq "$rc" 0
    e2e_check "HTTP 200 and all $((secs * 10000)) bytes ($out)" _eq "$out" "200 $((secs * 10000))"
    e2e_check "the chosen backend $before served it" _eq "$be" "$before"
    e2e_check "the backend logged one complete /slow/$secs answer (status ${served:-none})" _eq "$served" 200
    e2e_check "the new daemon forwarded the connection's packets to $be ($pkts packets: picked up mid-stream)" _gt0 "${pkts:-0}"
    local slow_total; slow_total="$(cat "$SPW_LOG_DIR"/*.http.log | awk -F'\t' '$7 ~ /^\/slow\//' | wc -l)"
    e2e_check "exactly one /slow request reached any backend (no retry on a new connection): $slow_total" _eq "$slow_total" 1
    e2e_done
}

## https_health: HTTPS health checks (self-signed certificate, not verified): b1 b2 serve HTTPS and are healthy, b3 b4 have no HTTPS server and are not; b1 stopped -> unhealthy, traffic avoids it; verify = true (live edit) -> b2 fails on its certificate; back -> healthy
E2E_HTTPS_PORT=8443
_https_pidfile() { printf '%s/https-%s.pid' "$SPW_PID_DIR" "$1"; }
_https_listening() { [[ -n "$(nsx "$1" ss -Hltn "sport = :$E2E_HTTPS_PORT" 2>/dev/null)" ]]; }
https_start() {
    topo_spawn "$1" "$SPW_LOG_DIR/$1.https.log" "$(_https_pidfile "$1")" "$SPW_PYTHON" "$HERE/lib/backend_https.py" \
        --name "$1" --port "$E2E_HTTPS_PORT" --cert "$SPW_LOG_DIR/cert.pem" --key "$SPW_LOG_DIR/key.pem"
    topo_wait_for 5 _https_listening "$1" || { cat "$SPW_LOG_DIR/$1.https.log" >&2; e2e_fail "HTTPS server of $1 did not start"; }
}
https_stop() {
    topo_kill_pid "$(cat "$(_https_pidfile "$1")")" 3
    topo_wait_for 3 bash -c "! ip netns exec '$(ns "$1")' ss -Hltn 'sport = :$E2E_HTTPS_PORT' | grep -q ." || e2e_fail "HTTPS server of $1 still listening"
}
# health_row NAME FIELD: a field of backend NAME in `spillwayctl health show --json`
health_row() {
    spillwayctl_cmd health show --json | "$SPW_PYTHON" -c "
import json, sys
print(next((r['$2'] for r in json.load(sys.stdin) if r['backend'] == '$1'), 'missing'))"
}
_contains() { [[ "$1" == *"$2"* ]]; }
e2e_https_health() {
    local check
    check=$'check_interval_sec = 1.0\ntimeout_sec = 0.5\nhealthy_threshold = 1\nunhealthy_threshold = 2'
    SPW_HEALTH_CHECK=0
    SPW_SERVICE_EXTRA=$'\n[services.health_check]\ntype = "https"\nport = '"$E2E_HTTPS_PORT"$'\npath = "/healthz"\nresponse = "ok"\n'"$check"
    mkdir -p "$SPW_LOG_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=spillway-e2e.invalid" \
        -keyout "$SPW_LOG_DIR/key.pem" -out "$SPW_LOG_DIR/cert.pem" >/dev/null 2>&1 || e2e_fail "openssl req failed"
    topo_up
    https_start b1; https_start b2
    write_config "$SPW_CONFIG"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    wait_health b3 false; wait_health b4 false
    wait_health b1 true; wait_health b2 true
    echo "  spillwayctl health show:"; spillwayctl_cmd health show | sed 's/^/    /' || true
    e2e_check "b1 (self-signed HTTPS) healthy" _eq "$(backend_health b1)" true
    e2e_check "b2 (self-signed HTTPS) healthy" _eq "$(backend_health b2)" true
    e2e_check "b3 (no HTTPS server) unhealthy, reason shown: $(health_row b3 last_error)" _contains "$(health_row b3 last_error)" "connect:"
    e2e_check "b1 probed without failures" _eq "$(health_row b1 probes_failed)" 0

    https_stop b1
    local ms; ms="$(spillway_wait_health b1 false 10)" || e2e_fail "b1 not marked unhealthy within 10 s of stopping its HTTPS server"
    echo "  b1 marked unhealthy ${ms} ms after its HTTPS server stopped (limit 1 s x 2 + 1 s)"
    e2e_check "b1 marked unhealthy within 3500 ms: ${ms} ms" _ge 3500 "$ms"
    e2e_check "b1's reason shown: $(health_row b1 last_error)" _contains "$(health_row b1 last_error)" "refused"
    run_clients 40 >/dev/null || true
    e2e_check "traffic only on the one healthy backend b2: $(all_backends)" _eq "$(all_backends)" "b2"
    e2e_check "no request failed ($(req_failed new) failed)" _eq "$(req_failed new)" 0

    https_start b1
    wait_health b1 true
    e2e_check "b1 healthy again after its HTTPS server restarted" _eq "$(backend_health b1)" true

    # verify = true by a live edit: the self-signed certificate no longer passes.
    local hc='{ type = "https", port = '"$E2E_HTTPS_PORT"', path = "/healthz", response = "ok", check_interval_sec = 1.0, timeout_sec = 0.5, healthy_threshold = 1, unhealthy_threshold = 2'
    spillwayctl_cmd service set web "health_check=$hc, verify = true, sni = \"spillway-e2e.invalid\" }" >/dev/null ||
        e2e_fail "service set health_check with verify = true refused"
    wait_health b2 false
    e2e_check "verify = true: b2 fails on its certificate: $(health_row b2 last_error)" _contains "$(health_row b2 last_error)" "certificate"
    spillwayctl_cmd service set web "health_check=$hc }" >/dev/null || e2e_fail "service set health_check back refused"
    wait_health b2 true; wait_health b1 true
    e2e_check "verify off again: b1 b2 healthy" _eq "$(backend_health b1) $(backend_health b2)" "true true"
    e2e_done
}

# ------------------------------------------------------- backend groups ----
# groups_topology SPEC...: backends as groups of endpoints. Each SPEC is
# "GROUP:ZONE:N:OCTET[:EXTRA]": N endpoint namespaces GROUPe1..GROUPeN at 10.200.OCTET.k
# (one HTTP server each, VIP on lo), written as [[services.backends]] GROUP with
# [[services.backends.endpoints]] e1..eN; EXTRA (TOML lines, "\n"-separated) goes in the
# group's table. Call before e2e_setup.
declare -ga E2E_GROUPS=()
groups_topology() {
    local spec g z n o extra k r
    SPW_BACKENDS=(); E2E_GROUPS=("$@"); SPW_WRITE_BACKENDS=_e2e_groups_write_backends
    for spec in "$@"; do
        IFS=: read -r g z n o extra <<<"$spec"
        for ((k = 1; k <= n; k++)); do
            r="${g}e$k"; SPW_BACKENDS+=("$r")
            SPW_ADDR[$r]="10.200.$o.$k"; SPW_MAC[$r]="$(printf '02:00:00:00:%02x:%02x' "$o" "$k")"; SPW_ZONE[$r]="$z"
        done
    done
}
_e2e_groups_write_backends() {
    local spec g z n o extra k
    for spec in "${E2E_GROUPS[@]}"; do
        IFS=: read -r g z n o extra <<<"$spec"
        printf '\n[[services.backends]]\nname = "%s"\nzone = "%s"\n' "$g" "$z"
        [[ -z "$extra" ]] || printf '%b\n' "$extra"
        for ((k = 1; k <= n; k++)); do
            printf '\n[[services.backends.endpoints]]\nname = "e%d"\naddress = "%s"\nmac = "%s"\n' "$k" "${SPW_ADDR[${g}e$k]}" "${SPW_MAC[${g}e$k]}"
        done
    done
}
# group_field GROUP FIELD: a field of GROUP's row in `spillwayctl status --json`
group_field() {
    spillwayctl_cmd status --json 2>/dev/null | "$SPW_PYTHON" -c "
import json, sys
print(next((str(b['$2']).lower() for b in json.load(sys.stdin)['backends'] if b['backend'] == '$1'), 'missing'))" 2>/dev/null || echo missing
}
# wait_group GROUP FIELD VALUE [TIMEOUT_S]: until the field has that value
wait_group() {
    local deadline=$((SECONDS + ${4:-15}))
    while ((SECONDS < deadline)); do [[ "$(group_field "$1" "$2")" == "$3" ]] && return 0; sleep 0.2; done
    e2e_fail "$1.$2 did not become $3 within ${4:-15} s (is $(group_field "$1" "$2"))"
}
# served_by_prefix P: answered requests whose backend starts with P (e.g. g1e)
served_by_prefix() { awk -F'\t' -v p="$1" '$5 == "200" && index($6, p) == 1' "$SPW_REQUESTS" | wc -l; }
_lt() { (($1 < $2)); }

## capacity_drain: groups g1 (5 endpoints), g2 (4), g3 (1, priority 2) with auto capacity drain: 4 of g1's endpoints stopped (20 % < 25 %) drain g1, its last healthy endpoint gets no new connections and g2 takes them; 2 restarted (60 % >= 35 %), g1 is undrained 60 s after it reached 35 %, not before
e2e_capacity_drain() {
    groups_topology g1:z1:5:21 g2:z2:4:22 'g3:z2:1:23:priority = 2'
    SPW_SERVICE_EXTRA='auto_capacity_drain = true'
    e2e_setup
    wait_group g1 healthy_endpoints 5; wait_group g2 healthy_endpoints 4
    run_clients 60 >/dev/null || true
    e2e_check "all healthy: g1 serves ($(served_by_prefix g1e) of 60)" _gt0 "$(served_by_prefix g1e)"
    local e; for e in 1 2 3 4; do backend_stop "g1e$e"; done
    wait_group g1 healthy_endpoints 1
    wait_group g1 drained true 5
    echo "  spillwayctl status (g1 drained):"; spillwayctl_cmd status | sed -n '/^BACKENDS/,$p' | sed 's/^/    /' || true
    : >"$SPW_REQUESTS"
    run_clients 80 >/dev/null || true
    e2e_check "no request failed while g1 is drained ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "g1's last healthy endpoint g1e5 got no new connections ($(req_backend_count g1e5))" _eq "$(req_backend_count g1e5)" 0
    e2e_check "g2 took them all ($(served_by_prefix g2e) of 80)" _eq "$(served_by_prefix g2e)" 80
    backend_start g1e1; backend_start g1e2
    wait_group g1 healthy_endpoints 3 10
    local t0=$SECONDS
    echo "  g1 at 3/5 = 60 % (>= 35 %) from t0; undrain expected at t0 + 60 s"
    sleep 30
    e2e_check "30 s after reaching 35 %: still drained" _eq "$(group_field g1 drained)" true
    : >"$SPW_REQUESTS"
    run_clients 40 >/dev/null || true
    e2e_check "30 s after: g1 still gets no new connections ($(served_by_prefix g1e))" _eq "$(served_by_prefix g1e)" 0
    while [[ "$(group_field g1 drained)" == true ]] && ((SECONDS - t0 < 80)); do sleep 0.5; done
    local dt=$((SECONDS - t0))
    echo "  g1 undrained ${dt} s after reaching 35 %"
    e2e_check "undrained 60 s after reaching 35 % (measured ${dt} s, allowed 58..66)" bash -c "(( $dt >= 58 && $dt <= 66 ))"
    : >"$SPW_REQUESTS"
    run_clients 80 >/dev/null || true
    e2e_check "after undrain g1 serves again ($(served_by_prefix g1e) of 80)" _gt0 "$(served_by_prefix g1e)"
    e2e_check "stopped endpoints g1e3/g1e4 get nothing" _eq "$(( $(req_backend_count g1e3) + $(req_backend_count g1e4) ))" 0
    e2e_done
}

## failover_threshold: a primary group p (4 endpoints, failover_health_threshold 70) and a failover group f: 1 endpoint stopped (75 %) keeps traffic on p's 3 healthy endpoints; a 2nd (50 %) sends new connections to f; both restarted, traffic goes back
e2e_failover_threshold() {
    groups_topology p:z1:4:31 'f:z2:2:32:failover = true'
    SPW_SERVICE_EXTRA='failover_health_threshold = 70'
    e2e_setup
    wait_group p healthy_endpoints 4; wait_group f healthy_endpoints 2
    backend_stop pe1
    wait_group p healthy_endpoints 3
    run_clients 60 >/dev/null || true
    e2e_check "75 % >= 70 %: all on p ($(served_by_prefix pe) of 60), none on f ($(served_by_prefix fe))" _eq "$(served_by_prefix pe)" 60
    e2e_check "the stopped endpoint pe1 gets nothing" _eq "$(req_backend_count pe1)" 0
    e2e_check "p's 3 healthy endpoints share it: $(all_backends)" _eq "$(all_backends)" "pe2 pe3 pe4"
    backend_stop pe2
    wait_group p healthy_endpoints 2
    : >"$SPW_REQUESTS"
    run_clients 60 >/dev/null || true
    echo "  spillwayctl status:"; spillwayctl_cmd status | sed -n '/^BACKENDS/,$p' | sed 's/^/    /' || true
    e2e_check "50 % < 70 %: new connections go to f ($(served_by_prefix fe) of 60)" _eq "$(served_by_prefix fe)" 60
    e2e_check "no request failed ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_start pe1; backend_start pe2
    wait_group p healthy_endpoints 4
    : >"$SPW_REQUESTS"
    run_clients 60 >/dev/null || true
    e2e_check "restarted: traffic back on p ($(served_by_prefix pe) of 60)" _eq "$(served_by_prefix pe)" 60
    e2e_done
}

## config: examples/demo.toml is what write_config produces for the demo topology (no daemon needed)
e2e_config() {
    local out; out="$(mktemp)"
    # shellcheck disable=SC1091
    (unset SPW_RUN_DIR SPW_LOG_DIR SPW_SOCKET SPW_CONFIG SPW_HEALTH_CHECK
     SPW_TOPO=demo; source "$HERE/lib/topology.sh"; SPW_ZONE_GROUPS=1 SPW_SERVICE_EXTRA="$SPW_DEMO_SERVICE_EXTRA"; write_config "$out")
    e2e_check "examples/demo.toml == write_config output" diff -u "$SPW_REPO_ROOT/examples/demo.toml" "$out"
    rm -f "$out"
    e2e_done
}

# ------------------------------------------------------- fleet ----
# Topology: scripts/lib/fleet.sh (router with BIRD ECMP, two Spillway hosts with BIRD).
# fleet_ka_report FILE KILL_TIME PORTS_FILE: for the keep-alive connections whose client
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
_pct_ge() { (($1 * 100 >= $2 * $3)); }   # _pct_ge OK TOTAL PCT: OK/TOTAL >= PCT %

## ecmp: BIRD router with ECMP over two Spillway hosts: both carry new connections, same backend for the same 5-tuple on both, SIGKILL host 1 -> route withdrawn within the detection time and >= 95 % of its keep-alive connections keep working through host 2, host 1 back -> shared again
e2e_ecmp() {
    local ms diff p a b n1 n2 m1 m2 t_kill s1 s2 detect_ms="${E2E_ECMP_DETECT_MS:-1000}"
    fleet_up
    fleet_start lb1
    fleet_start lb2
    ms="$(fleet_wait_nexthops 2 40)" || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    echo "  router: $(fleet_route) (after $ms ms)"

    diff=0
    for p in $(seq 40000 40049); do
        a="$(fleet_explain lb1 "$p")"; b="$(fleet_explain lb2 "$p")"
        [[ "$a" == "$b" && "$a" != None ]] || { diff=$((diff + 1)); echo "  port $p: lb1 -> $a, lb2 -> $b"; }
    done
    e2e_check "both hosts pick the same backend for 50 fixed 5-tuples ($diff differ)" _eq "$diff" 0

    n1="$(fleet_new_connections lb1)"; n2="$(fleet_new_connections lb2)"
    fleet_new_requests 100
    m1="$(fleet_new_connections lb1)"; m2="$(fleet_new_connections lb2)"
    echo "  new connections: lb1 +$((m1 - n1)), lb2 +$((m2 - n2))"
    e2e_check "100 new-connection requests answered" _eq "$(req_failed new)" 0
    e2e_check "host 1 carries new connections" _gt0 $((m1 - n1))
    e2e_check "host 2 carries new connections" _gt0 $((m2 - n2))

    fleet_ka_start "${E2E_ECMP_CONNS:-40}" 14 "$SPW_LOG_DIR/ka.tsv"
    sleep 2
    fleet_flow_ports lb1 >"$SPW_LOG_DIR/ports-lb1"
    fleet_flow_ports lb2 >"$SPW_LOG_DIR/ports-lb2"
    echo "  keep-alive connections tracked: lb1 $(wc -l <"$SPW_LOG_DIR/ports-lb1"), lb2 $(wc -l <"$SPW_LOG_DIR/ports-lb2")"
    e2e_check "host 1 carries keep-alive connections" _gt0 "$(wc -l <"$SPW_LOG_DIR/ports-lb1")"
    t_kill="$(date +%s.%N)"
    kill -KILL "$(fleet_pid lb1)"
    ms="$(fleet_wait_nexthops 1 5)" || ms=99999
    echo "  SIGKILL host 1: route withdrawn after $ms ms: $(fleet_route)"
    e2e_check "router withdraws host 1 within $detect_ms ms ($ms ms)" _ge "$detect_ms" "$ms"
    wait "$FLEET_KA_PID" || true
    read -r s1 a < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" "$t_kill" "$SPW_LOG_DIR/ports-lb1")
    read -r s2 b < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" "$t_kill" "$SPW_LOG_DIR/ports-lb2")
    echo "  FIGURE: host 1's keep-alive connections that kept working through host 2: $s1 of $a ($((a ? s1 * 100 / a : 0)) %)"
    echo "  host 2's keep-alive connections unbroken: $s2 of $b"
    e2e_check "host 1 carried some of the keep-alive connections ($a)" _gt0 "$a"
    e2e_check ">= 95 % of host 1's keep-alive connections survive ($s1 of $a)" _pct_ge "$s1" "$a" 95
    e2e_check "no connection through host 2 breaks ($s2 of $b)" _eq "$s2" "$b"

    fleet_start lb1
    ms="$(fleet_wait_nexthops 2 40)" || e2e_fail "host 1 not announced again within 40 s"
    echo "  host 1 back: announced again after $ms ms"
    n1="$(fleet_new_connections lb1)"; n2="$(fleet_new_connections lb2)"
    fleet_new_requests 100
    m1="$(fleet_new_connections lb1)"; m2="$(fleet_new_connections lb2)"
    echo "  new connections after host 1 is back: lb1 +$((m1 - n1)), lb2 +$((m2 - n2))"
    e2e_check "every new-connection request answered" _eq "$(req_failed new)" 0
    e2e_check "host 1 carries new connections again" _gt0 $((m1 - n1))
    e2e_check "host 2 still carries new connections" _gt0 $((m2 - n2))
    e2e_done
}

## vip_drain: spillwayctl vip drain on host 1 withdraws its route; its keep-alive connections keep working through host 2, new connections go to host 2 only; undrain shares again
e2e_vip_drain() {
    local ms n1 n2 m1 m2 s a out
    fleet_up
    fleet_start lb1
    fleet_start lb2
    fleet_wait_nexthops 2 40 >/dev/null || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    fleet_ka_start 20 8 "$SPW_LOG_DIR/ka.tsv"
    sleep 1.5
    fleet_flow_ports lb1 >"$SPW_LOG_DIR/ports-lb1"
    cat "$SPW_LOG_DIR/ports-lb1" >"$SPW_LOG_DIR/ports-all"; fleet_flow_ports lb2 >>"$SPW_LOG_DIR/ports-all"
    out="$(fleet_ctl lb1 vip drain "$SPW_VIP")"
    sed 's/^/  /' <<<"$out"
    e2e_check "vip drain reports drained and not announced" grep -qE "^$SPW_VIP +no +yes +no" <<<"$out"
    ms="$(fleet_wait_nexthops 1 5)" || ms=99999
    echo "  route after drain ($ms ms): $(fleet_route)"
    e2e_check "router keeps only host 2 within 2 s of the drain ($ms ms)" _ge 2000 "$ms"
    e2e_check "metrics say drained" bash -c "ip netns exec $(ns lb1) curl -s http://${FLEET_MGMT_ADDR[lb1]}:9101/metrics | grep -q '^spillway_vip_drained{vip=\"$SPW_VIP\"} 1'"
    n1="$(fleet_new_connections lb1)"; n2="$(fleet_new_connections lb2)"
    fleet_new_requests 60
    m1="$(fleet_new_connections lb1)"; m2="$(fleet_new_connections lb2)"
    echo "  new connections while drained: lb1 +$((m1 - n1)), lb2 +$((m2 - n2))"
    e2e_check "60 new-connection requests answered" _eq "$(req_failed new)" 0
    e2e_check "no new connection on the drained host" _eq $((m1 - n1)) 0
    e2e_check "host 2 takes the new connections" _ge $((m2 - n2)) 60
    wait "$FLEET_KA_PID" || true
    read -r s a < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" 0 "$SPW_LOG_DIR/ports-all")
    echo "  keep-alive connections unbroken across the drain: $s of $a (host 1 had $(wc -l <"$SPW_LOG_DIR/ports-lb1"))"
    e2e_check "keep-alive connections were tracked ($a)" _gt0 "$a"
    e2e_check "every keep-alive connection keeps working ($s of $a)" _eq "$s" "$a"
    fleet_ctl lb1 vip undrain "$SPW_VIP" >/dev/null
    ms="$(fleet_wait_nexthops 2 5)" || ms=99999
    e2e_check "undrain: router shares again ($ms ms)" _ge 2000 "$ms"
    e2e_done
}

## prometheus: a real Prometheus scrapes both fleet hosts under load and sees spillway_service_new_connections_total increase; promtool accepts the endpoints
e2e_prometheus() {
    local h v0 v1 f="$SPW_RUN_DIR/prometheus.yml" port=9190
    command -v prometheus >/dev/null || e2e_fail "prometheus not installed (apt-get install prometheus)"
    fleet_up
    fleet_start lb1
    fleet_start lb2
    for h in "${FLEET_HOSTS[@]}"; do
        e2e_check "promtool check metrics accepts $h's endpoint" bash -c \
            "ip netns exec $(ns "$h") curl -sf http://${FLEET_MGMT_ADDR[$h]}:9101/metrics | promtool check metrics"
    done
    printf '%s\n' "global: { scrape_interval: 1s, scrape_timeout: 1s }" "scrape_configs:" "  - job_name: spillway" \
        "    static_configs: [ { targets: ['${FLEET_MGMT_ADDR[lb1]}:9101', '${FLEET_MGMT_ADDR[lb2]}:9101'] } ]" >"$f"
    # in lb1's namespace: it reaches both hosts' mgmt addresses on the segment
    topo_spawn lb1 "$SPW_LOG_DIR/prometheus.log" "$SPW_PID_DIR/prometheus.pid" prometheus --config.file="$f" \
        --storage.tsdb.path="$SPW_RUN_DIR/tsdb" --web.listen-address="127.0.0.1:$port"
    _prom_q() { ip netns exec "$(ns lb1)" curl -sf --data-urlencode "query=$1" "http://127.0.0.1:$port/api/v1/query" |
        "$SPW_PYTHON" -c "import json,sys; r=json.load(sys.stdin)['data']['result']; print(sum(float(x['value'][1]) for x in r) if r else -1)"; }
    _prom_up() { [[ "$(_prom_q 'sum(up{job="spillway"})')" == 2.0 ]]; }
    topo_wait_for 30 _prom_up || e2e_fail "prometheus does not see both targets up"
    v0="$(_prom_q 'sum(spillway_service_new_connections_total)')"
    # load: 20 keep-alive connections (5 requests/s each) while 100 new connections arrive
    fleet_ka_start 20 8 "$SPW_LOG_DIR/ka.tsv"
    fleet_new_requests 100
    wait "$FLEET_KA_PID" || true
    e2e_check "keep-alive load made requests" _gt0 "$(wc -l <"$SPW_LOG_DIR/ka.tsv")"
    e2e_check "keep-alive load answered" _eq "$(awk -F'\t' '$5 != "200"' "$SPW_LOG_DIR/ka.tsv" | wc -l)" 0
    sleep 3
    v1="$(_prom_q 'sum(spillway_service_new_connections_total)')"
    echo "  prometheus: sum(spillway_service_new_connections_total) $v0 -> $v1"
    e2e_check "Prometheus sees the counter increase by >= 100" "$SPW_PYTHON" -c "import sys; sys.exit(0 if float('$v1') - float('$v0') >= 100 else 1)"
    rm -rf "$SPW_RUN_DIR/tsdb"
    e2e_done
}

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

# ------------------------------------------------------------------ runner ---
_e2e_list() { declare -F | awk '{print $3}' | grep -E '^e2e_[a-z0-9_]+$' |
    grep -vE '^e2e_(check|fail|done|setup)$' | sed 's/^e2e_//'; }
_e2e_describe() { sed -n "s/^## $1: //p" "${BASH_SOURCE[0]}" "${E2E_TOPIC_FILES[@]}"; }
# tests in the order they appear in this file
_e2e_all_in_order() { grep -ohE '^e2e_[a-z0-9_]+\(\)' "${BASH_SOURCE[0]}" "${E2E_TOPIC_FILES[@]}" | sed 's/^e2e_//; s/()$//' |
    while read -r t; do _e2e_list | grep -qx "$t" && echo "$t"; done; }

_e2e_run_one() {
    local t="$1" rc start
    start=$SECONDS
    echo "=== e2e $t: $(_e2e_describe "$t")"
    # The test runs in a background subshell so that INT/TERM reach this shell's traps at
    # once (a foreground subshell would delay them until the test ends); the EXIT trap
    # stops the test (_e2e_child) and removes the topology.
    (
        set -euo pipefail
        trap - EXIT INT TERM
        topo_set_log_dir "$E2E_LOG_ROOT/$t"
        rm -rf "$SPW_LOG_DIR"; mkdir -p "$SPW_LOG_DIR"
        "e2e_$t"
    ) &
    _e2e_child=$!
    rc=0
    wait "$_e2e_child" || rc=$?
    _e2e_child=
    topo_down || true
    if ((rc == 0)); then echo "--- PASS $t ($((SECONDS - start)) s)"; else echo "--- FAIL $t ($((SECONDS - start)) s; logs: $E2E_LOG_ROOT/$t)"; fi
    return "$rc"
}

main() {
    (($#)) || { sed -n '3,19p' "$0"; exit 2; }
    if [[ "$1" == list ]]; then
        for t in $(_e2e_all_in_order); do printf '%-12s %s\n' "$t" "$(_e2e_describe "$t")"; done; exit 0
    fi
    local tests=() t failed=()
    for t in "$@"; do
        t="${t//-/_}"   # health-failover == health_failover
        if [[ "$t" == all ]]; then mapfile -t -O "${#tests[@]}" tests < <(_e2e_all_in_order); continue; fi
        _e2e_list | grep -qx "$t" || { echo "unknown test '$t'; known: all $(_e2e_list | tr '\n' ' ')" >&2; exit 2; }
        tests+=("$t")
    done
    topo_require_root
    topo_lock
    topo_before_down() { if [[ -n "${_e2e_child:-}" ]]; then topo_kill_pid "$_e2e_child" 2; fi; }
    topo_trap
    for t in "${tests[@]}"; do _e2e_run_one "$t" || failed+=("$t"); done
    echo
    if ((${#failed[@]})); then
        echo "e2e: ${#failed[@]} of ${#tests[@]} failed: ${failed[*]}"; exit 1
    fi
    echo "e2e: all ${#tests[@]} passed: ${tests[*]}"
}

main "$@"
