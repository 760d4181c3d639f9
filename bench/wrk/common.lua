-- Shared wrk logic: builds the MCP request, can count non-2xx responses, and prints
-- one JSON result line from done(). Loaded with dofile() by the scenario scripts.
--
-- Environment:
--   BENCH_ERA   "legacy": 2025-11-25 stateless shape (MCP-Protocol-Version header only)
--               "modern": 2026-07-28 shape (_meta envelope + Mcp-Method/Mcp-Name headers)
--   BENCH_COUNT if set, every response goes through response() to count non-2xx statuses exactly
--               (this costs wrk CPU: the body is copied into Lua, so timed runs leave it off and rely
--               on wrk's own count of statuses >= 400, reported as errors.status)
--   BENCH_DUMP  if set, the first response is also written to this file for verification
--   BENCH_AUTH  if set, sent as `Authorization: Bearer <BENCH_AUTH>` (the gateway scenarios' API key)

local VERSIONS = { legacy = "2025-11-25", modern = "2026-07-28" }
local era = os.getenv("BENCH_ERA") or "legacy"
local dump_path = os.getenv("BENCH_DUMP")
local auth = os.getenv("BENCH_AUTH")
local threads = {}
non2xx = 0
body_errors = 0
limited = 0

-- params: the JSON members of "params" (without braces), e.g. '"name":"echo"'.
function mcp_request(method, name, params)
  local version = assert(VERSIONS[era], "BENCH_ERA must be legacy or modern")
  local members = {}
  if params ~= "" then members[#members + 1] = params end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  wrk.headers["MCP-Protocol-Version"] = version
  if auth and auth ~= "" then wrk.headers["Authorization"] = "Bearer " .. auth end
  if era == "modern" then
    members[#members + 1] = '"_meta":{"io.modelcontextprotocol/protocolVersion":"' .. version
      .. '","io.modelcontextprotocol/clientCapabilities":{}}'
    wrk.headers["Mcp-Method"] = method
    if name then wrk.headers["Mcp-Name"] = name end
  end
  wrk.body = '{"jsonrpc":"2.0","id":1,"method":"' .. method .. '","params":{'
    .. table.concat(members, ",") .. "}}"
end

function setup(thread)
  threads[#threads + 1] = thread
end

local function count_and_dump(status, headers, body)
  -- Refused by a rate limit or quota (429, or a tool error `rate_limited`): counted apart, as `limited`.
  if status == 429 or body:find('rate_limited', 1, true) then
    limited = limited + 1
  elseif status < 200 or status > 299 then
    non2xx = non2xx + 1
  -- A 200 can still carry a failed call (isError) or a JSON-RPC error: count those too.
  elseif body:find('"isError":true', 1, true) or body:find('"error":{', 1, true) then
    body_errors = body_errors + 1
  end
  if dump_path then
    local ctype = ""
    for k, v in pairs(headers) do
      if k:lower() == "content-type" then ctype = v end
    end
    local f = assert(io.open(dump_path, "wb"))
    f:write(status, "\n", ctype, "\n", #wrk.body, "\n", wrk.body, body)
    f:close()
    dump_path = nil
  end
end

-- wrk passes responses to Lua only when a global response() exists.
if dump_path or os.getenv("BENCH_COUNT") then response = count_and_dump end

function done(summary, latency, requests)
  local bad, bad_bodies, refused = 0, 0, 0
  for _, thread in ipairs(threads) do
    bad = bad + thread:get("non2xx")
    bad_bodies = bad_bodies + thread:get("body_errors")
    refused = refused + thread:get("limited")
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"bytes":%d,"rps":%.2f,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
      .. '"mean_us":%.1f,"max_us":%d,"non2xx":%d,"body_errors":%d,"limited":%d,"non2xx_counted":%s,'
      .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, summary.bytes, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max,
    bad, bad_bodies, refused, tostring(response ~= nil), e.connect, e.read, e.write, e.status, e.timeout))
end
