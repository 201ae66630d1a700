-- Tollgate: give units of this region's allotment of a global_split
-- window to another region (docs/regions.md). The donor lowers its own
-- allotment first and, in the same call, puts the release in the tag's
-- outbox, which the exchanger claims and publishes under its sequence:
-- the recipient raises its allotment only when the release arrives, so
-- the allotments never sum to more than the limit, and a crash between
-- the two halves cannot happen.
--
-- KEYS[1]  the tag's allotment table; KEYS[2] its outbox; KEYS[3] the
--          state key (also the tables' field)
-- ARGV[1]  this region's equal share of the limit; ARGV[2] the floor
--          (min_share); ARGV[3] the units to give; ARGV[4] the recipient;
--          ARGV[5] 1 to give only once the state counts nothing (units
--          moved here given back to the regions they came from when no
--          region has demand on the state: its window ended with nothing
--          admitted since)
--
-- The allotment never goes below the floor nor below what the state has
-- already admitted (a window's count, a counter's count and previous
-- count, a log's entries: more than the current window holds, which is
-- safe): what the region admitted stays within what it keeps. A field
-- back at 0 (the equal share) goes, so that the table holds only the
-- states whose allotments moved. Returns the units given (0: none).
local moved = tonumber(redis.call('HGET', KEYS[1], KEYS[3]) or '0')
local allotment = tonumber(ARGV[1]) + moved
local used = 0
local kind = redis.call('TYPE', KEYS[3])
if type(kind) == 'table' then kind = kind.ok end
if kind == 'hash' then
  local st = redis.call('HMGET', KEYS[3], 'count', 'prev')
  used = tonumber(st[1] or '0') + tonumber(st[2] or '0')
elseif kind == 'zset' then
  used = redis.call('ZCARD', KEYS[3])
end
if ARGV[5] == '1' and used > 0 then return 0 end
local keep = math.max(used, tonumber(ARGV[2]))
local give = math.min(tonumber(ARGV[3]), allotment - keep)
if give <= 0 then return 0 end
if redis.call('HINCRBY', KEYS[1], KEYS[3], -give) == 0 then redis.call('HDEL', KEYS[1], KEYS[3]) end
redis.call('HINCRBY', KEYS[2], 'r ' .. ARGV[4] .. ' ' .. KEYS[3], give)
return give
