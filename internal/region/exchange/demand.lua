-- Tollgate: read one hash tag's demand and allotment tables for the
-- rebalancer of global_split windows (docs/regions.md). KEYS[1] the
-- demand table (a hash: per state key the units its checks asked for
-- since the last read, check.lua adds them), emptied here; KEYS[2] the
-- allotment table (a hash: per state key the units moved to this region,
-- negative for units moved away). Returns both, as HGETALL does.
local demand = redis.call('HGETALL', KEYS[1])
if #demand > 0 then redis.call('DEL', KEYS[1]) end
return {demand, redis.call('HGETALL', KEYS[2])}
