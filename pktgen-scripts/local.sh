#!/usr/bin/env bash
# Runs the repo's Pktgen-DPDK Lua scripts against Spillway on this host, no NIC needed, in
# two forms, and checks Pktgen's counts against Spillway's.
#
#   sudo pktgen-scripts/local.sh                      # both forms, their default scripts
#   sudo pktgen-scripts/local.sh syn-flood            # one script, in every form of FORMS
#   sudo pktgen-scripts/local.sh memif:imix af_packet:syn-flood
#   sudo FORMS=memif pktgen-scripts/local.sh          # only the memif form (the load test)
#
# Topology of both forms (Spillway forwards each port's traffic out of the other one):
#
#   pktgen port 0 ── link 0 ── Spillway port "in"  (forward_to = "out")
#   pktgen port 1 ── link 1 ── Spillway port "out" (forward_to = "in")
#
# Traffic sent on Pktgen port 0 comes back on port 1; established-mix's SYN share, sent on
# port 1, comes back on port 0. So each port reads what the other sends: Pktgen's one port
# lcore reads a burst per port per loop and sends one, and keeps up.
#
# memif form, the load test (scripts established-mix, syn-flood, imix): the links are
# net_memif. Pktgen is the memif server of both and runs on one CPU (MEMIF_PKTGEN_CPU: its
# main and port lcores both there); Spillway is the client of both, its one worker on the
# other CPU (MEMIF_SPILLWAY_CORE): the core layout and memif roles of benches/e2e.sh's
# flowgen runs. memif needs the EAL multi-process channel, so each process has its own
# --file-prefix instead of --no-shconf. Pktgen 23.03 aborts on a port without an MTU
# operation, as DPDK 22.11's net_memif is: it runs with memif-mtu-shim.c preloaded (built
# here with cc). Its statistics thread, which spins on the main lcore's CPU, gets nice 19.
# Pktgen starts first (a memif server must listen before its client starts), Spillway once
# Pktgen runs wait-links.lua; after report.lua prints the totals, Spillway stops and then
# Pktgen quits (DPDK 22.11's memif can crash a side still polling while its peer goes).
# memif loses nothing silently (Pktgen waits for ring space; Spillway counts what a full
# TX ring refuses as tx_full), so the check is exact: Pktgen's sent = Spillway's rx,
# Pktgen's received = Spillway's tx, sent - received = Spillway's counted drops, all of
# them tx_full (Pktgen read its ring late: on a busy host) and at most MEMIF_MAX_LOSS of
# sent; and at least MEMIF_MIN_PPS frames a second came back. Rates come from Spillway's
# status, sampled each second, over the steady seconds of traffic (Pktgen's own per-second
# figures come from a thread that lags on a busy host). The line also gives idle_polls
# (share of Spillway's polls that got nothing: high = Pktgen is the limit), mean_burst
# (frames per poll that got any), the share of a CPU each side's polling thread got (and
# Spillway's rx Mpps per CPU-second of each: the figure the host's other load moves least),
# and unsent_pps (MEMIF_MPPS asked - Spillway's rx: > 0 = Pktgen did not send what it was
# asked, by its own CPU or Spillway's back-pressure).
#
# af_packet form (scripts established-mix, syn-flood): the links are veth pairs (pg0-sp0,
# pg1-sp1) in a network namespace (NS, deleted at exit), net_af_packet on both ends (as
# scripts/lib/topology.sh does), --no-huge and --no-shconf, at low rates. Frames the kernel
# drops before Spillway's af_packet ring are counted by nobody, so a rate above what this
# path keeps up with fails the check: that is the point. The check: received <= forwarded
# <= sent and every frame Pktgen sent but did not receive is one Spillway counted as
# dropped (its drop reasons plus its ports' imissed/ierrors/oerrors/rx_nombuf).
#
# The scripts run unchanged: this wrapper only sets their config table through the
# environment (PG_<KEY>, see the table at the top of each script: duration and rates), runs
# wait-links.lua before and report.lua after each. Output, per second of each script and
# port (Pktgen's figures):
#   pktgen_local_rate form=F script=S t=Ns port=P tx_pps=N rx_pps=N
# and per script one line ending in result=ok or result=FAIL (reasons on `#` lines after):
#   pktgen_local form=F script=S sent=N received=N ... result=ok
# Exit status 1 when any script failed.
#
# Pktgen: PKTGEN (default $PKTGEN_DEST/build/app/pktgen, PKTGEN_DEST default
# /opt/pktgen-23.03.0). When it is missing and PKTGEN is not set, it is built first by
# build-pktgen.sh from the shared/ folder beside the repository (../shared/tools; a clean
# clone with a copy of shared/ next to it works; PKTGEN_BUILD overrides the script's
# path): about a minute, installing its build packages with apt when missing.
# Spillway: SPILLWAY_BIN / SPILLWAYCTL_BIN (default $CARGO_TARGET_DIR or target, release),
# built with cargo when missing and not set.
# Environment: FORMS (default "af_packet memif"), DURATION seconds of traffic per script
# (default 5; the memif check needs 3 or more), WORK (scratch dir, default a mktemp dir,
# kept for its logs).
#   memif form: MEMIF_MPPS (frames per second asked of Pktgen in all, in millions, or max:
#   Pktgen's rate 100 %; default 2), MEMIF_MIN_PPS (default 1000000), MEMIF_MAX_LOSS
#   (default 0.01), MEMIF_PKTGEN_CPU (default 0), MEMIF_SPILLWAY_CORE (default 1),
#   MEMIF_RSIZE (log2 of the memif ring size Spillway, the client, sets on both links:
#   default 14, the most memif allows; deep rings carry each side over the other's
#   scheduling gaps on a shared host).
#   af_packet form: RATE and SYN_RATE (% of the 10 Gb/s af_packet link: default 0.02 and
#   0.02, ~3 kpps per port of 64-byte frames; both ports share one Pktgen lcore, and Pktgen
#   23.03 then paces both at port 0's rate), NS (namespace, default spw-pktgen),
#   PKTGEN_CORES (default 0-1: main lcore 0, ports on lcore 1), SPILLWAY_CORE (default 0),
#   FRAMES (af_packet ring frames per queue, default 16384).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
SPILLWAY_BIN_SET="${SPILLWAY_BIN:+1}${SPILLWAYCTL_BIN:+1}"
SPILLWAY_BIN="${SPILLWAY_BIN:-$TARGET/release/spillway}"
SPILLWAYCTL_BIN="${SPILLWAYCTL_BIN:-$TARGET/release/spillwayctl}"
PKTGEN_DEST="${PKTGEN_DEST:-/opt/pktgen-23.03.0}"
PKTGEN_SET="${PKTGEN:+1}"
PKTGEN="${PKTGEN:-$PKTGEN_DEST/build/app/pktgen}"
FORMS="${FORMS:-af_packet memif}"
DURATION="${DURATION:-5}"
RATE="${RATE:-0.02}"
SYN_RATE="${SYN_RATE:-0.02}"
NS="${NS:-spw-pktgen}"
PKTGEN_CORES="${PKTGEN_CORES:-0-1}"
SPILLWAY_CORE="${SPILLWAY_CORE:-0}"
# af_packet ring frames per queue on every port (DPDK default 512): deep rings ride out the
# milliseconds a busy-polling process here is descheduled
FRAMES="${FRAMES:-16384}"
MEMIF_MPPS="${MEMIF_MPPS:-2}"
MEMIF_MIN_PPS="${MEMIF_MIN_PPS:-1000000}"
MEMIF_PKTGEN_CPU="${MEMIF_PKTGEN_CPU:-0}"
MEMIF_SPILLWAY_CORE="${MEMIF_SPILLWAY_CORE:-1}"
MEMIF_RSIZE="${MEMIF_RSIZE:-14}"
MEMIF_MAX_LOSS="${MEMIF_MAX_LOSS:-0.01}"
declare -A DEFAULT_SCRIPTS=([af_packet]="established-mix syn-flood" [memif]="established-mix syn-flood imix")

