# shellcheck shell=bash
# QUIC-LB e2e tests (docs/operations.md "QUIC-LB"), sourced by scripts/e2e.sh: real QUIC
# (Python aioquic) clients and servers on the demo topology. Every backend runs
# scripts/lib/quic_server.py, which issues connection IDs encoding its server ID
# (encrypted, four-pass: server ID 2 octets + nonce 6) on two UDP services of the VIP:
# port 443 with [[services.quic_lb]] and port 4443 without. Clients connect, then migrate
# (another server-issued CID, a new source port, and in one round a new source address).

E2E_QUIC_PORT=443
E2E_QUIC_PLAIN_PORT=4443
declare -gA E2E_QUIC_SID=([b1]=0b01 [b2]=0b02 [b3]=0b03 [b4]=0b04)
E2E_QUIC_C1_ADDR2=10.200.1.11   # c1's second address (the "new network" of a migration)

# The two UDP services, appended to the demo config (which ends with web's backends);
# E2E_QUIC_ZONES=0 leaves the zone fields out (the fleet config has no zones).
_quic_services() {
    local b z
    cat <<EOF

[[services]]
name = "quic"
vip = "$SPW_VIP"
port = $E2E_QUIC_PORT
protocol = "udp"

[[services.quic_lb]]
config_rotation = 0
server_id_length = 2
nonce_length = 6
algorithm = "encrypted"
key_file = "$SPW_RUN_DIR/quic-lb.key"
EOF
    for b in "${SPW_BACKENDS[@]}"; do
        z=""; [[ "${E2E_QUIC_ZONES:-1}" == 0 ]] || z="zone = \"${SPW_ZONE[$b]}\""$'\n'
        printf '\n[[services.backends]]\nname = "%s"\naddress = "%s"\nmac = "%s"\n%sserver_id = "%s"\n' \
            "$b" "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}" "$z" "${E2E_QUIC_SID[$b]}"
    done
    printf '\n[[services]]\nname = "quic-plain"\nvip = "%s"\nport = %s\nprotocol = "udp"\n' "$SPW_VIP" "$E2E_QUIC_PLAIN_PORT"
    for b in "${SPW_BACKENDS[@]}"; do
        z=""; [[ "${E2E_QUIC_ZONES:-1}" == 0 ]] || z="zone = \"${SPW_ZONE[$b]}\""$'\n'
        printf '\n[[services.backends]]\nname = "%s"\naddress = "%s"\nmac = "%s"\n%s' "$b" "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}" "$z"
    done
}

_quic_listening() { [[ -n "$(nsx "$1" ss -Hlun "sport = :$E2E_QUIC_PORT" 2>/dev/null)" ]]; }

# quic_servers_start: one QUIC server per backend, on both ports.
quic_servers_start() {
    local b
    for b in "${SPW_BACKENDS[@]}"; do
        topo_spawn "$b" "$SPW_LOG_DIR/$b.quic.stderr.log" "$SPW_PID_DIR/quic-$b.pid" \
            "$SPW_PYTHON" "$SPW_LIB_DIR/quic_server.py" --name "$b" --server-id "${E2E_QUIC_SID[$b]}" \
            --key-file "$SPW_RUN_DIR/quic-lb.key" --bind "$SPW_VIP" --ports "$E2E_QUIC_PORT,$E2E_QUIC_PLAIN_PORT" --log "$SPW_LOG_DIR/$b.quic.log"
    done
    for b in "${SPW_BACKENDS[@]}"; do
        topo_wait_for 10 _quic_listening "$b" || { cat "$SPW_LOG_DIR/$b.quic.stderr.log" >&2 || true; e2e_fail "QUIC server $b not listening within 10 s"; }
    done
}

