-- Tollgate: clear one hash tag's claimed outbox once the other regions
-- have it (docs/regions.md), only if it is still the claim of sequence
-- ARGV[1]: a worker that lost the region's exchange lease while
-- publishing must not clear a claim the worker holding it made since.
--
-- KEYS[1]  the tag's claimed outbox (claim.lua), its sequence in '#'
-- ARGV[1]  the sequence just published
--
-- Returns 1 when it cleared the claim, 0 otherwise.
if redis.call('HGET', KEYS[1], '#') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
