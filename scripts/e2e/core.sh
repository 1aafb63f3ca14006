# shellcheck shell=bash
# Core e2e tests, sourced by scripts/e2e.sh: real HTTP traffic through the VIP on the demo
# topology (scripts/lib/topology.sh), health-check failover, and the same over IPv6.

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
