-- Pktgen-DPDK: prints every port's totals since the last clear as one line per port and
-- one total line, then quits Pktgen. Run after a load script (a second -f), as
-- pktgen-scripts/local.sh does:
--   pktgen ... -f established-mix.lua -f report.lua
-- Output (parsed by local.sh):
--   pktgen_port port=P sent=N received=N ierrors=N oerrors=N imissed=N rx_nombuf=N
--   pktgen_total sent=N received=N
-- PG_SETTLE_MS (default 2000): wait before reading, so frames in flight arrive and
-- Pktgen's once-a-second statistics refresh has run after the script's stop.
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

pktgen.stop("all")
pktgen.delay(tonumber(os.getenv("PG_SETTLE_MS") or "") or 2000)
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
pktgen.quit()
