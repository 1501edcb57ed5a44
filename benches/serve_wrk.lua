-- wrk script of benches/serve.sh: POST /predict with the request bodies of the file named by
-- $SERVE_BENCH_BODIES (one JSON object a line, see benches/serve_load.py bodies), taken in turn,
-- and one JSON line at the end: requests, errors, latency percentiles in ms.
local bodies = {}
for line in io.lines(os.getenv("SERVE_BENCH_BODIES")) do
  bodies[#bodies + 1] = line
end
local next_body = 0

wrk.method = "POST"
wrk.path = "/predict"
wrk.headers["Content-Type"] = "application/json"

function request()
  next_body = next_body % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[next_body])
end

function done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    '{"requests":%d,"duration_s":%.3f,"rps":%.1f,"errors":%d,"p50_ms":%.3f,"p90_ms":%.3f,' ..
    '"p99_ms":%.3f,"max_ms":%.3f}\n',
    summary.requests, secs, summary.requests / secs,
    e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3,
    latency.max / 1e3))
end
