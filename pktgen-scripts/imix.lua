-- Pktgen-DPDK: IMIX (7:4:1 of 64, 570, 1518 bytes on the wire) of established TCP flows
-- to a Spillway VIP with Pktgen "sequence" packets: 12 slots, 7 x 64, 4 x 570, 1 x 1514
-- bytes (frame without FCS), each a different client flow. For IMIX over many flows,
-- replay benches/gen_pcap.py --imix --flows N with `pktgen ... -s 0:imix.pcap` instead.
--   pktgen -l 0-4 -n 4 -- -P -m "[1:2].0" -f imix.lua
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

local port = "0"
local dst_mac = "02:00:00:00:00:01"   -- EDIT: Spillway port MAC
local src_mac = "02:00:00:00:aa:01"   -- EDIT: generator port MAC
local vip = "10.0.0.100/32"           -- EDIT: VIP
local vip_port = 80                   -- EDIT
local duration = 30
local sizes = {64, 64, 64, 64, 64, 64, 64, 570, 570, 570, 570, 1514}  -- frame sizes without FCS

pktgen.stop(port)
for i, size in ipairs(sizes) do
    -- seqTable(seq, port, table): one sequence packet
    local seq = {
        eth_dst_addr = dst_mac,
        eth_src_addr = src_mac,
        ip_dst_addr = vip,
        ip_src_addr = string.format("10.1.0.%d/16", i),
        sport = 1024 + i,
        dport = vip_port,
        ethType = "ipv4",
        ipProto = "tcp",
        vlanid = 1,
        pktSize = size,
        tcp_flags = "ack",
    }
    pktgen.seqTable(i - 1, port, seq)
end
pktgen.set(port, "seq_cnt", #sizes)
pktgen.set(port, "rate", 100)
pktgen.clear("all")
pktgen.start(port)
pktgen.delay(duration * 1000)
pktgen.stop(port)
