-- wrk script for the load benchmark: POST a prebuilt body, count answers that are not 200.
--
-- Environment:
--   BENCH_BODY_FILE     file holding the request body (KServe binary or JSON)
--   BENCH_CONTENT_TYPE  Content-Type header (default application/octet-stream)
--   BENCH_HEADER_LEN    if set, sent as Inference-Header-Content-Length (binary tensor extension)
--
-- At the end it prints one line "BENCH_RESULT {json}" with request count, duration, latency percentiles
-- (microseconds), wrk's socket/status error counts and the number of non-200 answers with the first one seen.

local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = os.getenv("BENCH_CONTENT_TYPE") or "application/octet-stream"
local hlen = os.getenv("BENCH_HEADER_LEN")
if hlen ~= nil and hlen ~= "" then
  wrk.headers["Inference-Header-Content-Length"] = hlen
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  non200 = 0
  first_error = ""
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
    if first_error == "" then
      first_error = tostring(status) .. " " .. string.sub(body or "", 1, 300)
    end
  end
end

local function json_string(s)
  s = string.gsub(s, '[%c"\\]', function(c)
    return string.format("\\u%04x", string.byte(c))
  end)
  return '"' .. s .. '"'
end

function done(summary, latency, requests)
  local bad, first = 0, ""
  for _, thread in ipairs(threads) do
    bad = bad + (thread:get("non200") or 0)
    local e = thread:get("first_error") or ""
    if first == "" and e ~= "" then
      first = e
    end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,"lat_mean_us":%.1f,"lat_p50_us":%d,'
      .. '"lat_p90_us":%d,"lat_p99_us":%d,"lat_max_us":%d,"err_connect":%d,"err_read":%d,"err_write":%d,'
      .. '"err_status":%d,"err_timeout":%d,"non200":%d,"first_error":%s}\n',
    summary.requests, summary.duration, summary.bytes, latency.mean, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.max, e.connect, e.read, e.write,
    e.status, e.timeout, bad, json_string(first)))
end
