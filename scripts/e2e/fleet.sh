# shellcheck shell=bash
# Fleet flow-state sync e2e tests (docs/bgp.md "Flow-state sync"), sourced by scripts/e2e.sh:
# real keep-alive HTTP clients behind a BIRD router with ECMP over Spillway hosts that sync
# their connection entries (scripts/lib/fleet.sh: [sync] on every host, one shared key).
# The promise under test: a connection keeps its backend when a host dies, restarts or is
# added *while* backends change.

# The backend edits every churn test makes on every running host: b1's weight 50 -> 300,
# b4 added, b2 disabled (new connections avoid it; its connections stay).
fleet_churn_edits() {
    local h
    for h in "$@"; do
        fleet_ctl "$h" backend set web b1 weight=300 >/dev/null || e2e_fail "edit on $h refused"
        fleet_ctl "$h" backend add web b4 "address=${SPW_ADDR[b4]}" "mac=${SPW_MAC[b4]}" >/dev/null || e2e_fail "backend add on $h refused"
        fleet_ctl "$h" backend set web b2 enabled=false >/dev/null || e2e_fail "disable on $h refused"
    done
}
# The config files of hosts that start after the edits say the same thing.
fleet_churned_config() { FLEET_BACKENDS="b1 b2 b3 b4" FLEET_WEIGHT_b1=300 FLEET_DISABLED_b2=1 fleet_config "$1" "$SPW_RUN_DIR/$1.toml"; }

# fleet_moved_ports HOST KA PORTS: the connections (client ports in PORTS, one per line)
# that run on a backend HOST's live Maglev table no longer picks for them: without flow
# sync, these break when ECMP moves them to HOST.
fleet_moved_ports() {
    local p b want
    while read -r p; do
        b="$(awk -F'\t' -v p="$p" '$7 == p && $5 == "200" {print $6; exit}' "$2")"
        want="$(fleet_explain "$1" "$p")"
        if [[ -n "$b" && "$b" != "$want" ]]; then echo "$p"; fi
    done <"$3"
}
# fleet_moved HOST KA PORTS: how many of them (fleet_moved_ports).
fleet_moved() { fleet_moved_ports "$@" | wc -l; }

# fleet_fail HOST NEXTHOPS: SIGKILL HOST, wait up to 5 s for the router's VIP route to have
# NEXTHOPS next hops, then for the keep-alive clients to end; the kill time in FLEET_T_KILL.
fleet_fail() {
    local ms
    FLEET_T_KILL="$(date +%s.%N)"
    kill -KILL "$(fleet_pid "$1")"
    ms="$(fleet_wait_nexthops "$2" 5)" || ms=99999
    echo "  SIGKILL $1: route withdrawn after $ms ms"
    wait "$FLEET_KA_PID" || true
}

## fleet_churn: keep-alive connections over two syncing hosts; a weight change, a backend added and a backend disabled on both; SIGKILL host 1 -> every connection of host 1 keeps working through host 2 on the same backend (also those whose Maglev pick moved)
e2e_fleet_churn() {
    local ms s1 a s2 b moved adopted
    export FLEET_BACKENDS="b1 b2 b3"   # b4 joins live
    fleet_up
    fleet_start lb1
    fleet_start lb2
    ms="$(fleet_wait_nexthops 2 40)" || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    echo "  router: $(fleet_route) (after $ms ms)"
    fleet_ka_start "${E2E_FLEET_CONNS:-60}" 14 "$SPW_LOG_DIR/ka.tsv"
    sleep 1.5
    fleet_churn_edits lb1 lb2
    sleep 2.5   # confirmations and refreshes reach the peer (refresh_interval_sec = 2)
    fleet_flow_ports lb1 >"$SPW_LOG_DIR/ports-lb1"
    fleet_flow_ports lb2 >"$SPW_LOG_DIR/ports-lb2"
    moved="$(fleet_moved lb2 "$SPW_LOG_DIR/ka.tsv" "$SPW_LOG_DIR/ports-lb1")"
    echo "  host 1 carries $(wc -l <"$SPW_LOG_DIR/ports-lb1") connections, host 2 $(wc -l <"$SPW_LOG_DIR/ports-lb2"); $moved of host 1's are on a backend host 2's Maglev table no longer picks"
    echo "  lb2 sync: installed $(fleet_sync lb2 installed), received records $(fleet_sync lb2 received_records), lag max $(fleet_sync lb2 lag_ms_max) ms"
    fleet_fail lb1 1
    read -r s1 a < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" "$FLEET_T_KILL" "$SPW_LOG_DIR/ports-lb1")
    read -r s2 b < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" "$FLEET_T_KILL" "$SPW_LOG_DIR/ports-lb2")
    adopted="$(fleet_sync lb2 adopted)"
    echo "  FIGURE: host 1's connections that kept working on their backend through host 2: $s1 of $a ($moved of them moved by the edits); host 2's: $s2 of $b; adopted on host 2: $adopted"
    e2e_check "host 1 carried keep-alive connections ($a)" _gt0 "$a"
    e2e_check "the edits moved some of host 1's Maglev picks ($moved), so the test can fail without sync" _gt0 "$moved"
    e2e_check "every connection of host 1 keeps working on its backend ($s1 of $a)" _eq "$s1" "$a"
    e2e_check "no connection through host 2 breaks ($s2 of $b)" _eq "$s2" "$b"
    e2e_check "host 2 found host 1's connections in its table ($adopted adopted)" _ge "$adopted" "$a"
    e2e_done
}

