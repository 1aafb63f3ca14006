# shellcheck shell=bash
# IPv6 behind an MLD-snooping switch (docs/operations.md "IPv6", "Multicast and MLD"),
# sourced by scripts/e2e.sh. A snooping switch forwards a solicited-node group's frames
# only to the ports that reported a listener (RFC 4541), so the clients' Neighbor
# Solicitations for the VIP reach Spillway only because of its MLDv2 reports.

## ipv6_mld_snooping: IPv6 clients resolve the VIP through a bridge with MLD snooping, a querier and no multicast flooding to the load balancer's port
e2e_ipv6_mld_snooping() {
    topo_up
    ipv6_topology_up
    local lbport=p-lb-lb0 grp="ff02::1:ff00:100" mdb
    # The switch: snooping on, its own querier (needs IPv6 on br0 for the queries' source),
    # and nothing flooded to lb0 that no report asked for.
    # The querier needs br0's link-local address before it starts (a query it cannot
    # source turns it off until a later query), and counts only after the query response
    # interval (shortened to 1 s): without a querier the bridge floods instead of snooping.
    nssysctl sw net.ipv6.conf.br0.accept_dad=0 net.ipv6.conf.br0.disable_ipv6=0
    local i
    for i in $(seq 1 50); do
        nsx sw ip -6 addr show dev br0 scope link | grep -q "inet6 fe80" && break
        sleep 0.1
    done
    nsx sw ip link set br0 type bridge mcast_snooping 1 mcast_query_response_interval 100 mcast_querier 1
    nsx sw bridge link set dev "$lbport" mcast_flood off
    # Let the querier's start-up queries and the hosts' answers settle before Spillway
    # starts (until then the bridge floods, and its first queries shorten group timers).
    sleep "${SPW_MLD_SETTLE_SEC:-12}"
    ipv6_write_config "$SPW_CONFIG"
    printf '\n[neighbors]\nmld_reports = true\n' >>"$SPW_CONFIG"
    # what Spillway sends towards the bridge (MLD: IPv6 with a Hop-by-Hop header first)
    nsx sw tcpdump -i "$lbport" -U -s 200 -w "$SPW_LOG_DIR/lb-port.pcap" 'ip6 and ip6[6] == 0' >/dev/null 2>&1 &
    local tcpdump_pid=$!
    nsx sw stdbuf -oL bridge -timestamp monitor mdb >"$SPW_LOG_DIR/mdb-monitor.log" 2>&1 &
    local mon_pid=$!  # the bridge's group changes, for the logs
    sleep 0.5
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    wait_health b1v6 true
    kill "$tcpdump_pid" 2>/dev/null || true
    wait "$tcpdump_pid" 2>/dev/null || true
    echo "  MLD frames from Spillway's MAC (tcpdump in the switch):"
    tcpdump -r "$SPW_LOG_DIR/lb-port.pcap" -nn -v "ether src $SPW_LB_MAC" 2>/dev/null | head -4 | cut -c1-200 | sed 's/^/    /' || true
    # Spillway's reports register its groups on its port (polled: a report is due every
    # 10 s). Only a report from that port creates this entry: a Spillway without MLD fails
    # here, and then every request below (the bridge floods no unregistered group to it).
    for i in $(seq 1 24); do
        mdb="$(nsx sw bridge mdb show dev br0)"
        grep "$lbport" <<<"$mdb" | grep -q "$grp" && break
        sleep 0.5
    done
    echo "  bridge mdb:"; sed "s/^/    /" <<<"$mdb"
    e2e_check "the bridge learned the VIP's solicited-node group $grp on $lbport" \
        _contains "$(grep "$lbport" <<<"$mdb")" "$grp"
    e2e_check "Spillway sent MLDv2 reports ($(spillwayctl_cmd status --json | "$SPW_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["neighbors"]["mld_reports"])'))" \
        _gt0 "$(spillwayctl_cmd status --json | "$SPW_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["neighbors"]["mld_reports"])')"
    export SPW_CLIENT_URL="http://[$SPW_VIP6]:$SPW_VIP_PORT/" SPW_CURL_FAMILY=-6 SPW_CURL_CONNECT_TIMEOUT=3
    run_clients 60 || true
    e2e_check "60 IPv6 requests through the snooping bridge, none failed ($(req_failed new) failed)" _eq "$(req_failed new)/$(req_count new)" "0/60"
    kill "$mon_pid" 2>/dev/null || true
    e2e_done
}