# quic_clients PORT N OUT [MIGRATE_ADDR]: N migrating connections from c1 (quic_migrate_client.py;
# c1 is also the fleet topology's client).
quic_clients() {
    local extra=()
    [[ -z "${4:-}" ]] || extra=(--migrate-addr "$4")
    nsx c1 timeout 120 "$SPW_PYTHON" "$SPW_LIB_DIR/quic_migrate_client.py" --vip "$SPW_VIP" --port "$1" --conns "$2" \
        --parallel 10 --timeout 2 "${extra[@]}" >"$3" 2>"$3.stderr" || true
}
_quic_ok() { awk -F'\t' '$6 == "ok"' "$1" | wc -l; }
_quic_broken() { awk -F'\t' '$6 != "ok"' "$1" | wc -l; }
_quic_lines() { wc -l <"$1"; }
_quic_counter() { spillwayctl_cmd status --json | _quic_counter_of "$1"; }
_quic_counter_of() { "$SPW_PYTHON" -c "import json,sys; print(dict(json.load(sys.stdin)['total']['quic_lb']).get('$1', 0))"; }

## quic: aioquic clients migrate (new CID, new source port; then a new source address) on a QUIC-LB service with 4 servers issuing encrypted server-ID CIDs: every connection completes on its original server; the same migration without QUIC-LB breaks about 3/4 of them; explain decodes a server's CID live
e2e_quic() {
    local n="${E2E_QUIC_CONNS:-40}" ok broken ok2 plain_ok plain_broken routed cid out
    "$SPW_PYTHON" -c "import aioquic" 2>/dev/null || e2e_fail "python aioquic not installed for $SPW_PYTHON (scripts/test.sh installs it)"
    "$SPW_PYTHON" "$SPW_LIB_DIR/quic_lb.py" || e2e_fail "the test servers' QUIC-LB encoder fails the draft's vectors"
    topo_up
    openssl rand -hex 16 >"$SPW_RUN_DIR/quic-lb.key" 2>/dev/null || "$SPW_PYTHON" -c "import os; print(os.urandom(16).hex())" >"$SPW_RUN_DIR/quic-lb.key"
    chmod 600 "$SPW_RUN_DIR/quic-lb.key"
    write_config "$SPW_CONFIG"
    _quic_services >>"$SPW_CONFIG"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    nsx c1 ip addr add "$E2E_QUIC_C1_ADDR2/$SPW_SUBNET_LEN" dev eth0
    quic_servers_start

    quic_clients "$E2E_QUIC_PORT" "$n" "$SPW_LOG_DIR/quic-lb.tsv"
    ok="$(_quic_ok "$SPW_LOG_DIR/quic-lb.tsv")"; broken="$(_quic_broken "$SPW_LOG_DIR/quic-lb.tsv")"
    echo "  servers of the QUIC-LB connections: $(awk -F'\t' '{print $2}' "$SPW_LOG_DIR/quic-lb.tsv" | sort | uniq -c | tr '\n' ' ')"
    quic_clients "$E2E_QUIC_PORT" "$n" "$SPW_LOG_DIR/quic-lb-addr.tsv" "$E2E_QUIC_C1_ADDR2"
    ok2="$(_quic_ok "$SPW_LOG_DIR/quic-lb-addr.tsv")"
    quic_clients "$E2E_QUIC_PLAIN_PORT" "$n" "$SPW_LOG_DIR/plain.tsv"
    plain_ok="$(_quic_ok "$SPW_LOG_DIR/plain.tsv")"; plain_broken="$(_quic_broken "$SPW_LOG_DIR/plain.tsv")"
    routed="$(_quic_counter routed)"
    echo "  FIGURE: QUIC-LB service, new port: $ok of $n connections completed on their original server ($broken failed); new address and port: $ok2 of $n"
    echo "  FIGURE: without QUIC-LB, new port: $plain_broken of $n connections broke (expected about (N-1)/N = 3/4 with 4 servers); $plain_ok kept their server by chance"
    echo "  status quic_lb: $(spillwayctl_cmd status | grep 'quic_lb:' | sed 's/^ *//')"
    e2e_check "all $n QUIC-LB connections ran ($(_quic_lines "$SPW_LOG_DIR/quic-lb.tsv") results)" _eq "$(_quic_lines "$SPW_LOG_DIR/quic-lb.tsv")" "$n"
    e2e_check "every QUIC-LB connection completed on its original server after a port change ($ok of $n)" _eq "$ok" "$n"
    e2e_check "every QUIC-LB connection completed on its original server after an address change ($ok2 of $n)" _eq "$ok2" "$n"
    e2e_check "the connections used more than one server ($(awk -F'\t' '{print $2}' "$SPW_LOG_DIR/quic-lb.tsv" | sort -u | wc -l))" _ge "$(awk -F'\t' '{print $2}' "$SPW_LOG_DIR/quic-lb.tsv" | sort -u | wc -l)" 2
    e2e_check "short-header packets were routed by their server ID (routed $routed)" _gt0 "$routed"
    e2e_check "without QUIC-LB the migration breaks at least 40 % of connections ($plain_broken of $n; about 75 % expected), so the test can fail" _ge "$((plain_broken * 100))" "$((n * 40))"
    e2e_check "without QUIC-LB some connections still complete before migration ($(awk -F'\t' '$2 != "-"' "$SPW_LOG_DIR/plain.tsv" | wc -l) first answers)" _ge "$(awk -F'\t' '$2 != "-"' "$SPW_LOG_DIR/plain.tsv" | wc -l)" "$n"
    # explain decodes a CID that b3's server would issue (encoded by quic_lb.py, not Rust).
    cid="$(cd "$SPW_LIB_DIR" && "$SPW_PYTHON" -c "from quic_lb import QuicLb; print(QuicLb(0, 2, 6, bytes.fromhex(open('$SPW_RUN_DIR/quic-lb.key').read().strip())).encode(bytes.fromhex('${E2E_QUIC_SID[b3]}')).hex())")"
    out="$(spillwayctl_cmd explain --client "${SPW_ADDR[c1]}" --vip "$SPW_VIP:$E2E_QUIC_PORT/udp" --quic-dcid "$cid" 2>&1 || true)"
    printf '%s\n' "$out" | sed -n '1,6p' | sed 's/^/    /'
    e2e_check "explain --quic-dcid decodes b3's CID to server ID ${E2E_QUIC_SID[b3]}" _contains "$out" "server ID: ${E2E_QUIC_SID[b3]}"
    e2e_check "explain --quic-dcid routes its short-header packets to b3" _contains "$out" "short-header packets -> backend b3 "
    e2e_done
}

