#!/usr/bin/env python3
"""e2e HTTPS health endpoint for the Spillway topology (scripts/e2e.sh https-health).

Serves HTTPS on --port with the certificate --cert / key --key (self-signed in the
test): GET /healthz answers 200 with body `ok <NAME>`, anything else 404. One thread
per connection; HTTP/1.0 (closes after each response). Logs one line per request to
stderr. SIGTERM/SIGINT stop it.
"""
import argparse
import http.server
import signal
import ssl
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, default=8443)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    a = ap.parse_args()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/healthz"
            body = f"ok {a.name}\n".encode() if ok else b"not found\n"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            sys.stderr.write(f"{a.name} {self.client_address[0]} {fmt % args}\n")

    srv = http.server.ThreadingHTTPServer(("0.0.0.0", a.port), Handler)
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)

    def stop(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        srv.serve_forever()
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
