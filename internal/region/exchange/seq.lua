-- Tollgate: the region's next message sequence (docs/regions.md).
--
-- KEYS[1]  the region's last sequence (a counter in its Redis)
--
-- A sequence is greater than every one the region used before: one more
-- than the last, and at least the time now in µs, so that a Redis that
-- comes back empty (the counter lost with it) does not start again below
-- the sequences the other regions have applied, which would make them
-- skip this region's admissions until it caught up. The time also keeps
-- the counter ahead after a failover to a replica that lacked its last
-- increments. Sequences fit a Lua number exactly until the year 2255.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local seq = redis.call('INCR', KEYS[1])
if seq < now then
  seq = now
  redis.call('SET', KEYS[1], string.format('%d', seq))
end
return seq
