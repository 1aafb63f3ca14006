#!/usr/bin/env bash
# End-to-end forwarding benchmark of Spillway against dpdk-testpmd (docs/benchmarks.md).
#
#   benches/e2e.sh            # pcap mode: net_pcap (infinite_rx) -> net_null, one worker
#   benches/e2e.sh memif      # two processes over net_memif (see docs/benchmarks.md)
#   benches/e2e.sh flows      # only the many-flows case (flowgen, N_FLOWS then FLOWS_1M)
#   benches/e2e.sh sync       # fleet flow sync off vs on (the sync case below)
#   benches/e2e.sh capture    # drop capture compiled in, not running (the capture case)
#   benches/e2e.sh quic       # QUIC-LB short-header routing vs plain UDP (the QUIC case)
#
# Environment: N_FLOWS (default 1000), DURATION seconds per run (default 5), SIZE (64),
# IMIX=1 to add an IMIX run, SYN=1 to add a SYN (new-connection) run, SKIP_BUILD=1,
# SPILLWAY_BIN / SPILLWAYCTL_BIN (default $CARGO_TARGET_DIR or target, release),
# WORK (scratch dir, default a mktemp dir), CORE (forwarding core, default 1).
# Many-flows case (pcap mode, on by default; FLOWS_1M=0 skips it): FLOWS_1M (default
# 1000000) flows, one packet each per round. With GEN_1M=flowgen (the default) the
# generator is `benches/examples/flowgen` on core GEN_CORE (default 0): it builds each
# frame from a template in the mbuf (the flows of gen_pcap.py), so its work is the same
# for 1 K and 1 M flows, and sends them over net_memif to Spillway (memif client, worker on
# CORE, out to net_null). Runs `spillway_est64_memif` (N_FLOWS flows) and
# `spillway_est64_1m` (FLOWS_1M flows) on that same path, one after the other, each
# followed by flowgen's own line (`flowgen ... sent= unsent= mpps=`, counted while the
# memif link was up), then `testpmd_io_memif` (testpmd io on Spillway's core and ports,
# FLOWS_1M flows: the path's own ceiling), and prints `ratio_1m_vs_1k=X.XX`
# (spillway_est64_1m Mpps / spillway_est64_memif Mpps: same generator, ports and config,
# `conntrack.capacity_per_worker` >= 2 x FLOWS_1M in both (2,097,152 for 1 M: 64 MiB);
# only the number of flows differs). Spillway is the limit, not the generator, when
# flowgen's `unsent` > 0 (it offered more than Spillway took) and the run's `mean_burst`
# (packets per poll that received any) is ~32; `idle_polls` is the share of polls that
# received nothing (an empty poll costs ~0.1 us against ~2 us for a full burst). flowgen
# is paused (SIGUSR1) after Spillway's last sample and stopped after Spillway left: DPDK
# 22.11's memif can crash the side still sending or polling while its peer disconnects.
# GEN_1M=pcap runs the older form of this case instead: the capture replayed by net_pcap
# on Spillway's own core (`run=spillway_est64_1m` against the main N_FLOWS run); net_pcap
# keeps one mbuf per packet of the capture, so the generator itself slows down at 1 M
# packets (cache misses on 1 M stored mbufs: testpmd io drops from ~88 to ~20 Mpps;
# docs/benchmarks.md "conntrack at 1 M flows"). That form raises `dataplane.mbufs_per_port` to MBUFS_1M
# (default 1048575) and the EAL memory to MEM_1M_MB (default 10240 with --no-huge), and
# refuses to start when MemAvailable is below MEM_1M_MB + 1 GiB; HUGE_1M=1 runs it on
# 2 MiB hugepages instead: it reserves HUGE_1M_PAGES (default 3500 = 7 GiB) in /sys and
# mounts hugetlbfs on /dev/hugepages when nothing is mounted there (both given back
# after), with EAL memory MEM_1M_HUGE_MB (default 6144).
# IPv6 case (pcap mode, on by default; IPV6_RUN=0 skips it): run `spillway_est64_v6` (the
# same N_FLOWS flows over IPv6 to fd00::100, 74-byte frames) right after the IPv4 run, and
# `ratio_v6_vs_v4=X.XX` (spillway_est64_v6 Mpps / spillway_est64 Mpps, same invocation).
# Two-worker case (pcap mode, on by default; TWO_WORKERS=0 skips it): run
# `spillway_est64_2w` right after the one-worker run, with `workers = 2` pinned to
# CORES_2W (default "0, 1") and net_pcap with two RX queues (`rx_pcap=A,rx_pcap=B`), each
# replaying half of the N_FLOWS flows (disjoint sets, as RSS spreads flows over queues;
# net_pcap itself does no hashing) -> net_null (two TX queues). Prints the per-worker split
# and `ratio_2w_vs_1w=X.XX` (spillway_est64_2w Mpps / spillway_est64 Mpps, same invocation).
# Every spillway run also prints `worker_cpu` (the share of a core each worker thread got
# between the two samples, from /proc/PID/task/*/stat) and `mpps_per_worker_cpu`; the
# two-worker case then prints `scaling_per_worker_cpu_2w` (its Mpps per worker core-second
# over the one-worker run's): on a host whose other load takes part of the cores, this is
# the scaling figure that does not depend on what the scheduler left to the workers.
# ROUNDS (pcap mode, default 1, >= 1): run the single-worker runs that make the ratios
# ROUNDS times: est64 and est64_v6 alternating, then (GEN_1M=flowgen) est64_memif,
# est64_1m and syn64_random in turn, then testpmd 5tswap ROUNDS times; `ratio_vs_5tswap`,
# `ratio_v6_vs_v4`, `ratio_1m_vs_1k` and `ratio_syn_random_vs_est1k` then take the best
# Mpps of each run over the rounds (best of N: another tenant's load on a shared host
# only ever lowers a figure). Each round's own ratios are printed too (`round=R
# ratio_...`), then `rounds_<ratio>=a,b,c` and `median_<ratio>=X.XX` (the median of the rounds'
# paired ratios: see round_summary). The two-worker run, testpmd io and the
# GEN_1M=pcap 1 M run are run once.
# Prints one line per run (`run=<name> mpps=<x> ...`), then `ratio_vs_5tswap=X.XX`
# (Spillway established 64-byte Mpps / testpmd 5tswap Mpps) and, with the many-flows case,
# `ratio_1m_vs_1k=X.XX` (see the many-flows case).
# Capture case (`benches/e2e.sh capture`): what capture costs when compiled in and not
# running, the same binary and config interleaved round by round (see capture_mode): drop
# capture idle (`capture`) against BASELINE_BIN (a build without the drop-capture hooks,
# optional) and the dpdk-dumpcap framework idle (`pdump`: packet_capture = true, workers
# on EAL lcores) against `capture`; medians of Mpps and of Mpps per worker core-second
# (the figure to read on a shared host). Established traffic has no drops, so the
# drop-capture figure is the per-iteration cost (one relaxed load); the per-drop branch
# only runs for frames already being dropped.
# Sync case (`benches/e2e.sh sync`): the established N_FLOWS run and a new-connection run
# (SYNC_FLOWS flows, default 20000, each round a SYN then an ACK per flow: a confirmed new
# connection, the path fleet sync records) each without and with `[sync]` (one peer on
# loopback, a UDP sink counting what arrives), alternating off/on SYNC_ROUNDS times
# (default 2). Prints `ratio_sync_est=X.XX` and `ratio_sync_newconn=X.XX` (on / off, best
# of each) and `sync_bytes_per_new_connection=N` (UDP payload sent / new connections).
# QUIC case (`benches/e2e.sh quic`): pcap mode (net_pcap -> net_null, one worker), N_FLOWS
# flows of 64-byte UDP datagrams (benches/gen_quic_pcap.py). `spillway_udp64`: to the UDP
# service web-udp (no QUIC-LB: the connection-table path, every packet after a flow's first
# a table hit). `spillway_quic64_plaintext`, `_single_pass`, `_four_pass`: the same flows as
# QUIC short-header packets to the service quic (VIP:443, the same four backends with
# server IDs), whose DCIDs carry a server ID under a plaintext (server ID 2 + nonce 6), a
# single-pass AES (2 + 14) and a four-pass AES (2 + 6: three passes to decode) QUIC-LB
# configuration: every packet routed by its DCID, the table untouched. Alternates the four
# QUIC_ROUNDS times (default 2) and prints `ratio_quic_vs_udp_<config>=X.XX` (best Mpps
# over best udp64 Mpps) and the same per worker core-second; fails when a QUIC run routed
# fewer packets by their DCID than it forwarded (a fallback would measure the wrong path).
# Exit status non-zero on any failure (build, a run that forwarded nothing, unparsable
# counters).
# Needs: cargo, python3, dpdk-testpmd (apt: dpdk, dpdk-dev, libpcap-dev). Runs as root
# (EAL), with --no-huge, so no hugepage setup is needed.
set -euo pipefail

