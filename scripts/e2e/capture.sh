# shellcheck shell=bash
# Drop capture e2e tests (docs/ctl.md "capture drops"), sourced by scripts/e2e.sh: known
# bad frames sent on a veth of the demo topology are caught by `spillwayctl capture drops`
# and read back from the pcapng file with tcpdump and an independent pcapng parser
# (python, below), the drop reason in each frame's comment.

# capture_send_frames: from client c1's eth0, one malformed TCP segment to the VIP (a valid
# IPv4 header whose total length leaves 13 of the 20 bytes of a TCP header: truncated_l4;
# a malformed IPv4 *header* never reaches Spillway here, the bridge's br_netfilter drops
# it) and one UDP datagram to 10.200.0.77 (neither a VIP nor a port address:
# not_for_vip), both to the Spillway port's MAC and carrying the marker SPWCAPTURE.
capture_send_frames() {
    nsx c1 "$SPW_PYTHON" - "$SPW_LB_MAC" "$SPW_VIP" <<'PY'
import socket, struct, sys
dst = bytes.fromhex(sys.argv[1].replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
src = s.getsockname()[4]
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff
eth = dst + src + b"\x08\x00"
def ipv4(proto, dst, body):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 1, 0, 64, proto, 0, socket.inet_aton("10.200.1.10"), socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + body
bad = ipv4(6, sys.argv[2], b"SPWCAPTURE-l4")  # 13 bytes where a 20-byte TCP header belongs
udp_payload = b"SPWCAPTURE-not-for-vip"
udp = struct.pack("!HHHH", 40000, 9, 8 + len(udp_payload), 0) + udp_payload
for f in (eth + bad, eth + ipv4(17, "10.200.0.77", udp)):
    s.send(f.ljust(60, b"\0"))
PY
}

# capture_comments FILE: "comment<TAB>marker" per frame of a pcapng FILE that carries the
# marker (a minimal pcapng reader: Enhanced Packet Blocks and their opt_comment).
capture_comments() {
    "$SPW_PYTHON" - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
assert d[:4] == b"\x0a\x0d\x0d\x0a", "not pcapng"
bo = "<" if d[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
i = 0
while i + 12 <= len(d):
    t, n = struct.unpack(bo + "II", d[i:i + 8])
    if t == 6:  # Enhanced Packet Block
        cap = struct.unpack(bo + "I", d[i + 20:i + 24])[0]
        data = d[i + 28:i + 28 + cap]
        o = i + 28 + ((cap + 3) & ~3)
        comment = ""
        while o + 4 <= i + n - 4:
            code, ln = struct.unpack(bo + "HH", d[o:o + 4])
            if code == 0: break
            if code == 1: comment = d[o + 4:o + 4 + ln].decode()
            o += 4 + ((ln + 3) & ~3)
        k = data.find(b"SPWCAPTURE")
        if k >= 0:
            print(comment + "\t" + data[k:k + 30].split(b"\0")[0].decode())
    i += n
PY
}

## capture_drops: a truncated TCP segment (truncated_l4) and a not_for_vip frame sent on a veth are caught by `capture drops -w FILE`, read back by tcpdump and a pcapng parser with the drop reason in the comment; `-w - | tcpdump -r -` streams; a client killed with SIGKILL ends its capture
e2e_capture_drops() {
    e2e_setup
    local file="$SPW_RUN_DIR/drops.pcapng" pid out comments
    "$SPILLWAYCTL_BIN" --socket "$SPW_SOCKET" capture drops --reason truncated_l4 --reason not_for_vip -w "$file" 2>"$SPW_RUN_DIR/capture.err" &
    pid=$!
    sleep 0.5
    capture_send_frames
    sleep 1
    kill -INT "$pid"; wait "$pid" || e2e_fail "capture drops exited non-zero: $(cat "$SPW_RUN_DIR/capture.err")"
    sed 's/^/    /' "$SPW_RUN_DIR/capture.err"
    out="$(tcpdump -nn -r "$file" 2>&1)" || e2e_fail "tcpdump cannot read $file: $out"
    echo "  tcpdump -r:"; printf '%s\n' "$out" | sed 's/^/    /' | head -20
    e2e_check "tcpdump reads the not_for_vip datagram to 10.200.0.77" _contains "$out" "10.200.0.77.9"
    comments="$(capture_comments "$file")"
    echo "  comments:"; printf '%s\n' "$comments" | sed 's/^/    /'
    e2e_check "the truncated segment carries reason=truncated_l4" _contains "$comments" $'reason=truncated_l4 worker=0\tSPWCAPTURE-l4'
    e2e_check "the not_for_vip frame carries reason=not_for_vip" _contains "$comments" $'reason=not_for_vip worker=0\tSPWCAPTURE-not-for-vip'

    # stdout, filtered by destination, ends after --count frames
    "$SPILLWAYCTL_BIN" --socket "$SPW_SOCKET" capture drops --vip 10.200.0.77 --count 1 -w - 2>/dev/null \
        | timeout 10 tcpdump -nn -r - >"$SPW_RUN_DIR/stream.txt" 2>&1 &
    pid=$!
    sleep 0.5
    capture_send_frames
    wait "$pid" || true
    e2e_check "-w - | tcpdump -r - shows the frame to 10.200.0.77 and only it ($(wc -l <"$SPW_RUN_DIR/stream.txt") lines)" \
        bash -c "grep -q '10.200.0.77.9' '$SPW_RUN_DIR/stream.txt' && ! grep -q '$SPW_VIP' '$SPW_RUN_DIR/stream.txt'"

    # a client that goes away without stopping: its capture ends after the 2 s lease
    "$SPILLWAYCTL_BIN" --socket "$SPW_SOCKET" capture drops -w /dev/null 2>/dev/null &
    pid=$!
    sleep 0.5
    kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
    local rc=0
    out="$(timeout 5 "$SPILLWAYCTL_BIN" --socket "$SPW_SOCKET" capture drops --count 1 -w /dev/null 2>&1)" || rc=$?
    e2e_check "within its lease, another capture is refused (exit $rc: $out)" bash -c "[[ $rc == 1 ]] && grep -q 'already running' <<<'$out'"
    sleep 2.5
    # (a new capture that starts runs until the SIGINT of `timeout`, then exits 0; one
    # refused exits 1 at once; `--count 0` is a usage error)
    e2e_check "after its client was killed, the capture ended: a new one starts" \
        timeout --preserve-status -s INT 1 "$SPILLWAYCTL_BIN" --socket "$SPW_SOCKET" capture drops -w /dev/null
    e2e_done
}
