#!/usr/bin/env python3
"""Instructions per packet for each stage of the established path, from two callgrind runs
of `packet_ir established` with different packet counts (the difference removes the
set-up: table zeroing, Maglev build, flow warm-up). docs/benchmarks.md "Per-stage budget".

    valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
        --callgrind-out-file=A.out target/release/examples/packet_ir established 100000
    (same with 300000 -> B.out)
    benches/cg_stages.py A.out 100000 B.out 300000

Costs are self costs per (function symbol, inlined source file, line); the stage of a
line comes from its source file (FILES), in worker.rs from the function whose lines hold
it (WORKER_FNS), and for library code inlined into our functions from that function's
symbol (FN_STAGES).
"""
import collections, re, sys

WORKER_FNS = [  # (first line, stage) in dataplane/src/fastpath/worker.rs, by `fn` position
    ("fn selection_hash", "select on miss"),
    ("fn class_table", "snapshot/backend access"),
    ("pub fn tracking_key", "connection-table lookup"),
    ("fn keeps_backend", "snapshot/backend access"),
    ("pub fn new(", "other"),
    ("pub fn process<", "dispatch (process glue)"),
    ("fn process_segmented<", "other"),
    ("fn decide<", "other"),
    ("fn decide_v4<", "dispatch (process glue)"),
    ("fn fragment_service", "other"),
    ("fn select<", "connection-table lookup"),
    ("fn process_icmp", "other"),
    ("pub fn poll<", "other"),
]

# Our files outside worker.rs, by path suffix: (stage inside the packet path, stage when
# inlined into packet_ir's main, i.e. the prefetch pass).
FILES = [
    ("fastpath/worker/deliver.rs", "rewrite (L2 DSR)", None),
    ("fastpath/worker/prefetch.rs", "prefetch pass (hint, hash, prefetch)", "prefetch pass (hint, hash, prefetch)"),
    ("fastpath/worker/svc_cache.rs", "service lookup (snapshot)", "prefetch pass (hint, hash, prefetch)"),
    ("fastpath/worker/v6.rs", "dispatch (process glue)", None),
    ("fastpath/worker/quic.rs", "dispatch (process glue)", None),
    ("fastpath/conntrack", "connection-table lookup", "prefetch pass (hint, hash, prefetch)"),
    ("shared/src/flow.rs", "connection-table lookup", "prefetch pass (hint, hash, prefetch)"),
    ("fastpath/stats.rs", "counters", None),
    ("fastpath/port.rs", "harness (MemBuf accessors; an mbuf's are inlined)", None),
    ("control/snapshot.rs", "snapshot/backend access", None),
    ("shared/src/maglev.rs", "snapshot/backend access", None),
    ("/wire/", "parse", "prefetch pass (hint, hash, prefetch)"),
]

# Library code (core/alloc: slices, integers, options) inlined into one of our functions,
# staged by that function's symbol (its last path segment).
FN_STAGES = [
    ("process_v6", "dispatch (process glue)"), ("process_other", "dispatch (process glue)"),
    ("process", "dispatch (process glue)"), ("decide", "dispatch (process glue)"),
    ("map_or_else", "connection-table lookup"), ("select", "connection-table lookup"),
    ("find", "connection-table lookup"), ("lookup", "connection-table lookup"),
    ("parse_ipv4", "parse"), ("parse_ipv6", "parse"), ("walk_ext", "parse"),
    ("deliver", "rewrite (L2 DSR)"), ("service_of", "service lookup (snapshot)"),
    ("pkt_len", "harness (MemBuf accessors; an mbuf's are inlined)"),
    ("data", "harness (MemBuf accessors; an mbuf's are inlined)"),
    ("data_mut", "harness (MemBuf accessors; an mbuf's are inlined)"),
]


def worker_ranges(path):
    src = open(path).read().splitlines()
    starts = []
    for name, stage in WORKER_FNS:
        for i, l in enumerate(src, 1):
            if name in l:
                starts.append((i, stage))
                break
    starts.sort()
    return starts


def load(path):
    cost = collections.Counter()
    fl = fi = fn = None
    skip = False
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("fl="):
            fl = fi = line[3:]
        elif line.startswith(("fi=", "fe=")):
            fi = line[3:]
        elif line.startswith("fn="):
            fn = line[3:]
            fi = fl
        elif line.startswith("calls="):
            skip = True
        elif line and (line[0].isdigit()):
            if skip:
                skip = False
                continue
            parts = line.split()
            if len(parts) >= 2:
                cost[(fn, fi, int(parts[0]))] += int(parts[1])
        elif line.startswith(("cfn=", "cfi=", "cfl=", "cob=", "ob=")):
            pass
    return cost


def stage(fn, fi, line, wr):
    f = fi or ""
    fnn = fn or ""
    in_main = fnn.startswith("packet_ir::main")
    if f.endswith("fastpath/worker.rs") and line > 0 and not in_main:
        st = "other"
        for start, s in wr:
            if line >= start:
                st = s
        return st
    for suffix, inside, in_pass in FILES:
        if suffix in f:
            return (in_pass or inside) if in_main else inside
    if "benches/" in f:
        return "harness (packet_ir loop, set_flow)"
    if in_main:
        # the prefetch pass and packet_ir's own loop are both inlined into main
        return "library code inlined into packet_ir's main (prefetch pass and harness loop)"
    last = fnn.split("::")[-1]
    for name, s in FN_STAGES:
        if last == name or last.startswith(name + "<"):
            return s
    return "other (library functions: memcpy, ...)"


def main():
    a, na, b, nb = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    wr = worker_ranges(sys.argv[5] if len(sys.argv) > 5 else "dataplane/src/fastpath/worker.rs")
    ca, cb = load(a), load(b)
    per = collections.Counter()
    for k in set(ca) | set(cb):
        d = cb.get(k, 0) - ca.get(k, 0)
        if d:
            per[stage(*k, wr)] += d
    n = nb - na
    total = sum(per.values())
    for s, v in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"{s:55s} {v / n:8.1f} instr/packet  {100 * v / total:5.1f} %")
    print(f"{'total':55s} {total / n:8.1f} instr/packet")


if __name__ == "__main__":
    main()
