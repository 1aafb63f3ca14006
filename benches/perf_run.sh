#!/bin/bash
# perf_run.sh NAME OUT [SECONDS]: profiles one run of benches/e2e.sh from the outside.
# Waits (up to 60 s) for the Spillway process started with `--config .../NAME.toml`
# (e.g. est64_memif, est64_1m), lets it warm up 2.5 s, then records its worker thread
# (`perf record -e cpu-clock`, timer sampling: this VM has no hardware counters) for
# SECONDS (default 3) into OUT. Run it in the background beside the harness:
#   benches/perf_run.sh est64_1m /tmp/p1m.data & SKIP_BUILD=1 ROUNDS=1 DURATION=7 benches/e2e.sh flows
# then `perf report -i OUT --no-children --sort symbol` and `perf annotate -i OUT -s SYMBOL`.
set -euo pipefail
name="${1:?usage: perf_run.sh NAME OUT [SECONDS]}" out="${2:?usage: perf_run.sh NAME OUT [SECONDS]}" secs="${3:-3}"
pid=""
for _ in $(seq 1 600); do
    pid="$(pgrep -f -- "--config .*/$name\.toml" | head -1 || true)"
    [[ -n "$pid" ]] && break
    sleep 0.1
done
[[ -n "$pid" ]] || { echo "perf_run.sh: no process with --config .../$name.toml within 60 s" >&2; exit 1; }
sleep 2.5
tid="$(grep -l '^worker' /proc/"$pid"/task/*/comm | head -1 | cut -d/ -f5)"
[[ -n "$tid" ]] || { echo "perf_run.sh: process $pid has no worker thread" >&2; exit 1; }
perf record -q -e cpu-clock -t "$tid" -o "$out" -- sleep "$secs" > /dev/null 2>&1
echo "perf_run.sh: $out (pid $pid, worker tid $tid, $secs s)"
