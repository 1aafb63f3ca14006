#!/usr/bin/env bash
# shellcheck disable=SC2119  # functions with optional arguments called without them
# End-to-end tests of Spillway on the demo topology (docs/demo.md), real TCP traffic.
#
#   sudo scripts/e2e.sh basic          # one test
#   sudo scripts/e2e.sh basic config   # several
#   sudo scripts/e2e.sh all            # every test, in the order of `list`
#   scripts/e2e.sh list                # names
#
# Needs built binaries (no build here): SPILLWAY_BIN / SPILLWAYCTL_BIN, default
# target/release/{spillway,spillwayctl}. Topology id "e2e" (namespaces spw-e2e-*,
# socket /run/spillway-e2e/ctl.sock); logs of test T in /run/spillway-e2e/logs/T/.
# Exit status: 0 if every test passed, 1 otherwise (each failure printed as FAIL: ...).
#
# The tests live by topic in scripts/e2e/<topic>.sh (core, policy, connections, health,
# config, bgp, neighbors, fleet, capture, ...); this file sources them and runs them.
# Adding a test: write a function `e2e_<name>` in the file of its topic, or in a new
# scripts/e2e/<topic>.sh (sourced automatically). It runs in a subshell, set -e; the
# topology is NOT up when it starts and is torn down after it. Use e2e_setup to get
# topology + config + daemon, the library's run_clients / run_keepalive_clients /
# backend_stop / backend_start / spillwayctl_cmd, and e2e_check / e2e_fail to assert
# (scripts/lib/e2e.sh); end with e2e_done. A one-line description goes in a comment
# "## <name>: text". A test that cannot run on this machine at all (e.g. `pci` without
# QEMU) calls e2e_skip REASON: it is counted as skipped, not failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SPW_TOPO="${SPW_TOPO:-e2e}"
# shellcheck source-path=SCRIPTDIR source=lib/topology.sh
source "$HERE/lib/topology.sh"
# shellcheck source-path=SCRIPTDIR source=lib/fleet.sh
source "$HERE/lib/fleet.sh"   # ecmp / vip-drain / prometheus / fleet_* topology
# shellcheck source-path=SCRIPTDIR source=lib/ipv6.sh
source "$HERE/lib/ipv6.sh"    # IPv6 addressing of test `ipv6`
# shellcheck source-path=SCRIPTDIR source=lib/e2e.sh
source "$HERE/lib/e2e.sh"     # e2e_check / e2e_fail / e2e_done / e2e_setup, record queries
# Tests by topic (scripts/e2e/<topic>.sh), in the order of `all`: these first, in this
# order, then every other file of scripts/e2e/ in name order (a new topic needs no edit).
E2E_TOPIC_FIRST=(core policy connections health config bgp neighbors)
E2E_TOPIC_FILES=()
for _t in "${E2E_TOPIC_FIRST[@]}"; do E2E_TOPIC_FILES+=("$HERE/e2e/$_t.sh"); done
for _f in "$HERE"/e2e/*.sh; do
    [[ " ${E2E_TOPIC_FIRST[*]} " == *" $(basename "$_f" .sh) "* ]] || E2E_TOPIC_FILES+=("$_f")
done
for _f in "${E2E_TOPIC_FILES[@]}"; do
    # shellcheck disable=SC1090
    source "$_f"
done
E2E_LOG_ROOT="$SPW_RUN_DIR/logs"
_e2e_child=

# ------------------------------------------------------------------ runner ---
_e2e_list() { declare -F | awk '{print $3}' | grep -E '^e2e_[a-z0-9_]+$' |
    grep -vE '^e2e_(check|fail|done|setup|skip)$' | sed 's/^e2e_//'; }
_e2e_describe() { sed -n "s/^## $1: //p" "${E2E_TOPIC_FILES[@]}"; }
# tests in the order of the topic files, each in file order
_e2e_all_in_order() { grep -ohE '^e2e_[a-z0-9_]+\(\)' "${E2E_TOPIC_FILES[@]}" | sed 's/^e2e_//; s/()$//' |
    while read -r t; do _e2e_list | grep -qx "$t" && echo "$t"; done; }

_e2e_run_one() {
    local t="$1" rc start
    start=$SECONDS
    echo "=== e2e $t: $(_e2e_describe "$t")"
    # The test runs in a background subshell so that INT/TERM reach this shell's traps at
    # once (a foreground subshell would delay them until the test ends); the EXIT trap
    # stops the test (_e2e_child) and removes the topology.
    (
        set -euo pipefail
        trap - EXIT INT TERM
        topo_set_log_dir "$E2E_LOG_ROOT/$t"
        rm -rf "$SPW_LOG_DIR"; mkdir -p "$SPW_LOG_DIR"
        "e2e_$t"
    ) &
    _e2e_child=$!
    rc=0
    wait "$_e2e_child" || rc=$?
    _e2e_child=
    topo_down || true
    if ((rc == 0)); then echo "--- PASS $t ($((SECONDS - start)) s)"
    elif ((rc == E2E_SKIP_RC)); then echo "--- SKIP $t ($((SECONDS - start)) s): $(cat "$E2E_LOG_ROOT/$t/skipped" 2>/dev/null)"
    else echo "--- FAIL $t ($((SECONDS - start)) s; logs: $E2E_LOG_ROOT/$t)"; fi
    return "$rc"
}

main() {
    (($#)) || { sed -n '3,23p' "$0"; exit 2; }
    if [[ "$1" == list ]]; then
        for t in $(_e2e_all_in_order); do printf '%-12s %s\n' "$t" "$(_e2e_describe "$t")"; done; exit 0
    fi
    local tests=() t failed=() skipped=() rc
    for t in "$@"; do
        t="${t//-/_}"   # health-failover == health_failover
        if [[ "$t" == all ]]; then mapfile -t -O "${#tests[@]}" tests < <(_e2e_all_in_order); continue; fi
        _e2e_list | grep -qx "$t" || { echo "unknown test '$t'; known: all $(_e2e_list | tr '\n' ' ')" >&2; exit 2; }
        tests+=("$t")
    done
    topo_require_root
    topo_lock
    topo_before_down() { if [[ -n "${_e2e_child:-}" ]]; then topo_kill_pid "$_e2e_child" 2; fi; }
    topo_trap
    for t in "${tests[@]}"; do
        rc=0; _e2e_run_one "$t" || rc=$?
        if ((rc == E2E_SKIP_RC)); then skipped+=("$t"); elif ((rc)); then failed+=("$t"); fi
    done
    echo
    local skip_note="" passed=()
    ((${#skipped[@]} == 0)) || skip_note="; ${#skipped[@]} skipped: ${skipped[*]}"
    if ((${#failed[@]})); then
        echo "e2e: ${#failed[@]} of ${#tests[@]} failed: ${failed[*]}$skip_note"; exit 1
    fi
    for t in "${tests[@]}"; do [[ " ${skipped[*]} " == *" $t "* ]] || passed+=("$t"); done
    echo "e2e: all ${#passed[@]} passed: ${passed[*]:-(none)}$skip_note"
}

main "$@"
