-- Scenario gateway/tools/call: call `get_item` (one GET to the upstream) with id 7 through a gateway.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
mcp_request("tools/call", "get_item", '"name":"get_item","arguments":{"id":7}')