# --- ECMP over two hosts (scripts/lib/fleet.sh, no flow sync) ---
E2E_QUIC_FLEET_ADDR2=10.201.0.11   # the fleet client's second address

# _quic_fleet_host SRC PORT DPORT: the Spillway host the router's ECMP route sends a UDP
# datagram SRC:PORT -> VIP:DPORT to (the kernel's own multipath hash: `ip route get` with
# the L4 fields, fib_multipath_hash_policy=1); "-" when unknown.
_quic_fleet_host() {
    local via h
    via="$(nsx rt ip -o route get "$SPW_VIP" from "$1" iif cl0 ipproto udp sport "$2" dport "$3" 2>/dev/null | grep -o 'via [0-9.]*' | cut -d' ' -f2)"
    for h in "${FLEET_HOSTS[@]}"; do [[ "${FLEET_PORT_ADDR[$h]}" == "$via" ]] && { echo "$h"; return; }; done
    echo -
}
# _quic_fleet_clients_of HOST SERVICE: client IP:port of HOST's connection-table entries
# of SERVICE (one per line).
_quic_fleet_clients_of() {
    fleet_ctl "$1" flows show --limit 100000 --json | "$SPW_PYTHON" -c "
import json, sys
for e in json.load(sys.stdin)['entries']:
    if e['service'] == sys.argv[1]:
        print(e['client'])" "$2" | sort -u
}
# quic_fleet_paths TSV SERVICE SRC2 DPORT OUT: per connection of a client result file, the
# host of its handshake (the host whose connection table holds its first source address
# and port: the handshake's long-header packets took the 5-tuple path there), the host the
# router's hash picks for that 5-tuple, and the host of its migrated path (SRC2 and the
# second port). OUT columns: index, table host, route host, migrated host, result.
# Leaves each host's entries of SERVICE in $SPW_LOG_DIR/quic-clients-HOST.
quic_fleet_paths() {
    local i p1 p2 res t r m h
    for h in "${FLEET_HOSTS[@]}"; do _quic_fleet_clients_of "$h" "$2" >"$SPW_LOG_DIR/quic-clients-$h"; done
    while IFS=$'\t' read -r i _ _ p1 p2 res; do
        [[ "$p1" =~ ^[0-9]+$ && "$p2" =~ ^[0-9]+$ ]] || continue
        t=-; for h in "${FLEET_HOSTS[@]}"; do grep -qxF "$FLEET_CLIENT_ADDR:$p1" "$SPW_LOG_DIR/quic-clients-$h" && t="$h"; done
        r="$(_quic_fleet_host "$FLEET_CLIENT_ADDR" "$p1" "$4")"
        m="$(_quic_fleet_host "$3" "$p2" "$4")"
        printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$t" "$r" "$m" "$res"
    done <"$1" >"$5"
}
_quic_fleet_crossed() { awk -F'\t' '$2 != "-" && $4 != "-" && $2 != $4' "$1" | wc -l; }
_quic_fleet_crossed_ok() { awk -F'\t' '$2 != "-" && $4 != "-" && $2 != $4 && $5 == "ok"' "$1" | wc -l; }
_quic_fleet_agree() { awk -F'\t' '$2 == $3' "$1" | wc -l; }
_quic_fleet_counter() { fleet_ctl "$1" status --json | _quic_counter_of "$2"; }

