-- Tollgate: apply another region's admissions on global_shared rules to
-- this region's states of one hash tag, as debits (docs/regions.md):
-- exactly once per source region and sequence, whatever the redeliveries.
--
-- KEYS[1]   the tag's applied sequences (a hash: source region → the last
--           sequence applied; and '#claimed', claim.lua's)
-- KEYS[2…]  the state keys, one per debit
-- ARGV[1]   the source region; ARGV[2] the message's sequence; ARGV[3]
--           when the source claimed the debits from its outbox (µs since
--           the epoch, its Redis's clock; 0: unknown, now): no debit of
--           the message was admitted later
-- ARGV[4…]  per debit, its outbox field without the key ("alg flags a b c
--           window end", as check.lua writes it) and its units
--           (applyHead: the arguments before the debits, exchange.go)
--
-- A release of a global_split window's allotment to this region (which
-- the source's donate.lua took from its own) is a debit whose key is the
-- tag's allotment table and whose field is "r " and the state key: the
-- units are added to this region's allotment, under the same sequence
-- check.
--
-- A debit is the admission's own arithmetic, charged whatever the state
-- (as a settlement above its estimate is, settle.lua), at the time it
-- was admitted: a window counts the units in the window they fell in,
-- and not at all once it has ended; a log adds them with their own time.
-- A rate (a GCRA or leaky bucket, a refilling token bucket) carries no
-- time of its own in its field, so its units count as admitted at the
-- claim (ARGV[3]: the latest they can have been, so never less than
-- their due): a GCRA or leaky bucket's TAT becomes max(TAT, claim) +
-- units × T (the debt at most maxDebt past now), a token bucket's level
-- is taken down from what it held then; a debit whose slots all passed
-- before now changes nothing (a message replayed from long ago, a
-- partition's backlog spread over its length, costs what the global
-- rate says, not fresh debt). A bucket that never refills loses the
-- units, negative allowed. A debit of negative units is a hold settled
-- below its estimate (settle.lua): the same arithmetic backwards, a
-- count never below 0 and a bucket never above its burst; a rate frees
-- only the slots still ahead of now of those it freed at the claim; a
-- log keeps its members (it may over-count those units until they
-- leave its period). Returns the units applied, or -1 for a sequence
-- already applied.
local algGCRA, algTokenBucket, algLeakyBucket = 1, 2, 3
local algFixedWindow, algSlidingWindowLog, algSlidingWindowCounter = 4, 5, 6
local applyHead = 3
local flagAnchorFirstRequest = 16
local maxDebt = 1125899906842624 -- µs, 2^50: limiter's maxDebtUS
local floor = math.floor

local function has(flags, flag) return flags % (2 * flag) >= flag end
local function atLeast0(n) if n < 0 then return 0 end return n end
local function ms(us) -- µs → whole ms, rounded up, at least 1
  local m = floor((us + 999) / 1000)
  if m < 1 then m = 1 end
  return m
end

local source, seq = ARGV[1], tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[1], source) or '0')
if seq <= last then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local claimed = tonumber(ARGV[3])
if claimed <= 0 or claimed > now then claimed = now end -- unknown, or a clock ahead
-- rate returns a rate's "TAT" (GCRA, leaky bucket: the TAT; a refilling
-- bucket: when it is full again, its empty time plus its capacity) after
-- units at the claim, and how long to keep it (ms); false when it
-- changes nothing. A TAT already past is kept for pastKeep all the same:
-- the next debits of a backlog (claimed later, applied next) count from
-- it, as they did where they were admitted; a check reads it as now.
local pastKeep = 60000
local function rate(tat, per, units)
  if units >= 0 then
    if tat < claimed then tat = claimed end
    local debt = per * units
    if debt > maxDebt then debt = maxDebt end
    if debt <= 0 then return false end
    tat = tat + debt
    if tat > now + maxDebt then tat = now + maxDebt end
    if tat <= now then return tat, pastKeep end
    return tat, ms(tat - now)
  end
  -- Units given back at the claim: of the slots they freed then (at
  -- best the first after it), only those still ahead free anything.
  if tat <= now then return false end
  local free = claimed - per * units - now
  if free > -per * units then free = -per * units end
  if free <= 0 then return false end
  tat = tat - free
  if tat <= now then return now, 1 end -- never above its burst
  return tat, ms(tat - now)
