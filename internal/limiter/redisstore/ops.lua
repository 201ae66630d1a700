-- Tollgate: the operations that follow checks, on the holds and leases
-- they opened: settle or expire holds (settle.lua), renew or release
-- leases (lease.lua), each in one step, one after the other, as that many
-- calls would. A batching store sends the operations queued with its
-- checks in one call, after the checks'.
--
-- KEYS     each operation's record key (a hold's or a lease's); on a
--          Cluster the operations of one call are of one hash slot
-- ARGV     extra_ttl_ms, then per operation: op (an op* code below), now
--          (µs, 0: from TIME), cost (a settlement's actual cost; else 0),
--          n, then n values: a settlement's credit terms, the balance's
--          as the caller has them now (limiter.Settle.Credits), or none
--          (n 0): the balance's counter key, line, overdraft, mode (1
--          overage, 0 deny) and its expiries (at µs, units; soonest
--          first), so n is 4 + 2 × the expiries
--
-- Returns opReplyLen values per operation: a settlement's reply
-- (settle.lua's eight), or a lease's three (lease.lua) and zeros.

-- check.lua's wire constants and helpers, and release.lua's
-- release_lease, come before this file (see ops.go).

-- The op codes: the same names and values as ops.go's.
local opSettle = 1
local opExpire = 2
local opRenew = 3
local opRelease = 4
local opReplyLen = 8

local extra = tonumber(ARGV[1])
local now -- the operation under way's time (µs)

--[[settle.lua]]

--[[lease.lua]]

local out = {}
local base = 2
for k = 1, #KEYS do
  local op = tonumber(ARGV[base])
  now = at(tonumber(ARGV[base + 1]))
  local n = tonumber(ARGV[base + 3])
  local terms
  if n > 0 then
    local exps = {}
    for x = base + 8, base + 3 + n do exps[#exps + 1] = tonumber(ARGV[x]) end
    terms = {key = ARGV[base + 4], line = tonumber(ARGV[base + 5]), overdraft = tonumber(ARGV[base + 6]),
      mode = ARGV[base + 7], exps = exps}
  end
  local reply
  if op == opSettle or op == opExpire then
    reply = settle(KEYS[k], tonumber(ARGV[base + 2]), op == opExpire, terms)
  else
    reply = lease(op, KEYS[k])
  end
  for x = 1, opReplyLen do out[#out + 1] = reply[x] or 0 end
  base = base + 4 + n
end
return out
