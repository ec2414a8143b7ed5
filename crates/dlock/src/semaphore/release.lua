-- Gives a permit back if its lease is still valid, and wakes only the next waiter.
-- KEYS[1] permits, KEYS[2] queue, KEYS[3] waiter leases, KEYS[4] permit fences
-- ARGV[1] token, ARGV[2] wake prefix
-- Returns 1 released, 0 not held (expired or unknown), -1 wrong type.
local score = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if type(score) == 'table' and score.err then
  return -1
end
local now = now_ms()
if not score then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if tonumber(score) <= now then
  return 0 -- its lease had ended: it was no longer ours to give back
end
queue_purge(KEYS[2], KEYS[3], now)
wake(ARGV[2], queue_head(KEYS[2]))
return 1
