-- Pktgen-DPDK: prints every port's totals since the last clear as one line per port and
-- one total line, then quits Pktgen. Run after a load script (a second -f), as
-- pktgen-scripts/local.sh does:
--   pktgen ... -f established-mix.lua -f report.lua
-- Output (parsed by local.sh):
--   pktgen_port port=P sent=N received=N ierrors=N oerrors=N imissed=N rx_nombuf=N
--   pktgen_total sent=N received=N
-- PG_SETTLE_MS (default 2000): wait before reading, so frames in flight arrive and
-- Pktgen's once-a-second statistics refresh has run after the script's stop; then read
-- once a second more until two readings agree (at most PG_SETTLE_MAX_MS, default 15000,
-- in all): on a busy host Pktgen's port lcore and its statistics thread may lag.
-- PG_QUIT_FILE (unset by default): after printing, wait until this file exists (at most
-- PG_QUIT_WAIT_MS, default 60000) before quitting. local.sh's memif form stops Spillway
-- first and then creates the file: DPDK 22.11's net_memif can crash the side that still
-- polls a ring whose peer has just gone, so the peers leave in a fixed order.
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

-- totals(): sent and received over every port, from Pktgen's last statistics refresh
local function totals()
    local sent, received = 0, 0
    for _, s in pairs(pktgen.portStats("all", "port")) do
        if type(s) == "table" then
            sent = sent + s.opackets
            received = received + s.ipackets
        end
    end
    return sent, received
end

pktgen.stop("all")
local settle = tonumber(os.getenv("PG_SETTLE_MS") or "") or 2000
local settle_max = tonumber(os.getenv("PG_SETTLE_MAX_MS") or "") or 15000
pktgen.delay(settle)
local waited, last_sent, last_received = settle, totals()
while waited + 1100 <= settle_max do
    pktgen.delay(1100)
    waited = waited + 1100
    local sent, received = totals()
    if sent == last_sent and received == last_received then break end
    last_sent, last_received = sent, received
end
local st = pktgen.portStats("all", "port")
local sent, received = 0, 0
for pid, s in pairs(st) do
    if type(s) == "table" then
        printf("pktgen_port port=%s sent=%d received=%d ierrors=%d oerrors=%d imissed=%d rx_nombuf=%d\n",
            tostring(pid), s.opackets, s.ipackets, s.ierrors, s.oerrors, s.imissed, s.rx_nombuf)
        sent = sent + s.opackets
        received = received + s.ipackets
    end
end
printf("pktgen_total sent=%d received=%d\n", sent, received)
local quit_file = os.getenv("PG_QUIT_FILE")
if quit_file ~= nil and quit_file ~= "" then
    local wait_ms = tonumber(os.getenv("PG_QUIT_WAIT_MS") or "") or 60000
    for _ = 1, math.max(1, wait_ms // 100) do
        local f = io.open(quit_file, "r")
        if f ~= nil then f:close(); break end
        pktgen.delay(100)
    end
end
pktgen.quit()
