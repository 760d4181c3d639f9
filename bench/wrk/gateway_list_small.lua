-- Scenario gateway/tools/list of a small agent: the whole list (two tools, one page) of the gateway's agent `small`.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
mcp_request("tools/list", nil, "")
