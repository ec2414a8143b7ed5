-- Gives back one read hold. When the last hold leaves, only the first waiting writer is
-- woken.
-- ARGV[1] hold token, ARGV[2] writer wake prefix
-- Returns 1 released, 0 not held (its lease had ended, or unknown: nothing else touched).
if rw_state(KEYS[1]) ~= 'read' then
  return 0
end
local now = now_ms()
local value = redis.call('HGET', KEYS[1], 'h:' .. ARGV[1])
local released = 0
if value then
  local ends, owner = entry_parse(value)
  if ends > now then
    released = 1
  end
  entry_remove(KEYS[1], KEYS[5], ARGV[1])
  if redis.call('HINCRBY', KEYS[1], 'o:' .. owner, -1) <= 0 then
    redis.call('HDEL', KEYS[1], 'o:' .. owner, 'f:' .. owner)
  end
end
local live = purge_reads(KEYS[1], now)
if live > 0 then
  entries_settle(KEYS[1], KEYS[5], now)
else
  queue_purge(KEYS[3], KEYS[4], now)
  wake(ARGV[2], queue_head(KEYS[3]))
end
return released
