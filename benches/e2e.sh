#!/usr/bin/env bash
# End-to-end forwarding benchmark of Spillway against dpdk-testpmd (docs/benchmarks.md).
#
#   benches/e2e.sh            # pcap mode: net_pcap (infinite_rx) -> net_null, one worker
#   benches/e2e.sh memif      # two processes over net_memif (see docs/benchmarks.md)
#
# Environment: N_FLOWS (default 1000), DURATION seconds per run (default 5), SIZE (64),
# IMIX=1 to add an IMIX run, SYN=1 to add a SYN (new-connection) run, SKIP_BUILD=1,
# SPILLWAY_BIN / SPILLWAYCTL_BIN (default $CARGO_TARGET_DIR or target, release),
# WORK (scratch dir, default a mktemp dir), CORE (forwarding core, default 1).
# Prints one line per run (`run=<name> mpps=<x> ...`) and, last, `ratio_vs_5tswap=X.XX`
# (Spillway established 64-byte Mpps / testpmd 5tswap Mpps). Exit status non-zero on any
# failure (build, a run that forwarded nothing, unparsable counters).
# Needs: cargo, python3, dpdk-testpmd (apt: dpdk, dpdk-dev, libpcap-dev). Runs as root
# (EAL), with --no-huge, so no hugepage setup is needed.
set -euo pipefail

MODE="${1:-pcap}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
N_FLOWS="${N_FLOWS:-1000}"
DURATION="${DURATION:-5}"
SIZE="${SIZE:-64}"
CORE="${CORE:-1}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
SPILLWAY_BIN="${SPILLWAY_BIN:-$TARGET/release/spillway}"
SPILLWAYCTL_BIN="${SPILLWAYCTL_BIN:-$TARGET/release/spillwayctl}"
EAL=(--no-huge --no-shconf -m 512 --no-pci)
TESTPMD="${TESTPMD:-dpdk-testpmd}"

die() { echo "e2e.sh: error: $*" >&2; exit 1; }
for c in python3 "$TESTPMD"; do command -v "$c" >/dev/null || die "$c not found (apt-get install -y python3 dpdk)"; done
[[ $EUID -eq 0 ]] || die "DPDK EAL needs root"

