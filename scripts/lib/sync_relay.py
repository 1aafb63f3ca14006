#!/usr/bin/env python3
"""The sync relay attack (a review and QA finding) for the e2e test `fleet_sync_security` (scripts/e2e/fleet.sh).

A tap on host A's switch port: every flow-sync datagram FROM -> TO (IP:PORT, host S to
host A) seen on TAP_IF (the switch side of A's link, in the switch's namespace) is re-sent,
byte for byte, to RELAY_TO (host B) out of OUT_IF (the switch side of B's link) with
destination MAC OUT_MAC, once from each --source IP (a non-peer address, and S's own
address: a spoofed copy). It holds no key and changes no byte of the message.

Counts the datagrams relayed; writes the count to --count-file after each one. Runs until
SIGTERM.
"""
import argparse
import signal
import socket
import struct
import sys

ETH_P_IP = 0x0800
ETH_P_ALL = 0x0003


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(dst_mac, src_ip, src_port, dst_ip, dst_port, payload):
    udp = struct.pack("!HHHH", src_port, dst_port, 8 + len(payload), 0) + payload  # UDP checksum 0: none (IPv4)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return dst_mac + bytes.fromhex("020000000099") + struct.pack("!H", ETH_P_IP) + ip + udp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tap-if", required=True)
    ap.add_argument("--out-if", required=True)
    ap.add_argument("--out-mac", required=True)
    ap.add_argument("--from", dest="frm", required=True, help="IP:PORT of the sender (S)")
    ap.add_argument("--to", required=True, help="IP:PORT of the recipient (A)")
    ap.add_argument("--relay-to", required=True, help="IP:PORT the copies go to (B)")
    ap.add_argument("--source", action="append", required=True, help="IP the copies come from (repeatable)")
    ap.add_argument("--count-file", required=True)
    a = ap.parse_args()
    f_ip, f_port = a.frm.rsplit(":", 1)
    t_ip, t_port = a.to.rsplit(":", 1)
    r_ip, r_port = a.relay_to.rsplit(":", 1)
    want = (socket.inet_aton(f_ip), int(f_port), socket.inet_aton(t_ip), int(t_port))
    out_mac = bytes.fromhex(a.out_mac.replace(":", ""))
    # ETH_P_ALL: the frames the switch sends out of the port are seen only by taps of
    # every protocol (the kernel's dev_queue_xmit_nit).
    tap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    tap.bind((a.tap_if, 0))
    out = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    out.bind((a.out_if, 0))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    relayed = 0
    with open(a.count_file, "w") as f:
        f.write("0\n")
    print("relaying", flush=True)
    while True:
        buf = tap.recv(65535)
        if len(buf) < 42 or buf[12:14] != b"\x08\x00" or buf[23] != 17:
            continue
        ihl = (buf[14] & 0x0F) * 4
        src, dst = buf[26:30], buf[30:34]
        sport, dport = struct.unpack("!HH", buf[14 + ihl:18 + ihl])
        if (src, sport, dst, dport) != want:
            continue
        ulen = struct.unpack("!H", buf[18 + ihl:20 + ihl])[0]
        payload = buf[22 + ihl:14 + ihl + ulen]
        for s in a.source:
            out.send(frame(out_mac, s, int(f_port), r_ip, int(r_port), payload))
        relayed += 1
        with open(a.count_file, "w") as f:
            f.write(f"{relayed}\n")


if __name__ == "__main__":
    main()
