-- Grants the fair mutex strictly in arrival order.
-- KEYS[1] lock key (string holding the owner's token, PX expiry: the Mutex format)
-- KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] waiter leases
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] waiter lease ms, ARGV[4] wake channel prefix,
-- ARGV[5] '1' to take (or refresh) a place in the queue when not granted, '0' for a single
-- attempt that leaves no trace
-- Returns {1, fence}           granted (a resend by the holder restarts the lease)
--         {0, pttl, 0}         first in line; the holder's lease ends in pttl ms (-1: never)
--         {0, -3, rank}        behind others (queued: woken when first in line)
local current = token_at(KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, last_fence(KEYS[2])}
end
local now = now_ms()
if queue_purge(KEYS[3], KEYS[4], now) > 0 and not current then
  -- Crashed waiters were ahead: make sure the new head knows the lock is free.
  local head = queue_head(KEYS[3])
  if head ~= ARGV[1] then
    wake(ARGV[4], head)
  end
end
if not current and queue_rank(KEYS[3], ARGV[1]) == 0 then
  return grant_in_line(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[4], ARGV[1], ARGV[2])
end
local rank = queue_place(KEYS[3], KEYS[4], ARGV[1], now, ARGV[5], ARGV[3])
if rank == 0 and current then
  return {0, redis.call('PTTL', KEYS[1]), 0}
end
return {0, -3, rank}
