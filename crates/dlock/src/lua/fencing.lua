-- Drawing fencing tokens, for every kind (self-contained: bare scripts include it too).
--
-- A fence is max(counter + 1, the server's clock in microseconds): the counter keeps fences
-- growing while Redis keeps its data, and the clock floor keeps them growing when it does
-- not (a restart without persistence, a failover to a replica that missed the last
-- increments, a Redlock majority of restarted nodes), as long as the servers' clocks move
-- forward and agree within the time between two grants (docs/decisions.md). With the data
-- kept, the floor never makes a fence smaller than the counter alone would.
--
-- Fences stay below 2^53: Lua's numbers are doubles, exact only up to there (the clock
-- floor is about 2^51 until the year 2255).
local FENCE_LIMIT = 9007199254740992

-- The server's clock in microseconds, read once per script (every command costs the
-- server's one thread; a script runs at one instant anyway: nothing else runs meanwhile).
local clock_read = nil

-- The clock (see above), or nil and the server's refusal of TIME (an ACL that denies it):
-- for the scripts that must not raise (lua_script!(unwrapped ..)).
local function clock_or_refusal()
  if not clock_read then
    local t = redis.pcall('TIME')
    if t.err then
      return nil, t
    end
    clock_read = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return clock_read
end

-- The clock; a refusal of TIME is raised (for the scripts under `answer`).
local function clock_us()
  local clock, refusal = clock_or_refusal()
  if not clock then
    error(refusal)
  end
  return clock
end

-- The counter at `key` as a number: 0 when it does not exist; nil and 'counter' when it is
-- not an integer (or not a string), nil and 'huge' when it is at or beyond 2^53; nil and
-- the error reply when the server refused the read.
local function fence_counter(key)
  local last = redis.pcall('GET', key)
  if type(last) == 'table' and last.err then
    if string.sub(last.err, 1, 9) == 'WRONGTYPE' then
      return nil, 'counter'
    end
    return nil, last
  end
  if not last then
    return 0
  end
  if not string.match(last, '^-?%d+$') then
    return nil, 'counter'
  end
  local n = tonumber(last)
  if string.len(last) > 16 or n >= FENCE_LIMIT - 1 then
    return nil, 'huge'
  end
  return n
end

-- Draws the next fence at `key`: returns it and whether it is the clock (not the counter
-- + 1), or nil and the reason (see fence_counter; a refused TIME is returned too). One
-- command in the common case: the clock is written while the old counter is read
-- (`SET .. GET`), and since the clock moves faster than grants come, it is nearly always
-- the fence. Like every write of a counter
-- it clears an expiry someone put on it: a counter never expires. A value that cannot
-- count is written back at once, so only the expiry someone gave it is lost (and a
-- `WATCH`, keyspace events and replicas see two writes). Only its first write can be
-- refused (the others write the key it just wrote, so no ACL or memory check stops them):
-- an unwrapped script may call it.
local function draw_fence(key)
  local clock, no_clock = clock_or_refusal()
  if not clock then
    return nil, no_clock
  end
  local last = redis.pcall('SET', key, string.format('%.0f', clock), 'GET')
  if type(last) == 'table' and last.err then
    if string.sub(last.err, 1, 9) == 'WRONGTYPE' then
      return nil, 'counter' -- SET .. GET refuses a non-string without writing it
    end
    return nil, last
  end
  if not last then
    return clock, true
  end
  local n = string.match(last, '^-?%d+$') and tonumber(last)
  if not n or string.len(last) > 16 or n >= FENCE_LIMIT - 1 then
    redis.call('SET', key, last)
    return nil, n and 'huge' or 'counter'
  end
  if n + 1 >= clock then
    -- The counter is ahead of the clock (a clock stepped back): it counts on.
    if n + 1 > clock then
      redis.call('SET', key, string.format('%.0f', n + 1))
    end
    return n + 1, false
  end
  return clock, true
end

-- The fence recorded at `key` ('<id>|<fence>') for `id`, or nil when it records none for
-- it: what a resent request answers again (a lazily drawn fence, a forced release).
local function recorded_fence(key, id)
  local record = redis.pcall('GET', key)
  if type(record) == 'string' then
    local recorded, fence = string.match(record, '^(.*)|(%d+)$')
    if recorded == id then
      return tonumber(fence)
    end
  end
  return nil
end
