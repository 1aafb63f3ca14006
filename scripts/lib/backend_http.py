#!/usr/bin/env python3
"""Demo/e2e HTTP backend for the Spillway topology (scripts/lib/topology.sh).

Answers every GET with a small text body whose first line is `backend=<NAME>`,
so a client can tell which backend served it. Logs one line per request to
--log (tab separated):

    <unix-time>  <name>  <client-ip>  <client-port>  <local-ip>  <method>  <path>  <status>  <conn-seq>

`local-ip` is the address the request arrived on (the VIP for load-balanced
traffic, the backend's own address for direct/health-check traffic); IPv4 addresses
are logged as such also when the server listens on `::` (dual stack), not in their
IPv4-mapped form `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2);
`conn-seq` is the request's number on its TCP connection (1, 2, ...).

`GET /slow/<S>` is a long download: a body of S x 10 chunks of 1,000 bytes (first line
`backend=<NAME>`), one chunk every 0.1 s, so it lasts about S seconds (e2e `restart`).

Concurrency: one thread per connection (ThreadingHTTPServer).
Keep-alive: on by default (HTTP/1.1, persistent connections, Content-Length);
`--no-keepalive` answers with `Connection: close` and closes after every
response.  SIGTERM/SIGINT stop the server cleanly.
"""
import argparse
import http.server
import signal
import socket
import sys
import threading
import time


def plain(addr: str) -> str:
    """`addr` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack socket
    reports for IPv4 peers) written as the IPv4 address it maps."""
    return addr[7:] if addr.lower().startswith("::ffff:") and "." in addr else addr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--bind", default="0.0.0.0",
                    help="address to listen on; '::' listens on IPv6 and IPv4 (dual stack)")
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--log", required=True)
    ap.add_argument("--no-keepalive", action="store_true")
    ap.add_argument("--idle-timeout", type=float, default=30.0,
                    help="close an idle keep-alive connection after this many seconds")
    args = ap.parse_args()

    log = open(args.log, "a", buffering=1, encoding="utf-8")
    lock = threading.Lock()
    keepalive = not args.no_keepalive

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "spillway-demo-backend"
        timeout = args.idle_timeout

        def setup(self):
            super().setup()
            self.conn_seq = 0

        def _answer(self, with_body):
            self.conn_seq += 1
            status = 200
            if self.path.startswith("/status/"):
                try:
                    status = int(self.path.split("/")[2])
                except ValueError:
                    status = 400
            local_ip = plain(self.connection.getsockname()[0])
            body = (f"backend={args.name}\n"
                    f"client={plain(self.client_address[0])}:{self.client_address[1]}\n"
                    f"local={local_ip}\nconn_seq={self.conn_seq}\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Backend", args.name)
            if not keepalive:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if with_body:
                self.wfile.write(body)
            line = "\t".join([f"{time.time():.6f}", args.name, plain(self.client_address[0]),
                              str(self.client_address[1]), local_ip, self.command,
                              self.path, str(status), str(self.conn_seq)])
            with lock:
                log.write(line + "\n")

        def _slow(self):
            self.conn_seq += 1
            try:
                secs = max(1, min(600, int(self.path.split("/")[2])))
            except (IndexError, ValueError):
                secs = 10
            chunks = secs * 10
            head = f"backend={args.name}\n".encode()
            first = head + b"x" * (1000 - len(head))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(chunks * 1000))
            self.send_header("X-Backend", args.name)
            self.end_headers()
            status = 200
            try:
                for i in range(chunks):
                    self.wfile.write(first if i == 0 else b"x" * 1000)
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                status = 499  # the client went away mid-body
                self.close_connection = True
            local_ip = plain(self.connection.getsockname()[0])
            line = "\t".join([f"{time.time():.6f}", args.name, plain(self.client_address[0]),
                              str(self.client_address[1]), local_ip, self.command,
                              self.path, str(status), str(self.conn_seq)])
            with lock:
                log.write(line + "\n")

        def do_GET(self):
            if self.path.startswith("/slow/"):
                self._slow()
                return
            self._answer(True)

        def do_HEAD(self):
            self._answer(False)

        def log_message(self, fmt, *a):  # silence stderr access log
            pass

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 128

    srv = Server((args.bind, args.port), Handler)

    def stop(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"{args.name}: listening on {args.bind}:{args.port} keepalive={keepalive}",
          file=sys.stderr, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        srv.server_close()
        log.close()


if __name__ == "__main__":
    main()
