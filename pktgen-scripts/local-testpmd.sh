#!/usr/bin/env bash
# Local load without a NIC: dpdk-testpmd as the traffic generator on virtual ports.
#
#   sudo pktgen-scripts/local-testpmd.sh [syn|ack|imix] [SECONDS]
#
#   testpmd "gen" (io: net_pcap infinite_rx of benches/gen_pcap.py flows -> net_memif server)
#     -> spillway (memif client in -> memif client out, one worker)
#     -> testpmd "sink" (rxonly, net_memif server)
# Each process has its own --file-prefix and memif socket. On a 2-core host gen and sink
# share core 0 and Spillway's worker has core 1. Prints Spillway's final counters and the
# sink's received-packet count. N_FLOWS (default 1000) flows to VIP 10.0.0.100:80.
set -euo pipefail
KIND="${1:-ack}"
SECS="${2:-10}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
SPILLWAY_BIN="${SPILLWAY_BIN:-$TARGET/release/spillway}"
N_FLOWS="${N_FLOWS:-1000}"
W="$(mktemp -d /tmp/spillway-local.XXXXXX)"
# memif needs the EAL multi-process channel: no --no-shconf, one --file-prefix per process
EAL=(--no-huge -m 512 --no-pci)
[[ -x "$SPILLWAY_BIN" ]] || { echo "build first: cargo build --release -p spillway-dataplane" >&2; exit 1; }
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

case "$KIND" in
    syn) python3 "$ROOT/benches/gen_pcap.py" --out "$W/in.pcap" --flows "$N_FLOWS" --flags syn ;;
    ack) python3 "$ROOT/benches/gen_pcap.py" --out "$W/in.pcap" --flows "$N_FLOWS" ;;
    imix) python3 "$ROOT/benches/gen_pcap.py" --out "$W/in.pcap" --flows "$N_FLOWS" --imix ;;
    *) echo "kind: syn | ack | imix" >&2; exit 2 ;;
esac

timeout -s INT "$((SECS + 6))" dpdk-testpmd "${EAL[@]}" --file-prefix spw-sink -l 0-1 --main-lcore 1 \
    --vdev "net_memif1,role=server,socket=$W/sink.sock,id=0" -- --no-mlockall \
    --forward-mode=rxonly --total-num-mbufs=16384 --stats-period 1 > "$W/sink.log" 2>&1 < /dev/null &
timeout -s INT "$((SECS + 6))" dpdk-testpmd "${EAL[@]}" --file-prefix spw-gen -l 0-1 --main-lcore 1 \
    --vdev "net_pcap0,rx_pcap=$W/in.pcap,infinite_rx=1" --vdev "net_memif0,role=server,socket=$W/gen.sock,id=0" -- \
    --no-mlockall --forward-mode=io --total-num-mbufs=16384 --stats-period 1 > "$W/gen.log" 2>&1 < /dev/null &
sleep 2
cat > "$W/spillway.toml" <<CFG
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--file-prefix", "spw-lb"]
workers = 1
worker_cores = [1]
socket = "$W/ctl.sock"
[[ports]]
name = "in"
device = "net_memif0,role=client,socket=$W/gen.sock,id=0"
forward_to = "out"
mac = "02:00:00:00:00:01"
[[ports]]
name = "out"
device = "net_memif1,role=client,socket=$W/sink.sock,id=0"
mac = "02:00:00:00:00:02"
[[zones]]
zone = "z1"
region = "r1"
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
"$SPILLWAY_BIN" --config "$W/spillway.toml" --socket "$W/ctl.sock" --duration "$SECS" | grep -v '^final_status_json'
wait || true
echo "sink (testpmd rxonly) last stats:"
grep -E "RX-packets|Rx-pps" "$W/sink.log" | tail -2
echo "logs in $W"