MODE="${1:-pcap}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
N_FLOWS="${N_FLOWS:-1000}"
FLOWS_1M="${FLOWS_1M:-1000000}"
MBUFS_1M="${MBUFS_1M:-1048575}"
GEN_1M="${GEN_1M:-flowgen}"
GEN_CORE="${GEN_CORE:-0}"
MEM_1M_MB="${MEM_1M_MB:-10240}"
DURATION="${DURATION:-5}"
ROUNDS="${ROUNDS:-1}"
TWO_WORKERS="${TWO_WORKERS:-1}"
IPV6_RUN="${IPV6_RUN:-1}"
CORES_2W="${CORES_2W:-0, 1}"
SIZE="${SIZE:-64}"
CORE="${CORE:-1}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
SPILLWAY_BIN="${SPILLWAY_BIN:-$TARGET/release/spillway}"
SPILLWAYCTL_BIN="${SPILLWAYCTL_BIN:-$TARGET/release/spillwayctl}"
FLOWGEN_BIN="${FLOWGEN_BIN:-$TARGET/release/examples/flowgen}"
TESTPMD="${TESTPMD:-dpdk-testpmd}"

die() { echo "e2e.sh: error: $*" >&2; exit 1; }
for v in N_FLOWS FLOWS_1M DURATION SIZE ROUNDS; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v=${!v}: a whole number"
done
((ROUNDS >= 1)) || die "ROUNDS=$ROUNDS: at least 1"
[[ "$MODE" != flows ]] || ((FLOWS_1M > 0)) || die "flows mode needs FLOWS_1M > 0"
for c in python3 "$TESTPMD"; do command -v "$c" >/dev/null || die "$c not found (apt-get install -y python3 dpdk)"; done
[[ $EUID -eq 0 ]] || die "DPDK EAL needs root"

WORK="${WORK:-$(mktemp -d /tmp/spillway-e2e.XXXXXX)}"
mkdir -p "$WORK"
cleanup() {
    local p
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
    # wait for them: a re-run right after would collide on the EAL file prefixes
    wait 2>/dev/null || true
    echo "# logs and configs of this run: $WORK" >&2
}
trap cleanup EXIT

if [[ -z "${SKIP_BUILD:-}" ]]; then
    command -v cargo >/dev/null || die "cargo not found"
    echo "# building release (cargo build --release -p spillway-dataplane -p spillway-ctl)" >&2
    (cd "$ROOT" && cargo build --release -p spillway-dataplane -p spillway-ctl >&2) || die "build failed"
    if [[ "$MODE" == flows || ("$MODE" == pcap && "$GEN_1M" == flowgen) ]] && ((FLOWS_1M > 0)); then
        (cd "$ROOT" && cargo build --release -p spillway-benches --example flowgen >&2) || die "build failed (flowgen)"
    fi
fi
[[ -x "$SPILLWAY_BIN" ]] || die "no $SPILLWAY_BIN"
if [[ "$MODE" == flows || ("$MODE" == pcap && "$GEN_1M" == flowgen) ]] && ((FLOWS_1M > 0)); then
    [[ -x "$FLOWGEN_BIN" ]] || die "no $FLOWGEN_BIN (cargo build --release -p spillway-benches --example flowgen$([[ "$MODE" == pcap ]] && echo "; FLOWS_1M=0 skips the many-flows case"))"
fi

