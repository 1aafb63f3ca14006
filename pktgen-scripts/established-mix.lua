-- Pktgen-DPDK: established-traffic mix against a Spillway VIP.
-- N_FLOWS established flows (TCP ACKs, range mode) at RATE % of line rate, with a
-- SYN_PCT % share of new connections on a second port (or in sequence on the same port
-- when only one port is given). Prints Spillway-side-relevant Pktgen counters every
-- second for DURATION seconds, then stops.
--   pktgen -l 0-4 -n 4 -- -P -m "[1:2].0,[3:4].1" -f established-mix.lua
-- EDIT the table below (README.md explains where each value comes from).
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

local cfg = {
    port       = 0,                     -- established traffic
    syn_port   = 1,                     -- SYN traffic (set to nil for one port)
    dst_mac    = "02:00:00:00:00:01",   -- EDIT: Spillway port MAC
    src_mac    = "02:00:00:00:aa:01",   -- EDIT: this generator port's MAC
    vip        = "10.0.0.100",          -- EDIT
    vip_port   = 80,                    -- EDIT
    src_net    = "10.1.0.0",            -- client addresses (a client_zones prefix)
    n_sources  = 64,
    n_ports    = 1024,                  -- N_FLOWS = n_sources * n_ports
    size       = 64,
    rate       = 90,                    -- % of line rate, established port
    syn_rate   = 10,                    -- % of line rate, SYN port
    duration   = 30,                    -- seconds
}

local function flows(port, flag, rate)
    local p = tostring(port)
    pktgen.stop(p)
    pktgen.range.dst_mac(p, "start", cfg.dst_mac)
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
    pktgen.range.tcp_flags(p, "clr", "all")
    pktgen.range.tcp_flags(p, "set", flag)
    pktgen.range.pkt_size(p, "start", cfg.size)
    pktgen.range.pkt_size(p, "min", cfg.size)
    pktgen.range.pkt_size(p, "max", cfg.size)
    pktgen.range.pkt_size(p, "inc", 0)
    pktgen.set(p, "rate", rate)
    pktgen.set_range(p, "on")
end

flows(cfg.port, "ack", cfg.rate)
local ports = tostring(cfg.port)
if cfg.syn_port ~= nil then
    flows(cfg.syn_port, "syn", cfg.syn_rate)
    ports = ports .. "," .. tostring(cfg.syn_port)
end
pktgen.clear("all")
pktgen.start(ports)
for s = 1, cfg.duration do
    pktgen.delay(1000)
    local r = pktgen.portStats(ports, "rate")
    for pid, st in pairs(r) do
        if type(st) == "table" then
            printf("t=%ds port %s tx_pps=%d rx_pps=%d\n", s, tostring(pid), st.pkts_tx or 0, st.pkts_rx or 0)
        end
    end
end
pktgen.stop(ports)
