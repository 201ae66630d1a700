-- Tollgate: lean.lua for its most common call, one check of one GCRA,
-- leaky bucket or token bucket rule (an anonymous caller's, or a key's
-- on most routes), without loops or tables: a call that goes out alone
-- costs Redis little more than the algorithm itself. Arguments, decisions,
-- state and reply are lean.lua's (and so check.lua's) for such a call:
--
-- KEYS[1]  the rule's state key; KEYS[2] its hash tag's usage journal
--          when usage is not '' (appended to within journalCap)
-- ARGV     extra_ttl_ms, report_state, now, cost, dry_run, 1 (rules),
--          usage, kind, a, b, c, and for a kind with kindExchange (a
--          global_shared rule) its outbox head: an admission adds its cost
--          to the outbox of the state's hash tag, as check.lua does

-- check.lua's wire constants, floor, tonumber, has and idiv (lean.go
-- puts them here):
--[[check.lua prelude]]

local key = KEYS[1]
local now = at(tonumber(ARGV[3]))
local cost, kind = tonumber(ARGV[4]), tonumber(ARGV[8])
local a, shape = floor(kind % kindSeedOpen / kindAlgorithm), has(kind, kindShape)
-- The rule's numbers (lean.lua's a, b, c), as rate.lua names them.
local interval, burst, third = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local tolerance, refills = third, third == 1
local v = redis.call('GET', key)
local allowed, remaining, reset, retry, delay = 0, 0, 0, 0, 0
local tat, tokens = 0, 0
local write, number, ttl = false, 0, 0

--[[rate.lua]]

-- A shadow rule is reported, never denies.
local admitted = allowed == 1 or has(kind, kindShadow)
-- The reply's admitted: 1, or admittedUnjournaled when the usage entry
-- would take the journal past journalCap.
local yes = 1
if admitted and ARGV[5] ~= '1' then
  if write and allowed == 1 then
    if ttl >= 0 then redis.call('SET', key, number, 'PX', ttl + tonumber(ARGV[1])) else redis.call('SET', key, number) end
    if has(kind, kindExchange) then outbox(key, ARGV[12] .. ' 0 0 ' .. key, cost) end
  end
  if ARGV[7] ~= '' then -- its usage entry (check.lua's journal, without a table)
    local v = '1:1'
    if cost ~= 1 then
      v = string.format('%d', cost)
      v = #v .. ':' .. v
    end
    if not journalAppend(KEYS[2], ARGV[7] .. journalMinute(now) .. v) then yes = admittedUnjournaled end
  end
end
if allowed == 1 then
  return cmsgpack.pack({now, yes, 1, remaining, reset, retry, delay})
end
if admitted then
  return cmsgpack.pack({now, yes, 0, remaining, reset, retry, delay})
end
if ARGV[2] == '1' then
  if a == algTokenBucket then
    return cmsgpack.pack({now, 0, 0, remaining, reset, retry, delay, tokens, now, 0})
  end
  return cmsgpack.pack({now, 0, 0, remaining, reset, retry, delay, tat, 0, 0})
end
return cmsgpack.pack({now, 0, 0, remaining, reset, retry, delay})