# ------------------------------------------------------------------ helpers ----
# spillway_config FILE RX_DEVICE TX_DEVICE [extra eal args...]
spillway_config() {
    local file="$1" rx="$2" tx="$3"; shift 3
    local huge="\"--no-huge\""
    [[ -n "${SPW_HUGE:-}" ]] && huge="\"--huge-dir\", \"/dev/hugepages\""
    # net_memif needs the EAL multi-process channel: a file prefix instead of --no-shconf
    local shconf="\"--no-shconf\""
    [[ -n "${SPW_FILE_PREFIX:-}" ]] && shconf="\"--file-prefix\", \"$SPW_FILE_PREFIX\""
    local eal="$huge, $shconf, \"-m\", \"${SPW_MEM_MB:-512}\", \"--no-pci\"" a
    for a in "$@"; do eal+=", \"$a\""; done
    cat > "$file" <<CFG
[dataplane]
eal_args = [$eal]
workers = ${SPW_WORKERS:-1}
worker_cores = [${SPW_CORES:-$CORE}]
socket = "$WORK/ctl.sock"
mbufs_per_port = ${SPW_MBUFS:-8191}
$([[ -n "${SPW_PACKET_CAPTURE:-}" ]] && echo "packet_capture = true")

[conntrack]
capacity_per_worker = ${SPW_CAPACITY:-1048576}
$(if [[ -n "${SPW_SYNC:-}" ]]; then printf '\n[sync]\nlisten = "127.0.0.1:17946"\npeers = ["127.0.0.1:17947"]\nkey_file = "%s"\nstartup_sync_timeout_sec = 0\n' "$WORK/sync.key"; fi)

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
    # the same service over IPv6 (run spillway_est64_v6), only when that run is on: with
    # IPV6_RUN=0 the file is IPv4 only, so an older build can be measured with this harness
    if ((IPV6_RUN)); then
        printf '[[client_zones]]\nprefix = "fd01::/64"\nzone = "z1"\n\n' >> "$file"
        printf '[[services]]\nname = "web6"\nvip = "fd00::100"\nport = 80\nprotocol = "tcp"\n\n' >> "$file"
        for b in 1 2 3 4 5 6 7 8; do
            printf '[[services.backends]]\nname = "v%d"\naddress = "fd00:10::%d"\nmac = "02:00:00:00:16:%02x"\nzone = "z1"\n\n' "$b" "$b" "$b" >> "$file"
        done
    fi
    # UDP service on the same VIP:port, for testpmd txonly generators (UDP only)
    printf '[[services]]\nname = "web-udp"\nvip = "10.0.0.100"\nport = 80\nprotocol = "udp"\n\n' >> "$file"
    for b in 1 2 3 4; do
        printf '[[services.backends]]\nname = "u%d"\naddress = "10.10.1.%d"\nmac = "02:00:00:00:11:%02x"\nzone = "z1"\n\n' "$b" "$b" "$b" >> "$file"
    done
    # extra services of a case (the QUIC case's QUIC-LB service)
    if [[ -n "${SPW_EXTRA_CONFIG:-}" ]]; then cat "$SPW_EXTRA_CONFIG" >> "$file"; fi
}

# status_field JSON_FILE EXPR: a number from a StatusReport JSON (python, no deps).
json_get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$1" "$2"; }

# run_spillway NAME PCAP [FLOWS]: one worker, pcap -> null for DURATION s. Mpps from two
# status samples over the control socket (steady state, startup excluded); falls back to
# the final counters / uptime when spillwayctl is missing. SPW_MBUFS, SPW_MEM_MB and
# SPW_CAPACITY (environment of the call) override the pool, EAL memory and table size;
# SPW_WORKERS, SPW_CORES and SPW_RX_DEV the workers, their cores and the RX device.
run_spillway() {
    local name="$1" pcap="$2" flows="${3:-$N_FLOWS}" cfg="$WORK/$1.toml" log="$WORK/$1.log"
    spillway_config "$cfg" "${SPW_RX_DEV:-net_pcap0,rx_pcap=$pcap,infinite_rx=1}" "net_null0,no-rx=1"
    rm -f "$WORK/ctl.sock"
    "$SPILLWAY_BIN" --config "$cfg" --socket "$WORK/ctl.sock" --duration "$((DURATION + 2))" > "$log" 2>&1 &
    local pid=$! t=0 mpps="" idle="" burst=""
    # up to 300 s: two pools of 1 M mbufs and a 1 M-packet capture take minutes on a busy host
    while [[ ! -S "$WORK/ctl.sock" ]] && ((t < 3000)) && kill -0 "$pid" 2>/dev/null; do sleep 0.1; t=$((t + 1)); done
    local cpu1="" cpu2=""
    if [[ -x "$SPILLWAYCTL_BIN" && -S "$WORK/ctl.sock" ]]; then
        sleep 1
        cpu1="$(worker_cpu_ticks "$pid")"
        # a failed status (its --json error object goes to stdout) leaves no sample: the
        # final counters below are used instead
        "$SPILLWAYCTL_BIN" --socket "$WORK/ctl.sock" status --json > "$WORK/$name.s1.json" || rm -f "$WORK/$name.s1.json"
        sleep "$DURATION"
        "$SPILLWAYCTL_BIN" --socket "$WORK/ctl.sock" status --json > "$WORK/$name.s2.json" || rm -f "$WORK/$name.s2.json"
        cpu2="$(worker_cpu_ticks "$pid")"
        # e.g. pause the generator while Spillway still runs (flowgen_run)
        if [[ -n "${SPW_AFTER_SAMPLES:-}" ]]; then $SPW_AFTER_SAMPLES; fi
        if [[ -s "$WORK/$name.s1.json" && -s "$WORK/$name.s2.json" ]]; then
            mpps="$(python3 - "$WORK/$name.s1.json" "$WORK/$name.s2.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
dt = b["uptime_sec"] - a["uptime_sec"]
print("%.3f" % ((b["total"]["forwarded"] - a["total"]["forwarded"]) / dt / 1e6))
PY
)"
            idle="$(python3 - "$WORK/$name.s1.json" "$WORK/$name.s2.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["total"] for f in sys.argv[1:3])
polls = b["polls"] - a["polls"]
busy = polls - (b["idle_polls"] - a["idle_polls"])
print("%.3f %.2f" % ((polls - busy) / polls if polls else 0, (b["rx"] - a["rx"]) / busy if busy else 0))
PY
)" || idle=""
            burst="${idle#* }" idle="${idle% *}"
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
    local split=""
    if [[ "${SPW_WORKERS:-1}" != 1 ]]; then
        split=" per_worker_forwarded=$(json_get "$WORK/$name.final.json" '"/".join(str(w["forwarded"]) for w in d["workers"])')"
    fi
    # CPU time each worker thread got between the samples (1.00 = a whole core): on a
    # shared host the scheduler, not Spillway, can be the limit; mpps_per_worker_cpu is
    # the rate per core-second actually received.
    if [[ -n "$cpu1" && -n "$cpu2" ]]; then
        split+="$(python3 - "$cpu1" "$cpu2" "$DURATION" "$mpps" <<'PY'
