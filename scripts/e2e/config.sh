# shellcheck shell=bash
# Config e2e test, sourced by scripts/e2e.sh: the demo config of the docs is what the test
# topology writes.

## config: examples/demo.toml is what write_config produces for the demo topology (no daemon needed)
e2e_config() {
    local out; out="$(mktemp)"
    # shellcheck disable=SC1091
    (unset SPW_RUN_DIR SPW_LOG_DIR SPW_SOCKET SPW_CONFIG SPW_HEALTH_CHECK
     SPW_TOPO=demo; source "$HERE/lib/topology.sh"; SPW_ZONE_GROUPS=1 SPW_SERVICE_EXTRA="$SPW_DEMO_SERVICE_EXTRA"; write_config "$out")
    e2e_check "examples/demo.toml == write_config output" diff -u "$SPW_REPO_ROOT/examples/demo.toml" "$out"
    rm -f "$out"
    e2e_done
}
