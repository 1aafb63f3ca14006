#!/usr/bin/env python3
"""Hostile flow-sync messages for the e2e test `fleet_sync_security` (scripts/e2e/fleet.sh).

An independent writer of the message layout of shared/src/sync.rs (version 2): 88-byte
header naming sender and recipient, 64-byte records, HMAC-SHA-256 tag. Sends, to TARGET
(IP:PORT), one message per kind given with --kind, each carrying one record that would
steer client CLIENT:PORT of VIP:VPORT/tcp to ENDPOINT:

    forged     random tag
    wrongkey   tagged with another key
    stale      the right key, sent-at 10 minutes ago (from --source if given)
    unknown    the right key, fresh, from an address that is not a peer
    oldversion the right key, fresh, version 1's layout (from --source if given)
    peer       the right key, fresh, from --source (a peer's address: the positive
               control, installed), then the same bytes again (a replay)

Every message names --source (or 0.0.0.0:0) as its sender and TARGET as its recipient.

Prints one line per message sent.
"""
import argparse
import hashlib
import hmac
import ipaddress
import os
import socket
import struct
import time


def record(client, cport, vip, vport, endpoint):
    def a16(ip):
        return int(ipaddress.IPv4Address(ip)).to_bytes(16, "big")
    return struct.pack(">BBBBHHIB3x", 1, 4, 6, 2, cport, vport, 600_000, 0) + a16(client) + a16(vip) + a16(endpoint)


def addr16(ip):
    return int(ipaddress.IPv4Address(ip)).to_bytes(16, "big")


def message(key, sender, seq, sent_ms, rec, frm, to, version=2):
    """Version 2: sender and recipient addresses, family 4, request 0 (a record message)."""
    head = b"SPWS" + struct.pack(">BBHQQQQ", version, 1, 1, sender, seq, sent_ms, 0)
    if version == 2:
        head += addr16(frm[0]) + addr16(to[0]) + struct.pack(">HHB3xQ", frm[1], to[1], 4, 0)
    body = head + rec
    return body + hmac.new(key, body, hashlib.sha256).digest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key-file", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--client-port", type=int, required=True)
    ap.add_argument("--vip", required=True)
    ap.add_argument("--vip-port", type=int, default=80)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--kind", action="append", required=True)
    ap.add_argument("--source", help="IP:PORT to send `peer` messages from (a local address)")
    a = ap.parse_args()
    key = open(a.key_file, "rb").read().strip()
    host, port = a.target.rsplit(":", 1)
    to = (host, int(port))
    rec = record(a.client, a.client_port, a.vip, a.vip_port, a.endpoint)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer = None
    frm = ("0.0.0.0", 0)
    if a.source:
        ip, p = a.source.rsplit(":", 1)
        frm = (ip, int(p))
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        peer.bind(frm)
    now = int(time.time() * 1000)
    sender = int.from_bytes(os.urandom(8), "big")
    seq = now * 1000
    for kind in a.kind:
        seq += 1
        if kind == "forged":
            m = message(key, sender, seq, now, rec, frm, to)
            m = m[:-32] + os.urandom(32)
        elif kind == "wrongkey":
            m = message(os.urandom(32), sender, seq, now, rec, frm, to)
        elif kind == "stale":
            m = message(key, sender, seq, now - 600_000, rec, frm, to)
        elif kind == "oldversion":
            m = message(key, sender, seq, now, rec, frm, to, version=1)
        elif kind in ("unknown", "peer"):
            m = message(key, sender, seq, now, rec, frm, to)
        else:
            raise SystemExit(f"unknown kind {kind}")
        (peer if peer is not None and kind != "unknown" else s).sendto(m, to)
        if kind == "peer":
            time.sleep(0.05)
            peer.sendto(m, to)
        print(f"sent {kind} ({len(m)} bytes) to {a.target}")


if __name__ == "__main__":
    main()
