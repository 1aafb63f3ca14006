#!/usr/bin/env python3
"""Writes a pcap of client -> VIP UDP datagrams carrying QUIC short-header (1-RTT) packets
for the QUIC-LB benchmark (benches/e2e.sh quic), or the same datagrams as plain UDP.

    gen_quic_pcap.py --out FILE [--flows N] [--size 64] [--vip 10.0.0.100] [--port 443]
                     [--codepoint C --server-id-length S --nonce-length L [--key HEX]]
                     [--server-ids 0001,0002,...]

Flows as benches/gen_pcap.py: flow i has source 10.1.0.0/16 + i // 4096, source port
1024 + i % 4096, one datagram per flow. With --codepoint, each datagram is a short-header
packet (RFC 9000 §17.3.1: first octet 0b01xxxxxx) whose destination connection ID is a
QUIC-LB CID (draft-ietf-quic-load-balancers-19 §5, encoded by scripts/lib/quic_lb.py, an
implementation independent of Spillway's) of server ID --server-ids[i % n] and a nonce
of its own; without it, the same bytes with a zero DCID (a service without QUIC-LB never
reads them). The rest of the payload is filler (packet number and "protected" payload).
Sizes are frame lengths without FCS; IPv4 header checksum and UDP checksum are correct.
"""
import argparse
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "scripts", "lib")]
from gen_pcap import csum  # noqa: E402


def udp_frame(src, dst, sport, dport, payload, size, seq):
    l2 = bytes.fromhex("020000000001") + bytes.fromhex("020000000099") + struct.pack("!H", 0x0800)
    pad = max(size - len(l2) - 28 - len(payload), 0)
    payload = payload + bytes((i * 7) & 0xFF for i in range(pad))
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    pseudo = struct.pack("!IIBBH", src, dst, 0, 17, len(udp))
    c = csum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    ip = struct.pack("!BBHHHBBHII", 0x45, 0, 20 + len(udp), seq & 0xFFFF, 0x4000, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return l2 + ip + udp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--flows", type=int, default=1000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--vip", default="10.0.0.100")
    ap.add_argument("--port", type=int, default=443)
    ap.add_argument("--codepoint", type=int)
    ap.add_argument("--server-id-length", type=int, default=2)
    ap.add_argument("--nonce-length", type=int, default=6)
    ap.add_argument("--key", help="AES-128 key, 32 hex digits (encrypted); none: plaintext")
    ap.add_argument("--server-ids", default="0001,0002,0003,0004")
    ap.add_argument("--cid-length", type=int, default=20, help="DCID length of the plain-UDP datagrams")
    a = ap.parse_args()
    vip = struct.unpack("!I", bytes(int(x) for x in a.vip.split(".")))[0]
    if a.codepoint is not None:
        from quic_lb import QuicLb
        lb = QuicLb(a.codepoint, a.server_id_length, a.nonce_length, bytes.fromhex(a.key) if a.key else None)
        sids = [bytes.fromhex(s) for s in a.server_ids.split(",")]
    with open(a.out, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(a.flows):
            src = (10 << 24) | (1 << 16) | (i // 4096)
            if a.codepoint is not None:
                nonce = struct.pack("!Q", i + 1)[-a.nonce_length:].rjust(a.nonce_length, b"\0")
                cid = lb.encode(sids[i % len(sids)], nonce)
                assert lb.decode(cid) == sids[i % len(sids)]
            else:
                cid = bytes(a.cid_length)
            payload = bytes([0x40 | (i & 0x03)]) + cid + struct.pack("!H", i & 0xFFFF)
            fr = udp_frame(src, vip, 1024 + i % 4096, a.port, payload, a.size, i)
            f.write(struct.pack("<IIII", 0, i, len(fr), len(fr)) + fr)


if __name__ == "__main__":
    main()
