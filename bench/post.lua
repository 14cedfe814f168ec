-- wrk script for the benchmark (bench/bench.py runs it): POSTs the JSON body read from
-- $BENCH_BODY_FILE to the URL's path, stops a thread after $BENCH_MAX_REQUESTS requests (wrk's
-- -d bounds the time), and prints one machine-readable "BENCH ..." line when done.
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
local body = f:read("*a")
f:close()
local max_requests = tonumber(os.getenv("BENCH_MAX_REQUESTS") or "2000000")
local req = nil
local sent = 0

function init(args)
  req = wrk.format("POST", wrk.path, {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. (os.getenv("BENCH_CLIENT_KEY") or "sk-bench"),
  }, body)
end

function request()
  sent = sent + 1
  if sent > max_requests then
    wrk.thread:stop()
  end
  return req
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d mean_us=%.1f "
      .. "err_connect=%d err_read=%d err_write=%d err_timeout=%d err_status=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.mean, e.connect, e.read, e.write, e.timeout, e.status))
end
