# shellcheck shell=bash
# Existing-connection e2e tests, sourced by scripts/e2e.sh: a keep-alive connection keeps
# its backend across config changes and snapshot swaps, and a download survives a SIGKILL
# and restart of the daemon.

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
