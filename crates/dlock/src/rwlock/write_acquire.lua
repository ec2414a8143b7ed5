-- Grants the write lock when there is no writer and no live reader, in writer-arrival
-- order. A queued writer blocks new readers (no writer starvation); its place in the
-- queue is leased, so a crashed writer stops blocking them after its waiter lease.
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] waiter lease ms, ARGV[4] writer wake prefix,
-- ARGV[5] '1' to take (or refresh) a place in the writer queue when not granted, '0' for
-- a single attempt that leaves no trace
-- Returns {1, fence}          granted (a resend by the holder restarts the lease)
--         {0, ms, 0}          first writer in line; ms until the blocking lease ends
--         {0, -3, rank}       behind other writers
local state = rw_state(KEYS[1])
local current = false
if state == 'write' then
  current = redis.call('GET', KEYS[1])
  if current == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, last_fence(KEYS[2])}
  end
end
local now = now_ms()
local readers, soonest = false, nil
if state == 'read' then
  readers, soonest = purge_reads(KEYS[1], now)
end
queue_purge(KEYS[3], KEYS[4], now)
if not current and not readers and queue_rank(KEYS[3], ARGV[1]) == 0 then
  return grant_in_line(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[1], ARGV[2])
end
local rank = queue_place(KEYS[3], KEYS[4], ARGV[1], now, ARGV[5], ARGV[3])
if rank == 0 then
  if current then
    return {0, redis.call('PTTL', KEYS[1]), 0}
  end
  -- Readers hold: the last one to leave wakes us; otherwise the soonest lease to end.
  if soonest then
    return {0, math.max(soonest - now, 0), 0}
  end
end
return {0, -3, rank}