import os, sys
a, b = (dict(kv.split("=") for kv in s.split()) for s in sys.argv[1:3])
dt, mpps, hz = float(sys.argv[3]), float(sys.argv[4]), os.sysconf("SC_CLK_TCK")
share = [(int(b[k]) - int(a[k])) / hz / dt for k in sorted(a) if k in b]
print(" worker_cpu=%s mpps_per_worker_cpu=%.3f" % ("/".join("%.2f" % x for x in share), mpps / max(sum(share), 1e-9)), end="")
PY
)"
        eval "MPPS_CPU_$name=${split##*mpps_per_worker_cpu=}"
    fi
    [[ -n "$idle" ]] && split+=" idle_polls=$idle"
    [[ -n "$burst" ]] && split+=" mean_burst=$burst"
    eval "BURST_$name=${burst:-0}"
    echo "run=spillway_$name mpps=$mpps rx=$rx forwarded=$fwd new_connections=$newc flows=$flows$split"
    eval "MPPS_$name=$mpps"
}

# worker_cpu_ticks PID: "worker-0=TICKS worker-1=TICKS ..." (utime + stime of each worker
# thread, /proc/PID/task/TID/stat fields 14 and 15, in clock ticks).
worker_cpu_ticks() {
    local t comm out=""
    for t in /proc/"$1"/task/*; do
        comm="$(cat "$t/comm" 2>/dev/null)" || continue
        [[ "$comm" == worker-* ]] || continue
        out+="$comm=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$t/stat") "
    done
    echo "$out"
}

# run_testpmd MODE PCAP [SUFFIX FLOWS MBUFS MEM_MB]: testpmd MODE forwarding on the same
# vdevs and core; Mpps = mean of port 1 Tx-pps over the per-second samples after the
# first two (the first ones include the capture's load for a large capture).
run_testpmd() {
    local fwd="$1" pcap="$2" sfx="${3:-}" flows="${4:-$N_FLOWS}" mbufs="${5:-16384}" mem="${6:-512}"
    local log="$WORK/testpmd_$1$sfx.log"
    # a pool of 1 M mbufs takes testpmd tens of seconds to set up: more time before the samples
    local huge=(--no-huge)
    [[ -n "${SPW_HUGE:-}" ]] && huge=(--huge-dir /dev/hugepages)
    timeout -s INT "$((DURATION + 3 + (mbufs > 16384 ? 40 : 0)))" "$TESTPMD" "${huge[@]}" --no-shconf -m "$mem" --no-pci -l "0,$CORE" \
        --vdev "net_pcap0,rx_pcap=$pcap,infinite_rx=1" --vdev "net_null0,no-rx=1" -- \
        --forward-mode="$fwd" --total-num-mbufs="$mbufs" --stats-period 1 --nb-cores=1 \
        --rxq=1 --txq=1 > "$log" 2>&1 < /dev/null || true
    local mpps
    mpps="$(awk '/NIC statistics for port/ { port = $(NF-1) }
                 /Tx-pps:/ && port == "1" { n++; if (n > 2) { s += $2; k++ } }
                 END { if (k) printf "%.3f", s / k / 1e6 }' "$log")"
    if [[ -z "$mpps" || "$mpps" == "0.000" ]]; then
        # the 1 M reference run is informative only: report it, do not fail the benchmark
        [[ -n "$sfx" ]] && { echo "run=testpmd_$fwd$sfx mpps=NA flows=$flows (no throughput samples; log: $log)"; return 0; }
        die "testpmd $fwd: no throughput samples; log: $log"
    fi
    echo "run=testpmd_$fwd$sfx mpps=$mpps flows=$flows"
    eval "MPPS_testpmd_$fwd$sfx=$mpps"
}

# best_of NAME...: after a round's run NAME set MPPS_NAME, keeps the best over the rounds
# in BEST_NAME and the list in ROUND_LIST_NAME (ROUNDS above).
best_of() {
    local n v b l
    for n in "$@"; do
        v="MPPS_$n" b="BEST_$n" l="ROUND_LIST_$n"
        eval "$l=\"\${$l:+\${$l},}${!v}\""
        if [[ -z "${!b:-}" ]] || python3 -c "import sys; sys.exit(0 if ${!v} > ${!b} else 1)"; then eval "$b=${!v}"; fi
    done
}

# round_ratio NAME NUM DEN: prints `round=R ratio_NAME=X.XX` of this round (when ROUNDS > 1)
# and appends it to ROUND_RATIOS_NAME.
round_ratio() {
    local x l="ROUND_RATIOS_$1"
    x="$(python3 -c "print('%.2f' % ($2 / $3))")"
    eval "$l=\"\${$l:+\${$l},}$x\""
    ((ROUNDS == 1)) || echo "round=$round ratio_$1=$x"
}

# round_summary RATIO...: with ROUNDS > 1, prints `rounds_RATIO=a,b,c` (each round's own
# ratio, from round_ratio) and `median_RATIO=X.XX`: the median of the rounds' paired ratios.
# The headline `ratio_RATIO` divides the best of one run by the best of the other, which may
# come from different rounds; on a host that switches between a slow and a fast mode for a
# whole run (seen on the AMD EPYC VM: every figure of a round 15-20 % up), the paired median
# is the figure that compares like with like (docs/benchmarks.md).
round_summary() {
    local r l
    ((ROUNDS > 1)) || return 0
    for r in "$@"; do
        l="ROUND_RATIOS_$r"
        [[ -n "${!l:-}" ]] || continue
        echo "rounds_$r=${!l}"
        python3 -c "import statistics; print('median_$r=%.2f' % statistics.median([$(echo "${!l}")]))"
    done
}

# use_best NAME...: MPPS_NAME := BEST_NAME (the ratios below take the best of the rounds).
use_best() {
    local n b
    for n in "$@"; do b="BEST_$n"; [[ -z "${!b:-}" ]] || eval "MPPS_$n=${!b}"; done
}

# ---------------------------------------------------------------- pcap mode ----
pcap_mode() {
    local round r l
    python3 "$HERE/gen_pcap.py" --out "$WORK/est64.pcap" --flows "$N_FLOWS" --size "$SIZE" 2>/dev/null
    # the same flows over IPv6 (74-byte frames: the smallest IPv6 TCP frame)
    if ((IPV6_RUN)); then
        python3 "$HERE/gen_pcap.py" --out "$WORK/est64_v6.pcap" --flows "$N_FLOWS" --size "$SIZE" --ipv6 2>/dev/null
    fi
    for ((round = 1; round <= ROUNDS; round++)); do
        run_spillway est64 "$WORK/est64.pcap"
        best_of est64
        if ((IPV6_RUN)); then
            run_spillway est64_v6 "$WORK/est64_v6.pcap"
            best_of est64_v6
            # shellcheck disable=SC2154  # set by eval in run_spillway
            round_ratio v6_vs_v4 "$MPPS_est64_v6" "$MPPS_est64"
        fi
    done
    if ((TWO_WORKERS)); then
        two_workers
    fi
    if ((FLOWS_1M > 0)); then
        case "$GEN_1M" in
            flowgen) many_flows_flowgen ;;
            pcap) many_flows ;;
            *) die "GEN_1M=$GEN_1M: flowgen | pcap" ;;
        esac
    fi
    if [[ -n "${IMIX:-}" ]]; then
        python3 "$HERE/gen_pcap.py" --out "$WORK/imix.pcap" --flows "$N_FLOWS" --imix 2>/dev/null
        run_spillway imix "$WORK/imix.pcap"
    fi
    if [[ -n "${SYN:-}" ]]; then
        python3 "$HERE/gen_pcap.py" --out "$WORK/syn64.pcap" --flows "$N_FLOWS" --flags syn 2>/dev/null
        run_spillway syn64 "$WORK/syn64.pcap"
    fi
    for ((round = 1; round <= ROUNDS; round++)); do
        run_testpmd 5tswap "$WORK/est64.pcap"
        best_of testpmd_5tswap
        # shellcheck disable=SC2154  # set by eval in run_*
        round_ratio vs_5tswap "$(echo "$ROUND_LIST_est64" | cut -d, -f"$round")" "$MPPS_testpmd_5tswap"
    done
    run_testpmd io "$WORK/est64.pcap"
    use_best est64 est64_v6 testpmd_5tswap est64_memif est64_1m syn64_random
    if ((ROUNDS > 1)); then
        round_summary vs_5tswap v6_vs_v4 1m_vs_1k syn_random_vs_est1k
        echo "# ratio_vs_5tswap, _v6_vs_v4, _1m_vs_1k (flowgen), _syn_random_vs_est1k below: best Mpps of each run over $ROUNDS rounds; _2w_vs_1w: the one two-worker run over the best one-worker run"
    fi
    # shellcheck disable=SC2154  # set by eval in run_*
    python3 -c "print('ratio_vs_5tswap=%.2f' % ($MPPS_est64 / $MPPS_testpmd_5tswap))"
    if ((IPV6_RUN)); then
        # shellcheck disable=SC2154  # set by eval in run_spillway
        python3 -c "print('ratio_v6_vs_v4=%.2f' % ($MPPS_est64_v6 / $MPPS_est64))"
    fi
    if ((TWO_WORKERS)); then
        # shellcheck disable=SC2154  # set by eval in run_spillway
        python3 -c "print('ratio_2w_vs_1w=%.2f' % ($MPPS_est64_2w / $MPPS_est64))"
        # Per core-second the workers actually got: 1.00 = two workers forward exactly
        # twice what one does when each has a whole core (>= 0.90 is >= 1.8 x).
        if [[ -n "${MPPS_CPU_est64_2w:-}" && -n "${MPPS_CPU_est64:-}" ]]; then
            python3 -c "print('scaling_per_worker_cpu_2w=%.2f' % ($MPPS_CPU_est64_2w / $MPPS_CPU_est64))"
        fi
    fi
    if ((FLOWS_1M > 0)); then
        # shellcheck disable=SC2154  # set by eval in run_spillway
        python3 -c "print('ratio_1m_vs_1k=%.2f' % ($MPPS_est64_1m / ${MPPS_est64_memif:-$MPPS_est64}))"
    fi
}

# two_workers: the two-worker case (header). Each RX queue of net_pcap replays its own
# capture: flows 0..N/2 on queue 0, N/2..N on queue 1.
two_workers() {
    local half=$((N_FLOWS / 2)) a="$WORK/est64_q0.pcap" b="$WORK/est64_q1.pcap"
    ((half >= 1)) || die "N_FLOWS=$N_FLOWS: the two-worker case needs at least 2 flows"
    python3 "$HERE/gen_pcap.py" --out "$a" --flows "$half" --size "$SIZE" 2>/dev/null
    python3 "$HERE/gen_pcap.py" --out "$b" --flows "$((N_FLOWS - half))" --first-flow "$half" --size "$SIZE" 2>/dev/null
    SPW_WORKERS=2 SPW_CORES="$CORES_2W" SPW_RX_DEV="net_pcap0,rx_pcap=$a,rx_pcap=$b,infinite_rx=1" \
        run_spillway est64_2w "$a" "$N_FLOWS"
}

# flowgen_start NAME FLOWS: starts flowgen (net_memif server on core GEN_CORE, FLOWS flows)
# in the background and waits until its port is up; FLOWGEN_PID is its pid.
flowgen_start() {
    local log="$WORK/flowgen_$1.log" t=0
    # Emptied here, not only by the child's redirect: the wait below could otherwise read
    # the last round's "started" line before the child has truncated the file, and the
    # check after it then finds an empty log (seen: "flowgen did not start ()" in round 2).
    : > "$log"
    # shellcheck disable=SC2086  # FLOWGEN_EXTRA: extra flowgen flags, word-split on purpose
    "$FLOWGEN_BIN" --device "net_memif0,role=server,socket=$WORK/gen.sock,id=0" --flows "$2" --size "$SIZE" --seconds 600 ${FLOWGEN_EXTRA:-} \
        -- --no-huge -m 256 --no-pci --file-prefix spw-gen -l "$GEN_CORE" > "$log" 2>&1 &
    FLOWGEN_PID=$!
    # (memif's socket is in the abstract namespace by default: no file to wait for)
    while ! grep -q '^flowgen: .* started' "$log" && ((t < 300)) && kill -0 "$FLOWGEN_PID" 2>/dev/null; do sleep 0.1; t=$((t + 1)); done
    grep -q '^flowgen: .* started' "$log" || die "flowgen did not start ($(grep '^flowgen: ' "$log" | tail -1)); log: $log"
}

# flowgen_stop NAME: stops flowgen (it also stops by itself when the receiver leaves) and
# prints its line; fails when flowgen failed (a generator that died mid-run would
# otherwise leave a low figure without an error).
flowgen_stop() {
    local log="$WORK/flowgen_$1.log"
    kill -INT "$FLOWGEN_PID" 2>/dev/null || true
    wait "$FLOWGEN_PID" || die "flowgen failed; log: $log"
    grep '^flowgen flows=' "$log" || die "no flowgen summary; log: $log"
}

# flowgen_run NAME FLOWS: flowgen -> Spillway (memif client, worker on CORE) -> net_null,
# FLOWS flows, table sized for FLOWS_1M; `run=spillway_NAME`, then flowgen's line.
flowgen_run() {
    local name="$1" flows="$2" cap=1048576
    while ((cap < 2 * FLOWS_1M)); do cap=$((cap * 2)); done
    flowgen_start "$name" "$flows"
    # flowgen pauses (stops sending, port open) right after the second sample; Spillway
    # then leaves; then flowgen stops: DPDK 22.11's memif can crash the side that still
    # sends or polls while its peer disconnects (seen with either side)
    SPW_FILE_PREFIX=spw-lb SPW_RX_DEV="net_memif0,role=client,socket=$WORK/gen.sock,id=0" SPW_CAPACITY="$cap" \
        SPW_AFTER_SAMPLES="flowgen_pause" run_spillway "$name" "" "$flows"
    flowgen_stop "$name"
}

# flowgen_check NAME: what makes the flowgen run NAME a measurement of Spillway: every frame
# flowgen sent arrived (its `sent` = Spillway's `rx`; fails otherwise), and Spillway, not the
# generator, was the limit (flowgen offered more than it took: `unsent` > 0, and full bursts:
# `mean_burst` >= 30; a warning otherwise, the figure is then the generator's).
flowgen_check() {
    local sent unsent rx burst
    sent="$(sed -n 's/^flowgen flows=.* sent=\([0-9]*\) .*/\1/p' "$WORK/flowgen_$1.log")"
    unsent="$(sed -n 's/^flowgen flows=.* unsent=\([0-9]*\) .*/\1/p' "$WORK/flowgen_$1.log")"
    rx="$(json_get "$WORK/$1.final.json" 'd["total"]["rx"]')"
    [[ -n "$sent" && "$sent" == "$rx" ]] || die "run $1: flowgen sent ${sent:-?} frames, Spillway received $rx: the path lost or added frames; logs in $WORK"
    burst="$(eval echo "\${BURST_$1:-0}")"  # run_spillway's mean_burst of this run
    if ((unsent == 0)) || python3 -c "import sys; sys.exit(0 if float('$burst') < 30 else 1)"; then
        echo "warning: run $1: the generator may have been the limit (flowgen unsent=$unsent, mean_burst=$burst)"
    fi
}

