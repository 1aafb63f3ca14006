"""QUIC-LB connection IDs (draft-ietf-quic-load-balancers-19 §5) for the e2e QUIC test
servers: plaintext, AES-128-ECB single pass (server ID + nonce = 16 octets) and the
four-pass Feistel network otherwise. An implementation independent of Spillway's (Rust,
shared/src/quic_lb.rs); `python3 quic_lb.py` checks it against the draft's test vectors.
"""
import os
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


class QuicLb:
    """One configuration: codepoint 0-6, server ID and nonce lengths, key (16 bytes) or None."""

    def __init__(self, codepoint, sid_len, nonce_len, key=None):
        assert 0 <= codepoint <= 6 and 1 <= sid_len <= 15 and 4 <= nonce_len <= 18 and sid_len + nonce_len <= 19
        self.codepoint, self.sid_len, self.nonce_len = codepoint, sid_len, nonce_len
        self.length = sid_len + nonce_len
        self._enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor() if key else None
        self._dec = Cipher(algorithms.AES(key), modes.ECB()).decryptor() if key else None

    def _aes(self, block):
        return self._enc.update(block)

    def _round(self, pass_no, half, half_len):
        block = bytes(half[:half_len]) + bytes(14 - half_len) + bytes([self.length, pass_no])
        return self._aes(block)[:half_len]

    def _split(self, body):
        n = len(body)
        h = (n + 1) // 2
        left, right = bytearray(body[:h]), bytearray(body[n // 2:])
        if n % 2:
            left[-1] &= 0xF0
            right[0] &= 0x0F
        return left, right, h

    def _join(self, left, right):
        n = self.length
        if n % 2:
            return bytes(left[:-1]) + bytes([left[-1] | right[0]]) + bytes(right[1:])
        return bytes(left) + bytes(right)

    def _feistel(self, body, passes, decrypt):
        odd = self.length % 2
        left, right, h = self._split(body)
        for p in passes:
            # passes 1 and 3 change the right half, 2 and 4 the left
            if p in (1, 3):
                right = bytearray(a ^ b for a, b in zip(right, self._round(p, left, h)))
                if odd:
                    right[0] &= 0x0F
            else:
                left = bytearray(a ^ b for a, b in zip(left, self._round(p, right, h)))
                if odd:
                    left[-1] &= 0xF0
        return self._join(left, right)

    def encode(self, sid, nonce=None):
        """A CID for server ID `sid` (bytes); the first octet self-describes the length."""
        nonce = os.urandom(self.nonce_len) if nonce is None else nonce
        assert len(sid) == self.sid_len and len(nonce) == self.nonce_len
        body = bytes(sid) + bytes(nonce)
        if self._enc is None:
            pass
        elif self.length == 16:
            body = self._aes(body)
        else:
            body = self._feistel(body, (1, 2, 3, 4), False)
        return bytes([(self.codepoint << 5) | self.length]) + body

    def decode(self, cid):
        """The server ID of `cid`, or None when it is not of this configuration."""
        if len(cid) < 1 + self.length or cid[0] >> 5 != self.codepoint:
            return None
        body = bytes(cid[1:1 + self.length])
        if self._enc is None:
            plain = body
        elif self.length == 16:
            plain = self._dec.update(body)
        else:
            plain = self._feistel(body, (4, 3, 2, 1), True)
        return plain[:self.sid_len]


def _self_test():
    key = bytes.fromhex("8f95f09245765f80256934e50c66207f")
    vectors = [  # (codepoint, sid, nonce, key, cid): the draft's Appendix vectors
        (0, "c4605e", "4504cc4f", None, "07c4605e4504cc4f"),
        (0, "ed793a", "ee080dbf", key, "0720b1d07b359d3c"),
        (1, "ed793a51d49b8f5fab65", "ee080dbf48", key, "2fcc381bc74cb4fbad2823a3d1f8fed2"),
        (2, "ed793a51d49b8f5f", "ee080dbf48c0d1e5", key, "504dd2d05a7b0de9b2b9907afb5ecf8cc3"),
        (0, "ed793a51d49b8f5fab", "ee080dbf48c0d1e55d", key, "125779c9cc86beb3a3a4a3ca96fce4bfe0cdbc"),
        (0, "31441a", "9c69c275", bytes.fromhex("fdf726a9893ec05c0632d3956680baf0"), "0767947d29be054a"),
    ]
    for cp, sid, nonce, k, cid in vectors:
        lb = QuicLb(cp, len(sid) // 2, len(nonce) // 2, k)
        got = lb.encode(bytes.fromhex(sid), bytes.fromhex(nonce)).hex()
        assert got == cid, (sid, got, cid)
        assert lb.decode(bytes.fromhex(cid)).hex() == sid
    print("quic_lb.py: %d draft vectors ok" % len(vectors))


if __name__ == "__main__":
    _self_test()
    sys.exit(0)
