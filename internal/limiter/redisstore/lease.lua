-- Tollgate: renew or release a lease of concurrency rules in one step:
-- its record (written by check.lua) and every rule state it holds a slot
-- of. ops.lua calls lease, once per renewal or release of its call.
--
-- lease(op, lkey): op is opRenew or opRelease, lkey the lease record's key
-- (the state keys it lists share its hash tag); now is ops.lua's, the
-- operation's time. It returns code, now, value: renew: code 0 and the
-- lease's new expiry (the earliest of its slots'), or code 1 when the
-- lease is unknown, released or expired (its earliest slot's expiry has
-- passed: the slots may be someone else's now); release: code 0 and 1
-- when a slot was still held, else 0. The Go twin is
-- limiter.MemoryStore's Renew and Release.

local function lease(op, lkey)
  if op == opRelease then return {0, now, release_lease(lkey, now)} end

  local flat = redis.call('HGETALL', lkey)
  if #flat == 0 then return {1, now, 0} end
  local rec = {}
  for x = 1, #flat, 2 do rec[flat[x]] = flat[x + 1] end
  local n = tonumber(rec.n)
  for x = 1, n do
    local expiry = redis.call('ZSCORE', rec['k' .. x], lkey)
    if not expiry or tonumber(expiry) <= now then return {1, now, 0} end
  end
  local expires, longest = 0, 0
  for x = 1, n do
    local key, lease_ttl = rec['k' .. x], tonumber(rec['t' .. x])
    redis.call('ZADD', key, 'XX', string.format('%d', now + lease_ttl), lkey)
    local keep = -idiv(-lease_ttl, 1000) + extra
    if redis.call('PTTL', key) < keep then redis.call('PEXPIRE', key, keep) end
    if expires == 0 or now + lease_ttl < expires then expires = now + lease_ttl end
    if lease_ttl > longest then longest = lease_ttl end
  end
  local keep = -idiv(-longest, 1000) + extra
  if redis.call('PTTL', lkey) < keep then redis.call('PEXPIRE', lkey, keep) end
  return {0, now, expires}
end
