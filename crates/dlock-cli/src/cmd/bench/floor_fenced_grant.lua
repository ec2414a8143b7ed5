-- The fenced-grant floor of `dlock bench` (not a dlock script): the least a grant that
-- draws a clock-floor fence can do. `SET NX PX`, then `TIME` and the fence written as
-- dlock's fencing.lua writes it (`SET .. GET` of the clock, the counter + 1 written back
-- only when the counter is ahead of the clock), nothing else: no type checks, no resend
-- recognition, no refusal words. par_fenced's grant is measured against it.
-- KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] token, ARGV[2] lease in ms
-- Returns the fence, or 0 when the key is held (nothing drawn).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('SET', KEYS[2], string.format('%.0f', clock), 'GET'))
if last and last + 1 > clock then
  redis.call('SET', KEYS[2], string.format('%.0f', last + 1))
  return last + 1
end
return clock
