-- redis_ps.lua -- redis-ps metrics for the stock Prometheus redis_exporter (Debian's
-- prometheus-redis-exporter), loaded with its -script option:
--
--   prometheus-redis-exporter -redis.addr redis://127.0.0.1:6379 \
--       -script examples/prometheus/redis_ps.lua
--
-- The exporter runs this with EVAL and exports every returned name/value pair as
--   redis_script_values{key="<name>"} <value>
-- Names are "<metric>" for server-wide counters (the INFO ps section, e.g. ps_pushes) and
-- "<metric>/<tensor key>" per tensor (split on the first '/'):
--   ps_tensor_version, ps_tensor_pushes, ps_tensor_pulls, ps_tensor_sets,
--   ps_tensor_stale_rejects, ps_tensor_dedup_hits, ps_tensor_nonfinite_rejects,
--   ps_tensor_round_pushes, ps_tensor_rows (dim 0: rows of an embedding table),
--   ps_tensor_elements, ps_tensor_memory_bytes (MEMORY USAGE),
--   ps_tensor_staleness_bucket_le_<b> for b in 0 1 2 4 8 16 32 +Inf (cumulative counts of
--   accepted pushes by staleness, as a Prometheus histogram's buckets)
-- plus ps_exporter_tensors (tensors seen) and ps_exporter_truncated (1 when more than
-- MAX_TENSORS tensors exist: the rest are left out to bound the time the script blocks
-- the server). Redis runs scripts atomically: keep MAX_TENSORS modest on big servers.

local MAX_TENSORS = 2000
local out = {}

local function put(name, value)
  out[#out + 1] = name
  out[#out + 1] = tostring(value)
end

-- Server-wide counters: every "name:number" line of INFO ps.
local info = redis.call('INFO', 'ps')
for name, value in string.gmatch(info, '([%w_]+):([%d%.%-]+)') do
  put(name, value)
end

-- Per-tensor series: PS.INFO of every ps-tensor key (SCAN by type).
local fields = {version = 'ps_tensor_version', pushes = 'ps_tensor_pushes',
                pulls = 'ps_tensor_pulls', sets = 'ps_tensor_sets',
                stale_rejects = 'ps_tensor_stale_rejects', dedup_hits = 'ps_tensor_dedup_hits',
                nonfinite_rejects = 'ps_tensor_nonfinite_rejects',
                round_pushes = 'ps_tensor_round_pushes', elements = 'ps_tensor_elements'}
local bounds = {'0', '1', '2', '4', '8', '16', '32', '+Inf'}
local seen, truncated, cursor = 0, 0, '0'
repeat
  local page = redis.call('SCAN', cursor, 'TYPE', 'ps-tensor', 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    if seen >= MAX_TENSORS then
      truncated = 1
      break
    end
    seen = seen + 1
    local r = redis.call('PS.INFO', key)
    for i = 1, #r - 1, 2 do
      local f, v = r[i], r[i + 1]
      if fields[f] then
        put(fields[f] .. '/' .. key, v)
      elseif f == 'shape' then
        put('ps_tensor_rows/' .. key, v[1])
      elseif f == 'staleness_histogram' then
        local cum = 0
        for b = 1, #v do
          cum = cum + v[b]
          put('ps_tensor_staleness_bucket_le_' .. bounds[b] .. '/' .. key, cum)
        end
      end
    end
    put('ps_tensor_memory_bytes/' .. key, redis.call('MEMORY', 'USAGE', key) or 0)
  end
until cursor == '0' or truncated == 1
put('ps_exporter_tensors', seen)
put('ps_exporter_truncated', truncated)
return out
