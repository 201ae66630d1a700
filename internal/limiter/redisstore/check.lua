-- Tollgate: decide a batch of checks in arrival order, each one atomically
-- and all-or-nothing over its rules. A batch of one is one check.
--
-- KEYS     the state key of every rule of every check, in order
-- ARGV[1]  the batch, a MessagePack array of integers:
--            extra_ttl_ms, report_state, ndefs,
--            ndefs × (algorithm, flags, a, b, c),
--            nchecks × (now, cost, opts, nrules, hold, nrules × ref
--                       [, balance when opts has optCredits
--                          [, line, overdraft, nexp, nexp × (at, units)
--                           at the balance's first check in the call]])
--   A def is one rule's parameters, shared by every check of the batch
--   that runs the rule; a ref is def number × refDef, + refShadow for a
--   shadow rule.
--   algorithm (an alg* code below) and its three numbers a, b, c:
--   algGCRA, algLeakyBucket   a emission interval T (µs), b burst,
--                             c tolerance T × burst (µs)
--   algTokenBucket            a unit (T, or 1 if it never refills),
--                             b burst, c 1 if it refills
--   algFixedWindow, algSlidingWindowLog, algSlidingWindowCounter
--                             a limit, b period (µs), c 0
--   algConcurrency            a limit (in flight), b lease TTL (µs), c 0
--   flags: the sum of the flag* values below that apply. opts: the sum
--   of the opt* values below that apply (a dry run; a check that draws on
--   a prepaid balance, and whether past it is overage). now is µs, or 0
--   to take it from TIME (once per batch). hold is 0, or for a check that
--   opens a hold its time to live (µs) × holdTTL, + holdCharge when it is
--   charged on expiry; the hold record's key then follows the check's rule keys in
--   KEYS. An admitted hold writes its record (a hash): e estimate, t the
--   check's time (its usage and its credits' moves count then), x expiry,
--   r retention end (µs), c charge on expiry, s status, v settled cost,
--   i its ID, n rules, and per rule i that allowed, ki its key and pi its
--   def's algorithm, flags, a, b, c, the hold's mark in its state
--   (limiter.holdMark says what a mark is) and, for a fixed window, the
--   window's end (settle.lua reads them), and l the lease's record key
--   when the check took a lease.
--   A check with a concurrency rule has one more key after those (and
--   after its hold's): its lease record's key, which also names the lease
--   in each concurrency rule's state (a sorted set of lease keys by
--   expiry). An admitted check that costs something adds its lease to
--   every concurrency rule that allowed, expiring the rule's lease TTL from
--   now, and writes the lease record (a hash): n rules, and per rule i ki
--   its key and ti its lease TTL (µs). lease.lua renews and releases it.
--   A check that draws on credits names its balance by number (from 1, in
--   order of first use in the call); the balance's first check in the
--   call has the balance's counter key and consumption log key (a stream)
--   after its rule keys, hold key and lease key in KEYS, and its numbers:
--   line, overdraft and the expiries within the line (at µs, units; at
--   most 5, soonest first). The line at the check's now is line less the
--   units of the expiries at or before now (limiter.Credits.LineAt): now
--   is Redis's clock, as for the rules. A check is admitted only if its
--   rules and the balance (that line − the counter) allow it, and an
--   admitted one adds what it drew to the counter and appends an entry to
--   the log: u units drawn, o units of overage (absent: none), t now, h
--   the hold's ID (if any), d 1 for units deferred to the ledger's writer. Checks of
--   one call without a hold share one entry per balance (their sums, t
--   the last one's time), written with the counter at the end of the
--   call. The script never makes a missing counter (the credits drainer
--   does, from the ledger): on one, the balance is unknown and nothing is
--   drawn; a check that costs something is then refused in deny mode and
--   with a hold, and admitted in overage mode with its units logged
--   deferred (d 1: the drainer draws what the ledger's balance allows).
--   Its hold record also keeps ck, cl the keys, cn line, cx its expiries
--   ("at units …"), co overdraft, cm 1 for overage, cd units drawn, cv
--   overage (settle.lua reads them: cn, cx, co and cm only for a
--   settlement that carries no terms of the balance now).
--   A check whose opts has optUsage journals its usage (statekey.go
--   describes the journal): the call's journal key is the last of KEYS,
--   after every check's keys, and the check's entry head
--   (statekey.UsageEntry) is among the strings below. Admitted, it adds
--   its entry (its units; a hold's 0) to the call's, appended at its end,
--   unless the entry would take the journal past journalCap: the check
--   is then answered admittedUnjournaled, its usage the caller's to
--   count. With a hold the record keeps j the journal and uh the hold's
--   usage (statekey.HoldUsage) for settle.lua, which journals the hold's
--   final units (within journalCap too).
-- ARGV[2]  the hold index (a sorted set of hold record keys by expiry),
--          or '' when the caller lists holds itself (on a Cluster, where
--          the index lives in another slot)
-- ARGV[3…] per check in order: the ID of the hold it opens, if any; its
--          entry head, with optUsage; and with both, the hold's usage
--
-- Returns a MessagePack array: per check now, admitted (0 no, 1 yes,
-- admittedUnjournaled yes but its usage not journaled), then per rule
-- allowed (0 no, 1 yes, 2 unknown: a tally, flagSeedOpen or
-- flagSeedClosed, whose hash tag's seed marker is missing, see seeded),
-- remaining, reset_after, retry_after, delay; and, for a check
-- not admitted when report_state is 1, per rule the state it was decided
-- on (gcra: tat; bucket: tokens, when; fixed: window, count; counter:
-- window, count, prev; log: nothing), three numbers each; a check that
-- draws on credits has, after its rules, whether the balance allowed it
-- (0 no, 1 yes; 2 no and 3 yes when the counter was missing), the
-- balance, the units drawn and the overage. Numbers are
-- integers below 2^53 (exact in doubles).
--
-- Each algorithm is written out in the loop below: no closures, tables
-- or dispatch per rule. docs/algorithms.md gives the semantics; the Go
-- twin is internal/limiter/algorithms.go.

-- Wire constants: the same names and values as wire.go beside this file
-- (a test compares them).
local algGCRA = 1
local algTokenBucket = 2
local algLeakyBucket = 3
local algFixedWindow = 4
local algSlidingWindowLog = 5
local algSlidingWindowCounter = 6
local algConcurrency = 7
local flagShape = 2
local flagCalendarDay = 4
local flagCalendarMonth = 8
local flagAnchorFirstRequest = 16
local flagSeedOpen = 32
local flagSeedClosed = 64
local flagExchange = 128
local flagSplit = 256
local optDryRun = 1
local optCredits = 2
local optCreditOverage = 4
local optUsage = 8
local kindAlgorithm = 4
local kindShape = 2
local kindShadow = 1
local kindSeedOpen = 32
local kindSeedClosed = 64
local kindExchange = 128
local refDef = 2
local refShadow = 1
local holdTTL = 2
local holdCharge = 1
local holdRetention = 3600000000 -- µs, limiter.HoldRetentionUS
local journalCap = 67108864 -- bytes
local admittedUnjournaled = 2

local floor = math.floor
local tonumber = tonumber

-- has reports whether flags (a sum of distinct flag* values) include flag.
local function has(flags, flag)
  return flags % (2 * flag) >= flag
end

local function idiv(a, b) -- floor(a / b) exactly, b > 0
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- The usage journal (statekey.go describes it): journalMinute returns the
-- start of now's minute, in seconds, as its entries name it (ten digits);
-- journal adds an admitted check's entry to the call's for the journal
-- jkey, head (the caller's, its row's field up to the minute), the minute
-- and the units, and reports whether it did: not when the entry would take
-- jkey past journalCap bytes (one STRLEN per call, then the call's entries
-- are counted as they come); journalFlush appends the call's entries to
-- jkey at its end, in one APPEND; journalAppend appends one entry to jkey
-- within journalCap alike, and reports whether it did; jentry is one
-- entry, field and value each after its length. The cap keeps a journal
-- nobody claims (the worker down, or its claim stuck while Postgres is)
-- below Redis's proto-max-bulk-len, past which every APPEND would fail
-- after the call's states were written.
local usPerMinute = 60000000
local function journalMinute(now)
  return string.format('%010d', floor(now / usPerMinute) * 60)
end
local jparts, jnow, jminute, jroom = {}, nil, nil, nil
local function journal(jkey, head, now, units)
  if now ~= jnow then jnow, jminute = now, journalMinute(now) end
  local v = '1:1'
  if units ~= 1 then
    v = string.format('%d', units)
    v = #v .. ':' .. v
  end
  if not jroom then jroom = journalCap - redis.call('STRLEN', jkey) end
  local size = #head + #jminute + #v
  if size > jroom then return false end
  jroom = jroom - size
  local n = #jparts
  jparts[n + 1], jparts[n + 2], jparts[n + 3] = head, jminute, v
  return true
end
local function jentry(f, v)
  return #f .. ':' .. f .. #v .. ':' .. v
end
local function journalFlush(jkey)
  if #jparts > 0 then redis.call('APPEND', jkey, table.concat(jparts)) end
end
local function journalAppend(jkey, entry)
  if redis.call('STRLEN', jkey) + #entry > journalCap then return false end
  redis.call('APPEND', jkey, entry)
  return true
end

-- at returns now, or for 0 Redis's clock in µs, read once per call.
local clock
local function at(now)
  if now ~= 0 then return now end
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock
end

-- seeded reports whether the seed marker of state key key exists: the
-- key up to its hash tag's closing brace and 'seeded' (limiter.SeedKeyOf),
-- in the key's own slot. The usage rebuild sets it once it has written
-- the tag's tallies from the rollups; a Redis that lost its data lost it
-- too. Read once per marker and call.
local seeds = {}
local function seeded(key)
  local open = string.find(key, '{', 1, true)
  local close = open and string.find(key, '}', open + 1, true)
  local marker = 'seeded'
  if close then marker = string.sub(key, 1, close) .. marker end
  local v = seeds[marker]
  if v == nil then
    v = redis.call('EXISTS', marker) == 1
    seeds[marker] = v
  end
  return v
end

--[[regions]] -- docs/regions.md: outbox adds units to field of the
-- outbox of state key key's hash tag (prefix{tag}x, statekey.OutboxKey: a
-- hash in the state's slot, which the region's exchanger claims and sends
-- to the other regions). field is "alg flags a b c window end key" (wire.go).
local function outbox(key, field, units)
  local brace = string.find(key, '{', 1, true)
  redis.call('HINCRBY', string.sub(key, 1, brace + 2) .. 'x', field, units)
end
--[[/regions]]

--[[calendar.lua]]

--[[regions]] -- docs/regions.md: a global_split window (flagSplit) is
-- decided on this region's allotment, the def's limit (the region's equal
-- share) plus what the rebalancer moved to it or from it: field key of
-- the allotment table prefix{tag}a, beside the state in its slot. Every
-- check of it that costs something adds its cost (admitted or denied) to
-- field key of the demand table prefix{tag}d, which the rebalancer reads
-- and empties every rebalance interval.
local function split(key, limit, cost, dry)
  local brace = string.find(key, '{', 1, true)
  local records = string.sub(key, 1, brace + 2)
  local moved = redis.call('HGET', records .. 'a', key)
  if moved then
    limit = limit + tonumber(moved)
    if limit < 0 then limit = 0 end
  end
  if cost > 0 and not dry then redis.call('HINCRBY', records .. 'd', key, cost) end
  return limit
end
--[[/regions]]

local batch = cmsgpack.unpack(ARGV[1])
local extra = batch[1]
local report = batch[2] == 1
-- Each def's algorithm, flags and parameters by name, as its algorithm
-- reads them: def_interval (gcra, leaky: T; bucket: its unit), def_burst
-- (gcra, leaky, bucket), def_tolerance (gcra, leaky), def_refills
-- (bucket), def_limit and def_period (the windows).
local alg, flg = {}, {}
local def_interval, def_burst, def_tolerance, def_refills = {}, {}, {}, {}
local def_limit, def_period = {}, {}
local i = 4
for d = 1, batch[3] do
  local a = batch[i]
  alg[d], flg[d] = a, batch[i + 1]
  if a == algGCRA or a == algLeakyBucket then
    def_interval[d], def_burst[d], def_tolerance[d] = batch[i + 2], batch[i + 3], batch[i + 4]
  elseif a == algTokenBucket then
    def_interval[d], def_burst[d], def_refills[d] = batch[i + 2], batch[i + 3], batch[i + 4] == 1
  else
    def_limit[d], def_period[d] = batch[i + 2], batch[i + 3]
  end
  i = i + 5
end

-- One MGET reads every key kept as a single number (gcra, leaky bucket,
-- token bucket) for the whole batch, instead of a GET per rule; writes
-- update this cache, so a later check of the batch on the same key sees
-- the earlier one's state. false: the key does not exist.
local cache = {}
do
  local mkeys, j, kk, nbal = {}, i, 0, 0
  local total = #batch
  while j <= total do
    local nrules, credits = batch[j + 3], has(batch[j + 2], optCredits)
    j = j + 5
    local leased = false
    for _ = 1, nrules do
      kk = kk + 1
      local a = alg[floor(batch[j] / refDef)]
      if a == algGCRA or a == algTokenBucket or a == algLeakyBucket then mkeys[#mkeys + 1] = KEYS[kk] end
      if a == algConcurrency then leased = true end
      j = j + 1
    end
    if batch[j - nrules - 1] > 0 then kk = kk + 1 end
    if leased then kk = kk + 1 end
    if credits then
      if batch[j] > nbal then
        nbal = batch[j]
        j, kk = j + 4 + 2 * batch[j + 3], kk + 2
      else
        j = j + 1
      end
    end
  end
  if #mkeys == 1 then
    cache[mkeys[1]] = redis.call('GET', mkeys[1])
  elseif #mkeys > 1 then
    local vals = redis.call('MGET', unpack(mkeys))
    for x = 1, #mkeys do cache[mkeys[x]] = vals[x] end
  end
end

local index = ARGV[2]
local argi = 2 -- the last of ARGV[3…] read
local out, n, k = {}, 0, 0
-- The current check's writes, applied once every rule allowed: the key,
-- its def, its time to live (ms, before extra) and what to store by
-- algorithm: wnumber the key's one number (gcra, leaky: the new TAT;
-- bucket: when it was empty, or its whole tokens if it never refills);
-- wwindow and wcount a window (fixed: its start; counter: its index) and
-- its count; wend a fixed window's end (µs); wprev the counter's previous
-- count; wperiod the log's period (older entries leave).
local wkey, wdef, wttl = {}, {}, {}
local wnumber, wwindow, wcount, wend, wprev, wperiod = {}, {}, {}, {}, {}, {}
-- The states the current check's rules were decided on: per rule the
-- three numbers the header lists.
local s1, s2, s3 = {}, {}, {}
-- The current check's hold marks per rule (false: the rule denied).
local hmark, hend = {}, {}
-- The current check's concurrency rules that allowed: state keys and
-- lease TTLs (µs); nlease of them, leased when it has a concurrency rule.
local lkeys, lttls = {}, {}

-- defstr returns def d's algorithm, flags and three numbers and mark, as
-- a hold record keeps them.
local function defstr(d, mark, finish)
  local a = alg[d]
  local x, y, z
  if a == algGCRA or a == algLeakyBucket then
    x, y, z = def_interval[d], def_burst[d], def_tolerance[d]
  elseif a == algTokenBucket then
    x, y, z = def_interval[d], def_burst[d], 0
    if def_refills[d] then z = 1 end
  else
    x, y, z = def_limit[d], def_period[d], 0
  end
  return string.format('%d %d %d %d %d %d %d', a, flg[d], x, y, z, mark, finish)
end

-- The balances of this call by number (made at the first check that
-- draws on one): {counter key, log key, line, overdraft, expiries
-- ({at, units, at, units …}) or false}.
local bal, nbal = nil, 0
-- Balances this call drew on: the counter as it now stands by key (false
-- when missing), and per key (in first-draw order) the log, the units
-- and overage drawn and the units deferred by checks without a hold, and
-- the counter as the call found it, written once at the end of the call:
-- one INCRBY and one log entry per balance and call, not per check. A
-- check with a hold logs its own entry (the entry names the hold).
local ccount, corder, cpend = {}, {}, {}

local total = #batch
while i <= total do
  local now, cost, opts, nrules, hold = at(batch[i]), batch[i + 1], batch[i + 2], batch[i + 3], batch[i + 4]
  local dry = has(opts, optDryRun)
  i = i + 5
  local head = n + 2
  out[n + 1] = now
  out[head] = 1
  n = head
  local admitted, nw = true, 0
  local nlease, leased = 0, false
  local first = k -- KEYS[first + r] is the check's rule r's state key
  for r = 1, nrules do
    local ref = batch[i]
    i = i + 1
    local d = floor(ref / refDef)
    k = k + 1
    local key = KEYS[k]
    local a, flags = alg[d], flg[d]
    local allowed, remaining, reset, retry, delay = 0, 0, 0, 0, 0
    local x1, x2, x3 = 0, 0, 0
    local mark = now
    -- What to store when the check is admitted (see wnumber … wperiod).
    local write, ttl = false, 0
    local new_number, new_window, new_count, new_end, new_prev, new_period = 0, 0, 0, 0, 0, 0

    if a == algGCRA or a == algLeakyBucket or a == algTokenBucket then
      -- rate.lua decides these, as in the lean scripts, from the rule's
      -- numbers and the stored number. A token bucket keeps one number,
      -- the time it was (or would have been) empty; one that never
      -- refills keeps its whole tokens, without expiry.
      local shape = has(flags, flagShape)
      local interval, burst, tolerance, refills = def_interval[d], def_burst[d], def_tolerance[d], def_refills[d]
      local v = cache[key]
      local tat, tokens, number = 0, 0, 0
      --[[rate.lua]]
      new_number = number
      if a == algTokenBucket then x1, x2 = tokens, now else x1 = tat end
      -- The hold mark: where the rule's state stands once admitted.
      if allowed == 1 then
        if a ~= algTokenBucket then
          mark = tat + interval * cost
        elseif refills then
          mark = now - (tokens - interval * cost) + interval * burst
        else
          mark = 0
        end
      end

    elseif a == algFixedWindow then
      local limit, period = def_limit[d], def_period[d]
      if has(flags, flagSplit) then limit = split(key, limit, cost, dry) end --[[regions]]
      local st = redis.call('HMGET', key, 'window', 'count')
      local start, finish, count = 0, 0, 0
      if has(flags, flagAnchorFirstRequest) then
        start, finish = now, now + period
        if st[1] and now < tonumber(st[1]) + period then
          start = tonumber(st[1])
          finish = start + period
          count = tonumber(st[2])
        end
      else
        if has(flags, flagCalendarDay) then
          start = idiv(now, DAY) * DAY
          finish = start + DAY
        elseif has(flags, flagCalendarMonth) then
          start, finish = month(now)
        else
          start = idiv(now, period) * period
          finish = start + period
        end
        if st[1] and tonumber(st[1]) == start then count = tonumber(st[2]) end
      end
      x1, x2 = start, count
      local used = count
      if cost > limit or count + cost > limit then
        remaining = limit - count
        if remaining < 0 then remaining = 0 end
        if cost > limit then retry = -1 else retry = finish - now end
      else
        allowed = 1
        mark = start
        if hold > 0 then hend[r] = finish end
        used = count + cost
        remaining = limit - used
        if cost > 0 then
          write, new_window, new_count, new_end, ttl = true, start, used, finish, -idiv(now - finish, 1000)
        end
      end
      if used == 0 then reset = 0 else reset = finish - now end
      if (has(flags, flagSeedOpen) or has(flags, flagSeedClosed)) and not seeded(key) then
        -- A tally whose state may be lost: unknown (2), nothing written;
        -- one that fails closed refuses a check that costs something.
        allowed, remaining, reset, retry, write = 2, 0, 0, 0, false
        if has(flags, flagSeedClosed) and cost > 0 and not dry and not has(ref, refShadow) then admitted = false end
      end

    elseif a == algSlidingWindowLog then
      local limit, period = def_limit[d], def_period[d]
      if has(flags, flagSplit) then limit = split(key, limit, cost, dry) end --[[regions]]
      -- Entries at or before now - period have left the window. They are
      -- dropped only when the log is written, so that a check that admits
      -- nothing changes nothing (even for a clock that later steps back).
      local after = string.format('(%d', now - period)
      local count = redis.call('ZCOUNT', key, after, '+inf')
      local newest = 0
      if count > 0 then
        newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      end
      if cost > limit or count + cost > limit then
        remaining = limit - count
        if remaining < 0 then remaining = 0 end
        if count > 0 then reset = newest + period - now end
        if cost > limit then
          retry = -1
        else
          -- The (count+cost-limit)-th oldest entry must leave.
          local entry = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', count + cost - limit - 1, 1)
          retry = tonumber(entry[2]) + period - now
        end
      else
        allowed = 1
        remaining = limit - count - cost
        if cost == 0 then
          if count > 0 then reset = newest + period - now end
        else
          if newest < now then newest = now end
          reset = newest + period - now
          write, new_period, ttl = true, period, -idiv(-reset, 1000)
        end
      end

    elseif a == algSlidingWindowCounter then
      local limit, period = def_limit[d], def_period[d]
      if has(flags, flagSplit) then limit = split(key, limit, cost, dry) end --[[regions]]
      local index = idiv(now, period)
      local elapsed = now - index * period
      local curr, prev = 0, 0
      local st = redis.call('HMGET', key, 'window', 'count', 'prev')
      if st[1] then
        local w = tonumber(st[1])
        if w == index then
          curr = tonumber(st[2])
          prev = tonumber(st[3])
        elseif w == index - 1 then
          prev = tonumber(st[2])
        end
      end
      x1, x2, x3 = index, curr, prev
      local weighted = prev * (period - elapsed) + curr * period
      local budget = limit * period
      local used = curr
      if cost > limit or weighted + cost * period > budget then
        remaining = idiv(budget - weighted, period)
        if remaining < 0 then remaining = 0 end
        if cost > limit then
          retry = -1
        else
          -- Still in this window: prev * (period - e) <= (limit - curr - cost) * period.
          local room = limit - curr - cost
          if room >= 0 and prev > 0 and period - idiv(room * period, prev) < period then
            retry = period - idiv(room * period, prev) - elapsed
            if retry < 1 then retry = 1 end
          else
            -- In the next window the current count becomes the previous one.
            local earliest = 0
            if curr > 0 then earliest = period - idiv((limit - cost) * period, curr) end
            if earliest < 0 then earliest = 0 end
            retry = period - elapsed + earliest
          end
        end
      else
        allowed = 1
        mark = index
        used = curr + cost
        remaining = idiv(budget - weighted - cost * period, period)
        if cost > 0 then
          write, new_window, new_count, new_prev, ttl = true, index, used, prev, -idiv(elapsed - 2 * period, 1000)
        end
      end
      if used > 0 then reset = 2 * period - elapsed elseif prev > 0 then reset = period - elapsed end

    elseif a == algConcurrency then
      -- Leases whose expiry has passed no longer count; they are dropped
      -- when the set is written.
      local limit, lease_ttl = def_limit[d], def_period[d]
      leased = true
      local after = string.format('(%d', now)
      local live = redis.call('ZCOUNT', key, after, '+inf')
      local last = 0
      if live > 0 then
        last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
        reset = last - now
      end
      remaining = limit - live
      if remaining < 0 then remaining = 0 end
      if cost == 0 then
        allowed = 1
      elseif live + 1 > limit then
        -- The (live - limit + 1)-th lease to expire frees the slot.
        local entry = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', live - limit, 1)
        retry = tonumber(entry[2]) - now
      else
        allowed = 1
        remaining = limit - live - 1
        if last < now + lease_ttl then last = now + lease_ttl end
        reset = last - now
        nlease = nlease + 1
        lkeys[nlease], lttls[nlease] = key, lease_ttl
      end
    end

    if allowed == 0 and not has(ref, refShadow) then admitted = false end
    if write and allowed == 1 then
      nw = nw + 1
      wkey[nw], wdef[nw], wttl[nw] = key, d, ttl
      wnumber[nw], wwindow[nw], wcount[nw], wend[nw], wprev[nw], wperiod[nw] = new_number, new_window, new_count, new_end, new_prev, new_period
    end
    s1[r], s2[r], s3[r] = x1, x2, x3
    if hold > 0 then
      hmark[r] = allowed == 1 and mark
      if a ~= algFixedWindow then hend[r] = 0 end
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = allowed, remaining, reset, retry, delay
    n = n + 5
  end

  local hkey, lkey, hid, jrow, jhold
  if hold > 0 then
    k = k + 1
    hkey = KEYS[k]
    argi = argi + 1
    hid = ARGV[argi]
  end
  if has(opts, optUsage) then
    argi = argi + 1
    jrow = ARGV[argi]
    if hkey then
      argi = argi + 1
      jhold = ARGV[argi]
    end
  end
  if leased then
    k = k + 1
    lkey = KEYS[k]
  end
  -- The prepaid balance: the line at now − the counter
  -- (limiter.decideCredits).
  local ckey, clog, cb, cline, cover, consumed, cok, cdrawn, cover_units, cdefer
  local cadv_k, cadv_i = 0, 1
  if has(opts, optCredits) then
    -- (k and i move past its keys and numbers once the check is done:
    -- the hold record below reads the rules' keys and refs before them.)
    cb = batch[i]
    if cb > nbal then
      nbal = cb
      local exps, nexp = false, batch[i + 3]
      if nexp > 0 then
        exps = {}
        for x = 1, 2 * nexp do exps[x] = batch[i + 3 + x] end
      end
      if not bal then bal = {} end
      bal[cb] = {KEYS[k + 1], KEYS[k + 2], batch[i + 1], batch[i + 2], exps}
      cadv_k, cadv_i = 2, 4 + 2 * nexp
    end
    local b = bal[cb]
    ckey, clog, cline, cover = b[1], b[2], b[3], b[4]
    local exps = b[5]
    if exps then
      for x = 1, #exps, 2 do
        if exps[x] > now then break end
        cline = cline - exps[x + 1]
      end
    end
    consumed = ccount[ckey]
    if consumed == nil then
      consumed = redis.call('GET', ckey)
      if consumed then consumed = tonumber(consumed) end
      ccount[ckey] = consumed
    end
    cok, cdrawn, cover_units, cdefer = 1, cost, 0, 0
    if consumed == false then
      -- Unknown: nothing is drawn. Deny mode and a hold refuse a cost;
      -- overage mode admits it, deferred.
      cok, cdrawn = 3, 0
      if cost > 0 and not dry and (hold > 0 or not has(opts, optCreditOverage)) then
        cok, admitted = 2, false
      else
        cdefer = cost
      end
    else
      local balance = cline - consumed
      if has(opts, optCreditOverage) then
        local room = balance + cover
        if room < 0 then room = 0 end
        if cdrawn > room then cdrawn = room end
        cover_units = cost - cdrawn
      elseif cost > 0 and balance - cost < -cover then
        cok, cdrawn, admitted = 0, 0, false
      end
    end
  end
  if admitted and not dry and cost > 0 and nlease > 0 then
    -- Take a slot of each concurrency rule that allowed, and record the
    -- lease; it lives as long as its longest slot.
    local rec, longest = {'n', nlease}, 0
    for x = 1, nlease do
      local key, lease_ttl = lkeys[x], lttls[x]
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
      redis.call('ZADD', key, string.format('%d', now + lease_ttl), lkey)
      local last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      redis.call('PEXPIRE', key, -idiv(now - last, 1000) + extra)
      if lease_ttl > longest then longest = lease_ttl end
      local at = #rec
      rec[at + 1], rec[at + 2], rec[at + 3], rec[at + 4] = 'k' .. x, key, 't' .. x, lease_ttl
    end
    redis.call('DEL', lkey)
    redis.call('HSET', lkey, unpack(rec))
    redis.call('PEXPIRE', lkey, -idiv(-longest, 1000) + extra)
  else
    lkey = nil
  end
  if admitted and not dry then
    if hkey then
      local ttl, charge = idiv(hold, holdTTL), 0
      if has(hold, holdCharge) then charge = 1 end
      local rec = {'e', cost, 't', now, 'x', now + ttl, 'r', now + ttl + holdRetention, 'c', charge, 's', 0, 'v', 0, 'n', nrules, 'i', hid}
      if ckey then
        local mode = 0
        if has(opts, optCreditOverage) then mode = 1 end
        local b, exps = bal[cb], {}
        for x = 1, #(b[5] or exps) do exps[x] = string.format('%d', b[5][x]) end
        for _, f in ipairs({'ck', ckey, 'cl', clog, 'cn', b[3], 'cx', table.concat(exps, ' '), 'co', cover,
          'cm', mode, 'cd', cdrawn, 'cv', cover_units}) do
          rec[#rec + 1] = f
        end
      end
      -- A key two rules share (a spend cap and the quota's tally) is
      -- recorded once: settle.lua moves each recorded state once.
      local seen = {}
      for r = 1, nrules do
        if hmark[r] and not seen[KEYS[first + r]] then
          seen[KEYS[first + r]] = true
          rec[#rec + 1] = 'k' .. r
          rec[#rec + 1] = KEYS[first + r]
          rec[#rec + 1] = 'p' .. r
          rec[#rec + 1] = defstr(floor(batch[i - nrules - 1 + r] / refDef), hmark[r], hend[r])
        end
      end
      if lkey then
        rec[#rec + 1] = 'l'
        rec[#rec + 1] = lkey
      end
      if jhold then
        local at = #rec
        rec[at + 1], rec[at + 2], rec[at + 3], rec[at + 4] =
          'j', KEYS[#KEYS], 'uh', jhold
      end
      redis.call('DEL', hkey)
      redis.call('HSET', hkey, unpack(rec))
      redis.call('PEXPIRE', hkey, -idiv(-(ttl + holdRetention), 1000) + extra)
      if index and index ~= '' then redis.call('ZADD', index, string.format('%d', now + ttl), hkey) end
    end
    for w = 1, nw do
      local key, d = wkey[w], wdef[w]
      local a = alg[d]
      if a == algGCRA or a == algLeakyBucket then
        redis.call('SET', key, wnumber[w], 'PX', wttl[w] + extra)
        cache[key] = wnumber[w]
      elseif a == algTokenBucket then
        if wttl[w] >= 0 then redis.call('SET', key, wnumber[w], 'PX', wttl[w] + extra) else redis.call('SET', key, wnumber[w]) end
        cache[key] = wnumber[w]
      elseif a == algFixedWindow then
        redis.call('HSET', key, 'window', wwindow[w], 'count', wcount[w])
        redis.call('PEXPIRE', key, wttl[w] + extra)
      elseif a == algSlidingWindowLog then
        local period = wperiod[w]
        redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - period))
        -- The members scored now are now:1 .. now:n (they only ever leave
        -- together), so now:n+1 .. are new.
        local at = string.format('%d', now)
        local m = redis.call('ZCOUNT', key, at, at)
        local args = {}
        for u = 1, cost do
          args[#args + 1] = at
          args[#args + 1] = string.format('%d:%d', now, m + u)
          if #args >= 1000 then redis.call('ZADD', key, unpack(args)); args = {} end
        end
        if #args > 0 then redis.call('ZADD', key, unpack(args)) end
        redis.call('PEXPIRE', key, wttl[w] + extra)
      elseif a == algSlidingWindowCounter then
        redis.call('HSET', key, 'window', wwindow[w], 'count', wcount[w], 'prev', wprev[w])
        redis.call('PEXPIRE', key, wttl[w] + extra)
      end
    end
    --[[regions]] -- docs/regions.md: a global_shared rule's admission
    -- also goes to the outbox of its hash tag (prefix{tag}x, a hash in
    -- the state's slot, which the region's exchanger claims and sends to
    -- the other regions): the field names the rule's def, the window the
    -- units fell in (fixed: its start and end; counter: its index; log:
    -- now; rates: 0) and the state key, as "alg flags a b c window end
    -- key" (wire.go: the lean scripts write the same fields); the value is
    -- the units.
    for w = 1, nw do
      local d = wdef[w]
      if has(flg[d], flagExchange) then
        local key, a, window, finish = wkey[w], alg[d], 0, 0
        if a == algFixedWindow then
          window, finish = wwindow[w], wend[w]
        elseif a == algSlidingWindowCounter then
          window = wwindow[w]
        elseif a == algSlidingWindowLog then
          window = now
        end
        outbox(key, defstr(d, window, finish) .. ' ' .. key, cost)
      end
    end
    --[[/regions]]
    if ckey and (cdrawn ~= 0 or cover_units ~= 0 or cdefer ~= 0) then
      local pend = cpend[ckey]
      if not pend then
        pend = {clog, 0, 0, now, 0, now, consumed}
        cpend[ckey] = pend
        corder[#corder + 1] = ckey
      end
      if consumed then
        consumed = consumed + cdrawn
        ccount[ckey] = consumed
      end
      if hkey then
        redis.call('XADD', clog, '*', 'u', string.format('%d', cdrawn), 'o', string.format('%d', cover_units),
          't', string.format('%d', now), 'h', hid)
      elseif cdefer ~= 0 then
        pend[5], pend[6] = pend[5] + cdefer, now
      else
        pend[2], pend[3], pend[4] = pend[2] + cdrawn, pend[3] + cover_units, now
      end
    end
  elseif ckey then
    cdrawn, cover_units = 0, 0
  end
  if ckey then
    if consumed then
      out[n + 2] = cline - consumed
    else
      out[n + 2] = 0
    end
    out[n + 1], out[n + 3], out[n + 4] = cok, cdrawn, cover_units
    n = n + 4
    k, i = k + cadv_k, i + cadv_i
  end
  if jrow and admitted and not dry then
    -- The check's usage (statekey.go): units by minute and row, and
    -- decisions less units; a hold's units count once it is settled (or
    -- expires), in this check's minute (settle.lua).
    local units = cost
    if hkey then units = 0 end
    if not journal(KEYS[#KEYS], jrow, now, units) then out[head] = admittedUnjournaled end
  end
  if not admitted then
    out[head] = 0
    if report then
      for r = 1, nrules do
        out[n + 1], out[n + 2], out[n + 3] = s1[r], s2[r], s3[r]
        n = n + 3
      end
    end
  end
end

for x = 1, #corder do
  local key = corder[x]
  local pend = cpend[key]
  if ccount[key] and ccount[key] ~= pend[7] then redis.call('INCRBY', key, ccount[key] - pend[7]) end
  if pend[3] ~= 0 then
    redis.call('XADD', pend[1], '*', 'u', string.format('%d', pend[2]), 'o', string.format('%d', pend[3]),
      't', string.format('%d', pend[4]))
  elseif pend[2] ~= 0 then
    -- The usual entry: units drawn, no overage (a field less to write).
    redis.call('XADD', pend[1], '*', 'u', string.format('%d', pend[2]), 't', string.format('%d', pend[4]))
  end
  if pend[5] ~= 0 then
    redis.call('XADD', pend[1], '*', 'u', string.format('%d', pend[5]), 'd', '1', 't', string.format('%d', pend[6]))
  end
end

journalFlush(KEYS[#KEYS])

return cmsgpack.pack(out)
