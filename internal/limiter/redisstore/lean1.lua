-- Tollgate: lean.lua for its most common call, one check of one GCRA,
-- leaky bucket or token bucket rule (an anonymous caller's, or a key's
-- on most routes), without loops or tables: a call that goes out alone
-- costs Redis little more than the algorithm itself. Arguments, decisions,
-- state and reply are lean.lua's (and so check.lua's) for such a call:
--
-- KEYS[1]  the rule's state key
-- ARGV     extra_ttl_ms, report_state, now, cost, dry_run, 1 (rules),
--          kind, a, b, c

-- Wire constants: the same names and values as wire.go (a test compares
-- them).
local algGCRA = 1
local algTokenBucket = 2
local algLeakyBucket = 3

local floor = math.floor
local tonumber = tonumber

local function idiv(a, b) -- floor(a / b) exactly, b > 0
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local key = KEYS[1]
local now = tonumber(ARGV[3])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost, kind, pa, pb, pc = tonumber(ARGV[4]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local a = floor(kind / 4)
local v = redis.call('GET', key)
local allowed, remaining, reset, retry, delay = 0, 0, 0, 0, 0
local x1, x2 = 0, 0
local write, number, ttl = false, 0, 0

if a == algGCRA or a == algLeakyBucket then -- pa interval, pb burst, pc tolerance
  local tat = now
  if v then
    v = tonumber(v)
    if v > now then tat = v end
  end
  x1 = tat
  local new_tat, allow_at = 0, 0
  if cost <= pb then
    new_tat = tat + pa * cost
    allow_at = new_tat - pc
  end
  if cost > pb or now < allow_at then
    remaining = idiv(pc - (tat - now), pa)
    if remaining < 0 then remaining = 0 end
    reset = tat - now
    if cost > pb then retry = -1 else retry = allow_at - now end
  else
    allowed = 1
    remaining = idiv(pc - (new_tat - now), pa)
    reset = new_tat - now
    if kind % 4 >= 2 then delay = tat - now end
    if cost > 0 then
      write, number, ttl = true, new_tat, -idiv(now - new_tat, 1000)
    end
  end

elseif a == algTokenBucket then -- pa unit, pb burst, pc 1 if it refills
  local refills = pc == 1
  local capacity = pa * pb
  local available = capacity
  if v then
    if refills then
      available = now - tonumber(v)
      if available > capacity then available = capacity end
    else
      available = tonumber(v)
    end
  end
  x1, x2 = available, now
  local left = available
  local need = pa * cost
  if cost > pb or need > available then
    remaining = idiv(available, pa)
    if remaining < 0 then remaining = 0 end
    if cost > pb or not refills then retry = -1 else retry = need - available end
  else
    allowed = 1
    left = available - need
    remaining = idiv(left, pa)
    if cost > 0 then
      if refills then
        write, number, ttl = true, now - left, -idiv(left - capacity, 1000)
      else
        write, number, ttl = true, left, -1
      end
    end
  end
  if left >= capacity then reset = 0 elseif not refills then reset = -1 else reset = capacity - left end
end

if allowed == 1 then
  if write and ARGV[5] ~= '1' then
    if ttl >= 0 then redis.call('SET', key, number, 'PX', ttl + tonumber(ARGV[1])) else redis.call('SET', key, number) end
  end
  return cmsgpack.pack({now, 1, 1, remaining, reset, retry, delay})
end
if kind % 2 == 1 then -- a shadow rule: reported, never denies
  return cmsgpack.pack({now, 1, 0, remaining, reset, retry, delay})
end
if ARGV[2] == '1' then
  return cmsgpack.pack({now, 0, 0, remaining, reset, retry, delay, x1, x2, 0})
end
return cmsgpack.pack({now, 0, 0, remaining, reset, retry, delay})
