-- Grants the write lock when there is no writer and no live reader, in writer-arrival
-- order. A queued writer blocks new readers (no writer starvation); its place in the
-- queue is leased, so a crashed writer stops blocking them after its waiter lease.
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] waiter lease ms, ARGV[4] writer wake prefix,
-- ARGV[5] '1' to take (or refresh) a place in the writer queue when not granted, '0' for
-- a single attempt that leaves no trace
-- Returns {1, fence} | {0, ms, 0} first writer in line, ms until the blocking lease ends |
--         {0, -3, rank} | {-1, n} wrong type at KEYS[n]
local current = writer_of(KEYS[1])
if current == nil then
  return {-1, 1}
end
if current == ARGV[1] then
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
local now = now_ms()
if redis.call('TYPE', KEYS[3]).ok ~= 'zset' and redis.call('EXISTS', KEYS[3]) == 1 then
  return {-1, 3}
end
purge_readers(KEYS[3], KEYS[4], now)
queue_purge(KEYS[5], KEYS[6], now)
local readers = redis.call('ZCARD', KEYS[3])
if not current and readers == 0 and queue_rank(KEYS[5], ARGV[1]) == 0 then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    return {-1, 2}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  queue_leave(KEYS[5], KEYS[6], ARGV[1])
  wake(ARGV[4], queue_head(KEYS[5]))
  return {1, fence}
end
local rank = queue_rank(KEYS[5], ARGV[1])
if ARGV[5] == '1' then
  rank = queue_join(KEYS[5], KEYS[6], ARGV[1], now, tonumber(ARGV[3]))
end
if rank == 0 then
  if current then
    return {0, redis.call('PTTL', KEYS[1]), 0}
  end
  -- Readers hold: the last one to leave wakes us; otherwise the soonest lease to end.
  local soonest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if soonest[2] then
    return {0, math.max(tonumber(soonest[2]) - now, 0), 0}
  end
end
return {0, -3, rank}
