-- BENCH_PACE_MS, if set, is the pause between two requests of a connection (wrk's delay(); latency is measured
-- from the request's send, so the pause is not in it). Loaded with dofile() by the hostile scenarios.
local pace = tonumber(os.getenv("BENCH_PACE_MS") or "0")
if pace > 0 then
  function delay()
    return pace
  end
end
