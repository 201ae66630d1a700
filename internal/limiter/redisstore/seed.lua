-- Tollgate: rebuild the tallies of one hash tag that Redis lost (a
-- restart without persistence, FLUSHALL), then set the tag's seed marker
-- (limiter.TallySeeder; seed.go runs it, package quota gives the counts
-- from the rollups). check.lua and lean.lua decide a tally only while its
-- marker exists, so nothing a check writes can meet these writes.
--
-- KEYS     the seed marker, then the state key of every tally to write
-- ARGV     month_start (µs, the month the counts are of), extra_ttl_ms,
--          last (1: set the marker), then per tally its count
--
-- Returns 0 when the marker exists (nothing written), -1 when Redis's
-- clock is in another month than month_start (nothing written), and 1
-- once every tally is written as the window of the month with at least
-- its count (a count the state holds for the month already, from an
-- earlier call, is never lowered).

-- check.lua's prelude (idiv, …) and the calendar (seed.go puts them here):
--[[check.lua prelude]]

--[[calendar.lua]]

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local start, finish = month(now)
if start ~= tonumber(ARGV[1]) then return -1 end
local ttl = -idiv(now - finish, 1000) + tonumber(ARGV[2])
for x = 2, #KEYS do
  local count = tonumber(ARGV[x + 2])
  local st = redis.call('HMGET', KEYS[x], 'window', 'count')
  if st[1] and tonumber(st[1]) == start and tonumber(st[2]) > count then count = tonumber(st[2]) end
  redis.call('HSET', KEYS[x], 'window', start, 'count', count)
  redis.call('PEXPIRE', KEYS[x], ttl)
end
if ARGV[3] == '1' then redis.call('SET', KEYS[1], '1') end
return 1
