-- Ends a hold at a set time instead of now (LockOptions::hold_at_least): the hold stays,
-- its lease set to end `rest` ms from now (shorter or longer than it was), and whoever
-- waits is told, so that they sleep until then instead of until the old lease's end: the
-- release channel's waiters all re-check, and the first in line is woken. A reentrant hold
-- whose owner has other holds is given back at once instead (those holds keep the lock,
-- and the last of them decides how it ends).
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] the expiry index ('e' holds; see entries.lua)
-- ARGV[1] how the hold is stored ('s', 'r' or 'e'; see holds.lua), ARGV[2] the token,
-- ARGV[3] rest in milliseconds, ARGV[4] release channel, ARGV[5] wake channel prefix
-- Returns 1 held until then, 2 given back at once (the owner's other holds keep the lock),
-- 0 not held (untouched), -1 the key holds another kind of value.
local kind, key, token, rest = ARGV[1], KEYS[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local ok, held = pcall(hold_state, kind, key, token, now)
if not ok then
  if is_type_error(held) then
    return -1
  end
  reraise(held)
end
if not held then
  return 0
end
if kind == 'r' and (tonumber(redis.call('HGET', key, 'count')) or 0) > 1 then
  redis.call('HDEL', key, 'h:' .. token)
  redis.call('HINCRBY', key, 'count', -1)
  return 2
end
if kind == 'r' then
  redis.call('PEXPIRE', key, rest) -- exactly: no other hold shares the lease
else
  hold_restart(kind, key, KEYS[3], token, now, rest, held)
end
if kind == 'e' then
  -- A lease shortened that was the latest: hash and index now expire with the latest
  -- left, as after a release, so that the key does not outlive every hold in it.
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
  if last and (not held[2] or tonumber(last) < tonumber(held[2])) then
    entries_expire_at(key, KEYS[3], tonumber(last))
  end
end
notify(ARGV[4], 'all')
wake(ARGV[5], queue_head(KEYS[2]))
return 1