end
local applied = 0
for i = 2, #KEYS do
  local key = KEYS[i]
  local field = ARGV[2 * i + applyHead - 3]
  local units = tonumber(ARGV[2 * i + applyHead - 2])
  if string.sub(field, 1, 2) == 'r ' then
    -- A release (matches no algorithm below): key is the allotment table.
    -- A field back at 0 (this region's equal share) goes, so that the
    -- table holds only the states whose allotments moved.
    local member = string.sub(field, 3)
    if redis.call('HINCRBY', key, member, units) == 0 then redis.call('HDEL', key, member) end
  end
  local a, flags, x, y, z, window, finish = string.match(field,
    '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)')
  a, flags, x, y, z = tonumber(a), tonumber(flags), tonumber(x), tonumber(y), tonumber(z)
  window, finish = tonumber(window), tonumber(finish)
  if a == algGCRA or a == algLeakyBucket then
    -- x: the emission interval T
    local tat, keep = rate(tonumber(redis.call('GET', key) or '0'), x, units)
    if tat then
      redis.call('SET', key, string.format('%d', tat), 'PX', keep)
      applied = applied + units
    end
  elseif a == algTokenBucket then
    -- x: the unit, y: the burst, z: 1 when it refills
    if z == 1 then
      local capacity = x * y
      local v = redis.call('GET', key)
      local full = 0 -- when it is full again; long ago when unknown
      if v then full = tonumber(v) + capacity end
      local keep
      full, keep = rate(full, x, units)
      if full then
        redis.call('SET', key, string.format('%d', full - capacity), 'PX', keep)
        applied = applied + units
      end
    else
      local tokens = y
      local v = redis.call('GET', key)
      if v then tokens = tonumber(v) end
      tokens = tokens - units
      if tokens > y then tokens = y end
      redis.call('SET', key, string.format('%d', tokens))
      applied = applied + units
    end
  elseif a == algFixedWindow then
    -- y: the period; window, finish: the window the units fell in
    local st = redis.call('HMGET', key, 'window', 'count')
    if has(flags, flagAnchorFirstRequest) then
      -- Each region anchors its own windows: the units count in this
      -- region's current one; units given back in a window that has
      -- ended where they were admitted are given back nowhere (the
      -- sender's own state keeps them too).
      if units < 0 and now >= finish then
        -- nothing
      elseif st[1] and now < tonumber(st[1]) + y then
        redis.call('HSET', key, 'count', atLeast0(tonumber(st[2]) + units))
      elseif units > 0 then
        redis.call('HSET', key, 'window', string.format('%d', now), 'count', units)
        redis.call('PEXPIRE', key, ms(y))
      end
      applied = applied + units
    elseif now < finish then
      if st[1] and tonumber(st[1]) == window then
        redis.call('HSET', key, 'count', atLeast0(tonumber(st[2]) + units))
        applied = applied + units
      elseif units > 0 and (not st[1] or tonumber(st[1]) < window) then
        redis.call('HSET', key, 'window', string.format('%d', window), 'count', units)
        redis.call('PEXPIRE', key, ms(finish - now))
        applied = applied + units
      end
    end
  elseif a == algSlidingWindowCounter then
    -- y: the period; window: the index of the window the units fell in
    local index = floor(now / y)
    if window >= index - 1 then
      local st = redis.call('HMGET', key, 'window', 'count', 'prev')
      local w = tonumber(st[1] or '-1')
      if w == window then
        redis.call('HSET', key, 'count', atLeast0(tonumber(st[2]) + units))
      elseif w == window + 1 then
        redis.call('HSET', key, 'prev', atLeast0(tonumber(st[3]) + units))
      elseif units > 0 and w == window - 1 then
        redis.call('HSET', key, 'window', window, 'count', units, 'prev', st[2])
      elseif units > 0 and w < window then
        redis.call('HSET', key, 'window', window, 'count', units, 'prev', 0)
      end
      if w <= window + 1 then
        redis.call('PEXPIRE', key, ms((math.max(w, window) + 2) * y - now))
        applied = applied + units
      end
    end
  elseif a == algSlidingWindowLog then
    -- y: the period; window: when the units were admitted
    if window > now - y then
      local args = {}
      for u = 1, units do
        args[#args + 1] = string.format('%d', window)
        args[#args + 1] = string.format('%d:%s:%d:%d', window, source, seq, u)
        if #args >= 1000 then redis.call('ZADD', key, unpack(args)); args = {} end
      end
      if #args > 0 then redis.call('ZADD', key, unpack(args)) end
      local ttl = ms(window + y - now)
      if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
      applied = applied + units
    end
  end
end
redis.call('HSET', KEYS[1], source, ARGV[2]) -- as sent: exact at any size
return applied