WORK="${WORK:-$(mktemp -d /tmp/spillway-e2e.XXXXXX)}"
mkdir -p "$WORK"
cleanup() {
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

if [[ -z "${SKIP_BUILD:-}" ]]; then
    command -v cargo >/dev/null || die "cargo not found"
    echo "# building release (cargo build --release -p spillway-dataplane -p spillway-ctl)" >&2
    (cd "$ROOT" && cargo build --release -p spillway-dataplane -p spillway-ctl >&2) || die "build failed"
fi
[[ -x "$SPILLWAY_BIN" ]] || die "no $SPILLWAY_BIN"

# ------------------------------------------------------------------ helpers ----
# spillway_config FILE RX_DEVICE TX_DEVICE [extra eal args...]
spillway_config() {
    local file="$1" rx="$2" tx="$3"; shift 3
    local eal='"--no-huge", "--no-shconf", "-m", "512", "--no-pci"' a
    for a in "$@"; do eal+=", \"$a\""; done
    cat > "$file" <<CFG
[dataplane]
eal_args = [$eal]
workers = 1
worker_cores = [$CORE]
socket = "$WORK/ctl.sock"

[conntrack]
capacity_per_worker = 1048576

[[ports]]
name = "in"
device = "$rx"
forward_to = "null"
mac = "02:00:00:00:00:01"

[[ports]]
name = "null"
device = "$tx"
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
CFG
    local b
    for b in 1 2 3 4 5 6 7 8; do
        printf '[[services.backends]]\nname = "b%d"\naddress = "10.10.0.%d"\nmac = "02:00:00:00:10:%02x"\nzone = "z1"\n\n' "$b" "$b" "$b" >> "$file"
    done
    # UDP service on the same VIP:port, for testpmd txonly generators (UDP only)
    printf '[[services]]\nname = "web-udp"\nvip = "10.0.0.100"\nport = 80\nprotocol = "udp"\n\n' >> "$file"
    for b in 1 2 3 4; do
        printf '[[services.backends]]\nname = "u%d"\naddress = "10.10.1.%d"\nmac = "02:00:00:00:11:%02x"\nzone = "z1"\n\n' "$b" "$b" "$b" >> "$file"
    done
}

# status_field JSON_FILE EXPR: a number from a StatusReport JSON (python, no deps).
json_get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$1" "$2"; }

# run_spillway NAME PCAP: one worker, pcap -> null for DURATION s. Mpps from two status
# samples over the control socket (steady state, startup excluded); falls back to the
# final counters / uptime when spillwayctl is missing.
run_spillway() {
    local name="$1" pcap="$2" cfg="$WORK/$1.toml" log="$WORK/$1.log"
    spillway_config "$cfg" "net_pcap0,rx_pcap=$pcap,infinite_rx=1" "net_null0,no-rx=1"
    rm -f "$WORK/ctl.sock"
    "$SPILLWAY_BIN" --config "$cfg" --socket "$WORK/ctl.sock" --duration "$((DURATION + 2))" > "$log" 2>&1 &
    local pid=$! t=0 mpps=""
    while [[ ! -S "$WORK/ctl.sock" ]] && ((t < 100)); do sleep 0.1; t=$((t + 1)); done
    if [[ -x "$SPILLWAYCTL_BIN" && -S "$WORK/ctl.sock" ]]; then
        sleep 1
        "$SPILLWAYCTL_BIN" --socket "$WORK/ctl.sock" status --json > "$WORK/$name.s1.json" || true
        sleep "$DURATION"
        "$SPILLWAYCTL_BIN" --socket "$WORK/ctl.sock" status --json > "$WORK/$name.s2.json" || true
        if [[ -s "$WORK/$name.s1.json" && -s "$WORK/$name.s2.json" ]]; then
            mpps="$(python3 - "$WORK/$name.s1.json" "$WORK/$name.s2.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
dt = b["uptime_sec"] - a["uptime_sec"]
print("%.3f" % ((b["total"]["forwarded"] - a["total"]["forwarded"]) / dt / 1e6))
PY
)"
        fi
    fi
    wait "$pid" || die "spillway ($name) failed; log: $log"
    local final
    final="$(grep '^final_status_json ' "$log" | sed 's/^final_status_json //')" || die "no final_status_json in $log"
    echo "$final" > "$WORK/$name.final.json"
    local fwd rx up newc
    fwd="$(json_get "$WORK/$name.final.json" 'd["total"]["forwarded"]')"
    rx="$(json_get "$WORK/$name.final.json" 'd["total"]["rx"]')"
    newc="$(json_get "$WORK/$name.final.json" 'd["total"]["new_connections"]')"
    up="$(json_get "$WORK/$name.final.json" 'd["uptime_sec"]')"
    ((fwd > 0)) || die "spillway ($name) forwarded nothing; log: $log"
    [[ -n "$mpps" ]] || mpps="$(python3 -c "print('%.3f' % ($fwd / $up / 1e6))")"
    echo "run=spillway_$name mpps=$mpps rx=$rx forwarded=$fwd new_connections=$newc flows=$N_FLOWS"
    eval "MPPS_$name=$mpps"
}

# run_testpmd MODE PCAP: testpmd MODE forwarding on the same vdevs and core; Mpps = mean
# of port 1 Tx-pps over the per-second samples after the first two.
run_testpmd() {
    local fwd="$1" pcap="$2" log="$WORK/testpmd_$1.log"
    timeout -s INT "$((DURATION + 3))" "$TESTPMD" "${EAL[@]}" -l "0,$CORE" \
        --vdev "net_pcap0,rx_pcap=$pcap,infinite_rx=1" --vdev "net_null0,no-rx=1" -- \
        --forward-mode="$fwd" --total-num-mbufs=16384 --stats-period 1 --nb-cores=1 \
        --rxq=1 --txq=1 > "$log" 2>&1 < /dev/null || true
    local mpps
    mpps="$(awk '/NIC statistics for port/ { port = $(NF-1) }
                 /Tx-pps:/ && port == "1" { n++; if (n > 2) { s += $2; k++ } }
                 END { if (k) printf "%.3f", s / k / 1e6 }' "$log")"
    [[ -n "$mpps" && "$mpps" != "0.000" ]] || die "testpmd $fwd: no throughput samples; log: $log"
    echo "run=testpmd_$fwd mpps=$mpps flows=$N_FLOWS"
    eval "MPPS_testpmd_$fwd=$mpps"
}

