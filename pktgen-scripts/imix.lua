-- Pktgen-DPDK: IMIX (7:4:1 of 64, 570, 1518-byte frames, FCS included) of established TCP
-- flows (ACKs: Pktgen's default TCP flags; its sequence table has no flags field) to a
-- Spillway VIP with Pktgen "sequence" packets: 12 slots, 7 x 64, 4 x 570, 1 x 1518 bytes,
-- each a different client flow. Sends for `duration` seconds, printing Pktgen's rates each
-- second, then stops. For IMIX over many flows, replay benches/gen_pcap.py --imix --flows N
-- with `pktgen ... -s 0:imix.pcap` instead.
--   pktgen -l 0-4 -n 4 -- -P -m "[1:2].0" -f imix.lua
-- EDIT the table below (README.md explains where each value comes from), or set PG_<KEY>
-- in the environment (PG_DURATION=3, PG_RATE=1 ...): local.sh does that and nothing else.
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"
-- pgcommon.lua (env, range_tcp_flag, send_for) from this script's folder
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or ""
package.path = here .. "?.lua;" .. package.path
local pg = require "pgcommon"

local cfg = {
    port     = pg.env("port", 0),
    dst_mac  = pg.env("dst_mac", "02:00:00:00:00:01"),  -- EDIT: Spillway port MAC
    src_mac  = pg.env("src_mac", "02:00:00:00:aa:01"),  -- EDIT: this generator port's MAC
    vip      = pg.env("vip", "10.0.0.100"),             -- EDIT
    vip_port = pg.env("vip_port", 80),                  -- EDIT
    rate     = pg.env("rate", 100),                     -- % of line rate
    duration = pg.env("duration", 30),                  -- seconds
}
local port = tostring(cfg.port)
-- frame sizes with the 4-byte FCS, as Pktgen counts them (1518: a 1500-byte IP packet)
local sizes = {64, 64, 64, 64, 64, 64, 64, 570, 570, 570, 570, 1518}

pktgen.stop(port)
for i, size in ipairs(sizes) do
    -- seqTable(seq, port, table): one sequence packet
    local seq = {
        eth_dst_addr = cfg.dst_mac,
        eth_src_addr = cfg.src_mac,
        ip_dst_addr = cfg.vip,                     -- an address: Pktgen reads no prefix here
        ip_src_addr = string.format("10.1.0.%d/16", i),
        sport = 1024 + i,
        dport = cfg.vip_port,
        ethType = "ipv4",
        ipProto = "tcp",
        vlanid = 1,
        pktSize = size,
    }
    pktgen.seqTable(i - 1, port, seq)
end
pktgen.set(port, "seq_cnt", #sizes)
pktgen.set(port, "rate", cfg.rate)
pg.send_for(port, cfg.duration)
