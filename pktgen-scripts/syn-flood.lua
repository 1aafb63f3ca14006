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
-- pgcommon.lua (env, range_tcp_flag, send_for) from this script's folder
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or ""
package.path = here .. "?.lua;" .. package.path
local pg = require "pgcommon"

local cfg = {
    port      = pg.env("port", 0),
    dst_mac   = pg.env("dst_mac", "02:00:00:00:00:01"),  -- EDIT: Spillway port MAC
    src_mac   = pg.env("src_mac", "02:00:00:00:aa:01"),  -- EDIT: this generator port's MAC
    vip       = pg.env("vip", "10.0.0.100"),             -- EDIT
    vip_port  = pg.env("vip_port", 80),                  -- EDIT
    src_min   = pg.env("src_min", "10.1.0.1"),           -- client addresses (a client_zones prefix)
    src_max   = pg.env("src_max", "10.1.255.254"),
    sport_min = pg.env("sport_min", 1024),
    sport_max = pg.env("sport_max", 65535),
    size      = pg.env("size", 64),
    rate      = pg.env("rate", 100),                     -- % of line rate
    burst     = pg.env("burst", 64),
    duration  = pg.env("duration", 30),                  -- seconds
}

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
pg.range_tcp_flag(p, "syn")
pktgen.range.pkt_size(p, "start", cfg.size)
pktgen.range.pkt_size(p, "min", cfg.size)
pktgen.range.pkt_size(p, "max", cfg.size)
pktgen.range.pkt_size(p, "inc", 0)
pktgen.set_range(p, "on")
pg.send_for(p, cfg.duration)
