-- Removes a waiter that stopped waiting (cancelled, timed out) from a queue.
-- KEYS[1] queue, KEYS[2] leases; ARGV[1] waiter token, ARGV[2] wake
-- channel prefix, ARGV[3] (optional) channel to announce an emptied queue on (readers of a
-- read-write lock wait while writers queue)
-- If it was first in line, the next waiter is woken to take its place. Returns 1 when the
-- waiter was queued, 0 otherwise.
local was_head = queue_head(KEYS[1]) == ARGV[1]
local queued = redis.call('ZSCORE', KEYS[1], ARGV[1])
queue_leave(KEYS[1], KEYS[2], ARGV[1])
if not queued then
  return 0
end
if was_head then
  wake(ARGV[2], queue_head(KEYS[1]))
end
if ARGV[3] and redis.call('ZCARD', KEYS[1]) == 0 then
  notify(ARGV[3], 'all')
end
return 1
