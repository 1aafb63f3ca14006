-- Pktgen-DPDK: waits until every port's link is up, then makes Pktgen recompute its
-- transmit timing. Run before a load script (first -f) on ports whose link comes up after
-- Pktgen starts (net_af_packet on veth pairs). Pktgen 23.03 computes the gap between TX
-- bursts from the link speed; computed at start with the link down (speed 0) it is one
-- burst per ~64 s, and the lcore loop schedules the next burst from that stale deadline
-- (a later `set rate` changes the gap but not the deadline already set). Setting a port's
-- tx cycles to 0 makes the lcore loop recompute the rate and reset the deadline.
--   pktgen ... -f wait-links.lua -f syn-flood.lua -f report.lua      (local.sh does)
-- PG_LINK_WAIT_MS (default 10000): how long to wait for the links (local.sh's memif form
-- starts Spillway, the memif client, only once Pktgen runs this script).
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

local wait_ms = tonumber(os.getenv("PG_LINK_WAIT_MS") or "") or 10000
for _ = 1, math.max(1, wait_ms // 100) do
    local up, n = 0, 0
    for _, s in pairs(pktgen.linkState("all")) do
        if type(s) == "string" then
            n = n + 1
            if s:find("UP") then up = up + 1 end
        end
    end
    if n > 0 and up == n then break end
    pktgen.delay(100)
end
pktgen.set("all", "cycles", 0)
pktgen.delay(1000)
