#!/usr/bin/env bash
# Runs the repo's Pktgen-DPDK Lua scripts against Spillway on this host, no NIC needed.
#
#   sudo pktgen-scripts/local.sh [established-mix] [syn-flood]   # default: both, in turn
#
# Topology, all inside one network namespace (NS, deleted at exit):
#
#   pktgen port 0 ── pg0 ═veth═ sp0 ── Spillway port "in"  (forward_to = "out")
#   pktgen port 1 ── pg1 ═veth═ sp1 ── Spillway port "out" (one-armed: back out of "out")
#
# Both programs use DPDK net_af_packet on their ends (as scripts/lib/topology.sh does), with
# --no-huge and --no-shconf. Traffic on pktgen port 0 goes in → out → pg1 (pktgen port 1
# counts it); established-mix.lua's SYN share is sent on port 1 and comes back the same
# way. The scripts run unchanged: this wrapper only sets their config table through the
# environment (PG_<KEY>, see the table at the top of each script), runs wait-links.lua
# before it (the af_packet links come up after Pktgen starts) and report.lua after it
# (prints Pktgen's totals and quits Pktgen).
#
# For each script it prints one line
#   pktgen_local script=S sent=N received=N spillway_rx=N forwarded=N counted_drops=N result=ok
# and fails (exit 1, result=FAIL) unless received <= forwarded <= sent and every packet
# Pktgen sent but did not receive is one Spillway counted as dropped (its drop reasons plus
# its ports' imissed/ierrors/oerrors/rx_nombuf). Packets the kernel drops before
# Spillway's af_packet ring are not counted by Spillway, so a rate above what Spillway
# keeps up with here fails the check: that is the point.
#
# Environment: DURATION seconds of traffic per script (default 5), RATE and SYN_RATE (% of
# the 10 Gb/s af_packet link: default 0.02 and 0.02, ~3 kpps per port of 64-byte frames;
# both ports share one Pktgen lcore, and Pktgen 23.03 then paces both at port 0's rate), PKTGEN (pktgen binary; default /opt/pktgen-23.03.0/build/app/pktgen,
# built by ../shared/tools/build-pktgen.sh), SPILLWAY_BIN / SPILLWAYCTL_BIN (default
# $CARGO_TARGET_DIR or target, release), NS (namespace name, default spw-pktgen),
# PKTGEN_CORES (default 0-1: main lcore 0, ports on lcore 1), SPILLWAY_CORE (default 0),
# FRAMES (af_packet ring frames per queue, default 16384),
# WORK (scratch dir, default a mktemp dir, kept for its logs).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
SPILLWAY_BIN="${SPILLWAY_BIN:-$TARGET/release/spillway}"
SPILLWAYCTL_BIN="${SPILLWAYCTL_BIN:-$TARGET/release/spillwayctl}"
PKTGEN="${PKTGEN:-/opt/pktgen-23.03.0/build/app/pktgen}"
NS="${NS:-spw-pktgen}"
DURATION="${DURATION:-5}"
RATE="${RATE:-0.02}"
SYN_RATE="${SYN_RATE:-0.02}"
PKTGEN_CORES="${PKTGEN_CORES:-0-1}"
SPILLWAY_CORE="${SPILLWAY_CORE:-0}"
# af_packet ring frames per queue on every port (DPDK default 512): deep rings ride out the
# milliseconds a busy-polling process here is descheduled
FRAMES="${FRAMES:-16384}"
SCRIPTS=("$@")
((${#SCRIPTS[@]})) || SCRIPTS=(established-mix syn-flood)

die() { echo "local.sh: error: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "needs root (network namespace, DPDK EAL)"
[[ -x "$PKTGEN" ]] || die "no pktgen at $PKTGEN: build it with ../shared/tools/build-pktgen.sh (or set PKTGEN)"
[[ -x "$SPILLWAY_BIN" && -x "$SPILLWAYCTL_BIN" ]] || die "no $SPILLWAY_BIN or $SPILLWAYCTL_BIN: cargo build --release -p spillway-dataplane -p spillway-ctl"
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || die "DURATION=$DURATION: a whole number of seconds, 1 or more"
for s in "${SCRIPTS[@]}"; do
    [[ -f "$HERE/$s.lua" ]] || die "no script $HERE/$s.lua (scripts: established-mix, syn-flood)"
done
# Pktgen.lua (required by every script) lives in the Pktgen tree: build/app/pktgen -> ../..
PKTGEN_DIR="$(cd "$(dirname "$PKTGEN")/../.." && pwd)"
[[ -f "$PKTGEN_DIR/Pktgen.lua" ]] || die "no Pktgen.lua in $PKTGEN_DIR"
WORK="${WORK:-$(mktemp -d /tmp/spillway-pktgen.XXXXXX)}"
mkdir -p "$WORK"

nsx() { ip netns exec "$NS" "$@"; }
SPW_PID=""
cleanup() {
    if [[ -n "$SPW_PID" ]]; then kill "$SPW_PID" 2>/dev/null; wait "$SPW_PID" 2>/dev/null; fi
    ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT

ip netns list | grep -qw "^$NS" && die "namespace $NS exists (another run?); delete it or set NS"
# make_ns: a fresh namespace and veths per script (fresh kernel counters)
make_ns() {
    ip netns del "$NS" 2>/dev/null || true
    ip netns add "$NS"
    # no IPv6 (router solicitations, MLD) on the veths: only Pktgen's frames cross them
    nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    nsx ip link add pg0 type veth peer name sp0
    nsx ip link add sp1 type veth peer name pg1
    local i
    for i in lo pg0 sp0 sp1 pg1; do nsx ip link set "$i" up; done
}

cat > "$WORK/spillway.toml" <<CFG
[dataplane]
eal_args = ["--no-huge", "--no-shconf", "-m", "512", "--no-pci"]
workers = 1
worker_cores = [$SPILLWAY_CORE]
socket = "$WORK/ctl.sock"

[conntrack]
capacity_per_worker = 262144

[[ports]]
name = "in"
device = "net_af_packet0,iface=sp0,framecnt=$FRAMES"
forward_to = "out"
mac = "02:00:00:00:00:01"

[[ports]]
name = "out"
device = "net_af_packet1,iface=sp1,framecnt=$FRAMES"
mac = "02:00:00:00:00:02"

[[zones]]
zone = "z1"
region = "r1"

[[client_zones]]
prefix = "10.1.0.0/16"
zone = "z1"

[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
protocol = "tcp"

[[services.backends]]
name = "b1"
address = "10.10.0.1"
mac = "02:00:00:00:10:01"
zone = "z1"

[[services.backends]]
name = "b2"
address = "10.10.0.2"
mac = "02:00:00:00:10:02"
zone = "z1"
CFG

# run_one SCRIPT: a fresh Spillway, the script + report.lua in Pktgen, then the check.
run_one() {
    local s="$1" log="$WORK/$1"
    make_ns
    rm -f "$WORK/ctl.sock"
    # not through nsx (a function would run in a subshell: $! would not be Spillway's pid)
    ip netns exec "$NS" "$SPILLWAY_BIN" --config "$WORK/spillway.toml" --socket "$WORK/ctl.sock" \
        > "$log.spillway.log" 2>&1 &
    SPW_PID=$!
    local t=0
    while [[ ! -S "$WORK/ctl.sock" ]] && ((t < 300)); do
        kill -0 "$SPW_PID" 2>/dev/null || die "spillway exited at start; log: $log.spillway.log"
        sleep 0.1; t=$((t + 1))
    done
    [[ -S "$WORK/ctl.sock" ]] || die "spillway: no control socket after 30 s; log: $log.spillway.log"
    # Pktgen's config table through the environment (the scripts' PG_<KEY> overrides):
    # only the duration and the rates change; MACs, VIP, port and clients are the defaults,
    # which match the config above.
    (cd "$PKTGEN_DIR" && PG_DURATION="$DURATION" PG_RATE="$RATE" PG_SYN_RATE="$SYN_RATE" \
        timeout -s INT "$((DURATION + 60))" ip netns exec "$NS" "$PKTGEN" -l "$PKTGEN_CORES" \
        --no-huge -m 4096 --no-pci --no-shconf \
        --vdev "net_af_packet0,iface=pg0,framecnt=$FRAMES" --vdev "net_af_packet1,iface=pg1,framecnt=$FRAMES" -- \
        -P -T -m "${PKTGEN_CORES##*-}.[0-1]" \
        -f "$HERE/wait-links.lua" -f "$HERE/$s.lua" -f "$HERE/report.lua" \
        < /dev/null > "$log.pktgen.log" 2>&1) || die "pktgen ($s) failed; log: $log.pktgen.log"
    # Pktgen paints a VT100 screen: strip the escapes to find report.lua's lines
    sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' "$log.pktgen.log" | tr -d '\r' > "$log.pktgen.txt"
    grep -a -E '^t=[0-9]+s port' "$log.pktgen.txt" | sed "s/^/# $s pktgen /" >&2 || true
    local total
    total="$(grep -a -o 'pktgen_total sent=[0-9]* received=[0-9]*' "$log.pktgen.txt" | tail -1)"
    [[ -n "$total" ]] || die "pktgen ($s) printed no totals (did the script fail?); log: $log.pktgen.txt"
    "$SPILLWAYCTL_BIN" --socket "$WORK/ctl.sock" status --json > "$log.status.json" \
        || die "spillwayctl status failed"
    kill "$SPW_PID"; wait "$SPW_PID" || true; SPW_PID=""
    grep -q '^final_status_json ' "$log.spillway.log" || die "spillway did not stop cleanly; log: $log.spillway.log"
    # kernel-side losses (veth backlog, socket rings): not Spillway's, shown to explain a FAIL
    local i k=""
    for i in pg0 sp0 sp1 pg1; do
        k+=" $i=$(nsx ip -s -j link show "$i" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["rx"]["dropped"])')"
    done
    echo "# $s kernel rx_dropped per veth:$k" >&2
    python3 - "$s" "$total" "$log.status.json" <<'PY'
import json, re, sys
script, total, path = sys.argv[1:4]
sent, received = (int(x) for x in re.findall(r"=(\d+)", total))
st = json.load(open(path))
tot = st["total"]
drops = {k: v for k, v in tot["drops"] if v}
port_drops = sum(p[k] for p in st["ports"] for k in ("imissed", "ierrors", "oerrors", "rx_nombuf"))
counted = sum(drops.values()) + port_drops
fwd = tot["forwarded"]
ok = fwd > 0 and received <= fwd <= sent and sent - received <= counted
print(f"pktgen_local script={script} sent={sent} received={received} spillway_rx={tot['rx']} "
      f"forwarded={fwd} new_connections={tot['new_connections']} counted_drops={counted} "
      f"result={'ok' if ok else 'FAIL'}")
if drops or port_drops:
    print(f"#   spillway drops: {drops or '{}'}, port imissed/ierrors/oerrors/rx_nombuf: {port_drops}")
if not ok:
    print(f"#   expected forwarded > 0, received <= forwarded <= sent, sent - received "
          f"({sent - received}) <= counted drops ({counted})")
sys.exit(0 if ok else 1)
PY
}

rc=0
for s in "${SCRIPTS[@]}"; do
    run_one "$s" || rc=1
done
echo "# logs in $WORK" >&2
exit "$rc"
