# shellcheck shell=bash
# Health-driven e2e tests, sourced by scripts/e2e.sh: HTTPS health checks, and backends as
# groups of endpoints whose healthy share drives capacity drain and the failover threshold.

## https_health: HTTPS health checks (self-signed certificate, not verified): b1 b2 serve HTTPS and are healthy, b3 b4 have no HTTPS server and are not; b1 stopped -> unhealthy, traffic avoids it; verify = true (live edit) -> b2 fails on its certificate; back -> healthy
E2E_HTTPS_PORT=8443
_https_pidfile() { printf '%s/https-%s.pid' "$SPW_PID_DIR" "$1"; }
_https_listening() { [[ -n "$(nsx "$1" ss -Hltn "sport = :$E2E_HTTPS_PORT" 2>/dev/null)" ]]; }
https_start() {
    topo_spawn "$1" "$SPW_LOG_DIR/$1.https.log" "$(_https_pidfile "$1")" "$SPW_PYTHON" "$HERE/lib/backend_https.py" \
        --name "$1" --port "$E2E_HTTPS_PORT" --cert "$SPW_LOG_DIR/cert.pem" --key "$SPW_LOG_DIR/key.pem"
    topo_wait_for 5 _https_listening "$1" || { cat "$SPW_LOG_DIR/$1.https.log" >&2; e2e_fail "HTTPS server of $1 did not start"; }
}
https_stop() {
    topo_kill_pid "$(cat "$(_https_pidfile "$1")")" 3
    topo_wait_for 3 bash -c "! ip netns exec '$(ns "$1")' ss -Hltn 'sport = :$E2E_HTTPS_PORT' | grep -q ." || e2e_fail "HTTPS server of $1 still listening"
}
# health_row NAME FIELD: a field of backend NAME in `spillwayctl health show --json`
health_row() {
    spillwayctl_cmd health show --json | "$SPW_PYTHON" -c "
import json, sys
print(next((r['$2'] for r in json.load(sys.stdin) if r['backend'] == '$1'), 'missing'))"
}
e2e_https_health() {
    local check
    check=$'check_interval_sec = 1.0\ntimeout_sec = 0.5\nhealthy_threshold = 1\nunhealthy_threshold = 2'
    SPW_HEALTH_CHECK=0
    SPW_SERVICE_EXTRA=$'\n[services.health_check]\ntype = "https"\nport = '"$E2E_HTTPS_PORT"$'\npath = "/healthz"\nresponse = "ok"\n'"$check"
    mkdir -p "$SPW_LOG_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=spillway-e2e.invalid" \
        -keyout "$SPW_LOG_DIR/key.pem" -out "$SPW_LOG_DIR/cert.pem" >/dev/null 2>&1 || e2e_fail "openssl req failed"
    topo_up
    https_start b1; https_start b2
    write_config "$SPW_CONFIG"
    spillway_start
    spillway_wait_ready "${SPW_READY_TIMEOUT:-30}"
    wait_health b3 false; wait_health b4 false
    wait_health b1 true; wait_health b2 true
    echo "  spillwayctl health show:"; spillwayctl_cmd health show | sed 's/^/    /' || true
    e2e_check "b1 (self-signed HTTPS) healthy" _eq "$(backend_health b1)" true
    e2e_check "b2 (self-signed HTTPS) healthy" _eq "$(backend_health b2)" true
    e2e_check "b3 (no HTTPS server) unhealthy, reason shown: $(health_row b3 last_error)" _contains "$(health_row b3 last_error)" "connect:"
    e2e_check "b1 probed without failures" _eq "$(health_row b1 probes_failed)" 0

    https_stop b1
    local ms; ms="$(spillway_wait_health b1 false 10)" || e2e_fail "b1 not marked unhealthy within 10 s of stopping its HTTPS server"
    echo "  b1 marked unhealthy ${ms} ms after its HTTPS server stopped (limit 1 s x 2 + 1 s)"
    e2e_check "b1 marked unhealthy within 3500 ms: ${ms} ms" _ge 3500 "$ms"
    e2e_check "b1's reason shown: $(health_row b1 last_error)" _contains "$(health_row b1 last_error)" "refused"
    run_clients 40 >/dev/null || true
    e2e_check "traffic only on the one healthy backend b2: $(all_backends)" _eq "$(all_backends)" "b2"
    e2e_check "no request failed ($(req_failed new) failed)" _eq "$(req_failed new)" 0

    https_start b1
    wait_health b1 true
    e2e_check "b1 healthy again after its HTTPS server restarted" _eq "$(backend_health b1)" true

    # verify = true by a live edit: the self-signed certificate no longer passes.
    local hc='{ type = "https", port = '"$E2E_HTTPS_PORT"', path = "/healthz", response = "ok", check_interval_sec = 1.0, timeout_sec = 0.5, healthy_threshold = 1, unhealthy_threshold = 2'
    spillwayctl_cmd service set web "health_check=$hc, verify = true, sni = \"spillway-e2e.invalid\" }" >/dev/null ||
        e2e_fail "service set health_check with verify = true refused"
    wait_health b2 false
    e2e_check "verify = true: b2 fails on its certificate: $(health_row b2 last_error)" _contains "$(health_row b2 last_error)" "certificate"
    spillwayctl_cmd service set web "health_check=$hc }" >/dev/null || e2e_fail "service set health_check back refused"
    wait_health b2 true; wait_health b1 true
    e2e_check "verify off again: b1 b2 healthy" _eq "$(backend_health b1) $(backend_health b2)" "true true"
    e2e_done
}