## fleet_scale_out: a third host joins ECMP after backends changed on the two running hosts; it asks them for a dump before it announces; no keep-alive connection breaks and the third host serves moved ones from synced entries
e2e_fleet_scale_out() {
    local ms s a adopted moved
    FLEET_HOSTS=(lb1 lb2 lb3)
    export FLEET_BACKENDS="b1 b2 b3"
    fleet_up
    fleet_start lb1
    fleet_start lb2
    ms="$(fleet_wait_nexthops 2 40)" || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    fleet_ka_start "${E2E_FLEET_CONNS:-60}" 16 "$SPW_LOG_DIR/ka.tsv"
    sleep 1.5
    fleet_churn_edits lb1 lb2
    sleep 1
    { fleet_flow_ports lb1; fleet_flow_ports lb2; } | sort -u >"$SPW_LOG_DIR/ports-all"
    fleet_churned_config lb3
    fleet_start lb3
    ms="$(fleet_wait_nexthops 3 30)" || e2e_fail "host 3 not announced within 30 s: '$(fleet_route)'"
    fleet_moved_ports lb3 "$SPW_LOG_DIR/ka.tsv" "$SPW_LOG_DIR/ports-all" >"$SPW_LOG_DIR/ports-moved"
    echo "  $(wc -l <"$SPW_LOG_DIR/ports-moved") of the $(wc -l <"$SPW_LOG_DIR/ports-all") connections run on a backend host 3's Maglev table does not pick for them"
    echo "  host 3 announced after $ms ms: $(fleet_route)"
    echo "  host 3 sync start-up: $(fleet_sync lb3 startup)"
    e2e_check "host 3's start-up waited for both peers' dumps" grep -q "every peer's dump received" <<<"$(fleet_sync lb3 startup)"
    e2e_check "host 3's config digest equals host 1's (no drift)" _eq "$(fleet_sync lb3 digest)" "$(fleet_sync lb1 digest)"
    wait "$FLEET_KA_PID" || true
    read -r s a < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" 0 "$SPW_LOG_DIR/ports-all")
    adopted="$(fleet_sync lb3 adopted)"
    # the moved picks that ECMP sent through host 3: saved by sync alone
    moved="$(fleet_flow_ports lb3 | grep -cxFf "$SPW_LOG_DIR/ports-moved" || true)"
    echo "  FIGURE: keep-alive connections unbroken across the scale-out: $s of $a; moved to host 3 and kept their backend: $adopted, of which $moved on a backend host 3's own Maglev pick differs from"
    e2e_check "some connection whose pick the edits moved went through host 3 ($moved), so the test can fail without sync" _gt0 "$moved"
    e2e_check "keep-alive connections were tracked ($a)" _gt0 "$a"
    e2e_check "no connection breaks ($s of $a)" _eq "$s" "$a"
    e2e_check "host 3 took over some connections through synced entries ($adopted)" _gt0 "$adopted"
    e2e_done
}

