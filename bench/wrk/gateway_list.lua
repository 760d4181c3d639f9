-- Scenario gateway/tools/list: the first tools/list page (no cursor) of the gateway's 1,000-tool agent.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
mcp_request("tools/list", nil, "")
