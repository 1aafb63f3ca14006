#!/usr/bin/env python3
"""Writes a pcap of client -> VIP TCP packets for the Spillway benchmarks (no third-party deps).

    gen_pcap.py --out FILE [--flows N] [--size 64 | --imix] [--flags ack|syn|handshake]
                [--vip 10.0.0.100] [--port 80] [--vlan ID] [--packets-per-flow K]
                [--first-flow F] [--ipv6]

One packet per flow per round (K rounds, default 1), flows in order, so a replayed
(infinite_rx) capture touches every flow once per round. Flows F..F+N (F = --first-flow,
default 0: disjoint flow sets for several RX queues, as RSS spreads them). Flow i: source
10.1.0.0/16 + i // 4096, source port 1024 + i % 4096, destination VIP:port.
Sizes are frame lengths without FCS (64-byte frames = 64 bytes of data, as testpmd's
txonly default). IMIX: 7:4:1 of 64, 570 and 1514 bytes (simple IMIX, "64/570/1514").
--flags ack (default) sends ACK packets: the first one of a flow creates its connection
entry, later ones hit it (established traffic). --flags syn sends SYNs: every packet is a
new connection (the new-connection path, as a SYN flood). --flags handshake sends, per flow
and round, a SYN then an ACK: every pair is a new connection that is confirmed (the path
that fleet flow sync records), replayed rounds included (a SYN always starts a new one).
IPv4 header checksum and TCP checksum (with pseudo-header) are correct.
--ipv6: the same flows over IPv6 (source fd01::/64 + i // 4096, VIP fd00::100 unless --vip
names an IPv6 one); the smallest frame is 74 bytes (14 + 40 + 20), so --size 64 gives 74.
"""
import argparse
import ipaddress
import struct
import sys

IMIX = [64] * 7 + [570] * 4 + [1514]


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def frame(src: int, dst: int, sport: int, dport: int, flags: int, size: int, vlan, seq: int) -> bytes:
    l2 = bytes.fromhex("020000000001") + bytes.fromhex("020000000099")
    if vlan is not None:
        l2 += struct.pack("!HH", 0x8100, vlan & 0x0FFF)
    l2 += struct.pack("!H", 0x0800)
    ip_len = max(size - len(l2), 40)
    payload = bytes((i * 7) & 0xFF for i in range(ip_len - 40))
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 1 if flags & 0x10 else 0, 0x50, flags, 65535, 0, 0) + payload
    pseudo = struct.pack("!IIBBH", src, dst, 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBHII", 0x45, 0, ip_len, seq & 0xFFFF, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    f = l2 + ip + tcp
    return f + b"\0" * (size - len(f)) if len(f) < size else f


def frame6(src: int, dst: int, sport: int, dport: int, flags: int, size: int, seq: int) -> bytes:
    """An IPv6 TCP frame (RFC 8200 header, TCP checksum over the RFC 8200 §8.1 pseudo-header)."""
    l2 = bytes.fromhex("020000000001") + bytes.fromhex("020000000099") + struct.pack("!H", 0x86DD)
    tcp_len = max(size - len(l2) - 40, 20)
    payload = bytes((i * 7) & 0xFF for i in range(tcp_len - 20))
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 1 if flags & 0x10 else 0, 0x50, flags, 65535, 0, 0) + payload
    pseudo = src.to_bytes(16, "big") + dst.to_bytes(16, "big") + struct.pack("!I3xB", len(tcp), 6)
    tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + src.to_bytes(16, "big") + dst.to_bytes(16, "big")
    return l2 + ip + tcp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--flows", type=int, default=1000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--imix", action="store_true")
    ap.add_argument("--flags", choices=["ack", "syn", "handshake"], default="ack")
    ap.add_argument("--vip", default="10.0.0.100")
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--vlan", type=int)
    ap.add_argument("--packets-per-flow", type=int, default=1)
    ap.add_argument("--first-flow", type=int, default=0)
    ap.add_argument("--ipv6", action="store_true")
    a = ap.parse_args()
    if a.flows < 1 or a.first_flow < 0 or a.first_flow + a.flows > 65536 * 4096:
        ap.error("--first-flow + --flows must be 1..268435456")
    if not a.imix and not 60 <= a.size <= 9000:
        ap.error("--size must be 60..9000")
    if a.ipv6 and a.vip == "10.0.0.100":
        a.vip = "fd00::100"
    vip = int(ipaddress.IPv6Address(a.vip) if a.ipv6 else ipaddress.IPv4Address(a.vip))
    seqs = {"syn": [0x02], "ack": [0x10], "handshake": [0x02, 0x10]}[a.flags]
    n = 0
    with open(a.out, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for r in range(a.packets_per_flow):
            for i in range(a.first_flow, a.first_flow + a.flows):
                for flags in seqs:
                    size = IMIX[n % len(IMIX)] if a.imix else a.size
                    if a.ipv6:
                        src = (0xFD01 << 112) + (i >> 12)
                        f = frame6(src, vip, 1024 + (i & 0xFFF), a.port, flags, size, r)
                    else:
                        src = 0x0A010000 + (i >> 12)
                        f = frame(src, vip, 1024 + (i & 0xFFF), a.port, flags, size, a.vlan, r)
                    out.write(struct.pack("<IIII", n // 1000000, n % 1000000, len(f), len(f)))
                    out.write(f)
                    n += 1
    print(f"{a.out}: {n} packets, {a.flows} flows, {'IMIX' if a.imix else str(a.size) + ' bytes'}, {a.flags}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
