# shellcheck shell=bash
# Backends as groups of endpoints in the demo topology (docs/config.md "Backend
# groups"). Sourced by topology.sh. With SPW_ZONE_GROUPS=1, write_config writes one backend
# group per zone, "web-z1" and "web-z2", whose endpoints are that zone's backend namespaces
# (b1 b2 | b3 b4), named like them, so `spillway_wait_health b1 ...` and the request
# records keep their names. SPW_BACKEND_EXTRA does not apply to groups.
zone_groups_write_backends() {
    local z b
    for z in $(for b in "${SPW_BACKENDS[@]}"; do echo "${SPW_ZONE[$b]}"; done | sort -u); do
        printf '\n# Zone %s: one backend group (like an instance group), one endpoint per VM.\n' "$z"
        printf '[[services.backends]]\nname = "web-%s"\nzone = "%s"\n' "$z" "$z"
        for b in "${SPW_BACKENDS[@]}"; do
            [[ "${SPW_ZONE[$b]}" == "$z" ]] || continue
            printf '\n[[services.backends.endpoints]]\nname = "%s"\naddress = "%s"\nmac = "%s"\n' "$b" "${SPW_ADDR[$b]}" "${SPW_MAC[$b]}"
        done
    done
}
