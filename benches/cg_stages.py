#!/usr/bin/env python3
"""Instructions per packet for each stage of the established path, from two callgrind runs
of `packet_ir established` with different packet counts (the difference removes the
set-up: table zeroing, Maglev build, flow warm-up). docs/benchmarks.md "Per-stage budget".

    valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
        --callgrind-out-file=A.out target/release/examples/packet_ir established 100000
    (same with 300000 -> B.out)
    benches/cg_stages.py A.out 100000 B.out 300000

Costs are self costs per (function symbol, inlined source file, line); the stage of a
line comes from its source file and, in worker.rs, from the function whose lines hold it.
"""
import collections, re, sys

WORKER_FNS = [  # (first line, stage) in dataplane/src/fastpath/worker.rs, by `fn` position
    ("fn svc_slot", "service lookup (snapshot)"),
    ("fn selection_hash", "select on miss"),
    ("fn class_table", "snapshot/backend access"),
    ("pub fn tracking_key", "connection-table lookup"),
    ("fn keeps_backend", "snapshot/backend access"),
    ("pub fn new(", "other"),
    ("pub fn process<", "dispatch (process glue)"),
    ("fn process_other<", "other"),
    ("fn decide<", "other"),
    ("fn decide_v4<", "dispatch (process glue)"),
    ("fn service_of", "service lookup (snapshot)"),
    ("fn fragment_service", "other"),
    ("pub fn prefetch<", "prefetch pass (hint, hash, prefetch)"),
    ("fn select<", "connection-table lookup"),
    ("fn process_icmp", "other"),
    ("pub fn poll<", "other"),
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
    in_main = fn is not None and fn.startswith("packet_ir::main")
    if f.endswith("fastpath/worker.rs") and line > 0:
        st = "other"
        for start, s in wr:
            if line >= start:
                st = s
        return st
    if f.endswith("fastpath/worker_deliver.rs"):
        return "rewrite (L2 DSR)"
    if "/wire/" in f:
        if (fn or "").startswith("spillway_dataplane::wire::parse_ipv4"):
            return "parse"
        if in_main:
            return "prefetch pass (hint, hash, prefetch)"
        return "rewrite (L2 DSR)" if "deliver" in (fn or "") else "parse"
    if f.endswith("conntrack.rs") or f.endswith("shared/src/flow.rs"):
        return "prefetch pass (hint, hash, prefetch)" if in_main else "connection-table lookup"
    if f.endswith("stats.rs"):
        return "counters"
    if "control/snapshot.rs" in f or "shared/src/maglev.rs" in f:
        return "snapshot/backend access"
    if "benches/" in f:
        return "harness (packet_ir loop, set_flow)"
    fnn = fn or ""
    if in_main and f.endswith("fastpath/worker.rs"):
        return "prefetch pass (hint, hash, prefetch)"
    for key, s in [("ipv4_info", "parse"), ("ConnTable::find", "connection-table lookup"), ("ConnTable<A>::find", "connection-table lookup"), ("MemBuf", "harness (MemBuf accessors; an mbuf's are inlined)"), ("Worker::select", "connection-table lookup"),
                   ("Worker::deliver", "rewrite (L2 DSR)"), ("wire::parse_ipv4", "parse"), ("EthernetFrame", "parse"), ("Worker::service_of", "service lookup (snapshot)"), ("Worker::process", "dispatch (process glue)"), ("Worker::decide", "dispatch (process glue)")]:
        if key in fnn:
            return s
    return "harness (packet_ir loop, set_flow) and library code in it"


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
