-- Tollgate: claim one hash tag's outbox for the exchange between regions
-- (docs/regions.md). The outbox (KEYS[1]) holds what checks admitted on
-- the tag's global rules since the last claim (check.lua adds to it);
-- the claimed outbox (KEYS[2]) holds it until the other regions have it,
-- its sequence in field '#' and the time of the claim in field '@' (µs,
-- Redis's clock: no admission in it is later, apply.lua's rates count
-- from it). KEYS[3] is the tag's sequences (apply.lua's
-- hash: the last applied from each other region), whose field '#claimed'
-- keeps the last sequence a claim of this tag took.
--
-- A claimed outbox left by a publish that failed is returned as it is,
-- with its own sequence: it must reach the others before anything newer
-- of the tag does. Otherwise the outbox, if any, becomes the claimed one
-- under sequence ARGV[1], which is greater than every sequence this
-- region used before — unless another sender of the region (two workers
-- for a moment both believing they hold the lease) claimed the tag under
-- a later sequence meanwhile: then nothing is claimed, since the others
-- would skip an earlier sequence of the tag as applied, and the next
-- claim, under a new sequence, takes it.
--
-- A claim takes at most ARGV[2] fields, so that a message stays within
-- what the stream takes however long the exchange was held up (a NATS
-- outage): from a fuller outbox it moves that many fields, whole (each
-- field's units go together), and leaves the rest to the next claims.
--
-- Returns the claimed outbox's fields and values (HGETALL), or nothing.
if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
  local last = tonumber(redis.call('HGET', KEYS[3], '#claimed') or '0')
  if tonumber(ARGV[1]) <= last then return {} end
  local most = tonumber(ARGV[2])
  if redis.call('HLEN', KEYS[1]) <= most then
    redis.call('RENAME', KEYS[1], KEYS[2])
  else
    local cursor, moved = '0', 0
    repeat
      local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', most - moved)
      cursor = page[1]
      local kv = page[2]
      for i = 1, #kv, 2 do
        if moved < most and redis.call('HSETNX', KEYS[2], kv[i], kv[i + 1]) == 1 then
          redis.call('HDEL', KEYS[1], kv[i])
          moved = moved + 1
        end
      end
    until cursor == '0' or moved >= most
  end
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[2], '#', ARGV[1], '@', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])))
  redis.call('HSET', KEYS[3], '#claimed', ARGV[1])
end
return redis.call('HGETALL', KEYS[2])