## quic_fleet: ECMP over two Spillway hosts without flow sync; aioquic clients migrate (new source port, then new address and port) so that about half the connections move to the other host: every QUIC-LB connection completes on its original server, also those that crossed hosts (counted per host from the connection tables and the router's hash); the same migration without QUIC-LB breaks about 3/4
e2e_quic_fleet() {
    local n="${E2E_QUIC_CONNS:-40}" ms h f ok ok2 crossed crossed2 cok cok2 agree plain_broken plain_crossed routed fb
    local -A routed_of
    "$SPW_PYTHON" -c "import aioquic" 2>/dev/null || e2e_fail "python aioquic not installed for $SPW_PYTHON (scripts/test.sh installs it)"
    FLEET_SYNC=0
    fleet_up
    (umask 077; "$SPW_PYTHON" -c "import os; print(os.urandom(16).hex())" >"$SPW_RUN_DIR/quic-lb.key")
    for h in "${FLEET_HOSTS[@]}"; do
        fleet_config "$h" "$SPW_RUN_DIR/$h.toml"
        E2E_QUIC_ZONES=0 _quic_services >>"$SPW_RUN_DIR/$h.toml"
        fleet_start "$h"
    done
    ms="$(fleet_wait_nexthops 2 40)" || e2e_fail "router has no two-path VIP route within 40 s: '$(fleet_route)'"
    echo "  router: $(fleet_route) (after $ms ms)"
    nsx "$FLEET_CLIENT" ip addr add "$E2E_QUIC_FLEET_ADDR2/24" dev eth0
    quic_servers_start

    f="$SPW_LOG_DIR/quic-fleet"
    quic_clients "$E2E_QUIC_PORT" "$n" "$f-port.tsv"
    quic_fleet_paths "$f-port.tsv" quic "$FLEET_CLIENT_ADDR" "$E2E_QUIC_PORT" "$f-port.paths"
    quic_clients "$E2E_QUIC_PORT" "$n" "$f-addr.tsv" "$E2E_QUIC_FLEET_ADDR2"
    quic_fleet_paths "$f-addr.tsv" quic "$E2E_QUIC_FLEET_ADDR2" "$E2E_QUIC_PORT" "$f-addr.paths"
    for h in "${FLEET_HOSTS[@]}"; do cp "$SPW_LOG_DIR/quic-clients-$h" "$f-addr.clients-$h"; done
    quic_clients "$E2E_QUIC_PLAIN_PORT" "$n" "$f-plain.tsv"
    quic_fleet_paths "$f-plain.tsv" quic-plain "$FLEET_CLIENT_ADDR" "$E2E_QUIC_PLAIN_PORT" "$f-plain.paths"
    ok="$(_quic_ok "$f-port.tsv")"; ok2="$(_quic_ok "$f-addr.tsv")"
    crossed="$(_quic_fleet_crossed "$f-port.paths")"; cok="$(_quic_fleet_crossed_ok "$f-port.paths")"
    crossed2="$(_quic_fleet_crossed "$f-addr.paths")"; cok2="$(_quic_fleet_crossed_ok "$f-addr.paths")"
    agree="$(( $(_quic_fleet_agree "$f-port.paths") + $(_quic_fleet_agree "$f-addr.paths") ))"
    plain_broken="$(_quic_broken "$f-plain.tsv")"; plain_crossed="$(_quic_fleet_crossed "$f-plain.paths")"
    routed=0; fb=0
    for h in "${FLEET_HOSTS[@]}"; do
        routed_of[$h]="$(_quic_fleet_counter "$h" routed)"; routed=$((routed + routed_of[$h]))
        fb=$((fb + $(_quic_fleet_counter "$h" fallback_unknown_server_id) + $(_quic_fleet_counter "$h" fallback_not_eligible)))
        echo "  $h: handshakes (connection-table entries) $(awk -F'\t' -v h="$h" '$2 == h' "$f-port.paths" "$f-addr.paths" | wc -l), migrated paths that entered here from the other host $(awk -F'\t' -v h="$h" '$2 != "-" && $2 != h && $4 == h' "$f-port.paths" "$f-addr.paths" | wc -l); $(fleet_ctl "$h" status | grep 'quic_lb:' | sed 's/^ *//')"
    done
    echo "  servers of the QUIC-LB connections: $(awk -F'\t' '{print $2}' "$f-port.tsv" "$f-addr.tsv" | sort | uniq -c | tr '\n' ' ')"
    echo "  FIGURE: ECMP, QUIC-LB, new port: $ok of $n connections completed on their original server; $crossed migrated to the other host, of which $cok completed"
    echo "  FIGURE: ECMP, QUIC-LB, new address and port: $ok2 of $n completed; $crossed2 migrated to the other host, of which $cok2 completed"
    echo "  FIGURE: ECMP, without QUIC-LB, new port: $plain_broken of $n broke (about (N-1)/N = 3/4 expected with 4 servers); $plain_crossed migrated to the other host"
    e2e_check "all $n QUIC-LB connections ran per round ($(_quic_lines "$f-port.tsv"), $(_quic_lines "$f-addr.tsv") results)" _eq "$(_quic_lines "$f-port.tsv") $(_quic_lines "$f-addr.tsv")" "$n $n"
    e2e_check "the router's hash agrees with the connection tables on every handshake's host ($agree of $((2 * n))), so the per-host counts are right" _eq "$agree" "$((2 * n))"
    e2e_check "both hosts carried handshakes" _eq "$(awk -F'\t' '{print $2}' "$f-port.paths" "$f-addr.paths" | sort -u | grep -c lb)" 2
    e2e_check "migrations crossed hosts in both rounds ($crossed, $crossed2), so the test can fail without QUIC-LB routing" _ge "$(( crossed > 0 && crossed2 > 0 ))" 1
    e2e_check "every QUIC-LB connection completed on its original server after a port change ($ok of $n)" _eq "$ok" "$n"
    e2e_check "every QUIC-LB connection completed on its original server after an address change ($ok2 of $n)" _eq "$ok2" "$n"
    for h in "${FLEET_HOSTS[@]}"; do
        e2e_check "$h routed short-header packets by their server ID (${routed_of[$h]})" _gt0 "${routed_of[$h]}"
        e2e_check "$h holds no connection-table entry from the migrated address $E2E_QUIC_FLEET_ADDR2 (its packets are routed by the CID alone)" _eq "$(grep -c "^$E2E_QUIC_FLEET_ADDR2:" "$f-addr.clients-$h" || true)" 0
    done
    e2e_check "no short-header packet fell back for an unknown or ineligible server ID ($fb)" _eq "$fb" 0
    e2e_check "without QUIC-LB the migration breaks at least 40 % of connections ($plain_broken of $n), so the test can fail" _ge "$((plain_broken * 100))" "$((n * 40))"
    e2e_done
}
