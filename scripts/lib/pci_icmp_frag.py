#!/usr/bin/env python3
"""ICMP errors and fragments of tracked flows, for the e2e test `pci` (which requires n of n:
the worker RSS gives them hands them to the flow's worker, fastpath/worker/redirect.rs).

    send  --flows FLOWS.json --iface eth0 --src-mac M --dst-mac M [--max N]
    count --flows FLOWS.json --sent SENT.json --pcap b1=F1 --pcap b2=F2 ...

`send` takes up to N tracked TCP flows from `spillwayctl flows show --json` (half from each
worker when it can) and, for each,
sends on IFACE to Spillway's MAC (scapy):
  - an ICMP "fragmentation needed" (type 3 code 4, next-hop MTU 1400) from a router
    address (10.200.0.254) to the VIP, quoting the flow's return packet VIP:port -> client
    (RFC 792; what a router on the DSR return path sends);
  - one TCP segment of the flow (client -> VIP, 1,000 bytes of payload) in IPv4 fragments
    of 512 bytes (a unique IP ID per flow).
It writes what it sent (flow, its backend, IP ID) to stdout as JSON.

`count` reads the backends' captures and prints, per kind, how many reached the flow's own
backend, another backend, or none:

    icmp: N of M reached the flow's backend (other backend: X, none: Y)
    fragments: N of M datagrams complete at the flow's backend (split or elsewhere: X, none: Y)
"""
import argparse
import json
import sys

from scapy.all import ICMP, IP, TCP, Ether, Raw, fragment, rdpcap, sendp  # noqa: E402


def split(ep):
    host, port = ep.rsplit(":", 1)
    return host.strip("[]"), int(port)


def send(a):
    flows = [e for e in json.load(open(a.flows))["entries"] if e["proto"] == 6 and ":" not in split(e["client"])[0]]
    by_worker = {}
    for e in flows:
        by_worker.setdefault(e["worker"], []).append(e)
    per = max(1, a.max // max(1, len(by_worker)))
    flows = [e for w in sorted(by_worker) for e in by_worker[w][:per]][: a.max]
    sent = []
    frames = []
    for i, e in enumerate(flows):
        (cip, cport), (vip, vport) = split(e["client"]), split(e["vip"])
        quote = IP(src=vip, dst=cip, id=1000 + i, ttl=63) / TCP(sport=vport, dport=cport, flags="A", seq=1 + i)
        icmp = Ether(src=a.src_mac, dst=a.dst_mac) / IP(src="10.200.0.254", dst=vip) / ICMP(type=3, code=4, nexthopmtu=1400) / bytes(quote)[:28]
        ipid = 40000 + i
        seg = IP(src=cip, dst=vip, id=ipid) / TCP(sport=cport, dport=vport, flags="A", seq=100000 + i) / Raw(b"x" * 1000)
        frags = [Ether(src=a.src_mac, dst=a.dst_mac) / f for f in fragment(seg, fragsize=512)]
        frames.append(icmp)
        frames.extend(frags)
        sent.append({"client": e["client"], "backend": e["backend"], "worker": e["worker"], "ipid": ipid, "fragments": len(frags), "cport": cport, "cip": cip})
    sendp(frames, iface=a.iface, verbose=False, inter=0.05)
    json.dump(sent, sys.stdout)


def count(a):
    sent = json.load(open(a.sent))
    seen_icmp = {}   # (cip, cport) -> set of backends
    seen_frag = {}   # ipid -> {backend: fragments}
    for spec in a.pcap:
        name, path = spec.split("=", 1)
        try:
            pkts = rdpcap(path)
        except Exception:  # an empty or missing capture: nothing arrived there
            continue
        for p in pkts:
            if IP not in p:
                continue
            ip = p[IP]
            if ip.proto == 1 and ICMP in ip and ip[ICMP].type == 3 and ip[ICMP].code == 4:
                q = bytes(ip[ICMP].payload)
                if len(q) >= 24:
                    qdst = ".".join(str(b) for b in q[16:20])
                    qdport = int.from_bytes(q[22:24], "big")
                    seen_icmp.setdefault((qdst, qdport), set()).add(name)
            elif ip.flags.MF or ip.frag > 0:
                seen_frag.setdefault(ip.id, {}).setdefault(name, 0)
                seen_frag[ip.id][name] += 1
    ok_i = other_i = none_i = ok_f = other_f = none_f = 0
    for s in sent:
        at = seen_icmp.get((s["cip"], s["cport"]), set())
        if at == {s["backend"]}:
            ok_i += 1
        elif at:
            other_i += 1
        else:
            none_i += 1
        fr = seen_frag.get(s["ipid"], {})
        if fr.get(s["backend"], 0) == s["fragments"] and len(fr) == 1:
            ok_f += 1
        elif fr:
            other_f += 1
        else:
            none_f += 1
    n = len(sent)
    print(f"icmp: {ok_i} of {n} reached the flow's backend (other backend: {other_i}, none: {none_i})")
    print(f"fragments: {ok_f} of {n} datagrams complete at the flow's backend (split or elsewhere: {other_f}, none: {none_f})")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--flows", required=True)
    s.add_argument("--iface", required=True)
    s.add_argument("--src-mac", required=True)
    s.add_argument("--dst-mac", required=True)
    s.add_argument("--max", type=int, default=16)
    c = sub.add_parser("count")
    c.add_argument("--sent", required=True)
    c.add_argument("--pcap", action="append", default=[])
    a = ap.parse_args()
    send(a) if a.cmd == "send" else count(a)


if __name__ == "__main__":
    main()
