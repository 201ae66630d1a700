-- Tollgate: UTC calendar arithmetic for the scripts, spliced into
-- check.lua and lean.lua where they say --[[calendar.lua]] (store.go,
-- lean.go). It uses the prelude's idiv. month returns the start and end
-- (µs) of the UTC calendar month of now; DAY is a day in µs.
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

local function month(now)
  local y, m = civil_from_days(idiv(now, DAY))
  local start = days_from_civil(y, m, 1) * DAY
  if m == 12 then y = y + 1; m = 1 else m = m + 1 end
  return start, days_from_civil(y, m, 1) * DAY
end
