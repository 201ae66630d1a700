-- Tollgate: settle a hold at its actual cost, or expire it, in one step:
-- the hold's record (written by check.lua) and every state it adjusts.
-- ops.lua calls settle, once per settlement of its call.
--
-- settle(hkey, cost, expire, terms): hkey is the hold record's key (the
-- state keys it lists share its hash tag, so one slot of a Cluster holds
-- them all), cost the actual cost, expire true to expire a due hold as
-- its record says (cost is then ignored), terms nil or the credit terms
-- the settlement carries (key, line, overdraft, mode '1' or '0', exps: a
-- list of at, units); now is ops.lua's, the operation's time. It returns code, now, estimate, cost, status, repeated, ID,
-- opened: code
-- 0 done, 1 no such hold, 2 conflict (settled with another cost, or
-- expired), 3 not yet due (expire); repeated is 1 for a repeated answer,
-- + journaled (2) for a hold whose check journaled its usage; opened is
-- the time of the hold's check (the record's t; now for a record written
-- before it kept t). The hold's usage and its credits' moves count at
-- opened, in the month of the request, however late it is settled: its
-- final units are journaled (statekey.go) in opened's minute when it is
-- settled or expires, unless
-- the entry would take the journal past journalCap (the record then
-- forgets its journal, and this answer and those that repeat it are not
-- journaled: the caller counts the units, once per hold by its hash). The
-- Go twin is limiter.MemoryStore.Settle; the maths per algorithm is
-- limiter.settleRule (see docs/algorithms.md).

local maxDebt = 1125899906842624 -- 2^50 µs, limiter.maxDebtUS

-- The units the settlement under way moves its states by (shift and put
-- read it, and now).
local delta
-- The µs shift last moved a TAT-like state by (negative: freed).
local moved

-- shift moves a TAT-like state (limiter.shiftTAT).
local function shift(stored, mark, interval)
  if stored < now then stored = now end
  if delta < 0 then
    local from = mark + interval * delta
    if from < now then from = now end
    local freed = mark - from
    if freed < 0 then freed = 0 end
    moved = -freed
    stored = stored - freed
    if stored < now then stored = now end
    return stored
  end
  local debt = interval * delta
  if debt > maxDebt then debt = maxDebt end
  local from = mark
  if from < now then from = now end
  local taken = mark + debt - from
  if taken < 0 then taken = 0 end
  moved = taken
  return stored + taken
end

-- put stores a TAT-like number that expires at tat, or deletes the key
-- when tat has passed.
local function put(key, number, tat)
  if tat <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%d', number), 'PX', -idiv(now - tat, 1000) + extra)
  end
end

