-- Scenario hostile/valid (bench/hostile.py): a tenant's valid tools/call of `get_item` {"id": 7} through the
-- gateway, every answer checked (run with BENCH_COUNT=1: a non-2xx status, `"isError":true` or a JSON-RPC
-- error counts as a failed call). BENCH_PACE_MS, if set, is the pause between two requests of a connection
-- (wrk's delay(); latency is measured from the request's send, so the pause is not in it).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
mcp_request("tools/call", "get_item", '"name":"get_item","arguments":{"id":7}')

dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "pace.lua")
