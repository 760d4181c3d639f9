-- Scenario tools/call: call the `echo` tool with a short text.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
mcp_request("tools/call", "echo", '"name":"echo","arguments":{"text":"hello from wrk"}')