# flowgen_pause: flowgen stops sending and counting (SIGUSR1) but keeps its port open.
flowgen_pause() {
    kill -USR1 "$FLOWGEN_PID" 2>/dev/null ||
        die "flowgen is no longer running before the end of the measurement: it stops when its receiver leaves (did Spillway or testpmd exit early? see their logs in $WORK) or on its own error ($WORK/flowgen_*.log)"
    sleep 0.2
}

# many_flows_flowgen: the FLOWS_1M case with GEN_1M=flowgen (header).
many_flows_flowgen() {
    local round
    for ((round = 1; round <= ROUNDS; round++)); do
        flowgen_run est64_memif "$N_FLOWS"
        flowgen_check est64_memif
        flowgen_run est64_1m "$FLOWS_1M"
        flowgen_check est64_1m
        # every packet a new connection from 1 M+ random sources (flowgen --syn-random), the
        # table at its configured size: SYN-only entries fill it and then evict each other
        FLOWGEN_EXTRA=--syn-random flowgen_run syn64_random "$FLOWS_1M"
        flowgen_check syn64_random
        best_of est64_memif est64_1m syn64_random
        # shellcheck disable=SC2154  # set by eval in run_spillway
        round_ratio 1m_vs_1k "$MPPS_est64_1m" "$MPPS_est64_memif"
        round_ratio syn_random_vs_est1k "$MPPS_syn64_random" "$MPPS_est64_memif"
    done
    use_best est64_memif est64_1m syn64_random
    python3 -c "print('ratio_syn_random_vs_est1k=%.2f' % ($MPPS_syn64_random / $MPPS_est64_memif))"
    # the path's own ceiling: testpmd io on Spillway's core between the same ports
    local log="$WORK/testpmd_io_memif.log" mpps
    flowgen_start testpmd "$FLOWS_1M"
    timeout -s INT "$((DURATION + 6))" "$TESTPMD" --no-huge -m 512 --no-pci --file-prefix spw-tp -l "$GEN_CORE,$CORE" \
        --vdev "net_memif0,role=client,socket=$WORK/gen.sock,id=0" --vdev "net_null0,no-rx=1" -- --no-mlockall \
        --forward-mode=io --total-num-mbufs=16384 --stats-period 1 --nb-cores=1 > "$log" 2>&1 < /dev/null &
    local tp=$!
    # the generator pauses first (see flowgen_run); samples after it (0 pps) are left out
    sleep "$((DURATION + 3))"
    flowgen_pause
    wait "$tp" || true
    flowgen_stop testpmd > /dev/null
    mpps="$(awk '/NIC statistics for port/ { port = $(NF-1) }
                 /Tx-pps:/ && port == "1" && $2 > 0 { n++; if (n > 2) { s += $2; k++ } }
                 END { if (k) printf "%.3f", s / k / 1e6 }' "$log")"
    echo "run=testpmd_io_memif mpps=${mpps:-NA} flows=$FLOWS_1M"
}

