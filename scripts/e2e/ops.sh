# shellcheck shell=bash
# Operator views e2e tests (docs/ctl.md "top"), sourced by scripts/e2e.sh: `spillwayctl
# top` in a real terminal (tmux, read back with capture-pane) against a daemon carrying
# real HTTP traffic from the demo topology's clients.

# A tmux server of this test only (its own socket name), so nothing else is touched.
_top_tmux() { tmux -L spw-e2e-top "$@"; }
# top_pane: the visible text of the top window.
top_pane() { _top_tmux capture-pane -p -t top 2>/dev/null; }
# top_wait_for REGEX TIMEOUT_S: until the pane shows a line matching REGEX.
top_wait_for() {
    local deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        top_pane | grep -Eq "$1" && return 0
        sleep 0.5
    done
    return 1
}
# _top_busy: a web backend row with a non-zero new-connections rate (CONNS/S is column 4).
_top_busy() { top_pane | awk '$1 == "web" && $2 ~ /^b[1-4]$/ && $3 == "healthy" && $4 != "0" { n++ } END { exit !(n > 0) }'; }

## top: spillwayctl top in tmux while clients make requests: backend rows with non-zero conns/s, per-worker busy share, sort key cycles with s, filter with /, q quits; top --once --json agrees
e2e_top() {
    e2e_setup
    local clients_pid
    E2E_TOP_REQUESTS="${E2E_TOP_REQUESTS:-200}"
    # Clients keep making requests until the last rate check is done (the flag file goes),
    # at most 60 s: on a fast machine one batch of 600 ended before `top --once` sampled
    # (every rate 0).
    local busy_flag="$SPW_RUN_DIR/top.clients"
    : >"$busy_flag"
    # (and no longer than the test itself: a failed check ends the test's shell early)
    local test_pid=$BASHPID
    ( end=$((SECONDS + 60)); while [[ -e $busy_flag ]] && ((SECONDS < end)) && kill -0 "$test_pid" 2>/dev/null; do run_clients "$E2E_TOP_REQUESTS"; done ) >/dev/null 2>&1 &
    clients_pid=$!
    _e2e_child="$clients_pid"
    _top_tmux kill-server 2>/dev/null || true
    _top_tmux new-session -d -s top -x 140 -y 40 "$SPILLWAYCTL_BIN --socket $SPW_SOCKET top"
    e2e_check "top shows its header within 5 s" top_wait_for '^spillway top: rates over' 5
    local deadline=$((SECONDS + 15)) busy=1
    until _top_busy; do
        ((SECONDS < deadline)) || { busy=0; break; }
        sleep 0.5
    done
    echo "  top (under tmux):"; top_pane | sed 's/^/    /'
    e2e_check "a web backend row shows new connections/s > 0 while clients run" _eq "$busy" 1
    e2e_check "backend rows are sorted by conns/s" top_wait_for 'sorted by conns/s' 1
    e2e_check "a worker row shows its busy-poll share" top_wait_for '^0 +[0-9.]+%' 3
    e2e_check "the port row shows imissed/s" top_wait_for '^(PORT|p[0-9a-z_]+) ' 1
    _top_tmux send-keys -t top s
    e2e_check "s: sorted by pkts/s" top_wait_for 'sorted by pkts/s' 3
    _top_tmux send-keys -t top / b 2 Enter
    e2e_check "/b2: filter shown" top_wait_for 'filter "b2"' 3
    e2e_check "/b2: no other backend row" bash -c "! tmux -L spw-e2e-top capture-pane -p -t top | grep -Eq '^web +b[134] '"
    local once
    once="$(spillwayctl_cmd top --once --json --interval 1)" || e2e_fail "top --once --json failed"
    e2e_check "top --once --json: new connections/s > 0 over web's backends" "$SPW_PYTHON" -c "
import json, sys
s = json.loads(sys.argv[1])
assert sum(b['new_conns_per_sec'] for b in s['backends'] if b['service'] == 'web') > 0, s
assert s['workers'] and all(0 <= w['busy_share'] <= 1 for w in s['workers']), s
" "$once"
    rm -f "$busy_flag"
    local nott
    nott="$(spillwayctl_cmd top </dev/null 2>&1 | cat)" || true
    e2e_check "top without a terminal (a pipe) refuses with advice, no panic: $nott" bash -c '[[ "$1" == *"needs a terminal"* && "$1" != *panicked* ]]' _ "$nott"
    _top_tmux send-keys -t top q
    local gone=0 i
    for i in $(seq 1 20); do _top_tmux has-session -t top 2>/dev/null || { gone=1; break; }; sleep 0.2; done
    e2e_check "q quits top (the tmux window closed)" _eq "$gone" 1
    _top_tmux kill-server 2>/dev/null || true
    wait "$clients_pid" || true
    _e2e_child=
    e2e_done
}
