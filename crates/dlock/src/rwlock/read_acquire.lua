-- Grants a read hold: when no writer holds and no writer waits, or when the owner already
-- reads (re-entry must not queue behind a writer that waits for this very reader).
-- ARGV[1] owner id, ARGV[2] lease ms, ARGV[3] hold token
-- Returns {1, fence, holds}  granted (a resent request restarts its lease, counted once)
--         {0, ms}            busy; ms until the blocking lease ends (-1 unknown)
local state = rw_state(KEYS[1])
if state == 'write' then
  return {0, redis.call('PTTL', KEYS[1])}
end
local owner, lease, hold = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
local live = 0
if state == 'read' then
  live = purge_reads(KEYS[1], now)
end
local reading = false
if live > 0 then
  if redis.call('HEXISTS', KEYS[1], 'h:' .. hold) == 1 then
    entry_put(KEYS[1], hold, now + lease, owner)
    keep_alive(KEYS[1], lease)
    return {1, tonumber(redis.call('HGET', KEYS[1], 'f:' .. owner)),
      tonumber(redis.call('HGET', KEYS[1], 'o:' .. owner))}
  end
  reading = redis.call('HEXISTS', KEYS[1], 'o:' .. owner) == 1
end
queue_purge(KEYS[3], KEYS[4], now)
if not reading and redis.call('ZCARD', KEYS[3]) > 0 then
  -- Writers wait: re-check when the first one's waiter lease would end.
  local head = queue_head(KEYS[3])
  local lease_end = tonumber(redis.call('ZSCORE', KEYS[4], head) or now)
  return {0, math.max(lease_end - now, 0)}
end
local fence = 0
if not reading then
  fence = next_fence(KEYS[2])
end
local granted, holds = add_read(KEYS[1], owner, hold, now, lease, fence)
return {1, granted, holds}
