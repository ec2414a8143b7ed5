-- Gives back one read hold of an owner. When the last reader leaves, only the first
-- waiting writer is woken.
-- ARGV[1] owner id, ARGV[2] writer wake prefix
-- Returns holds left (>= 0), -1 when the owner holds no valid read lock, -2 wrong type.
local now = now_ms()
local score = redis.pcall('ZSCORE', KEYS[3], ARGV[1])
if type(score) == 'table' and score.err then
  return -2
end
if not score or tonumber(score) <= now then
  purge_readers(KEYS[3], KEYS[4], now)
  return -1
end
local holds = redis.call('HINCRBY', KEYS[4], ARGV[1] .. ':n', -1)
if holds > 0 then
  return holds
end
redis.call('ZREM', KEYS[3], ARGV[1])
forget_reader(KEYS[4], ARGV[1])
purge_readers(KEYS[3], KEYS[4], now)
if redis.call('ZCARD', KEYS[3]) == 0 then
  queue_purge(KEYS[5], KEYS[6], now)
  wake(ARGV[2], queue_head(KEYS[5]))
end
return 0
