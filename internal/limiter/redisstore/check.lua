-- Tollgate: evaluate every rule of one check atomically, all-or-nothing.
--
-- KEYS[i]      state key of rule i (all share one hash tag)
-- ARGV[1]      now in µs, or 0 to take it from TIME
-- ARGV[2]      cost (units, ≥ 0)
-- ARGV[3]      1 = dry run (consume nothing)
-- ARGV[4]      extra TTL in ms added to every key (0 in production)
-- ARGV[5+6(i-1) ..] per rule: algorithm, limit, period µs, burst, flags, 0
--   algorithm: 1 gcra, 2 token_bucket, 3 leaky_bucket, 4 fixed_window,
--              5 sliding_window_log, 6 sliding_window_counter
--   flags: 1 shadow, 2 shape, 4 calendar day, 8 calendar month,
--          16 anchor first request
--
-- Returns {now, admitted, then per rule: allowed, remaining, reset_after,
-- retry_after, delay}. Numbers are integers below 2^53 (exact in doubles).

local function idiv(a, b) -- floor(a / b) exactly, b > 0
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function ceildiv(a, b) return -idiv(-a, b) end
local function max(a, b) if a > b then return a end return b end
local function min(a, b) if a < b then return a end return b end
local function bit(flags, b) return idiv(flags, b) % 2 == 1 end