## fleet_rolling_upgrade: under constant new-connection load and keep-alive connections, each host in turn is drained, restarted (SIGTERM, start) with a backend change meanwhile, and undrained: 0 failed requests, 0 broken connections
e2e_fleet_rolling_upgrade() {
    local ms h other s a moved load_pid stop="$SPW_RUN_DIR/load.stop" w=50
    fleet_up
    fleet_start lb1
    fleet_start lb2
    ms="$(fleet_wait_nexthops 2 40)" || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    fleet_ka_start "${E2E_FLEET_CONNS:-40}" 45 "$SPW_LOG_DIR/ka.tsv"
    rm -f "$stop"
    ( while [[ ! -f "$stop" ]]; do fleet_new_requests 10 2>/dev/null; sleep 0.1; done ) &
    load_pid=$!
    sleep 2
    for h in lb1 lb2; do
        other=lb2; [[ "$h" == lb2 ]] && other=lb1
        fleet_ctl "$h" vip drain "$SPW_VIP" >/dev/null
        fleet_wait_nexthops 1 5 >/dev/null || e2e_fail "drain of $h not withdrawn within 5 s"
        sleep 1
        kill -TERM "$(fleet_pid "$h")"
        topo_wait_for 10 bash -c "! kill -0 $(fleet_pid "$h") 2>/dev/null" || e2e_fail "$h did not exit on SIGTERM"
        # a deploy meanwhile: b3's weight changes on the running host and in the file
        w=$((w + 40))
        fleet_ctl "$other" backend set web b3 "weight=$w" >/dev/null || e2e_fail "edit on $other refused"
        FLEET_WEIGHT_b3=$w fleet_config "$h" "$SPW_RUN_DIR/$h.toml"
        fleet_start "$h"
        ms="$(fleet_wait_nexthops 2 30)" || e2e_fail "$h not announced again within 30 s"
        fleet_ctl "$h" vip undrain "$SPW_VIP" >/dev/null
        echo "  $h: drained, restarted with b3 weight $w, announced again after $ms ms ($(fleet_sync "$h" startup))"
        sleep 3
    done
    awk -F'\t' '$7 ~ /^[0-9]+$/ {print $7}' "$SPW_LOG_DIR/ka.tsv" | sort -u >"$SPW_LOG_DIR/ports-all"
    moved="$(fleet_moved lb1 "$SPW_LOG_DIR/ka.tsv" "$SPW_LOG_DIR/ports-all")"
    touch "$stop"; wait "$load_pid" || true
    wait "$FLEET_KA_PID" || true
    read -r s a < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" 0 "$SPW_LOG_DIR/ports-all")
    echo "  $moved of the $a keep-alive connections run on a backend the final Maglev table does not pick for them"
    e2e_check "the weight changes moved some picks ($moved), so the restarts needed sync" _gt0 "$moved"
    echo "  FIGURE: new-connection requests $(req_count new), failed $(req_failed new); keep-alive connections unbroken $s of $a"
    e2e_check "made new-connection requests throughout ($(req_count new))" _ge "$(req_count new)" 100
    e2e_check "0 failed new-connection requests ($(req_failed new))" _eq "$(req_failed new)" 0
    e2e_check "keep-alive connections were open ($a)" _gt0 "$a"
    e2e_check "0 broken keep-alive connections ($s of $a unbroken)" _eq "$s" "$a"
    e2e_done
}

# fleet_peer_heard HOST PEER: seconds since HOST last accepted a message of PEER ("never").
fleet_peer_heard() {
    fleet_ctl "$1" status --json | "$SPW_PYTHON" -c "
import json, sys
p = [p for p in json.load(sys.stdin)['sync']['peers'] if p['address'] == sys.argv[1]]
print('never' if not p or p[0]['last_heard_sec'] is None else '%.1f' % p[0]['last_heard_sec'])" "${FLEET_MGMT_ADDR[$2]}:$FLEET_SYNC_PORT"
}

