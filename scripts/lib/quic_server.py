"""A QUIC test server for the e2e test `quic` (aioquic, sans-IO loop): every connection ID
it issues (the Initial's SCID and every NEW_CONNECTION_ID) encodes its server ID under the
QUIC-LB configuration given (quic_lb.py). On each bidirectional stream it answers its
--name and the client address it saw, then closes the stream. Listens on --bind (the VIP,
held on lo: L2 DSR) on each --port, so its answers leave with the VIP as source address
(an unbound UDP socket would answer from the backend's own address).

  quic_server.py --name b1 --server-id 0b01 --key-file K --bind VIP --ports 443,4443 --log FILE
"""
import argparse
import os
import select
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quic_lb import QuicLb  # noqa: E402

from aioquic.buffer import Buffer  # noqa: E402
from aioquic.quic import events  # noqa: E402
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from aioquic.quic.connection import QuicConnection  # noqa: E402
from aioquic.quic.packet import QuicPacketType, pull_quic_header  # noqa: E402

ALPN = "spw-echo"


def self_signed(dirname):
    """A throwaway certificate and key (PEM files) for the TLS handshake."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spillway-e2e")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=7)).sign(key, hashes.SHA256()))
    cp, kp = os.path.join(dirname, "cert.pem"), os.path.join(dirname, "key.pem")
    with open(cp, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(kp, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cp, kp


class LbConnection(QuicConnection):
    """A server connection whose host connection IDs are QUIC-LB CIDs."""

    lb = None
    sid = None

    def __init__(self, **kw):
        super().__init__(**kw)
        cid = self.lb.encode(self.sid)
        self._host_cids[0].cid = cid
        self.host_cid = cid
        self._local_initial_source_connection_id = cid

    def _replenish_connection_ids(self):
        first = self._host_cid_seq
        super()._replenish_connection_ids()
        for c in self._host_cids:
            if c.sequence_number is not None and c.sequence_number >= first:
                c.cid = self.lb.encode(self.sid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--server-id", required=True, help="hex")
    ap.add_argument("--codepoint", type=int, default=0)
    ap.add_argument("--nonce-len", type=int, default=6)
    ap.add_argument("--key-file", help="32 hex digits; absent = plaintext")
    ap.add_argument("--ports", default="443")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    sid = bytes.fromhex(a.server_id)
    key = bytes.fromhex(open(a.key_file).read().strip()) if a.key_file else None
    LbConnection.lb = QuicLb(a.codepoint, len(sid), a.nonce_len, key)
    LbConnection.sid = sid
    cid_len = 1 + len(sid) + a.nonce_len
    certdir = tempfile.mkdtemp(prefix="spw-quic-")
    cert, keyf = self_signed(certdir)
    cfg = QuicConfiguration(is_client=False, alpn_protocols=[ALPN], connection_id_length=cid_len, idle_timeout=30.0)
    cfg.load_cert_chain(cert, keyf)
    socks = []
    for p in a.ports.split(","):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((a.bind, int(p)))
        s.setblocking(False)
        socks.append(s)
    log = open(a.log, "a", buffering=1)
    conns = {}  # host CID or client's initial DCID -> (connection, socket)
    live = set()
    print("quic_server %s listening on %s, server ID %s, CID length %d" % (a.name, a.ports, a.server_id, cid_len), flush=True)

    def flush(c, s):
        for data, addr in c.datagrams_to_send(now=time.time()):
            try:
                s.sendto(data, addr)
            except OSError:
                pass

    def handle_events(c, s):
        while True:
            ev = c.next_event()
            if ev is None:
                return
            if isinstance(ev, events.ConnectionIdIssued):
                conns[ev.connection_id] = (c, s)
            elif isinstance(ev, events.ConnectionIdRetired):
                conns.pop(ev.connection_id, None)
            elif isinstance(ev, events.StreamDataReceived) and ev.end_stream:
                peer = c._network_paths[0].addr if c._network_paths else ("?", 0)
                c.send_stream_data(ev.stream_id, ("%s %s:%d" % (a.name, peer[0], peer[1])).encode(), end_stream=True)
                log.write("%s\t%s\t%s:%d\t%s\n" % (time.time(), c.host_cid.hex(), peer[0], peer[1], ev.data.decode(errors="replace")))
            elif isinstance(ev, events.ConnectionTerminated):
                live.discard(c)
                for k in [k for k, v in conns.items() if v[0] is c]:
                    del conns[k]

    while True:
        timeout = 0.5
        now = time.time()
        for c in list(live):
            t = c.get_timer()
            if t is not None:
                timeout = max(0.0, min(timeout, t - now))
        r, _, _ = select.select(socks, [], [], timeout)
        for s in r:
            while True:
                try:
                    data, addr = s.recvfrom(65536)
                except BlockingIOError:
                    break
                try:
                    header = pull_quic_header(Buffer(data=data), host_cid_length=cid_len)
                except ValueError:
                    continue
                entry = conns.get(header.destination_cid)
                if entry is None:
                    if header.packet_type != QuicPacketType.INITIAL or len(data) < 1200:
                        log.write("%s\tunknown-dcid\t%s:%d\t%s\n" % (time.time(), addr[0], addr[1], header.destination_cid.hex()))
                        continue
                    c = LbConnection(configuration=cfg, original_destination_connection_id=header.destination_cid)
                    c._spw_sock = s
                    entry = (c, s)
                    conns[header.destination_cid] = entry
                    conns[c.host_cid] = entry
                    live.add(c)
                    log.write("%s\tnew\t%s:%d\t%s\n" % (time.time(), addr[0], addr[1], c.host_cid.hex()))
                c = entry[0]
                c.receive_datagram(data, addr, now=time.time())
                handle_events(c, c._spw_sock)
                flush(c, c._spw_sock)
        now = time.time()
        for c in list(live):
            t = c.get_timer()
            if t is not None and t <= now:
                c.handle_timer(now=now)
                handle_events(c, c._spw_sock)
                flush(c, c._spw_sock)


if __name__ == "__main__":
    main()
