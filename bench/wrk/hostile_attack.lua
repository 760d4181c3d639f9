-- Scenario hostile/attack (bench/hostile.py --attack): one kind of attack on the `hostile` workspace, which has
-- lazy sign-in and trusts an issuer of its own (bench/apps/issuer.py). BENCH_ATTACK:
--   forged-tokens  tools/list with a new made-up token each time, naming the issuer's ordinary key (`k1`): each
--                  would cost a signature check (BENCH_TOKEN_PREFIX: the token's header and claims)
--   costly-key     the same, naming the key of unbounded cost (`big`)
--   prompt         prompts/get of `heavy` (16 messages of 16 `title` filters) with a 16 KiB argument, anonymous
--   anonymous      tools/list without credentials
-- Every answer goes through response(); done() prints the count per status class (503s apart: a spent budget's
-- answer) and of the answers that leak a traceback. BENCH_PACE_MS paces each connection.
local attack = assert(os.getenv("BENCH_ATTACK"), "BENCH_ATTACK is required")
local prefix = os.getenv("BENCH_TOKEN_PREFIX") or ""
local HOSTILE = "/mcp/v1/hostile/agent"
local SIGNATURE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local threads = {}
s2xx, s4xx, s503, s5xx, other, leaks = 0, 0, 0, 0, 0, 0

local headers = {
  ["Content-Type"] = "application/json",
  ["Accept"] = "application/json, text/event-stream",
  ["MCP-Protocol-Version"] = "2025-11-25",
}
local list = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'

function setup(thread)
  threads[#threads + 1] = thread
end

function init(args)
  math.randomseed(os.time() + #threads * 7919)
  if attack == "prompt" then
    local text = string.rep(" a", 8192)
    fixed = wrk.format("POST", HOSTILE, headers, '{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":'
      .. '{"name":"heavy","arguments":{"text":"' .. text .. '"}}}')
  elseif attack == "anonymous" then
    fixed = wrk.format("POST", HOSTILE, headers, list)
  end
end

-- BENCH_SIGNATURE_BYTES made-up bytes (a signature as long as the key's modulus: shorter ones are refused before
-- any arithmetic), base64url, the last character's unused bits zero (strict decoders refuse anything else).
local signature_bytes = tonumber(os.getenv("BENCH_SIGNATURE_BYTES") or "256")
local signature_chars = math.ceil(signature_bytes * 8 / 6)
local unused = 2 ^ (signature_chars * 6 - signature_bytes * 8)
local function made_up()
  local parts = {}
  for i = 1, signature_chars - 1 do
    local k = math.random(1, 64)
    parts[i] = SIGNATURE:sub(k, k)
  end
  local last = math.random(0, 64 / unused - 1) * unused + 1
  parts[signature_chars] = SIGNATURE:sub(last, last)
  return prefix .. "." .. table.concat(parts)
end

function request()
  if fixed then return fixed end
  headers["Authorization"] = "Bearer " .. made_up()
  return wrk.format("POST", HOSTILE, headers, list)
end

function response(status, response_headers, body)
  if status >= 200 and status < 300 then s2xx = s2xx + 1
  elseif status >= 400 and status < 500 then s4xx = s4xx + 1
  elseif status == 503 then s503 = s503 + 1
  elseif status >= 500 then s5xx = s5xx + 1
  else other = other + 1 end
  if body:find("Traceback", 1, true) then leaks = leaks + 1 end
end

dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "pace.lua")

function done(summary, latency, requests_done)
  local totals = { s2xx = 0, s4xx = 0, s503 = 0, s5xx = 0, other = 0, leaks = 0 }
  for _, thread in ipairs(threads) do
    for name, _ in pairs(totals) do totals[name] = totals[name] + thread:get(name) end
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"rps":%.2f,"p50_us":%d,"p99_us":%d,"max_us":%d,"s2xx":%d,"s4xx":%d,"s503":%d,"s5xx":%d,'
      .. '"other":%d,"leaks":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    latency.max, totals.s2xx, totals.s4xx, totals.s503, totals.s5xx, totals.other, totals.leaks,
    e.connect, e.read, e.write, e.status, e.timeout))
end
