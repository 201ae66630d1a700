-- Tollgate: the lean twin of check.lua for the common shapes. It decides
-- a batch of checks exactly as check.lua does (same state, same answers,
-- same reply), but only checks whose rules are GCRA, leaky buckets, token
-- buckets and fixed windows aligned to calendar months (the monthly quota
-- and the spend cap), without holds or a global_split rule's allotment
-- (a global_shared rule's outbox it writes). Its arguments are plain numbers, so
-- that a lone check pays for no MessagePack decoding, no table per rule
-- and no parameter table per call. store.go chooses it (see lean.go).
--
-- KEYS     the state key of every rule of every check, in order
-- ARGV     extra_ttl_ms, report_state,
--          then per check: now, cost, dry_run, nrules, usage,
--          then per rule: kind, a, b, c, and for a kind with kindExchange
--          (a global_shared rule) its outbox head
--   usage is the check's usage row (statekey.go), or '' for none; when a
--   check has one, the call's journal key is the last of KEYS, and an
--   admitted check adds its units and decision to it, as check.lua does
--   (within journalCap: past it the check is answered admittedUnjournaled).
--   kind is the algorithm's code × kindAlgorithm, + kindShape for a
--   shaping leaky bucket, + kindShadow for a shadow rule, + kindSeedOpen
--   or kindSeedClosed for a tally, + kindExchange for a global_shared
--   rule (check.lua declares them, and the
--   algorithm codes, as wire.go does; a tally is decided as check.lua
--   decides it, unknown without its seed marker). a, b, c are
--   check.lua's three numbers of the algorithm, but for a calendar-month
--   fixed window: its limit, and the start and end (µs) of the month the
--   caller's clock was in; a check whose time falls outside them works
--   its month out from the calendar, as check.lua does. The outbox head
--   is "alg flags a b c" of the rule as check.lua has it (wire.go): an
--   admitted check adds its cost to the outbox of each such rule's hash
--   tag, field head, window, end and state key, as check.lua does.
--
-- Returns check.lua's reply (a MessagePack array: per check now, admitted,
-- per rule allowed, remaining, reset_after, retry_after, delay; and the
-- states the rules were decided on for a check not admitted when
-- report_state is 1).

-- check.lua's wire constants, floor, tonumber, has and idiv (lean.go
-- puts them here):
--[[check.lua prelude]]

--[[calendar.lua]]

local extra = tonumber(ARGV[1])
local report = ARGV[2] == '1'
local nargs = #ARGV