die() { echo "local.sh: error: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "needs root (network namespace, DPDK EAL, building Pktgen)"
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || die "DURATION=$DURATION: a whole number of seconds, 1 or more"
[[ "$MEMIF_MPPS" == max || "$MEMIF_MPPS" =~ ^[0-9]*\.?[0-9]+$ ]] || die "MEMIF_MPPS=$MEMIF_MPPS: Mpps asked of Pktgen (a number) or max"
[[ "$MEMIF_MIN_PPS" =~ ^[0-9]+$ ]] || die "MEMIF_MIN_PPS=$MEMIF_MIN_PPS: a whole number of packets per second"
[[ "$MEMIF_MAX_LOSS" =~ ^(0|1|0?\.[0-9]+)$ ]] || die "MEMIF_MAX_LOSS=$MEMIF_MAX_LOSS: a fraction from 0 to 1"
[[ "$MEMIF_RSIZE" =~ ^[0-9]+$ ]] && ((MEMIF_RSIZE >= 1 && MEMIF_RSIZE <= 14)) || die "MEMIF_RSIZE=$MEMIF_RSIZE: 1 to 14 (log2 of the ring size; DPDK 22.11 memif allows up to 14)"
for f in $FORMS; do
    [[ -n "${DEFAULT_SCRIPTS[$f]+x}" ]] || die "FORMS: unknown form '$f' (af_packet, memif)"
done

# RUNS: "form:script" pairs, from the arguments (SCRIPT: in every form of FORMS;
# FORM:SCRIPT: that form only) or every form's default scripts.
RUNS=()
if (($#)); then
    for a in "$@"; do
        if [[ "$a" == *:* ]]; then
            [[ -n "${DEFAULT_SCRIPTS[${a%%:*}]+x}" ]] || die "$a: unknown form '${a%%:*}' (af_packet, memif)"
            RUNS+=("$a")
        else
            for f in $FORMS; do RUNS+=("$f:$a"); done
        fi
    done
else
    for f in $FORMS; do
        for s in ${DEFAULT_SCRIPTS[$f]}; do RUNS+=("$f:$s"); done
    done
fi
for r in "${RUNS[@]}"; do
    [[ -f "$HERE/${r#*:}.lua" ]] || die "no script $HERE/${r#*:}.lua (scripts: established-mix, syn-flood, imix)"
done

# build_pktgen: Pktgen from shared/tools/build-pktgen.sh beside the repository (CI: a clean
# clone with a copy of shared/ next to it; here ../shared of the worktree).
build_pktgen() {
    local c script=""
    for c in "${PKTGEN_BUILD:-}" "$ROOT/../shared/tools/build-pktgen.sh" \
        "$(cd "$HERE/.." && pwd -P)/../shared/tools/build-pktgen.sh"; do
        if [[ -n "$c" && -f "$c" ]]; then script="$c"; break; fi
    done
    [[ -n "$script" ]] || die "no pktgen at $PKTGEN and no build script: expected shared/tools/build-pktgen.sh beside the repository ($ROOT/../shared) or PKTGEN_BUILD"
    echo "# building Pktgen: bash $script $PKTGEN_DEST" >&2
    local t0=$SECONDS out
    out="$(bash "$script" "$PKTGEN_DEST")" || die "Pktgen build failed ($script)"
    PKTGEN="$(tail -n 1 <<<"$out")"
    echo "# built $PKTGEN in $((SECONDS - t0)) s" >&2
}
if [[ ! -x "$PKTGEN" ]]; then
    [[ -z "$PKTGEN_SET" ]] || die "PKTGEN=$PKTGEN: not an executable"
    build_pktgen
    [[ -x "$PKTGEN" ]] || die "the Pktgen build printed $PKTGEN, which is not an executable"
fi
if [[ ! -x "$SPILLWAY_BIN" || ! -x "$SPILLWAYCTL_BIN" ]]; then
    [[ -z "$SPILLWAY_BIN_SET" ]] || die "no $SPILLWAY_BIN or $SPILLWAYCTL_BIN"
    command -v cargo >/dev/null || die "no $SPILLWAY_BIN and no cargo: cargo build --release -p spillway-dataplane -p spillway-ctl"
    echo "# building Spillway: cargo build --release -p spillway-dataplane -p spillway-ctl" >&2
    (cd "$ROOT" && cargo build --release -p spillway-dataplane -p spillway-ctl >&2) || die "Spillway build failed"
fi
# Pktgen.lua (required by every script) lives in the Pktgen tree: build/app/pktgen -> ../..
PKTGEN_DIR="$(cd "$(dirname "$PKTGEN")/../.." && pwd)"
[[ -f "$PKTGEN_DIR/Pktgen.lua" ]] || die "no Pktgen.lua in $PKTGEN_DIR"
WORK="${WORK:-$(mktemp -d /tmp/spillway-pktgen.XXXXXX)}"
mkdir -p "$WORK"
if [[ " ${RUNS[*]}" == *" memif:"* ]]; then
    cc -shared -fPIC -O2 -o "$WORK/memif-mtu-shim.so" "$HERE/memif-mtu-shim.c" -ldl \
        || die "cannot build $HERE/memif-mtu-shim.c (cc)"
fi

nsx() { ip netns exec "$NS" "$@"; }
SPW_PID="" PG_PID="" SAMPLER_PID="" MADE_NS=""
cleanup() {
    local p
    for p in "$SAMPLER_PID" "$SPW_PID" "$PG_PID"; do
        if [[ -n "$p" ]]; then kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; fi
    done
    if [[ -n "$MADE_NS" ]]; then ip netns del "$NS" 2>/dev/null || true; fi
}
trap cleanup EXIT

# make_ns: a fresh namespace and veths per af_packet script (fresh kernel counters)
make_ns() {
    ip netns del "$NS" 2>/dev/null || true
    ip netns add "$NS"
    MADE_NS=1
    # no IPv6 (router solicitations, MLD) on the veths: only Pktgen's frames cross them
    nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    nsx ip link add pg0 type veth peer name sp0
    nsx ip link add sp1 type veth peer name pg1
    local i
    for i in lo pg0 sp0 sp1 pg1; do nsx ip link set "$i" up; done
}

# spillway_config FILE EAL_ARGS CORE IN_DEVICE OUT_DEVICE
spillway_config() {
    cat > "$1" <<CFG
[dataplane]
eal_args = [$2]
workers = 1
worker_cores = [$3]
socket = "$WORK/ctl.sock"

[conntrack]
capacity_per_worker = 262144

[[ports]]
name = "in"
device = "$4"
forward_to = "out"
mac = "02:00:00:00:00:01"

[[ports]]
name = "out"
device = "$5"
forward_to = "in"
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
}

# start_spillway CONFIG LOG [PREFIX...]: Spillway in the background (SPW_PID) and its
# control socket up.
start_spillway() {
    local cfg="$1" log="$2"; shift 2
    rm -f "$WORK/ctl.sock"
    "$@" "$SPILLWAY_BIN" --config "$cfg" --socket "$WORK/ctl.sock" > "$log" 2>&1 &
    SPW_PID=$!
    local t=0
    while [[ ! -S "$WORK/ctl.sock" ]] && ((t < 300)); do
        kill -0 "$SPW_PID" 2>/dev/null || die "spillway exited at start; log: $log"
        sleep 0.1; t=$((t + 1))
    done
    [[ -S "$WORK/ctl.sock" ]] || die "spillway: no control socket after 30 s; log: $log"
}

# stop_spillway LOG: status into LOG.status.json, then Spillway stopped cleanly.
stop_spillway() {
    "$SPILLWAYCTL_BIN" --socket "$WORK/ctl.sock" status --json > "$1.status.json" \
        || die "spillwayctl status failed"
    kill "$SPW_PID"; wait "$SPW_PID" || true; SPW_PID=""
    grep -q '^final_status_json ' "$1.spillway.log" || die "spillway did not stop cleanly; log: $1.spillway.log"
}

# calm_pktgen_timer PARENT: Pktgen 23.03's statistics/display thread (pktgen.c
# _timer_thread, pinned to the main lcore's CPU) spins on rte_pause between its
# once-a-second tasks; on a CPU it shares with the port lcore it takes half of it. It gets
# nice 19 here (it still runs, in short slices, for its once-a-second work). It is the one
# thread named "pktgen" besides the main thread; PARENT is the pid that started Pktgen.
calm_pktgen_timer() {
    local pid t
    pid="$(pgrep -P "$1" -x pktgen | head -n 1)" || return 0
    for t in /proc/"$pid"/task/*; do
        [[ "${t##*/}" != "$pid" && "$(cat "$t/comm" 2>/dev/null)" == pktgen ]] || continue
        renice -n 19 -p "${t##*/}" > /dev/null || true
    done
}

# thread_ticks PID NAME: CPU time (utime + stime, clock ticks) of PID's thread named NAME.
thread_ticks() {
    local t
    for t in /proc/"$1"/task/*; do
        [[ "$(cat "$t/comm" 2>/dev/null)" == "$2" ]] || continue
        awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$t/stat" 2>/dev/null && return 0
    done
    echo 0
}

# sample LOG PKTGEN_PID I: Spillway's status into LOG.sample.I.json and the CPU time of
# Pktgen's port lcore and Spillway's worker into LOG.sample.I.cpu ("TICKS TICKS").
sample() {
    "$SPILLWAYCTL_BIN" --socket "$WORK/ctl.sock" status --json > "$1.sample.$3.json" 2>/dev/null || return 1
    echo "$(thread_ticks "$2" rte-worker-1) $(thread_ticks "$SPW_PID" worker-0)" > "$1.sample.$3.cpu"
}

# memif_rate SCRIPT: Pktgen's rate (% of the link, per sending port) that asks MEMIF_MPPS
# frames per second in all of SCRIPT. Pktgen 23.03 paces a port at rate % of its link speed
# (100 Gb/s for net_memif) over its frames' wire size (frame + FCS + preamble, SFD and gap:
# 84 bytes for 64-byte frames; the IMIX sequence's mean is 373 bytes), and established-mix
# sends on two ports, each paced at port 0's rate (both on one lcore).
memif_rate() {
    [[ "$MEMIF_MPPS" == max ]] && { echo 100; return; }
    local wire=84 ports=1
    [[ "$1" == imix ]] && wire=373
    [[ "$1" == established-mix ]] && ports=2
    python3 -c "print('%.6f' % ($MEMIF_MPPS * 1e6 / $ports * $wire * 8 / 100e9 * 100))"
}

# pktgen_env FORM SCRIPT: the scripts' PG_<KEY> settings of a run (duration and rates only:
# MACs, VIP, port and clients are the scripts' defaults, which match the config above).
pktgen_env() {
    local env=(PG_DURATION="$DURATION") r
    if [[ "$1" == memif ]]; then
        r="$(memif_rate "$2")"
        env+=(PG_RATE="$r" PG_SYN_RATE="$r")
    else
        env+=(PG_RATE="$RATE" PG_SYN_RATE="$SYN_RATE")
    fi
    echo "${env[@]}"
}

# pktgen_text LOG: Pktgen paints a VT100 screen: the escapes stripped, into LOG.pktgen.txt;
# prints the per-second rate lines.
pktgen_text() {
    local form="$1" s="$2" log="$3"
    sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' "$log.pktgen.log" | tr -d '\r' > "$log.pktgen.txt"
    grep -a -E '^t=[0-9]+s port' "$log.pktgen.txt" \
        | sed -E "s/^t=([0-9]+s) port ([0-9]+) /pktgen_local_rate form=$form script=$s t=\1 port=\2 /" || true
}

pktgen_total() { grep -a -o 'pktgen_total sent=[0-9]* received=[0-9]*' "$1.pktgen.txt" | tail -1; }

# run_af_packet SCRIPT: a fresh namespace and Spillway, the script + report.lua in Pktgen.
run_af_packet() {
    local s="$1" log="$WORK/af_packet-$1"
    ip netns list | grep -qw "^$NS" && [[ -z "$MADE_NS" ]] && die "namespace $NS exists (another run?); delete it or set NS"
    make_ns
    spillway_config "$WORK/af_packet.toml" '"--no-huge", "--no-shconf", "-m", "512", "--no-pci"' "$SPILLWAY_CORE" \
        "net_af_packet0,iface=sp0,framecnt=$FRAMES" "net_af_packet1,iface=sp1,framecnt=$FRAMES"
    start_spillway "$WORK/af_packet.toml" "$log.spillway.log" ip netns exec "$NS"
    # shellcheck disable=SC2046  # pktgen_env: NAME=VALUE words
    (cd "$PKTGEN_DIR" && env $(pktgen_env af_packet "$s") \
        timeout -s INT "$((DURATION + 60))" ip netns exec "$NS" "$PKTGEN" -l "$PKTGEN_CORES" \
        --no-huge -m 4096 --no-pci --no-shconf \
        --vdev "net_af_packet0,iface=pg0,framecnt=$FRAMES" --vdev "net_af_packet1,iface=pg1,framecnt=$FRAMES" -- \
        -P -T -m "${PKTGEN_CORES##*-}.[0-1]" \
        -f "$HERE/wait-links.lua" -f "$HERE/$s.lua" -f "$HERE/report.lua" \
        < /dev/null > "$log.pktgen.log" 2>&1) || die "pktgen ($s) failed; log: $log.pktgen.log"
    pktgen_text af_packet "$s" "$log"
    local total
    total="$(pktgen_total "$log")"
    [[ -n "$total" ]] || die "pktgen ($s) printed no totals (did the script fail?); log: $log.pktgen.txt"
    stop_spillway "$log"
    # kernel-side losses (veth backlog, socket rings): not Spillway's, shown to explain a FAIL
    local i k=""
    for i in pg0 sp0 sp1 pg1; do
        k+=" $i=$(nsx ip -s -j link show "$i" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["rx"]["dropped"])')"
    done
    echo "# af_packet/$s kernel rx_dropped per veth:$k" >&2
    check af_packet "$s" "$total" "$log"
}

# run_memif SCRIPT: Pktgen (memif servers) first, then Spillway (clients) once Pktgen runs
# wait-links.lua; Spillway's status sampled each second; Spillway stops before Pktgen quits.
run_memif() {
    local s="$1" log="$WORK/memif-$1" p="spw-pg$$"
    local quit="$log.quit"
    rm -f "$quit" "$log".sample.*.json
    : > "$log.pktgen.log"
    # shellcheck disable=SC2046  # pktgen_env: NAME=VALUE words
    (cd "$PKTGEN_DIR" && exec env $(pktgen_env memif "$s") PG_LINK_WAIT_MS=60000 PG_QUIT_FILE="$quit" \
        LD_PRELOAD="$WORK/memif-mtu-shim.so" \
        timeout -s INT "$((DURATION + 180))" "$PKTGEN" --lcores "0@$MEMIF_PKTGEN_CPU,1@$MEMIF_PKTGEN_CPU" \
        --no-huge -m 4096 --no-pci --file-prefix "$p-gen" \
        --vdev "net_memif0,role=server,socket=$WORK/pg0.sock,id=0" \
        --vdev "net_memif1,role=server,socket=$WORK/pg1.sock,id=0" -- \
        -P -T -m "1.[0-1]" -f "$HERE/wait-links.lua" -f "$HERE/$s.lua" -f "$HERE/report.lua" \
        < /dev/null > "$log.pktgen.log" 2>&1) &
    PG_PID=$!
    local t=0
    until grep -aq "wait-links.lua" "$log.pktgen.log"; do
        kill -0 "$PG_PID" 2>/dev/null || die "pktgen ($s) exited at start; log: $log.pktgen.log"
        ((t < 1200)) || die "pktgen ($s) did not start in 120 s; log: $log.pktgen.log"
        sleep 0.1; t=$((t + 1))
    done
    calm_pktgen_timer "$PG_PID"
    spillway_config "$WORK/memif.toml" "\"--no-huge\", \"--file-prefix\", \"$p-lb\", \"-m\", \"512\", \"--no-pci\"" \
        "$MEMIF_SPILLWAY_CORE" "net_memif0,role=client,socket=$WORK/pg0.sock,id=0,rsize=$MEMIF_RSIZE" \
        "net_memif1,role=client,socket=$WORK/pg1.sock,id=0,rsize=$MEMIF_RSIZE"
    start_spillway "$WORK/memif.toml" "$log.spillway.log"
    local pg
    pg="$(pgrep -P "$PG_PID" -x pktgen | head -n 1)"
    (i=0; while sample "$log" "$pg" "$i"; do i=$((i + 1)); sleep 1; done) &
    SAMPLER_PID=$!
    t=0
    until grep -aq "pktgen_total" "$log.pktgen.log"; do
        kill -0 "$PG_PID" 2>/dev/null || { pktgen_text memif "$s" "$log" > /dev/null; die "pktgen ($s) exited before its totals; log: $log.pktgen.txt"; }
        ((t < (DURATION + 120) * 10)) || die "pktgen ($s) printed no totals in $((DURATION + 120)) s; log: $log.pktgen.log"
        sleep 0.1; t=$((t + 1))
    done
    kill "$SAMPLER_PID" 2>/dev/null; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=""
    stop_spillway "$log"
    touch "$quit"
    local rc=0
    wait "$PG_PID" || rc=$?
    PG_PID=""
    pktgen_text memif "$s" "$log"
    ((rc == 0)) || echo "# memif/$s: pktgen exit status $rc after its totals; log: $log.pktgen.txt" >&2
    check memif "$s" "$(pktgen_total "$log")" "$log"
}

# check FORM SCRIPT TOTAL LOG: the result line (see the header).
check() {
    python3 - "$@" "$MEMIF_MIN_PPS" "$MEMIF_MAX_LOSS" "$MEMIF_MPPS" <<'PY'
import glob, json, os, re, sys
form, script, total, log, min_pps, max_loss, mpps = sys.argv[1:8]
min_pps, max_loss = int(min_pps), float(max_loss)
sent, received = (int(x) for x in re.findall(r"=(\d+)", total))
st = json.load(open(log + ".status.json"))
tot = st["total"]
drops = {k: v for k, v in tot["drops"] if v}
port_drops = sum(p[k] for p in st["ports"] for k in ("imissed", "ierrors", "oerrors", "rx_nombuf"))
counted = sum(drops.values()) + port_drops
fwd = tot["forwarded"]
line = (f"pktgen_local form={form} script={script} sent={sent} received={received} "
        f"spillway_rx={tot['rx']} forwarded={fwd} new_connections={tot['new_connections']} "
        f"counted_drops={counted}")
why = []
if form == "memif":
    # Spillway's status and both sides' CPU time, sampled each second. The steady window:
    # the intervals in which Spillway received anything, less the first and the last
    # (traffic started or stopped inside them).
    samples = []
    for f in glob.glob(log + ".sample.*.json"):
        try:
            d = json.load(open(f))
            d["cpu"] = [int(x) for x in open(f[:-5] + ".cpu").read().split()]
            samples.append(d)
        except (ValueError, OSError):
            pass
    samples.sort(key=lambda d: d["uptime_sec"])
    active = [(a, b) for a, b in zip(samples, samples[1:]) if b["total"]["rx"] > a["total"]["rx"]]
    steady = active[1:-1]
    back_pps = 0.0
    if steady:
        first, last = steady[0][0], steady[-1][1]
        a, b = first["total"], last["total"]
        dt = last["uptime_sec"] - first["uptime_sec"]
        polls = b["polls"] - a["polls"]
        idle = b["idle_polls"] - a["idle_polls"]
        busy = polls - idle
        # the share of a CPU each side's busy-polling thread got (1.00 = a whole core; other
        # load on the host takes the rest)
        hz = os.sysconf("SC_CLK_TCK")
        pg_cpu, sp_cpu = ((last["cpu"][i] - first["cpu"][i]) / hz / dt for i in (0, 1))
        rx_pps = (b["rx"] - a["rx"]) / dt
        back_pps = (b["tx"] - a["tx"]) / dt
        line += (f" steady_s={dt:.1f} spillway_rx_pps={rx_pps:.0f} back_pps={back_pps:.0f}"
                 f" idle_polls={idle / max(polls, 1):.3f} mean_burst={(b['rx'] - a['rx']) / max(busy, 1):.1f}"
                 f" pktgen_cpu={pg_cpu:.2f} spillway_cpu={sp_cpu:.2f}"
                 f" mpps_per_pktgen_cpu={rx_pps / 1e6 / max(pg_cpu, 1e-9):.2f}"
                 f" mpps_per_spillway_cpu={rx_pps / 1e6 / max(sp_cpu, 1e-9):.2f}")
        # what Pktgen was asked (MEMIF_MPPS) and what it did not send of it
        if mpps != "max":
            target = float(mpps) * 1e6
            line += f" asked_pps={target:.0f} unsent_pps={max(target - rx_pps, 0):.0f}"
    loss = (sent - received) / max(sent, 1)
    line += f" loss={loss:.5f}"
    # memif loses nothing silently (Pktgen waits for ring space; Spillway counts what its
    # full TX ring refuses): every frame is accounted for exactly
    ok = fwd > 0 and sent == tot["rx"] and received == tot["tx"] and sent - received == counted
    if not ok:
        why.append(f"expected sent = spillway rx, received = spillway tx, sent - received "
                   f"({sent - received}) = counted drops ({counted})")
    other = {k: v for k, v in drops.items() if k != "tx_full"}
    if other or port_drops:
        ok = False
        why.append(f"drops other than tx_full: {other}, port drops {port_drops}")
    if loss > max_loss:
        ok = False
        why.append(f"lost {loss:.4%} of the frames (tx_full: Pktgen read its ring too late), over MEMIF_MAX_LOSS={max_loss}")
    if not steady:
        ok = False
        why.append("no steady second of traffic in Spillway's samples (DURATION 3 or more)")
    elif back_pps < min_pps:
        ok = False
        why.append(f"{back_pps:.0f} frames per second back to Pktgen, below MEMIF_MIN_PPS={min_pps}")
else:
    ok = fwd > 0 and received <= fwd <= sent and sent - received <= counted
    if not ok:
        why.append(f"expected forwarded > 0, received <= forwarded <= sent, sent - received "
                   f"({sent - received}) <= counted drops ({counted})")
print(f"{line} result={'ok' if ok else 'FAIL'}")
if drops or port_drops:
    print(f"#   spillway drops: {drops or '{}'}, port imissed/ierrors/oerrors/rx_nombuf: {port_drops}")
for w in why:
    print(f"#   {w}")
sys.exit(0 if ok else 1)
PY
}

rc=0
for r in "${RUNS[@]}"; do
    case "${r%%:*}" in
        af_packet) run_af_packet "${r#*:}" || rc=1 ;;
        memif) run_memif "${r#*:}" || rc=1 ;;
    esac
done
echo "# logs in $WORK" >&2
exit "$rc"
