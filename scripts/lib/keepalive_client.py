#!/usr/bin/env python3
"""Keep-alive HTTP client for the Spillway demo/e2e (scripts/lib/topology.sh).

Opens --conns TCP connections one after another; on each it sends --requests
HTTP/1.1 GETs over the SAME socket (raw socket, never reconnects), reads each
response (Content-Length framing) and prints one TSV record per request:

    keepalive  <client>  <conn-id>  <seq>  <status>  <backend>  <local-port>  <error>

`backend` comes from the body's `backend=` line ("-" when unknown);
`status` is 000 when the request failed (error says why); after a failure the
rest of that connection's requests are reported as failed too ("conn-broken").
"""
import argparse
import time
import socket
import sys


def read_response(sock, buf):
    """Returns (status, body, rest-of-buffer). Raises on EOF/timeout/garbage."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("eof-before-headers")
        buf += chunk
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError("bad-status-line")
    status = int(parts[1])
    length = 0
    for h in lines[1:]:
        k, _, v = h.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    while len(buf) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("eof-in-body")
        buf += chunk
    return status, buf[:length], buf[length:]


def backend_of(body):
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("backend="):
            return line.split("=", 1)[1].strip() or "-"
    return "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", required=True, help="label printed in records")
    ap.add_argument("--host", default="10.200.0.100")
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--conns", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20, help="requests per connection")
    ap.add_argument("--timeout", type=float, default=3.0, help="connect/read timeout, seconds")
    ap.add_argument("--path", default="/")
    ap.add_argument("--interval", type=float, default=0.0, help="seconds between requests on a connection")
    a = ap.parse_args()
    out = sys.stdout
    for c in range(1, a.conns + 1):
        conn_id = f"{a.client}-ka{c}"
        broken = None
        lport = "-"
        sock = None
        try:
            sock = socket.create_connection((a.host, a.port), timeout=a.timeout)
            sock.settimeout(a.timeout)
            lport = str(sock.getsockname()[1])
        except OSError as e:
            broken = f"connect:{type(e).__name__}"
        buf = b""
        req = (f"GET {a.path} HTTP/1.1\r\nHost: {a.host}\r\n"
               f"User-Agent: spillway-keepalive-client\r\n\r\n").encode()
        for s in range(1, a.requests + 1):
            if s > 1 and a.interval > 0:
                time.sleep(a.interval)
            if broken:
                out.write(f"keepalive\t{a.client}\t{conn_id}\t{s}\t000\t-\t{lport}\t{broken}\n")
                broken = broken if broken.startswith(("connect", "conn-broken")) else "conn-broken"
                continue
            try:
                sock.sendall(req)
                status, body, buf = read_response(sock, buf)
                out.write(f"keepalive\t{a.client}\t{conn_id}\t{s}\t{status:03d}\t{backend_of(body)}\t{lport}\t-\n")
                out.flush()
            except (OSError, ValueError, ConnectionError) as e:
                out.write(f"keepalive\t{a.client}\t{conn_id}\t{s}\t000\t-\t{lport}\t{type(e).__name__}:{e}\n".replace(" ", "_"))
                broken = "conn-broken"
        if sock is not None:
            sock.close()
        out.flush()


if __name__ == "__main__":
    main()