-- One GET (or MGET) reads every key kept as a single number (every kind
-- but a fixed window's); writes update the cache, so that a
-- later check of the batch on the same key sees the earlier one's state.
local cache = {}
if #KEYS == 1 then
  if floor(tonumber(ARGV[8]) % kindSeedOpen / kindAlgorithm) ~= algFixedWindow then cache[KEYS[1]] = redis.call('GET', KEYS[1]) end
else
  local mkeys, nk = {}, 0
  local j, k = 3, 0
  while j <= nargs do
    local nrules = tonumber(ARGV[j + 3])
    j = j + 5
    for _ = 1, nrules do
      k = k + 1
      local kind = tonumber(ARGV[j])
      if floor(kind % kindSeedOpen / kindAlgorithm) ~= algFixedWindow then nk = nk + 1; mkeys[nk] = KEYS[k] end
      j = j + 4
      if has(kind, kindExchange) then j = j + 1 end
    end
  end
  if nk == 1 then
    cache[mkeys[1]] = redis.call('GET', mkeys[1])
  elseif nk > 1 then
    local vals = redis.call('MGET', unpack(mkeys))
    for x = 1, nk do cache[mkeys[x]] = vals[x] end
  end
end

local out, n, k = {}, 0, 0
-- The current check's writes, six slots each: key, kind, number (or
-- window), count, time to live (ms, before extra) and, for a
-- global_shared rule, its outbox field (else false); and the states its
-- rules were decided on, three slots each.
local w, st = {}, {}
local i = 3
while i <= nargs do
  local now, cost, dry, nrules, usage = at(tonumber(ARGV[i])), tonumber(ARGV[i + 1]), ARGV[i + 2] == '1', tonumber(ARGV[i + 3]), ARGV[i + 4]
  i = i + 5
  local head = n + 2
  out[n + 1] = now
  out[head] = 1
  n = head
  local admitted, nw = true, 0
  for r = 1, nrules do
    local kind = tonumber(ARGV[i])
    local a = floor(kind % kindSeedOpen / kindAlgorithm)
    k = k + 1
    local key = KEYS[k]
    local allowed, remaining, reset, retry, delay = 0, 0, 0, 0, 0
    -- The state the rule was decided on, as check.lua reports it.
    local state1, state2 = 0, 0
    local write, number, count, ttl = false, 0, 0, 0
    -- The outbox field's window and end (the rates: 0 0).
    local window = ' 0 0 '

    if a == algFixedWindow then -- a calendar month
      local limit, start, finish = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
      if now < start or now >= finish then start, finish = month(now) end
      local s = redis.call('HMGET', key, 'window', 'count')
      local used = 0
      if s[1] and tonumber(s[1]) == start then used = tonumber(s[2]) end
      state1, state2 = start, used
      if cost > limit or used + cost > limit then
        remaining = limit - used
        if remaining < 0 then remaining = 0 end
        if cost > limit then retry = -1 else retry = finish - now end
      else
        allowed = 1
        used = used + cost
        remaining = limit - used
        if cost > 0 then
          write, number, count, ttl = true, start, used, -idiv(now - finish, 1000)
          if has(kind, kindExchange) then window = string.format(' %d %d ', start, finish) end
        end
      end
      if used == 0 then reset = 0 else reset = finish - now end
      if (has(kind, kindSeedOpen) or has(kind, kindSeedClosed)) and not seeded(key) then
        -- A tally whose state may be lost (check.lua says more).
        allowed, remaining, reset, retry, write = 2, 0, 0, 0, false
        if has(kind, kindSeedClosed) and cost > 0 and not dry and not has(kind, kindShadow) then admitted = false end
      end
    else
      local shape = has(kind, kindShape)
      local interval, burst, third = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
      local tolerance, refills = third, third == 1
      local v = cache[key]
      local tat, tokens = 0, 0
      --[[rate.lua]]
      if a == algTokenBucket then state1, state2 = tokens, now else state1 = tat end
    end
    local field = false
    if has(kind, kindExchange) then
      if write and allowed == 1 then field = ARGV[i + 4] .. window .. key end
      i = i + 1
    end
    i = i + 4

    if allowed == 0 and not has(kind, kindShadow) then admitted = false end
    if write and allowed == 1 then
      w[nw + 1], w[nw + 2], w[nw + 3], w[nw + 4], w[nw + 5], w[nw + 6] = key, a, number, count, ttl, field
      nw = nw + 6
    end
    if report then
      local b = 3 * r
      st[b - 2], st[b - 1], st[b] = state1, state2, 0
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed, remaining, reset, retry, delay
    n = n + 5
  end

  if admitted and not dry then
    if usage ~= '' and not journal(KEYS[#KEYS], usage, now, cost) then out[head] = admittedUnjournaled end
    for x = 1, nw, 6 do
      local key, a, number, ttl = w[x], w[x + 1], w[x + 2], w[x + 4]
      if a == algFixedWindow then
        redis.call('HSET', key, 'window', number, 'count', w[x + 3])
        redis.call('PEXPIRE', key, ttl + extra)
      else
        if ttl >= 0 then redis.call('SET', key, number, 'PX', ttl + extra) else redis.call('SET', key, number) end
        cache[key] = number
      end
      if w[x + 5] then outbox(key, w[x + 5], cost) end
    end
  end
  if not admitted then
    out[head] = 0
    if report then
      for x = 1, 3 * nrules do out[n + x] = st[x] end
      n = n + 3 * nrules
    end
  end
end

journalFlush(KEYS[#KEYS])

return cmsgpack.pack(out)
