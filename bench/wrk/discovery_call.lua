-- Scenario gateway/discovery call: the same `get_item` call as gateway_call.lua, through a discovery-mode
-- agent's `call_operation` tool (bench/apps/gateway_crank.py publishes it as agent `discovery`).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
mcp_request("tools/call", "call_operation",
  '"name":"call_operation","arguments":{"name":"get_item","arguments":{"id":7}}')
