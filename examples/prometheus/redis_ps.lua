-- redis_ps.lua -- redis-ps metrics for the stock Prometheus redis_exporter (Debian's
-- prometheus-redis-exporter), loaded with its -script option:
--
--   prometheus-redis-exporter -redis.addr redis://127.0.0.1:6379 \
--       -script examples/prometheus/redis_ps.lua
--
-- The exporter runs this with EVAL and exports every returned name/value pair as
--   redis_script_values{key="<name>"} <value>
-- Names are "<metric>" for server-wide counters (the INFO ps section, e.g. ps_pushes) and
-- "<metric>/<key>" per tensor or embedding table (split on the first '/').
-- Tensors (type ps-tensor):
--   ps_tensor_version, ps_tensor_pushes, ps_tensor_pulls, ps_tensor_sets,
--   ps_tensor_stale_rejects, ps_tensor_dedup_hits, ps_tensor_nonfinite_rejects,
--   ps_tensor_round_pushes, ps_tensor_rows (dim 0), ps_tensor_elements,
--   ps_tensor_memory_bytes (MEMORY USAGE),
--   ps_tensor_staleness_bucket_le_<b> for b in 0 1 2 4 8 16 32 +Inf (cumulative counts of
--   accepted pushes by staleness, as a Prometheus histogram's buckets)
-- Embedding tables (type ps-embeds; a sharded table is one key per shard):
--   ps_table_rows, ps_table_version, ps_table_created, ps_table_dropped (gradients of ids
--   below ADMIT), ps_table_evicted_ttl, ps_table_evicted_capacity,
--   ps_table_evicted_explicit, ps_table_pushes, ps_table_pulls, ps_table_ids_pulled,
--   ps_table_dedup_hits, ps_table_stale_rejects, ps_table_nonfinite_rejects,
--   ps_table_memory_bytes
-- On a cluster replica only the INFO ps counters are exported (a script there may not read
-- keys of slots its master serves), with ps_exporter_cluster_replica 1: scrape every node,
-- the masters give the per-key series.
-- plus ps_exporter_tensors and ps_exporter_tables (keys seen) and ps_exporter_truncated (1
-- when more than MAX_KEYS keys of the two types exist: the rest are left out to bound the
-- time the script blocks the server). Redis runs scripts atomically: keep MAX_KEYS modest
-- on big servers.

local MAX_KEYS = 2000
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
local tfields = {version = 'ps_table_version', rows = 'ps_table_rows',
                 created = 'ps_table_created', dropped = 'ps_table_dropped',
                 evicted_ttl = 'ps_table_evicted_ttl',
                 evicted_capacity = 'ps_table_evicted_capacity',
                 evicted_explicit = 'ps_table_evicted_explicit', pushes = 'ps_table_pushes',
                 pulls = 'ps_table_pulls', ids_pulled = 'ps_table_ids_pulled',
                 dedup_hits = 'ps_table_dedup_hits', stale_rejects = 'ps_table_stale_rejects',
                 nonfinite_rejects = 'ps_table_nonfinite_rejects'}
local bounds = {'0', '1', '2', '4', '8', '16', '32', '+Inf'}
local seen, tables, truncated = 0, 0, 0

local function tensor(key)
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

local function table_(key)
  local r = redis.call('PS.INFO', key)
  for i = 1, #r - 1, 2 do
    if tfields[r[i]] then put(tfields[r[i]] .. '/' .. key, r[i + 1]) end
  end
  put('ps_table_memory_bytes/' .. key, redis.call('MEMORY', 'USAGE', key) or 0)
end

-- Every key of 'typ' (SCAN by type), up to MAX_KEYS keys in all.
local function each(typ, fn)
  local cursor, n = '0', 0
  repeat
    local page = redis.call('SCAN', cursor, 'TYPE', typ, 'COUNT', 1000)
    cursor = page[1]
    for _, key in ipairs(page[2]) do
      if seen + tables >= MAX_KEYS then
        truncated = 1
        return n
      end
      fn(key)
      n = n + 1
      if typ == 'ps-tensor' then seen = seen + 1 else tables = tables + 1 end
    end
  until cursor == '0'
  return n
end

-- A cluster replica serves no slots: a script there may not touch its (replicated) keys, so it
-- exports the server-wide counters only; the per-key series come from the masters' exporters.
local cluster_replica = 0
if string.find(redis.call('INFO', 'cluster'), 'cluster_enabled:1', 1, true) and
   string.find(redis.call('INFO', 'replication'), 'role:slave', 1, true) then
  cluster_replica = 1
else
  each('ps-tensor', tensor)
  if truncated == 0 then each('ps-embeds', table_) end
end
put('ps_exporter_cluster_replica', cluster_replica)
put('ps_exporter_tensors', seen)
put('ps_exporter_tables', tables)
put('ps_exporter_truncated', truncated)
return out
