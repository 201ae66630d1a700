-- Tollgate: the decision of one GCRA, leaky bucket or token bucket rule,
-- spliced into check.lua, lean.lua and lean1.lua where they say
-- --[[rate.lua]] (lean.go, store.go), so that all three decide such a
-- rule with the same code. It reads now, cost, kind, a (the algorithm), pa,
-- pb, pc (the rule's numbers) and v (the key's stored number, or false),
-- and sets allowed, remaining, reset, retry, delay, x1, x2 (the state it
-- decided on) and write, number, ttl (what to store when admitted).
if a == algGCRA or a == algLeakyBucket then -- GCRA, leaky bucket: pa interval, pb burst, pc tolerance
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

elseif a == algTokenBucket then -- token bucket: pa unit, pb burst, pc 1 if it refills
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
