# shellcheck shell=bash
# Assertions and record queries shared by the e2e tests (scripts/e2e/*.sh), sourced by
# scripts/e2e.sh after scripts/lib/topology.sh: e2e_check / e2e_fail / e2e_done /
# e2e_setup, queries over the request records ($SPW_REQUESTS), and small comparisons
# for e2e_check.

# ---------------------------------------------------------------- helpers ----
_e2e_errors=()
# e2e_check CMD...: records a failure (with the command) if CMD fails; carries on.
e2e_check() {
    local msg="$1"; shift
    if "$@"; then printf '  ok    %s\n' "$msg"; else printf '  FAIL: %s\n' "$msg"; _e2e_errors+=("$msg"); fi
}
# e2e_fail MSG: stops the test now.
e2e_fail() { printf '  FAIL: %s\n' "$*"; exit 1; }
# e2e_skip REASON: ends a test that cannot run on this machine at all; scripts/e2e.sh
# counts it as skipped (exit status E2E_SKIP_RC), not failed, and prints REASON.
E2E_SKIP_RC=77
e2e_skip() { printf '  SKIP: %s\n' "$*"; printf '%s\n' "$*" >"$SPW_LOG_DIR/skipped"; exit "$E2E_SKIP_RC"; }
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
_lt() { (($1 < $2)); }
_contains() { [[ "$1" == *"$2"* ]]; }
# backends (sorted, space-separated) that answered requests of client $1 / of everyone
client_backends() { awk -F'\t' -v c="$1" '$2 == c && $5 == "200" {print $6}' "$SPW_REQUESTS" | sort -u | tr '\n' ' ' | sed 's/ $//'; }
all_backends() { awk -F'\t' '$5 == "200" {print $6}' "$SPW_REQUESTS" | sort -u | tr '\n' ' ' | sed 's/ $//'; }
# status_field KEY: a top-level field of `spillwayctl status --json`
status_field() { spillwayctl_cmd status --json | "$SPW_PYTHON" -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
# wait_health NAME true|false [TIMEOUT_S]: waits until the daemon sees that state
wait_health() {
    spillway_wait_health "$1" "$2" "${3:-15}" >/dev/null || e2e_fail "$1 did not become healthy=$2 within ${3:-15} s"
}
