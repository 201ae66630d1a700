-- Tollgate: release_lease, shared by settle.lua and lease.lua (the Go
-- side puts it after check.lua's wire constants and before either).

-- release_lease frees the slots of the lease whose record is lkey (a
-- hash check.lua wrote: n rules, ki each rule's state key) and deletes
-- the record. It returns 1 when a slot was still held at now (µs), 0 when
-- none was (released before, or expired). The Go twin is
-- limiter.MemoryStore.releaseLocked.
local function release_lease(lkey, now)
  local flat = redis.call('HGETALL', lkey)
  if #flat == 0 then return 0 end
  local rec = {}
  for x = 1, #flat, 2 do rec[flat[x]] = flat[x + 1] end
  local held = 0
  for x = 1, tonumber(rec.n) do
    local key = rec['k' .. x]
    local expiry = redis.call('ZSCORE', key, lkey)
    if expiry then
      if tonumber(expiry) > now then held = 1 end
      redis.call('ZREM', key, lkey)
    end
  end
  redis.call('DEL', lkey)
  return held
end
