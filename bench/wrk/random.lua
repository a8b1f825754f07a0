-- wrk script for the bench/ scripts: random requests, and a JSON summary on the last line.
--
--   wrk ... -s bench/wrk/random.lua http://127.0.0.1:PORT -- MODE ARGS...
--
-- MODE zarr PREFIX D1 D2 ...   GET PREFIX/c/i1/i2/... with each index uniform in [0, Dk): random
--                              chunks of an array whose chunk grid is D1 x D2 x ...
-- MODE range CHUNKS PER_FILE BYTES
--                              GET /data/src-NN.bin with "Range: bytes=a-b": chunk i (uniform in
--                              [0, CHUNKS)) is bytes [(i mod PER_FILE) * BYTES, +BYTES) of file
--                              i div PER_FILE, as bench/gen_native.py lays out big1m.json
-- MODE fixed PATH              GET PATH every time
--
-- Every thread draws its own sequence (seeded with its number), so runs are reproducible.

local counter = 0
local threads = {}

function setup(thread)
   counter = counter + 1
   thread:set("id", counter)
   table.insert(threads, thread)
end

local mode, prefix, dims, path
local chunks, per_file, size

function init(args)
   math.randomseed(1000 + (id or 0))
   mode = args[1]
   if mode == "zarr" then
      prefix = args[2]
      dims = {}
      for i = 3, #args do dims[#dims + 1] = tonumber(args[i]) end
   elseif mode == "range" then
      chunks, per_file, size = tonumber(args[2]), tonumber(args[3]), tonumber(args[4])
   elseif mode == "fixed" then
      path = args[2]
   else
      error("unknown mode " .. tostring(mode))
   end
end

function request()
   if mode == "zarr" then
      local parts = {prefix, "c"}
      for i = 1, #dims do parts[#parts + 1] = tostring(math.random(0, dims[i] - 1)) end
      return wrk.format("GET", table.concat(parts, "/"))
   elseif mode == "range" then
      local i = math.random(0, chunks - 1)
      local start = (i % per_file) * size
      local file = string.format("/data/src-%02d.bin", math.floor(i / per_file))
      return wrk.format("GET", file, {Range = string.format("bytes=%d-%d", start, start + size - 1)})
   else
      return wrk.format("GET", path)
   end
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      '{"wrk": 1, "requests": %d, "seconds": %.6f, "bytes": %d, ' ..
      '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
      '"latency_us": {"p50": %d, "p90": %d, "p99": %d, "p999": %d, "max": %d, "mean": %.1f}}\n',
      summary.requests, summary.duration / 1e6, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
      latency.max, latency.mean))
end