local function settle(hkey, cost, expire, terms)
  local flat = redis.call('HGETALL', hkey)
  if #flat == 0 then return {1, now, 0, 0, 0, 0, ''} end
  local rec = {}
  for x = 1, #flat, 2 do rec[flat[x]] = flat[x + 1] end
  local estimate, expires, keep = tonumber(rec.e), tonumber(rec.x), tonumber(rec.r)
  local status, settled = tonumber(rec.s), tonumber(rec.v)
  if now >= keep then return {1, now, 0, 0, 0, 0, ''} end
  local journaled = 0
  if rec.j then journaled = 2 end
  local opened = tonumber(rec.t) or now

  -- Where the hold goes (limiter.settleTarget).
  local target, to
  if status == 0 and now >= expires then
    if not expire then return {2, now, estimate, settled, status, journaled, rec.i, opened} end
    if rec.c == '1' then target, to = estimate, 3 else target, to = 0, 2 end
  elseif status == 0 and expire then
    return {3, now, estimate, settled, status, journaled, rec.i, opened}
  elseif status == 0 then
    target, to = cost, 1
  elseif expire or (status == 1 and cost == settled) then
    return {0, now, estimate, settled, status, 1 + journaled, rec.i, opened}
  else
    return {2, now, estimate, settled, status, journaled, rec.i, opened}
  end

  delta = target - estimate

  for r = 1, tonumber(rec.n) do
    local key, def = rec['k' .. r], rec['p' .. r]
    if key then
      local a, flags, x, y, z, mark, finish = string.match(def, '(%d+) (%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)')
      a, flags, x, y, z, mark, finish = tonumber(a), tonumber(flags), tonumber(x), tonumber(y), tonumber(z), tonumber(mark), tonumber(finish)
      if a == algGCRA or a == algLeakyBucket then
        local v = redis.call('GET', key)
        local stored = now
        if v then stored = tonumber(v) end
        local tat = shift(stored, mark, x)
        put(key, tat, tat)
      elseif a == algTokenBucket then
        local capacity = x * y
        local v = redis.call('GET', key)
        if z == 1 then
          -- The stored number is when the bucket was empty: the TAT it
          -- stands for is that plus the capacity.
          local stored = now
          if v then stored = tonumber(v) + capacity end
          local tat = shift(stored, mark, x)
          put(key, tat - capacity, tat)
        else
          local tokens = capacity
          if v then tokens = tonumber(v) end
          -- At most full before the settlement moves it (a number stored
          -- while the rule refilled is a time), as rate.lua reads it.
          if tokens > capacity then tokens = capacity end
          tokens = tokens - delta
          if tokens > capacity then tokens = capacity end
          redis.call('SET', key, string.format('%d', tokens))
        end
      elseif a == algFixedWindow then
        local st = redis.call('HMGET', key, 'window', 'count')
        if st[1] and tonumber(st[1]) == mark then
          local count = tonumber(st[2]) + delta
          if count < 0 then count = 0 end
          redis.call('HSET', key, 'count', count)
        elseif (not st[1] or tonumber(st[1]) < mark) and delta > 0 and finish > now then
          -- A hold of 0 wrote nothing: its window starts now.
          redis.call('HSET', key, 'window', mark, 'count', delta)
          redis.call('PEXPIRE', key, -idiv(now - finish, 1000) + extra)
        end
      elseif a == algSlidingWindowCounter then
        local period = y
        local st = redis.call('HMGET', key, 'window', 'count', 'prev')
        local w = -1
        if st[1] then w = tonumber(st[1]) end
        local field, n
        if st[1] and w == mark then field, n = 'count', tonumber(st[2]) + delta
        elseif st[1] and w == mark + 1 then field, n = 'prev', tonumber(st[3]) + delta end
        if field then
          if n < 0 then n = 0 end
          redis.call('HSET', key, field, n)
        elseif (not st[1] or w < mark) and delta > 0 and (mark + 2) * period > now then
          -- A hold of 0 wrote nothing: its window starts now.
          local prev = 0
          if st[1] and w == mark - 1 then prev = tonumber(st[2]) end
          redis.call('HSET', key, 'window', mark, 'count', delta, 'prev', prev)
          redis.call('PEXPIRE', key, -idiv(now - (mark + 2) * period, 1000) + extra)
        end
      elseif a == algSlidingWindowLog then
        local limit, period = x, y
        local exists = redis.call('EXISTS', key) == 1
        if mark > now - period and (exists or delta > 0) then
          local at = string.format('%d', mark)
          local n = redis.call('ZCOUNT', key, at, at)
          local keepn
          if delta < 0 then
            keepn = n + delta
            if keepn < 0 then keepn = 0 end
          else
            local add = delta
            if add > limit then add = limit end
            keepn = n + add
          end
          if keepn ~= n then
            -- The members scored mark are mark:1 .. mark:n (check.lua).
            redis.call('ZREMRANGEBYSCORE', key, at, at)
            local args = {}
            for u = 1, keepn do
              args[#args + 1] = at
              args[#args + 1] = string.format('%d:%d', mark, u)
              if #args >= 1000 then redis.call('ZADD', key, unpack(args)); args = {} end
            end
            if #args > 0 then redis.call('ZADD', key, unpack(args)) end
          end
          local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
          if newest[2] then
            redis.call('PEXPIRE', key, -idiv(now - tonumber(newest[2]) - period, 1000) + extra)
          end
        end
      end
      --[[regions]] -- docs/regions.md: on a global_shared rule the
      -- other regions counted the hold's estimate (its check's outbox
      -- entry); the settlement's difference goes to the outbox too, under
      -- the window the estimate fell in, so that they count what was
      -- settled. For a TAT-like state it is what the settlement moved
      -- this region's by, in whole units: a give-back of slots that have
      -- passed frees nothing here, so it frees nothing there either
      -- (rounded toward the smaller give-back, the larger charge).
      local units = delta
      if a == algGCRA or a == algLeakyBucket or (a == algTokenBucket and z == 1) then
        units = -idiv(-moved, x)
      end
      if units ~= 0 and has(flags, flagExchange) then
        outbox(key, def .. ' ' .. key, units)
      end
      --[[/regions]]
    end
  end

  -- A settlement ends the request: the lease it took is released.
  if to == 1 and rec.l then release_lease(rec.l, now) end

  -- The prepaid balance the hold drew on (limiter.settleCredits): units
  -- given back leave its overage first, then the balance; units taken come
  -- from the balance down to −overdraft (at the line less its expiries at
  -- or before now), the rest is overage in overage mode and unpaid (n) in
  -- deny mode: the balance never goes below −overdraft. The line,
  -- overdraft and mode are the terms the settlement carries for this
  -- balance, the balance's now: since the check, a top-up may have raised
  -- the line and an adjustment lowered it. Only without them (a caller
  -- that no longer knows the tenant) do the terms saved with the hold
  -- decide. On a missing counter (never made here: the credits drainer
  -- rebuilds it from the ledger) units taken are logged deferred (d 1:
  -- the rest is overage, 2: unpaid) for the drainer to split on the
  -- ledger's balance. The log records the move for the ledger: at now
  -- (t), the balance's time, and a the hold's opening, when its statement
  -- counts the move (the draw at the check and the hold's usage count
  -- then too).
  if rec.ck and delta ~= 0 then
    local line, overdraft, mode, drawn, over = tonumber(rec.cn), tonumber(rec.co), rec.cm, tonumber(rec.cd), tonumber(rec.cv)
    local exps = {}
    if terms and terms.key == rec.ck then
      line, overdraft, mode, exps = terms.line, terms.overdraft, terms.mode, terms.exps
    elseif rec.cx then
      for x in string.gmatch(rec.cx, '%-?%d+') do exps[#exps + 1] = tonumber(x) end
    end
    for x = 1, #exps, 2 do
      if exps[x] <= now then line = line - exps[x + 1] end
    end
    local v = redis.call('GET', rec.ck)
    local units, overage, unpaid, deferred = 0, 0, 0, 0
    if delta < 0 then
      overage = -delta
      if overage > over then overage = over end
      units = -delta - overage
      if units > drawn then units = drawn end
      units, overage = -units, -overage
    elseif v then
      local room = line - tonumber(v) + overdraft
      if room < 0 then room = 0 end
      units = delta
      if units > room then units = room end
      if mode == '1' then overage = delta - units else unpaid = delta - units end
    else
      units = delta
      if mode == '1' then deferred = 1 else deferred = 2 end
    end
    if v and deferred == 0 then redis.call('SET', rec.ck, string.format('%d', tonumber(v) + units)) end
    redis.call('HSET', hkey, 'cd', string.format('%d', drawn + units), 'cv', string.format('%d', over + overage))
    if units ~= 0 or overage ~= 0 or unpaid ~= 0 then
      local entry = {'u', string.format('%d', units), 'o', string.format('%d', overage)}
      if unpaid ~= 0 then entry[5], entry[6] = 'n', string.format('%d', unpaid) end
      if deferred ~= 0 then entry[#entry + 1], entry[#entry + 2] = 'd', deferred end
      entry[#entry + 1], entry[#entry + 2] = 't', string.format('%d', now)
      if rec.t then entry[#entry + 1], entry[#entry + 2] = 'a', rec.t end
      -- Overage given back: the hold's overage before (v), for the
      -- drainer to give back its billed part first.
      if overage < 0 then entry[#entry + 1], entry[#entry + 2] = 'v', string.format('%d', over) end
      entry[#entry + 1], entry[#entry + 2] = 'h', rec.i
      redis.call('XADD', rec.cl, '*', unpack(entry))
    end
  end

  redis.call('HSET', hkey, 's', to, 'v', target)
  if rec.j then
    -- The hold's final units, once per hold (statekey.go): minute (its
    -- check's: the request's month bills them, as it did the draw), cost,
    -- expired, the anonymous caller's address and the check's row (the
    -- hold's usage after its hash).
    local expired = '0'
    if to ~= 1 then expired = '1' end
    if not journalAppend(rec.j, jentry('s' .. string.sub(rec.uh, 1, 32), journalMinute(opened) .. '\0' ..
      string.format('%d', target) .. '\0' .. expired .. '\0' .. string.sub(rec.uh, 33))) then
      -- The journal is at its cap: the hold's units are the caller's to
      -- count, and stay so for every answer that repeats this one.
      redis.call('HDEL', hkey, 'j')
      journaled = 0
    end
  end
  return {0, now, estimate, target, to, journaled, rec.i, opened}
end

