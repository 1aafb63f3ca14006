-- Helpers shared by the Spillway Pktgen-DPDK scripts (established-mix.lua, syn-flood.lua,
-- imix.lua). A script loads it from its own folder:
--   local here = debug.getinfo(1, "S").source:match("^@(.*/)") or ""
--   package.path = here .. "?.lua;" .. package.path
--   local pg = require "pgcommon"
local M = {}

-- PG_<KEY> from the environment if set (numbers as numbers, "none" as nil), else `default`.
function M.env(key, default)
    local v = os.getenv("PG_" .. string.upper(key))
    if v == nil or v == "" then return default end
    if v == "none" then return nil end
    return tonumber(v) or v
end

-- Sets the TCP flags of port P's range packet. Pktgen 23.03's Lua API has no range TCP-flag
-- setter: this runs the CLI commands from a file.
function M.range_tcp_flag(p, flag)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(string.format("range %s tcp flag clr all\nrange %s tcp flag set %s\n", p, p, flag))
    f:close()
    pktgen.run("cmd", path, "")  -- (Pktgen 23.03 insists on three arguments)
    os.remove(path)
end

-- Starts PORTS (a port list, "0" or "0,1"), prints every port's Pktgen rates once a second
-- for DURATION seconds (`t=Ns port P tx_pps=N rx_pps=N`: local.sh reads these lines; every
-- port, since with two ports the frames come back on the other one), then stops PORTS.
-- Port 0's TX gap is reset first (tx cycles 0: the lcore loop recomputes it, and the time of
-- the next burst, from the link's speed once the link is up): a gap computed earlier from a
-- link speed of 0 would hold the first burst for about a minute (see wait-links.lua).
function M.send_for(ports, duration)
    pktgen.clear("all")
    pktgen.set("all", "cycles", 0)
    pktgen.start(ports)
    for s = 1, duration do
        pktgen.delay(1000)
        local r = pktgen.portStats("all", "rate")
        for pid, st in pairs(r) do
            if type(st) == "table" then
                printf("t=%ds port %s tx_pps=%d rx_pps=%d\n", s, tostring(pid), st.pkts_tx or 0, st.pkts_rx or 0)
            end
        end
    end
    pktgen.stop(ports)
end

return M
