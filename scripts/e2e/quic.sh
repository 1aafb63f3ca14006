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

# The two UDP services, appended to the demo config (which ends with web's backends).
_quic_services() {
    local b
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
        printf '\n[[services.backends]]\nname = "%s"\naddress = "%s"\nmac = "%s"\nzone = "%s"\nserver_id = "%s"\n' \
            "$b" "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}" "${SPW_ZONE[$b]}" "${E2E_QUIC_SID[$b]}"
    done
    printf '\n[[services]]\nname = "quic-plain"\nvip = "%s"\nport = %s\nprotocol = "udp"\n' "$SPW_VIP" "$E2E_QUIC_PLAIN_PORT"
    for b in "${SPW_BACKENDS[@]}"; do
        printf '\n[[services.backends]]\nname = "%s"\naddress = "%s"\nmac = "%s"\nzone = "%s"\n' "$b" "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}" "${SPW_ZONE[$b]}"
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

# quic_clients PORT N OUT [MIGRATE_ADDR]: N migrating connections from c1 (quic_migrate_client.py).
quic_clients() {
    local extra=()
    [[ -z "${4:-}" ]] || extra=(--migrate-addr "$4")
    nsx c1 timeout 120 "$SPW_PYTHON" "$SPW_LIB_DIR/quic_migrate_client.py" --vip "$SPW_VIP" --port "$1" --conns "$2" \
        --parallel 10 --timeout 2 "${extra[@]}" >"$3" 2>"$3.stderr" || true
}
_quic_ok() { awk -F'\t' '$6 == "ok"' "$1" | wc -l; }
_quic_broken() { awk -F'\t' '$6 != "ok"' "$1" | wc -l; }
_quic_lines() { wc -l <"$1"; }
_quic_counter() { spillwayctl_cmd status --json | "$SPW_PYTHON" -c "import json,sys; print(dict(json.load(sys.stdin)['total']['quic_lb']).get('$1', 0))"; }

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