## fleet_sync_security: forged, wrong-key, old-version, stale and unknown-source sync messages install nothing and are counted by reason; the same record from a peer's address (the positive control) is installed, and its replay is refused; then the relay attack: every sync datagram host 1 sends host 2 is re-sent to host 3 from a non-peer address and spoofed from host 1; host 3 refuses every copy, keeps hearing host 1, and on host 1's SIGKILL every connection of host 1 keeps its backend
e2e_fleet_sync_security() {
    local ms port=45555 port_ok=45556 pick evil e out flows relayed s1 a moved heard
    FLEET_HOSTS=(lb1 lb2 lb3)
    export FLEET_BACKENDS="b1 b2 b3"   # b4 joins live (the relay part's edits)
    fleet_up
    fleet_start lb1
    fleet_start lb2
    fleet_start lb3
    ms="$(fleet_wait_nexthops 3 40)" || e2e_fail "router has no three-path VIP route within 40 s: '$(fleet_route)'"
    pick="$(fleet_explain lb1 "$port")"
    for e in "${SPW_BACKENDS[@]}"; do [[ "$e" != "$pick" ]] && { evil="$e"; break; }; done
    echo "  client port $port: Maglev picks $pick; the messages try to pin it (and port $port_ok) to $evil"
    forge() {
        nsx "$FLEET_CLIENT" "$SPW_PYTHON" "$SPW_LIB_DIR/sync_forge.py" --key-file "$(fleet_sync_key)" --target "${FLEET_MGMT_ADDR[lb1]}:$FLEET_SYNC_PORT" \
            --client "$FLEET_CLIENT_ADDR" --vip "$SPW_VIP" --endpoint "${SPW_ADDR[$evil]}" "$@"
    }
    out="$(forge --client-port "$port" --kind forged --kind wrongkey --kind unknown)"
    # The positive control: the client sends from host 2's management address, through the
    # router, as an attacker who has the key and spoofs a peer could (the address on the
    # client's loopback: not on the router, whose BGP and BFD sessions with host 2 must go
    # on). A stale and an old-version message come from there too: from any other address
    # they are refused as unknown_peer first.
    nsx "$FLEET_CLIENT" ip addr add "${FLEET_MGMT_ADDR[lb2]}/32" dev lo
    out+=$'\n'"$(forge --client-port "$port" --kind stale --kind oldversion --source "${FLEET_MGMT_ADDR[lb2]}:$FLEET_SYNC_PORT")"
    out+=$'\n'"$(forge --client-port "$port_ok" --kind peer --source "${FLEET_MGMT_ADDR[lb2]}:$FLEET_SYNC_PORT")"
    nsx "$FLEET_CLIENT" ip addr del "${FLEET_MGMT_ADDR[lb2]}/32" dev lo
    sed 's/^/    /' <<<"$out"
    sleep 0.5
    fleet_ctl lb1 flows show --limit 100000 --json >"$SPW_LOG_DIR/flows-lb1.json"
    flows="$SPW_LOG_DIR/flows-lb1.json"
    e2e_check "bad_tag counts the forged and the wrong-key message ($(fleet_sync lb1 rejected.bad_tag))" _eq "$(fleet_sync lb1 rejected.bad_tag)" 2
    e2e_check "stale counted ($(fleet_sync lb1 rejected.stale))" _eq "$(fleet_sync lb1 rejected.stale)" 1
    e2e_check "version counted ($(fleet_sync lb1 rejected.version))" _eq "$(fleet_sync lb1 rejected.version)" 1
    e2e_check "unknown_peer counted ($(fleet_sync lb1 rejected.unknown_peer))" _eq "$(fleet_sync lb1 rejected.unknown_peer)" 1
    e2e_check "the replay of the accepted message is refused ($(fleet_sync lb1 rejected.replayed))" _eq "$(fleet_sync lb1 rejected.replayed)" 1
    e2e_check "no entry for client port $port was installed" bash -c "! grep -q ':$port\"' '$flows'"
    e2e_check "the peer's record for port $port_ok was installed on $evil (the control: installation works)" "$SPW_PYTHON" -c "
import json, sys
rows = [e for e in json.load(open('$flows'))['entries'] if e['client'].endswith(':$port_ok')]
sys.exit(0 if len(rows) == 1 and rows[0]['backend'] == '$evil' and rows[0]['state'] == 'synced' else 1)"
    e2e_check "exactly one record installed ($(fleet_sync lb1 installed))" _eq "$(fleet_sync lb1 installed)" 1

    # The relay attack (found by QA): host 2 restarts, so host 1's numbering for host 2
    # runs ahead of its numbering for host 3 (the dump host 1 sent host 2); then a tap on
    # host 2's switch port re-sends every datagram host 1 sends host 2 to host 3, once from
    # a non-peer address and once spoofed from host 1. Before: host 3 took the copies' numbers
    # as host 1's, refused every genuine message of host 1 as replayed, installed the spoofed
    # copies, and host 1's connections broke when it failed.
    kill -TERM "$(fleet_pid lb2)"
    topo_wait_for 10 bash -c "! kill -0 $(fleet_pid lb2) 2>/dev/null" || e2e_fail "lb2 did not exit on SIGTERM"
    fleet_start lb2
    ms="$(fleet_wait_nexthops 3 30)" || e2e_fail "lb2 not announced again within 30 s"
    echo "  lb2 restarted: $(fleet_sync lb2 startup)"
    topo_spawn sw "$SPW_LOG_DIR/relay.log" "$SPW_PID_DIR/relay.pid" "$SPW_PYTHON" "$SPW_LIB_DIR/sync_relay.py" \
        --tap-if p-lb2-mgmt0 --out-if p-lb3-mgmt0 --out-mac "${FLEET_MGMT_MAC[lb3]}" \
        --from "${FLEET_MGMT_ADDR[lb1]}:$FLEET_SYNC_PORT" --to "${FLEET_MGMT_ADDR[lb2]}:$FLEET_SYNC_PORT" \
        --relay-to "${FLEET_MGMT_ADDR[lb3]}:$FLEET_SYNC_PORT" --source 10.200.0.99 --source "${FLEET_MGMT_ADDR[lb1]}" \
        --count-file "$SPW_RUN_DIR/relayed"
    topo_wait_for 5 grep -q relaying "$SPW_LOG_DIR/relay.log" || e2e_fail "the relay did not start: $(cat "$SPW_LOG_DIR/relay.log")"
    fleet_ka_start "${E2E_FLEET_CONNS:-90}" 14 "$SPW_LOG_DIR/ka.tsv"
    sleep 1.5
    fleet_churn_edits lb1 lb2 lb3
    sleep 2.5   # confirmations and refreshes reach the peers (refresh_interval_sec = 2)
    fleet_flow_ports lb1 >"$SPW_LOG_DIR/ports-lb1"
    moved="$(fleet_moved lb3 "$SPW_LOG_DIR/ka.tsv" "$SPW_LOG_DIR/ports-lb1")"
    heard="$(fleet_peer_heard lb3 lb1)"
    relayed="$(cat "$SPW_RUN_DIR/relayed")"
    echo "  relayed $relayed datagrams of host 1 to host 2 to host 3 (twice each); host 3: unknown_peer $(fleet_sync lb3 rejected.unknown_peer), wrong_recipient $(fleet_sync lb3 rejected.wrong_recipient), replayed $(fleet_sync lb3 rejected.replayed), lost $(fleet_sync lb3 lost_messages); heard host 1 ${heard} s ago"
    fleet_fail lb1 2
    read -r s1 a < <(fleet_ka_report "$SPW_LOG_DIR/ka.tsv" "$FLEET_T_KILL" "$SPW_LOG_DIR/ports-lb1")
    echo "  FIGURE: host 1's connections that kept working on their backend after its SIGKILL: $s1 of $a ($moved of them on a backend host 3's Maglev table no longer picks)"
    e2e_check "the tap relayed host 1's datagrams to host 2 ($relayed)" _gt0 "$relayed"
    e2e_check "host 3 refused the non-peer copies as unknown_peer ($(fleet_sync lb3 rejected.unknown_peer) of $relayed)" _ge "$(fleet_sync lb3 rejected.unknown_peer)" "$relayed"
    e2e_check "host 3 refused the spoofed copies as wrong_recipient ($(fleet_sync lb3 rejected.wrong_recipient) of $relayed)" _ge "$(fleet_sync lb3 rejected.wrong_recipient)" "$relayed"
    e2e_check "host 3 refused no genuine message of host 1 as replayed ($(fleet_sync lb3 rejected.replayed))" _eq "$(fleet_sync lb3 rejected.replayed)" 0
    e2e_check "host 3 kept hearing host 1 (last ${heard} s ago)" "$SPW_PYTHON" -c "import sys; sys.exit(0 if '$heard' != 'never' and float('$heard') < 2 else 1)"
    e2e_check "host 1 carried keep-alive connections ($a)" _gt0 "$a"
    e2e_check "the edits moved some of host 1's picks on host 3 ($moved), so the test can fail without host 3's copies" _gt0 "$moved"
    e2e_check "every connection of host 1 keeps working on its backend ($s1 of $a)" _eq "$s1" "$a"
    e2e_done
}

