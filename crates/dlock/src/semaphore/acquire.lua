-- Takes one of N permits. Every permit has its own token, lease and fencing token.
-- KEYS[1] permits: sorted set, member = permit token, score = end of its lease (server ms)
-- KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] waiter leases
-- KEYS[5] permit fences: hash, permit token -> its fencing token
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] N, ARGV[4] waiter lease ms, ARGV[5] wake prefix,
-- ARGV[6] '1' to take (or refresh) a place in the queue when not granted, '0' for a single
-- attempt that leaves no trace
-- Returns {1, fence}        granted (also for a resend by the holder)
--         {0, ms, 0}        first in line; the soonest permit lease ends in ms
--         {0, -3, rank}     behind others (queued: woken when first in line)
--         {-1, n}           KEYS[n] holds a value that is not ours to interpret
local now = now_ms()
local expired = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
if expired.err then
  return {-1, 1}
end
-- Reclaim permits whose holders stopped renewing.
for _, permit in ipairs(expired) do
  redis.call('HDEL', KEYS[5], permit)
end
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
end
local lease = tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', fmt(now + lease), ARGV[1])
  return {1, tonumber(redis.call('HGET', KEYS[5], ARGV[1])) or 0}
end
queue_purge(KEYS[3], KEYS[4], now)
local free = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1])
if queue_rank(KEYS[3], ARGV[1]) < free then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    return {-1, 2}
  end
  redis.call('ZADD', KEYS[1], fmt(now + lease), ARGV[1])
  redis.call('HSET', KEYS[5], ARGV[1], fence)
  if redis.call('PTTL', KEYS[1]) < lease then
    redis.call('PEXPIRE', KEYS[1], lease)
  end
  queue_leave(KEYS[3], KEYS[4], ARGV[1])
  if free > 1 then
    -- Another permit is still free: the next in line may take it.
    wake(ARGV[5], queue_head(KEYS[3]))
  end
  return {1, fence}
end
local rank = queue_rank(KEYS[3], ARGV[1])
if ARGV[6] == '1' then
  rank = queue_join(KEYS[3], KEYS[4], ARGV[1], now, tonumber(ARGV[4]))
end
if rank == 0 then
  local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if soonest[2] then
    return {0, math.max(tonumber(soonest[2]) - now, 0), 0}
  end
end
return {0, -3, rank}
