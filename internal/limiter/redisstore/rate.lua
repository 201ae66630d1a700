-- Tollgate: the decision of one GCRA, leaky bucket or token bucket rule,
-- spliced into check.lua, lean.lua and lean1.lua where they say
-- --[[rate.lua]] (lean.go, store.go), so that all three decide such a
-- rule with the same code. It reads:
--   now, cost   the check's time (µs) and units
--   a           the algorithm (algGCRA, algLeakyBucket, algTokenBucket)
--   shape       true for a leaky bucket that shapes (answers a delay)
--   interval    gcra, leaky bucket: the emission interval T (µs);
--               token bucket: its unit (T, or 1 when it never refills)
--   burst       the burst (all three)
--   tolerance   gcra, leaky bucket: T × burst (µs)
--   refills     token bucket: true when it refills
--   v           the key's stored number, or false
-- and sets allowed, remaining, reset, retry, delay; the state it decided
-- on: tat (gcra, leaky bucket: the theoretical arrival time) or tokens
-- (token bucket: the tokens it had at now, in µs of refill, or whole
-- units when it never refills); and write, number, ttl (what to store
-- when admitted).
if a == algGCRA or a == algLeakyBucket then
  tat = now
  if v then
    v = tonumber(v)
    if v > now then tat = v end
  end
  local new_tat, allow_at = 0, 0
  if cost <= burst then
    new_tat = tat + interval * cost
    allow_at = new_tat - tolerance
  end
  if cost > burst or now < allow_at then
    remaining = idiv(tolerance - (tat - now), interval)
    if remaining < 0 then remaining = 0 end
    reset = tat - now
    if cost > burst then retry = -1 else retry = allow_at - now end
  else
    allowed = 1
    remaining = idiv(tolerance - (new_tat - now), interval)
    reset = new_tat - now
    if shape then delay = tat - now end
    if cost > 0 then
      write, number, ttl = true, new_tat, -idiv(now - new_tat, 1000)
    end
  end

elseif a == algTokenBucket then
  local capacity = interval * burst
  tokens = capacity
  if v then
    if refills then
      tokens = now - tonumber(v)
      if tokens > capacity then tokens = capacity end
    else
      -- A number stored while the rule refilled (a time) is read as
      -- units too: at most full, never beyond.
      tokens = tonumber(v)
      if tokens > capacity then tokens = capacity end
    end
  end
  local left = tokens
  local need = interval * cost
  if cost > burst or need > tokens then
    remaining = idiv(tokens, interval)
    if remaining < 0 then remaining = 0 end
    if cost > burst or not refills then retry = -1 else retry = need - tokens end
  else
    allowed = 1
    left = tokens - need
    remaining = idiv(left, interval)
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