# ------------------------------------------------------- backend groups ----
# groups_topology SPEC...: backends as groups of endpoints. Each SPEC is
# "GROUP:ZONE:N:OCTET[:EXTRA]": N endpoint namespaces GROUPe1..GROUPeN at 10.200.OCTET.k
# (one HTTP server each, VIP on lo), written as [[services.backends]] GROUP with
# [[services.backends.endpoints]] e1..eN; EXTRA (TOML lines, "\n"-separated) goes in the
# group's table. Call before e2e_setup.
declare -ga E2E_GROUPS=()
groups_topology() {
    local spec g z n o extra k r
    SPW_BACKENDS=(); E2E_GROUPS=("$@"); SPW_WRITE_BACKENDS=_e2e_groups_write_backends
    for spec in "$@"; do
        IFS=: read -r g z n o extra <<<"$spec"
        for ((k = 1; k <= n; k++)); do
            r="${g}e$k"; SPW_BACKENDS+=("$r")
            SPW_ADDR[$r]="10.200.$o.$k"; SPW_MAC[$r]="$(printf '02:00:00:00:%02x:%02x' "$o" "$k")"; SPW_ZONE[$r]="$z"
        done
    done
}
_e2e_groups_write_backends() {
    local spec g z n o extra k
    for spec in "${E2E_GROUPS[@]}"; do
        IFS=: read -r g z n o extra <<<"$spec"
        printf '\n[[services.backends]]\nname = "%s"\nzone = "%s"\n' "$g" "$z"
        [[ -z "$extra" ]] || printf '%b\n' "$extra"
        for ((k = 1; k <= n; k++)); do
            printf '\n[[services.backends.endpoints]]\nname = "e%d"\naddress = "%s"\nmac = "%s"\n' "$k" "${SPW_ADDR[${g}e$k]}" "${SPW_MAC[${g}e$k]}"
        done
    done
}
# group_field GROUP FIELD: a field of GROUP's row in `spillwayctl status --json`
group_field() {
    spillwayctl_cmd status --json 2>/dev/null | "$SPW_PYTHON" -c "
import json, sys
print(next((str(b['$2']).lower() for b in json.load(sys.stdin)['backends'] if b['backend'] == '$1'), 'missing'))" 2>/dev/null || echo missing
}
# wait_group GROUP FIELD VALUE [TIMEOUT_S]: until the field has that value
wait_group() {
    local deadline=$((SECONDS + ${4:-15}))
    while ((SECONDS < deadline)); do [[ "$(group_field "$1" "$2")" == "$3" ]] && return 0; sleep 0.2; done
    e2e_fail "$1.$2 did not become $3 within ${4:-15} s (is $(group_field "$1" "$2"))"
}
# served_by_prefix P: answered requests whose backend starts with P (e.g. g1e)
served_by_prefix() { awk -F'\t' -v p="$1" '$5 == "200" && index($6, p) == 1' "$SPW_REQUESTS" | wc -l; }

