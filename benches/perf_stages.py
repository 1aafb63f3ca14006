#!/usr/bin/env python3
"""Share of a worker's CPU samples per stage of the established path, from `perf record
-e cpu-clock` of the running daemon (docs/benchmarks.md "Per-stage budget").

    perf record -e cpu-clock -F 4999 -C CORE -o perf.data -- sleep 5
    perf script -i perf.data --comm worker-0 -F ip,dso > ips.txt
    perf script -i perf.data --show-mmap-events | grep 'MMAP.*release/spillway'   # base, pgoff
    benches/perf_stages.py ips.txt BASE PGOFF target/release/spillway

Each sample in the spillway binary is resolved with `addr2line -i` (the chain of inlined
frames) and given the stage of its frames; samples in the PMDs count as the device side
of the RX (net_pcap: copy into a fresh mbuf) and TX (net_null: free) bursts.
"""
import collections, subprocess, sys

RULES = [  # (substring of any frame's function, stage), first match wins
    ("Worker::prefetch", "prefetch pass (hint, hash, prefetch)"),
    ("flow_tuple_hint", "prefetch pass (hint, hash, prefetch)"),
    ("stats::bump", "counters"),
    ("Worker::deliver", "rewrite (L2 DSR)"),
    ("::deliver", "rewrite (L2 DSR)"),
    ("keeps_backend", "snapshot/backend access"),
    ("class_table", "snapshot/backend access"),
    ("service_of", "service lookup (snapshot)"),
    ("svc_slot", "service lookup (snapshot)"),
    ("ConnTable::", "connection-table lookup"),
    ("ConnTable<", "connection-table lookup"),
    ("tracking_key", "connection-table lookup"),
    ("Worker::select", "connection-table lookup"),
    ("spillway_dataplane::wire::", "parse"),
    ("rx_burst", "rx burst (ours)"),
    ("push_or_flush", "tx burst (ours)"),
    ("worker::flush", "tx burst (ours)"),
    ("tx_burst", "tx burst (ours)"),
    ("Worker::process", "dispatch (process glue)"),
    ("Worker::poll", "poll loop (burst, per-poll counters, sweep)"),
    ("run_loop", "run loop (clock, snapshot, mailbox)"),
]


# Frames of the burst's prefetch pass (`worker/prefetch.rs`, inlined into `Worker::poll`):
# outside `Worker::process`, a sample in one of these is the pass's.
PASS_KEYS = ["Worker::prefetch", "flow_tuple_hint", "syn_hint", "svc_cache::", "conntrack::prefetch::", "PrefetchTarget", "prefetch_target"]


def stage_of(fns):
    """The stage of a sample whose chain of inlined frames is `fns` (innermost first)."""
    in_process = any("Worker::process" in f or "Worker::decide" in f for f in fns)
    if not in_process and any(k in f for f in fns for k in PASS_KEYS):
        return "prefetch pass (hint, hash, prefetch)"
    for key, s in RULES:
        if key in ("Worker::prefetch", "flow_tuple_hint"):
            continue
        if any(key in f for f in fns):
            return s
    return "other (ours)"


def main():
    ips_file, base, pgoff, binary = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16), sys.argv[4]
    # the executable LOAD segment's vaddr - offset (PIE: the mapping's file offset is not
    # the link-time address)
    delta = 0
    for l in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True).stdout.splitlines():
        f = l.split()
        if f[:1] == ["LOAD"] and "E" in f[6:-1]:
            delta = int(f[2], 16) - int(f[1], 16)
    ours = collections.Counter()
    stages = collections.Counter()
    for line in open(ips_file):
        p = line.split()
        if len(p) < 2:
            continue
        dso = p[1].strip("()")
        if dso == binary or dso.endswith("/" + binary.split("/")[-1]):
            ours[int(p[0], 16) - base + pgoff + delta] += 1
        elif "net_pcap" in dso:
            stages["rx burst (net_pcap: copy into a new mbuf)"] += 1
        elif "net_null" in dso:
            stages["tx burst (net_null: free the mbufs)"] += 1
        elif "vdso" in dso:
            stages["run loop (clock, snapshot, mailbox)"] += 1
        else:
            stages["other (kernel, libc, ld.so TLS)"] += 1
    addrs = sorted(ours)
    out = subprocess.run(["addr2line", "-a", "-f", "-i", "-C", "-e", binary] + [hex(a) for a in addrs], capture_output=True, text=True).stdout.splitlines()
    chains, cur = {}, None
    i = 0
    while i < len(out):
        l = out[i]
        if l.startswith("0x"):
            cur = int(l, 16)
            chains[cur] = []
            i += 1
            continue
        chains[cur].append(l)
        i += 2
    for a, n in ours.items():
        stages[stage_of(chains.get(a, []))] += n
    total = sum(stages.values())
    for s, n in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"{s:50s} {n:6d} samples {100 * n / total:5.1f} %")
    print(f"{'total':50s} {total:6d}")


if __name__ == "__main__":
    main()
