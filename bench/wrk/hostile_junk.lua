-- Scenario hostile/junk (bench/hostile.py): invalid and hostile requests, cycled in a fixed shuffled order,
-- against the gateway's root URL. Most come from the `hostile` workspace's key (BENCH_HOSTILE_KEY) to its own
-- agent; some try the `honest` agent with no key, a wrong key or the hostile key. Every answer goes through
-- response(): done() prints the count per status class and of the responses that leak a traceback or an
-- exception name. add()'s first argument only names the kind of request for the reader. BENCH_PACE_MS paces
-- each connection as in hostile_valid.lua. Not here: a body over the 4 MiB limit (the gateway answers 413 before
-- reading it, and wrk, still writing it, stalls the connection for a long while; tests/test_fuzz.py sends them).
local hostile_key = assert(os.getenv("BENCH_HOSTILE_KEY"), "BENCH_HOSTILE_KEY is required")
local HOSTILE, HONEST = "/mcp/v1/hostile/agent", "/mcp/v1/honest/agent"
local requests = {}
local threads = {}
s2xx, s4xx, s5xx, other, leaks, sent = 0, 0, 0, 0, 0, 0

local function rep(text, n, sep)
  local parts = {}
  for i = 1, n do parts[i] = text end
  return table.concat(parts, sep or "")
end

local function call(id, arguments, name)
  return '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call","params":{"name":"' .. (name or "get_item")
    .. '","arguments":' .. arguments .. '}}'
end

local function add(kind, weight, path, key, body, extra)
  local headers = {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2025-11-25",
  }
  if key then headers["Authorization"] = "Bearer " .. key end
  for name, value in pairs(extra or {}) do headers[name] = value end
  local request = wrk.format("POST", path, headers, body)
  for _ = 1, weight do
    requests[#requests + 1] = request
  end
end

function setup(thread)
  threads[#threads + 1] = thread
end

function init(args)
  local batched = { ["MCP-Protocol-Version"] = "2025-03-26" }
  local calls, lists = {}, {}
  for i = 1, 100 do
    calls[i] = call(i, '{"id":' .. i .. '}', i % 2 == 0 and string.format("get_item_%03d", 1 + i % 9) or nil)
    lists[i] = '{"jsonrpc":"2.0","id":' .. i .. ',"method":"tools/list"}'
  end
  -- invalid: what a buggy client sends
  add("unknown tool", 6, HOSTILE, hostile_key, call(1, "{}", "no_such_tool"))
  add("wrong argument type", 6, HOSTILE, hostile_key, call(1, '{"id":"seven"}'))
  add("missing argument", 4, HOSTILE, hostile_key, call(1, "{}"))
  add("not JSON", 4, HOSTILE, hostile_key, '{"jsonrpc":"2.0","id":1,')
  add("not JSON-RPC", 3, HOSTILE, hostile_key, '{"hello":"world"}')
  add("unsupported version", 3, HOSTILE, hostile_key, call(1, '{"id":7}'), { ["MCP-Protocol-Version"] = "1999-01-01" })
  add("wrong content type", 3, HOSTILE, hostile_key, call(1, '{"id":7}'), { ["Content-Type"] = "text/plain" })
  add("modern, Mcp-Name mismatch", 3, HOSTILE, hostile_key,
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_item","arguments":{"id":7},"_meta":{'
      .. '"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}',
    { ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "get_item_001" })
  -- hostile: other tenants' agents, limits
  add("no key, honest agent", 3, HONEST, nil, call(1, '{"id":7}'))
  add("wrong key, honest agent", 3, HONEST, "crk_" .. rep("x", 40), call(1, '{"id":7}'))
  add("hostile key, honest agent", 3, HONEST, hostile_key, call(1, '{"id":7}'))
  add("hostile key, unknown agent", 2, "/mcp/v1/honest/ghost", hostile_key, call(1, '{"id":7}'))
  add("nested 65 deep", 3, HOSTILE, hostile_key, call(1, '{"id":' .. rep("[", 64) .. rep("]", 64) .. "}"))
  add("nested 5,000 deep", 2, HOSTILE, hostile_key, rep("[", 5000) .. rep("]", 5000))
  add("batch of 101", 2, HOSTILE, hostile_key, "[" .. rep(call(1, '{"id":1}'), 101, ",") .. "]", batched)
  add("batch of 100 calls", 1, HOSTILE, hostile_key, "[" .. table.concat(calls, ",") .. "]", batched)
  add("batch of 100 lists", 1, HOSTILE, hostile_key, "[" .. table.concat(lists, ",") .. "]", batched)
  add("1 MB string argument", 1, HOSTILE, hostile_key, call(1, '{"id":7,"pad":"' .. rep("x", 1000000) .. '"}'))
  -- A fixed shuffle (the same in every thread and run): heavy requests spread over the cycle.
  math.randomseed(12)
  for i = #requests, 2, -1 do
    local j = math.random(i)
    requests[i], requests[j] = requests[j], requests[i]
  end
  cursor = 0
end

function request()
  cursor = cursor % #requests + 1
  sent = sent + 1
  return requests[cursor]
end

function response(status, headers, body)
  if status >= 200 and status < 300 then s2xx = s2xx + 1
  elseif status >= 400 and status < 500 then s4xx = s4xx + 1
  elseif status >= 500 then s5xx = s5xx + 1
  else other = other + 1 end
  if body:find("Traceback", 1, true) or body:find("Error:", 1, true) or body:find("Exception", 1, true) then
    leaks = leaks + 1
  end
end

dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "pace.lua")

function done(summary, latency, requests_done)
  local totals = { s2xx = 0, s4xx = 0, s5xx = 0, other = 0, leaks = 0, sent = 0 }
  for _, thread in ipairs(threads) do
    for name, _ in pairs(totals) do totals[name] = totals[name] + thread:get(name) end
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"sent":%d,"rps":%.2f,"p50_us":%d,"p99_us":%d,"max_us":%d,"s2xx":%d,"s4xx":%d,"s5xx":%d,'
      .. '"other":%d,"leaks":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, totals.sent, summary.requests / (summary.duration / 1e6), latency:percentile(50),
    latency:percentile(99), latency.max, totals.s2xx, totals.s4xx, totals.s5xx, totals.other, totals.leaks,
    e.connect, e.read, e.write, e.status, e.timeout))
end
