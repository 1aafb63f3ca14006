-- Pktgen-DPDK: established-traffic mix against a Spillway VIP.
-- N_FLOWS established flows (TCP ACKs, range mode) at RATE % of line rate, with a
-- SYN_RATE % of line rate of new connections (SYNs) on a second port (syn_port = none:
-- established traffic only). Prints Spillway-side-relevant Pktgen counters every
-- second for DURATION seconds, then stops.
--   pktgen -l 0-4 -n 4 -- -P -m "[1:2].0,[3:4].1" -f established-mix.lua
-- EDIT the table below (README.md explains where each value comes from), or set PG_<KEY>
-- in the environment (PG_DURATION=3, PG_RATE=1, PG_SYN_PORT=none ...): local.sh does that
-- and nothing else.
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"
-- pgcommon.lua (env, range_tcp_flag, send_for) from this script's folder
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or ""
package.path = here .. "?.lua;" .. package.path
local pg = require "pgcommon"

local cfg = {
    port       = pg.env("port", 0),                      -- established traffic
    syn_port   = pg.env("syn_port", 1),                  -- SYN traffic (none/nil: one port)
    dst_mac    = pg.env("dst_mac", "02:00:00:00:00:01"), -- EDIT: Spillway port MAC
    syn_dst_mac = pg.env("syn_dst_mac", "02:00:00:00:00:02"), -- EDIT: MAC of the Spillway port syn_port is cabled to
    src_mac    = pg.env("src_mac", "02:00:00:00:aa:01"), -- EDIT: this generator port's MAC
    vip        = pg.env("vip", "10.0.0.100"),            -- EDIT
    vip_port   = pg.env("vip_port", 80),                 -- EDIT
    src_net    = pg.env("src_net", "10.1.0.0"),          -- client addresses (a client_zones prefix)
    n_sources  = pg.env("n_sources", 64),
    n_ports    = pg.env("n_ports", 1024),                -- N_FLOWS = n_sources * n_ports
    size       = pg.env("size", 64),
    rate       = pg.env("rate", 90),                     -- % of line rate, established port
    syn_rate   = pg.env("syn_rate", 10),                 -- % of line rate, SYN port
    duration   = pg.env("duration", 30),                 -- seconds
}

local function flows(port, flag, rate, dst_mac)
    local p = tostring(port)
    pktgen.stop(p)
    pktgen.range.dst_mac(p, "start", dst_mac)
    pktgen.range.src_mac(p, "start", cfg.src_mac)
    pktgen.range.dst_ip(p, "start", cfg.vip)
    pktgen.range.dst_ip(p, "min", cfg.vip)
    pktgen.range.dst_ip(p, "max", cfg.vip)
    pktgen.range.dst_ip(p, "inc", "0.0.0.0")
    local a, b, c = cfg.src_net:match("(%d+)%.(%d+)%.(%d+)%.%d+")
    pktgen.range.src_ip(p, "start", cfg.src_net)
    pktgen.range.src_ip(p, "min", cfg.src_net)
    pktgen.range.src_ip(p, "max", string.format("%s.%s.%s.%d", a, b, c, cfg.n_sources - 1))
    pktgen.range.src_ip(p, "inc", "0.0.0.1")
    pktgen.range.dst_port(p, "start", cfg.vip_port)
    pktgen.range.dst_port(p, "min", cfg.vip_port)
    pktgen.range.dst_port(p, "max", cfg.vip_port)
    pktgen.range.dst_port(p, "inc", 0)
    pktgen.range.src_port(p, "start", 1024)
    pktgen.range.src_port(p, "min", 1024)
    pktgen.range.src_port(p, "max", 1024 + cfg.n_ports - 1)
    pktgen.range.src_port(p, "inc", 1)
    pktgen.range.ip_proto(p, "tcp")
    pg.range_tcp_flag(p, flag)
    pktgen.range.pkt_size(p, "start", cfg.size)
    pktgen.range.pkt_size(p, "min", cfg.size)
    pktgen.range.pkt_size(p, "max", cfg.size)
    pktgen.range.pkt_size(p, "inc", 0)
    pktgen.set(p, "rate", rate)
    pktgen.set_range(p, "on")
end

flows(cfg.port, "ack", cfg.rate, cfg.dst_mac)
local ports = tostring(cfg.port)
if cfg.syn_port ~= nil then
    flows(cfg.syn_port, "syn", cfg.syn_rate, cfg.syn_dst_mac)
    ports = ports .. "," .. tostring(cfg.syn_port)
end
pg.send_for(ports, cfg.duration)