## fleet_no_l2_loop: two hosts on one segment, a backend whose MAC the switch does not know (so it floods every frame sent to it): each SYN is forwarded once by the host ECMP chose, and the other host drops its flooded copy as not_our_mac instead of forwarding it back (before: an endless loop, 120,000 forwards in 6 s)
e2e_fleet_no_l2_loop() {
    local h port=8081 ghost_mac=02:00:00:00:ee:01 fwd=() mac_drops=() total_fwd=0 total_mac=0 st
    fleet_up
    # a second service on the VIP whose one backend is nowhere on the bridge
    for h in lb1 lb2; do
        fleet_config "$h" "$SPW_RUN_DIR/$h.toml"
        printf '\n[[services]]\nname = "ghost"\nvip = "%s"\nport = %s\nprotocol = "tcp"\n\n[[services.backends]]\nname = "g1"\naddress = "10.200.13.1"\nmac = "%s"\n' \
            "$SPW_VIP" "$port" "$ghost_mac" >>"$SPW_RUN_DIR/$h.toml"
        fleet_start "$h"
    done
    fleet_wait_nexthops 2 40 >/dev/null || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    # one connection attempt: its SYN and the client's retransmissions (no answer comes)
    nsx "$FLEET_CLIENT" curl -s -o /dev/null --max-time 2 "http://$SPW_VIP:$port/" || true
    sleep 2
    for h in lb1 lb2; do
        st="$(fleet_ctl "$h" status --json | "$SPW_PYTHON" -c 'import json,sys; t=json.load(sys.stdin)["total"]; print(t["forwarded"], dict(t["drops"]).get("not_our_mac", 0))')"
        fwd+=("${st% *}"); mac_drops+=("${st#* }")
        total_fwd=$((total_fwd + ${st% *})); total_mac=$((total_mac + ${st#* }))
        echo "  $h: forwarded ${st% *}, not_our_mac ${st#* }"
    done
    e2e_check "the SYNs were forwarded once each, not looped: $total_fwd forwarded in all (a connection attempt sends 2-3 SYNs in 2 s)" _lt "$total_fwd" 10
    e2e_check "the flooded copies reached the other host and were dropped as not_our_mac ($total_mac), so the test can fail" _gt0 "$total_mac"
    e2e_done
}

## fleet_config_status: scripts/lib/fleet.sh fleet_config returns 0 to a `set -e` script, with the last backend enabled or disabled (a trailing `[[ ]] && printf` returned 1 and killed it); needs no topology
e2e_fleet_config_status() {
    local f="$SPW_RUN_DIR/fleet-config-status.toml" rc
    mkdir -p "$SPW_RUN_DIR"
    # A script of its own: `set -e` is off inside a `||` list, so the caller's would not see it.
    _fleet_config_set_e() { # EXTRA_ENV...: runs fleet_config in a fresh `set -e` bash; prints its status
        local rc=0
        env "$@" FLEET_SYNC=0 FLEET_BACKENDS="b1 b2" bash -c 'set -e; source "$1/topology.sh"; source "$1/fleet.sh"; fleet_config lb1 "$2"; echo reached >"$2.done"' _ "$SPW_LIB_DIR" "$f" || rc=$?
        echo "$rc"
    }
    rm -f "$f.done"
    rc="$(_fleet_config_set_e)"
    e2e_check "fleet_config returns 0 when the last backend is enabled (script status $rc)" test "$rc" = 0
    e2e_check "the set -e script goes on after it" test -f "$f.done"
    e2e_check "the config lists both backends, none disabled" \
        test "$(grep -c '^\[\[services.backends\]\]' "$f")/$(grep -c '^enabled = false' "$f" || true)" = 2/0
    rm -f "$f.done"
    rc="$(_fleet_config_set_e FLEET_DISABLED_b2=1)"
    e2e_check "and when it is disabled (script status $rc), which the config says" test "$rc/$(grep -c '^enabled = false' "$f")" = 0/1
    rm -f "$f" "$f.done"
    e2e_done
}
