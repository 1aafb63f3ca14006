# shellcheck shell=bash
# BGP fleet e2e tests (docs/bgp.md), sourced by scripts/e2e.sh: a BIRD router with ECMP over
# two Spillway hosts (scripts/lib/fleet.sh): ECMP and host failure, VIP drain, and a real
# Prometheus scraping both hosts.

_pct_ge() { (($1 * 100 >= $2 * $3)); }   # _pct_ge OK TOTAL PCT: OK/TOTAL >= PCT %

## ecmp: BIRD router with ECMP over two Spillway hosts: both carry new connections, same backend for the same 5-tuple on both, SIGKILL host 1 -> route withdrawn within the detection time and >= 95 % of its keep-alive connections keep working through host 2, host 1 back -> shared again; an IPv6 VIP is announced (/128 over link-local BGP sessions, docs/bgp.md) and withdrawn (SIGKILL, vip drain) through BIRD the same way
e2e_ecmp() {
    local ms diff p a b n1 n2 m1 m2 t_kill s1 s2 detect_ms="${E2E_ECMP_DETECT_MS:-1000}" h
    export FLEET_IPV6=1
    fleet_up
    e2e_check "the shipped docs/bird-spillway.conf (IPv4 and IPv6 channels, link-local neighbour) parses" \
        bash -c 'sed "s/^log syslog all;/log stderr all;/" "$1" >"$2" && bird -p -c "$2"' _ "$SPW_REPO_ROOT/docs/bird-spillway.conf" "$SPW_RUN_DIR/bird-shipped.conf"
    fleet_start lb1
    fleet_start lb2
    ms="$(fleet_wait_nexthops 2 40)" || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    echo "  router: $(fleet_route) (after $ms ms)"
    ms="$(fleet_wait_nexthops 2 20 "$FLEET_VIP6")" || ms=-1
    echo "  router, IPv6 VIP: $(fleet_route "$FLEET_VIP6") (after $ms ms)"
    e2e_check "the IPv6 VIP $FLEET_VIP6/128 is announced by both hosts through BIRD (link-local sessions)" _ge "$ms" 0
    e2e_check "its next hops are the hosts' port addresses" \
        grep -q "via ${FLEET_PORT_ADDR6[lb1]} .*via ${FLEET_PORT_ADDR6[lb2]} \|via ${FLEET_PORT_ADDR6[lb2]} .*via ${FLEET_PORT_ADDR6[lb1]} " <<<"$(fleet_route "$FLEET_VIP6") "

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
    ms="$(fleet_wait_nexthops 1 5 "$FLEET_VIP6")" || ms=99999
    echo "  SIGKILL host 1: IPv6 VIP route after $ms ms: $(fleet_route "$FLEET_VIP6")"
    e2e_check "router withdraws host 1's IPv6 VIP within $detect_ms ms ($ms ms)" _ge "$detect_ms" "$ms"
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

    # IPv6 withdrawal by readiness: vip drain of the IPv6 VIP on both hosts removes its
    # /128 from the router (the IPv4 VIP stays on both); undrain announces it again.
    ms="$(fleet_wait_nexthops 2 20 "$FLEET_VIP6")" || e2e_fail "host 1 did not announce the IPv6 VIP again within 20 s: router: '$(fleet_route "$FLEET_VIP6")'; lb1: $(fleet_birdc lb1 show route 2>&1 | tr "\n" " ")"
    for h in lb1 lb2; do fleet_ctl "$h" vip drain "$FLEET_VIP6" >/dev/null || e2e_fail "vip drain $FLEET_VIP6 on $h refused"; done
    ms="$(fleet_wait_nexthops 0 5 "$FLEET_VIP6")" || ms=99999
    echo "  vip drain $FLEET_VIP6 on both hosts: its route withdrawn after $ms ms; IPv4 VIP: $(fleet_nexthops) next hops"
    e2e_check "draining the IPv6 VIP withdraws its /128 through BIRD ($ms ms)" _ge 5000 "$ms"
    e2e_check "the IPv4 VIP stays announced by both" _eq "$(fleet_nexthops)" 2
    for h in lb1 lb2; do fleet_ctl "$h" vip undrain "$FLEET_VIP6" >/dev/null || e2e_fail "vip undrain $FLEET_VIP6 on $h refused"; done
    ms="$(fleet_wait_nexthops 2 5 "$FLEET_VIP6")" || ms=99999
    e2e_check "undrain announces it again on both ($ms ms)" _ge 5000 "$ms"
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
