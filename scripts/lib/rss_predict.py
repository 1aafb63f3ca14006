#!/usr/bin/env python3
"""RSS placement check of the e2e test `pci` (scripts/e2e/pci.sh).

Reads `spillwayctl status --json` (the port's RSS key and redirection table as the device
reports them) and `spillwayctl flows show --json` (which worker holds each entry), computes
for every IPv4 TCP entry the worker RSS gives it -- Toeplitz over (source address,
destination address, source port, destination port) under the key, low bits of the hash
indexing the table (Microsoft, "Verifying the RSS Hash Calculation"; written here apart
from the daemon's sync/placement.rs) -- and prints one summary line:

    placement: N of M entries on the predicted worker; per worker: 0=A 1=B; duplicates: D

`--state S` keeps only entries in state S (e.g. `synced`); `--require-all` exits 1 unless
every entry is on its predicted worker, no flow is held by two workers, and M > 0.
"""
import argparse
import ipaddress
import json
import sys


def toeplitz(key: bytes, data: bytes) -> int:
    """32-bit Toeplitz hash: for each set input bit (MSB first) XOR the 32 key bits there."""
    k = int.from_bytes(key, "big")
    klen = len(key) * 8
    h = 0
    for i in range(len(data) * 8):
        if data[i // 8] >> (7 - i % 8) & 1:
            # key bits i .. i+31 (bits past the key's end count as zero)
            shift = klen - 32 - i
            w = (k >> shift) if shift >= 0 else (k << -shift)
            h ^= w & 0xFFFFFFFF
    return h


def selftest():
    key = bytes.fromhex("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")
    d = ipaddress.ip_address("66.9.149.187").packed + ipaddress.ip_address("161.142.100.80").packed
    assert toeplitz(key, d) == 0x323E8FC2
    assert toeplitz(key, d + (2794).to_bytes(2, "big") + (1766).to_bytes(2, "big")) == 0x51CCC178


def split(ep):
    host, port = ep.rsplit(":", 1)
    return ipaddress.ip_address(host.strip("[]")), int(port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--status", required=True)
    ap.add_argument("--flows", required=True)
    ap.add_argument("--port", type=int, default=0, help="index of the port in status")
    ap.add_argument("--state", default=None)
    ap.add_argument("--require-all", action="store_true")
    a = ap.parse_args()
    selftest()
    st = json.load(open(a.status))
    rss = st["ports"][a.port]["rss"]
    key, reta = bytes.fromhex(rss["key"]), rss["reta"]
    if not key or not reta:
        print(f"placement: the device reports no key or RETA (key {len(key)} bytes, RETA {len(reta)})")
        return 1 if a.require_all else 0
    flows = json.load(open(a.flows))["entries"]
    seen, ok, total, per_worker, wrong = {}, 0, 0, {}, []
    for e in flows:
        if e["proto"] != 6 or (a.state and e["state"] != a.state):
            continue
        (src, sport), (dst, dport) = split(e["client"]), split(e["vip"])
        if src.version != 4:
            continue
        h = toeplitz(key, src.packed + dst.packed + sport.to_bytes(2, "big") + dport.to_bytes(2, "big"))
        want = reta[h & (len(reta) - 1)]
        total += 1
        per_worker[e["worker"]] = per_worker.get(e["worker"], 0) + 1
        seen.setdefault((e["client"], e["vip"]), []).append(e["worker"])
        if e["worker"] == want:
            ok += 1
        elif len(wrong) < 5:
            wrong.append(f"{e['client']} -> {e['vip']} on worker {e['worker']}, RSS gives {want}")
    dups = sum(1 for w in seen.values() if len(w) > 1)
    pw = " ".join(f"{w}={n}" for w, n in sorted(per_worker.items()))
    print(f"placement: {ok} of {total} entries on the predicted worker; per worker: {pw or '-'}; flows on more than one worker: {dups}")
    for w in wrong:
        print(f"  misplaced: {w}")
    if a.require_all and (total == 0 or ok != total or dups):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
