"""QUIC clients for the e2e test `quic` (aioquic, sans-IO, one thread per connection):
each connection handshakes with VIP:PORT, asks "who" on a stream (the server answers its
name), then migrates: it switches to another connection ID the server issued
(NEW_CONNECTION_ID) and rebinds to a new UDP source port (and --migrate-addr, if given),
and asks again. One line per
connection on stdout: index, first answer's server, second answer's server (or "-" on a
timeout), source ports, result (ok = both answers from the same server).

  quic_migrate_client.py --vip 10.200.0.100 --port 443 --conns 40
"""
import argparse
import select
import socket
import ssl
import threading
import time

from aioquic.quic import events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

ALPN = "spw-echo"


class Client:
    def __init__(self, vip, port, timeout, migrate_addr):
        cfg = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], verify_mode=ssl.CERT_NONE, server_name="spillway-e2e", idle_timeout=10.0)
        self.c = QuicConnection(configuration=cfg)
        self.addr = (vip, port)
        self.timeout = timeout
        self.migrate_addr = migrate_addr
        self.sock = self._socket("0.0.0.0")
        self.c.connect(self.addr, now=time.time())
        self.answers = {}
        self.handshake = False
        self.closed = False

    def _socket(self, addr):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, 0))
        s.setblocking(False)
        return s

    def port(self):
        return self.sock.getsockname()[1]

    def _flush(self):
        for data, addr in self.c.datagrams_to_send(now=time.time()):
            try:
                self.sock.sendto(data, addr)
            except OSError:
                pass

    def _events(self):
        while True:
            ev = self.c.next_event()
            if ev is None:
                return
            if isinstance(ev, events.HandshakeCompleted):
                self.handshake = True
            elif isinstance(ev, events.StreamDataReceived):
                self.answers[ev.stream_id] = self.answers.get(ev.stream_id, b"") + ev.data
            elif isinstance(ev, events.ConnectionTerminated):
                self.closed = True

    def run_until(self, done):
        deadline = time.time() + self.timeout
        while not done() and not self.closed and time.time() < deadline:
            self._flush()
            t = self.c.get_timer()
            wait = max(0.0, min(deadline, t if t is not None else deadline) - time.time())
            r, _, _ = select.select([self.sock], [], [], min(wait, 0.1))
            if r:
                while True:
                    try:
                        data, addr = self.sock.recvfrom(65536)
                    except BlockingIOError:
                        break
                    self.c.receive_datagram(data, addr, now=time.time())
            t = self.c.get_timer()
            if t is not None and t <= time.time():
                self.c.handle_timer(now=time.time())
            self._events()
        self._flush()
        return done()

    def ask(self):
        sid = self.c.get_next_available_stream_id()
        self.c.send_stream_data(sid, b"who", end_stream=True)
        ok = self.run_until(lambda: sid in self.answers)
        return self.answers.get(sid, b"-").decode(errors="replace").split(" ")[0] if ok else "-"

    def migrate(self):
        self.c.change_connection_id()
        old = self.sock
        self.sock = self._socket(self.migrate_addr or "0.0.0.0")
        old.close()


def one(i, a, out):
    try:
        cl = Client(a.vip, a.port, a.timeout, a.migrate_addr)
        p1 = cl.port()
        if not cl.run_until(lambda: cl.handshake):
            out[i] = "%d\t-\t-\t%d\t-\thandshake_failed" % (i, p1)
            return
        first = cl.ask()
        cl.migrate()
        p2 = cl.port()
        second = cl.ask() if first != "-" else "-"
        res = "ok" if first != "-" and first == second else "broken"
        out[i] = "%d\t%s\t%s\t%d\t%d\t%s" % (i, first, second, p1, p2, res)
        cl.c.close()
        cl._flush()
    except Exception as e:  # a crash of one client is a failed connection, reported
        out[i] = "%d\t-\t-\t-\t-\terror %r" % (i, e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vip", required=True)
    ap.add_argument("--port", type=int, default=443)
    ap.add_argument("--conns", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds per step")
    ap.add_argument("--migrate-addr", help="source address after the migration (default: same address, new port)")
    a = ap.parse_args()
    out = {}
    for start in range(0, a.conns, a.parallel):
        ts = [threading.Thread(target=one, args=(i, a, out)) for i in range(start, min(a.conns, start + a.parallel))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    for i in range(a.conns):
        print(out.get(i, "%d\t-\t-\t-\t-\tnot_run" % i), flush=True)


if __name__ == "__main__":
    main()
