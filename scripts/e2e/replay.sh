# shellcheck shell=bash
# Replay e2e test (docs/ctl.md "replay"), sourced by scripts/e2e.sh: traffic captured on the
# load balancer's port is replayed offline under an edited config, and the flows the replay
# says would change backend are compared with what `--dry-run` of the same edit answers and
# with what the live daemon does once the edit is applied (three ways, one answer).

REPLAY_PORTS="${REPLAY_PORTS:-16}"        # connections per client, source ports 41001..
REPLAY_PORT_BASE=41000

# replay_round CLIENT: one HTTP GET per fixed source port REPLAY_PORT_BASE+1.. (so a flow
# has the same 5-tuple in every round), each on its own connection, which the client ends
# with a RST (SO_LINGER 0: no TIME_WAIT holds the 5-tuple); prints "CLIENT:PORT<TAB>BACKEND"
# per connection ("-" when it failed).
replay_round() {
    local c="$1"
    nsx "$c" "$SPW_PYTHON" - "${SPW_ADDR[$c]}" "$SPW_VIP" "$SPW_VIP_PORT" "$REPLAY_PORT_BASE" "$REPLAY_PORTS" <<'PY'
import socket, struct, sys
src, vip, vport, base, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
for port in range(base + 1, base + 1 + n):
    backend = "-"
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((src, port))
        s.settimeout(3)
        s.connect((vip, vport))
        s.sendall(b"GET / HTTP/1.1\r\nHost: replay\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data:
                head, body = data.split(b"\r\n\r\n", 1)
                length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if length and len(body) >= length[0]:
                    break
        for line in data.decode("latin-1").splitlines():
            if line.startswith("backend="):
                backend = line.split("=", 1)[1].strip()
    except OSError as e:
        backend = "-"
        print(f"{src}:{port}: {e}", file=sys.stderr)
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    print(f"{src}:{port}\t{backend}")
PY
}

# replay_moved_live ROUND1 ROUND2: flows ("ADDR:PORT") whose backend differs, sorted
replay_moved_live() { join -t $'\t' <(sort "$1") <(sort "$2") | awk -F'\t' '$2 != $3 {print $1}' | sort; }

# replay_moved_replay JSON: flows the replay reports as moved to another backend, sorted
replay_moved_replay() {
    "$SPW_PYTHON" -c '
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["changed"]:
    if c["change"] == "moved":
        print(c["flow"].split(" -> ")[0])' "$1" | sort
}

# replay_moved_dryrun JSON ROUND1: the flows the dry run's answer moves. Per client class
# the answer gives the moved share and each backend's share after the edit; when a class
# whose new connections move is left with one backend, every flow of that class not already
# on it moves and no other does (its table has no other owner); a class absent from the
# answer moves nothing. Fails when a class's answer does not name its flows this way (more
# than one backend after), or when the answer re-picks tracked connections (it must not:
# a disabled backend keeps them). Class of a client: its zone (SPW_ZONE); classes without
# a client of the test (`(not zonal)`) are not read.
replay_moved_dryrun() {
    local zones=""
    local c
    for c in "${SPW_CLIENTS[@]}"; do zones+="${SPW_ADDR[$c]}=${SPW_ZONE[$c]},"; done
    "$SPW_PYTHON" -c '
import json, sys
r = json.load(open(sys.argv[1]))
zone = dict(kv.split("=") for kv in sys.argv[3].strip(",").split(","))
only = {}
for s in r["services"]:
    if s["service"] != "web":
        continue
    if s["repicked"]:
        sys.exit("the dry run re-picks tracked connections: %s" % s["repicked"])
    for cl in s["classes"]:
        if cl["class"] not in zone.values():
            continue  # no client of the test is in it
        after = [x["backend"] for x in cl["shares"] if x["after"] > 0]
        if cl["backend_moved_share"] == 0:
            continue
        if len(after) != 1:
            sys.exit("class %s: %d backends after the edit: the answer does not name the flows" % (cl["class"], len(after)))
        only[cl["class"]] = after[0]
for line in open(sys.argv[2]):
    flow, backend = line.rstrip("\n").split("\t")
    b = only.get(zone[flow.split(":")[0]])
    if b is not None and backend != b:
        print(flow)' "$1" "$2" "$zones" | sort
}

## replay_three_ways: a tcpdump capture of real traffic replayed under a config that disables b2 (zonal STAY_WITHIN_ZONE) names the same flows as the --dry-run of that edit and as the live daemon moves once the edit is applied (same 5-tuples sent again); not none
e2e_replay_three_ways() {
    command -v tcpdump >/dev/null || e2e_fail "tcpdump not found"
    SPW_SERVICE_EXTRA='zonal_affinity = "ZONAL_AFFINITY_STAY_WITHIN_ZONE"'
    topo_up
    write_config "$SPW_CONFIG"
    # a flow's closed entry leaves the table after 1 s: round 2's SYNs are new connections
    printf '\n[conntrack]\ntcp_closing_timeout_sec = 1\n' >>"$SPW_CONFIG"
    local new="$SPW_RUN_DIR/replay-new.toml" d="$SPW_LOG_DIR" b
    SPW_BACKEND_EXTRA[b2]='enabled = false'
    write_config "$new"
    printf '\n[conntrack]\ntcp_closing_timeout_sec = 1\n' >>"$new"
    unset 'SPW_BACKEND_EXTRA[b2]'
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    for b in "${SPW_BACKENDS[@]}"; do wait_health "$b" true; done

    # round 1, captured on the port: frames the port receives (not those the daemon sends)
    local pcap="$SPW_RUN_DIR/replay.pcap" tpid i
    ip netns exec "$(ns lb)" tcpdump -i lb0 -Q in -nn --immediate-mode -U -w "$pcap" "ether dst $SPW_LB_MAC" 2>"$d/tcpdump.err" 9>&- &
    tpid=$!
    for ((i = 0; i < 50; i++)); do grep -q "listening on" "$d/tcpdump.err" 2>/dev/null && break; sleep 0.1; done
    grep -q "listening on" "$d/tcpdump.err" || e2e_fail "tcpdump did not start: $(cat "$d/tcpdump.err")"
    for c in "${SPW_CLIENTS[@]}"; do replay_round "$c"; done >"$d/round1.tsv" 2>"$d/round1.err"
    sleep 1   # (tcpdump writes what it has read; the rest of its ring is lost at TERM)
    # (TERM: a background job of a script ignores SIGINT, and tcpdump keeps it ignored)
    kill -TERM "$tpid"; wait "$tpid" || true
    local n; n="$(wc -l <"$d/round1.tsv")"
    e2e_check "round 1: all $n connections answered ($(grep -c $'\t-$' "$d/round1.tsv") failed)" _eq "$(grep -c $'\t-$' "$d/round1.tsv")" 0
    echo "  round 1 per backend: $(cut -f2 "$d/round1.tsv" | sort | uniq -c | tr -s ' ' | tr '\n' ',')"
    echo "  capture: $(tcpdump -nn -r "$pcap" 2>/dev/null | wc -l) frames"

    # (a) the replay, offline, of the capture under the running config and the edited one
    "$SPILLWAYCTL_BIN" replay --baseline "$SPW_CONFIG" --config "$new" --json "$pcap" >"$d/replay.json" 2>"$d/replay.err" ||
        e2e_fail "spillwayctl replay failed: $(cat "$d/replay.json" "$d/replay.err")"
    "$SPILLWAYCTL_BIN" replay --baseline "$SPW_CONFIG" --config "$new" "$pcap" 2>&1 | sed 's/^/    /'
    # (b) the dry run of the same edit against the live daemon
    spillwayctl_cmd config apply "$new" --dry-run --json >"$d/dryrun.json" 2>"$d/dryrun.err" ||
        e2e_fail "config apply --dry-run failed: $(cat "$d/dryrun.err")"
    spillwayctl_cmd config apply "$new" --dry-run 2>&1 | sed 's/^/    /'
    # (c) the edit applied; the same 5-tuples again, once their closed entries expired
    spillwayctl_cmd config apply "$new" >"$d/apply.out" 2>&1 || e2e_fail "config apply failed: $(cat "$d/apply.out")"
    sleep 2.5
    for c in "${SPW_CLIENTS[@]}"; do replay_round "$c"; done >"$d/round2.tsv" 2>"$d/round2.err"
    e2e_check "round 2: all connections answered ($(grep -c $'\t-$' "$d/round2.tsv") failed)" _eq "$(grep -c $'\t-$' "$d/round2.tsv")" 0
    e2e_check "round 2: b2 (disabled) answered none" _eq "$(grep -c $'\tb2$' "$d/round2.tsv")" 0

    local live rep dry
    live="$(replay_moved_live "$d/round1.tsv" "$d/round2.tsv")"
    rep="$(replay_moved_replay "$d/replay.json")"
    dry="$(replay_moved_dryrun "$d/dryrun.json" "$d/round1.tsv")" || e2e_fail "the dry run's answer: $dry"
    printf '%s\n' "$live" >"$d/moved-live.txt"; printf '%s\n' "$rep" >"$d/moved-replay.txt"; printf '%s\n' "$dry" >"$d/moved-dryrun.txt"
    local nl nr nd
    nl="$(grep -c . <<<"$live" || true)"; nr="$(grep -c . <<<"$rep" || true)"; nd="$(grep -c . <<<"$dry" || true)"
    e2e_check "the live daemon moved some flows ($nl of $n): the comparison can fail" _gt0 "$nl"
    e2e_check "the replay names the flows the live daemon moved (replay $nr, live $nl of $n flows; lists in $d/moved-*.txt)" _eq "$rep" "$live"
    e2e_check "the dry run names the flows the live daemon moved (dry run $nd, live $nl)" _eq "$dry" "$live"
    e2e_check "the replay saw every flow of the capture ($n)" _eq "$("$SPW_PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["flows"])' "$d/replay.json")" "$n"
    # each moved flow's backends in the replay are those the live daemon used, before and after
    local want got
    want="$(join -t $'\t' <(sort "$d/round1.tsv") <(sort "$d/round2.tsv") | awk -F'\t' '$2 != $3 {print $1 " web/" $2 " web/" $3}' | sort)"
    got="$("$SPW_PYTHON" -c '
import json, sys
for c in json.load(open(sys.argv[1]))["changed"]:
    print(c["flow"].split(" -> ")[0], c["before"], c["after"])' "$d/replay.json" | sort)"
    e2e_check "each changed flow's backends before and after are those the live daemon used" _eq "$got" "$want"
    e2e_done
}

