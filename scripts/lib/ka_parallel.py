#!/usr/bin/env python3
"""Parallel long-lived keep-alive HTTP clients for the fleet e2e tests (scripts/lib/fleet.sh).

Opens --conns TCP connections at once (one thread each) and, on each, sends a GET every
--interval seconds for --duration seconds over the SAME socket (never reconnects). One
TSV record per request, the format of keepalive_client.py plus the time:

    keepalive  <client>  <conn-id>  <seq>  <status>  <backend>  <local-port>  <error>  <unix-time>

After a failure the connection is closed and its remaining requests are not made (the
record's error says why). Prints "ready" on stderr once every connection is open.
"""
import argparse
import socket
import sys
import threading
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
from keepalive_client import read_response, backend_of  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--conns", type=int, default=40)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=5.0)
    a = ap.parse_args()
    lock = threading.Lock()
    out = sys.stdout
    opened = threading.Barrier(a.conns + 1)

    def emit(line):
        with lock:
            out.write(line + "\n")
            out.flush()

    def conn(i):
        cid = f"{a.client}-p{i}"
        try:
            s = socket.create_connection((a.host, a.port), timeout=a.timeout)
            s.settimeout(a.timeout)
        except OSError as e:
            emit(f"keepalive\t{a.client}\t{cid}\t1\t000\t-\t-\tconnect:{type(e).__name__}\t{time.time():.3f}")
            opened.wait()
            return
        lport = s.getsockname()[1]
        opened.wait()
        req = f"GET / HTTP/1.1\r\nHost: {a.host}\r\n\r\n".encode()
        buf = b""
        end = time.time() + a.duration
        seq = 0
        while time.time() < end:
            seq += 1
            try:
                s.sendall(req)
                status, body, buf = read_response(s, buf)
                emit(f"keepalive\t{a.client}\t{cid}\t{seq}\t{status:03d}\t{backend_of(body)}\t{lport}\t-\t{time.time():.3f}")
            except (OSError, ValueError, ConnectionError) as e:
                emit(f"keepalive\t{a.client}\t{cid}\t{seq}\t000\t-\t{lport}\t{type(e).__name__}\t{time.time():.3f}")
                break
            time.sleep(a.interval)
        s.close()

    threads = [threading.Thread(target=conn, args=(i,), daemon=True) for i in range(a.conns)]
    for t in threads:
        t.start()
    opened.wait()
    print("ready", file=sys.stderr, flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