# ---------------------------------------------------------------- pcap mode ----
pcap_mode() {
    python3 "$HERE/gen_pcap.py" --out "$WORK/est64.pcap" --flows "$N_FLOWS" --size "$SIZE" 2>/dev/null
    run_spillway est64 "$WORK/est64.pcap"
    if [[ -n "${IMIX:-}" ]]; then
        python3 "$HERE/gen_pcap.py" --out "$WORK/imix.pcap" --flows "$N_FLOWS" --imix 2>/dev/null
        run_spillway imix "$WORK/imix.pcap"
    fi
    if [[ -n "${SYN:-}" ]]; then
        python3 "$HERE/gen_pcap.py" --out "$WORK/syn64.pcap" --flows "$N_FLOWS" --flags syn 2>/dev/null
        run_spillway syn64 "$WORK/syn64.pcap"
    fi
    run_testpmd 5tswap "$WORK/est64.pcap"
    run_testpmd io "$WORK/est64.pcap"
    # shellcheck disable=SC2154  # set by eval in run_*
    python3 -c "print('ratio_vs_5tswap=%.2f' % ($MPPS_est64 / $MPPS_testpmd_5tswap))"
}

# --------------------------------------------------------------- memif mode ----
# testpmd txonly (memif server gen.sock) -> spillway (memif client of gen.sock, memif
# client of sink.sock) -> testpmd rxonly (memif server sink.sock). Three processes, each
# with its own --file-prefix; on a 2-core host the generator and the sink share core 0.
memif_mode() {
    # memif registers a multi-process action at probe: it fails under --no-shconf, so
    # these processes keep a shared config, each under its own --file-prefix.
    local EAL=(--no-huge -m 512 --no-pci)
    local gen="$WORK/gen.sock" sink="$WORK/sink.sock" d=$((DURATION + 4))
    rm -f "$gen" "$sink"
    timeout -s INT "$((d + 2))" "$TESTPMD" "${EAL[@]}" --file-prefix spw-gen -l 0-1 --main-lcore 1 \
        --vdev "net_memif0,role=server,socket=$gen,id=0" -- --no-mlockall \
        --forward-mode=txonly --total-num-mbufs=16384 --stats-period 1 --txpkts=64 \
        --tx-ip=10.1.0.1,10.0.0.100 --tx-udp=1024,80 --txonly-multi-flow > "$WORK/memif_gen.log" 2>&1 < /dev/null &
    timeout -s INT "$((d + 2))" "$TESTPMD" "${EAL[@]}" --file-prefix spw-sink -l 0-1 --main-lcore 1 \
        --vdev "net_memif1,role=server,socket=$sink,id=0" -- --no-mlockall \
        --forward-mode=rxonly --total-num-mbufs=16384 --stats-period 1 > "$WORK/memif_sink.log" 2>&1 < /dev/null &
    sleep 2
    spillway_config "$WORK/memif.toml" "net_memif0,role=client,socket=$gen,id=0" "net_memif1,role=client,socket=$sink,id=0" --file-prefix spw-lb
    sed -i 's/"--no-shconf", //' "$WORK/memif.toml"
    "$SPILLWAY_BIN" --config "$WORK/memif.toml" --socket "$WORK/ctl.sock" --duration "$DURATION" > "$WORK/memif_spillway.log" 2>&1 || die "spillway (memif) failed; log: $WORK/memif_spillway.log"
    wait || true
    grep '^final_status_json ' "$WORK/memif_spillway.log" | sed 's/^final_status_json //' > "$WORK/memif.final.json"
    local fwd up tx
    fwd="$(json_get "$WORK/memif.final.json" 'd["total"]["forwarded"]')"
    tx="$(json_get "$WORK/memif.final.json" 'd["total"]["tx"]')"
    up="$(json_get "$WORK/memif.final.json" 'd["uptime_sec"]')"
    ((fwd > 0)) || die "spillway (memif) forwarded nothing; logs in $WORK"
    # mpps = packets decided (forwarded) per second; tx = what the sink's ring accepted
    # (on a 2-core host the sink shares a core with the generator and falls behind).
    echo "run=spillway_memif mpps=$(python3 -c "print('%.3f' % ($fwd / $up / 1e6))") tx_mpps=$(python3 -c "print('%.3f' % ($tx / $up / 1e6))") forwarded=$fwd tx=$tx (testpmd txonly UDP to VIP:80 --txonly-multi-flow -> spillway -> testpmd rxonly)"
}

case "$MODE" in
    pcap) pcap_mode ;;
    memif) memif_mode ;;
    *) die "unknown mode '$MODE' (pcap | memif)" ;;
esac