# many_flows: the FLOWS_1M case with GEN_1M=pcap (header). One packet per flow, so every replay round
# touches every flow once: the connection table's working set is FLOWS_1M entries.
many_flows() {
    local pcap="$WORK/est64_1m.pcap" cap=1048576 avail_mb
    ((MBUFS_1M <= 1048575)) || die "MBUFS_1M=$MBUFS_1M: dataplane.mbufs_per_port allows 1023-1048575"
    ((FLOWS_1M + 8192 <= MBUFS_1M)) || die "FLOWS_1M=$FLOWS_1M needs MBUFS_1M >= FLOWS_1M + 8192 (net_pcap keeps one mbuf per packet; descriptors and caches need the rest); MBUFS_1M=$MBUFS_1M"
    local mem="$MEM_1M_MB" huge=""
    if [[ "${HUGE_1M:-0}" == 1 ]]; then
        mem="${MEM_1M_HUGE_MB:-6144}" huge=1
        HUGE_PREV="$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)"
        echo "${HUGE_1M_PAGES:-3500}" > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
        mountpoint -q /dev/hugepages || { mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages && HUGE_MOUNTED=1; }
        local free_mb=$(($(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo) * 2))
        ((free_mb >= mem)) || die "HUGE_1M=1: only $free_mb MiB of hugepages free for MEM_1M_HUGE_MB=$mem"
    else
        avail_mb="$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)"
        ((avail_mb >= MEM_1M_MB + 1024)) || die "the ${FLOWS_1M}-flow run needs MEM_1M_MB=$MEM_1M_MB MiB + 1 GiB free, MemAvailable is $avail_mb MiB (FLOWS_1M=0 skips it)"
    fi
    while ((cap < 2 * FLOWS_1M)); do cap=$((cap * 2)); done
    python3 "$HERE/gen_pcap.py" --out "$pcap" --flows "$FLOWS_1M" --size "$SIZE" 2>/dev/null
    SPW_HUGE="$huge" SPW_MBUFS="$MBUFS_1M" SPW_MEM_MB="$mem" SPW_CAPACITY="$cap" run_spillway est64_1m "$pcap" "$FLOWS_1M"
    # one pool in testpmd (per socket), so half the memory does
    SPW_HUGE="$huge" run_testpmd io "$pcap" _1m "$FLOWS_1M" "$MBUFS_1M" "$((mem / 2))"
    rm -f "$pcap"   # ~80 MB for 1 M flows
    # give back what HUGE_1M=1 took
    [[ -n "${HUGE_MOUNTED:-}" ]] && umount /dev/hugepages 2>/dev/null
    [[ -n "${HUGE_PREV:-}" ]] && echo "$HUGE_PREV" > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
    true
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

# sync mode: fleet flow sync off vs on (header, "Sync case").
sync_mode() {
    local r best
    (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/sync.key")
    python3 "$HERE/gen_pcap.py" --out "$WORK/est64.pcap" --flows "$N_FLOWS" --size "$SIZE" 2>/dev/null
    python3 "$HERE/gen_pcap.py" --out "$WORK/hs64.pcap" --flows "${SYNC_FLOWS:-20000}" --size "$SIZE" --flags handshake 2>/dev/null
    python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("127.0.0.1", 17947))
n = b = 0
while True:
    b += len(s.recv(2048)); n += 1
    if n % 1000 == 0:
        open(sys.argv[1], "w").write("%d %d\n" % (n, b))
' "$WORK/sink.count" &
    SINK_PID=$!
    for ((r = 1; r <= ${SYNC_ROUNDS:-2}; r++)); do
        run_spillway "est64_off$r" "$WORK/est64.pcap"
        SPW_SYNC=1 run_spillway "est64_sync$r" "$WORK/est64.pcap"
        # net_pcap keeps the whole capture in mbufs (2 packets per flow)
        SPW_MBUFS=65535 SPW_MEM_MB=1024 run_spillway "hs64_off$r" "$WORK/hs64.pcap" "${SYNC_FLOWS:-20000}"
        SPW_MBUFS=65535 SPW_MEM_MB=1024 SPW_SYNC=1 run_spillway "hs64_sync$r" "$WORK/hs64.pcap" "${SYNC_FLOWS:-20000}"
    done
    kill "$SINK_PID" 2>/dev/null || true
    best() { local p="$1" m=0 v; for ((r = 1; r <= ${SYNC_ROUNDS:-2}; r++)); do v="MPPS_${p}$r"; m="$(python3 -c "print(max($m, ${!v}))")"; done; echo "$m"; }
    python3 -c "print('ratio_sync_est=%.2f' % ($(best est64_sync) / $(best est64_off)))"
    python3 -c "print('ratio_sync_newconn=%.2f' % ($(best hs64_sync) / $(best hs64_off)))"
    python3 - "$WORK/hs64_sync1.s1.json" "$WORK/hs64_sync1.s2.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
conns = b["total"]["new_connections"] - a["total"]["new_connections"]
sent = b["sync"]["sent_bytes"] - a["sync"]["sent_bytes"]
recs = b["sync"]["sent_records"] - a["sync"]["sent_records"]
full = b["sync"]["outbound_queue_full"] - a["sync"]["outbound_queue_full"]
print("sync_bytes_per_new_connection=%.1f sync_records_per_new_connection=%.3f new_connections=%d outbound_queue_full=%d" % (sent / max(conns, 1), recs / max(conns, 1), conns, full))
PY
}

# capture mode: the cost of capture compiled in but not running (header, "Capture case"):
# the established N_FLOWS run, CAPTURE_ROUNDS rounds (default 5), each running every
# variant once, the order rotated from round to round (A B C, B C A, C A B, ...):
#   capture  SPILLWAY_BIN as configured by default: drop capture compiled in, idle
#   pdump    SPILLWAY_BIN with dataplane.packet_capture = true (rte_pdump initialised, the
#            worker on an EAL lcore, EAL multi-process with a file prefix), no dumpcap
#   base     BASELINE_BIN, when set: a spillway built without the drop-capture hooks
# Prints per variant the median (and min-max) Mpps and Mpps per worker core-second, then
# ratio_capture_idle / ratio_capture_idle_per_worker_cpu (capture / base, medians) and
# ratio_pdump_idle / ratio_pdump_idle_per_worker_cpu (pdump / capture, medians).
capture_mode() {
    local variants=(capture pdump) r k v n
    [[ -n "${BASELINE_BIN:-}" ]] && { [[ -x "$BASELINE_BIN" ]] || die "BASELINE_BIN=$BASELINE_BIN: not executable"; variants=(base capture pdump); }
    n=${#variants[@]}
    python3 "$HERE/gen_pcap.py" --out "$WORK/est64.pcap" --flows "$N_FLOWS" --size "$SIZE" 2>/dev/null
    for ((r = 1; r <= ${CAPTURE_ROUNDS:-5}; r++)); do
        for ((k = 0; k < n; k++)); do
            v="${variants[$(((k + r - 1) % n))]}"
            case "$v" in
                base) SPILLWAY_BIN="$BASELINE_BIN" run_spillway "est64_base$r" "$WORK/est64.pcap" ;;
                capture) run_spillway "est64_capture$r" "$WORK/est64.pcap" ;;
                pdump) SPW_PACKET_CAPTURE=1 SPW_FILE_PREFIX=spw-bench-pdump run_spillway "est64_pdump$r" "$WORK/est64.pcap" ;;
            esac
        done
    done
    # cap_stat VARIANT PREFIX: "median min max" of the rounds' MPPS_ (or MPPS_CPU_) values
    cap_stat() {
        local vals=() x
        for ((r = 1; r <= ${CAPTURE_ROUNDS:-5}; r++)); do x="$2est64_$1$r"; vals+=("${!x:-nan}"); done
        python3 -c "import statistics as s, sys; v = [float(x) for x in sys.argv[1:]]; print('%.3f %.3f %.3f' % (s.median(v), min(v), max(v)))" "${vals[@]}"
    }
    local m c lo hi clo chi
    for v in "${variants[@]}"; do
        read -r m lo hi <<<"$(cap_stat "$v" MPPS_)"
        read -r c clo chi <<<"$(cap_stat "$v" MPPS_CPU_)"
        echo "variant=$v median_mpps=$m mpps_range=$lo-$hi median_mpps_per_worker_cpu=$c per_worker_cpu_range=$clo-$chi rounds=${CAPTURE_ROUNDS:-5}"
        eval "MED_$v=$m MEDC_$v=$c"
    done
    if [[ -n "${BASELINE_BIN:-}" ]]; then
        python3 -c "print('ratio_capture_idle=%.3f ratio_capture_idle_per_worker_cpu=%.3f' % ($MED_capture / $MED_base, $MEDC_capture / $MEDC_base))"
    fi
    python3 -c "print('ratio_pdump_idle=%.3f ratio_pdump_idle_per_worker_cpu=%.3f' % ($MED_pdump / $MED_capture, $MEDC_pdump / $MEDC_capture))"
}

