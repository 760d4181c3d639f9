-- Scenario tools/list: list all 1,000 tools (no pagination cursor).
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
mcp_request("tools/list", nil, "")