local DAY = 86400000000

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = idiv(y, 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = idiv(153 * mp + 2, 5) + d - 1
  local doe = yoe * 365 + idiv(yoe, 4) - idiv(yoe, 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = idiv(z, 146097)
  local doe = z - era * 146097
  local yoe = idiv(doe - idiv(doe, 1460) + idiv(doe, 36524) - idiv(doe, 146096), 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + idiv(yoe, 4) - idiv(yoe, 100))
  local mp = idiv(5 * doy + 2, 153)
  local m
  if mp < 10 then m = mp + 3 else m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return y, m
end

local function num(v) if v then return tonumber(v) end return nil end

-- Each evaluator returns: allowed, remaining, reset_after, retry_after,
-- delay, write (a function storing the new state, or nil).

local function gcra(key, p, now, cost)
  local interval = ceildiv(p.period, p.limit)
  local tolerance = interval * p.burst
  local tat = max(num(redis.call('GET', key)) or now, now)
  local function denied(retry)
    return 0, max(0, idiv(tolerance - (tat - now), interval)), tat - now, retry, 0, nil
  end
  -- Decided before any arithmetic on cost, which could lose precision.
  if cost > p.burst then return denied(-1) end
  local new_tat = tat + interval * cost
  local allow_at = new_tat - tolerance
  if now < allow_at then return denied(allow_at - now) end
  local delay = 0
  if p.shape then delay = tat - now end
  local write = nil
  if cost > 0 then
    write = function(extra) redis.call('SET', key, new_tat, 'PX', ceildiv(new_tat - now, 1000) + extra) end
  end
  return 1, idiv(tolerance - (new_tat - now), interval), new_tat - now, 0, delay, write
end

local function token_bucket(key, p, now, cost)
  local refills = p.limit > 0
  local unit = 1
  if refills then unit = ceildiv(p.period, p.limit) end
  local capacity = unit * p.burst
  local available = capacity
  local st = redis.call('HMGET', key, 'tokens', 'stamp')
  if st[1] then
    available = tonumber(st[1])
    -- Also when now is before stamp (a clock stepped back): the bucket then
    -- holds less, exactly as GCRA's TAT lies further ahead.
    if refills then available = min(capacity, available + (now - tonumber(st[2]))) end
  end
  local function reset_after(left)
    if left >= capacity then return 0 end
    if not refills then return -1 end
    return capacity - left
  end
  local function denied(retry)
    return 0, max(0, idiv(available, unit)), reset_after(available), retry, 0, nil
  end
  -- Decided before any arithmetic on cost, which could lose precision.
  if cost > p.burst then return denied(-1) end
  local need = unit * cost
  if need > available then
    if refills then return denied(need - available) end
    return denied(-1)
  end
  local left = available - need
  local write = nil
  if cost > 0 then
    write = function(extra)
      redis.call('HSET', key, 'tokens', left, 'stamp', now)
      if refills then
        redis.call('PEXPIRE', key, ceildiv(capacity - left, 1000) + extra)
      else
        redis.call('PERSIST', key)
      end
    end
  end
  return 1, idiv(left, unit), reset_after(left), 0, 0, write
end

local function window_bounds(p, now)
  if p.calendar_day then
    local start = idiv(now, DAY) * DAY
    return start, start + DAY
  elseif p.calendar_month then
    local y, m = civil_from_days(idiv(now, DAY))
    local start = days_from_civil(y, m, 1) * DAY
    if m == 12 then y = y + 1; m = 1 else m = m + 1 end
    return start, days_from_civil(y, m, 1) * DAY
  end
  local start = idiv(now, p.period) * p.period
  return start, start + p.period
end

local function fixed_window(key, p, now, cost)
  local st = redis.call('HMGET', key, 'window', 'count')
  local start, finish, count
  if p.anchor then
    start, finish, count = now, now + p.period, 0
    if st[1] and now < tonumber(st[1]) + p.period then
      start = tonumber(st[1]); finish = start + p.period; count = tonumber(st[2])
    end
  else
    start, finish = window_bounds(p, now)
    count = 0
    if st[1] and tonumber(st[1]) == start then count = tonumber(st[2]) end
  end
  local function reset_after(c) if c == 0 then return 0 end return finish - now end
  local function denied(retry)
    return 0, max(0, p.limit - count), reset_after(count), retry, 0, nil
  end
  -- Decided before any arithmetic on cost, which could lose precision.
  if cost > p.limit then return denied(-1) end
  if count + cost > p.limit then return denied(finish - now) end
  local write = nil
  if cost > 0 then
    write = function(extra)
      redis.call('HSET', key, 'window', start, 'count', count + cost)
      redis.call('PEXPIRE', key, ceildiv(finish - now, 1000) + extra)
    end
  end
  return 1, p.limit - count - cost, reset_after(count + cost), 0, 0, write
end

local function sliding_log(key, p, now, cost)
  -- Entries at or before now - period have left the window. They are
  -- dropped only when the log is written, so that a check that admits
  -- nothing changes nothing (even for a clock that later steps back).
  local after = string.format('(%d', now - p.period)
  local count = redis.call('ZCOUNT', key, after, '+inf')
  local newest = 0
  if count > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  local function reset_after(n, latest) if n == 0 then return 0 end return latest + p.period - now end
  local function denied(retry)
    return 0, max(0, p.limit - count), reset_after(count, newest), retry, 0, nil
  end
  -- Decided before any arithmetic on cost, which could lose precision.
  if cost > p.limit then return denied(-1) end
  if count + cost > p.limit then
    -- The (count+cost-limit)-th oldest entry must leave.
    local k = count + cost - p.limit - 1
    local entry = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', k, 1)
    return denied(tonumber(entry[2]) + p.period - now)
  end
  if cost == 0 then
    return 1, p.limit - count, reset_after(count, newest), 0, 0, nil
  end
  local reset = reset_after(1, max(newest, now))
  local write = function(extra)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - p.period))
    -- The members scored now are now:1 .. now:n (they only ever leave
    -- together), so now:n+1 .. are new.
    local at = string.format('%d', now)
    local n = redis.call('ZCOUNT', key, at, at)
    local args = {}
    for i = 1, cost do
      args[#args + 1] = at
      args[#args + 1] = string.format('%d:%d', now, n + i)
      if #args >= 1000 then redis.call('ZADD', key, unpack(args)); args = {} end
    end
    if #args > 0 then redis.call('ZADD', key, unpack(args)) end
    redis.call('PEXPIRE', key, ceildiv(reset, 1000) + extra)
  end
  return 1, p.limit - count - cost, reset, 0, 0, write
end

local function sliding_counter(key, p, now, cost)
  local period = p.period
  local index = idiv(now, period)
  local elapsed = now - index * period
  local curr, prev = 0, 0
  local st = redis.call('HMGET', key, 'window', 'count', 'prev')
  if st[1] then
    local w = tonumber(st[1])
    if w == index then curr = tonumber(st[2]); prev = tonumber(st[3])
    elseif w == index - 1 then prev = tonumber(st[2]) end
  end
  local weighted = prev * (period - elapsed) + curr * period
  local budget = p.limit * period
  local function reset_after(c)
    if c > 0 then return 2 * period - elapsed end
    if prev > 0 then return period - elapsed end
    return 0
  end
  local function denied(retry)
    return 0, max(0, idiv(budget - weighted, period)), reset_after(curr), retry, 0, nil
  end
  -- Decided before any arithmetic on cost, which could lose precision.
  if cost > p.limit then return denied(-1) end
  if weighted + cost * period > budget then
    -- Still in this window: prev * (period - e) <= (limit - curr - cost) * period.
    local room = p.limit - curr - cost
    if room >= 0 and prev > 0 and period - idiv(room * period, prev) < period then
      return denied(max(1, period - idiv(room * period, prev) - elapsed))
    end
    -- In the next window the current count becomes the previous one.
    local earliest = 0
    if curr > 0 then earliest = period - idiv((p.limit - cost) * period, curr) end
    return denied(period - elapsed + max(0, earliest))
  end
  local write = nil
  if cost > 0 then
    write = function(extra)
      redis.call('HSET', key, 'window', index, 'count', curr + cost, 'prev', prev)
      redis.call('PEXPIRE', key, ceildiv(2 * period - elapsed, 1000) + extra)
    end
  end
  return 1, idiv(budget - weighted - cost * period, period), reset_after(curr + cost), 0, 0, write
end

local evaluators = { gcra, token_bucket, gcra, fixed_window, sliding_log, sliding_counter }

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local dry_run = ARGV[3] == '1'
local extra = tonumber(ARGV[4])

local out = { now, 1 }
local writes = {}
local admitted = true
for i = 1, #KEYS do
  local a = 4 + (i - 1) * 6
  local flags = tonumber(ARGV[a + 5])
  local p = {
    limit = tonumber(ARGV[a + 2]), period = tonumber(ARGV[a + 3]), burst = tonumber(ARGV[a + 4]),
    shadow = bit(flags, 1), shape = bit(flags, 2), calendar_day = bit(flags, 4),
    calendar_month = bit(flags, 8), anchor = bit(flags, 16),
  }
  local allowed, remaining, reset_after, retry_after, delay, write =
    evaluators[tonumber(ARGV[a + 1])](KEYS[i], p, now, cost)
  if allowed == 0 and not p.shadow then admitted = false end
  if allowed == 1 and write then writes[#writes + 1] = write end
  local n = #out
  out[n + 1] = allowed; out[n + 2] = remaining; out[n + 3] = reset_after
  out[n + 4] = retry_after; out[n + 5] = delay
end
if admitted and not dry_run then
  for _, write in ipairs(writes) do write(extra) end
end
if not admitted then out[2] = 0 end
return out
