# shellcheck shell=bash
# IPv6 on the e2e topology (test `ipv6` of scripts/e2e.sh): after topo_up, turns
# IPv6 on where it is needed and adds an IPv6 service next to the IPv4 one.
#
#   fd00:200::/64 on the same bridge (multicast snooping off, so Neighbor Solicitations
#   for the VIP reach lb0 whatever MLD says)
#   lb0      no kernel IPv6 (Spillway answers Neighbor Discovery for the VIP and fd00:200::2)
#   mgmt0    fd00:200::3 (health checks over IPv6 from the host stack)
#   c1, c2   fd00:200::1:10, fd00:200::2:10
#   b1..b4   fd00:200::11:1, ::11:2, ::12:3, ::12:4; VIP fd00:200::100/128 on lo (nodad)
#   DAD off everywhere (accept_dad=0, nodad), so addresses are usable at once.
#
# Needs topology.sh sourced first.

SPW_VIP6=fd00:200::100
SPW_PORT_ADDR6=fd00:200::2
SPW_MGMT_ADDR6=fd00:200::3
declare -gA SPW_ADDR6=([c1]=fd00:200::1:10 [c2]=fd00:200::2:10
    [b1]=fd00:200::11:1 [b2]=fd00:200::11:2 [b3]=fd00:200::12:3 [b4]=fd00:200::12:4)

# _ipv6_on ROLE IFACE...: enables IPv6 with DAD off on lo and the interfaces of ROLE.
_ipv6_on() {
    local r="$1" i; shift
    nssysctl "$r" net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
        net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.lo.disable_ipv6=0
    for i in "$@"; do nssysctl "$r" "net.ipv6.conf.$i.accept_dad=0" "net.ipv6.conf.$i.disable_ipv6=0"; done
}

# ipv6_topology_up: IPv6 addresses and the VIP on the backends' lo; restarts the backends'
# HTTP servers on :: (dual stack) so they answer on both families.
ipv6_topology_up() {
    local r
    nsx sw ip link set br0 type bridge mcast_snooping 0
    _ipv6_on lb mgmt0
    nssysctl lb net.ipv6.conf.lb0.disable_ipv6=1
    nsx lb ip -6 addr add "$SPW_MGMT_ADDR6/64" dev mgmt0 nodad
    for r in "${SPW_CLIENTS[@]}"; do
        _ipv6_on "$r" eth0
        nsx "$r" ip -6 addr add "${SPW_ADDR6[$r]}/64" dev eth0 nodad
    done
    for r in "${SPW_BACKENDS[@]}"; do
        _ipv6_on "$r" eth0
        nsx "$r" ip -6 addr add "${SPW_ADDR6[$r]}/64" dev eth0 nodad
        # L2 DSR: the VIP on lo, never answered in Neighbor Discovery (Linux answers only
        # for addresses of the receiving interface)
        nsx "$r" ip -6 addr add "$SPW_VIP6/128" dev lo nodad
        backend_stop "$r"
        SPW_BACKEND_BIND=:: backend_start "$r"
    done
    topo_log "IPv6 up: VIP [$SPW_VIP6]:$SPW_VIP_PORT, clients ${SPW_ADDR6[c1]} ${SPW_ADDR6[c2]}"
}

# ipv6_write_config FILE: write_config plus lb0's IPv6 address, IPv6 client zones and the
# service "web6" on [VIP6]:80 (L2 DSR, HTTP health checks over IPv6) with backends
# b1v6..b4v6 (the same namespaces and MACs as b1..b4).
ipv6_write_config() {
    local f="$1" r tmp
    write_config "$f"
    tmp="$f.v6.$$"
    # address6 goes into [[ports]] (after its `address` line)
    sed "s|^address = \"$SPW_PORT_ADDR\"\$|&\naddress6 = \"$SPW_PORT_ADDR6\"|" "$f" >"$tmp"
    cat >>"$tmp" <<TOML

# IPv6: a second service on the IPv6 VIP; clients by IPv6 prefix.
[[client_zones]]
prefix = "fd00:200::1:0/112"
zone = "z1"

[[client_zones]]
prefix = "fd00:200::2:0/112"
zone = "z2"

[[services]]
name = "web6"
vip = "$SPW_VIP6"
port = $SPW_VIP_PORT
protocol = "tcp"
forwarding_mode = "L2_DSR"

[services.health_check]
type = "http"
path = "/healthz"
expected_status = 200
check_interval_sec = 1.0
timeout_sec = 0.5
healthy_threshold = 1
unhealthy_threshold = 2
TOML
    for r in "${SPW_BACKENDS[@]}"; do
        printf '\n[[services.backends]]\nname = "%sv6"\naddress = "%s"\nmac = "%s"\nzone = "%s"\n' \
            "$r" "${SPW_ADDR6[$r]}" "${SPW_MAC[$r]}" "${SPW_ZONE[$r]}" >>"$tmp"
    done
    mv -f "$tmp" "$f"
}

# ipv6_served NAME: requests backend NAME logged on the IPv6 VIP (path /).
ipv6_served() {
    local f; f="$(backend_log "$1")"
    [[ -f "$f" ]] || { echo 0; return; }
    awk -F'\t' -v v="$SPW_VIP6" '$5 == v && $7 == "/" {n++} END {print n + 0}' "$f"
}

# status_counter NAME: a summed worker counter of `spillwayctl status --json`.
status_counter() {
    spillwayctl_cmd status --json | "$SPW_PYTHON" -c "import json,sys; print(json.load(sys.stdin)['total']['$1'])"
}
