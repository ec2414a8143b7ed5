-- The direct hand-off floor of `dlock bench` (not a dlock script): the least a release that
-- hands a fenced lock to the next in line can do in one step. The holder's token compared,
-- the next in line taken off a plain list, the lock written to it with its lease, a
-- clock-floor fence drawn for it (`TIME`, `SET .. GET`, as the fenced-grant floor), and one
-- message telling it so: no waiter leases, no purge of dead waiters, no resend
-- recognition, no type checks, no refusal words.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] queue (a list of tokens)
-- ARGV[1] holder's token, ARGV[2] lease ms, ARGV[3] the waiters' channel
-- Returns the fence handed on, 0 when not held by ARGV[1], -1 when nobody waits (the
-- lock is then deleted).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local next_owner = redis.call('LPOP', KEYS[3])
if not next_owner then
  redis.call('DEL', KEYS[1])
  return -1
end
redis.call('SET', KEYS[1], next_owner, 'PX', ARGV[2])
local t = redis.call('TIME')
local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = clock
local last = tonumber(redis.call('SET', KEYS[2], string.format('%.0f', clock), 'GET'))
if last and last + 1 > clock then
  fence = last + 1
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
redis.call('PUBLISH', ARGV[3], 'granted ' .. string.format('%.0f', fence) .. ' ' .. next_owner)
return fence