# quic mode: QUIC-LB short-header routing vs plain UDP (header, "QUIC case").
quic_mode() {
    local key r c
    key="$(python3 -c "import os; print(os.urandom(16).hex())")"
    (umask 077; echo "$key" >"$WORK/quic-lb.key")
    {
        printf '[[services]]\nname = "quic"\nvip = "10.0.0.100"\nport = 443\nprotocol = "udp"\n\n'
        printf '[[services.quic_lb]]\nconfig_rotation = 0\nserver_id_length = 2\nnonce_length = 6\nalgorithm = "plaintext"\n\n'
        printf '[[services.quic_lb]]\nconfig_rotation = 1\nserver_id_length = 2\nnonce_length = 14\nalgorithm = "encrypted"\nkey_file = "%s"\n\n' "$WORK/quic-lb.key"
        printf '[[services.quic_lb]]\nconfig_rotation = 2\nserver_id_length = 2\nnonce_length = 6\nalgorithm = "encrypted"\nkey_file = "%s"\n\n' "$WORK/quic-lb.key"
        for b in 1 2 3 4; do
            printf '[[services.backends]]\nname = "q%d"\naddress = "10.10.1.%d"\nmac = "02:00:00:00:11:%02x"\nzone = "z1"\nserver_id = "%04x"\n\n' "$b" "$b" "$b" "$b"
        done
    } >"$WORK/quic.toml"
    local gen=(python3 "$HERE/gen_quic_pcap.py" --flows "$N_FLOWS" --size "$SIZE" --server-ids 0001,0002,0003,0004)
    "${gen[@]}" --out "$WORK/udp64.pcap" --port 80
    "${gen[@]}" --out "$WORK/quic64_plaintext.pcap" --codepoint 0 --nonce-length 6
    "${gen[@]}" --out "$WORK/quic64_single_pass.pcap" --codepoint 1 --nonce-length 14 --key "$key"
    "${gen[@]}" --out "$WORK/quic64_four_pass.pcap" --codepoint 2 --nonce-length 6 --key "$key"
    for ((r = 1; r <= ${QUIC_ROUNDS:-2}; r++)); do
        for c in udp64 quic64_plaintext quic64_single_pass quic64_four_pass; do
            SPW_EXTRA_CONFIG="$WORK/quic.toml" run_spillway "$c$r" "$WORK/$c.pcap"
            [[ "$c" == udp64 ]] && continue
            python3 - "$WORK/$c$r.final.json" "$c$r" <<'PY' || die "run $c$r: not every packet was routed by its DCID; log in $WORK"
import json, sys
t = json.load(open(sys.argv[1]))["total"]
q = dict(t["quic_lb"])
print("  %s: quic_lb %s" % (sys.argv[2], " ".join("%s=%d" % kv for kv in sorted(q.items()) if kv[1])))
sys.exit(0 if q.get("routed", 0) >= t["forwarded"] > 0 else 1)
PY
        done
    done
    best() { local p="$1" m=0 v; for ((r = 1; r <= ${QUIC_ROUNDS:-2}; r++)); do v="${2:-MPPS_}${p}$r"; m="$(python3 -c "print(max($m, ${!v:-0}))")"; done; echo "$m"; }
    for c in plaintext single_pass four_pass; do
        python3 -c "print('ratio_quic_vs_udp_$c=%.2f' % ($(best "quic64_$c") / $(best udp64)))"
        python3 -c "print('ratio_quic_vs_udp_${c}_per_worker_cpu=%.2f' % ($(best "quic64_$c" MPPS_CPU_) / max($(best udp64 MPPS_CPU_), 1e-9)))"
    done
}

# flows mode: only the many-flows case with flowgen (N_FLOWS, then FLOWS_1M flows).
flows_mode() {
    many_flows_flowgen
    round_summary 1m_vs_1k syn_random_vs_est1k
    # shellcheck disable=SC2154  # set by eval in run_spillway
    python3 -c "print('ratio_1m_vs_1k=%.2f' % ($MPPS_est64_1m / $MPPS_est64_memif))"
}

case "$MODE" in
    pcap) pcap_mode ;;
    flows) flows_mode ;;
    memif) memif_mode ;;
    sync) sync_mode ;;
    capture) capture_mode ;;
    quic) quic_mode ;;
    *) die "unknown mode '$MODE' (pcap | memif | flows | sync | capture | quic)" ;;
esac
