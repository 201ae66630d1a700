-- wrk-check.lua: POST /v1/check bodies for wrk, used by scripts/bench-http.sh
-- against the api and against the no-op floor server alike.
--
--   wrk -t2 -c64 -d10s -s scripts/wrk-check.lua URL -- TOKEN MODE ARG RESOURCE THREADS
--
-- MODE keys: ARG is a file of API keys, one a line; every request names
--            the next key.
-- MODE ips:  ARG is "COUNT:OFFSET": anonymous callers 10.x.y.z numbered
--            OFFSET … OFFSET+COUNT-1, one after the other.
-- MODE ip:   ARG is one IP address; every request comes from it.
-- MODE holds: as keys, but every check opens a hold (estimate 2) and the
--            next request of the thread settles one open hold at 1
--            (POST /v1/settle): half the requests are checks, half
--            settlements.
-- MODE leases: as keys, for a resource under a concurrency rule: every
--            check takes a lease, and the next request of the thread
--            releases one (POST /v1/release): half checks, half releases.
-- THREADS is wrk's -t (default 2): with MODE ips each thread takes its
-- own share of the IPs.
--
-- Requests are formatted once per thread, before the run. At the end one
-- line starting with RESULT gives the figures in a form the script parses.

local token, mode, arg, resource
local requests = {}
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

local function body_for_key(k)
  return '{"key":"' .. k .. '","resource":"' .. resource .. '"}'
end

local function body_for_hold(k)
  return '{"key":"' .. k .. '","resource":"' .. resource .. '","cost":2,"hold":true}'
end

-- Hold (or lease) IDs this thread's checks opened, not yet settled (or
-- released); and the headers of a settlement.
local open_holds = {}
local settle_headers
-- What ends an open hold or lease: its path and its body's format.
local finish_path, finish_body = "/v1/settle", '{"hold_id":"%s","cost":1}'


local function body_for_ip(ip)
  return '{"ip":"' .. ip .. '","resource":"' .. resource .. '"}'
end

function init(args)
  token, mode, arg, resource = args[1], args[2], args[3], args[4] or "GET /repos"
  local headers = {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
  }
  local bodies = {}
  if mode == "keys" or mode == "holds" or mode == "leases" then
    local format = body_for_key
    if mode == "holds" or mode == "leases" then
      local field = '"hold_id":"([^"]+)"'
      if mode == "holds" then
        format = body_for_hold
      else
        field, finish_path, finish_body = '"lease_id":"([^"]+)"', "/v1/release", '{"lease_id":"%s"}'
      end
      settle_headers = headers
      -- Defined only here: wrk reads every response of a script that
      -- has one, which would slow the other modes.
      response = function(status, headers, body)
        local id = body:match(field)
        if id and not body:match('"status"') and not body:match('"released"') then table.insert(open_holds, id) end
      end
    end
    for line in io.lines(arg) do
      if line ~= "" then table.insert(bodies, format(line)) end
    end
  elseif mode == "ips" then
    local count, offset = arg:match("^(%d+):(%d+)$")
    count, offset = tonumber(count), tonumber(offset)
    -- Each thread takes its own share, so no IP is shared between threads.
    local step = tonumber(args[5] or "2")
    for i = offset + (id or 0), offset + count - 1, step do
      local ip = string.format("10.%d.%d.%d", math.floor(i / 65536) % 256, math.floor(i / 256) % 256, i % 256)
      table.insert(bodies, body_for_ip(ip))
    end
  elseif mode == "ip" then
    table.insert(bodies, body_for_ip(arg))
  else
    error("unknown mode " .. tostring(mode))
  end
  for i, b in ipairs(bodies) do
    requests[i] = wrk.format("POST", "/v1/check", headers, b)
  end
  counter = math.random(#requests)
end

function request()
  if #open_holds > 0 then
    local id = table.remove(open_holds)
    return wrk.format("POST", finish_path, settle_headers, string.format(finish_body, id))
  end
  counter = counter + 1
  if counter > #requests then counter = 1 end
  return requests[counter]
end

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local non2xx = summary.errors.status
  local errs = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT requests=%d seconds=%.3f rps=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d non2xx=%d errors=%d\n",
    summary.requests, seconds, summary.requests / seconds, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, non2xx, errs))
end
