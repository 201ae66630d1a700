-- Tollgate: renew or release a lease of concurrency rules in one step:
-- its record (written by check.lua) and every rule state it holds a slot
-- of.
--
-- KEYS[1]  the lease record's key; the state keys it lists share its hash
--          tag
-- ARGV     op (1 renew, 2 release), now (µs, 0: from TIME), extra_ttl_ms
--
-- Returns code, now, value: renew: code 0 and the lease's new expiry (the
-- earliest of its slots'), or code 1 when the lease is unknown, released
-- or expired (its earliest slot's expiry has passed: the slots may be
-- someone else's now); release: code 0 and 1 when a slot was still held,
-- else 0. The Go twin is limiter.MemoryStore's Renew and Release.

-- The wire constants, idiv and release_lease come before this file (see
-- lease.go).

local lkey = KEYS[1]
local op, now, extra = tonumber(ARGV[1]), at(tonumber(ARGV[2])), tonumber(ARGV[3])

if op == 2 then return {0, now, release_lease(lkey, now)} end

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
