-- Scenario rpc_call: one JSON-RPC 2.0 call on /rpc of an RPCApp (bench/apps/rpc_shared.py).
--   BENCH_RPC_METHOD  the method (plain, cached or limited), called with {"n": 7}
-- common.lua supplies done() (one JSON line) and, with BENCH_COUNT, the count of error answers.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "common.lua")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"' .. assert(os.getenv("BENCH_RPC_METHOD"), "BENCH_RPC_METHOD")
  .. '","params":{"n":7}}'