## capacity_drain: groups g1 (5 endpoints), g2 (4), g3 (1, priority 2) with auto capacity drain: 4 of g1's endpoints stopped (20 % < 25 %) drain g1, its last healthy endpoint gets no new connections and g2 takes them; 2 restarted (60 % >= 35 %), g1 is undrained 60 s after it reached 35 %, not before
e2e_capacity_drain() {
    groups_topology g1:z1:5:21 g2:z2:4:22 'g3:z2:1:23:priority = 2'
    SPW_SERVICE_EXTRA='auto_capacity_drain = true'
    e2e_setup
    wait_group g1 healthy_endpoints 5; wait_group g2 healthy_endpoints 4
    run_clients 60 >/dev/null || true
    e2e_check "all healthy: g1 serves ($(served_by_prefix g1e) of 60)" _gt0 "$(served_by_prefix g1e)"
    local e; for e in 1 2 3 4; do backend_stop "g1e$e"; done
    wait_group g1 healthy_endpoints 1
    wait_group g1 drained true 5
    echo "  spillwayctl status (g1 drained):"; spillwayctl_cmd status | sed -n '/^BACKENDS/,$p' | sed 's/^/    /' || true
    : >"$SPW_REQUESTS"
    run_clients 80 >/dev/null || true
    e2e_check "no request failed while g1 is drained ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "g1's last healthy endpoint g1e5 got no new connections ($(req_backend_count g1e5))" _eq "$(req_backend_count g1e5)" 0
    e2e_check "g2 took them all ($(served_by_prefix g2e) of 80)" _eq "$(served_by_prefix g2e)" 80
    backend_start g1e1; backend_start g1e2
    wait_group g1 healthy_endpoints 3 10
    local t0=$SECONDS
    echo "  g1 at 3/5 = 60 % (>= 35 %) from t0; undrain expected at t0 + 60 s"
    sleep 30
    e2e_check "30 s after reaching 35 %: still drained" _eq "$(group_field g1 drained)" true
    : >"$SPW_REQUESTS"
    run_clients 40 >/dev/null || true
    e2e_check "30 s after: g1 still gets no new connections ($(served_by_prefix g1e))" _eq "$(served_by_prefix g1e)" 0
    while [[ "$(group_field g1 drained)" == true ]] && ((SECONDS - t0 < 80)); do sleep 0.5; done
    local dt=$((SECONDS - t0))
    echo "  g1 undrained ${dt} s after reaching 35 %"
    e2e_check "undrained 60 s after reaching 35 % (measured ${dt} s, allowed 58..66)" bash -c "(( $dt >= 58 && $dt <= 66 ))"
    : >"$SPW_REQUESTS"
    run_clients 80 >/dev/null || true
    e2e_check "after undrain g1 serves again ($(served_by_prefix g1e) of 80)" _gt0 "$(served_by_prefix g1e)"
    e2e_check "stopped endpoints g1e3/g1e4 get nothing" _eq "$(( $(req_backend_count g1e3) + $(req_backend_count g1e4) ))" 0
    e2e_done
}

## failover_threshold: a primary group p (4 endpoints, failover_health_threshold 70) and a failover group f: 1 endpoint stopped (75 %) keeps traffic on p's 3 healthy endpoints; a 2nd (50 %) sends new connections to f; both restarted, traffic goes back
e2e_failover_threshold() {
    groups_topology p:z1:4:31 'f:z2:2:32:failover = true'
    SPW_SERVICE_EXTRA='failover_health_threshold = 70'
    e2e_setup
    wait_group p healthy_endpoints 4; wait_group f healthy_endpoints 2
    backend_stop pe1
    wait_group p healthy_endpoints 3
    run_clients 60 >/dev/null || true
    e2e_check "75 % >= 70 %: all on p ($(served_by_prefix pe) of 60), none on f ($(served_by_prefix fe))" _eq "$(served_by_prefix pe)" 60
    e2e_check "the stopped endpoint pe1 gets nothing" _eq "$(req_backend_count pe1)" 0
    e2e_check "p's 3 healthy endpoints share it: $(all_backends)" _eq "$(all_backends)" "pe2 pe3 pe4"
    backend_stop pe2
    wait_group p healthy_endpoints 2
    : >"$SPW_REQUESTS"
    run_clients 60 >/dev/null || true
    echo "  spillwayctl status:"; spillwayctl_cmd status | sed -n '/^BACKENDS/,$p' | sed 's/^/    /' || true
    e2e_check "50 % < 70 %: new connections go to f ($(served_by_prefix fe) of 60)" _eq "$(served_by_prefix fe)" 60
    e2e_check "no request failed ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_start pe1; backend_start pe2
    wait_group p healthy_endpoints 4
    : >"$SPW_REQUESTS"
    run_clients 60 >/dev/null || true
    e2e_check "restarted: traffic back on p ($(served_by_prefix pe) of 60)" _eq "$(served_by_prefix pe)" 60
    e2e_done
}
