#!/usr/bin/env python3
"""Instructions per packet for each stage of the vector fast path, from two callgrind runs
of `packet_ir established` with different packet counts (the difference removes the
set-up: table zeroing, Maglev build, flow warm-up). docs/benchmarks.md "Per-stage budget".

    valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
        --callgrind-out-file=A.out target/release/examples/packet_ir established 100000
    (same with 300000 -> B.out)
    benches/cg_stages.py A.out 100000 B.out 300000

Costs are self costs per (function symbol, inlined source file, line). The whole vector
path is inlined into packet_ir's main, so a line's stage comes from its source file
(FILES), and in fastpath/worker/vector.rs from the function or stage comment whose lines
hold it (VECTOR_MARKS). Packets the general path decides (SYNs, or `PACKET_IR_GENERAL=1`)
show as "general path".
"""
import collections, sys

VECTOR = "fastpath/worker/vector.rs"
# (marker line in fastpath/worker/vector.rs, stage), in file order: a line belongs to the
# last marker above it.
VECTOR_MARKS = [
    ("pub fn plan_burst", "1 classify + service"),
    ("fn keyed4", "2 hash + prefetch"),
    ("pub fn decide_planned", "3 look up, update, rewrite"),
    ("fn fast_hit", "3 look up, update, rewrite"),
]

# Our files by path suffix, first match wins.
FILES = [
    ("wire/fast.rs", "1 classify + service"),
    ("fastpath/worker/svc_cache.rs", "1 classify + service"),
    ("fastpath/conntrack/prefetch.rs", "2 hash + prefetch"),
    ("shared/src/flow.rs", "2 hash + prefetch"),
    ("fastpath/conntrack/", "3 look up, update, rewrite"),
    ("fastpath/worker.rs", "3 look up, update, rewrite"),
    ("fastpath/stats.rs", "3 look up, update, rewrite"),
    ("fastpath/port.rs", "harness (MemBuf accessors; an mbuf's are inlined)"),
    ("benches/", "harness (packet_ir loop, set_flow)"),
]


def vector_ranges(path):
    src = open(path).read().splitlines()
    starts = []
    for name, stage in VECTOR_MARKS:
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


def stage(fn, fi, line, vr):
    f = fi or ""
    in_main = (fn or "").startswith("packet_ir::main")
    if not in_main:
        return "general path (not inlined: Worker::process and below)" if "spillway" in (fn or "") else "other (library functions: memcpy, ...)"
    if f.endswith(VECTOR) and line > 0:
        st = "1 classify + service"
        for start, s in vr:
            if line >= start:
                st = s
        return st
    for suffix, st in FILES:
        if suffix in f:
            return st
    return "library code inlined into the loop (slices, bounds checks)"


def main():
    a, na, b, nb = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    wr = vector_ranges(sys.argv[5] if len(sys.argv) > 5 else "dataplane/src/" + VECTOR)
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
