-- Pktgen-DPDK: SYN flood against a Spillway VIP (new-connection path).
-- Every packet is a TCP SYN from a different client 5-tuple (range mode: the source IP
-- and the source port both step by one per packet, over 10.1.0.1-10.1.255.254 x
-- 1024-65535), so every packet is a new connection on the Spillway host. Sends for
-- `duration` seconds, printing Pktgen's rates each second, then stops.
--   pktgen -l 0-4 -n 4 -- -P -m "[1:2].0" -f syn-flood.lua
-- EDIT the table below (README.md explains where each value comes from), or set PG_<KEY>
-- in the environment (PG_DURATION=3, PG_RATE=1 ...): local.sh does that and nothing else.
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

-- PG_<KEY> from the environment if set (numbers as numbers), else `default`.
local function env(key, default)
    local v = os.getenv("PG_" .. string.upper(key))
    if v == nil or v == "" then return default end
    return tonumber(v) or v
end

local cfg = {
    port      = env("port", 0),
    dst_mac   = env("dst_mac", "02:00:00:00:00:01"),  -- EDIT: Spillway port MAC
    src_mac   = env("src_mac", "02:00:00:00:aa:01"),  -- EDIT: this generator port's MAC
    vip       = env("vip", "10.0.0.100"),             -- EDIT
    vip_port  = env("vip_port", 80),                  -- EDIT
    src_min   = env("src_min", "10.1.0.1"),           -- client addresses (a client_zones prefix)
    src_max   = env("src_max", "10.1.255.254"),
    sport_min = env("sport_min", 1024),
    sport_max = env("sport_max", 65535),
    size      = env("size", 64),
    rate      = env("rate", 100),                     -- % of line rate
    burst     = env("burst", 64),
    duration  = env("duration", 30),                  -- seconds
}

-- Pktgen's Lua API has no range TCP-flag setter: run the CLI commands from a file.
local function range_tcp_flag(p, flag)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(string.format("range %s tcp flag clr all\nrange %s tcp flag set %s\n", p, p, flag))
    f:close()
    pktgen.run("cmd", path, "")  -- (Pktgen 23.03 insists on three arguments)
    os.remove(path)
end

local p = tostring(cfg.port)
pktgen.stop(p)
pktgen.set(p, "size", cfg.size)
pktgen.set(p, "rate", cfg.rate)
pktgen.set(p, "burst", cfg.burst)
pktgen.range.dst_mac(p, "start", cfg.dst_mac)
pktgen.range.src_mac(p, "start", cfg.src_mac)
pktgen.range.dst_ip(p, "start", cfg.vip)
pktgen.range.dst_ip(p, "min", cfg.vip)
pktgen.range.dst_ip(p, "max", cfg.vip)
pktgen.range.dst_ip(p, "inc", "0.0.0.0")
pktgen.range.src_ip(p, "start", cfg.src_min)
pktgen.range.src_ip(p, "min", cfg.src_min)
pktgen.range.src_ip(p, "max", cfg.src_max)
pktgen.range.src_ip(p, "inc", "0.0.0.1")
pktgen.range.src_port(p, "start", cfg.sport_min)
pktgen.range.src_port(p, "min", cfg.sport_min)
pktgen.range.src_port(p, "max", cfg.sport_max)
pktgen.range.src_port(p, "inc", 1)
pktgen.range.dst_port(p, "start", cfg.vip_port)
pktgen.range.dst_port(p, "min", cfg.vip_port)
pktgen.range.dst_port(p, "max", cfg.vip_port)
pktgen.range.dst_port(p, "inc", 0)
pktgen.range.ip_proto(p, "tcp")
range_tcp_flag(p, "syn")
pktgen.range.pkt_size(p, "start", cfg.size)
pktgen.range.pkt_size(p, "min", cfg.size)
pktgen.range.pkt_size(p, "max", cfg.size)
pktgen.range.pkt_size(p, "inc", 0)
pktgen.set_range(p, "on")
pktgen.clear("all")
pktgen.start(p)
for s = 1, cfg.duration do
    pktgen.delay(1000)
    local r = pktgen.portStats("all", "rate")  -- every port: in local.sh port 1 receives
    for pid, st in pairs(r) do
        if type(st) == "table" then
            printf("t=%ds port %s tx_pps=%d rx_pps=%d\n", s, tostring(pid), st.pkts_tx or 0, st.pkts_rx or 0)
        end
    end
end
pktgen.stop(p)
