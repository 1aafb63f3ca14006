# shellcheck shell=bash
# Routing-policy e2e tests, sourced by scripts/e2e.sh: zonal affinity (stay within the zone,
# spill across zones) and the failover policy of spec/backend-selection.md.

## zonal_stay: ZONAL_AFFINITY_STAY_WITHIN_ZONE: z1 clients reach only z1 backends, z2 clients only z2 backends
e2e_zonal_stay() {
    SPW_SERVICE_EXTRA='zonal_affinity = "ZONAL_AFFINITY_STAY_WITHIN_ZONE"'
    e2e_setup
    run_clients 200 >/dev/null || true
    clients_summary "$SPW_REQUESTS"
    e2e_check "all requests answered ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    e2e_check "c1 (z1) reached only z1 backends" _eq "$(client_backends c1)" "b1 b2"
    e2e_check "c2 (z2) reached only z2 backends" _eq "$(client_backends c2)" "b3 b4"
    e2e_done
}

## zonal_spill: SPILL_CROSS_ZONE ratio 0.8, three z1 backends: two stopped -> z1 clients spill to all healthy backends; restarted -> back to z1
e2e_zonal_spill() {
    SPW_ZONE[b3]=z1
    SPW_SERVICE_EXTRA=$'zonal_affinity = "ZONAL_AFFINITY_SPILL_CROSS_ZONE"\nspillover_ratio = 0.8'
    e2e_setup
    run_clients 150 c1 >/dev/null || true
    e2e_check "all healthy: c1 stays in z1 (b1 b2 b3)" _eq "$(client_backends c1)" "b1 b2 b3"
    backend_stop b1; backend_stop b2
    wait_health b1 false; wait_health b2 false
    : >"$SPW_REQUESTS"
    run_clients 150 c1 >/dev/null || true
    e2e_check "two of three z1 down (1/3 < 0.8): c1 spills to every healthy backend (b3 b4)" _eq "$(client_backends c1)" "b3 b4"
    e2e_check "no request failed while spilled ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_start b1; backend_start b2
    wait_health b1 true; wait_health b2 true
    : >"$SPW_REQUESTS"
    run_clients 150 c1 >/dev/null || true
    e2e_check "restarted: c1 back in z1 (b1 b2 b3)" _eq "$(client_backends c1)" "b1 b2 b3"
    e2e_done
}

## failover_policy: b3 b4 failover backends, failover_ratio 0.5: primaries serve; h = 0.5 stays on primaries; both down -> failover; back -> failback
e2e_failover_policy() {
    SPW_BACKEND_EXTRA[b3]='failover = true'
    SPW_BACKEND_EXTRA[b4]='failover = true'
    SPW_SERVICE_EXTRA=$'failover_ratio = 0.5\nconnection_drain_timeout_sec = 5'
    e2e_setup
    run_clients 100 >/dev/null || true
    e2e_check "primaries serve: only b1 b2" _eq "$(all_backends)" "b1 b2"
    backend_stop b1; wait_health b1 false
    : >"$SPW_REQUESTS"
    run_clients 60 >/dev/null || true
    e2e_check "h = 1/2 is not < 0.5: stay on the healthy primary b2" _eq "$(all_backends)" "b2"
    backend_stop b2; wait_health b2 false
    : >"$SPW_REQUESTS"
    run_clients 100 >/dev/null || true
    e2e_check "no primary healthy: failover backends b3 b4 serve" _eq "$(all_backends)" "b3 b4"
    e2e_check "no request failed after failover ($(req_failed new) failed)" _eq "$(req_failed new)" 0
    backend_start b1; backend_start b2
    wait_health b1 true; wait_health b2 true
    : >"$SPW_REQUESTS"
    run_clients 100 >/dev/null || true
    e2e_check "failback: primaries b1 b2 serve again" _eq "$(all_backends)" "b1 b2"
    e2e_done
}
