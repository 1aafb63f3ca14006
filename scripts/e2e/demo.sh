# shellcheck shell=bash
# Demo script e2e test, sourced by scripts/e2e.sh: scripts/demo.sh (docs/demo.md) takes its
# topology lock before it installs or builds anything. No topology is brought up: a stand-in
# `cargo` on PATH records whether the lock is held while it "builds", then fails the build,
# which ends the demo before the topology.

## demo_lock: scripts/demo.sh holds its lock (SPW_LOCK_FILE) while it builds: a stand-in cargo sees it held, and the demo stops at the failed build with the lock released
e2e_demo_lock() {
    local dir rc=0
    dir="$(mktemp -d /tmp/spw-e2e-demo-lock.XXXXXX)"
    # the stand-in: "held" when the lock cannot be taken now (the demo holds it)
    cat >"$dir/cargo" <<'CARGO'
#!/usr/bin/env bash
if flock -n "$SPW_LOCK_FILE" true; then echo free >"$SPW_E2E_LOCK_SEEN"; else echo held >"$SPW_E2E_LOCK_SEEN"; fi
exit 1
CARGO
    chmod +x "$dir/cargo"
    # its own topology id, run dir and lock: nothing of the e2e topology (or a real demo) is touched
    PATH="$dir:$PATH" SPW_TOPO=demolock SPW_RUN_DIR="$dir/run" SPW_LOCK_FILE="$dir/demo.lock" SPW_E2E_LOCK_SEEN="$dir/seen" \
        timeout 60 "$SPW_REPO_ROOT/scripts/demo.sh" --no-install >"$dir/out" 2>&1 || rc=$?
    e2e_check "the demo ran the stand-in cargo" test -f "$dir/seen"
    e2e_check "the lock was held during the build (seen: $(cat "$dir/seen" 2>/dev/null))" grep -qx held "$dir/seen"
    e2e_check "the demo stopped at the failed build (exit $rc)" grep -q "cargo build failed" "$dir/out"
    e2e_check "the lock is free once the demo has stopped" flock -n "$dir/demo.lock" true
    if ((${#_e2e_errors[@]})); then sed 's/^/    demo: /' "$dir/out"; fi
    rm -rf "$dir"
    e2e_done
}