## replay_dumpcap: a dpdk-dumpcap capture of the daemon's port (RX and TX, scripts/e2e/dumpcap.sh's setup on hugepages) replays what the port received: the flows and each backend's flows and packets are the live daemon's, the frames it sent are counted apart, and disabling b2 moves exactly the z1 flows b2 served
e2e_replay_dumpcap() {
    command -v dpdk-dumpcap >/dev/null || e2e_fail "dpdk-dumpcap not found (Debian package dpdk)"
    trap 'set +e; [[ -n "${_dumpcap_pid:-}" ]] && kill -KILL "$_dumpcap_pid" 2>/dev/null; p="$(spillway_pid)"; [[ -n "$p" ]] && topo_kill_pid "$p" 3; dumpcap_hugepages_release' EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    dumpcap_hugepages_reserve
    SPW_SERVICE_EXTRA='zonal_affinity = "ZONAL_AFFINITY_STAY_WITHIN_ZONE"'
    topo_up
    dumpcap_config "$SPW_CONFIG"
    local new="$SPW_RUN_DIR/replay-new.toml" d="$SPW_LOG_DIR" b
    SPW_BACKEND_EXTRA[b2]='enabled = false'
    dumpcap_config "$new"
    unset 'SPW_BACKEND_EXTRA[b2]'
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    for b in "${SPW_BACKENDS[@]}"; do wait_health "$b" true; done

    local file="$SPW_RUN_DIR/port.pcapng" err="$d/dumpcap.err"
    rm -f "$file"
    timeout 60 dpdk-dumpcap --file-prefix="$DUMPCAP_PREFIX" -i net_af_packet0 -w "$file" >"$err" 2>&1 &
    _dumpcap_pid=$!
    # up to 20 s for the secondary's EAL and the capture to start
    topo_wait_for 20 grep -q "Packets captured" "$err" || e2e_fail "dpdk-dumpcap did not start capturing: $(tail -5 "$err")"
    local fwd0; fwd0="$(spillwayctl_cmd status --json | "$SPW_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["total"]["forwarded"])')"
    for c in "${SPW_CLIENTS[@]}"; do replay_round "$c"; done >"$d/round1.tsv" 2>"$d/round1.err"
    sleep 1
    local fwd; fwd=$(($(spillwayctl_cmd status --json | "$SPW_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["total"]["forwarded"])') - fwd0))
    kill -INT "$_dumpcap_pid"; wait "$_dumpcap_pid" || e2e_fail "dpdk-dumpcap exited non-zero: $(tail -5 "$err")"
    _dumpcap_pid=
    sed 's/^/    /' "$err"
    local n; n="$(wc -l <"$d/round1.tsv")"
    e2e_check "all $n connections answered during the capture" _eq "$(grep -c $'\t-$' "$d/round1.tsv")" 0

    "$SPILLWAYCTL_BIN" replay --baseline "$SPW_CONFIG" --config "$new" --json "$file" >"$d/replay.json" 2>"$d/replay.err" ||
        e2e_fail "spillwayctl replay failed: $(cat "$d/replay.json" "$d/replay.err")"
    "$SPILLWAYCTL_BIN" replay --baseline "$SPW_CONFIG" --config "$new" "$file" 2>&1 | sed 's/^/    /'
    local got want
    got="$("$SPW_PYTHON" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["flows"], r["frames_outbound"] > 0, sum(b["packets_before"] for b in r["backends"]))
for b in sorted(r["backends"], key=lambda b: b["backend"]):
    print(b["backend"], b["flows_before"])' "$d/replay.json")"
    want="$(printf '%s True %s\n' "$n" "$fwd"; cut -f2 "$d/round1.tsv" | sort | uniq -c | awk '{print $2, $1}')"
    e2e_check "the replay's flows ($n), sent frames skipped, packets ($fwd forwarded by the daemon meanwhile) and each backend's flows are the live ones" _eq "$got" "$want"
    [[ "$got" == "$want" ]] || printf '    replay:\n%s\n    live:\n%s\n' "$got" "$want"
    local live rep
    live="$(awk -F'\t' '$1 ~ /^10\.200\.1\./ && $2 == "b2" {print $1}' "$d/round1.tsv" | sort)"
    rep="$(replay_moved_replay "$d/replay.json")"
    e2e_check "disabling b2 moves exactly the z1 flows b2 served ($(grep -c . <<<"$live" || true))" _eq "$rep" "$live"
    e2e_check "and not none" _gt0 "$(grep -c . <<<"$live" || true)"
    e2e_done
}
