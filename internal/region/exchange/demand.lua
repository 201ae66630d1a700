-- Tollgate: read one hash tag's demand and allotment tables for the
-- rebalancer of global_split windows (docs/regions.md). KEYS[1] the
-- demand table (a hash: per state key the units its checks asked for
-- since the last read, check.lua adds them), emptied here; KEYS[2] the
-- allotment table (a hash: per state key the units moved to this region,
-- negative for units moved away). Returns both, as HGETALL does, and the
-- state keys of the allotment table with units moved here whose state
-- counts something (as donate.lua reads it: a window's count and
-- previous count, a log's entries): donate.lua gives such a state's
-- units back only once it counts nothing, so the rebalancer does not ask
-- it to while it counts. The states are in the tag's slot.
local demand = redis.call('HGETALL', KEYS[1])
if #demand > 0 then redis.call('DEL', KEYS[1]) end
local moved = redis.call('HGETALL', KEYS[2])
local counting = {}
for i = 1, #moved, 2 do
  if tonumber(moved[i + 1]) > 0 then
    local key = moved[i]
    local used = 0
    local kind = redis.call('TYPE', key)
    if type(kind) == 'table' then kind = kind.ok end
    if kind == 'hash' then
      local st = redis.call('HMGET', key, 'count', 'prev')
      used = tonumber(st[1] or '0') + tonumber(st[2] or '0')
    elseif kind == 'zset' then
      used = redis.call('ZCARD', key)
    end
    if used > 0 then counting[#counting + 1] = key end
  end
end
return {demand, moved, counting}
